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
//! - except a poison event whose item is gone (DynamoDB's TTL deleted it): its item is put back
//!   `DEAD_LETTERED` from its last image first, and the letter is sent only once it is there, so
//!   no letter names an item that is not (if the put fails, the stream re-delivers the record);
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
//! `dead-letter` span per poison event links to its creation context (`spans.rs`).

use std::collections::HashMap;
use std::time::SystemTime;

use chrono::Utc;
use futures::StreamExt;
use outbox_shared::envelope::Encoding;
use outbox_shared::time::format_timestamp;
use outbox_shared::{ItemKey, OutboundEvent};

use crate::config::PublisherConfig;
use crate::dead_letter::{DeadLetter, DeadLetterError, DeadLetterSink};
use crate::deadline::Deadline;
use crate::event::{Behind, Event, State};
use crate::publisher::{PublishOutcome, Publisher};
use crate::status_store::{BATCH_EXECUTE_STATEMENT, MARK_BATCH_MAX, StatusError, StatusStore};
use crate::telemetry;

mod spans;

pub use spans::{OUTBOX_SYSTEM, SQS_SYSTEM};

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
                // The message says what refused it: the target, the relay's own entry budget,
                // or the payload bucket.
                PublishOutcome::Rejected { code, message } => State::Poison {
                    reason: format!("{code}: {message}"),
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
            spans::publish(&self.outbound, self.origin, started, events, &published);
        }
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
            spans::mark(self.origin, started, events, &marked);
        }
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

    /// [`Self::send_dead_letter`], with its span when spans are exported.
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
            spans::dead_letter(self.origin, started, event, &state);
        }
        state
    }

    /// Sends one poison event to the dead-letter queue with `reason`, then marks it: its state
    /// after both. If the queue refuses it, it is never marked. An event whose item is gone
    /// ([`Event::gone_item`]) is marked first, by putting its item back `DEAD_LETTERED`, and
    /// sent only once that is done.
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
        // An event whose item is gone (a TTL deletion) has no item to mark: the item is put back
        // `DEAD_LETTERED` from its last image before the letter goes, so a letter without its
        // record (too large for the queue) still names where the event is. If that fails, no
        // letter goes: the event stays failed (the stream re-delivers it) rather than be sent
        // with a word that is not true.
        let recreated = match (&event.gone_item, &event.key) {
            (Some(image), Some(key)) => {
                let put = deadline
                    .finish(
                        crate::recreate::PUT_ITEM,
                        self.status.recreate_dead_lettered(key, image, &reason),
                        |failure| StatusError {
                            key: key.clone(),
                            status: outbox_shared::OutboxStatus::DeadLettered,
                            failure: Box::new(failure),
                        },
                    )
                    .await;
                match put {
                    Ok(outcome) => Some(outcome),
                    Err(err) => {
                        let err = DeadLetterError::Recreate {
                            event_id: event.event_id.clone(),
                            failure: err.failure,
                        };
                        tracing::error!(event_id = %event.id(), error = %outbox_shared::error::describe(&err), "poison event whose item TTL deleted could not be put back; it is not dead-lettered");
                        return State::NotDeadLettered {
                            reason,
                            error: Some(err),
                        };
                    }
                }
            }
            _ => None,
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
        let mark = match (recreated, &event.key) {
            // Put back `DEAD_LETTERED` already: that was its mark.
            (Some(outcome), _) => Some(Ok(outcome)),
            (None, Some(key)) => Some(
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
            (None, None) => None,
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

#[cfg(test)]
mod tests;
