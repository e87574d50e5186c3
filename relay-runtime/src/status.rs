//! The status store: marks an outbox item published (or dead-lettered) with a conditional update.
//!
//! `SET Status = :status, PublishedAt = :now, ttl = :ttl REMOVE GSI1PK, GSI1SK` with the condition
//! `attribute_exists(GSI1PK)`. The condition makes the mark happen once: a failed condition means
//! another relay already did it, which is an outcome, not an error.
//!
//! TTL: the writer's `ttl` only bounds how long a *published* item stays. The mark sets it from the
//! time of the mark ([`TtlPolicy`]): a published item stays the retention after it was published, a
//! dead-lettered one at least as long as the dead-letter queue keeps its message (so a redrive
//! finds the item), and a pending item's `ttl` is pushed forward by [`StatusStore::extend_ttl`]
//! before it can expire.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use chrono::Utc;
use outbox_shared::error::{ErrorClass, SdkFailure};
use outbox_shared::schema::{self, attr};
use outbox_shared::time::format_timestamp;
use outbox_shared::{ItemKey, OutboxStatus};

/// What a conditional mark did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkOutcome {
    /// This call moved the item out of the pending index.
    Marked,
    /// The item was no longer pending (another relay marked it, or it is gone): nothing to do.
    AlreadyDone,
}

/// A mark that failed for a reason other than the item no longer being pending.
#[derive(Debug, Clone, thiserror::Error)]
#[error("could not mark {key} as {status}")]
pub struct StatusError {
    pub key: ItemKey,
    pub status: OutboxStatus,
    /// Boxed: the error travels in every mark's `Result`, which mostly succeeds.
    #[source]
    pub failure: Box<SdkFailure>,
}

impl StatusError {
    pub fn class(&self) -> ErrorClass {
        self.failure.class
    }
}

/// How long the dead-letter queues keep a message: SQS's maximum, 14 days, as the template sets.
pub const DEAD_LETTER_QUEUE_RETENTION: Duration = Duration::from_secs(14 * 24 * 60 * 60);

/// A dead-lettered item outlives its dead-letter message by at least this much.
pub const DEAD_LETTER_TTL_MARGIN: Duration = Duration::from_secs(24 * 60 * 60);

/// The `ttl` a mark gives an item, counted from the mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TtlPolicy {
    /// A published item stays this long (the outbox retention, `OUTBOX_TTL_RETENTION`).
    pub published: Duration,
    /// A dead-lettered item stays this long: at least the dead-letter queue's retention plus
    /// [`DEAD_LETTER_TTL_MARGIN`], so a redrive from the queue finds its item.
    pub dead_lettered: Duration,
}

impl TtlPolicy {
    /// Published items stay `retention`; dead-lettered ones the longer of `retention` and the
    /// dead-letter queue's retention plus the margin.
    pub fn new(retention: Duration) -> Self {
        Self {
            published: retention,
            dead_lettered: retention.max(DEAD_LETTER_QUEUE_RETENTION + DEAD_LETTER_TTL_MARGIN),
        }
    }

    /// The retention of an item marked `status`.
    pub fn retention(&self, status: OutboxStatus) -> Duration {
        match status {
            OutboxStatus::DeadLettered => self.dead_lettered,
            _ => self.published,
        }
    }
}

impl Default for TtlPolicy {
    fn default() -> Self {
        Self::new(outbox_shared::config::DEFAULT_TTL_RETENTION)
    }
}

/// Epoch seconds `retention` after `now`, the value of a `ttl` attribute.
pub fn ttl_after(now: chrono::DateTime<Utc>, retention: Duration) -> i64 {
    now.timestamp()
        .saturating_add(i64::try_from(retention.as_secs()).unwrap_or(i64::MAX))
}

/// Port: where the relays record that an event left the outbox.
pub trait StatusStore: Send + Sync {
    /// Marks the item `PUBLISHED` and removes it from the pending index, once.
    fn mark_published(
        &self,
        key: &ItemKey,
    ) -> impl Future<Output = Result<MarkOutcome, StatusError>> + Send;

