//! The per-event path both relays share: an outbox item becomes an event ready to publish or a
//! [`Poison`] case; after a publish, each event is settled: marked published, dead-lettered then
//! marked dead-lettered, or left pending. Marks and dead letters run concurrently, bounded.
//!
//! The batch loops around it differ and stay in their crates: the stream relay reports a
//! checkpoint to Lambda, the poller holds back the rest of an aggregate after a failure. Each
//! event carries its `source` (`R`: the stream record's position, the item read from the index),
//! so the loop knows which of its records a result belongs to and the dead letter carries the
//! record whole.
//!
//! Invariants:
//! - an event is marked published only after EventBridge accepted it;
//! - a poison event is marked dead-lettered only after the dead-letter queue took it; if the queue
//!   refuses it, it stays pending (the poller) or is re-delivered (the stream);
//! - a failed mark never turns a published event into a failure: the item stays pending and is
//!   published again later with the same `eventId`.

use std::fmt;

use chrono::Utc;
use futures::StreamExt;
use outbox_shared::entry_field::check_trace_header;
use outbox_shared::time::format_timestamp;
use outbox_shared::{ItemKey, OutboundEvent, OutboxItem};

use crate::dead_letter::{DeadLetter, DeadLetterError, DeadLetterSink};
use crate::publisher::{PublishOutcome, Publisher};
use crate::status_store::{MARK_BATCH_MAX, MarkOutcome, StatusError, StatusStore};

/// An event that can never be published as it is, on its way to the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Poison<R> {
    /// The item's key, when it was readable: the item is marked dead-lettered through it.
    pub key: Option<ItemKey>,
    pub event_id: Option<String>,
    /// Why, for the operator. Never quotes attribute values (they may hold personal data).
    pub reason: String,
    pub source: R,
}

impl<R> Poison<R> {
    /// An item that does not decode as an outbox item.
    pub fn undecodable(
        key: Option<ItemKey>,
        event_id: Option<String>,
        error: impl fmt::Display,
        source: R,
    ) -> Self {
        Self {
            key,
            event_id,
            reason: format!(
                "undecodable outbox item: it does not decode as the item schema: {error}"
            ),
            source,
        }
    }

    /// An event EventBridge rejected for good (malformed, too large).
    pub fn rejected(key: ItemKey, event_id: String, code: &str, message: &str, source: R) -> Self {
        Self {
            key: Some(key),
            event_id: Some(event_id),
            reason: format!("EventBridge rejected the entry: {code}: {message}"),
            source,
        }
    }

    /// The event id, or a placeholder, for logs.
    fn id(&self) -> &str {
        self.event_id.as_deref().unwrap_or("(no id)")
    }
}

/// Events ready to publish, with the item and the source record of each.
#[derive(Debug)]
pub struct ReadyEvents<R> {
    events: Vec<OutboundEvent>,
    origins: Vec<(ItemKey, R)>,
}

impl<R> Default for ReadyEvents<R> {
    fn default() -> Self {
        Self {
            events: Vec::new(),
            origins: Vec::new(),
        }
    }
}

