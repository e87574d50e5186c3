//! The status store: marks an outbox item published (or dead-lettered) with a conditional update.
//!
//! Every mark is one PartiQL statement, built in one place ([`mark_statement`]):
//! `UPDATE … SET Status = ?, PublishedAt = ?, ttl = ? REMOVE GSI1PK, GSI1SK WHERE PK = ? AND SK = ?
//! AND GSI1PK IS NOT MISSING` (a dead-letter mark sets `DeadLetteredAt` and `DeadLetterReason`
//! instead of `PublishedAt`). The condition makes the mark happen once: a failed condition means
//! another relay already did it, which is an outcome, not an error.
//!
//! Marks go [`MARK_BATCH_MAX`] at a time in one `BatchExecuteStatement`, each statement succeeding
//! or failing on its own (it is not a transaction, and each costs what an `UpdateItem` does). A
//! batch of 100 events is marked in 4 calls instead of 100: the relays' CPU goes mostly to building
//! and signing requests. A dead-letter mark is a batch of one.
//!
//! An event whose item is gone (DynamoDB's TTL deleted it while pending, and the stream relay
//! decoded it from the `REMOVE` record's old image) has no item to update: its dead-letter mark puts
//! the item back instead, `DEAD_LETTERED` ([`dead_lettered_image`]), by the conditional `PutItem` of
//! [`crate::recreate`] (only where no item has its key), so the item holds the event a letter names.
//!
//! TTL: the writer's `ttl` only bounds how long a *published* item stays. The mark sets it from the
//! time of the mark ([`TtlPolicy`]): a published item stays the retention after it was published, a
//! dead-lettered one at least as long as the dead-letter queue keeps its message (so a redrive
//! finds the item). A pending item's `ttl` is the poller's TTL refresh's, not the marks'.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, BatchStatementErrorCodeEnum, BatchStatementRequest};
use chrono::Utc;
use outbox_shared::error::{ErrorClass, SdkFailure};
use outbox_shared::retry::RetryPolicy;
use outbox_shared::schema::attr;
use outbox_shared::time::format_timestamp;
use outbox_shared::{ItemKey, OutboxStatus};

use crate::recreate::{Attributes, DynamoGoneItems, GoneItems, Recreated};

/// What a conditional mark did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MarkOutcome {
    /// This call moved the item out of the pending index.
    Marked,
    /// The item was already marked (by another relay, or an earlier attempt of this one), or it is
    /// gone: nothing to do.
    AlreadyMarked,
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
    /// Marks each item of `keys` `PUBLISHED` and removes it from the pending index, once: one
    /// result per key, in the order of `keys`.
    fn mark_published(
        &self,
        keys: &[ItemKey],
    ) -> impl Future<Output = Vec<Result<MarkOutcome, StatusError>>> + Send;

    /// Marks the item `DEAD_LETTERED` with `reason` and removes it from the pending index, once.
    fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        reason: &str,
    ) -> impl Future<Output = Result<MarkOutcome, StatusError>> + Send;

    /// Puts the item at `key`, which is gone (DynamoDB's TTL deleted it while pending), back
    /// `DEAD_LETTERED` with `reason` from `image`, its last image ([`dead_lettered_image`]): the
    /// dead-letter mark of an event with no item left to update. Only where no item has its key:
    /// one there (put back by an earlier attempt, or re-created since) is
    /// [`MarkOutcome::AlreadyMarked`].
    fn recreate_dead_lettered(
        &self,
        key: &ItemKey,
        image: &Attributes,
        reason: &str,
    ) -> impl Future<Output = Result<MarkOutcome, StatusError>> + Send;
}

/// A borrowed status store is a status store (a test keeps its fake to inspect it).
impl<S: StatusStore> StatusStore for &S {
    fn mark_published(
        &self,
        keys: &[ItemKey],
    ) -> impl Future<Output = Vec<Result<MarkOutcome, StatusError>>> + Send {
        (**self).mark_published(keys)
    }

    fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        reason: &str,
    ) -> impl Future<Output = Result<MarkOutcome, StatusError>> + Send {
        (**self).mark_dead_lettered(key, reason)
    }

    fn recreate_dead_lettered(
        &self,
        key: &ItemKey,
        image: &Attributes,
        reason: &str,
    ) -> impl Future<Output = Result<MarkOutcome, StatusError>> + Send {
        (**self).recreate_dead_lettered(key, image, reason)
    }
}

