//! Aggregate holds: the port and its DynamoDB adapter.
//!
//! With `HOLD_FAILED_AGGREGATES`, the stream relay does not block its stream shard behind an
//! aggregate whose event failed: it *holds* the aggregate (a hold item `HOLD#{aggregate}` in the
//! outbox table) and leaves that aggregate's events to the poller. While the hold exists, the
//! stream relay publishes none of the aggregate's events; the poller publishes them in order after
//! its grace period and then *releases* the hold. A hold is stored, unlike an aggregate *held back*
//! within one pass or invocation after a failure (`PublishOutcome::HeldBack`), which lasts only as
//! long as that pass.
//!
//! Each hold is also in the outbox index under its own partition ([`schema::HOLD_PARTITION`]), so
//! the poller lists every hold with one query.

use crate::permissions::{Call, Target};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use chrono::Utc;
use outbox_shared::SdkFailure;
use outbox_shared::schema::{self, attr};
use outbox_shared::time::format_timestamp;

use crate::status_store::ttl_after;

/// An aggregate the stream relay left to the poller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The aggregate (`AggregateId`, or `PK` without one).
    pub ordering_key: String,
    /// The `GSI1PK` of the held event: where its aggregate's pending events are.
    pub partition: String,
    /// When the hold was set; it is released only if unchanged.
    pub held_since: String,
}

/// Port: where the relays keep aggregate holds.
pub trait HoldStore: Send + Sync {
    /// Holds the aggregate `ordering_key`: until the poller has published its pending events
    /// (under `partition`, the held event's `GSI1PK`) and released the hold, the stream relay
    /// publishes none of its events. Holding an aggregate again renews its hold.
    fn hold(
        &self,
        ordering_key: &str,
        partition: &str,
    ) -> impl Future<Output = Result<(), SdkFailure>> + Send;

    /// The aggregates among `ordering_keys` that are held (a strongly consistent read).
    fn held(
        &self,
        ordering_keys: &[String],
    ) -> impl Future<Output = Result<HashSet<String>, SdkFailure>> + Send;

    /// Every hold.
    fn list(&self) -> impl Future<Output = Result<Vec<Hold>, SdkFailure>> + Send;

    /// Deletes `hold` if it was not set again since it was read; whether it was deleted.
    fn release(&self, hold: &Hold) -> impl Future<Output = Result<bool, SdkFailure>> + Send;
}

/// Keys one `BatchGetItem` may ask for.
const BATCH_GET_MAX_KEYS: usize = 100;
/// `BatchGetItem` rounds for unprocessed keys before giving up.
const BATCH_GET_MAX_ROUNDS: u32 = 5;

/// The calls that hold aggregates and read their holds (the stream relay's hold mode):
/// [`DynamoHoldStore::hold`] and [`DynamoHoldStore::held`], on hold items only.
pub const HOLD_CALLS: &[Call] = &[
    Call::new("dynamodb:PutItem", Target::HoldItems),
    Call::new("dynamodb:BatchGetItem", Target::HoldItems),
];

/// The calls that list and release holds (the poller): [`DynamoHoldStore::list`] (a `Query` of the
/// index's hold partition) and [`DynamoHoldStore::release`].
pub const RELEASE_CALLS: &[Call] = &[
    Call::new("dynamodb:Query", Target::OutboxIndex),
    Call::new("dynamodb:DeleteItem", Target::HoldItems),
];

/// The DynamoDB adapter: hold items in the outbox table.
#[derive(Debug, Clone)]
pub struct DynamoHoldStore {
    client: Client,
    table_name: String,
    /// The outbox index, which [`HoldStore::list`] queries.
    index_name: String,
    /// A hold no poller ever released (none ran) lapses this long after it was set.
    retention: Duration,
}

impl DynamoHoldStore {
    /// Holds in `table_name`, listed through the default outbox index, lapsing `retention` after
    /// they were set.
    pub fn new(client: Client, table_name: impl Into<String>, retention: Duration) -> Self {
        Self {
            client,
            table_name: table_name.into(),
            index_name: schema::DEFAULT_INDEX_NAME.to_owned(),
            retention,
        }
    }

    /// Lists holds through `index_name` (the poller's `--index-name`); only [`HoldStore::list`]
    /// reads the index.
    #[must_use]
    pub fn with_index_name(mut self, index_name: impl Into<String>) -> Self {
        self.index_name = index_name.into();
        self
    }

