//! Aggregate holds: the stream relay's port ([`AggregateHolds`]), the poller's
//! ([`HoldRelease`]), and their DynamoDB adapter.
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
//!
//! The hold records every event left to the poller under it (`LeftEvents`, their item keys):
//! the stream relay leaves an event only by recording it on a hold that still exists
//! ([`AggregateHolds::leave`], a conditional write, made even when it records nothing: a TTL
//! deletion's event is left to no one, but only while its aggregate is still held), and the
//! poller releases a hold only if nothing was recorded since it read it
//! ([`HoldRelease::release`], a condition on the record's size) and none of what was recorded is
//! still pending ([`HoldRelease::has_pending`]). The index the poller lists holds and pending
//! events through is eventually consistent: an event the stream relay left a moment ago may not
//! be in it yet, and an event under another partition (a reshard) is not where the hold points;
//! the record is read and conditioned on the table itself, so a release cannot miss either.
//!
//! A hold's `ttl` only cleans up a hold no poller ever released: the poller pushes it out while
//! it keeps a hold ([`HoldRelease::extend`]), and until DynamoDB's TTL actually deletes an expired
//! hold (lazily, up to days later) the relays read it as live, as DynamoDB returns it.

use crate::permissions::{Call, Target};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use outbox_shared::schema::{self, attr};
use outbox_shared::time::format_timestamp;
use outbox_shared::{ItemKey, SdkFailure};

use aws_sdk_dynamodb::types::Select;

use crate::batch_get::consistent_items;
use crate::status_store::{ttl_after, update_applied};

/// An aggregate the stream relay left to the poller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The aggregate (`AggregateId`, or `PK` without one).
    pub ordering_key: String,
    /// The `GSI1PK` of the held event: where its aggregate's pending events are.
    pub partition: String,
    /// When the hold was set; it is released only if unchanged.
    pub held_since: String,
    /// The events left to the poller under this hold, as read; it is released only if nothing
    /// was recorded since.
    pub left: Vec<ItemKey>,
    /// The hold item's `ttl` (epoch seconds), if it has one.
    pub ttl: Option<i64>,
}

/// Port: the stream relay's side of the holds (hold mode): which aggregates are held, leaving
/// events under a hold, holding an aggregate whose event failed.
pub trait AggregateHolds: Send + Sync {
    /// The aggregates among `ordering_keys` that are held (a strongly consistent read).
    fn held(
        &self,
        ordering_keys: &[String],
    ) -> impl Future<Output = Result<HashSet<String>, SdkFailure>> + Send;

    /// Records `left` on the hold of `ordering_key` if it still exists: whether it did (the
    /// events are the poller's now). `false`: the hold was released meanwhile, so the poller has
    /// published everything recorded on it and these events are the stream relay's to publish.
    /// With nothing to record, it still says whether the hold exists.
    fn leave(
        &self,
        ordering_key: &str,
        left: &[ItemKey],
    ) -> impl Future<Output = Result<bool, SdkFailure>> + Send;

    /// Holds the aggregate `ordering_key` and records `left` (the keys of the events this relay
    /// leaves to the poller) on it: until the poller has published its pending events (under
    /// `partition`, the held event's `GSI1PK`, and every event recorded) and released the hold,
    /// the stream relay publishes none of its events. Holding an aggregate again renews its hold
    /// and adds to its record.
    fn hold(
        &self,
        ordering_key: &str,
        partition: &str,
        left: &[ItemKey],
    ) -> impl Future<Output = Result<(), SdkFailure>> + Send;
}

/// A borrowed hold store is one (a test keeps its fake to inspect it).
impl<H: AggregateHolds> AggregateHolds for &H {
    fn held(
        &self,
        ordering_keys: &[String],
    ) -> impl Future<Output = Result<HashSet<String>, SdkFailure>> + Send {
        (**self).held(ordering_keys)
    }

    fn leave(
        &self,
        ordering_key: &str,
        left: &[ItemKey],
    ) -> impl Future<Output = Result<bool, SdkFailure>> + Send {
        (**self).leave(ordering_key, left)
    }