    /// Marks the item `DEAD_LETTERED` with `reason` and removes it from the pending index, once.
    fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        reason: &str,
    ) -> impl Future<Output = Result<MarkOutcome, StatusError>> + Send;

    /// Pushes a pending item's `ttl` to the published retention from now, only while it is still
    /// pending, so DynamoDB's TTL never deletes an unpublished event. `AlreadyDone` when it no
    /// longer is pending.
    fn extend_ttl(
        &self,
        key: &ItemKey,
    ) -> impl Future<Output = Result<MarkOutcome, StatusError>> + Send;

    /// The aggregates among `ordering_keys` the stream relay has left to the poller (held).
    fn held(
        &self,
        ordering_keys: &[String],
    ) -> impl Future<Output = Result<HashSet<String>, SdkFailure>> + Send;

    /// Leaves the aggregate `ordering_key` to the poller: until the poller has published its
    /// pending events (under `partition`, the held event's `GSI1PK`) and released the hold, the
    /// stream relay publishes none of its events.
    fn hold(
        &self,
        ordering_key: &str,
        partition: &str,
    ) -> impl Future<Output = Result<(), SdkFailure>> + Send;
}

/// Keys one `BatchGetItem` may ask for.
const BATCH_GET_MAX_KEYS: usize = 100;
/// `BatchGetItem` rounds for unprocessed keys before giving up.
const BATCH_GET_MAX_ROUNDS: u32 = 5;

/// Longest dead-letter reason stored on the item; the full reason goes to the dead-letter queue.
const MAX_STORED_REASON_BYTES: usize = 1024;

/// The DynamoDB adapter.
#[derive(Debug, Clone)]
pub struct DynamoStatusStore {
    client: Client,
    table_name: String,
    ttl: TtlPolicy,
    call_tasks: crate::CallTasks,
}

impl DynamoStatusStore {
    /// A store that marks items of `table_name` and sets their `ttl` by `ttl`.
    pub fn new(client: Client, table_name: impl Into<String>, ttl: TtlPolicy) -> Self {
        Self {
            client,
            table_name: table_name.into(),
            ttl,
            call_tasks: crate::CallTasks::Inline,
        }
    }

    /// Runs its marks as `call_tasks` says (default: in the caller's task).
    #[must_use]
    pub fn with_call_tasks(mut self, call_tasks: crate::CallTasks) -> Self {
        self.call_tasks = call_tasks;
        self
    }

    /// An update of the item at `key` on the condition that it is still pending (in the index),
    /// with `#gsi1pk`, `#ttl` and `:ttl` (= `ttl`) defined.
    fn while_pending(&self, key: &ItemKey, ttl: i64) -> UpdateItemFluentBuilder {
        self.client
            .update_item()
            .table_name(&self.table_name)
            .key(attr::PK, AttributeValue::S(key.pk.clone()))
            .key(attr::SK, AttributeValue::S(key.sk.clone()))
            .condition_expression("attribute_exists(#gsi1pk)")
            .expression_attribute_names("#gsi1pk", attr::GSI1PK)
            .expression_attribute_names("#ttl", attr::TTL)
            .expression_attribute_values(":ttl", AttributeValue::N(ttl.to_string()))
    }

    async fn mark(
        &self,
        key: &ItemKey,
        status: OutboxStatus,
        reason: Option<&str>,
    ) -> Result<MarkOutcome, StatusError> {
        let now = Utc::now();
        let ttl = ttl_after(now, self.ttl.retention(status));
        let now = format_timestamp(now);
        let mut update = self
            .while_pending(key, ttl)
            .expression_attribute_names("#gsi1sk", attr::GSI1SK)
            .expression_attribute_names("#status", attr::STATUS)
            .expression_attribute_names(
                "#at",
                match status {
                    OutboxStatus::DeadLettered => attr::DEAD_LETTERED_AT,
                    _ => attr::PUBLISHED_AT,
                },
            )
            .expression_attribute_values(":status", AttributeValue::S(status.as_str().to_owned()))
            .expression_attribute_values(":now", AttributeValue::S(now));
        update = match reason {
            Some(reason) => update
                .update_expression(
                    "SET #status = :status, #at = :now, #ttl = :ttl, #reason = :reason REMOVE #gsi1pk, #gsi1sk",
                )
                .expression_attribute_names("#reason", attr::DEAD_LETTER_REASON)
                .expression_attribute_values(
                    ":reason",
                    AttributeValue::S(truncate(reason, MAX_STORED_REASON_BYTES).to_owned()),
                ),
            None => update
                .update_expression(
                    "SET #status = :status, #at = :now, #ttl = :ttl REMOVE #gsi1pk, #gsi1sk",
                ),
        };
        outcome(key, status, self.call_tasks.run(update.send()).await)
    }
}

