//! One event of a stream batch or a poller page, from decode to its tally: one value carries it,
//! and its [`State`] says where it is.
//!
//! ```text
//! decode ──► Ignored                                   (not for this relay)
//!        ├─► Poison ───────────────────► settle ──► DeadLettered | NotDeadLettered
//!        └─► Ready ─┬─► LeftToHold                     (stream relay, hold mode)
//!                   ├─► HeldBack { behind }            (an earlier event of its aggregate was not published)
//!                   └─► publish ──► Published ─► settle ──► Marked | NotMarked
//!                                ├► Poison (rejected) ─► settle ──► DeadLettered | NotDeadLettered
//!                                ├► Failed             (retries exhausted: stays pending)
//!                                ├► NotSent            (the deadline came first: stays pending)
//!                                └► HeldBack { behind }
//! ```
//!
//! The loops around it differ (the stream relay reports a checkpoint to Lambda, the poller holds
//! back an aggregate for the rest of its pass), but each moves its events through these states
//! and counts them with one [`Tally`].
//!
//! An event *not sent* is never a failure: nothing went wrong with it, the deadline (or the
//! publisher's stalled limit) came first. It stays pending, and its aggregate's later events wait
//! behind it ([`Behind::NotSent`]) exactly as they wait behind a failure ([`Behind::Failure`]);
//! only a failure takes a cut (a hold in the stream relay's hold mode, a failing event in a drain's
//! summary).

use std::fmt;

use outbox_shared::entry_field::check_trace_header;
use outbox_shared::envelope::Encoding;
use outbox_shared::{ItemKey, OutboundEvent, OutboxItem, OutboxStatus, TraceContext};

use crate::dead_letter::DeadLetterError;
use crate::recreate::Attributes;
use crate::status_store::{MarkOutcome, StatusError};

/// Why a stream record was not for the relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IgnoreReason {
    /// A `MODIFY`, or a `REMOVE` that is not a TTL deletion (a user's delete).
    NotInsert(String),
    /// The new image is not an outbox event (an order, an idempotency record, or no image).
    NotOutboxEvent,
    /// An outbox item inserted in a status other than `PENDING` (a restore or a copy).
    NotPending(OutboxStatus),
    /// On a global table, an event another region's relays publish (written there:
    /// `OriginRegion`), [`crate::stream_record::published_in_this_region`].
    OtherRegion(Option<String>),
}

/// What an aggregate's later events wait behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Behind {
    /// An event that failed (retries exhausted, an outage, access denied).
    Failure,
    /// An event not sent (the deadline came first, or the publisher's limit stalled): nothing
    /// failed.
    NotSent,
}

/// Where an event is on its way.
#[derive(Debug)]
pub enum State {
    /// Not for this relay (a stream record that is not an outbox `INSERT` or TTL deletion).
    Ignored(IgnoreReason),
    /// Can never be published as it is: for the dead-letter queue. `reason` is for the operator
    /// and never quotes attribute values (they may hold personal data).
    Poison { reason: String },
    /// Its entry built, to publish.
    Ready(OutboundEvent),
    /// Left to the poller under its aggregate's hold (the stream relay's hold mode): it stays
    /// pending and the poller publishes it in order.
    LeftToHold,
    /// Not sent: an earlier event of its aggregate was not published and this one must not
    /// overtake it. It stays pending.
    HeldBack { behind: Behind },
    /// Not sent: the deadline came first (or the publisher's stalled limit). It stays pending.
    NotSent,
    /// Not published after every attempt. It stays pending.
    Failed { code: String, message: String },
    /// Accepted by the bus; its mark is to come.
    Published,
    /// Published, and out of the pending index: marked now, or found already marked.
    Marked(MarkOutcome),
    /// Published, but the mark failed: it stays pending and is published again (the same event
    /// id).
    NotMarked(StatusError),
    /// In the dead-letter queue; `mark` is its status update (`None`: no key to mark).
    DeadLettered {
        reason: String,
        mark: Option<Result<MarkOutcome, StatusError>>,
    },
    /// Poison the dead-letter queue did not take (`error`), or that has no queue to go to
    /// (`None`). It stays pending, or is re-delivered.
    NotDeadLettered {
        reason: String,
        error: Option<DeadLetterError>,
    },
}