    fn hold(
        &self,
        ordering_key: &str,
        partition: &str,
        left: &[ItemKey],
    ) -> impl Future<Output = Result<(), SdkFailure>> + Send {
        (**self).hold(ordering_key, partition, left)
    }
}

/// Port: the poller's side of the holds: listing them, whether what one covers is still
/// pending, releasing it, keeping it.
pub trait HoldRelease: Send + Sync {
    /// Every hold.
    fn list(&self) -> impl Future<Output = Result<Vec<Hold>, SdkFailure>> + Send;

    /// Whether `hold`'s aggregate still has a pending event: one of the events recorded as left
    /// under it (read from the table, strongly consistent: the index may not show an event left
    /// a moment ago, and a reshard puts newer events under another partition), or one under its
    /// partition in the index (a hold set before holds recorded what they cover).
    fn has_pending(&self, hold: &Hold) -> impl Future<Output = Result<bool, SdkFailure>> + Send;

    /// Deletes `hold` if it was not set again and nothing was left under it since it was read;
    /// whether it was deleted.
    fn release(&self, hold: &Hold) -> impl Future<Output = Result<bool, SdkFailure>> + Send;

    /// Pushes out the `ttl` of `hold` (the poller keeps it: what it covers is not all published
    /// yet), if it still exists; whether it did.
    fn extend(&self, hold: &Hold) -> impl Future<Output = Result<bool, SdkFailure>> + Send;
}

/// A borrowed hold store is one (a test keeps its fake to inspect it).
impl<H: HoldRelease> HoldRelease for &H {
    fn list(&self) -> impl Future<Output = Result<Vec<Hold>, SdkFailure>> + Send {
        (**self).list()
    }

    fn has_pending(&self, hold: &Hold) -> impl Future<Output = Result<bool, SdkFailure>> + Send {
        (**self).has_pending(hold)
    }

    fn release(&self, hold: &Hold) -> impl Future<Output = Result<bool, SdkFailure>> + Send {
        (**self).release(hold)
    }

    fn extend(&self, hold: &Hold) -> impl Future<Output = Result<bool, SdkFailure>> + Send {
        (**self).extend(hold)
    }
}

/// An event's key as an element of a hold's `LeftEvents`: the JSON array `[PK, SK]` (keys are any
/// strings, so no separator would do).
pub fn left_element(key: &ItemKey) -> String {
    serde_json::to_string(&[&key.pk, &key.sk]).expect("two strings serialize")
}

/// An element of a hold's `LeftEvents` read back as a key; `None` if malformed.
pub fn parse_left_element(element: &str) -> Option<ItemKey> {
    let [pk, sk]: [String; 2] = serde_json::from_str(element).ok()?;
    Some(ItemKey { pk, sk })
}

/// The calls of [`AggregateHolds`] (the stream relay's hold mode): [`DynamoHoldStore::hold`] and
/// [`DynamoHoldStore::leave`] (`UpdateItem`s) and [`DynamoHoldStore::held`], on hold items only.
pub const HOLD_CALLS: &[Call] = &[
    Call::new("dynamodb:UpdateItem", Target::HoldItems),
    Call::new("dynamodb:BatchGetItem", Target::HoldItems),
];

/// The calls of [`HoldRelease`] (the poller): [`DynamoHoldStore::list`] (a `Query` of the index's
/// hold partition), [`DynamoHoldStore::has_pending`] (the events recorded on the hold, read from
/// the table with a `BatchGetItem`, then a `Query` of the hold's partition),
/// [`DynamoHoldStore::extend`] (an `UpdateItem` of the hold's `ttl`) and
/// [`DynamoHoldStore::release`].
pub const RELEASE_CALLS: &[Call] = &[
    Call::new("dynamodb:Query", Target::OutboxIndex),
    Call::new("dynamodb:BatchGetItem", Target::PendingCheck),
    Call::new("dynamodb:UpdateItem", Target::HoldItems),
    Call::new("dynamodb:DeleteItem", Target::HoldItems),
];

/// The DynamoDB adapter: hold items in the outbox table.
#[derive(Debug, Clone)]
pub struct DynamoHoldStore {
    client: Client,
    table_name: String,
    /// The outbox index, which [`HoldRelease`] reads (the holds' partition and each hold's).
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

