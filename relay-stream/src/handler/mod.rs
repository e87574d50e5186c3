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
//! is the price of never re-driving a whole shard for a bookkeeping write. Such a record is
//! published and not marked (`marked: false`), counted `not_marked` (metric `NotMarked`).
//!
//! A re-delivered batch: a record reported as the batch item failure makes Lambda deliver the
//! batch again from that record, so the records after it that were published come again. The
//! relay remembers the event ids it published (`relay_runtime::RecentKeys`, bounded by
//! [`RECENTLY_PUBLISHED_TTL`] and [`RECENTLY_PUBLISHED_CAPACITY`]); a warm Lambda container keeps
//! them from one invocation to the next. A remembered event is not sent again: it counts as
//! published and is marked again (a mark that failed the first time gets another try; one that
//! succeeded finds the item already marked). Only an event EventBridge accepted from this process
//! is remembered, so nothing unpublished is skipped (at-least-once holds). A container that does
//! not remember (a cold one after a re-delivery) publishes the batch again: one duplicate per
//! event it re-publishes.
//!
//! One value carries each record of a batch from decode to the report
//! (`relay_runtime::Event`): decoded, left to a hold, published, settled once, reported. The
//! per-event part (publish, then mark or dead-letter then mark, concurrently) is
//! `relay_runtime::relay`, shared with the poller; this module is the batch loop around it: what
//! the stream carries, strict order, and the checkpoint Lambda resumes from.
//!
//! On a global table, a batch first reads whether another region adopted this relay's region
//! (the [`RegionAdoption`] port, once a batch); while one has, the region's events are left to the
//! adopter's pollers under their aggregates' holds (docs/global-tables.md, "The stream relay while
//! its region is adopted").
//!
//! The room: this file is the relay and its one batch loop ([`StreamRelay::handle`]); [`decode`]
//! says what each record is; [`holds`] is hold mode (`HOLD_FAILED_AGGREGATES`) and an adopted
//! region's leave, a component of its own holding the holds port, before and after the publish;
//! [`report`] is what a batch ends in, and the response Lambda reads.

use outbox_shared::region::GlobalTable;
use std::sync::Arc;
use std::time::Instant;

use aws_lambda_events::dynamodb::EventRecord;
use chrono::Utc;
use relay_runtime::{
    AdoptionError, AggregateHolds, DeadLetterSink, Deadline, Event, EventRelay, Publisher,
    RecentKeys, RegionAdoption, SingleRegion, State, StatusStore,
};

use crate::handler::decode::{dead_letter_record, decode};
use crate::handler::holds::HoldMode;

pub mod decode;
pub mod holds;
pub mod report;

pub use relay_runtime::IgnoreReason;
pub use report::{BATCH_HANDLED, BatchCounts, BatchReport, RecordOutcome};

/// `origin` of the dead letters this relay sends.
pub const ORIGIN: &str = "relay-stream";

/// Default for `MARK_CONCURRENCY`: one status update per record of a default-sized (100) batch,
/// so marking a batch published costs one round trip.
pub const DEFAULT_MARK_CONCURRENCY: usize = 100;

/// Default for `DEADLINE_MARGIN`: no publish starts later than this before the invocation's
/// deadline. It covers a call already in flight (bounded by the SDK's operation timeout,
/// `relay_runtime::SDK_OPERATION_TIMEOUT`) and the marks after it.
pub const DEFAULT_DEADLINE_MARGIN: std::time::Duration = std::time::Duration::from_secs(12);

/// How long the handler remembers an event it published, to skip it in a re-delivered batch:
/// Lambda re-delivers a failed stream batch within seconds to minutes (its retries back off), and
/// a later re-delivery costs a duplicate, not a loss.
pub const RECENTLY_PUBLISHED_TTL: std::time::Duration = std::time::Duration::from_secs(15 * 60);

/// Most event ids the handler remembers: two batches of the largest size Lambda delivers (10,000
/// records), a few MB. The oldest are forgotten first.
pub const RECENTLY_PUBLISHED_CAPACITY: usize = 20_000;

/// What the handler keeps of the invocation's time to return its response: the marks, dead letters
/// and hold writes after the last publish end by the deadline minus this, whatever the SDK's own
/// timeouts allow them.
pub const RESPONSE_RESERVE: std::time::Duration = std::time::Duration::from_millis(500);

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
    /// The global table this relay's region is part of (`--regions`), `None` on a single-region
    /// table: the relay then publishes only its region's events, and none while another region
    /// has adopted its region (docs/global-tables.md).
    pub global_table: Option<GlobalTable>,
}