/// The calls of [`DynamoStatusStore`]: PartiQL `UPDATE`s in a `BatchExecuteStatement`, each naming
/// only [`crate::permissions::STATUS_ATTRIBUTES`]; and the put of a gone item back
/// `DEAD_LETTERED` ([`crate::recreate::CALLS`]: an outbox item's attributes only).
pub const CALLS: &[crate::permissions::Call] = &[
    crate::permissions::Call::new(
        "dynamodb:PartiQLUpdate",
        crate::permissions::Target::OutboxStatus,
    ),
    crate::recreate::CALLS[0],
];

/// Statements one `BatchExecuteStatement` takes: the most marks one call makes.
pub const MARK_BATCH_MAX: usize = 25;

/// The operation the marks call, as failures name it.
pub const BATCH_EXECUTE_STATEMENT: &str = "BatchExecuteStatement";

/// Retries of a mark statement that failed with a retryable code inside a call that succeeded:
/// as many as the SDK's standard mode makes of a whole call.
const STATEMENT_RETRY: RetryPolicy = RetryPolicy {
    max_retries: 2,
    base_delay: Duration::from_millis(50),
    max_delay: Duration::from_secs(1),
};

/// Longest dead-letter reason stored on the item; the full reason goes to the dead-letter queue.
const MAX_STORED_REASON_BYTES: usize = 1024;

