//! Re-creating an outbox item that is gone (TTL deleted it, or someone did): one `PutItem` of the
//! whole item with the condition that no item has its key, so a second re-create of the same
//! event, or one of an item that came back meanwhile, writes nothing.
//!
//! The one conditional put for everyone who re-creates: the stream relay, for a poison event of a
//! TTL deletion (put back `DEAD_LETTERED` before its dead letter goes,
//! [`crate::status_store::dead_lettered_image`]); `redrive`, for a dead letter whose item is gone;
//! and the poller, for a TTL deletion in a stream batch the mapping discarded (both put back
//! `PENDING`, `relay_poller::recreate`).

use std::collections::HashMap;
use std::future::Future;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use outbox_shared::SdkFailure;
use outbox_shared::schema::attr;

use crate::permissions::{Call, Target};

/// An item's attributes, as the SDK writes them.
pub type Attributes = HashMap<String, AttributeValue>;

/// The call of [`DynamoGoneItems`]: the conditional put of a whole outbox item, returning nothing.
pub const CALLS: &[Call] = &[Call::new("dynamodb:PutItem", Target::RecreatedItems)];

/// The operation a re-create calls, as failures name it.
pub const PUT_ITEM: &str = "PutItem";

/// What a re-create did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recreated {
    /// The item is back.
    Recreated,
    /// An item with its key is there (re-created before, pending or published since): nothing
    /// was written.
    AlreadyThere,
}

/// Port: puts an item back only where none is.
pub trait GoneItems: Send + Sync {
    /// Puts `item` (a whole item) with the condition that no item has its key; an error only when
    /// the call fails (a failed condition is [`Recreated::AlreadyThere`]).
    fn recreate(
        &self,
        item: Attributes,
    ) -> impl Future<Output = Result<Recreated, SdkFailure>> + Send;
}

/// A borrowed store is one (a test keeps its fake to inspect it).
impl<T: GoneItems> GoneItems for &T {
    fn recreate(
        &self,
        item: Attributes,
    ) -> impl Future<Output = Result<Recreated, SdkFailure>> + Send {
        (**self).recreate(item)
    }
}

/// [`GoneItems`] on the outbox table.
#[derive(Debug, Clone)]
pub struct DynamoGoneItems {
    dynamodb: aws_sdk_dynamodb::Client,
    table_name: String,
}

impl DynamoGoneItems {
    pub fn new(dynamodb: aws_sdk_dynamodb::Client, table_name: impl Into<String>) -> Self {
        Self {
            dynamodb,
            table_name: table_name.into(),
        }
    }
}

impl GoneItems for DynamoGoneItems {
    async fn recreate(&self, item: Attributes) -> Result<Recreated, SdkFailure> {
        let result = self
            .dynamodb
            .put_item()
            .table_name(&self.table_name)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", attr::PK)
            .send()
            .await;
        match result {
            Ok(_) => Ok(Recreated::Recreated),
            Err(SdkError::ServiceError(ctx))
                if matches!(ctx.err(), PutItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(Recreated::AlreadyThere)
            }
            Err(e) => Err(SdkFailure::new(PUT_ITEM, e)),
        }
    }
}