impl Default for HandlerOptions {
    fn default() -> Self {
        Self {
            stop_at_first_failure: false,
            strict_chunk_size: outbox_shared::limits::PUT_EVENTS_MAX_ENTRIES,
            mark_concurrency: DEFAULT_MARK_CONCURRENCY,
            deadline_margin: DEFAULT_DEADLINE_MARGIN,
            hold_failed_aggregates: false,
            global_table: None,
        }
    }
}

/// The handler, generic over its ports: on a global table, `A` reads whether another region
/// publishes this region's events ([`StreamRelay::with_adoption`]).
#[derive(Debug, Clone)]
pub struct StreamRelay<P, S, D, H, A = SingleRegion> {
    relay: EventRelay<P, S, D>,
    /// The holds' component: in hold mode, and on a global table (an adopted region's events are
    /// left under holds).
    hold_mode: Option<HoldMode<H>>,
    /// Who publishes this region's events, read once a batch on a global table.
    adoption: A,
    options: HandlerOptions,
    /// The event ids this process published lately, shared by the relay's clones (one per
    /// container, kept across invocations).
    recently_published: Arc<RecentKeys<String>>,
}

impl<P: Publisher, S: StatusStore, D: DeadLetterSink, H: AggregateHolds> StreamRelay<P, S, D, H> {
    /// A relay that sends poison records to `dead_letters`, or reports them as batch item
    /// failures when it is `None`, and keeps aggregate holds in `holds` (in hold mode, and on a
    /// global table). On a global table it needs [`Self::with_adoption`].
    pub fn new(
        publisher: P,
        status: S,
        holds: H,
        dead_letters: Option<D>,
        options: HandlerOptions,
    ) -> Self {
        Self {
            relay: EventRelay::new(
                publisher,
                status,
                dead_letters,
                ORIGIN,
                options.mark_concurrency,
            ),
            hold_mode: (options.hold_failed_aggregates || options.global_table.is_some())
                .then(|| HoldMode::new(holds, options.mark_concurrency)),
            adoption: SingleRegion,
            options,
            recently_published: Arc::new(RecentKeys::new(
                RECENTLY_PUBLISHED_TTL,
                RECENTLY_PUBLISHED_CAPACITY,
            )),
        }
    }

    /// The relay on a global table, reading from `adoption` whether another region publishes
    /// its region's events (once a batch).
    pub fn with_adoption<A: RegionAdoption>(self, adoption: A) -> StreamRelay<P, S, D, H, A> {
        StreamRelay {
            relay: self.relay,
            hold_mode: self.hold_mode,
            adoption,
            options: self.options,
            recently_published: self.recently_published,
        }
    }
}

