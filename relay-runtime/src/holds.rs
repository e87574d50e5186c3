//! Aggregate holds: the stream relay's port ([`AggregateHolds`]), the poller's
//! ([`HoldRelease`]), and their DynamoDB adapter.
//!
//! With `HOLD_FAILED_AGGREGATES`, the stream relay does not block its stream shard behind an
//! aggregate whose event failed: it *holds* the aggregate (a hold item `HOLD#{aggregate}` in the
//! outbox table) and leaves that aggregate's events to the poller. While the hold exists, the
//! stream relay publishes none of the aggregate's events; the poller publishes them in order after
//! its grace period and then *releases* the hold. A hold is stored, unlike an aggregate *held back*
//! within one pass or invocation after a failure (`Behind`), which lasts only as long as that pass.
//!
//! A hold's size does not grow with what it covers. It records the *last* event left under it
//! (`LastLeft`, the highest `GSI1SK`) and how many were left (`LeftCount`, a number only ever
//! added to), and it sits in the outbox index beside that event: under the hold partition of the
//! event's partition ([`schema::hold_partition`]), sorted by the event's `GSI1SK`. So the holds
//! spread over the index as the events do, and the poller that polls a partition meets each hold
//! once it has published past the hold's last event ([`HoldRelease::page`]): it releases the hold
//! then, in step with the backlog, unless its aggregate is held back in that pass (an earlier event
//! still pending) or the last event is still pending on the table (read strongly consistent,
//! [`HoldRelease::still_pending`], unless the poller marked it a moment ago). The poller publishes
//! an aggregate's events in `GSI1SK` order and holds back the rest of an aggregate after an event
//! not published, so once the last event left is out, every earlier one is.
//!
//! The stream relay leaves an event only by recording it on a hold that still exists
//! ([`AggregateHolds::leave`], a conditional write, made even when it records nothing: a TTL
//! deletion's event is left to no one, but only while its aggregate is still held), and the
//! poller releases a hold only if nothing was left since it read it ([`HoldRelease::release`], a
//! condition on `HeldSince` and `LeftCount`). The index the poller reads holds through is
//! eventually consistent: a hold read a moment after an event was left under it may show an
//! older record, whose release's condition then fails; and the last event's pending state is read
//! from the table itself.
//!
//! A hold's `ttl` only cleans up a hold no poller ever released: each event left pushes it out, so
//! does the poller while it keeps a hold ([`HoldRelease::extend`]), and until DynamoDB's TTL
//! actually deletes an expired hold (lazily, up to days later) the relays read it as live, as
//! DynamoDB returns it.
//!
//! Holds an earlier release wrote (every hold under one index partition,
//! [`schema::LEGACY_HOLD_PARTITION`], with every event left in a set that grew without bound)
//! are moved to this layout: by the stream relay when it next leaves an event under one, by the
//! poller's wiring otherwise ([`DynamoHoldStore::migrate_legacy`], a step of the adapter, not of
//! the port: only data in DynamoDB needs it).

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

use crate::batch_get::consistent_items;
use crate::permissions::{Call, Target};
use crate::status_store::{ttl_after, update_applied};

/// An event the stream relay leaves to the poller under its aggregate's hold: its item key, and
/// where the index holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftEvent {
    pub key: ItemKey,
    /// Its `GSI1PK`.
    pub partition: String,
    /// Its `GSI1SK`.
    pub sort_key: String,
}

/// An aggregate the stream relay left to the poller, as the poller reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    /// The aggregate (`AggregateId`, or `PK` without one).
    pub ordering_key: String,
    /// When the hold was set; it is released only if unchanged.
    pub held_since: String,
    /// The `GSI1SK` of the last event left under it: the poller may release it once it has
    /// published past it.
    pub sort_key: String,
    /// The key of the last event left under it; `None` for a hold migrated from an earlier
    /// release, which recorded no last event.
    pub last_left: Option<ItemKey>,
    /// How many events were left under it, as read; it is released only if unchanged.
    pub left_count: Option<u64>,
    /// The hold item's `ttl` (epoch seconds), if it has one.
    pub ttl: Option<i64>,
}

