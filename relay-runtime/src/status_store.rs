//! The status store: marks an outbox item published (or dead-lettered) with a conditional update.
//!
//! `SET Status = :status, PublishedAt = :now, ttl = :ttl REMOVE GSI1PK, GSI1SK` with the condition
//! `attribute_exists(GSI1PK)`. The condition makes the mark happen once: a failed condition means
//! another relay already did it, which is an outcome, not an error.
//!
//! Published events are marked [`MARK_BATCH_MAX`] at a time
//! ([`StatusStore::mark_all_published`]): one `BatchExecuteStatement` of PartiQL `UPDATE`s, each
//! the same update on the same condition, each succeeding or failing on its own (it is not a
//! transaction, and each costs what an `UpdateItem` does). A batch of 100 events is marked in 4
//! calls instead of 100: the relays' CPU goes mostly to building and signing requests.
//!
//! TTL: the writer's `ttl` only bounds how long a *published* item stays. The mark sets it from the
//! time of the mark ([`TtlPolicy`]): a published item stays the retention after it was published, a
//! dead-lettered one at least as long as the dead-letter queue keeps its message (so a redrive
//! finds the item), and a pending item's `ttl` is pushed forward by [`StatusStore::extend_ttl`]
//! before it can expire.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, BatchStatementErrorCodeEnum, BatchStatementRequest};
use chrono::Utc;
use outbox_shared::error::{ErrorClass, SdkFailure};
use outbox_shared::retry::RetryPolicy;
use outbox_shared::schema::attr;
use outbox_shared::time::format_timestamp;
use outbox_shared::{ItemKey, OutboxStatus};

/// What a conditional mark did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkOutcome {
    /// This call moved the item out of the pending index.
    Marked,
    /// The item was already marked (by another relay, or an earlier attempt of this one), or it is
    /// gone: nothing to do.
    AlreadyMarked,
}

/// What a TTL refresh of a pending item did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TtlOutcome {
    /// The item was pending and its `ttl` now lies the retention ahead.
    Extended,
    /// The item was no longer pending (marked meanwhile, or gone): nothing to do.
    NotPending,
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

    /// Marks each item of `keys` `PUBLISHED` as [`Self::mark_published`] does: one result per key,
    /// in the order of `keys`. A store that can marks them in one call (at most
    /// [`MARK_BATCH_MAX`] keys per call); by default each is marked on its own, concurrently.
    fn mark_all_published(
        &self,
        keys: &[ItemKey],
    ) -> impl Future<Output = Vec<Result<MarkOutcome, StatusError>>> + Send {
        futures::future::join_all(keys.iter().map(|key| self.mark_published(key)))
    }

    /// Marks the item `DEAD_LETTERED` with `reason` and removes it from the pending index, once.
    fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        reason: &str,
    ) -> impl Future<Output = Result<MarkOutcome, StatusError>> + Send;

    /// Pushes a pending item's `ttl` to the published retention from now, only while it is still
    /// pending, so DynamoDB's TTL never deletes an unpublished event.
    fn extend_ttl(
        &self,
        key: &ItemKey,
    ) -> impl Future<Output = Result<TtlOutcome, StatusError>> + Send;
}

/// A borrowed status store is a status store (a test keeps its fake to inspect it).
impl<S: StatusStore> StatusStore for &S {
    fn mark_published(
        &self,
        key: &ItemKey,
    ) -> impl Future<Output = Result<MarkOutcome, StatusError>> + Send {
        (**self).mark_published(key)
    }

    fn mark_all_published(
        &self,
        keys: &[ItemKey],
    ) -> impl Future<Output = Vec<Result<MarkOutcome, StatusError>>> + Send {
        (**self).mark_all_published(keys)
    }

    fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        reason: &str,
    ) -> impl Future<Output = Result<MarkOutcome, StatusError>> + Send {
        (**self).mark_dead_lettered(key, reason)
    }

    fn extend_ttl(
        &self,
        key: &ItemKey,
    ) -> impl Future<Output = Result<TtlOutcome, StatusError>> + Send {
        (**self).extend_ttl(key)
    }
}

/// The calls of [`DynamoStatusStore`]: marks one at a time and PartiQL `UPDATE`s in a
/// `BatchExecuteStatement`, TTL refreshes, each naming only [`crate::permissions::STATUS_ATTRIBUTES`].
pub const CALLS: &[crate::permissions::Call] = &[
    crate::permissions::Call::new(
        "dynamodb:UpdateItem",
        crate::permissions::Target::OutboxStatus,
    ),
    crate::permissions::Call::new(
        "dynamodb:PartiQLUpdate",
        crate::permissions::Target::OutboxStatus,
    ),
];

/// Statements one `BatchExecuteStatement` takes: the most marks one call makes.
pub const MARK_BATCH_MAX: usize = 25;

