//! The stream handler: one DynamoDB Streams batch in, one partial-batch response out.
//!
//! Each record ends in exactly one [`RecordOutcome`]: ignored (not an outbox `INSERT`), published
//! (and marked published), dead-lettered (poison, with a reason), or failed (not published now;
//! Lambda re-delivers from the first such record). Success is never reported for an event that
//! was not published.
//!
//! Marking an item published happens after the publish. If marking fails (throttling, say), the
//! event *was* published, so the record is not reported as a failure: re-delivering it would only
//! publish a duplicate. The item stays in the pending index, and the poller re-publishes it with
//! the same `eventId` after its grace period; consumers de-duplicate on that id. One rare duplicate
//! is the price of never re-driving a whole shard for a bookkeeping write.

use std::collections::HashMap;

use aws_lambda_events::dynamodb::EventRecord;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use chrono::Utc;
use futures::StreamExt;
use outbox_shared::schema::{attr, entity};
use outbox_shared::time::format_timestamp;
use outbox_shared::{
    DeadLetter, DeadLetterSink, ItemKey, OutboundEvent, OutboxItem, OutboxStatus, PublishOutcome,
    Publisher, StatusStore,
};
use serde_dynamo::AttributeValue;

use crate::metrics as m;

/// `origin` of the dead letters this relay sends.
pub const ORIGIN: &str = "relay-stream";

/// The stream `eventName` of a new item.
const INSERT: &str = "INSERT";

/// How the handler publishes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerOptions {
    pub event_bus_name: String,
    pub source: String,
    /// Stop at the first event that could not be published: nothing after it is attempted, so
    /// nothing after it can overtake it.
    pub stop_at_first_failure: bool,
    /// Events per publish step in strict mode (one `PutEvents` call's worth).
    pub strict_chunk_size: usize,
    /// Status updates in flight at once.
    pub mark_concurrency: usize,
}

impl HandlerOptions {
    pub fn new(event_bus_name: impl Into<String>, source: impl Into<String>) -> Self {
        Self {
            event_bus_name: event_bus_name.into(),
            source: source.into(),
            stop_at_first_failure: false,
            strict_chunk_size: outbox_shared::limits::PUT_EVENTS_MAX_ENTRIES,
            mark_concurrency: crate::config::DEFAULT_MARK_CONCURRENCY,
        }
    }
}

/// Why a record was not for this relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IgnoreReason {
    /// `MODIFY` or `REMOVE` (TTL deletions included).
    NotInsert(String),
    /// The new image is not an outbox event (an order, an idempotency record, or no image).
    NotOutboxEvent,
    /// An outbox item inserted in a status other than `PENDING` (a restore or a copy).
    NotPending(OutboxStatus),
}

/// What happened to one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    Ignored(IgnoreReason),
    /// Published to EventBridge.
    Published {
        event_id: String,
    },
    /// Poison: sent to the dead-letter queue with `reason`.
    DeadLettered {
        event_id: Option<String>,
        reason: String,
    },
    /// Not published; the record is (or is after) the batch item failure.
    Failed {
        event_id: Option<String>,
        reason: String,
    },
    /// Strict mode: not attempted because an earlier event failed.
    NotAttempted {
        event_id: String,
    },
}

impl RecordOutcome {
    /// Whether the record must be delivered again.
    pub fn needs_redelivery(&self) -> bool {
        matches!(self, Self::Failed { .. } | Self::NotAttempted { .. })
    }
}

/// Counts of one batch (or of many, summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BatchCounts {
    pub published: u64,
    pub ignored: u64,
    pub dead_lettered: u64,
    pub failed: u64,
}

impl std::ops::AddAssign for BatchCounts {
    fn add_assign(&mut self, other: Self) {
        self.published += other.published;
        self.ignored += other.ignored;
        self.dead_lettered += other.dead_lettered;
        self.failed += other.failed;
    }
}

/// The result of one batch: an outcome per record, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchReport {
    pub outcomes: Vec<RecordOutcome>,
    /// Index of the first record that must be delivered again.
    pub first_unpublished: Option<usize>,
}

impl BatchReport {
    pub fn counts(&self) -> BatchCounts {
        let mut counts = BatchCounts::default();
        for outcome in &self.outcomes {
            match outcome {
                RecordOutcome::Ignored(_) => counts.ignored += 1,
                RecordOutcome::Published { .. } => counts.published += 1,
                RecordOutcome::DeadLettered { .. } => counts.dead_lettered += 1,
                RecordOutcome::Failed { .. } | RecordOutcome::NotAttempted { .. } => {
                    counts.failed += 1;
                }
            }
        }
        counts
    }

    /// The Lambda response: the first record to re-deliver, if any.
    ///
    /// A record without a sequence number is reported with an empty identifier, which Lambda
    /// treats as a failure of the whole batch: safe, if wasteful.
    pub fn response(&self, records: &[EventRecord]) -> DynamoDbEventResponse {
        let mut response = DynamoDbEventResponse::default();
        if let Some(index) = self.first_unpublished {
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = Some(
                records
                    .get(index)
                    .and_then(|r| r.change.sequence_number.clone())
                    .unwrap_or_default(),
            );
            response.batch_item_failures.push(failure);
        }
        response
    }
}