/// Where the next page of holds starts (the index's `LastEvaluatedKey`).
pub type HoldCursor = HashMap<String, AttributeValue>;

/// One page of the holds of a partition, in the order of their last events.
#[derive(Debug, Clone, Default)]
pub struct HoldPage {
    pub holds: Vec<Hold>,
    /// `None` when this was the last page.
    pub next: Option<HoldCursor>,
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
    /// published everything left under it and these events are the stream relay's to publish.
    /// With nothing to record, it still says whether the hold exists.
    fn leave(
        &self,
        ordering_key: &str,
        left: &[LeftEvent],
    ) -> impl Future<Output = Result<bool, SdkFailure>> + Send;

    /// Holds the aggregate `ordering_key` and records `left` (the events this relay leaves to
    /// the poller, at least one) on it: until the poller has published them and released the
    /// hold, the stream relay publishes none of its events. Holding an aggregate again records
    /// more on the same hold.
    fn hold(
        &self,
        ordering_key: &str,
        left: &[LeftEvent],
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
        left: &[LeftEvent],
    ) -> impl Future<Output = Result<bool, SdkFailure>> + Send {
        (**self).leave(ordering_key, left)
    }

    fn hold(
        &self,
        ordering_key: &str,
        left: &[LeftEvent],
    ) -> impl Future<Output = Result<(), SdkFailure>> + Send {
        (**self).hold(ordering_key, left)
    }
}

/// Port: the poller's side of the holds: the holds a pass has published past, whether their
/// last events are still pending, releasing one, keeping one.
pub trait HoldRelease: Send + Sync {
    /// Up to `limit` holds whose last event is under `partition` (a `GSI1PK`) and sorts below
    /// `before` (the pass's cutoff), in that order, starting after `start`.
    fn page(
        &self,
        partition: &str,
        before: &str,
        limit: i32,
        start: Option<HoldCursor>,
    ) -> impl Future<Output = Result<HoldPage, SdkFailure>> + Send;

    /// Those of `keys` whose items are still pending (a strongly consistent read of the table:
    /// the index may still show an item marked a moment ago).
    fn still_pending(
        &self,
        keys: &[ItemKey],
    ) -> impl Future<Output = Result<HashSet<ItemKey>, SdkFailure>> + Send;

    /// Deletes `hold` if it was not set again and nothing was left under it since it was read;
    /// whether it was deleted.
    fn release(&self, hold: &Hold) -> impl Future<Output = Result<bool, SdkFailure>> + Send;

    /// Pushes out the `ttl` of `hold` (the poller keeps it: what it covers is not all published
    /// yet), if it still exists; whether it did.
    fn extend(&self, hold: &Hold) -> impl Future<Output = Result<bool, SdkFailure>> + Send;
}

/// A borrowed hold store is one (a test keeps its fake to inspect it).
impl<H: HoldRelease> HoldRelease for &H {
    fn page(
        &self,
        partition: &str,
        before: &str,
        limit: i32,
        start: Option<HoldCursor>,
    ) -> impl Future<Output = Result<HoldPage, SdkFailure>> + Send {
        (**self).page(partition, before, limit, start)
    }

    fn still_pending(
        &self,
        keys: &[ItemKey],
    ) -> impl Future<Output = Result<HashSet<ItemKey>, SdkFailure>> + Send {
        (**self).still_pending(keys)
    }

    fn release(&self, hold: &Hold) -> impl Future<Output = Result<bool, SdkFailure>> + Send {
        (**self).release(hold)
    }

    fn extend(&self, hold: &Hold) -> impl Future<Output = Result<bool, SdkFailure>> + Send {
        (**self).extend(hold)
    }
}

/// The last of `left` in the index's order (the highest `GSI1SK`): the event a hold records.
pub fn last_left(left: &[LeftEvent]) -> Option<&LeftEvent> {
    left.iter().max_by(|a, b| a.sort_key.cmp(&b.sort_key))
}

/// An event's key as a hold's `LastLeft`: the JSON array `[PK, SK]` (keys are any strings, so no
/// separator would do).
pub fn left_element(key: &ItemKey) -> String {
    serde_json::to_string(&[&key.pk, &key.sk]).expect("two strings serialize")
}

/// A `LastLeft` read back as a key; `None` if malformed.
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