/// The operation the batched marks call, as failures name it.
pub(crate) const BATCH_EXECUTE_STATEMENT: &str = "BatchExecuteStatement";

/// Retries of a mark statement that failed with a retryable code inside a call that succeeded:
/// as many as the SDK's standard mode makes of a whole call.
const STATEMENT_RETRY: RetryPolicy = RetryPolicy {
    max_retries: 2,
    base_delay: Duration::from_millis(50),
    max_delay: Duration::from_secs(1),
};

/// Longest dead-letter reason stored on the item; the full reason goes to the dead-letter queue.
const MAX_STORED_REASON_BYTES: usize = 1024;

/// The DynamoDB adapter.
#[derive(Debug, Clone)]
pub struct DynamoStatusStore {
    client: Client,
    table_name: String,
    /// The batched mark's statement ([`mark_published_statement`]), built once.
    mark_published_statement: String,
    ttl: TtlPolicy,
    call_tasks: crate::CallTasks,
}

impl DynamoStatusStore {
    /// A store that marks items of `table_name` and sets their `ttl` by `ttl`.
    pub fn new(client: Client, table_name: impl Into<String>, ttl: TtlPolicy) -> Self {
        let table_name = table_name.into();
        Self {
            client,
            mark_published_statement: mark_published_statement(&table_name),
            table_name,
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
        let applied = applied(key, status, self.call_tasks.run(update.send()).await)?;
        Ok(if applied {
            MarkOutcome::Marked
        } else {
            MarkOutcome::AlreadyMarked
        })
    }
}

/// The PartiQL statement that marks one pending item of `table` published: the update and
/// condition of [`DynamoStatusStore::mark`]. Parameters: status, time, `ttl`, then the key (`PK`,
/// `SK`) last.
fn mark_published_statement(table: &str) -> String {
    format!(
        r#"UPDATE "{table}" SET "{status}" = ? SET "{at}" = ? SET "{ttl}" = ? REMOVE "{gsi1pk}" REMOVE "{gsi1sk}" WHERE "{pk}" = ? AND "{sk}" = ? AND "{gsi1pk}" IS NOT MISSING"#,
        status = attr::STATUS,
        at = attr::PUBLISHED_AT,
        ttl = attr::TTL,
        gsi1pk = attr::GSI1PK,
        gsi1sk = attr::GSI1SK,
        pk = attr::PK,
        sk = attr::SK,
    )
}

impl DynamoStatusStore {
    /// Marks `keys` (distinct, at most [`MARK_BATCH_MAX`]) published in one call: each
    /// statement's result, or the call's failure (after the SDK's retries).
    async fn mark_batch(
        &self,
        keys: &[&ItemKey],
    ) -> Result<Vec<Result<MarkOutcome, StatusError>>, SdkFailure> {
        let now = Utc::now();
        let ttl = ttl_after(now, self.ttl.retention(OutboxStatus::Published));
        let ttl = AttributeValue::N(ttl.to_string());
        let at = AttributeValue::S(format_timestamp(now));
        let status = AttributeValue::S(OutboxStatus::Published.as_str().to_owned());
        let statements = keys
            .iter()
            .map(|key| {
                BatchStatementRequest::builder()
                    .statement(&self.mark_published_statement)
                    .set_parameters(Some(vec![
                        status.clone(),
                        at.clone(),
                        ttl.clone(),
                        AttributeValue::S(key.pk.clone()),
                        AttributeValue::S(key.sk.clone()),
                    ]))
                    .build()
                    .expect("the statement is set")
            })
            .collect();
        let call = self
            .client
            .batch_execute_statement()
            .set_statements(Some(statements))
            .send();
        let output = self
            .call_tasks
            .run(call)
            .await
            .map_err(|err| SdkFailure::new(BATCH_EXECUTE_STATEMENT, err))?;
        // One response per statement, in the statements' order.
        let responses = output.responses();
        if responses.len() != keys.len() {
            return Err(SdkFailure::incomplete(
                BATCH_EXECUTE_STATEMENT,
                format!("{} responses to {} statements", responses.len(), keys.len()),
            ));
        }
        Ok(keys
            .iter()
            .zip(responses)
            .map(|(key, response)| match response.error() {
                None => Ok(MarkOutcome::Marked),
                Some(e)
                    if e.code() == Some(&BatchStatementErrorCodeEnum::ConditionalCheckFailed) =>
                {
                    Ok(MarkOutcome::AlreadyMarked)
                }
                Some(e) => {
                    let code = e
                        .code()
                        .map_or("Unknown", BatchStatementErrorCodeEnum::as_str);
                    Err(StatusError {
                        key: (*key).clone(),
                        status: OutboxStatus::Published,
                        failure: Box::new(SdkFailure::part(
                            BATCH_EXECUTE_STATEMENT,
                            code,
                            e.message().unwrap_or_default(),
                        )),
                    })
                }
            })
            .collect())
    }