    /// Lists holds and reads their partitions through `index_name` (the poller's
    /// `--index-name`); only [`HoldRelease`] reads the index.
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

impl AggregateHolds for DynamoHoldStore {
    async fn held(&self, ordering_keys: &[String]) -> Result<HashSet<String>, SdkFailure> {
        let keys = ordering_keys.iter().map(|k| Self::key(k)).collect();
        let items = consistent_items(
            &self.client,
            &self.table_name,
            keys,
            &[attr::ORDERING_KEY],
            "hold keys still unprocessed after retries",
        )
        .await?;
        Ok(items
            .iter()
            .filter_map(|item| item.get(attr::ORDERING_KEY)?.as_s().ok().cloned())
            .collect())
    }

    async fn leave(&self, ordering_key: &str, left: &[ItemKey]) -> Result<bool, SdkFailure> {
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table_name)
            .set_key(Some(Self::key(ordering_key)))
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#pk", attr::PK);
        // With nothing to record, the same conditional write changes nothing and says whether the
        // hold still exists: a hold released since it was read must not take the events.
        if !left.is_empty() {
            request = request
                .update_expression("ADD #left :left")
                .expression_attribute_names("#left", attr::LEFT_EVENTS)
                .expression_attribute_values(":left", left_set(left));
        }
        let result = request.send().await;
        // `false`: the condition failed, the hold is gone
        update_applied(result)
    }

    async fn hold(
        &self,
        ordering_key: &str,
        partition: &str,
        left: &[ItemKey],
    ) -> Result<(), SdkFailure> {
        let now = Utc::now();
        let s = |v: &str| AttributeValue::S(v.to_owned());
        // An update, not a put: a hold set again keeps what was left under it before, which
        // the poller must still see published before it releases the hold.
        let mut update = "SET #entity = :entity, #okey = :okey, #partition = :partition, \
                          #since = :since, #gsi1pk = :gsi1pk, #gsi1sk = :gsi1sk, #ttl = :ttl"
            .to_owned();
        let mut request = self
            .client
            .update_item()
            .table_name(&self.table_name)
            .set_key(Some(Self::key(ordering_key)))
            .expression_attribute_names("#entity", attr::ENTITY_TYPE)
            .expression_attribute_names("#okey", attr::ORDERING_KEY)
            .expression_attribute_names("#partition", attr::HELD_PARTITION)
            .expression_attribute_names("#since", attr::HELD_SINCE)
            .expression_attribute_names("#gsi1pk", attr::GSI1PK)
            .expression_attribute_names("#gsi1sk", attr::GSI1SK)
            .expression_attribute_names("#ttl", attr::TTL)
            .expression_attribute_values(":entity", s(schema::entity::AGGREGATE_HOLD))
            .expression_attribute_values(":okey", s(ordering_key))
            .expression_attribute_values(":partition", s(partition))
            .expression_attribute_values(":since", s(&format_timestamp(now)))
            .expression_attribute_values(":gsi1pk", s(schema::HOLD_PARTITION))
            .expression_attribute_values(":gsi1sk", s(&schema::hold_pk(ordering_key)))
            .expression_attribute_values(
                ":ttl",
                AttributeValue::N(ttl_after(now, self.retention).to_string()),
            );
        if !left.is_empty() {
            update.push_str(" ADD #left :left");
            request = request
                .expression_attribute_names("#left", attr::LEFT_EVENTS)
                .expression_attribute_values(":left", left_set(left));
        }
        request
            .update_expression(update)
            .send()
            .await
            .map_err(|e| SdkFailure::new("UpdateItem", e))?;
        Ok(())
    }
}

