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
    // Decoded through a reference: the record stays whole for the dead-letter queue and the
    // response, and nothing is cloned but the item's own fields.
    let item: OutboxItem = match outbox_shared::image::from_image(image) {
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
    let event = OutboundEvent::from_item(&item, &options.event_bus_name, &options.source);
    let key = ItemKey {
        pk: item.pk,
        sk: item.sk,
    };
    match event {
        Ok(event) => Classified::Ready(key, event),
        Err(err) => Classified::Poison {
            event_id: Some(item.event_id),
            key: Some(key),
            reason: err.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{FakeDeadLetters, FakePublisher, FakeStatusStore};
    use aws_lambda_events::dynamodb::Event;
    use serde_json::json;

    const AWS_SAMPLE: &str = include_str!("../../tests/fixtures/stream/aws-sample-event.json");
    const AWS_LAMBDA_EVENTS_SAMPLE: &str =
        include_str!("../../tests/fixtures/stream/aws-lambda-events-sample.json");
    const OUTBOX_BATCH: &str = include_str!("../../tests/fixtures/stream/outbox-batch.json");

    type Relay<'a> = StreamRelay<&'a FakePublisher, &'a FakeStatusStore, &'a FakeDeadLetters>;

    struct Ports {
        publisher: FakePublisher,
        status: FakeStatusStore,
        dead_letters: FakeDeadLetters,
    }

    impl Ports {
        fn new(publisher: FakePublisher) -> Self {
            Self {
                publisher,
                status: FakeStatusStore::default(),
                dead_letters: FakeDeadLetters::default(),
            }
        }

        fn relay(&self, dead_letter_queue: bool, strict: bool) -> Relay<'_> {
            let mut options = HandlerOptions::new("bus", "test.orders");
            options.stop_at_first_failure = strict;
            options.strict_chunk_size = 2;
            StreamRelay::new(
                &self.publisher,
                &self.status,
                dead_letter_queue.then_some(&self.dead_letters),
                options,
            )
        }
    }

    fn records(fixture: &str) -> Vec<EventRecord> {
        serde_json::from_str::<Event>(fixture).unwrap().records
    }

    /// An outbox INSERT record with `event_id`, `payload` and sequence number `seq`.
    fn outbox_insert(seq: u32, event_id: &str, payload: &str) -> EventRecord {
        serde_json::from_value(json!({
            "eventID": format!("ev-{seq}"), "eventName": "INSERT", "awsRegion": "us-east-1",
            "dynamodb": {
                "ApproximateCreationDateTime": 1795860000,
                "Keys": {"PK": {"S": "USER#u"}, "SK": {"S": format!("OUTBOX#{event_id}")}},
                "NewImage": {
                    "PK": {"S": "USER#u"}, "SK": {"S": format!("OUTBOX#{event_id}")},
                    "EntityType": {"S": "OutboxEvent"}, "EventId": {"S": event_id},
                    "EventType": {"S": "OrderCreated"}, "Payload": {"S": payload},
                    "Status": {"S": "PENDING"}, "CreatedAt": {"S": "2026-11-28T08:00:00.000Z"},
                    "AggregateId": {"S": format!("o-{event_id}")},
                    "GSI1PK": {"S": "OUTBOX#PENDING#1"}, "GSI1SK": {"S": "EVENT#x"}
                },
                "SequenceNumber": format!("{seq:08}"), "SizeBytes": 100,
                "StreamViewType": "NEW_AND_OLD_IMAGES"
            }
        }))
        .unwrap()
    }

    fn key(event_id: &str) -> ItemKey {
        ItemKey {
            pk: "USER#u".into(),
            sk: format!("OUTBOX#{event_id}"),
        }
    }

    fn failed() -> PublishOutcome {
        PublishOutcome::Failed {
            code: "ThrottlingException".into(),
            message: "slow down".into(),
        }
    }

    #[tokio::test]
    async fn aws_sample_events_are_ignored() {
        for fixture in [AWS_SAMPLE, AWS_LAMBDA_EVENTS_SAMPLE] {
            // Given AWS's published sample stream events (no outbox items in them)
            let ports = Ports::new(FakePublisher::default());
            let records = records(fixture);
            assert!(!records.is_empty());

            // When the handler runs
            let report = ports.relay(true, false).handle(&records).await;

            // Then nothing is published, nothing fails
            assert!(
                report
                    .outcomes
                    .iter()
                    .all(|o| matches!(o, RecordOutcome::Ignored(_))),
                "{report:?}"
            );
            assert!(ports.publisher.published().is_empty());
            assert!(report.response(&records).batch_item_failures.is_empty());
        }
    }

    #[tokio::test]
    async fn only_outbox_inserts_are_published_and_marked() {
        // Given an order INSERT, an outbox INSERT, its MODIFY, a TTL REMOVE and a minimal outbox
        // INSERT written by another client
        let ports = Ports::new(FakePublisher::default());
        let records = records(OUTBOX_BATCH);
        assert_eq!(
            records[3]
                .user_identity
                .as_ref()
                .map(|u| u.principal_id.as_str()),
            Some("dynamodb.amazonaws.com")
        );

        // When the handler runs
        let report = ports.relay(true, false).handle(&records).await;

        // Then exactly the two outbox INSERTs are published, with the documented envelope
        let id = "0194f7c2-8a4b-7d3e-9c1a-2b3c4d5e6f70";
        assert_eq!(
            report.outcomes,
            vec![
                RecordOutcome::Ignored(IgnoreReason::NotOutboxEvent),
                RecordOutcome::Published {
                    event_id: id.into()
                },
                RecordOutcome::Ignored(IgnoreReason::NotInsert("MODIFY".into())),
                RecordOutcome::Ignored(IgnoreReason::NotInsert("REMOVE".into())),
                RecordOutcome::Published {
                    event_id: "evt-minimal-1".into()
                },
            ]
        );
        let published = ports.publisher.published();
        let detail: serde_json::Value = serde_json::from_str(&published[0].detail).unwrap();
        assert_eq!(detail["metadata"]["eventId"], id);
        assert_eq!(detail["metadata"]["aggregateId"], "o-1001");
        assert_eq!(detail["data"]["amountCents"], 2598);
        assert_eq!(published[0].detail_type, "OrderCreated");
        assert_eq!(published[0].source, "test.orders");
        assert_eq!(published[1].detail_type, "OrderShipped");
        // And both are marked published
        let flipped: Vec<_> = ports
            .status
            .flips()
            .into_iter()
            .map(|(k, _)| k.sk)
            .collect();
        assert_eq!(flipped.len(), 2);
        assert!(flipped.contains(&format!("OUTBOX#{id}")));
        assert!(report.response(&records).batch_item_failures.is_empty());
        assert_eq!(
            report.counts(),
            BatchCounts {
                published: 2,
                ignored: 3,
                dead_lettered: 0,
                failed: 0
            }
        );
    }

    #[tokio::test]
    async fn poison_goes_to_the_dead_letter_queue_without_blocking() {
        // Given a non-JSON payload, an image that does not decode, and good events around them
        let ports = Ports::new(FakePublisher::default());
        let mut undecodable = outbox_insert(3, "e3", "{}");
        undecodable
            .change
            .new_image
            .insert("Status".into(), AttributeValue::N("7".into()));
        let records = vec![
            outbox_insert(1, "e1", "{}"),
            outbox_insert(2, "e2", "not json"),
            undecodable,
            outbox_insert(4, "e4", "{}"),
        ];

        // When the handler runs
        let report = ports.relay(true, false).handle(&records).await;

        // Then both poison records are dead-lettered with a reason and the full record
        assert!(
            matches!(&report.outcomes[1], RecordOutcome::DeadLettered { reason, .. } if reason.contains("not valid JSON"))
        );
        assert!(
            matches!(&report.outcomes[2], RecordOutcome::DeadLettered { reason, .. } if reason.contains("does not decode"))
        );
        let letters = ports.dead_letters.letters();
        assert_eq!(letters.len(), 2);
        let letter = letters
            .iter()
            .find(|l| l.event_id.as_deref() == Some("e2"))
            .unwrap();
        assert_eq!(letter.origin, ORIGIN);
        assert_eq!(letter.key, Some(key("e2")));
        assert_eq!(
            letter.record["dynamodb"]["NewImage"]["Payload"]["S"],
            "not json"
        );
        // And marked dead-lettered, while the events around them are published
        let flips = ports.status.flips();
        assert!(flips.contains(&(key("e2"), OutboxStatus::DeadLettered)));
        assert!(flips.contains(&(key("e3"), OutboxStatus::DeadLettered)));
        assert_eq!(ports.publisher.published().len(), 2);
        assert_eq!(report.first_unpublished, None);
    }

    #[tokio::test]
    async fn without_a_dead_letter_queue_poison_is_a_batch_item_failure() {
        let ports = Ports::new(FakePublisher::default());
        let records = vec![outbox_insert(1, "e1", "{}"), outbox_insert(2, "e2", "nope")];
        let report = ports.relay(false, false).handle(&records).await;
        let response = report.response(&records);
        assert_eq!(response.batch_item_failures.len(), 1);
        assert_eq!(
            response.batch_item_failures[0].item_identifier.as_deref(),
            Some("00000002")
        );
        assert!(
            matches!(&report.outcomes[1], RecordOutcome::Failed { reason, .. } if reason.contains("no dead-letter queue"))
        );
    }

    #[tokio::test]
    async fn a_failed_event_is_the_batch_item_failure_and_later_events_still_publish() {
        // Given a publisher that cannot publish e2
        let ports = Ports::new(FakePublisher::default().with_outcome("e2", failed()));
        let records: Vec<_> = (1..=4)
            .map(|i| outbox_insert(i, &format!("e{i}"), "{}"))
            .collect();

        // When the handler runs (default: not strict)
        let report = ports.relay(true, false).handle(&records).await;

        // Then e2's record is reported, e2 is not marked, and e3, e4 were published
        assert_eq!(report.first_unpublished, Some(1));
        assert_eq!(
            report.response(&records).batch_item_failures[0]
                .item_identifier
                .as_deref(),
            Some("00000002")
        );
        let published: Vec<_> = ports
            .publisher
            .published()
            .into_iter()
            .map(|e| e.event_id)
            .collect();
        assert_eq!(published, ["e1", "e3", "e4"]);
        assert!(
            !ports
                .status
                .flips()
                .contains(&(key("e2"), OutboxStatus::Published))
        );
    }

    #[tokio::test]
    async fn strict_mode_stops_at_the_first_failure() {
        // Given a publisher that cannot publish e3, and strict order (2 events per step)
        let ports = Ports::new(FakePublisher::default().with_outcome("e3", failed()));
        let records: Vec<_> = (1..=6)
            .map(|i| outbox_insert(i, &format!("e{i}"), "{}"))
            .collect();

        // When the handler runs
        let report = ports.relay(true, true).handle(&records).await;

        // Then the step holding e3 is the last one attempted
        let published: Vec<_> = ports
            .publisher
            .published()
            .into_iter()
            .map(|e| e.event_id)
            .collect();
        assert_eq!(published, ["e1", "e2", "e4"]);
        assert_eq!(report.first_unpublished, Some(2));
        assert_eq!(
            report.outcomes[4],
            RecordOutcome::NotAttempted {
                event_id: "e5".into()
            }
        );
        assert_eq!(ports.publisher.calls(), 2);
    }

    #[tokio::test]
    async fn rejected_entries_are_dead_lettered() {
        let ports = Ports::new(FakePublisher::default().with_outcome(
            "e1",
            PublishOutcome::Rejected {
                code: "MalformedDetail".into(),
                message: "bad".into(),
            },
        ));
        let records = vec![outbox_insert(1, "e1", "{}"), outbox_insert(2, "e2", "{}")];
        let report = ports.relay(true, false).handle(&records).await;
        assert!(
            matches!(&report.outcomes[0], RecordOutcome::DeadLettered { reason, .. } if reason.contains("MalformedDetail"))
        );
        assert_eq!(
            report.outcomes[1],
            RecordOutcome::Published {
                event_id: "e2".into()
            }
        );
        assert_eq!(report.first_unpublished, None);
    }

    #[tokio::test]
    async fn a_failed_mark_is_not_a_batch_failure() {
        // Given a status store that is throttled
        let ports = Ports {
            status: FakeStatusStore::failing(),
            ..Ports::new(FakePublisher::default())
        };
        let records = vec![outbox_insert(1, "e1", "{}")];
        // When the event is published
        let report = ports.relay(true, false).handle(&records).await;
        // Then it is reported published (the poller re-publishes it later with the same id)
        assert_eq!(
            report.outcomes[0],
            RecordOutcome::Published {
                event_id: "e1".into()
            }
        );
        assert!(report.response(&records).batch_item_failures.is_empty());
    }

    #[tokio::test]
    async fn an_unavailable_dead_letter_queue_fails_the_record() {
        let ports = Ports {
            dead_letters: FakeDeadLetters::unavailable(),
            ..Ports::new(FakePublisher::default())
        };
        let records = vec![outbox_insert(1, "e1", "{}"), outbox_insert(2, "e2", "x")];
        let report = ports.relay(true, false).handle(&records).await;
        assert_eq!(report.first_unpublished, Some(1));
    }

    #[tokio::test]
    async fn a_record_without_sequence_number_fails_the_whole_batch() {
        let ports = Ports::new(FakePublisher::default().with_outcome("e1", failed()));
        let mut record = outbox_insert(1, "e1", "{}");
        record.change.sequence_number = None;
        let records = vec![record];
        let report = ports.relay(true, false).handle(&records).await;
        let response = report.response(&records);
        assert_eq!(
            response.batch_item_failures[0].item_identifier.as_deref(),
            Some("")
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn attribute() -> impl Strategy<Value = AttributeValue> {
            let leaf = prop_oneof![
                ".{0,20}".prop_map(AttributeValue::S),
                "-?[0-9]{1,5}(\\.[0-9]{1,3})?".prop_map(AttributeValue::N),
                any::<bool>().prop_map(AttributeValue::Bool),
                Just(AttributeValue::Null(true)),
                prop::collection::vec(any::<u8>(), 0..8).prop_map(AttributeValue::B),
            ];
            leaf.prop_recursive(2, 8, 4, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..4).prop_map(AttributeValue::L),
                    prop::collection::hash_map("[a-z]{1,5}", inner, 0..4)
                        .prop_map(AttributeValue::M),
                ]
            })
        }

        fn payload() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("{}".to_owned()),
                ".{0,40}",
                "[a-z]{1,8}".prop_map(|s| format!("{{\"k\":\"{s}\"}}")),
                // Larger than the entry limit below.
                (2_000usize..6_000).prop_map(|n| format!("{{\"big\":\"{}\"}}", "x".repeat(n))),
            ]
        }

        /// A value for `name`: usually well-formed, sometimes of the wrong type or missing.
        fn field(
            name: &'static str,
            good: BoxedStrategy<String>,
        ) -> impl Strategy<Value = Option<(String, AttributeValue)>> {
            prop_oneof![
                6 => good.prop_map(move |s| Some((name.to_owned(), AttributeValue::S(s)))),
                1 => attribute().prop_map(move |a| Some((name.to_owned(), a))),
                1 => Just(None),
            ]
        }

        fn image() -> impl Strategy<Value = HashMap<String, AttributeValue>> {
            let fields = (
                field("PK", "USER#[a-z0-9]{1,6}".boxed()),
                field("SK", "OUTBOX#[a-z0-9]{1,6}".boxed()),
                field(
                    "EntityType",
                    prop_oneof![Just("OutboxEvent".to_owned()), Just("Order".to_owned())].boxed(),
                ),
                field("EventId", "[a-z0-9-]{0,12}".boxed()),
                field("EventType", "[A-Za-z ]{0,12}".boxed()),
                field("Payload", payload().boxed()),
                field(
                    "Status",
                    prop_oneof![
                        Just("PENDING".to_owned()),
                        Just("PUBLISHED".to_owned()),
                        ".{0,8}".prop_map(String::from)
                    ]
                    .boxed(),
                ),
                field(
                    "CreatedAt",
                    prop_oneof![
                        Just("2026-11-28T08:00:00.000Z".to_owned()),
                        ".{0,10}".prop_map(String::from)
                    ]
                    .boxed(),
                ),
                prop::option::of(attribute()),
                prop::collection::hash_map("[A-Za-z]{1,8}", attribute(), 0..3),
            );
            fields.prop_map(
                |(pk, sk, et, id, ty, payload, status, created, sequence, extra)| {
                    let mut image: HashMap<String, AttributeValue> = extra;
                    image.extend(
                        [pk, sk, et, id, ty, payload, status, created]
                            .into_iter()
                            .flatten(),
                    );
                    if let Some(sequence) = sequence {
                        image.insert("Sequence".into(), sequence);
                    }
                    image
                },
            )
        }

        fn record() -> impl Strategy<Value = EventRecord> {
            (
                prop_oneof![
                    4 => Just("INSERT".to_owned()),
                    1 => Just("MODIFY".to_owned()),
                    1 => Just("REMOVE".to_owned()),
                    1 => "[A-Z]{0,6}".prop_map(String::from),
                ],
                image(),
                prop::option::of("[0-9]{1,20}"),
            )
                .prop_map(|(name, image, seq)| {
                    let mut record = EventRecord::default();
                    record.event_name = name;
                    record.change.new_image = image.into();
                    record.change.sequence_number = seq;
                    record
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

            #[test]
            fn every_record_ends_ignored_published_or_dead_lettered(records in prop::collection::vec(record(), 0..12)) {
                let ports = Ports::new(FakePublisher::default().with_max_entry_bytes(4_096));
                let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
                let report = runtime.block_on(ports.relay(true, false).handle(&records));

                prop_assert_eq!(report.outcomes.len(), records.len());
                prop_assert_eq!(report.first_unpublished, None);
                let mut published = 0;
                for (record, outcome) in records.iter().zip(&report.outcomes) {
                    match outcome {
                        RecordOutcome::Ignored(_) => {}
                        RecordOutcome::Published { .. } => {
                            published += 1;
                            prop_assert_eq!(record.event_name.as_str(), "INSERT");
                        }
                        RecordOutcome::DeadLettered { reason, .. } => prop_assert!(!reason.is_empty()),
                        other => prop_assert!(false, "unexpected outcome {:?}", other),
                    }
                }
                let sent = ports.publisher.published();
                prop_assert_eq!(sent.len(), published);
                for event in sent {
                    let detail: serde_json::Value = serde_json::from_str(&event.detail).unwrap();
                    prop_assert_eq!(detail["metadata"]["eventId"].as_str(), Some(event.event_id.as_str()));
                }
                prop_assert_eq!(ports.dead_letters.letters().len() as u64, report.counts().dead_lettered);
            }
        }
    }
}