/// The PartiQL statement that marks one pending item of `table` with `status` (`PUBLISHED` or
/// `DEAD_LETTERED`): the status, when (`PublishedAt` or `DeadLetteredAt`), the `ttl`, for a dead
/// letter its reason, and the item out of the pending index, on the condition that it is still in
/// it. Parameters: status, time, `ttl`, the reason (dead letters only), then the key (`PK`, `SK`).
pub fn mark_statement(table: &str, status: OutboxStatus) -> String {
    let (at, reason) = match status {
        OutboxStatus::DeadLettered => (
            attr::DEAD_LETTERED_AT,
            format!(r#" SET "{}" = ?"#, attr::DEAD_LETTER_REASON),
        ),
        _ => (attr::PUBLISHED_AT, String::new()),
    };
    format!(
        r#"UPDATE "{table}" SET "{status}" = ? SET "{at}" = ? SET "{ttl}" = ?{reason} REMOVE "{gsi1pk}" REMOVE "{gsi1sk}" WHERE "{pk}" = ? AND "{sk}" = ? AND "{gsi1pk}" IS NOT MISSING"#,
        status = attr::STATUS,
        ttl = attr::TTL,
        gsi1pk = attr::GSI1PK,
        gsi1sk = attr::GSI1SK,
        pk = attr::PK,
        sk = attr::SK,
    )
}

/// `image` (the last image of an outbox item that is gone) as the item to put back
/// `DEAD_LETTERED` with `reason` (truncated as a mark stores it), as a dead-letter mark would have
/// left it: out of the pending index (no `GSI1PK`, `GSI1SK`), `DeadLetteredAt` `now`, and its `ttl`
/// `retention` after `now` (the dead-lettered retention, [`TtlPolicy::dead_lettered`], so a
/// redrive finds it). Every other attribute stays as it was: the item holds the whole event.
pub fn dead_lettered_image(
    image: &Attributes,
    reason: &str,
    now: chrono::DateTime<Utc>,
    retention: Duration,
) -> Attributes {
    let mut item = image.clone();
    for gone in [attr::GSI1PK, attr::GSI1SK, attr::PUBLISHED_AT] {
        item.remove(gone);
    }
    let mut set = |name: &str, value: AttributeValue| item.insert(name.to_owned(), value);
    set(
        attr::STATUS,
        AttributeValue::S(OutboxStatus::DeadLettered.as_str().to_owned()),
    );
    set(
        attr::DEAD_LETTERED_AT,
        AttributeValue::S(format_timestamp(now)),
    );
    set(
        attr::DEAD_LETTER_REASON,
        AttributeValue::S(truncate(reason, MAX_STORED_REASON_BYTES).to_owned()),
    );
    set(
        attr::TTL,
        AttributeValue::N(ttl_after(now, retention).to_string()),
    );
    item
}

/// The DynamoDB adapter.
#[derive(Debug, Clone)]
pub struct DynamoStatusStore {
    client: Client,
    /// Puts a gone item back `DEAD_LETTERED` ([`StatusStore::recreate_dead_lettered`]).
    gone_items: DynamoGoneItems,
    /// The mark statements ([`mark_statement`]), built once: published, dead-lettered.
    published_statement: String,
    dead_lettered_statement: String,
    ttl: TtlPolicy,
    call_tasks: crate::CallTasks,
}

impl DynamoStatusStore {
    /// A store that marks items of `table_name` and sets their `ttl` by `ttl`.
    pub fn new(client: Client, table_name: impl Into<String>, ttl: TtlPolicy) -> Self {
        let table_name = table_name.into();
        Self {
            gone_items: DynamoGoneItems::new(client.clone(), &table_name),
            client,
            published_statement: mark_statement(&table_name, OutboxStatus::Published),
            dead_lettered_statement: mark_statement(&table_name, OutboxStatus::DeadLettered),
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

    /// Marks `keys` (distinct, at most [`MARK_BATCH_MAX`]) with `status` (and `reason`, for a
    /// dead letter) in one call: each statement's result, or the call's failure (after the SDK's
    /// retries).
    async fn mark_batch(
        &self,
        keys: &[&ItemKey],
        status: OutboxStatus,
        reason: Option<&str>,
    ) -> Result<Vec<Result<MarkOutcome, StatusError>>, SdkFailure> {
        let now = Utc::now();
        let mut fields = vec![
            AttributeValue::S(status.as_str().to_owned()),
            AttributeValue::S(format_timestamp(now)),
            AttributeValue::N(ttl_after(now, self.ttl.retention(status)).to_string()),
        ];
        let statement = match status {
            OutboxStatus::DeadLettered => {
                let reason = truncate(reason.unwrap_or_default(), MAX_STORED_REASON_BYTES);
                fields.push(AttributeValue::S(reason.to_owned()));
                &self.dead_lettered_statement
            }
            _ => &self.published_statement,
        };
        let statements = keys
            .iter()
            .map(|key| {
                let mut parameters = fields.clone();
                parameters.push(AttributeValue::S(key.pk.clone()));
                parameters.push(AttributeValue::S(key.sk.clone()));
                BatchStatementRequest::builder()
                    .statement(statement)
                    .set_parameters(Some(parameters))
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
                        status,
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

    /// Marks `keys` (at most [`MARK_BATCH_MAX`]) with `status`: one batch, then the statements
    /// that failed with a retryable code (throttling, a conflict) again, as the SDK retries a
    /// whole call. A key repeated gets the first one's result, and `AlreadyMarked` where that
    /// marked it (a batch names each item once).
    async fn mark_chunk(
        &self,
        keys: &[ItemKey],
        status: OutboxStatus,
        reason: Option<&str>,
    ) -> Vec<Result<MarkOutcome, StatusError>> {
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
            match self.mark_batch(&batch, status, reason).await {
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
                            status,
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
/// error is the call's. The one reading of a conditional update's answer, for every hold update,
/// the TTL refresh and the redrive's put-back.
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

impl StatusStore for DynamoStatusStore {
    async fn mark_published(&self, keys: &[ItemKey]) -> Vec<Result<MarkOutcome, StatusError>> {
        let mut results = Vec::with_capacity(keys.len());
        for chunk in keys.chunks(MARK_BATCH_MAX) {
            results.extend(self.mark_chunk(chunk, OutboxStatus::Published, None).await);
        }
        results
    }

    async fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        reason: &str,
    ) -> Result<MarkOutcome, StatusError> {
        let mut results = self
            .mark_chunk(
                std::slice::from_ref(key),
                OutboxStatus::DeadLettered,
                Some(reason),
            )
            .await;
        results.remove(0)
    }

    async fn recreate_dead_lettered(
        &self,
        key: &ItemKey,
        image: &Attributes,
        reason: &str,
    ) -> Result<MarkOutcome, StatusError> {
        let item = dead_lettered_image(
            image,
            reason,
            Utc::now(),
            self.ttl.retention(OutboxStatus::DeadLettered),
        );
        let gone_items = self.gone_items.clone();
        let put = async move { gone_items.recreate(item).await };
        match self.call_tasks.run(put).await {
            Ok(Recreated::Recreated) => Ok(MarkOutcome::Marked),
            Ok(Recreated::AlreadyThere) => Ok(MarkOutcome::AlreadyMarked),
            Err(failure) => Err(StatusError {
                key: key.clone(),
                status: OutboxStatus::DeadLettered,
                failure: Box::new(failure),
            }),
        }
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
