//! The per-event path both relays share: the ready events of a batch or page are published, and
//! then every event is settled once: a published one marked, a poison one dead-lettered then
//! marked. Marks and dead letters run concurrently, bounded. Each event's state is its own
//! ([`crate::event`]); this module moves it.
//!
//! The loops around it differ and stay in their crates: the stream relay reports a checkpoint to
//! Lambda, the poller holds back the rest of an aggregate for its pass. Each event carries its
//! `source` (the stream record, the item read from the index), so the dead letter carries the
//! record whole.
//!
//! Invariants:
//! - an event is marked published only after the bus accepted it;
//! - a poison event is marked dead-lettered only after the dead-letter queue took it; if the queue
//!   refuses it, it stays pending (the poller) or is re-delivered (the stream);
//! - a failed mark never turns a published event into a failure: the item stays pending and is
//!   published again later with the same `eventId`;
//! - an event not published holds its aggregate's later events back, and says why
//!   ([`Behind`]): a failure, or a publish that did not happen.
//!
//! Spans, when the process exports them ([`crate::telemetry::exporting`]; otherwise none is
//! built), follow OpenTelemetry's messaging conventions for batch publishing: the writer's span
//! is each event's creation context, carried in the event, so no "create" span is made; one
//! `publish {target}` span per publish (a stream batch, a poller page) links to the creation context
//! of each event in it, the link naming the event (`messaging.message.id`) and what became of it
//! (`outbox.outcome`); one `mark` span per settle links to the events it marked, and one
//! `dead-letter` span per poison event links to its creation context.

use std::collections::HashMap;
use std::time::SystemTime;

use chrono::Utc;
use futures::StreamExt;
use opentelemetry::trace::{Link, Span as _, SpanKind, Status, Tracer as _};
use opentelemetry::{KeyValue, Value};
use outbox_shared::envelope::{Encoding, EventFormat};
use outbox_shared::time::format_timestamp;
use outbox_shared::{ItemKey, OutboundEvent};

use crate::config::PublisherConfig;
use crate::dead_letter::{DeadLetter, DeadLetterError, DeadLetterSink};
use crate::deadline::Deadline;
use crate::event::{Behind, Event, State};
use crate::publisher::{PublishOutcome, Publisher};
use crate::status_store::{
    BATCH_EXECUTE_STATEMENT, MARK_BATCH_MAX, MarkOutcome, StatusError, StatusStore,
};
use crate::telemetry;

/// `messaging.system` of the dead-letter spans.
pub const SQS_SYSTEM: &str = "aws_sqs";

/// `messaging.system` of the mark spans: the outbox table, the relays' intermediary on the side
/// they consume from.
pub const OUTBOX_SYSTEM: &str = "aws_dynamodb";

/// What a relay's events become and where they go: how each item's body is written (the
/// format, a CloudEvent's source), and what its spans name the destination.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outbound {
    pub encoding: Encoding,
    /// `messaging.destination.name` of the publish spans: the target's name, ARN or URL.
    pub destination: String,
    /// `messaging.system` of the publish spans: the target kind's
    /// ([`crate::target::TargetSpec::messaging_system`]).
    pub system: &'static str,
}