impl<R> ReadyEvents<R> {
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            events: Vec::with_capacity(capacity),
            origins: Vec::with_capacity(capacity),
        }
    }

    /// Builds the envelope of `item` and adds it, or says why the item is poison.
    ///
    /// A `TraceHeader` EventBridge would refuse is left off the entry with a warning, and the
    /// event published without it: dead-lettering a business event for its tracing context is
    /// worse than losing the trace ([`OutboundEvent::from_item`]).
    ///
    /// # Errors
    /// [`Poison`] when the item can never become an EventBridge entry (payload not JSON, an empty
    /// id or type, a `CreatedAt` that is not a timestamp, an `EventType` longer than a
    /// `DetailType` may be).
    pub fn push_item(&mut self, item: OutboxItem, source: R) -> Result<(), Poison<R>> {
        if let Some(Err(error)) = item.trace_header.as_deref().map(check_trace_header) {
            tracing::warn!(
                event_id = %item.event_id,
                error = %error,
                "publishing the event without its TraceHeader, which EventBridge would refuse"
            );
        }
        let event = OutboundEvent::from_item(&item);
        let key = ItemKey {
            pk: item.pk,
            sk: item.sk,
        };
        match event {
            Ok(event) => {
                self.push(key, event, source);
                Ok(())
            }
            Err(err) => Err(Poison {
                key: Some(key),
                event_id: Some(item.event_id),
                reason: err.to_string(),
                source,
            }),
        }
    }

    /// Takes out the events that `take` selects (by the event and its source), in order, with
    /// their item keys and sources; the rest stay.
    pub fn take_if(
        &mut self,
        mut take: impl FnMut(&OutboundEvent, &R) -> bool,
    ) -> Vec<(ItemKey, OutboundEvent, R)> {
        let mut taken = Vec::new();
        let mut kept = ReadyEvents::with_capacity(self.events.len());
        for (event, (key, source)) in self.events.drain(..).zip(self.origins.drain(..)) {
            if take(&event, &source) {
                taken.push((key, event, source));
            } else {
                kept.push(key, event, source);
            }
        }
        *self = kept;
        taken
    }

    /// Adds an event built elsewhere.
    pub fn push(&mut self, key: ItemKey, event: OutboundEvent, source: R) {
        self.events.push(event);
        self.origins.push((key, source));
    }

    /// The events, in the order they were added: what the publisher is given.
    pub fn events(&self) -> &[OutboundEvent] {
        &self.events
    }

    pub fn len(&self) -> usize {
        self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }
}

/// How one event ended after a publish.
#[derive(Debug)]
pub enum Settled<R> {
    /// EventBridge accepted it; `mark` is the status update's result.
    Published {
        key: ItemKey,
        event_id: String,
        source: R,
        mark: Result<MarkOutcome, StatusError>,
    },
    /// Not published (retries exhausted, an outage, access denied); it stays pending.
    Failed {
        key: ItemKey,
        event_id: String,
        /// The aggregate: its later events must not overtake this one.
        ordering_key: String,
        code: String,
        message: String,
        source: R,
    },
    /// Not sent because an earlier event of its aggregate was not published in this publish; it
    /// stays pending.
    HeldBack {
        key: ItemKey,
        event_id: String,
        ordering_key: String,
        source: R,
    },
    /// Not sent (cut by the deadline, or the caller stopped before it); it stays pending.
    NotSent {
        key: ItemKey,
        event_id: String,
        source: R,
    },
    /// In the dead-letter queue; `mark` is the status update's result (`None` without a key).
    DeadLettered {
        poison: Poison<R>,
        mark: Option<Result<MarkOutcome, StatusError>>,
    },
    /// Poison that could not be dead-lettered: no queue is configured (`error` is `None`) or the
    /// queue refused it. It stays pending, or is re-delivered.
    NotDeadLettered {
        poison: Poison<R>,
        error: Option<DeadLetterError>,
    },
}

/// The ports one relay publishes, marks and dead-letters through.
#[derive(Debug, Clone)]
pub struct EventRelay<P, S, D> {
    publisher: P,
    status: S,
    dead_letters: Option<D>,
    /// `origin` of the dead letters this relay sends (`relay-stream`, `relay-poller`).
    origin: &'static str,
    /// Status-update calls (up to [`MARK_BATCH_MAX`] marks each) and dead letters in flight at
    /// once.
    mark_concurrency: usize,
}

impl<P: Publisher, S: StatusStore, D: DeadLetterSink> EventRelay<P, S, D> {
    /// A relay that sends poison to `dead_letters` (or keeps it pending when `None`) as `origin`.
    pub fn new(
        publisher: P,
        status: S,
        dead_letters: Option<D>,
        origin: &'static str,
        mark_concurrency: usize,
    ) -> Self {
        Self {
            publisher,
            status,
            dead_letters,
            origin,
            mark_concurrency: mark_concurrency.max(1),
        }
    }

    pub fn publisher(&self) -> &P {
        &self.publisher
    }

    pub fn status(&self) -> &S {
        &self.status
    }

    pub fn has_dead_letter_queue(&self) -> bool {
        self.dead_letters.is_some()
    }

    /// Publishes `events`: one outcome per event, in order.
    pub async fn publish(&self, events: &[OutboundEvent]) -> Vec<PublishOutcome> {
        self.publish_until(events, None).await
    }