impl DynamoHoldStore {
    /// Whether an event recorded as left under `hold` is still pending on the table (a strongly
    /// consistent read: still in the index's partition, `GSI1PK` set).
    async fn any_left_pending(&self, hold: &Hold) -> Result<bool, SdkFailure> {
        let keys = hold
            .left
            .iter()
            .map(|key| {
                HashMap::from([
                    (attr::PK.to_owned(), AttributeValue::S(key.pk.clone())),
                    (attr::SK.to_owned(), AttributeValue::S(key.sk.clone())),
                ])
            })
            .collect();
        let items = consistent_items(
            &self.client,
            &self.table_name,
            keys,
            crate::permissions::PENDING_CHECK_ATTRIBUTES,
            "keys of events left under a hold still unprocessed after retries",
        )
        .await?;
        Ok(items.iter().any(|item| item.contains_key(attr::GSI1PK)))
    }
}

impl HoldRelease for DynamoHoldStore {
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
                    let left = item
                        .get(attr::LEFT_EVENTS)
                        .and_then(|v| v.as_ss().ok())
                        .into_iter()
                        .flatten()
                        .filter_map(|e| parse_left_element(e))
                        .collect();
                    let ttl = item
                        .get(attr::TTL)
                        .and_then(|v| v.as_n().ok())
                        .and_then(|n| n.parse().ok());
                    holds.push(Hold {
                        ordering_key,
                        partition,
                        held_since,
                        left,
                        ttl,
                    });
                }
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(holds);
            }
        }
    }

    async fn has_pending(&self, hold: &Hold) -> Result<bool, SdkFailure> {
        if self.any_left_pending(hold).await? {
            return Ok(true);
        }
        let mut start = None;
        loop {
            let page = self
                .client
                .query()
                .table_name(&self.table_name)
                .index_name(&self.index_name)
                .key_condition_expression("#pk = :pk")
                .filter_expression(
                    "#aggregate = :key OR (attribute_not_exists(#aggregate) AND #table_pk = :key)",
                )
                .expression_attribute_names("#pk", attr::GSI1PK)
                .expression_attribute_names("#aggregate", attr::AGGREGATE_ID)
                .expression_attribute_names("#table_pk", attr::PK)
                .expression_attribute_values(":pk", AttributeValue::S(hold.partition.clone()))
                .expression_attribute_values(":key", AttributeValue::S(hold.ordering_key.clone()))
                .select(Select::Count)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| SdkFailure::new("Query", e))?;
            if page.count() > 0 {
                return Ok(true);
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(false);
            }
        }
    }

    async fn release(&self, hold: &Hold) -> Result<bool, SdkFailure> {
        // Nothing left since the poller read the hold: the record only grows while the hold
        // exists, so an unchanged size is an unchanged record (an empty set is no attribute).
        let left = if hold.left.is_empty() {
            "attribute_not_exists(#left)"
        } else {
            "size(#left) = :left"
        };
        let mut request = self
            .client
            .delete_item()
            .table_name(&self.table_name)
            .set_key(Some(Self::key(&hold.ordering_key)))
            .condition_expression(format!("#since = :since AND {left}"))
            .expression_attribute_names("#since", attr::HELD_SINCE)
            .expression_attribute_names("#left", attr::LEFT_EVENTS)
            .expression_attribute_values(":since", AttributeValue::S(hold.held_since.clone()));
        if !hold.left.is_empty() {
            request = request.expression_attribute_values(
                ":left",
                AttributeValue::N(hold.left.len().to_string()),
            );
        }
        match request.send().await {
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

    async fn extend(&self, hold: &Hold) -> Result<bool, SdkFailure> {
        let ttl = ttl_after(Utc::now(), self.retention);
        let result = self
            .client
            .update_item()
            .table_name(&self.table_name)
            .set_key(Some(Self::key(&hold.ordering_key)))
            .update_expression("SET #ttl = :ttl")
            .condition_expression("attribute_exists(#pk)")
            .expression_attribute_names("#ttl", attr::TTL)
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_values(":ttl", AttributeValue::N(ttl.to_string()))
            .send()
            .await;
        // `false`: the condition failed, the hold is gone
        update_applied(result)
    }
}

/// `left` as a `LeftEvents` string set.
fn left_set(left: &[ItemKey]) -> AttributeValue {
    let mut elements: Vec<String> = left.iter().map(left_element).collect();
    elements.sort_unstable();
    elements.dedup();
    AttributeValue::Ss(elements)
}
