//! The stream handler: one DynamoDB Streams batch in, one partial-batch response out.
//!
//! Each record ends in exactly one [`RecordOutcome`]: ignored (not an outbox `INSERT`, nor a TTL
//! deletion of a pending outbox item, whose event is published from the old image), published
//! (and marked published), dead-lettered (poison, with a reason), or failed (not published now;
//! Lambda re-delivers from the first such record). Success is never reported for an event that
//! was not published.
//!
//! Marking an item published happens after the publish. If marking fails (throttling, say), the
//! event *was* published, so the record is not reported as a failure: re-delivering it would only
//! publish a duplicate. The item stays in the pending index, and the poller re-publishes it with
//! the same `eventId` after its grace period; consumers de-duplicate on that id. One rare duplicate
//! is the price of never re-driving a whole shard for a bookkeeping write.
//!
//! The per-event part (an item becomes an event or a poison case; dead-letter then mark; mark
//! concurrently) is `relay_runtime::relay`, shared with the poller; this module is the batch
//! loop around it: what the stream carries, strict order, and the checkpoint Lambda resumes from.

use std::collections::HashMap;

use aws_lambda_events::dynamodb::EventRecord;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use chrono::Utc;
use outbox_shared::schema::{attr, entity};
use outbox_shared::{ItemKey, OutboxItem, OutboxStatus};
use relay_runtime::{
    DeadLetterSink, EventRelay, PublishOutcome, Publisher, ReadyEvents, Settled, StatusStore,
};
use serde_dynamo::AttributeValue;

use crate::metrics as m;

/// `origin` of the dead letters this relay sends.
pub const ORIGIN: &str = "relay-stream";

/// Default for `MARK_CONCURRENCY`: one status update per record of a default-sized (100) batch,
/// so marking a batch published costs one round trip.
pub const DEFAULT_MARK_CONCURRENCY: usize = 100;

/// Default for `DEADLINE_MARGIN`: no publish starts later than this before the invocation's
/// deadline. It covers a call already in flight (bounded by the SDK's operation timeout,
/// `relay_runtime::SDK_OPERATION_TIMEOUT`) and the marks after it.
pub const DEFAULT_DEADLINE_MARGIN: std::time::Duration = std::time::Duration::from_secs(12);

/// The stream `eventName` of a new item.
const INSERT: &str = "INSERT";
/// The stream `eventName` of a deleted item.
const REMOVE: &str = "REMOVE";
/// `userIdentity` of a deletion by DynamoDB's TTL: `type` and `principalId`.
const TTL_DELETION_IDENTITY: (&str, &str) = ("Service", "dynamodb.amazonaws.com");

/// How the handler publishes. Where and as whom is the publisher's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerOptions {
    /// Stop at the first event that could not be published: nothing after it is attempted, so
    /// nothing after it can overtake it.
    pub stop_at_first_failure: bool,
    /// Events per publish chunk in strict mode (one `PutEvents` call's worth).
    pub strict_chunk_size: usize,
    /// Status updates in flight at once.
    pub mark_concurrency: usize,
    /// No publish starts later than this before the invocation's deadline.
    pub deadline_margin: std::time::Duration,
    /// Leave an aggregate whose event fails to the poller instead of blocking the stream shard:
    /// the failed event and its aggregate's later events stay pending (the poller publishes them
    /// in order after its grace period), the batch reports success for them, and later batches
    /// publish none of the aggregate's events until the poller has released it.
    pub hold_failed_aggregates: bool,
}

impl Default for HandlerOptions {
    fn default() -> Self {
        Self {
            stop_at_first_failure: false,
            strict_chunk_size: outbox_shared::limits::PUT_EVENTS_MAX_ENTRIES,
            mark_concurrency: DEFAULT_MARK_CONCURRENCY,
            deadline_margin: DEFAULT_DEADLINE_MARGIN,
            hold_failed_aggregates: false,
        }
    }
}