impl<P: Publisher, S: StatusStore, D: DeadLetterSink, H: AggregateHolds, A: RegionAdoption>
    StreamRelay<P, S, D, H, A>
{
    /// The relay with its events written and named as `outbound` says: the publisher's format
    /// and bus (the envelope, and no bus on its spans, unless set).
    #[must_use]
    pub fn with_outbound(mut self, outbound: relay_runtime::relay::Outbound) -> Self {
        self.relay = self.relay.with_outbound(outbound);
        self
    }

    pub fn publisher(&self) -> &P {
        self.relay.publisher()
    }

    pub fn options(&self) -> &HandlerOptions {
        &self.options
    }

    /// The deadline of a batch that must be done by `invocation` (the invocation's deadline): no
    /// publish starts after it less the margin, and what follows the last publish ends
    /// [`RESPONSE_RESERVE`] before it.
    pub fn deadline_of(&self, invocation: tokio::time::Instant) -> Deadline {
        Deadline::of_invocation(invocation, self.options.deadline_margin, RESPONSE_RESERVE)
    }

    /// Handles one batch of stream records by `deadline` ([`Self::deadline_of`] the
    /// invocation's, or [`Deadline::NONE`]): each record is decoded; on a global table whose
    /// region another region adopted, left to that region's pollers under its aggregate's hold;
    /// in hold mode (or on a global table) left to the poller if its aggregate is held; published
    /// unless this relay published it already; in hold mode held if it failed; and settled once
    /// (marked, or dead-lettered then marked). The first record not published is the batch item
    /// failure.
    pub async fn handle(&self, records: &[EventRecord], deadline: Deadline) -> BatchReport {
        let encoding = self.relay.encoding();
        let table = self.options.global_table.as_ref();
        let mut events: Vec<Event<&EventRecord>> =
            records.iter().map(|r| decode(r, encoding, table)).collect();
        if let (Some(table), Some(hold_mode)) = (table, &self.hold_mode) {
            self.leave_if_adopted(table, hold_mode, &mut events, deadline)
                .await;
        }
        if let Some(hold_mode) = &self.hold_mode {
            hold_mode.leave_held(&mut events, deadline).await;
        }
        let publish_started = Instant::now();
        self.publish(&mut events, deadline).await;
        let published_at = Utc::now();
        let settle_started = Instant::now();
        if let Some(hold_mode) = self
            .hold_mode
            .as_ref()
            .filter(|_| self.options.hold_failed_aggregates)
        {
            hold_mode.hold_failed(&mut events, deadline).await;
        }
        self.relay
            .settle(&mut events, deadline, |record| dead_letter_record(record))
            .await;
        let timing = report::Timing {
            publish: settle_started.duration_since(publish_started),
            settle: settle_started.elapsed(),
        };
        self.recently_published.remember(
            events
                .iter()
                .filter(|e| matches!(e.state, State::Marked(_) | State::NotMarked(_)))
                .filter_map(|e| e.event_id.clone()),
        );
        report::report(events, published_at, timing)
    }

    /// On a global table, before anything is published: reads once whether another region
    /// adopted this relay's region, and while one has, leaves this region's ready events to the
    /// adopter's pollers under their aggregates' holds ([`HoldMode::leave_adopted`]). A batch with
    /// no ready event reads nothing. If the adoption can't be read, no event is sent (the batch
    /// is re-delivered): none may be published while another region publishes it.
    async fn leave_if_adopted(
        &self,
        table: &GlobalTable,
        hold_mode: &HoldMode<H>,
        events: &mut [Event<&EventRecord>],
        deadline: Deadline,
    ) {
        if !events.iter().any(Event::is_ready) {
            return;
        }
        let own = table.own();
        let read = deadline
            .finish("GetItem", self.adoption.adopter_of(own), |failure| {
                AdoptionError::Call {
                    key: outbox_shared::region::lease_item::adoption_key(own),
                    failure,
                }
            })
            .await;
        match read {
            Ok(None) => {}
            Ok(Some(adopter)) => {
                let left = hold_mode.leave_adopted(events, &adopter, deadline).await;
                tracing::info!(
                    region = %own,
                    %adopter,
                    left,
                    "region adopted: its events left to the adopter's pollers under their aggregates' holds"
                );
            }
            Err(err) => {
                tracing::warn!(region = %own, error = %outbox_shared::error::describe(&err), "could not read whether another region adopted this one; the batch is re-delivered");
                events.iter_mut().for_each(Event::leave_unsent);
            }
        }
    }

    /// Publishes the ready events, except those this relay published lately (a re-delivered
    /// batch brings them again): they are published without a call, so they are marked again and
    /// reported published. Only an event the bus accepted from this process is remembered, so
    /// none is skipped that was not published. In strict mode it publishes a chunk at a time and
    /// stops at the first chunk with an event not published: the rest are not sent.
    async fn publish(&self, events: &mut [Event<&EventRecord>], deadline: Deadline) {
        let mut skipped = 0;
        for event in events.iter_mut().filter(|e| e.is_ready()) {
            if event
                .event_id
                .as_ref()
                .is_some_and(|id| self.recently_published.contains(id))
            {
                event.state = State::Published;
                skipped += 1;
            }
        }
        if skipped > 0 {
            tracing::info!(
                already_published = skipped,
                "re-delivered records whose events this relay published: marked, not published again"
            );
        }
        if !self.options.stop_at_first_failure {
            return self.relay.publish(events, deadline).await;
        }
        let chunk = self.options.strict_chunk_size.max(1);
        let mut rest = events;
        while !rest.is_empty() {
            // Up to `chunk` ready events (and whatever lies between them).
            let ready: Vec<usize> = (0..rest.len()).filter(|&i| rest[i].is_ready()).collect();
            let end = ready.get(chunk).copied().unwrap_or(rest.len());
            let (now, later) = std::mem::take(&mut rest).split_at_mut(end);
            self.relay.publish(now, deadline).await;
            if ready.iter().any(|&i| i < end && now[i].blocks().is_some()) {
                later.iter_mut().for_each(Event::leave_unsent);
                break;
            }
            rest = later;
        }
    }
}

#[cfg(test)]
mod tests;
