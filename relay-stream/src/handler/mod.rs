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
//! not remember (a cold one after a re-delivery) publishes the batch again, duplicates as before.
//!
//! The per-event part (an item becomes an event or a poison case; dead-letter then mark; mark
//! concurrently) is `relay_runtime::relay`, shared with the poller; this module is the batch
//! loop around it: what the stream carries, strict order, and the checkpoint Lambda resumes from.
//!
//! The room: [`batch`] is the batch loop (decode, publish, settle, report); [`decode`] says what
//! each record is; [`holds`] is hold mode (`HOLD_FAILED_AGGREGATES`), before and after the
//! publish; [`report`] is what a batch ends in, and the response Lambda reads.

use std::sync::Arc;

use relay_runtime::{DeadLetterSink, EventRelay, HoldStore, Publisher, RecentKeys, StatusStore};

pub mod batch;
pub mod decode;
pub mod holds;
pub mod report;

pub use report::{BatchCounts, BatchReport, IgnoreReason, RecordOutcome};

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

/// The handler, generic over its ports.
#[derive(Debug, Clone)]
pub struct StreamRelay<P, S, D, H> {
    relay: EventRelay<P, S, D>,
    /// Aggregate holds (read and written in hold mode only).
    holds: H,
    options: HandlerOptions,
    /// The event ids this process published lately, shared by the relay's clones (one per
    /// container, kept across invocations).
    recently_published: Arc<RecentKeys<String>>,
}

impl<P: Publisher, S: StatusStore, D: DeadLetterSink, H: HoldStore> StreamRelay<P, S, D, H> {
    /// A relay that sends poison records to `dead_letters`, or reports them as batch item
    /// failures when it is `None`, and keeps aggregate holds in `holds`.
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
            holds,
            options,
            recently_published: Arc::new(RecentKeys::new(
                RECENTLY_PUBLISHED_TTL,
                RECENTLY_PUBLISHED_CAPACITY,
            )),
        }
    }

    pub fn publisher(&self) -> &P {
        self.relay.publisher()
    }

    pub fn options(&self) -> &HandlerOptions {
        &self.options
    }
}

#[cfg(test)]
mod tests;