    /// The key of the hold item of `ordering_key`.
    fn key(ordering_key: &str) -> HashMap<String, AttributeValue> {
        HashMap::from([
            (
                attr::PK.to_owned(),
                AttributeValue::S(schema::hold_pk(ordering_key)),
            ),
            (
                attr::SK.to_owned(),
                AttributeValue::S(schema::HOLD_SK.to_owned()),
            ),
        ])
    }
}

impl HoldStore for DynamoHoldStore {
    async fn hold(&self, ordering_key: &str, partition: &str) -> Result<(), SdkFailure> {
        let now = Utc::now();
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let mut item = Self::key(ordering_key);
        item.extend([
            (
                attr::ENTITY_TYPE.to_owned(),
                s(schema::entity::AGGREGATE_HOLD),
            ),
            (attr::ORDERING_KEY.to_owned(), s(ordering_key)),
            (attr::HELD_PARTITION.to_owned(), s(partition)),
            (attr::HELD_SINCE.to_owned(), s(&format_timestamp(now))),
            (attr::GSI1PK.to_owned(), s(schema::HOLD_PARTITION)),
            (attr::GSI1SK.to_owned(), s(&schema::hold_pk(ordering_key))),
            (
                attr::TTL.to_owned(),
                AttributeValue::N(ttl_after(now, self.retention).to_string()),
            ),
        ]);
        self.client
            .put_item()
            .table_name(&self.table_name)
            .set_item(Some(item))
            .send()
            .await
            .map_err(|e| SdkFailure::new("PutItem", e))?;
        Ok(())
    }

    async fn held(&self, ordering_keys: &[String]) -> Result<HashSet<String>, SdkFailure> {
        let mut held = HashSet::new();
        for chunk in ordering_keys.chunks(BATCH_GET_MAX_KEYS) {
            let keys = chunk.iter().map(|k| Self::key(k)).collect();
            let mut request = Some(
                KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .consistent_read(true)
                    .build()
                    .expect("keys are set"),
            );
            let mut rounds = 0;
            while let Some(keys) = request.take() {
                rounds += 1;
                let output = self
                    .client
                    .batch_get_item()
                    .request_items(&self.table_name, keys)
                    .send()
                    .await
                    .map_err(|e| SdkFailure::new("BatchGetItem", e))?;
                for item in output
                    .responses
                    .as_ref()
                    .and_then(|r| r.get(&self.table_name))
                    .into_iter()
                    .flatten()
                {
                    if let Some(key) = item.get(attr::ORDERING_KEY).and_then(|v| v.as_s().ok()) {
                        held.insert(key.clone());
                    }
                }
                request = output
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.table_name))
                    .filter(|k| !k.keys().is_empty());
                if request.is_some() && rounds >= BATCH_GET_MAX_ROUNDS {
                    return Err(SdkFailure::incomplete(
                        "BatchGetItem",
                        "hold keys still unprocessed after retries",
                    ));
                }
            }
        }
        Ok(held)
    }

    async fn list(&self) -> Result<Vec<Hold>, SdkFailure> {
        let mut holds = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table_name)
                .index_name(&self.index_name)
                .key_condition_expression("#pk = :pk")
                .expression_attribute_names("#pk", attr::GSI1PK)
                .expression_attribute_values(
                    ":pk",
                    AttributeValue::S(schema::HOLD_PARTITION.to_owned()),
                )
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| SdkFailure::new("Query", e))?;
            for item in page.items() {
                let string = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
                if let (Some(ordering_key), Some(partition), Some(held_since)) = (
                    string(attr::ORDERING_KEY),
                    string(attr::HELD_PARTITION),
                    string(attr::HELD_SINCE),
                ) {
                    holds.push(Hold {
                        ordering_key,
                        partition,
                        held_since,
                    });
                }
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(holds);
            }
        }
    }

    async fn release(&self, hold: &Hold) -> Result<bool, SdkFailure> {
        let result = self
            .client
            .delete_item()
            .table_name(&self.table_name)
            .set_key(Some(Self::key(&hold.ordering_key)))
            .condition_expression("#since = :since")
            .expression_attribute_names("#since", attr::HELD_SINCE)
            .expression_attribute_values(":since", AttributeValue::S(hold.held_since.clone()))
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(ctx))
                if matches!(
                    ctx.err(),
                    DeleteItemError::ConditionalCheckFailedException(_)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(SdkFailure::new("DeleteItem", e)),
        }
    }
}