/// One event and where it came from.
#[derive(Debug)]
pub struct Event<R> {
    /// Its origin: the stream record, the item read from the index. A dead letter carries it
    /// whole.
    pub source: R,
    /// The item's key, when it was readable: the item is marked through it.
    pub key: Option<ItemKey>,
    pub event_id: Option<String>,
    /// Its aggregate (the ordering key), when the item decoded.
    pub aggregate: Option<String>,
    /// The W3C trace context it was written in (its creation context), when the item has a
    /// valid one: the relay's spans link to it.
    pub trace: Option<TraceContext>,
    /// The item's last image, when the item itself is gone: DynamoDB's TTL deleted it while
    /// pending, and the event was read from the stream's `REMOVE` record, its only copy left. A
    /// dead letter puts the item back `DEAD_LETTERED` from it before the letter goes
    /// ([`crate::StatusStore::recreate_dead_lettered`]): a letter never names an item that is not
    /// there.
    pub gone_item: Option<Attributes>,
    pub state: State,
}

impl<R> Event<R> {
    /// An event in `state` with nothing known of its item (an ignored record).
    pub fn ignored(source: R, reason: IgnoreReason) -> Self {
        Self {
            source,
            key: None,
            event_id: None,
            aggregate: None,
            trace: None,
            gone_item: None,
            state: State::Ignored(reason),
        }
    }

    /// An item that does not decode as an outbox item: poison.
    pub fn undecodable(
        source: R,
        key: Option<ItemKey>,
        event_id: Option<String>,
        error: impl fmt::Display,
    ) -> Self {
        Self {
            source,
            key,
            event_id,
            aggregate: None,
            trace: None,
            gone_item: None,
            state: State::Poison {
                reason: format!(
                    "undecodable outbox item: it does not decode as the item schema: {error}"
                ),
            },
        }
    }

    /// The event of `item`, its body written as `encoding` says: ready with its entry, or
    /// poison when the item can never become one (payload not JSON, an empty id or type, a
    /// `CreatedAt` that is not a timestamp, an `EventType` longer than a `DetailType` may be).
    ///
    /// A `TraceHeader` EventBridge would refuse is left off the entry with a warning, and the
    /// event published without it: dead-lettering a business event for its tracing context is
    /// worse than losing the trace ([`OutboundEvent::from_item`]). So is a `TraceParent` or
    /// `TraceState` the W3C specification refuses (another client wrote it).
    pub fn of_item(source: R, item: OutboxItem, encoding: &Encoding) -> Self {
        if let Some(Err(error)) = item.trace_header.as_deref().map(check_trace_header) {
            tracing::warn!(
                event_id = %item.event_id,
                error = %error,
                "publishing the event without its TraceHeader, which EventBridge would refuse"
            );
        }
        let (trace, trace_error) = item.trace_context();
        if let Some(error) = trace_error {
            tracing::warn!(
                event_id = %item.event_id,
                error = %error,
                "publishing the event without the trace context it was stored with, which the W3C Trace Context specification refuses"
            );
        }
        let (state, aggregate) = match OutboundEvent::from_item(&item, encoding) {
            Ok(entry) => {
                let aggregate = entry.ordering_key.clone();
                (State::Ready(entry), aggregate)
            }
            Err(err) => (
                State::Poison {
                    reason: err.to_string(),
                },
                item.ordering_key().to_owned(),
            ),
        };
        // The item's own strings move into the event: nothing else of it is kept.
        Self {
            source,
            key: Some(ItemKey {
                pk: item.pk,
                sk: item.sk,
            }),
            event_id: Some(item.event_id),
            aggregate: Some(aggregate),
            trace,
            gone_item: None,
            state,
        }
    }

    /// The event with `image` as the last image of its item, which is gone ([`Self::gone_item`]).
    #[must_use]
    pub fn with_gone_item(mut self, image: Attributes) -> Self {
        self.gone_item = Some(image);
        self
    }

    /// The entry to publish, while it is ready.
    pub fn entry(&self) -> Option<&OutboundEvent> {
        match &self.state {
            State::Ready(entry) => Some(entry),
            _ => None,
        }
    }

