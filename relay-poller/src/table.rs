//! Reads of single outbox items, for the operator commands.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use outbox_shared::schema::attr;
use outbox_shared::{ItemKey, SdkFailure};

/// An item's attributes, as DynamoDB takes them.
pub type Attributes = HashMap<String, AttributeValue>;

/// The item at `key` (a strongly consistent read), if there is one.
///
/// # Errors
/// When the read fails.
pub async fn get_item(
    client: &aws_sdk_dynamodb::Client,
    table_name: &str,
    key: &ItemKey,
) -> Result<Option<Attributes>, SdkFailure> {
    Ok(client
        .get_item()
        .table_name(table_name)
        .key(attr::PK, AttributeValue::S(key.pk.clone()))
        .key(attr::SK, AttributeValue::S(key.sk.clone()))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| SdkFailure::new("GetItem", e))?
        .item)
}
