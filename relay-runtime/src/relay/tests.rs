use super::*;
use crate::status_store::MarkOutcome;
use crate::testing::pending_item as item;
use crate::testing::{FakeDeadLetters, FakePublisher, FakeStatusStore};
use outbox_shared::OutboxStatus;

/// A status store that answers a batch of marks for its first key only.
struct AnswersOne(FakeStatusStore);

impl StatusStore for AnswersOne {
    async fn mark_published(&self, keys: &[ItemKey]) -> Vec<Result<MarkOutcome, StatusError>> {
        self.0.mark_published(&keys[..1]).await
    }

    async fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        reason: &str,
    ) -> Result<MarkOutcome, StatusError> {
        self.0.mark_dead_lettered(key, reason).await
    }

    async fn recreate_dead_lettered(
        &self,
        key: &ItemKey,
        image: &crate::recreate::Attributes,
        reason: &str,
    ) -> Result<MarkOutcome, StatusError> {
        self.0.recreate_dead_lettered(key, image, reason).await
    }
}

#[tokio::test]
async fn an_event_the_status_store_did_not_answer_for_settles_as_not_marked() {
    // Given a store that answers a batch of marks for its first key only
    let (publisher, status) = (
        FakePublisher::default(),
        AnswersOne(FakeStatusStore::default()),
    );
    let relay = EventRelay::new(&publisher, status, None::<&FakeDeadLetters>, "test", 4);
    let mut events: Vec<Event<usize>> = ["a", "b", "c"]
        .into_iter()
        .enumerate()
        .map(|(n, id)| Event::of_item(n, item(id, "{}"), &Encoding::envelope()))
        .collect();

    // When three published events are settled
    relay.publish(&mut events, Deadline::NONE).await;
    relay
        .settle(&mut events, Deadline::NONE, |_| serde_json::Value::Null)
        .await;

    // Then each has its outcome: the first marked, the other two published but not marked
    // (they stay pending and are published again), none dropped
    let marks: Vec<(usize, bool)> = events
        .into_iter()
        .map(|e| match e.state {
            State::Marked(_) => (e.source, true),
            State::NotMarked(_) => (e.source, false),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(marks, [(0, true), (1, false), (2, false)]);
}

#[tokio::test]
async fn published_are_marked_rejected_and_poison_dead_lettered_then_marked() {
    // Given a good event, one EventBridge rejects, one that fails, and an unpublishable item
    let publisher = FakePublisher::default()
        .with_outcome(
            "rejected",
            PublishOutcome::Rejected {
                code: "MalformedDetail".into(),
                message: "bad".into(),
            },
        )
        .with_outcome(
            "failing",
            PublishOutcome::Failed {
                code: "ThrottlingException".into(),
                message: "slow down".into(),
            },
        );
    let (status, letters) = (FakeStatusStore::default(), FakeDeadLetters::default());
    let relay = EventRelay::new(&publisher, &status, Some(&letters), "test", 4);
    let mut events: Vec<Event<usize>> = [
        ("good", "{}"),
        ("rejected", "{}"),
        ("failing", "{}"),
        ("not-json", "nope"),
    ]
    .into_iter()
    .enumerate()
    .map(|(n, (id, payload))| Event::of_item(n, item(id, payload), &Encoding::envelope()))
    .collect();

    // When they are published and settled
    relay.publish(&mut events, Deadline::NONE).await;
    relay
        .settle(
            &mut events,
            Deadline::NONE,
            |n| serde_json::json!({ "n": n }),
        )
        .await;

    // Then the good one is marked published, both poison events are dead-lettered with
    // their record and marked, and the failing one stays pending
    assert_eq!(events.len(), 4);
    let marks = status.marks();
    assert!(marks.contains(&(item("good", "").key(), OutboxStatus::Published)));
    assert!(marks.contains(&(item("rejected", "").key(), OutboxStatus::DeadLettered)));
    assert!(marks.contains(&(item("not-json", "").key(), OutboxStatus::DeadLettered)));
    assert_eq!(marks.len(), 3);
    let letters = letters.letters();
    assert_eq!(letters.len(), 2);
    let rejected = letters
        .iter()
        .find(|l| l.event_id.as_deref() == Some("rejected"))
        .unwrap();
    assert_eq!(rejected.origin, "test");
    assert_eq!(rejected.record["n"], 1);
    assert!(rejected.reason.contains("MalformedDetail"));
    // The reason is the publisher's code and message, naming no service the target may not be
    assert_eq!(rejected.reason, "MalformedDetail: bad");
    assert!(
        events
            .iter()
            .any(|e| matches!(e.state, State::Failed { .. })
                && e.event_id.as_deref() == Some("failing")
                && e.aggregate.as_deref() == Some("o-failing"))
    );
}

#[tokio::test]
async fn poison_is_never_marked_without_a_dead_letter() {
    // Given an unavailable queue, and a relay without one
    let (publisher, status) = (FakePublisher::default(), FakeStatusStore::default());
    let unavailable = FakeDeadLetters::unavailable();
    let with_queue = EventRelay::new(&publisher, &status, Some(&unavailable), "test", 1);
    let without_queue =
        EventRelay::<_, _, &FakeDeadLetters>::new(&publisher, &status, None, "test", 1);
    for relay in [with_queue, without_queue] {
        let mut events = vec![Event::of_item(
            (),
            item("bad", "nope"),
            &Encoding::envelope(),
        )];

        // When it is settled
        relay
            .settle(&mut events, Deadline::NONE, |()| serde_json::Value::Null)
            .await;

        // Then it is not dead-lettered, and not marked
        assert!(matches!(&events[0].state, State::NotDeadLettered { .. }));
    }
    assert!(status.marks().is_empty());
}

#[tokio::test]
async fn a_held_back_event_says_whether_it_waits_behind_a_failure_or_an_event_not_sent() {
    // Given aggregate x whose first event fails and aggregate y whose first is not sent, each
    // with a second event
    let publisher = FakePublisher::default()
        .with_outcome(
            "x1",
            PublishOutcome::Failed {
                code: "InternalException".into(),
                message: "outage".into(),
            },
        )
        .with_outcome("y1", PublishOutcome::NotSent);
    let relay = EventRelay::<_, _, &FakeDeadLetters>::new(
        &publisher,
        FakeStatusStore::default(),
        None,
        "test",
        1,
    );
    let of = |id: &str, aggregate: &str| {
        let mut item = item(id, "{}");
        item.aggregate_id = Some(aggregate.into());
        Event::of_item((), item, &Encoding::envelope())
    };
    let mut events = vec![of("x1", "x"), of("y1", "y"), of("x2", "x"), of("y2", "y")];

    // When they are published
    relay.publish(&mut events, Deadline::NONE).await;

    // Then x2 waits behind a failure, y2 behind an event not sent
    assert_eq!(events[2].blocks(), Some(Behind::Failure));
    assert_eq!(events[3].blocks(), Some(Behind::NotSent));
    assert!(publisher.published().is_empty());
}

/// The event of a pending item DynamoDB's TTL deleted, whose payload is not JSON (poison), with its
/// last image.
fn gone_poison() -> Event<()> {
    let s = |v: &str| aws_sdk_dynamodb::types::AttributeValue::S(v.to_owned());
    let item = item("gone", "not json");
    let image = [
        ("PK", s(&item.pk)),
        ("SK", s(&item.sk)),
        ("EventId", s("gone")),
        ("Payload", s("not json")),
        ("Status", s("PENDING")),
        ("GSI1PK", s("OUTBOX#PENDING#1")),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v))
    .collect();
    Event::of_item((), item, &Encoding::envelope()).with_gone_item(image)
}

#[tokio::test]
async fn a_poison_event_whose_item_is_gone_is_put_back_dead_lettered_and_then_sent() {
    // Given a poison event whose item TTL deleted
    let (publisher, status, letters) = (
        FakePublisher::default(),
        FakeStatusStore::default(),
        FakeDeadLetters::default(),
    );
    let relay = EventRelay::new(&publisher, &status, Some(&letters), "test", 1);
    let mut events = vec![gone_poison()];

    // When it is settled
    relay
        .settle(&mut events, Deadline::NONE, |()| serde_json::Value::Null)
        .await;

    // Then its item is back from its last image, DEAD_LETTERED with the reason, out of the index:
    // that is its mark (no update of an item that is not there)
    let recreated = status.recreated();
    assert_eq!(recreated.len(), 1);
    let text = |name: &str| recreated[0][name].as_s().unwrap().clone();
    assert_eq!(text("SK"), "OUTBOX#gone");
    assert_eq!(text("Payload"), "not json");
    assert_eq!(text("Status"), "DEAD_LETTERED");
    assert!(
        text("DeadLetterReason").contains("not valid JSON"),
        "{recreated:?}"
    );
    assert!(!recreated[0].contains_key("GSI1PK"));
    assert!(status.marks().is_empty());
    // And the letter went, naming the item
    let letters = letters.letters();
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].key.as_ref().unwrap().sk, "OUTBOX#gone");
    assert!(
        matches!(
            &events[0].state,
            State::DeadLettered {
                mark: Some(Ok(MarkOutcome::Marked)),
                ..
            }
        ),
        "{:?}",
        events[0].state
    );
}

#[tokio::test]
async fn a_poison_event_whose_item_cannot_be_put_back_is_not_dead_lettered() {
    // Given a poison event whose item TTL deleted, and a table that takes no write
    let (publisher, status, letters) = (
        FakePublisher::default(),
        FakeStatusStore::failing(),
        FakeDeadLetters::default(),
    );
    let relay = EventRelay::new(&publisher, &status, Some(&letters), "test", 1);
    let mut events = vec![gone_poison()];

    // When it is settled
    relay
        .settle(&mut events, Deadline::NONE, |()| serde_json::Value::Null)
        .await;

    // Then no letter went (it would name an item that is not there): the event is not
    // dead-lettered, and says why (the stream re-delivers its record)
    assert!(letters.letters().is_empty());
    match &events[0].state {
        State::NotDeadLettered {
            error: Some(DeadLetterError::Recreate { event_id, failure }),
            ..
        } => {
            assert_eq!(event_id.as_deref(), Some("gone"));
            assert!(failure.class.is_retryable(), "{failure:?}");
        }
        other => panic!("{other:?}"),
    }
    assert!(events[0].is_failing());
}