/// The calls of [`HoldRelease`] (the poller) and of [`DynamoHoldStore::migrate_legacy`] (the
/// poller's wiring): [`DynamoHoldStore::page`] and the migration's list (`Query`s of the index's
/// hold partitions), [`DynamoHoldStore::still_pending`] (a `BatchGetItem` of the table, `PK`, `SK`
/// and `GSI1PK` only), [`DynamoHoldStore::extend`] and the migration (`UpdateItem`s of holds) and
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
    /// The outbox index, which [`HoldRelease`] reads the holds through.
    index_name: String,
    /// A hold no poller ever released (none ran) lapses this long after its last event was left.
    retention: Duration,
}

impl DynamoHoldStore {
    /// Holds in `table_name`, read through the default outbox index, lapsing `retention` after
    /// their last event was left.
    pub fn new(client: Client, table_name: impl Into<String>, retention: Duration) -> Self {
        Self {
            client,
            table_name: table_name.into(),
            index_name: schema::DEFAULT_INDEX_NAME.to_owned(),
            retention,
        }
    }

    /// Reads the holds through `index_name` (the poller's `--index-name`); only [`HoldRelease`]
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

    /// Records `left` on the hold of `ordering_key`, creating the hold when `create` (else only
    /// if it exists): whether it did. One write when the last of `left` is the hold's latest (the
    /// hold then follows it in the index), two when the hold already follows a later event (the
    /// second only counts), or when the hold is gone (`leave`: the second says so).
    async fn record(
        &self,
        ordering_key: &str,
        left: &[LeftEvent],
        create: bool,
    ) -> Result<bool, SdkFailure> {
        let now = Utc::now();
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let ttl = AttributeValue::N(ttl_after(now, self.retention).to_string());
        let count = AttributeValue::N(left.len().to_string());
        let Some(last) = last_left(left) else {
            // Nothing to record: the same conditional write changes nothing and says whether the
            // hold still exists (a hold released since it was read must not take the events).
            let result = self
                .client
                .update_item()
                .table_name(&self.table_name)
                .set_key(Some(Self::key(ordering_key)))
                .condition_expression("attribute_exists(#pk)")
                .expression_attribute_names("#pk", attr::PK)
                .send()
                .await;
            return update_applied(result);
        };
        // What a hold that did not exist gets, in either write.
        let creating = |request: aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder| {
            request
                .expression_attribute_names("#entity", attr::ENTITY_TYPE)
                .expression_attribute_names("#okey", attr::ORDERING_KEY)
                .expression_attribute_names("#since", attr::HELD_SINCE)
                .expression_attribute_values(":entity", s(schema::entity::AGGREGATE_HOLD))
                .expression_attribute_values(":okey", s(ordering_key))
                .expression_attribute_values(":since", s(&format_timestamp(now)))
        };
        const CREATE: &str =
            ", #entity = :entity, #okey = :okey, #since = if_not_exists(#since, :since)";
        let (create_set, exists) = if create {
            (CREATE, "")
        } else {
            ("", "attribute_exists(#pk) AND ")
        };

        // The hold follows its last event: the index partition and sort key of the event, so the
        // poller of that partition meets it once it has published past it. An earlier release's
        // record of every event is dropped with its old partition.
        let mut follow = self
            .client
            .update_item()
            .table_name(&self.table_name)
            .set_key(Some(Self::key(ordering_key)))
            .update_expression(format!(
                "SET #gsi1pk = :gsi1pk, #gsi1sk = :sk, #last = :last, #ttl = :ttl{create_set} \
                 ADD #count :count REMOVE #legacy_left, #legacy_partition"
            ))
            .condition_expression(format!(
                "{exists}(#gsi1pk = :legacy OR attribute_not_exists(#gsi1sk) OR #gsi1sk < :sk)"
            ))
            .expression_attribute_names("#gsi1pk", attr::GSI1PK)
            .expression_attribute_names("#gsi1sk", attr::GSI1SK)
            .expression_attribute_names("#last", attr::LAST_LEFT)
            .expression_attribute_names("#ttl", attr::TTL)
            .expression_attribute_names("#count", attr::LEFT_COUNT)
            .expression_attribute_names("#legacy_left", attr::LEFT_EVENTS)
            .expression_attribute_names("#legacy_partition", attr::HELD_PARTITION)
            .expression_attribute_values(":gsi1pk", s(&schema::hold_partition(&last.partition)))
            .expression_attribute_values(":sk", s(&last.sort_key))
            .expression_attribute_values(":last", s(&left_element(&last.key)))
            .expression_attribute_values(":ttl", ttl.clone())
            .expression_attribute_values(":count", count.clone())
            .expression_attribute_values(":legacy", s(schema::LEGACY_HOLD_PARTITION));
        if create {
            follow = creating(follow);
        } else {
            follow = follow.expression_attribute_names("#pk", attr::PK);
        }
        if update_applied(follow.send().await)? {
            return Ok(true);
        }

        // The hold already follows a later event (or, for a leave, is gone): count what was left.
        let mut count_only = self
            .client
            .update_item()
            .table_name(&self.table_name)
            .set_key(Some(Self::key(ordering_key)))
            .update_expression(format!("SET #ttl = :ttl{create_set} ADD #count :count"))
            .expression_attribute_names("#ttl", attr::TTL)
            .expression_attribute_names("#count", attr::LEFT_COUNT)
            .expression_attribute_values(":ttl", ttl)
            .expression_attribute_values(":count", count);
        if create {
            count_only = creating(count_only);
        } else {
            count_only = count_only
                .condition_expression("attribute_exists(#pk)")
                .expression_attribute_names("#pk", attr::PK);
        }
        update_applied(count_only.send().await)
    }