    /// Publishes `events`, starting no call after `stop_at`: one outcome per event, in order.
    pub async fn publish_until(
        &self,
        events: &[OutboundEvent],
        stop_at: Option<tokio::time::Instant>,
    ) -> Vec<PublishOutcome> {
        if events.is_empty() {
            return Vec::new();
        }
        self.publisher.publish_until(events, stop_at).await
    }

    /// Settles every event after a publish: `outcomes[i]` is the outcome of `ready`'s event `i`.
    /// Published events are marked; rejected ones join `poison`, which
    /// is dead-lettered (with `record_of` its source as JSON) and then marked. Results come in no
    /// particular order; each carries its source.
    pub async fn settle<R: Send>(
        &self,
        ready: ReadyEvents<R>,
        outcomes: Vec<PublishOutcome>,
        poison: Vec<Poison<R>>,
        record_of: impl Fn(&R) -> serde_json::Value + Sync,
    ) -> Vec<Settled<R>> {
        self.settle_until(ready, outcomes, poison, record_of, None)
            .await
    }

    /// [`Self::settle`], every status update and dead letter bounded by `finish_by` (a Lambda's
    /// deadline): a mark not answered by then is a failed mark (the event was published; it stays
    /// pending and is published again), a dead letter not taken by then is not dead-lettered (it
    /// stays pending, or is re-delivered).
    pub async fn settle_until<R: Send>(
        &self,
        ready: ReadyEvents<R>,
        outcomes: Vec<PublishOutcome>,
        mut poison: Vec<Poison<R>>,
        record_of: impl Fn(&R) -> serde_json::Value + Sync,
        finish_by: Option<tokio::time::Instant>,
    ) -> Vec<Settled<R>> {
        debug_assert_eq!(ready.len(), outcomes.len());
        let mut settled = Vec::with_capacity(ready.len() + poison.len());
        let mut to_mark = Vec::with_capacity(ready.len());
        let entries = ready.events.into_iter().zip(ready.origins).zip(outcomes);
        for ((event, (key, source)), outcome) in entries {
            match outcome {
                PublishOutcome::Published => to_mark.push((key, event.event_id, source)),
                PublishOutcome::Rejected { code, message } => {
                    poison.push(Poison::rejected(
                        key,
                        event.event_id,
                        &code,
                        &message,
                        source,
                    ));
                }
                PublishOutcome::Failed { code, message } => {
                    tracing::warn!(event_id = %event.event_id, code = %code, "event not published; it stays pending");
                    settled.push(Settled::Failed {
                        key,
                        event_id: event.event_id,
                        ordering_key: event.ordering_key,
                        code,
                        message,
                        source,
                    });
                }
                PublishOutcome::HeldBack => settled.push(Settled::HeldBack {
                    key,
                    event_id: event.event_id,
                    ordering_key: event.ordering_key,
                    source,
                }),
                PublishOutcome::NotSent => {
                    settled.push(Settled::NotSent {
                        key,
                        event_id: event.event_id,
                        source,
                    });
                }
            }
        }
        let record_of = &record_of;
        let (marked, dead_lettered) = futures::join!(
            self.mark_published(to_mark, finish_by),
            futures::stream::iter(poison)
                .map(|p| self.dead_letter(p, record_of, finish_by))
                .buffer_unordered(self.mark_concurrency)
                .collect::<Vec<_>>()
        );
        settled.extend(marked);
        settled.extend(dead_lettered);
        settled
    }

