use super::*;
use aws_lambda_events::dynamodb::Event;
use std::collections::HashMap;

use aws_lambda_events::dynamodb::EventRecord;
use outbox_shared::{ItemKey, OutboxStatus};
use relay_runtime::testing::{
    FakeAdoption, FakeDeadLetters, FakeHoldStore, FakePublisher, FakeStatusStore, left_event,
};
use relay_runtime::{AggregateHolds, Deadline, LeftEvent, PublishOutcome};
use serde_dynamo::AttributeValue;
use serde_json::json;

const AWS_SAMPLE: &str = include_str!("../../../tests/fixtures/stream/aws-sample-event.json");
const AWS_LAMBDA_EVENTS_SAMPLE: &str =
    include_str!("../../../tests/fixtures/stream/aws-lambda-events-sample.json");
const OUTBOX_BATCH: &str = include_str!("../../../tests/fixtures/stream/outbox-batch.json");
const REMOVALS_OF_PENDING_EVENTS: &str =
    include_str!("../../../tests/fixtures/stream/removals-of-pending-events.json");

type Relay<'a> =
    StreamRelay<&'a FakePublisher, &'a FakeStatusStore, &'a FakeDeadLetters, &'a FakeHoldStore>;

struct Ports {
    publisher: FakePublisher,
    status: FakeStatusStore,
    holds: FakeHoldStore,
    dead_letters: FakeDeadLetters,
}

impl Ports {
    fn new(publisher: FakePublisher) -> Self {
        Self {
            publisher,
            status: FakeStatusStore::default(),
            holds: FakeHoldStore::default(),
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
            &self.holds,
            dead_letter_queue.then_some(&self.dead_letters),
            options,
        )
    }
}