    pub fn is_ready(&self) -> bool {
        matches!(self.state, State::Ready(_))
    }

    /// What its aggregate's later events wait behind, when it was not published: a failure, or
    /// a publish that did not happen.
    pub fn blocks(&self) -> Option<Behind> {
        match &self.state {
            State::Failed { .. } => Some(Behind::Failure),
            State::NotSent => Some(Behind::NotSent),
            State::HeldBack { behind } => Some(*behind),
            _ => None,
        }
    }

    /// Holds it back behind an earlier event of its aggregate, if it is still ready.
    pub fn hold_back(&mut self, behind: Behind) {
        if self.is_ready() {
            self.state = State::HeldBack { behind };
        }
    }

    /// Leaves it unsent, if it is still ready (the deadline came first, or the relay did not
    /// get to it).
    pub fn leave_unsent(&mut self) {
        if self.is_ready() {
            self.state = State::NotSent;
        }
    }

    /// Whether it left the pending index for good: marked (or found marked) published or
    /// dead-lettered.
    pub fn left_the_index(&self) -> bool {
        matches!(
            self.state,
            State::Marked(_)
                | State::DeadLettered {
                    mark: Some(Ok(_)),
                    ..
                }
        )
    }

    /// Whether it stays pending because something failed: its publish (or an earlier event of
    /// its aggregate's), its dead letter, or its mark. An event only not sent did not fail.
    pub fn is_failing(&self) -> bool {
        match &self.state {
            State::Failed { .. } | State::NotMarked(_) | State::NotDeadLettered { .. } => true,
            State::HeldBack { behind } => *behind == Behind::Failure,
            State::DeadLettered { mark, .. } => matches!(mark, Some(Err(_))),
            _ => false,
        }
    }

    /// The event id, or a placeholder, for logs.
    pub fn id(&self) -> &str {
        self.event_id.as_deref().unwrap_or("(no id)")
    }
}

/// What happened to the events of a batch or page (or of many, summed): the one count both
/// relays' statistics, summaries and metrics are made from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Tally {
    /// Records not for the relay.
    pub ignored: u64,
    /// Published and marked by this relay.
    pub marked: u64,
    /// Published, and found already marked (by another relay, or an earlier attempt).
    pub already_marked: u64,
    /// Published, but the mark failed: still pending.
    pub not_marked: u64,
    /// Dead-lettered and marked (or with no key to mark).
    pub dead_lettered: u64,
    /// Dead-lettered, and found already marked.
    pub dead_lettered_already_marked: u64,
    /// Dead-lettered, but the mark failed: still pending.
    pub dead_lettered_not_marked: u64,
    /// Poison the dead-letter queue did not take (or with no queue): still pending.
    pub not_dead_lettered: u64,
    /// Not published after every attempt: still pending.
    pub failed: u64,
    /// Not sent (the deadline, or the stalled limit, came first): still pending.
    pub not_sent: u64,
    /// Held back behind an earlier event of their aggregate: still pending.
    pub held_back: u64,
    /// Left to the poller under a hold (the stream relay's hold mode): still pending.
    pub left_to_hold: u64,
}

impl Tally {
    /// Counts `events` by their state.
    pub fn of<'a, R: 'a>(events: impl IntoIterator<Item = &'a Event<R>>) -> Self {
        let mut tally = Self::default();
        for event in events {
            tally.count(&event.state);
        }
        tally
    }

    fn count(&mut self, state: &State) {
        let counter = match state {
            State::Ignored(_) => &mut self.ignored,
            State::Marked(MarkOutcome::Marked) => &mut self.marked,
            State::Marked(MarkOutcome::AlreadyMarked) => &mut self.already_marked,
            // A publish whose mark never ran is as good as one whose mark failed.
            State::Published | State::NotMarked(_) => &mut self.not_marked,
            State::DeadLettered { mark, .. } => match mark {
                None | Some(Ok(MarkOutcome::Marked)) => &mut self.dead_lettered,
                Some(Ok(MarkOutcome::AlreadyMarked)) => &mut self.dead_lettered_already_marked,
                Some(Err(_)) => &mut self.dead_lettered_not_marked,
            },
            // Poison never settled was not dead-lettered.
            State::Poison { .. } | State::NotDeadLettered { .. } => &mut self.not_dead_lettered,
            State::Failed { .. } => &mut self.failed,
            // Ready and never published: the relay did not get to it.
            State::Ready(_) | State::NotSent => &mut self.not_sent,
            State::HeldBack { .. } => &mut self.held_back,
            State::LeftToHold => &mut self.left_to_hold,
        };
        *counter += 1;
    }