    /// Marks every published event, [`MARK_BATCH_MAX`] per call, the calls concurrently.
    async fn mark_published<R>(
        &self,
        events: Vec<(ItemKey, String, R)>,
        finish_by: Option<tokio::time::Instant>,
    ) -> Vec<Settled<R>> {
        let mut events = events.into_iter().peekable();
        let mut batches = Vec::new();
        while events.peek().is_some() {
            batches.push(events.by_ref().take(MARK_BATCH_MAX).collect::<Vec<_>>());
        }
        futures::stream::iter(batches)
            .map(|batch| async move {
                let keys: Vec<ItemKey> = batch.iter().map(|(key, _, _)| key.clone()).collect();
                let (mut marks, why_unanswered) =
                    match within(finish_by, self.status.mark_all_published(&keys)).await {
                        Some(marks) => (marks, "the status store answered"),
                        None => (Vec::new(), "the deadline came first: answered"),
                    };
                // A store that answered for fewer keys left the rest unmarked: each still gets
                // its outcome, an error (it stays pending and is published again).
                let answered = marks.len();
                marks.extend(keys[answered.min(keys.len())..].iter().map(|key| {
                    Err(StatusError {
                        key: key.clone(),
                        status: outbox_shared::OutboxStatus::Published,
                        failure: Box::new(outbox_shared::SdkFailure::incomplete(
                            crate::status_store::BATCH_EXECUTE_STATEMENT,
                            format!("{why_unanswered} {answered} of {} marks", keys.len()),
                        )),
                    })
                }));
                batch
                    .into_iter()
                    .zip(marks)
                    .map(|((key, event_id, source), mark)| {
                        if let Err(err) = &mark {
                            // Published but still pending: the poller publishes it again after
                            // its grace period, with the same eventId.
                            tracing::warn!(event_id = %event_id, retryable = err.class().is_retryable(), error = %err.failure, "event published but not marked published");
                        }
                        Settled::Published {
                            key,
                            event_id,
                            source,
                            mark,
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .buffer_unordered(self.mark_concurrency)
            .flat_map(futures::stream::iter)
            .collect()
            .await
    }

    /// Sends one poison event to the dead-letter queue, then marks it. If the queue refuses it,
    /// it is never marked.
    async fn dead_letter<R>(
        &self,
        poison: Poison<R>,
        record_of: &(impl Fn(&R) -> serde_json::Value + Sync),
        finish_by: Option<tokio::time::Instant>,
    ) -> Settled<R> {
        let Some(sink) = &self.dead_letters else {
            tracing::warn!(event_id = %poison.id(), reason = %poison.reason, "poison event and no dead-letter queue configured");
            return Settled::NotDeadLettered {
                poison,
                error: None,
            };
        };
        let letter = DeadLetter {
            reason: poison.reason.clone(),
            origin: self.origin.to_owned(),
            event_id: poison.event_id.clone(),
            key: poison.key.clone(),
            record: record_of(&poison.source),
            dead_lettered_at: format_timestamp(Utc::now()),
            record_left_out: None,
        };
        let sent = within(finish_by, sink.send(&letter))
            .await
            .unwrap_or_else(|| {
                Err(DeadLetterError::Send {
                    event_id: poison.event_id.clone(),
                    failure: cut_by_deadline("SendMessage"),
                })
            });
        if let Err(err) = sent {
            tracing::error!(event_id = %poison.id(), error = %outbox_shared::error::describe(&err), "poison event could not be dead-lettered; it stays pending");
            return Settled::NotDeadLettered {
                poison,
                error: Some(err),
            };
        }
        let mark = match &poison.key {
            Some(key) => Some(
                within(
                    finish_by,
                    self.status.mark_dead_lettered(key, &poison.reason),
                )
                .await
                .unwrap_or_else(|| {
                    Err(StatusError {
                        key: key.clone(),
                        status: outbox_shared::OutboxStatus::DeadLettered,
                        failure: Box::new(cut_by_deadline("UpdateItem")),
                    })
                }),
            ),
            None => None,
        };
        match &mark {
            Some(Err(err)) => {
                // The dead letter is out; the item stays pending and is dead-lettered again
                // later, which is harmless.
                tracing::warn!(event_id = %poison.id(), error = %err.failure, "dead-lettered but not marked dead-lettered");
            }
            _ => {
                tracing::warn!(event_id = %poison.id(), reason = %poison.reason, "poison event dead-lettered");
            }
        }
        Settled::DeadLettered { poison, mark }
    }
}

/// A call of `operation` that [`within`]'s deadline cut short: it failed, as a call that got no
/// answer does (retryable: a later attempt may find it done).
pub fn cut_by_deadline(operation: &'static str) -> outbox_shared::SdkFailure {
    outbox_shared::SdkFailure::incomplete(
        operation,
        "the deadline came before the call was answered",
    )
}

/// `call`'s output, or `None` when `finish_by` comes first (the call is dropped: a request
/// already sent may still take effect, which a later attempt finds already done).
pub async fn within<F: std::future::Future>(
    finish_by: Option<tokio::time::Instant>,
    call: F,
) -> Option<F::Output> {
    match finish_by {
        Some(at) => tokio::time::timeout_at(at, call).await.ok(),
        None => Some(call.await),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status_store::TtlOutcome;
    use crate::testing::{FakeDeadLetters, FakePublisher, FakeStatusStore};
    use outbox_shared::OutboxStatus;

    fn item(id: &str, payload: &str) -> OutboxItem {
        OutboxItem {
            pk: "USER#u".into(),
            sk: format!("OUTBOX#{id}"),
            entity_type: "OutboxEvent".into(),
            event_id: id.into(),
            event_type: "OrderCreated".into(),
            payload: payload.into(),
            status: outbox_shared::OutboxStatus::Pending,
            created_at: "2026-11-22T10:00:00.000Z".into(),
            gsi1pk: Some("OUTBOX#PENDING#1".into()),
            gsi1sk: Some(format!("EVENT#2026-11-22T10:00:00.000Z#{id}")),
            aggregate_type: Some("Order".into()),
            aggregate_id: Some(format!("o-{id}")),
            sequence: Some(1),
            ttl: None,
            trace_header: None,
        }
    }

    /// A status store that answers a batch of marks for its first key only.
    struct AnswersOne(FakeStatusStore);

    impl StatusStore for AnswersOne {
        async fn mark_published(&self, key: &ItemKey) -> Result<MarkOutcome, StatusError> {
            self.0.mark_published(key).await
        }

        async fn mark_all_published(
            &self,
            keys: &[ItemKey],
        ) -> Vec<Result<MarkOutcome, StatusError>> {
            vec![self.0.mark_published(&keys[0]).await]
        }

        async fn mark_dead_lettered(
            &self,
            key: &ItemKey,
            reason: &str,
        ) -> Result<MarkOutcome, StatusError> {
            self.0.mark_dead_lettered(key, reason).await
        }

        async fn extend_ttl(&self, key: &ItemKey) -> Result<TtlOutcome, StatusError> {
            self.0.extend_ttl(key).await
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
        let mut ready = ReadyEvents::default();
        for (n, id) in ["a", "b", "c"].into_iter().enumerate() {
            ready.push_item(item(id, "{}"), n).unwrap();
        }

        // When three published events are settled
        let outcomes = relay.publish(ready.events()).await;
        let settled = relay
            .settle(ready, outcomes, Vec::new(), |_| serde_json::Value::Null)
            .await;

        // Then each has its outcome: the first marked, the other two published but not marked
        // (they stay pending and are published again), none dropped
        let mut marks: Vec<(usize, bool)> = settled
            .into_iter()
            .map(|s| match s {
                Settled::Published { source, mark, .. } => (source, mark.is_ok()),
                other => panic!("{other:?}"),
            })
            .collect();
        marks.sort_unstable();
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
        let mut ready = ReadyEvents::default();
        let mut poison = Vec::new();
        for (n, (id, payload)) in [
            ("good", "{}"),
            ("rejected", "{}"),
            ("failing", "{}"),
            ("not-json", "nope"),
        ]
        .into_iter()
        .enumerate()
        {
            if let Err(p) = ready.push_item(item(id, payload), n) {
                poison.push(p);
            }
        }

        // When they are published and settled
        let outcomes = relay.publish(ready.events()).await;
        let settled = relay
            .settle(ready, outcomes, poison, |n| serde_json::json!({ "n": n }))
            .await;

        // Then the good one is marked published, both poison events are dead-lettered with
        // their record and marked, and the failing one stays pending
        assert_eq!(settled.len(), 4);
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
        assert!(settled.iter().any(|s| matches!(s, Settled::Failed { event_id, ordering_key, .. } if event_id == "failing" && ordering_key == "o-failing")));
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
            let mut ready = ReadyEvents::default();
            let poison = ready.push_item(item("bad", "nope"), ()).unwrap_err();

            // When it is settled
            let settled = relay
                .settle(ready, Vec::new(), vec![poison], |()| {
                    serde_json::Value::Null
                })
                .await;

            // Then it is not dead-lettered, and not marked
            assert!(matches!(&settled[..], [Settled::NotDeadLettered { .. }]));
        }
        assert!(status.marks().is_empty());
    }
}