    /// Marks `keys` (at most [`MARK_BATCH_MAX`]) published: one batch, then the statements that
    /// failed with a retryable code (throttling, a conflict) again, as the SDK retries a whole
    /// call. A key repeated gets the first one's result, and `AlreadyMarked` where that marked it
    /// (a batch names each item once).
    async fn mark_chunk(&self, keys: &[ItemKey]) -> Vec<Result<MarkOutcome, StatusError>> {
        let mut first = HashMap::with_capacity(keys.len());
        let mut distinct = Vec::with_capacity(keys.len());
        let at: Vec<usize> = keys
            .iter()
            .map(|key| {
                *first.entry(key).or_insert_with(|| {
                    distinct.push(key);
                    distinct.len() - 1
                })
            })
            .collect();
        let mut marked: Vec<Option<Result<MarkOutcome, StatusError>>> = vec![None; distinct.len()];
        let mut todo: Vec<usize> = (0..distinct.len()).collect();
        let mut delays = STATEMENT_RETRY.delays();
        loop {
            let batch: Vec<&ItemKey> = todo.iter().map(|&i| distinct[i]).collect();
            let mut again = Vec::new();
            match self.mark_batch(&batch).await {
                Ok(results) => {
                    for (&i, result) in todo.iter().zip(results) {
                        if result.as_ref().is_err_and(|e| e.class().is_retryable()) {
                            again.push(i);
                        }
                        marked[i] = Some(result);
                    }
                }
                Err(failure) => {
                    for &i in &todo {
                        marked[i] = Some(Err(StatusError {
                            key: distinct[i].clone(),
                            status: OutboxStatus::Published,
                            failure: Box::new(failure.clone()),
                        }));
                    }
                }
            }
            let Some(delay) = delays.next().filter(|_| !again.is_empty()) else {
                break;
            };
            tokio::time::sleep(delay).await;
            todo = again;
        }
        let mut seen = vec![false; distinct.len()];
        at.into_iter()
            .map(|i| {
                let result = match marked[i].as_ref().expect("every key was tried") {
                    Ok(_) if seen[i] => Ok(MarkOutcome::AlreadyMarked),
                    result => result.clone(),
                };
                seen[i] = true;
                result
            })
            .collect()
    }
}

/// Whether a conditional `UpdateItem` applied: `false` when its condition failed; any other
/// error is the call's. The one reading of a conditional update's answer, for every status and
/// hold update and the redrive's put-back.
///
/// # Errors
/// The call's failure, when it failed for another reason than its condition.
pub fn update_applied<O>(result: Result<O, SdkError<UpdateItemError>>) -> Result<bool, SdkFailure> {
    match result {
        Ok(_) => Ok(true),
        Err(SdkError::ServiceError(ctx))
            if matches!(
                ctx.err(),
                UpdateItemError::ConditionalCheckFailedException(_)
            ) =>
        {
            Ok(false)
        }
        Err(err) => Err(SdkFailure::new("UpdateItem", err)),
    }
}

/// Whether a conditional update on a pending item applied: `false` when its condition failed,
/// that is, the item is no longer pending.
fn applied<T>(
    key: &ItemKey,
    status: OutboxStatus,
    result: Result<T, SdkError<UpdateItemError>>,
) -> Result<bool, StatusError> {
    update_applied(result).map_err(|failure| StatusError {
        key: key.clone(),
        status,
        failure: Box::new(failure),
    })
}

impl StatusStore for DynamoStatusStore {
    async fn mark_published(&self, key: &ItemKey) -> Result<MarkOutcome, StatusError> {
        self.mark(key, OutboxStatus::Published, None).await
    }

    async fn mark_all_published(&self, keys: &[ItemKey]) -> Vec<Result<MarkOutcome, StatusError>> {
        let mut results = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(MARK_BATCH_MAX) {
            results.extend(self.mark_chunk(chunk).await);
        }
        results
    }

    async fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        reason: &str,
    ) -> Result<MarkOutcome, StatusError> {
        self.mark(key, OutboxStatus::DeadLettered, Some(reason))
            .await
    }

    async fn extend_ttl(&self, key: &ItemKey) -> Result<TtlOutcome, StatusError> {
        let ttl = ttl_after(Utc::now(), self.ttl.published);
        let result = self
            .while_pending(key, ttl)
            .update_expression("SET #ttl = :ttl")
            .send()
            .await;
        Ok(if applied(key, OutboxStatus::Pending, result)? {
            TtlOutcome::Extended
        } else {
            TtlOutcome::NotPending
        })
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
mod tests;