    /// Events the bus accepted (marked or not).
    pub fn published(&self) -> u64 {
        self.marked + self.already_marked + self.not_marked
    }

    /// Events in the dead-letter queue (marked or not).
    pub fn all_dead_lettered(&self) -> u64 {
        self.dead_lettered + self.dead_lettered_already_marked + self.dead_lettered_not_marked
    }

    /// Events that left the outbox (published or dead-lettered) whose mark failed.
    pub fn all_not_marked(&self) -> u64 {
        self.not_marked + self.dead_lettered_not_marked
    }
}

impl std::ops::AddAssign for Tally {
    fn add_assign(&mut self, other: Self) {
        self.ignored += other.ignored;
        self.marked += other.marked;
        self.already_marked += other.already_marked;
        self.not_marked += other.not_marked;
        self.dead_lettered += other.dead_lettered;
        self.dead_lettered_already_marked += other.dead_lettered_already_marked;
        self.dead_lettered_not_marked += other.dead_lettered_not_marked;
        self.not_dead_lettered += other.not_dead_lettered;
        self.failed += other.failed;
        self.not_sent += other.not_sent;
        self.held_back += other.held_back;
        self.left_to_hold += other.left_to_hold;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::pending_item as item;

    #[test]
    fn an_item_is_ready_with_its_entry_or_poison_with_a_reason() {
        let ready = Event::of_item((), item("a", "{}"), &Encoding::envelope());
        assert_eq!(ready.entry().map(|e| e.event_id.as_str()), Some("a"));
        assert_eq!(ready.aggregate.as_deref(), Some("o-a"));
        let poison = Event::of_item((), item("b", "not json"), &Encoding::envelope());
        assert!(
            matches!(&poison.state, State::Poison { reason } if reason.contains("not valid JSON")),
            "{poison:?}"
        );
        assert_eq!(poison.key, Some(item("b", "").key()));
    }

    #[test]
    fn only_a_ready_event_is_held_back_or_left_unsent() {
        let mut held = Event::of_item((), item("a", "{}"), &Encoding::envelope());
        held.hold_back(Behind::NotSent);
        assert_eq!(held.blocks(), Some(Behind::NotSent));
        let mut poison = Event::of_item((), item("b", "nope"), &Encoding::envelope());
        poison.hold_back(Behind::Failure);
        poison.leave_unsent();
        assert!(matches!(poison.state, State::Poison { .. }));
        assert_eq!(poison.blocks(), None);
    }

    #[test]
    fn a_tally_counts_every_state_once() {
        let states = [
            State::Ignored(IgnoreReason::NotOutboxEvent),
            State::Marked(MarkOutcome::Marked),
            State::Marked(MarkOutcome::AlreadyMarked),
            State::Published,
            State::DeadLettered {
                reason: "r".into(),
                mark: None,
            },
            State::NotDeadLettered {
                reason: "r".into(),
                error: None,
            },
            State::Failed {
                code: "c".into(),
                message: "m".into(),
            },
            State::NotSent,
            State::HeldBack {
                behind: Behind::Failure,
            },
            State::LeftToHold,
        ];
        let events: Vec<Event<()>> = states
            .into_iter()
            .map(|state| Event {
                state,
                ..Event::ignored((), IgnoreReason::NotOutboxEvent)
            })
            .collect();
        let tally = Tally::of(&events);
        assert_eq!(tally.published(), 3);
        assert_eq!(tally.all_not_marked(), 1);
        assert_eq!(tally.all_dead_lettered(), 1);
        let Tally {
            ignored,
            not_dead_lettered,
            failed,
            not_sent,
            held_back,
            left_to_hold,
            ..
        } = tally;
        assert_eq!(
            [
                ignored,
                not_dead_lettered,
                failed,
                not_sent,
                held_back,
                left_to_hold
            ],
            [1; 6]
        );
    }
}