/// What a record turned out to be before publishing.
enum Classified {
    Ignore(IgnoreReason),
    Poison {
        event_id: Option<String>,
        key: Option<ItemKey>,
        reason: String,
    },
    Ready(ItemKey, OutboundEvent),
}

/// A poison record on its way to the dead-letter queue.
struct Poison {
    index: usize,
    event_id: Option<String>,
    key: Option<ItemKey>,
    reason: String,
}

/// The handler, generic over its ports.
#[derive(Debug, Clone)]
pub struct StreamRelay<P, S, D> {
    publisher: P,
    status: S,
    dead_letters: Option<D>,
    options: HandlerOptions,
}

impl<P: Publisher, S: StatusStore, D: DeadLetterSink> StreamRelay<P, S, D> {
    /// A relay that sends poison records to `dead_letters`, or reports them as batch item
    /// failures when it is `None`.
    pub fn new(publisher: P, status: S, dead_letters: Option<D>, options: HandlerOptions) -> Self {
        Self {
            publisher,
            status,
            dead_letters,
            options,
        }
    }

    pub fn publisher(&self) -> &P {
        &self.publisher
    }

    pub fn options(&self) -> &HandlerOptions {
        &self.options
    }

    /// Handles one batch of stream records.
    pub async fn handle(&self, records: &[EventRecord]) -> BatchReport {
        let mut outcomes: Vec<Option<RecordOutcome>> = vec![None; records.len()];
        let mut ready = Vec::new();
        let mut events = Vec::new();
        let mut poison = Vec::new();
        for (index, record) in records.iter().enumerate() {
            match classify(record, &self.options) {
                Classified::Ignore(reason) => {
                    outcomes[index] = Some(RecordOutcome::Ignored(reason))
                }
                Classified::Poison {
                    event_id,
                    key,
                    reason,
                } => poison.push(Poison {
                    index,
                    event_id,
                    key,
                    reason,
                }),
                Classified::Ready(key, event) => {
                    ready.push((index, key));
                    events.push(event);
                }
            }
        }

        let results = self.publish(&events).await;
        let published_at = Utc::now();
        let mut to_mark = Vec::new();
        let mut max_lag_ms: Option<i64> = None;
        for (((index, key), event), result) in ready.into_iter().zip(events).zip(results) {
            let event_id = event.event_id;
            outcomes[index] = Some(match result {
                Some(PublishOutcome::Published) => {
                    let lag = (published_at - records[index].change.approximate_creation_date_time)
                        .num_milliseconds();
                    max_lag_ms = Some(max_lag_ms.map_or(lag, |l| l.max(lag)));
                    to_mark.push(key);
                    RecordOutcome::Published { event_id }
                }
                Some(PublishOutcome::Rejected { code, message }) => {
                    poison.push(Poison {
                        index,
                        event_id: Some(event_id),
                        key: Some(key),
                        reason: format!("EventBridge rejected the entry: {code}: {message}"),
                    });
                    continue;
                }
                Some(PublishOutcome::Failed { code, message }) => {
                    tracing::warn!(event_id = %event_id, code = %code, "event not published; will be re-delivered");
                    RecordOutcome::Failed {
                        event_id: Some(event_id),
                        reason: format!("{code}: {message}"),
                    }
                }
                None => RecordOutcome::NotAttempted { event_id },
            });
        }

        let (_, dead_lettered) = futures::join!(self.mark_published(to_mark), async {
            self.dead_letter(records, poison).await
        });
        for (index, outcome) in dead_lettered {
            outcomes[index] = Some(outcome);
        }

        let outcomes: Vec<RecordOutcome> = outcomes
            .into_iter()
            .map(|o| o.expect("every record gets an outcome"))
            .collect();
        let first_unpublished = outcomes.iter().position(RecordOutcome::needs_redelivery);
        let report = BatchReport {
            outcomes,
            first_unpublished,
        };
        let counts = report.counts();
        m::record_batch(&counts, max_lag_ms);
        tracing::info!(
            records = records.len(),
            published = counts.published,
            ignored = counts.ignored,
            dead_lettered = counts.dead_lettered,
            failed = counts.failed,
            "batch handled"
        );
        report
    }

    /// Publishes `events`; `None` for events not attempted (strict mode, after a failure).
    async fn publish(&self, events: &[OutboundEvent]) -> Vec<Option<PublishOutcome>> {
        if events.is_empty() {
            return Vec::new();
        }
        if !self.options.stop_at_first_failure {
            return self
                .publisher
                .publish(events)
                .await
                .into_iter()
                .map(Some)
                .collect();
        }
        let mut results = Vec::with_capacity(events.len());
        for chunk in events.chunks(self.options.strict_chunk_size.max(1)) {
            let outcomes = self.publisher.publish(chunk).await;
            let failed = outcomes
                .iter()
                .any(|o| matches!(o, PublishOutcome::Failed { .. }));
            results.extend(outcomes.into_iter().map(Some));
            if failed {
                break;
            }
        }
        results.resize(events.len(), None);
        results
    }