    /// A query of the index partition `partition` from `start`.
    fn partition_query(
        &self,
        partition: &str,
        start: Option<HoldCursor>,
    ) -> aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder {
        self.client
            .query()
            .table_name(&self.table_name)
            .index_name(&self.index_name)
            .expression_attribute_names("#pk", attr::GSI1PK)
            .expression_attribute_values(":pk", AttributeValue::S(partition.to_owned()))
            .scan_index_forward(true)
            .set_exclusive_start_key(start)
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

    async fn leave(&self, ordering_key: &str, left: &[LeftEvent]) -> Result<bool, SdkFailure> {
        self.record(ordering_key, left, false).await
    }

    async fn hold(&self, ordering_key: &str, left: &[LeftEvent]) -> Result<(), SdkFailure> {
        self.record(ordering_key, left, true).await.map(drop)
    }
}

/// A hold item as the index returns it; `None` when it lacks what every hold has.
fn hold_of(item: &HashMap<String, AttributeValue>) -> Option<Hold> {
    let string = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
    let number = |name: &str| item.get(name).and_then(|v| v.as_n().ok());
    Some(Hold {
        ordering_key: string(attr::ORDERING_KEY)?,
        held_since: string(attr::HELD_SINCE)?,
        sort_key: string(attr::GSI1SK)?,
        last_left: string(attr::LAST_LEFT).and_then(|e| parse_left_element(&e)),
        left_count: number(attr::LEFT_COUNT).and_then(|n| n.parse().ok()),
        ttl: number(attr::TTL).and_then(|n| n.parse().ok()),
    })
}

impl HoldRelease for DynamoHoldStore {
    async fn page(
        &self,
        partition: &str,
        before: &str,
        limit: i32,
        start: Option<HoldCursor>,
    ) -> Result<HoldPage, SdkFailure> {
        let output = self
            .partition_query(&schema::hold_partition(partition), start)
            .key_condition_expression("#pk = :pk AND #sk < :before")
            .expression_attribute_names("#sk", attr::GSI1SK)
            .expression_attribute_values(":before", AttributeValue::S(before.to_owned()))
            .limit(limit)
            .send()
            .await
            .map_err(|e| SdkFailure::new("Query", e))?;
        Ok(HoldPage {
            holds: output.items().iter().filter_map(hold_of).collect(),
            next: output.last_evaluated_key().cloned(),
        })
    }