impl Outbound {
    /// What the publisher of `config` publishes, and to where.
    pub fn of(config: &PublisherConfig) -> Self {
        Self {
            encoding: config.encoding(),
            destination: config.target.clone(),
            system: config.target_kind.spec().messaging_system,
        }
    }
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
    /// What the events become and where they go.
    outbound: Outbound,
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
            outbound: Outbound::default(),
        }
    }

    /// The relay with its events written and named as `outbound` says (the envelope, and no
    /// destination on its spans, unless set).
    #[must_use]
    pub fn with_outbound(mut self, outbound: Outbound) -> Self {
        self.outbound = outbound;
        self
    }

    pub fn publisher(&self) -> &P {
        &self.publisher
    }

    /// How each item's body is written: what decoding an item into an event needs.
    pub fn encoding(&self) -> &Encoding {
        &self.outbound.encoding
    }

    /// Publishes the ready events of `events`, in order, starting no call after `deadline`'s
    /// publish-by time; each takes its outcome: published, poison (the bus rejected it for good),
    /// failed, not sent, or held back behind an earlier event of its aggregate that was not
    /// published (and why).
    pub async fn publish<R: Send>(&self, events: &mut [Event<R>], deadline: Deadline) {
        let ready: Vec<usize> = (0..events.len())
            .filter(|&i| events[i].is_ready())
            .collect();
        if ready.is_empty() {
            return;
        }
        let span = telemetry::exporting().then(|| (SystemTime::now(), ready.clone()));
        let outcomes = {
            let entries: Vec<&OutboundEvent> =
                ready.iter().filter_map(|&i| events[i].entry()).collect();
            self.publisher.publish(&entries, deadline).await
        };
        // What each aggregate waits behind since its first event not published in this call.
        let mut blocked: HashMap<String, Behind> = HashMap::new();
        for (index, outcome) in ready.into_iter().zip(outcomes) {
            let event = &mut events[index];
            let aggregate = || event.aggregate.clone().unwrap_or_default();
            let state = match outcome {
                PublishOutcome::Published => State::Published,
                PublishOutcome::Rejected { code, message } => State::Poison {
                    reason: format!("EventBridge rejected the entry: {code}: {message}"),
                },
                PublishOutcome::Failed { code, message } => {
                    tracing::warn!(event_id = %event.id(), code = %code, "event not published; it stays pending");
                    blocked.entry(aggregate()).or_insert(Behind::Failure);
                    State::Failed { code, message }
                }
                PublishOutcome::NotSent => {
                    blocked.entry(aggregate()).or_insert(Behind::NotSent);
                    State::NotSent
                }
                PublishOutcome::HeldBack => State::HeldBack {
                    // The publisher holds back only behind an event of this call; should it not
                    // say which, nothing failed that this relay saw.
                    behind: blocked
                        .get(&aggregate())
                        .copied()
                        .unwrap_or(Behind::NotSent),
                },
            };
            event.state = state;
        }
        if let Some((started, published)) = span {
            self.publish_span(started, events, &published);
        }
    }

    /// The `publish {target}` span of one publish: a `send` of a batch, linked to each event's
    /// creation context (the writer's span), each link saying what became of its event.
    fn publish_span<R>(&self, started: SystemTime, events: &[Event<R>], published: &[usize]) {
        let Some(tracer) = telemetry::tracer() else {
            return;
        };
        let mut counts: HashMap<&'static str, i64> = HashMap::new();
        let mut failure = None;
        let links = published
            .iter()
            .map(|&i| {
                let event = &events[i];
                let outcome = outcome_name(&event.state);
                *counts.entry(outcome).or_default() += 1;
                if let State::Failed { code, .. } = &event.state {
                    failure.get_or_insert_with(|| code.clone());
                }
                (event, outcome)
            })
            .filter_map(|(event, outcome)| {
                let context = telemetry::span_context(event.trace.as_ref()?)?;
                Some(Link::new(
                    context,
                    vec![
                        KeyValue::new("messaging.message.id", event.id().to_owned()),
                        KeyValue::new("outbox.outcome", outcome),
                    ],
                    0,
                ))
            })
            .collect();
        let destination = &self.outbound.destination;
        let name = if destination.is_empty() {
            "publish".to_owned()
        } else {
            format!("publish {destination}")
        };
        let mut attributes = vec![
            KeyValue::new("messaging.system", self.outbound.system),
            KeyValue::new("messaging.operation.type", "send"),
            KeyValue::new("messaging.operation.name", "publish"),
            KeyValue::new("messaging.destination.name", destination.clone()),
            KeyValue::new(
                "messaging.batch.message_count",
                i64::try_from(published.len()).unwrap_or(i64::MAX),
            ),
            KeyValue::new("outbox.relay", self.origin),
            KeyValue::new(
                "outbox.event_format",
                format_name(self.outbound.encoding.format),
            ),
        ];
        attributes.extend(
            counts
                .into_iter()
                .map(|(outcome, n)| KeyValue::new(format!("outbox.{outcome}"), n)),
        );
        let mut span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Client)
            .with_start_time(started)
            .with_attributes(attributes)
            .with_links(links)
            .start(tracer);
        if let Some(code) = failure {
            span.set_attribute(KeyValue::new("error.type", code));
            span.set_status(Status::error("events not published: they stay pending"));
        }
        span.end();
    }

    /// Settles `events` once: each published event is marked ([`MARK_BATCH_MAX`] to a call), each
    /// poison one dead-lettered (with `record_of` its source as JSON) and then marked, every call
    /// ending by `deadline`'s finish-by time. A mark not answered by then is a failed mark (the
    /// event was published; it stays pending and is published again); a dead letter not taken by
    /// then is not dead-lettered (it stays pending, or is re-delivered).
    pub async fn settle<R: Send + Sync>(
        &self,
        events: &mut [Event<R>],
        deadline: Deadline,
        record_of: impl Fn(&R) -> serde_json::Value + Sync,
    ) {
        let started = telemetry::exporting().then(SystemTime::now);
        let settled = {
            let events = &*events;
            // Owned batches and indices: the stream's closures then take no borrowed arguments,
            // which keeps the future `Send` for every caller.
            let batches: Vec<Vec<(usize, ItemKey)>> = {
                let mut published = events
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| matches!(e.state, State::Published))
                    .filter_map(|(i, e)| Some((i, e.key.clone()?)))
                    .peekable();
                let mut batches = Vec::new();
                while published.peek().is_some() {
                    batches.push(published.by_ref().take(MARK_BATCH_MAX).collect());
                }
                batches
            };
            let poison: Vec<(usize, String)> = events
                .iter()
                .enumerate()
                .filter_map(|(i, e)| match &e.state {
                    State::Poison { reason } => Some((i, reason.clone())),
                    _ => None,
                })
                .collect();
            let record_of = &record_of;
            let (mut marked, dead_lettered) = futures::join!(
                futures::stream::iter(batches)
                    .map(|batch| self.mark_published(batch, deadline))
                    .buffer_unordered(self.mark_concurrency)
                    .flat_map(futures::stream::iter)
                    .collect::<Vec<_>>(),
                futures::stream::iter(poison)
                    .map(|(i, reason)| async move {
                        let state = self.dead_letter(&events[i], reason, record_of, deadline);
                        (i, state.await)
                    })
                    .buffer_unordered(self.mark_concurrency)
                    .collect::<Vec<_>>()
            );
            marked.extend(dead_lettered);
            marked
        };
        // Only when spans are exported: nothing is gathered for them otherwise.
        let marked: Vec<usize> = match started {
            Some(_) => settled
                .iter()
                .filter(|(_, state)| matches!(state, State::Marked(_) | State::NotMarked(_)))
                .map(|(index, _)| *index)
                .collect(),
            None => Vec::new(),
        };
        for (index, state) in settled {
            events[index].state = state;
        }
        if let Some(started) = started.filter(|_| !marked.is_empty()) {
            self.mark_span(started, events, &marked);
        }
    }

    /// The `mark` span of one settle: the published events' status updates (a `settle` of the
    /// outbox's messages), linked to each event's creation context with its outcome.
    fn mark_span<R>(&self, started: SystemTime, events: &[Event<R>], marked: &[usize]) {
        let Some(tracer) = telemetry::tracer() else {
            return;
        };
        let not_marked = marked
            .iter()
            .filter(|&&i| matches!(events[i].state, State::NotMarked(_)))
            .count();
        let links = marked
            .iter()
            .filter_map(|&i| {
                let event = &events[i];
                Some(Link::new(
                    telemetry::span_context(event.trace.as_ref()?)?,
                    vec![
                        KeyValue::new("messaging.message.id", event.id().to_owned()),
                        KeyValue::new("outbox.outcome", outcome_name(&event.state)),
                    ],
                    0,
                ))
            })
            .collect();
        let mut span = tracer
            .span_builder("mark")
            .with_kind(SpanKind::Client)
            .with_start_time(started)
            .with_attributes([
                KeyValue::new("messaging.system", OUTBOX_SYSTEM),
                KeyValue::new("messaging.operation.type", "settle"),
                KeyValue::new("messaging.operation.name", "mark"),
                KeyValue::new(
                    "messaging.batch.message_count",
                    i64::try_from(marked.len()).unwrap_or(i64::MAX),
                ),
                KeyValue::new("outbox.relay", self.origin),
                KeyValue::new(
                    "outbox.not_marked",
                    i64::try_from(not_marked).unwrap_or(i64::MAX),
                ),
            ])
            .with_links(links)
            .start(tracer);
        if not_marked > 0 {
            span.set_attribute(KeyValue::new("error.type", "NotMarked"));
            span.set_status(Status::error(
                "published events not marked: they stay pending and are published again",
            ));
        }
        span.end();
    }

    /// Marks one batch of published events (each with its index): each one's state after its
    /// mark.
    async fn mark_published(
        &self,
        batch: Vec<(usize, ItemKey)>,
        deadline: Deadline,
    ) -> Vec<(usize, State)> {
        let (indices, keys): (Vec<usize>, Vec<ItemKey>) = batch.into_iter().unzip();
        let (mut marks, why_unanswered) = match deadline
            .finish(
                BATCH_EXECUTE_STATEMENT,
                async { Ok(self.status.mark_published(&keys).await) },
                |cut| cut,
            )
            .await
        {
            Ok(marks) => (marks, "the status store answered"),
            Err(_) => (Vec::new(), "the deadline came first: answered"),
        };
        // A store that answered for fewer keys left the rest unmarked: each still gets its
        // outcome, an error (it stays pending and is published again).
        let answered = marks.len();
        marks.extend(keys[answered.min(keys.len())..].iter().map(|key| {
            Err(StatusError {
                key: key.clone(),
                status: outbox_shared::OutboxStatus::Published,
                failure: Box::new(outbox_shared::SdkFailure::incomplete(
                    BATCH_EXECUTE_STATEMENT,
                    format!("{why_unanswered} {answered} of {} marks", keys.len()),
                )),
            })
        }));
        indices
            .into_iter()
            .zip(marks)
            .map(|(index, mark)| {
                let state = match mark {
                    Ok(outcome) => State::Marked(outcome),
                    Err(err) => {
                        // Published but still pending: the poller publishes it again after its
                        // grace period, with the same eventId.
                        tracing::warn!(key = %err.key, retryable = err.class().is_retryable(), error = %err.failure, "event published but not marked published");
                        State::NotMarked(err)
                    }
                };
                (index, state)
            })
            .collect()
    }

    /// Sends one poison event to the dead-letter queue with `reason`, then marks it: its state
    /// after both. If the queue refuses it, it is never marked.
    async fn dead_letter<R>(
        &self,
        event: &Event<R>,
        reason: String,
        record_of: &(impl Fn(&R) -> serde_json::Value + Sync),
        deadline: Deadline,
    ) -> State {
        let started = telemetry::exporting().then(SystemTime::now);
        let state = self
            .send_dead_letter(event, reason, record_of, deadline)
            .await;
        if let Some(started) = started {
            self.dead_letter_span(started, event, &state);
        }
        state
    }

    /// The `dead-letter` span of one poison event: its letter sent to the queue (a `send`), and
    /// its mark; linked to its creation context.
    fn dead_letter_span<R>(&self, started: SystemTime, event: &Event<R>, state: &State) {
        let Some(tracer) = telemetry::tracer() else {
            return;
        };
        let reason = match state {
            State::DeadLettered { reason, .. } | State::NotDeadLettered { reason, .. } => {
                reason.clone()
            }
            _ => String::new(),
        };
        let links = event
            .trace
            .as_ref()
            .and_then(telemetry::span_context)
            .map(|context| vec![Link::with_context(context)])
            .unwrap_or_default();
        let mut span = tracer
            .span_builder("dead-letter")
            .with_kind(SpanKind::Producer)
            .with_start_time(started)
            .with_attributes([
                KeyValue::new("messaging.system", SQS_SYSTEM),
                KeyValue::new("messaging.operation.type", "send"),
                KeyValue::new("messaging.operation.name", "dead-letter"),
                KeyValue::new("messaging.message.id", event.id().to_owned()),
                KeyValue::new("outbox.relay", self.origin),
                KeyValue::new("outbox.outcome", outcome_name(state)),
                KeyValue::new("outbox.dead_letter.reason", Value::from(reason)),
            ])
            .with_links(links)
            .start(tracer);
        if matches!(state, State::NotDeadLettered { .. }) {
            span.set_attribute(KeyValue::new("error.type", "NotDeadLettered"));
            span.set_status(Status::error(
                "poison event not dead-lettered: it stays pending",
            ));
        }
        span.end();
    }

    /// Sends one poison event to the dead-letter queue with `reason`, then marks it: its state
    /// after both. If the queue refuses it, it is never marked.
    async fn send_dead_letter<R>(
        &self,
        event: &Event<R>,
        reason: String,
        record_of: &(impl Fn(&R) -> serde_json::Value + Sync),
        deadline: Deadline,
    ) -> State {
        let Some(sink) = &self.dead_letters else {
            tracing::warn!(event_id = %event.id(), reason = %reason, "poison event and no dead-letter queue configured");
            return State::NotDeadLettered {
                reason,
                error: None,
            };
        };
        let letter = DeadLetter {
            reason: reason.clone(),
            origin: self.origin.to_owned(),
            event_id: event.event_id.clone(),
            key: event.key.clone(),
            record: record_of(&event.source),
            dead_lettered_at: format_timestamp(Utc::now()),
            record_left_out: None,
            record_ref: None,
        };
        let sent = deadline
            .finish("SendMessage", sink.send(&letter), |failure| {
                DeadLetterError::Send {
                    event_id: event.event_id.clone(),
                    failure,
                }
            })
            .await;
        if let Err(err) = sent {
            tracing::error!(event_id = %event.id(), error = %outbox_shared::error::describe(&err), "poison event could not be dead-lettered; it stays pending");
            return State::NotDeadLettered {
                reason,
                error: Some(err),
            };
        }
        let mark = match &event.key {
            Some(key) => Some(
                deadline
                    .finish(
                        BATCH_EXECUTE_STATEMENT,
                        self.status.mark_dead_lettered(key, &reason),
                        |failure| StatusError {
                            key: key.clone(),
                            status: outbox_shared::OutboxStatus::DeadLettered,
                            failure: Box::new(failure),
                        },
                    )
                    .await,
            ),
            None => None,
        };
        match &mark {
            Some(Err(err)) => {
                // The dead letter is out; the item stays pending and is dead-lettered again
                // later, which is harmless.
                tracing::warn!(event_id = %event.id(), error = %err.failure, "dead-lettered but not marked dead-lettered");
            }
            _ => {
                tracing::warn!(event_id = %event.id(), reason = %reason, "poison event dead-lettered");
            }
        }
        State::DeadLettered { reason, mark }
    }
}

/// What became of an event, as its span links name it.
fn outcome_name(state: &State) -> &'static str {
    match state {
        State::Published => "published",
        State::Marked(MarkOutcome::Marked) => "marked",
        State::Marked(MarkOutcome::AlreadyMarked) => "already_marked",
        State::NotMarked(_) => "not_marked",
        State::Poison { .. } => "rejected",
        State::DeadLettered { .. } => "dead_lettered",
        State::NotDeadLettered { .. } => "not_dead_lettered",
        State::Failed { .. } => "failed",
        State::NotSent | State::Ready(_) => "not_sent",
        State::HeldBack { .. } => "held_back",
        State::LeftToHold => "left_to_hold",
        State::Ignored(_) => "ignored",
    }
}

fn format_name(format: EventFormat) -> &'static str {
    format.as_str()
}

#[cfg(test)]
mod tests {
    use super::*;
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
}