    async fn mark_published(&self, keys: Vec<ItemKey>) {
        futures::stream::iter(keys)
            .map(|key| async move {
                if let Err(err) = self.status.mark_published(&key).await {
                    // Published but still pending: the poller re-publishes it after its grace
                    // period (same eventId). Not a batch failure: see the module docs.
                    tracing::warn!(key = %err.key, retryable = err.class.is_retryable(), error = %err.message, "event published but not marked published");
                    m::mark_failed();
                }
            })
            .buffer_unordered(self.options.mark_concurrency.max(1))
            .collect::<()>()
            .await;
    }

    async fn dead_letter(
        &self,
        records: &[EventRecord],
        poison: Vec<Poison>,
    ) -> Vec<(usize, RecordOutcome)> {
        futures::stream::iter(poison)
            .map(|p| async move {
                let outcome = self.dead_letter_one(&records[p.index], &p).await;
                (p.index, outcome)
            })
            .buffer_unordered(self.options.mark_concurrency.max(1))
            .collect()
            .await
    }

    async fn dead_letter_one(&self, record: &EventRecord, poison: &Poison) -> RecordOutcome {
        let Some(sink) = &self.dead_letters else {
            tracing::warn!(event_id = ?poison.event_id, reason = %poison.reason, "poison record and no dead-letter queue: reporting it as a batch item failure");
            return RecordOutcome::Failed {
                event_id: poison.event_id.clone(),
                reason: format!(
                    "poison (no dead-letter queue configured): {}",
                    poison.reason
                ),
            };
        };
        let letter = DeadLetter {
            reason: poison.reason.clone(),
            origin: ORIGIN.to_owned(),
            event_id: poison.event_id.clone(),
            key: poison.key.clone(),
            record: serde_json::to_value(record).unwrap_or_else(|e| {
                serde_json::Value::String(format!("record could not be serialized: {e}"))
            }),
            dead_lettered_at: format_timestamp(Utc::now()),
        };
        if let Err(err) = sink.send(&letter).await {
            tracing::error!(event_id = ?poison.event_id, error = %err.message, "poison record could not be dead-lettered; will be re-delivered");
            return RecordOutcome::Failed {
                event_id: poison.event_id.clone(),
                reason: format!("dead-letter queue unavailable: {}", err.message),
            };
        }
        if let Some(key) = &poison.key
            && let Err(err) = self.status.mark_dead_lettered(key, &poison.reason).await
        {
            // The dead letter is out; the poller will find the item pending and dead-letter it
            // again, which is harmless.
            tracing::warn!(key = %err.key, error = %err.message, "dead-lettered but not marked");
            m::mark_failed();
        }
        tracing::warn!(event_id = ?poison.event_id, reason = %poison.reason, "poison record dead-lettered");
        RecordOutcome::DeadLettered {
            event_id: poison.event_id.clone(),
            reason: poison.reason.clone(),
        }
    }
}

fn string_attr<'a>(image: &'a HashMap<String, AttributeValue>, name: &str) -> Option<&'a str> {
    match image.get(name) {
        Some(AttributeValue::S(s)) => Some(s),
        _ => None,
    }
}

/// The item's key from the record's `Keys` (or its image), when both are strings.
fn record_key(record: &EventRecord) -> Option<ItemKey> {
    let from = |image: &HashMap<String, AttributeValue>| {
        Some(ItemKey {
            pk: string_attr(image, attr::PK)?.to_owned(),
            sk: string_attr(image, attr::SK)?.to_owned(),
        })
    };
    from(&record.change.keys).or_else(|| from(&record.change.new_image))
}

fn classify(record: &EventRecord, options: &HandlerOptions) -> Classified {
    if record.event_name != INSERT {
        return Classified::Ignore(IgnoreReason::NotInsert(record.event_name.clone()));
    }
    let image = &record.change.new_image;
    if string_attr(image, attr::ENTITY_TYPE) != Some(entity::OUTBOX_EVENT) {
        return Classified::Ignore(IgnoreReason::NotOutboxEvent);
    }
    let item: OutboxItem = match serde_dynamo::from_item(image.clone()) {
        Ok(item) => item,
        Err(err) => {
            return Classified::Poison {
                event_id: string_attr(image, attr::EVENT_ID).map(str::to_owned),
                key: record_key(record),
                reason: format!("new image does not decode as an outbox item: {err}"),
            };
        }
    };
    if item.status != OutboxStatus::Pending {
        return Classified::Ignore(IgnoreReason::NotPending(item.status));
    }
    match OutboundEvent::from_item(&item, &options.event_bus_name, &options.source) {
        Ok(event) => Classified::Ready(item.key(), event),
        Err(err) => Classified::Poison {
            event_id: Some(item.event_id.clone()),
            key: Some(item.key()),
            reason: err.to_string(),
        },
    }
}