    async fn still_pending(&self, keys: &[ItemKey]) -> Result<HashSet<ItemKey>, SdkFailure> {
        let requested = keys
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
            requested,
            crate::permissions::PENDING_CHECK_ATTRIBUTES,
            "keys of the last events left under holds still unprocessed after retries",
        )
        .await?;
        Ok(items
            .iter()
            .filter(|item| item.contains_key(attr::GSI1PK))
            .filter_map(|item| {
                Some(ItemKey {
                    pk: item.get(attr::PK)?.as_s().ok()?.clone(),
                    sk: item.get(attr::SK)?.as_s().ok()?.clone(),
                })
            })
            .collect())
    }

    async fn release(&self, hold: &Hold) -> Result<bool, SdkFailure> {
        // Nothing left since the poller read the hold: `LeftCount` only grows while the hold
        // exists, and `HeldSince` tells a hold set again after a release from the one read.
        let mut request = self
            .client
            .delete_item()
            .table_name(&self.table_name)
            .set_key(Some(Self::key(&hold.ordering_key)))
            .expression_attribute_names("#since", attr::HELD_SINCE)
            .expression_attribute_names("#count", attr::LEFT_COUNT)
            .expression_attribute_values(":since", AttributeValue::S(hold.held_since.clone()));
        request = match hold.left_count {
            Some(count) => request
                .condition_expression("#since = :since AND #count = :count")
                .expression_attribute_values(":count", AttributeValue::N(count.to_string())),
            None => {
                request.condition_expression("#since = :since AND attribute_not_exists(#count)")
            }
        };
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

impl DynamoHoldStore {
    /// Moves every hold an earlier release kept under [`schema::LEGACY_HOLD_PARTITION`] to the
    /// hold partition of its held event's partition, sorted at `up_to` (a pass's cutoff: it is
    /// released once a pass has published everything pending before it), without its record
    /// of every event left; how many it moved.
    ///
    /// # Errors
    /// When the legacy partition cannot be read or a hold cannot be moved; what was moved stays
    /// moved, and the next call moves the rest.
    pub async fn migrate_legacy(&self, up_to: &str) -> Result<u64, SdkFailure> {
        let mut moved = 0;
        let mut start = None;
        loop {
            let page = self
                .partition_query(schema::LEGACY_HOLD_PARTITION, start)
                .key_condition_expression("#pk = :pk")
                .send()
                .await
                .map_err(|e| SdkFailure::new("Query", e))?;
            for item in page.items() {
                let string = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
                let (Some(ordering_key), Some(partition)) =
                    (string(attr::ORDERING_KEY), string(attr::HELD_PARTITION))
                else {
                    continue;
                };
                let left = item
                    .get(attr::LEFT_EVENTS)
                    .and_then(|v| v.as_ss().ok())
                    .map_or(0, Vec::len);
                // Unchanged since read (an older stream relay may still add to the set), moved
                // beside its partition, released once a pass has published everything pending
                // before `up_to`.
                let result = self
                    .client
                    .update_item()
                    .table_name(&self.table_name)
                    .set_key(Some(Self::key(&ordering_key)))
                    .update_expression(
                        "SET #gsi1pk = :gsi1pk, #gsi1sk = :sk, #count = :count \
                         REMOVE #left, #partition",
                    )
                    .condition_expression(
                        "#gsi1pk = :legacy AND (attribute_not_exists(#left) OR size(#left) = :count)",
                    )
                    .expression_attribute_names("#gsi1pk", attr::GSI1PK)
                    .expression_attribute_names("#gsi1sk", attr::GSI1SK)
                    .expression_attribute_names("#count", attr::LEFT_COUNT)
                    .expression_attribute_names("#left", attr::LEFT_EVENTS)
                    .expression_attribute_names("#partition", attr::HELD_PARTITION)
                    .expression_attribute_values(
                        ":gsi1pk",
                        AttributeValue::S(schema::hold_partition(&partition)),
                    )
                    .expression_attribute_values(":sk", AttributeValue::S(up_to.to_owned()))
                    .expression_attribute_values(":count", AttributeValue::N(left.to_string()))
                    .expression_attribute_values(
                        ":legacy",
                        AttributeValue::S(schema::LEGACY_HOLD_PARTITION.to_owned()),
                    )
                    .send()
                    .await;
                if update_applied(result)? {
                    moved += 1;
                }
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return Ok(moved);
            }
        }
    }
}