impl Ports {
    /// The relay over these ports with `options`, sending poison to the dead-letter queue.
    fn relay_with(&self, options: HandlerOptions) -> Relay<'_> {
        StreamRelay::new(
            &self.publisher,
            &self.status,
            &self.holds,
            Some(&self.dead_letters),
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
                "GSI1PK": {"S": "OUTBOX#PENDING#1"},
                    "GSI1SK": {"S": format!("EVENT#2026-11-28T08:00:00.000Z#{event_id}")}
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
        let report = ports
            .relay(true, false)
            .handle(&records, Deadline::NONE)
            .await;

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
    let report = ports
        .relay(true, false)
        .handle(&records, Deadline::NONE)
        .await;

    // Then exactly the two outbox INSERTs are published, with the documented envelope
    let id = "0194f7c2-8a4b-7d3e-9c1a-2b3c4d5e6f70";
    assert_eq!(
        report.outcomes,
        vec![
            RecordOutcome::Ignored(IgnoreReason::NotOutboxEvent),
            RecordOutcome::Published {
                event_id: id.into(),
                marked: true,
            },
            RecordOutcome::Ignored(IgnoreReason::NotInsert("MODIFY".into())),
            RecordOutcome::Ignored(IgnoreReason::NotPending(OutboxStatus::Published)),
            RecordOutcome::Published {
                event_id: "evt-minimal-1".into(),
                marked: true,
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
            not_sent: 0,
            left_to_hold: 0,
            not_marked: 0,
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
    let relay = hold_mode(&ports);

    // When a batch holds x1, y1, x2, and the next one x3, y2
    let first_batch = vec![
        aggregate_insert(1, "x1", "x"),
        aggregate_insert(2, "y1", "y"),
        aggregate_insert(3, "x2", "x"),
    ];
    let first = relay.handle(&first_batch, Deadline::NONE).await;
    let second_batch = vec![
        aggregate_insert(4, "x3", "x"),
        aggregate_insert(5, "y2", "y"),
    ];
    let second = relay.handle(&second_batch, Deadline::NONE).await;

    // Then y's events are published at once and x's are left pending for the poller, with
    // no record re-delivered
    let held = |id: &str| RecordOutcome::LeftToHold {
        event_id: id.into(),
    };
    let published = |id: &str| RecordOutcome::Published {
        event_id: id.into(),
        marked: true,
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
        ports.holds.holds(),
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
    assert_eq!(first.counts().left_to_hold, 2);
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
    let report = ports
        .relay(true, false)
        .handle(&batch, Deadline::NONE)
        .await;

    // Then x1 is the batch item failure, x2 was not sent, y1 was published
    assert_eq!(report.first_unpublished, Some(0));
    assert!(matches!(report.outcomes[2], RecordOutcome::NotSent { .. }));
    assert!(ports.holds.holds().is_empty());
}

#[tokio::test]
async fn a_ttl_deletion_of_a_pending_event_is_published_and_a_users_delete_is_not() {
    // Given a TTL deletion of a pending outbox item and a user's delete of another one
    let ports = Ports::new(FakePublisher::default());
    let records = records(REMOVALS_OF_PENDING_EVENTS);
    assert_eq!(records.len(), 2);

    // When the handler runs
    let report = ports
        .relay(true, false)
        .handle(&records, Deadline::NONE)
        .await;

    // Then the TTL-deleted event is published once from its old image, with its event id,
    // and the user's delete is ignored
    assert_eq!(
        report.outcomes,
        vec![
            RecordOutcome::Published {
                event_id: "0194b001-0000-7000-8000-000000000001".into(),
                marked: true,
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
    let report = ports
        .relay(true, false)
        .handle(&records, Deadline::NONE)
        .await;

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
    // And its item, which the TTL deleted, is put back from the old image, DEAD_LETTERED (so a
    // letter too large for its queue to carry the record still names a copy): no update of an
    // item that is not there
    let recreated = ports.status.recreated();
    assert_eq!(recreated.len(), 1, "the item put back");
    let old_image: relay_runtime::recreate::Attributes = records[0].change.old_image.clone().into();
    assert_eq!(recreated[0]["SK"], old_image["SK"]);
    assert_eq!(recreated[0]["Payload"], old_image["Payload"]);
    assert_eq!(recreated[0]["Status"].as_s().unwrap(), "DEAD_LETTERED");
    assert!(ports.status.marks().is_empty());
}

#[tokio::test]
async fn only_a_ttl_deletions_event_carries_its_gone_items_image() {
    // Given a TTL deletion of a pending event and an INSERT of one
    let deletion = ttl_deletion_of_a_pending_event();
    let insert = outbox_insert(1, "e1", "{}");

    // When they are decoded
    let encoding = outbox_shared::envelope::Encoding::envelope();
    let (gone, new) = (
        decode::decode(&deletion, &encoding, None),
        decode::decode(&insert, &encoding, None),
    );

    // Then the deletion's event carries the old image (its item is gone), the insert's nothing
    let expected: relay_runtime::recreate::Attributes = deletion.change.old_image.clone().into();
    assert_eq!(gone.gone_item, Some(expected));
    assert_eq!(new.gone_item, None);
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
    let report = ports
        .relay(true, false)
        .handle(&records, Deadline::NONE)
        .await;

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
    let report = ports
        .relay(false, false)
        .handle(&records, Deadline::NONE)
        .await;
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
    let report = ports
        .relay(true, false)
        .handle(&records, Deadline::NONE)
        .await;

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
async fn a_redelivered_batch_does_not_publish_again_what_the_relay_published() {
    // Given a publisher that cannot publish e2, and a batch of 4 whose e2 is the item failure
    let ports = Ports::new(FakePublisher::default().with_outcome("e2", failed()));
    let relay = ports.relay(true, false);
    let records: Vec<_> = (1..=4)
        .map(|i| outbox_insert(i, &format!("e{i}"), "{}"))
        .collect();
    let first = relay.handle(&records, Deadline::NONE).await;
    let failed_at = first.first_unpublished.expect("e2 is re-delivered");

    // When Lambda re-delivers the batch from e2 to the same (warm) relay
    let again = relay.handle(&records[failed_at..], Deadline::NONE).await;

    // Then e2 is attempted again (it was never published) and still the item failure, while
    // e3 and e4 are reported published and marked again, not published a second time
    assert_eq!(again.first_unpublished, Some(0));
    assert!(
        matches!(&again.outcomes[0], RecordOutcome::Failed { event_id: Some(id), .. } if id == "e2")
    );
    for (outcome, id) in again.outcomes[1..].iter().zip(["e3", "e4"]) {
        assert_eq!(
            outcome,
            &RecordOutcome::Published {
                event_id: id.into(),
                marked: true,
            }
        );
    }
    let published: Vec<_> = ports
        .publisher
        .published()
        .into_iter()
        .map(|e| e.event_id)
        .collect();
    assert_eq!(published, ["e1", "e3", "e4"]);
    let marks_of_e3 = ports
        .status
        .marks()
        .into_iter()
        .filter(|(k, _)| *k == key("e3"))
        .count();
    assert_eq!(marks_of_e3, 2, "marked again on the re-delivery");
}

#[tokio::test]
async fn strict_mode_stops_at_the_first_failure() {
    // Given a publisher that cannot publish e3, and strict order (2 events per chunk)
    let ports = Ports::new(FakePublisher::default().with_outcome("e3", failed()));
    let records: Vec<_> = (1..=6)
        .map(|i| outbox_insert(i, &format!("e{i}"), "{}"))
        .collect();

    // When the handler runs
    let report = ports
        .relay(true, true)
        .handle(&records, Deadline::NONE)
        .await;

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
        RecordOutcome::NotSent {
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
    let report = ports
        .relay(true, false)
        .handle(&records, Deadline::NONE)
        .await;
    assert!(
        matches!(&report.outcomes[0], RecordOutcome::DeadLettered { reason, .. } if reason.contains("MalformedDetail"))
    );
    assert_eq!(
        report.outcomes[1],
        RecordOutcome::Published {
            event_id: "e2".into(),
            marked: true,
        }
    );
    assert_eq!(report.first_unpublished, None);
}

#[tokio::test]
async fn a_failed_mark_is_not_a_batch_failure_and_is_counted_not_marked() {
    // Given a status store that is throttled, an event and a poison record
    let ports = Ports {
        status: FakeStatusStore::failing(),
        ..Ports::new(FakePublisher::default())
    };
    let records = vec![outbox_insert(1, "e1", "{}"), outbox_insert(2, "e2", "x")];
    // When the batch is handled
    let report = ports
        .relay(true, false)
        .handle(&records, Deadline::NONE)
        .await;
    // Then the event is reported published and the poison dead-lettered, both not marked (the
    // poller handles them again later, with the same id), and no record is re-delivered
    assert_eq!(
        report.outcomes[0],
        RecordOutcome::Published {
            event_id: "e1".into(),
            marked: false,
        }
    );
    assert!(matches!(
        report.outcomes[1],
        RecordOutcome::DeadLettered { marked: false, .. }
    ));
    assert!(report.response(&records).batch_item_failures.is_empty());
    let counts = report.counts();
    assert_eq!(
        (counts.published, counts.dead_lettered, counts.not_marked),
        (1, 1, 2)
    );
}

#[tokio::test]
async fn an_unavailable_dead_letter_queue_fails_the_record() {
    let ports = Ports {
        dead_letters: FakeDeadLetters::unavailable(),
        ..Ports::new(FakePublisher::default())
    };
    let records = vec![outbox_insert(1, "e1", "{}"), outbox_insert(2, "e2", "x")];
    let report = ports
        .relay(true, false)
        .handle(&records, Deadline::NONE)
        .await;
    assert_eq!(report.first_unpublished, Some(1));
}

#[tokio::test]
async fn a_record_without_sequence_number_fails_the_whole_batch() {
    let ports = Ports::new(FakePublisher::default().with_outcome("e1", failed()));
    let mut record = outbox_insert(1, "e1", "{}");
    record.change.sequence_number = None;
    let records = vec![record];
    let report = ports
        .relay(true, false)
        .handle(&records, Deadline::NONE)
        .await;
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
                prop::collection::hash_map("[a-z]{1,5}", inner, 0..4).prop_map(AttributeValue::M),
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
            let report = runtime.block_on(ports.relay(true, false).handle(&records, Deadline::NONE));

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

/// Hold mode's relay over `ports`.
fn hold_mode(ports: &Ports) -> Relay<'_> {
    ports.relay_with(HandlerOptions {
        hold_failed_aggregates: true,
        ..HandlerOptions::default()
    })
}

/// The recorded TTL deletion of a pending event (aggregate `o-91`), which exists nowhere else.
fn ttl_deletion_of_a_pending_event() -> EventRecord {
    let mut records = records(REMOVALS_OF_PENDING_EVENTS);
    records.truncate(1);
    records.remove(0)
}

#[tokio::test]
async fn in_hold_mode_a_ttl_deleted_event_of_a_held_aggregate_is_dead_lettered_not_left_to_the_poller()
 {
    // Given aggregate o-91 held, and the TTL deletion of one of its pending events: the poller
    // can't see it (the item is gone)
    let ports = Ports::new(FakePublisher::default());
    ports
        .holds
        .hold("o-91", &[left_event("earlier", "OUTBOX#PENDING#5")])
        .await
        .unwrap();
    let records = vec![ttl_deletion_of_a_pending_event()];

    // When the batch is handled in hold mode
    let report = hold_mode(&ports).handle(&records, Deadline::NONE).await;

    // Then the event is dead-lettered with its record (a redrive re-creates it in its place in
    // its aggregate's order), not left to a poller that can never publish it
    assert!(
        matches!(&report.outcomes[0], RecordOutcome::DeadLettered { reason, .. } if reason.contains("held")),
        "{report:?}"
    );
    let letters = ports.dead_letters.letters();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].record["eventName"], "REMOVE");
    assert_eq!(
        letters[0].record["dynamodb"]["OldImage"]["AggregateId"]["S"],
        "o-91"
    );
    assert!(ports.publisher.published().is_empty());
    assert!(report.response(&records).batch_item_failures.is_empty());
}

#[tokio::test]
async fn in_hold_mode_a_ttl_deleted_event_that_fails_to_publish_is_dead_lettered_not_held() {
    // Given the TTL deletion of a pending event whose publish fails
    let event_id = "0194b001-0000-7000-8000-000000000001";
    let ports = Ports::new(FakePublisher::default().with_outcome(event_id, failed()));
    let records = vec![ttl_deletion_of_a_pending_event()];

    // When the batch is handled in hold mode
    let report = hold_mode(&ports).handle(&records, Deadline::NONE).await;

    // Then it is dead-lettered with its record, and its aggregate is not held for a poller that
    // can't see the event
    assert!(
        matches!(&report.outcomes[0], RecordOutcome::DeadLettered { event_id: Some(id), .. } if id == event_id),
        "{report:?}"
    );
    assert_eq!(ports.dead_letters.letters().len(), 1);
    assert!(ports.holds.holds().is_empty());
}

/// An outbox INSERT by another client that left the event out of the pending index.
fn insert_outside_the_index(seq: u32, event_id: &str) -> EventRecord {
    let mut record = outbox_insert(seq, event_id, "{}");
    record.change.new_image.remove("GSI1PK");
    record.change.new_image.remove("GSI1SK");
    record
}

#[tokio::test]
async fn in_hold_mode_an_event_outside_the_index_is_published_even_when_its_aggregate_is_held() {
    // Given aggregate o-e1 held, and an INSERT of its event without index keys (the poller's
    // queries never see it), and one whose sort key is not shaped EVENT#{CreatedAt}#{EventId}
    let ports = Ports::new(FakePublisher::default());
    ports
        .holds
        .hold("o-e1", &[left_event("earlier-1", "OUTBOX#PENDING#1")])
        .await
        .unwrap();
    ports
        .holds
        .hold("o-e2", &[left_event("earlier-2", "OUTBOX#PENDING#1")])
        .await
        .unwrap();
    let mut odd_sort_key = outbox_insert(2, "e2", "{}");
    odd_sort_key
        .change
        .new_image
        .insert("GSI1SK".into(), AttributeValue::S("ZZZ#e2".into()));
    let records = vec![insert_outside_the_index(1, "e1"), odd_sort_key];

    // When the batch is handled in hold mode
    let report = hold_mode(&ports).handle(&records, Deadline::NONE).await;

    // Then both are published: only this relay can
    assert_eq!(
        report.outcomes,
        vec![
            RecordOutcome::Published {
                event_id: "e1".into(),
                marked: true,
            },
            RecordOutcome::Published {
                event_id: "e2".into(),
                marked: true,
            }
        ]
    );
}

#[tokio::test]
async fn in_hold_mode_an_event_outside_the_index_that_fails_is_re_delivered_not_held() {
    // Given an INSERT without index keys whose publish fails
    let ports = Ports::new(FakePublisher::default().with_outcome("e1", failed()));
    let records = vec![insert_outside_the_index(1, "e1")];

    // When the batch is handled in hold mode
    let report = hold_mode(&ports).handle(&records, Deadline::NONE).await;

    // Then it is the batch item failure (Lambda re-delivers it), and nothing is held
    assert_eq!(report.first_unpublished, Some(0));
    assert!(ports.holds.holds().is_empty());
}

/// A status store whose every answer takes `delay` (a throttled or slow DynamoDB).
struct SlowStatus {
    delay: std::time::Duration,
    inner: FakeStatusStore,
}

impl relay_runtime::StatusStore for SlowStatus {
    async fn mark_published(
        &self,
        keys: &[ItemKey],
    ) -> Vec<Result<relay_runtime::MarkOutcome, relay_runtime::StatusError>> {
        tokio::time::sleep(self.delay).await;
        self.inner.mark_published(keys).await
    }

    async fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        reason: &str,
    ) -> Result<relay_runtime::MarkOutcome, relay_runtime::StatusError> {
        tokio::time::sleep(self.delay).await;
        self.inner.mark_dead_lettered(key, reason).await
    }

    async fn recreate_dead_lettered(
        &self,
        key: &ItemKey,
        image: &relay_runtime::recreate::Attributes,
        reason: &str,
    ) -> Result<relay_runtime::MarkOutcome, relay_runtime::StatusError> {
        tokio::time::sleep(self.delay).await;
        self.inner.recreate_dead_lettered(key, image, reason).await
    }
}

#[tokio::test(start_paused = true)]
async fn what_runs_after_the_last_publish_ends_before_the_invocations_deadline() {
    // Given a status store that answers after 30 s, and an invocation with 15 s left
    let (publisher, letters, holds) = (
        FakePublisher::default(),
        FakeDeadLetters::default(),
        FakeHoldStore::default(),
    );
    let status = SlowStatus {
        delay: std::time::Duration::from_secs(30),
        inner: FakeStatusStore::default(),
    };
    let relay = StreamRelay::new(
        &publisher,
        status,
        &holds,
        Some(&letters),
        HandlerOptions::default(),
    );
    let records = vec![
        outbox_insert(1, "e1", "{}"),
        outbox_insert(2, "e2", "not json"),
    ];
    let started = tokio::time::Instant::now();
    let deadline = started + std::time::Duration::from_secs(15);

    // When the batch is handled
    let report = relay.handle(&records, relay.deadline_of(deadline)).await;

    // Then the handler answered before the deadline, with the reserve to return its response
    let took = started.elapsed();
    assert!(
        took <= std::time::Duration::from_secs(15) - RESPONSE_RESERVE,
        "{took:?}"
    );
    // And the published event is reported published (not marked: the poller publishes it again),
    // the poison one dead-lettered (its mark cut short), nothing re-delivered
    assert_eq!(
        report.outcomes[0],
        RecordOutcome::Published {
            event_id: "e1".into(),
            marked: false,
        }
    );
    assert!(
        matches!(
            &report.outcomes[1],
            RecordOutcome::DeadLettered { marked: false, .. }
        ),
        "{report:?}"
    );
    assert_eq!(report.first_unpublished, None);
    assert_eq!(publisher.published().len(), 1);
    assert_eq!(letters.letters().len(), 1);
}

/// Holds read as held, whose record of what is left answers as set: `Ok(false)` for a hold the
/// poller released between this relay's read and its record, an error for a write that failed.
/// An aggregate held is read as held from then on.
struct ReleasedMeanwhile {
    held: std::sync::Mutex<Vec<String>>,
    leave: Result<bool, ()>,
}

impl AggregateHolds for ReleasedMeanwhile {
    async fn held(
        &self,
        keys: &[String],
    ) -> Result<std::collections::HashSet<String>, outbox_shared::SdkFailure> {
        let held = self.held.lock().unwrap();
        Ok(keys.iter().filter(|k| held.contains(k)).cloned().collect())
    }

    async fn leave(&self, _: &str, _: &[LeftEvent]) -> Result<bool, outbox_shared::SdkFailure> {
        self.leave
            .map_err(|()| relay_runtime::testing::throttled_update())
    }

    async fn hold(
        &self,
        ordering_key: &str,
        _: &[LeftEvent],
    ) -> Result<(), outbox_shared::SdkFailure> {
        self.held.lock().unwrap().push(ordering_key.to_owned());
        Ok(())
    }
}

/// `record` as an event of aggregate `aggregate`.
fn of_aggregate(mut record: EventRecord, aggregate: &str) -> EventRecord {
    record
        .change
        .new_image
        .insert("AggregateId".into(), AttributeValue::S(aggregate.into()));
    record
}

/// A batch of o-x's x1, o-y's y1 and o-x's x2, o-x read as held, handled in hold mode.
async fn handled_with_a_hold_that(
    leave: Result<bool, ()>,
) -> (BatchReport, Vec<String>, Vec<EventRecord>) {
    let ports = Ports::new(FakePublisher::default());
    let holds = ReleasedMeanwhile {
        held: std::sync::Mutex::new(vec!["o-x".into()]),
        leave,
    };
    let relay = StreamRelay::new(
        &ports.publisher,
        &ports.status,
        holds,
        Some(&ports.dead_letters),
        HandlerOptions {
            hold_failed_aggregates: true,
            ..HandlerOptions::default()
        },
    );
    let records = vec![
        of_aggregate(outbox_insert(1, "x1", "{}"), "o-x"),
        outbox_insert(2, "y1", "{}"),
        of_aggregate(outbox_insert(3, "x2", "{}"), "o-x"),
    ];
    let report = relay.handle(&records, Deadline::NONE).await;
    let published = ports
        .publisher
        .published()
        .iter()
        .map(|e| e.event_id.clone())
        .collect();
    (report, published, records)
}

#[tokio::test]
async fn in_hold_mode_a_hold_released_between_its_read_and_the_record_leaves_nothing_to_the_poller()
{
    // Given o-x read as held, whose hold the poller released before this relay recorded x1 and
    // x2 on it (the poller published everything recorded before)
    // When the batch is handled
    let (report, published, _) = handled_with_a_hold_that(Ok(false)).await;

    // Then x1 and x2 are published by this relay, in order, with y1: nobody else would
    assert_eq!(report.counts().left_to_hold, 0, "{report:?}");
    assert_eq!(published, ["x1", "y1", "x2"]);
}

#[tokio::test]
async fn in_hold_mode_events_that_could_not_be_recorded_on_their_hold_are_re_delivered() {
    // Given o-x read as held, and the write recording x1 and x2 on its hold failing
    // When the batch is handled
    let (report, published, records) = handled_with_a_hold_that(Err(())).await;

    // Then neither is published nor left to the poller: the batch is re-delivered from x1, and
    // y1 is published
    assert_eq!(published, ["y1"]);
    assert_eq!(report.counts().left_to_hold, 0, "{report:?}");
    let failures = report.response(&records).batch_item_failures;
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].item_identifier.as_deref(), Some("00000001"));
}

#[tokio::test]
async fn in_hold_mode_an_event_cut_by_the_deadline_holds_nothing_and_dead_letters_nothing() {
    // Given aggregate o-91's two INSERTs and then the TTL deletion of its pending event, the
    // first INSERT not sent (the invocation's deadline came before its call): the rest of the
    // aggregate is held back behind it, though nothing failed
    let ports = Ports::new(FakePublisher::default().with_outcome("x1", PublishOutcome::NotSent));
    let records = vec![
        of_aggregate(outbox_insert(1, "x1", "{}"), "o-91"),
        of_aggregate(outbox_insert(2, "x2", "{}"), "o-91"),
        ttl_deletion_of_a_pending_event(),
    ];

    // When the batch is handled in hold mode
    let report = hold_mode(&ports).handle(&records, Deadline::NONE).await;

    // Then no hold is written and nothing is dead-lettered: the batch is re-delivered from x1,
    // and the aggregate's events are published then, in order
    assert!(ports.holds.holds().is_empty(), "{:?}", ports.holds.holds());
    assert!(ports.dead_letters.letters().is_empty(), "{report:?}");
    assert_eq!(report.first_unpublished, Some(0));
    assert!(
        report
            .outcomes
            .iter()
            .all(|o| matches!(o, RecordOutcome::NotSent { .. })),
        "{report:?}"
    );
    assert!(ports.publisher.published().is_empty());
}

/// A relay in eu-west-1 of a global table with us-east-1, reading its region's adoption from
/// `adoption`; hold mode off: an adopted region's events are left under holds whatever it says.
fn in_eu_west_1<'a>(
    ports: &'a Ports,
    adoption: &'a FakeAdoption,
) -> StreamRelay<
    &'a FakePublisher,
    &'a FakeStatusStore,
    &'a FakeDeadLetters,
    &'a FakeHoldStore,
    &'a FakeAdoption,
> {
    let region = |name| outbox_shared::Region::new(name).unwrap();
    let table = GlobalTable::new(
        region("eu-west-1"),
        vec![region("us-east-1"), region("eu-west-1")],
    )
    .unwrap();
    ports
        .relay_with(HandlerOptions {
            global_table: Some(table),
            ..HandlerOptions::default()
        })
        .with_adoption(adoption)
}

/// An event of `aggregate` written in `origin`, indexed under that region's pending partition 1.
fn written_in(seq: u32, event_id: &str, aggregate: &str, origin: &str) -> EventRecord {
    let mut record = aggregate_insert(seq, event_id, aggregate);
    let image = &mut record.change.new_image;
    image.insert("OriginRegion".into(), AttributeValue::S(origin.to_owned()));
    image.insert(
        "GSI1PK".into(),
        AttributeValue::S(format!("OUTBOX#PENDING#{origin}#1")),
    );
    record
}

fn left(id: &str) -> RecordOutcome {
    RecordOutcome::LeftToHold {
        event_id: id.into(),
    }
}

fn published(id: &str) -> RecordOutcome {
    RecordOutcome::Published {
        event_id: id.into(),
        marked: true,
    }
}

fn sent(ports: &Ports) -> Vec<String> {
    ports
        .publisher
        .published()
        .into_iter()
        .map(|e| e.event_id)
        .collect()
}

#[tokio::test]
async fn an_adopted_regions_events_are_left_to_the_adopter_under_holds_and_wait_for_them_after_the_hand_back()
 {
    // Given the stream relay of eu-west-1, whose region us-east-1's pollers adopted
    let ports = Ports::new(FakePublisher::default());
    let adoption = FakeAdoption::default();
    adoption.adopt(Some("us-east-1"));
    let relay = in_eu_west_1(&ports, &adoption);

    // When a batch holds only us-east-1's events (replicated), it reads no adoption
    let theirs = vec![written_in(1, "a1", "z", "us-east-1")];
    let report = relay.handle(&theirs, Deadline::NONE).await;
    assert_eq!(report.counts().ignored, 1);
    assert_eq!(adoption.reads(), 0, "nothing of its own: nothing to decide");

    // When a batch holds its own events of orders x and y, and us-east-1's of z
    let batch = vec![
        written_in(2, "x1", "x", "eu-west-1"),
        written_in(3, "a2", "z", "us-east-1"),
        written_in(4, "y1", "y", "eu-west-1"),
        written_in(5, "x2", "x", "eu-west-1"),
    ];
    let report = relay.handle(&batch, Deadline::NONE).await;

    // Then it reads the adoption once, publishes nothing, and leaves its events to the adopter's
    // pollers, x and y held at their partition; the batch succeeds (the events are pending)
    assert_eq!(adoption.reads(), 1, "one read a batch");
    assert_eq!(report.outcomes[0], left("x1"));
    assert_eq!(report.outcomes[2], left("y1"));
    assert_eq!(report.outcomes[3], left("x2"));
    assert_eq!(report.counts().left_to_hold, 3);
    assert!(report.response(&batch).batch_item_failures.is_empty());
    assert_eq!(sent(&ports), Vec::<String>::new());
    assert!(ports.status.marks().is_empty(), "nothing marked");
    let partition = "OUTBOX#PENDING#eu-west-1#1".to_owned();
    assert_eq!(
        ports.holds.holds(),
        HashMap::from([
            ("x".to_owned(), partition.clone()),
            ("y".to_owned(), partition)
        ])
    );
    assert_eq!(ports.holds.left("x").map(|(_, count)| count), Some(2));

    // When us-east-1 hands the region back, and eu-west-1's writer goes on with x and a new w
    adoption.adopt(None);
    let after = vec![
        written_in(6, "x3", "x", "eu-west-1"),
        written_in(7, "w1", "w", "eu-west-1"),
    ];
    let report = relay.handle(&after, Deadline::NONE).await;

    // Then x's next event waits for the pollers too (x is held until they publish past x2), and
    // w's is published at once
    assert_eq!(report.outcomes, vec![left("x3"), published("w1")]);
    assert_eq!(sent(&ports), ["w1"]);
    assert_eq!(adoption.reads(), 2);
}

#[tokio::test]
async fn an_adoption_that_cannot_be_read_publishes_nothing_and_re_delivers_the_batch() {
    // Given a relay of a global table whose lease table does not answer
    let ports = Ports::new(FakePublisher::default());
    let adoption = FakeAdoption::default();
    adoption.fail(true);
    let relay = in_eu_west_1(&ports, &adoption);

    // When a batch of its own events comes
    let batch = vec![
        written_in(1, "x1", "x", "eu-west-1"),
        written_in(2, "y1", "y", "eu-west-1"),
    ];
    let report = relay.handle(&batch, Deadline::NONE).await;

    // Then nothing is published or held, and the batch is re-delivered from its first record:
    // an event must not be published while another region may be publishing it
    assert_eq!(sent(&ports), Vec::<String>::new());
    assert!(ports.holds.holds().is_empty());
    assert_eq!(report.counts().not_sent, 2);
    let failures = report.response(&batch).batch_item_failures;
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].item_identifier.as_deref(), Some("00000001"));

    // And once it answers (not adopted), the re-delivered batch is published
    adoption.fail(false);
    let report = relay.handle(&batch, Deadline::NONE).await;
    assert_eq!(report.outcomes, vec![published("x1"), published("y1")]);
}

#[tokio::test]
async fn an_adopted_regions_aggregate_whose_hold_cannot_be_written_is_re_delivered() {
    // Given an adopted region whose holds can't be written
    let ports = Ports {
        holds: FakeHoldStore::failing(),
        ..Ports::new(FakePublisher::default())
    };
    let adoption = FakeAdoption::default();
    adoption.adopt(Some("us-east-1"));
    let relay = in_eu_west_1(&ports, &adoption);

    // When a batch of its own events comes
    let batch = vec![written_in(1, "x1", "x", "eu-west-1")];
    let report = relay.handle(&batch, Deadline::NONE).await;

    // Then it is neither published nor left: it is re-delivered
    assert_eq!(sent(&ports), Vec::<String>::new());
    assert_eq!(report.counts().not_sent, 1);
    assert_eq!(report.response(&batch).batch_item_failures.len(), 1);
}