/// A conditional update's result as a mark outcome: a failed condition means the item is no
/// longer pending.
fn outcome<T>(
    key: &ItemKey,
    status: OutboxStatus,
    result: Result<T, SdkError<UpdateItemError>>,
) -> Result<MarkOutcome, StatusError> {
    match result {
        Ok(_) => Ok(MarkOutcome::Marked),
        Err(SdkError::ServiceError(ctx))
            if matches!(
                ctx.err(),
                UpdateItemError::ConditionalCheckFailedException(_)
            ) =>
        {
            Ok(MarkOutcome::AlreadyDone)
        }
        Err(err) => Err(StatusError {
            key: key.clone(),
            status,
            failure: Box::new(SdkFailure::new("UpdateItem", err)),
        }),
    }
}

impl StatusStore for DynamoStatusStore {
    async fn mark_published(&self, key: &ItemKey) -> Result<MarkOutcome, StatusError> {
        self.mark(key, OutboxStatus::Published, None).await
    }

    async fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        reason: &str,
    ) -> Result<MarkOutcome, StatusError> {
        self.mark(key, OutboxStatus::DeadLettered, Some(reason))
            .await
    }

    async fn held(&self, ordering_keys: &[String]) -> Result<HashSet<String>, SdkFailure> {
        let mut held = HashSet::new();
        for chunk in ordering_keys.chunks(BATCH_GET_MAX_KEYS) {
            let keys: Vec<HashMap<String, AttributeValue>> = chunk
                .iter()
                .map(|k| {
                    HashMap::from([
                        (attr::PK.to_owned(), AttributeValue::S(schema::hold_pk(k))),
                        (
                            attr::SK.to_owned(),
                            AttributeValue::S(schema::HOLD_SK.to_owned()),
                        ),
                    ])
                })
                .collect();
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

    async fn hold(&self, ordering_key: &str, partition: &str) -> Result<(), SdkFailure> {
        let now = Utc::now();
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let item = HashMap::from([
            (attr::PK.to_owned(), s(&schema::hold_pk(ordering_key))),
            (attr::SK.to_owned(), s(schema::HOLD_SK)),
            (
                attr::ENTITY_TYPE.to_owned(),
                s(schema::entity::AGGREGATE_HOLD),
            ),
            (attr::ORDERING_KEY.to_owned(), s(ordering_key)),
            (attr::HELD_PARTITION.to_owned(), s(partition)),
            (attr::HELD_SINCE.to_owned(), s(&format_timestamp(now))),
            (attr::GSI1PK.to_owned(), s(schema::HOLD_PARTITION)),
            (attr::GSI1SK.to_owned(), s(&schema::hold_pk(ordering_key))),
            // A hold no poller ever released (none ran) lapses with the retention.
            (
                attr::TTL.to_owned(),
                AttributeValue::N(ttl_after(now, self.ttl.published).to_string()),
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

    async fn extend_ttl(&self, key: &ItemKey) -> Result<MarkOutcome, StatusError> {
        let ttl = ttl_after(Utc::now(), self.ttl.published);
        let result = self
            .while_pending(key, ttl)
            .update_expression("SET #ttl = :ttl")
            .send()
            .await;
        outcome(key, OutboxStatus::Pending, result)
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dead_lettered_items_outlive_the_dead_letter_queue() {
        let day = Duration::from_secs(24 * 60 * 60);
        let policy = TtlPolicy::new(7 * day);
        assert_eq!(policy.retention(OutboxStatus::Published), 7 * day);
        assert_eq!(policy.retention(OutboxStatus::DeadLettered), 15 * day);
        // A retention longer than the queue's wins for both.
        let long = TtlPolicy::new(30 * day);
        assert_eq!(long.retention(OutboxStatus::DeadLettered), 30 * day);
    }

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("héllo", 3), "hé");
        assert_eq!(truncate("abc", 10), "abc");
    }
}