/// Why a record was not for this relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IgnoreReason {
    /// A `MODIFY`, or a `REMOVE` that is not a TTL deletion (a user's delete).
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
    /// Left pending for the poller: its aggregate is held (`hold_failed_aggregates`).
    Held {
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
    /// Left pending for the poller (`hold_failed_aggregates`).
    pub held: u64,
}

impl std::ops::AddAssign for BatchCounts {
    fn add_assign(&mut self, other: Self) {
        self.published += other.published;
        self.ignored += other.ignored;
        self.dead_lettered += other.dead_lettered;
        self.failed += other.failed;
        self.held += other.held;
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
                RecordOutcome::Held { .. } => counts.held += 1,
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

/// The handler, generic over its ports.
#[derive(Debug, Clone)]
pub struct StreamRelay<P, S, D> {
    relay: EventRelay<P, S, D>,
    options: HandlerOptions,
}

impl<P: Publisher, S: StatusStore, D: DeadLetterSink> StreamRelay<P, S, D> {
    /// A relay that sends poison records to `dead_letters`, or reports them as batch item
    /// failures when it is `None`.
    pub fn new(publisher: P, status: S, dead_letters: Option<D>, options: HandlerOptions) -> Self {
        Self {
            relay: EventRelay::new(
                publisher,
                status,
                dead_letters,
                ORIGIN,
                options.mark_concurrency,
            ),
            options,
        }
    }

    pub fn publisher(&self) -> &P {
        self.relay.publisher()
    }

    pub fn options(&self) -> &HandlerOptions {
        &self.options
    }

    /// Handles one batch of stream records, with no deadline.
    pub async fn handle(&self, records: &[EventRecord]) -> BatchReport {
        self.handle_until(records, None).await
    }

    /// Handles one batch of stream records that must be done by `deadline` (the invocation's):
    /// no publish starts after `deadline` minus the margin; what was published by then is marked,
    /// and the first record not published is the batch item failure.
    pub async fn handle_until(
        &self,
        records: &[EventRecord],
        deadline: Option<tokio::time::Instant>,
    ) -> BatchReport {
        let stop_at = deadline.map(|d| {
            d.checked_sub(self.options.deadline_margin)
                .unwrap_or_else(tokio::time::Instant::now)
        });
        let mut outcomes: Vec<Option<RecordOutcome>> = vec![None; records.len()];
        let mut ready = ReadyEvents::with_capacity(records.len());
        let mut poison = Vec::new();
        for (index, record) in records.iter().enumerate() {
            match decode(record, index) {
                Decoded::Ignore(reason) => outcomes[index] = Some(RecordOutcome::Ignored(reason)),
                Decoded::Poison(p) => poison.push(*p),
                Decoded::Item(item) => {
                    if let Err(p) = ready.push_item(*item, index) {
                        poison.push(p);
                    }
                }
            }
        }

        if self.options.hold_failed_aggregates {
            self.leave_held_aggregates(records, &mut ready, &mut outcomes)
                .await;
        }
        let results = self.publish(ready.events(), stop_at).await;
        let published_at = Utc::now();
        let settled = self
            .relay
            .settle(ready, results, poison, |&index| {
                dead_letter_record(&records[index])
            })
            .await;
        let mut max_lag_ms: Option<i64> = None;
        let settled = if self.options.hold_failed_aggregates {
            self.hold_failed(records, settled, &mut outcomes).await
        } else {
            settled
        };
        for result in settled {
            let (index, outcome) = match result {
                Settled::Published {
                    event_id,
                    source,
                    mark,
                    ..
                } => {
                    // A failed mark is not a batch failure: see the module docs.
                    if mark.is_err() {
                        m::mark_failed();
                    }
                    let lag = (published_at
                        - records[source].change.approximate_creation_date_time)
                        .num_milliseconds();
                    max_lag_ms = Some(max_lag_ms.map_or(lag, |l| l.max(lag)));
                    (source, RecordOutcome::Published { event_id })
                }
                Settled::Failed {
                    event_id,
                    code,
                    message,
                    source,
                    ..
                } => (
                    source,
                    RecordOutcome::Failed {
                        event_id: Some(event_id),
                        reason: format!("{code}: {message}"),
                    },
                ),
                Settled::NotAttempted {
                    event_id, source, ..
                }
                | Settled::HeldBack {
                    event_id, source, ..
                } => (source, RecordOutcome::NotAttempted { event_id }),
                Settled::DeadLettered { poison, mark } => {
                    if matches!(mark, Some(Err(_))) {
                        m::mark_failed();
                    }
                    (
                        poison.source,
                        RecordOutcome::DeadLettered {
                            event_id: poison.event_id,
                            reason: poison.reason,
                        },
                    )
                }
                Settled::NotDeadLettered {
                    poison,
                    error: None,
                } => (
                    poison.source,
                    RecordOutcome::Failed {
                        event_id: poison.event_id,
                        reason: format!(
                            "poison (no dead-letter queue configured): {}",
                            poison.reason
                        ),
                    },
                ),
                Settled::NotDeadLettered {
                    poison,
                    error: Some(err),
                } => (
                    poison.source,
                    RecordOutcome::Failed {
                        event_id: poison.event_id,
                        reason: format!("dead-letter queue unavailable: {err}"),
                    },
                ),
            };
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

    /// Hold mode, before publishing: the events of aggregates already held stay pending for the
    /// poller. If the holds can't be read, nothing is published (the batch is re-delivered): an
    /// event must not overtake a held one.
    async fn leave_held_aggregates(
        &self,
        records: &[EventRecord],
        ready: &mut ReadyEvents<usize>,
        outcomes: &mut [Option<RecordOutcome>],
    ) {
        let mut keys: Vec<String> = ready
            .events()
            .iter()
            .map(|e| e.ordering_key.clone())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return;
        }
        let left: Vec<_> = match self.relay.status().held(&keys).await {
            Ok(held) if held.is_empty() => return,
            Ok(held) => ready.take_if(|e| held.contains(&e.ordering_key)),
            Err(err) => {
                tracing::warn!(error = %outbox_shared::error::describe(&err), "could not read the aggregate holds; the batch is re-delivered");
                for (_, event, index) in ready.take_if(|_| true) {
                    outcomes[index] = Some(RecordOutcome::NotAttempted {
                        event_id: event.event_id,
                    });
                }
                return;
            }
        };
        for (_, event, index) in left {
            tracing::info!(event_id = %event.event_id, sequence = ?records[index].change.sequence_number, "aggregate held: left to the poller");
            outcomes[index] = Some(RecordOutcome::Held {
                event_id: event.event_id,
            });
        }
    }

    /// Hold mode, after publishing: each aggregate with an event that failed (and the later ones
    /// held back behind it) is held, and those events are left to the poller. If the hold can't
    /// be written, they are failures as without the mode (the batch is re-delivered from them).
    async fn hold_failed(
        &self,
        records: &[EventRecord],
        settled: Vec<Settled<usize>>,
        outcomes: &mut [Option<RecordOutcome>],
    ) -> Vec<Settled<usize>> {
        let mut partitions: HashMap<String, String> = HashMap::new();
        for result in &settled {
            if let Settled::Failed {
                ordering_key,
                source,
                ..
            }
            | Settled::HeldBack {
                ordering_key,
                source,
                ..
            } = result
            {
                let partition = string_attr(&records[*source].change.new_image, attr::GSI1PK)
                    .or_else(|| string_attr(&records[*source].change.old_image, attr::GSI1PK))
                    .unwrap_or_default();
                partitions
                    .entry(ordering_key.clone())
                    .or_insert_with(|| partition.to_owned());
            }
        }
        if partitions.is_empty() {
            return settled;
        }
        let holds = futures::future::join_all(partitions.iter().map(|(key, partition)| async move {
            let result = self.relay.status().hold(key, partition).await;
            if let Err(err) = &result {
                tracing::warn!(ordering_key = %key, error = %outbox_shared::error::describe(&err), "could not hold the aggregate; its events are re-delivered");
            }
            (key.clone(), result.is_ok())
        }))
        .await;
        let held: std::collections::HashSet<String> = holds
            .into_iter()
            .filter_map(|(key, ok)| ok.then_some(key))
            .collect();
        m::held(held.len() as u64);
        settled
            .into_iter()
            .filter_map(|result| match result {
                Settled::Failed {
                    ordering_key,
                    event_id,
                    source,
                    ..
                }
                | Settled::HeldBack {
                    ordering_key,
                    event_id,
                    source,
                    ..
                } if held.contains(&ordering_key) => {
                    outcomes[source] = Some(RecordOutcome::Held { event_id });
                    None
                }
                other => Some(other),
            })
            .collect()
    }

    /// Publishes `events`, starting nothing after `stop_at`; `None` for events not attempted
    /// (strict mode, after a failure).
    async fn publish(
        &self,
        events: &[outbox_shared::OutboundEvent],
        stop_at: Option<tokio::time::Instant>,
    ) -> Vec<Option<PublishOutcome>> {
        if !self.options.stop_at_first_failure {
            return self
                .relay
                .publish_until(events, stop_at)
                .await
                .into_iter()
                .map(Some)
                .collect();
        }
        let mut results = Vec::with_capacity(events.len());
        for chunk in events.chunks(self.options.strict_chunk_size.max(1)) {
            let outcomes = self.relay.publish_until(chunk, stop_at).await;
            let failed = outcomes.iter().any(|o| {
                matches!(
                    o,
                    PublishOutcome::Failed { .. }
                        | PublishOutcome::HeldBack
                        | PublishOutcome::NotSent
                )
            });
            results.extend(outcomes.into_iter().map(Some));
            if failed {
                break;
            }
        }
        results.resize(events.len(), None);
        results
    }
}

/// The full stream record, as the dead letter carries it.
fn dead_letter_record(record: &EventRecord) -> serde_json::Value {
    serde_json::to_value(record).unwrap_or_else(|e| {
        serde_json::Value::String(format!("record could not be serialized: {e}"))
    })
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
    from(&record.change.keys)
        .or_else(|| from(&record.change.new_image))
        .or_else(|| from(&record.change.old_image))
}

/// What a record is, before publishing.
enum Decoded {
    Ignore(IgnoreReason),
    /// Boxed, like the item.
    Poison(Box<relay_runtime::Poison<usize>>),
    /// Boxed: the common case moves one pointer, not the whole item.
    Item(Box<OutboxItem>),
}

/// Whether `record` is DynamoDB's TTL deleting an item (its `userIdentity` is the TTL service).
fn is_ttl_deletion(record: &EventRecord) -> bool {
    record.event_name == REMOVE
        && record.user_identity.as_ref().is_some_and(|identity| {
            (identity.type_.as_str(), identity.principal_id.as_str()) == TTL_DELETION_IDENTITY
        })
}

/// Decodes the record at `index` of its batch: an outbox `INSERT` (its new image), or a TTL
/// deletion of a pending outbox item (its old image: the event was never published, and this
/// record is the last place it exists).
fn decode(record: &EventRecord, index: usize) -> Decoded {
    let image = if record.event_name == INSERT {
        &record.change.new_image
    } else if is_ttl_deletion(record) {
        &record.change.old_image
    } else {
        return Decoded::Ignore(IgnoreReason::NotInsert(record.event_name.clone()));
    };
    if string_attr(image, attr::ENTITY_TYPE) != Some(entity::OUTBOX_EVENT) {
        return Decoded::Ignore(IgnoreReason::NotOutboxEvent);
    }
    // Decoded through a reference: the record stays whole for the dead-letter queue and the
    // response, and nothing is cloned but the item's own fields.
    match outbox_shared::image::from_image::<OutboxItem>(image) {
        Ok(item) if item.status != OutboxStatus::Pending => {
            Decoded::Ignore(IgnoreReason::NotPending(item.status))
        }
        Ok(item) => Decoded::Item(Box::new(item)),
        Err(err) => Decoded::Poison(Box::new(relay_runtime::Poison::undecodable(
            record_key(record),
            string_attr(image, attr::EVENT_ID).map(str::to_owned),
            err,
            index,
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lambda_events::dynamodb::Event;
    use relay_runtime::testing::{FakeDeadLetters, FakePublisher, FakeStatusStore};
    use serde_json::json;

    const AWS_SAMPLE: &str = include_str!("../../tests/fixtures/stream/aws-sample-event.json");
    const AWS_LAMBDA_EVENTS_SAMPLE: &str =
        include_str!("../../tests/fixtures/stream/aws-lambda-events-sample.json");
    const OUTBOX_BATCH: &str = include_str!("../../tests/fixtures/stream/outbox-batch.json");
    const REMOVALS_OF_PENDING_EVENTS: &str =
        include_str!("../../tests/fixtures/stream/removals-of-pending-events.json");

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
            let options = HandlerOptions {
                stop_at_first_failure: strict,
                strict_chunk_size: 2,
                ..HandlerOptions::default()
            };
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
                RecordOutcome::Ignored(IgnoreReason::NotPending(OutboxStatus::Published)),
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
        assert_eq!(published[1].detail_type, "OrderShipped");
        // And both are marked published
        let marked: Vec<_> = ports
            .status
            .marks()
            .into_iter()
            .map(|(k, _)| k.sk)
            .collect();
        assert_eq!(marked.len(), 2);
        assert!(marked.contains(&format!("OUTBOX#{id}")));
        assert!(report.response(&records).batch_item_failures.is_empty());
        assert_eq!(
            report.counts(),
            BatchCounts {
                published: 2,
                ignored: 3,
                dead_lettered: 0,
                failed: 0,
                held: 0
            }
        );
    }

    /// An outbox INSERT of `event_id` in aggregate `aggregate`.
    fn aggregate_insert(seq: u32, event_id: &str, aggregate: &str) -> EventRecord {
        let mut record = outbox_insert(seq, event_id, "{}");
        record.change.new_image.insert(
            "AggregateId".into(),
            AttributeValue::S(aggregate.to_owned()),
        );
        record
    }

    #[tokio::test]
    async fn a_failing_aggregate_is_left_to_the_poller_and_the_rest_is_published_at_once() {
        // Given aggregate x whose first event keeps failing, and aggregate y healthy
        let ports = Ports::new(FakePublisher::default().with_outcome("x1", failed()));
        let options = HandlerOptions {
            hold_failed_aggregates: true,
            ..HandlerOptions::default()
        };
        let relay = StreamRelay::new(
            &ports.publisher,
            &ports.status,
            Some(&ports.dead_letters),
            options,
        );

        // When a batch holds x1, y1, x2, and the next one x3, y2
        let first_batch = vec![
            aggregate_insert(1, "x1", "x"),
            aggregate_insert(2, "y1", "y"),
            aggregate_insert(3, "x2", "x"),
        ];
        let first = relay.handle(&first_batch).await;
        let second_batch = vec![
            aggregate_insert(4, "x3", "x"),
            aggregate_insert(5, "y2", "y"),
        ];
        let second = relay.handle(&second_batch).await;

        // Then y's events are published at once and x's are left pending for the poller, with
        // no record re-delivered
        let held = |id: &str| RecordOutcome::Held {
            event_id: id.into(),
        };
        let published = |id: &str| RecordOutcome::Published {
            event_id: id.into(),
        };
        assert_eq!(
            first.outcomes,
            vec![held("x1"), published("y1"), held("x2")]
        );
        assert_eq!(second.outcomes, vec![held("x3"), published("y2")]);
        assert!(first.response(&first_batch).batch_item_failures.is_empty());
        assert!(
            second
                .response(&second_batch)
                .batch_item_failures
                .is_empty()
        );
        // And x is held at the partition of its failed event; none of x's events was published
        // or marked
        assert_eq!(
            ports.status.holds(),
            HashMap::from([("x".to_owned(), "OUTBOX#PENDING#1".to_owned())])
        );
        let sent: Vec<String> = ports
            .publisher
            .published()
            .into_iter()
            .map(|e| e.event_id)
            .collect();
        assert_eq!(sent, ["y1", "y2"]);
        assert_eq!(ports.status.marks().len(), 2);
        assert_eq!(first.counts().held, 2);
    }

    #[tokio::test]
    async fn without_the_mode_a_failing_aggregate_is_the_batch_item_failure() {
        // Given the same batch, without hold mode
        let ports = Ports::new(FakePublisher::default().with_outcome("x1", failed()));
        let batch = vec![
            aggregate_insert(1, "x1", "x"),
            aggregate_insert(2, "y1", "y"),
            aggregate_insert(3, "x2", "x"),
        ];

        // When it is handled
        let report = ports.relay(true, false).handle(&batch).await;

        // Then x1 is the batch item failure, x2 was not sent, y1 was published
        assert_eq!(report.first_unpublished, Some(0));
        assert!(matches!(
            report.outcomes[2],
            RecordOutcome::NotAttempted { .. }
        ));
        assert!(ports.status.holds().is_empty());
    }

    #[tokio::test]
    async fn a_ttl_deletion_of_a_pending_event_is_published_and_a_users_delete_is_not() {
        // Given a TTL deletion of a pending outbox item and a user's delete of another one
        let ports = Ports::new(FakePublisher::default());
        let records = records(REMOVALS_OF_PENDING_EVENTS);
        assert_eq!(records.len(), 2);

        // When the handler runs
        let report = ports.relay(true, false).handle(&records).await;

        // Then the TTL-deleted event is published once from its old image, with its event id,
        // and the user's delete is ignored
        assert_eq!(
            report.outcomes,
            vec![
                RecordOutcome::Published {
                    event_id: "0194b001-0000-7000-8000-000000000001".into()
                },
                RecordOutcome::Ignored(IgnoreReason::NotInsert("REMOVE".into())),
            ]
        );
        let published = ports.publisher.published();
        assert_eq!(published.len(), 1);
        let detail: serde_json::Value = serde_json::from_str(&published[0].detail).unwrap();
        assert_eq!(
            detail["metadata"]["eventId"],
            "0194b001-0000-7000-8000-000000000001"
        );
        assert_eq!(detail["data"]["orderId"], "o-91");
        assert!(report.response(&records).batch_item_failures.is_empty());
    }

    #[tokio::test]
    async fn a_ttl_deletion_of_a_poison_event_is_dead_lettered_with_its_record() {
        // Given a TTL deletion of a pending item whose payload is not JSON
        let ports = Ports::new(FakePublisher::default());
        let mut records = records(REMOVALS_OF_PENDING_EVENTS);
        records.truncate(1);
        records[0]
            .change
            .old_image
            .insert("Payload".into(), AttributeValue::S("not json {".into()));

        // When the handler runs
        let report = ports.relay(true, false).handle(&records).await;

        // Then it is dead-lettered with the whole record (the old image in it)
        assert!(
            matches!(&report.outcomes[0], RecordOutcome::DeadLettered { event_id: Some(id), .. } if id == "0194b001-0000-7000-8000-000000000001"),
            "{report:?}"
        );
        let letters = ports.dead_letters.letters();
        assert_eq!(letters.len(), 1);
        assert_eq!(letters[0].record["eventName"], "REMOVE");
        assert_eq!(
            letters[0].record["dynamodb"]["OldImage"]["Payload"]["S"],
            "not json {"
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
        let marks = ports.status.marks();
        assert!(marks.contains(&(key("e2"), OutboxStatus::DeadLettered)));
        assert!(marks.contains(&(key("e3"), OutboxStatus::DeadLettered)));
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
                .marks()
                .contains(&(key("e2"), OutboxStatus::Published))
        );
    }

    #[tokio::test]
    async fn strict_mode_stops_at_the_first_failure() {
        // Given a publisher that cannot publish e3, and strict order (2 events per chunk)
        let ports = Ports::new(FakePublisher::default().with_outcome("e3", failed()));
        let records: Vec<_> = (1..=6)
            .map(|i| outbox_insert(i, &format!("e{i}"), "{}"))
            .collect();

        // When the handler runs
        let report = ports.relay(true, true).handle(&records).await;

        // Then the chunk holding e3 is the last one attempted
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
