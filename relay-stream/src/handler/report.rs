//! What a batch ends in: an outcome per record, the counts (from the runtime's one
//! [`Tally`]), and the partial-batch response Lambda checkpoints from.

use aws_lambda_events::dynamodb::EventRecord;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use chrono::{DateTime, Utc};
use relay_runtime::{Event, IgnoreReason, State, Tally};

use crate::metrics as m;

/// The message of the line the handler logs (at info) for every batch it handled, with its
/// counts (`published` among them) and where its time went: what `outbox-demo` reads its
/// progress from, without a call to the emulators.
pub const BATCH_HANDLED: &str = "batch handled";

/// What happened to one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    Ignored(IgnoreReason),
    /// Published to EventBridge.
    Published {
        event_id: String,
        /// Whether the item is out of the pending index: marked now, or already. `false` when the
        /// status update failed: it stays pending and the poller publishes it again (counted
        /// `not_marked`).
        marked: bool,
    },
    /// Poison: sent to the dead-letter queue with `reason`.
    DeadLettered {
        event_id: Option<String>,
        reason: String,
        /// As for [`Self::Published`]; `true` for a record without an item key (nothing to mark).
        marked: bool,
    },
    /// Not published; the record is (or is after) the batch item failure.
    Failed {
        event_id: Option<String>,
        reason: String,
    },
    /// Not sent: the deadline came first, an earlier event of its aggregate was not published
    /// (held back), or strict mode stopped at an earlier failure. Re-delivered.
    NotSent {
        event_id: String,
    },
    /// Left pending for the poller: its aggregate is held (`hold_failed_aggregates`).
    LeftToHold {
        event_id: String,
    },
}

impl RecordOutcome {
    /// Whether the record must be delivered again.
    pub fn needs_redelivery(&self) -> bool {
        matches!(self, Self::Failed { .. } | Self::NotSent { .. })
    }
}

/// Counts of one batch (or of many, summed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct BatchCounts {
    pub published: u64,
    pub ignored: u64,
    pub dead_lettered: u64,
    /// Not published because something failed: the publish (after its retries), or the
    /// dead-letter queue that did not take a poison record. Re-delivered.
    pub failed: u64,
    /// Not sent, nothing having failed: the deadline came first, strict order stopped, or an
    /// earlier event of the aggregate was not published. Re-delivered.
    pub not_sent: u64,
    /// Left pending for the poller under their aggregate's hold (`hold_failed_aggregates`): the
    /// poller publishes them, in order.
    pub left_to_hold: u64,
    /// Published or dead-lettered, but the status update failed: the item stays pending and the
    /// poller publishes it again (a part of `published` and `dead_lettered`, not more).
    pub not_marked: u64,
}

impl From<Tally> for BatchCounts {
    fn from(tally: Tally) -> Self {
        Self {
            published: tally.published(),
            ignored: tally.ignored,
            dead_lettered: tally.all_dead_lettered(),
            failed: tally.failed + tally.not_dead_lettered,
            not_sent: tally.not_sent + tally.held_back,
            left_to_hold: tally.left_to_hold,
            not_marked: tally.all_not_marked(),
        }
    }
}

impl std::ops::AddAssign for BatchCounts {
    fn add_assign(&mut self, other: Self) {
        self.published += other.published;
        self.ignored += other.ignored;
        self.dead_lettered += other.dead_lettered;
        self.failed += other.failed;
        self.not_sent += other.not_sent;
        self.left_to_hold += other.left_to_hold;
        self.not_marked += other.not_marked;
    }
}

/// The result of one batch: an outcome per record, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchReport {
    pub outcomes: Vec<RecordOutcome>,
    /// Index of the first record that must be delivered again.
    pub first_unpublished: Option<usize>,
    /// What happened to the batch's events.
    pub tally: Tally,
}

impl BatchReport {
    pub fn counts(&self) -> BatchCounts {
        BatchCounts::from(self.tally)
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

/// What a settled event means for its record. A failed mark is not a batch failure (see the
/// module docs of [`super`]); it is counted `not_marked`.
fn record_outcome(event: Event<&EventRecord>) -> RecordOutcome {
    let Event {
        event_id, state, ..
    } = event;
    let id = || event_id.clone().unwrap_or_default();
    match state {
        State::Ignored(reason) => RecordOutcome::Ignored(reason),
        State::Marked(_) => RecordOutcome::Published {
            event_id: id(),
            marked: true,
        },
        // A publish whose mark never ran is as good as one whose mark failed.
        State::NotMarked(_) | State::Published => RecordOutcome::Published {
            event_id: id(),
            marked: false,
        },
        State::DeadLettered { reason, mark } => RecordOutcome::DeadLettered {
            event_id,
            reason,
            marked: !matches!(mark, Some(Err(_))),
        },
        State::NotDeadLettered {
            reason,
            error: None,
        }
        | State::Poison { reason } => RecordOutcome::Failed {
            event_id,
            reason: format!("poison (no dead-letter queue configured): {reason}"),
        },
        State::NotDeadLettered {
            error: Some(err), ..
        } => RecordOutcome::Failed {
            event_id,
            reason: format!("dead-letter queue unavailable: {err}"),
        },
        State::Failed { code, message } => RecordOutcome::Failed {
            event_id,
            reason: format!("{code}: {message}"),
        },
        State::Ready(_) | State::NotSent | State::HeldBack { .. } => {
            RecordOutcome::NotSent { event_id: id() }
        }
        State::LeftToHold => RecordOutcome::LeftToHold { event_id: id() },
    }
}

/// Where a batch's time went, for its log line: publishing its ready events, then settling them
/// (holding the failed ones in hold mode, marking, dead-lettering).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Timing {
    pub(super) publish: std::time::Duration,
    pub(super) settle: std::time::Duration,
}

/// The batch's report from its settled events (one per record, in order), counted in the metrics
/// and the log: the relay lag is `published_at` less the oldest published record's creation.
pub(super) fn report(
    events: Vec<Event<&EventRecord>>,
    published_at: DateTime<Utc>,
    timing: Timing,
) -> BatchReport {
    let tally = Tally::of(&events);
    let max_lag_ms = events
        .iter()
        .filter(|e| matches!(e.state, State::Marked(_) | State::NotMarked(_)))
        .map(|e| (published_at - e.source.change.approximate_creation_date_time).num_milliseconds())
        .max();
    let records = events.len();
    let outcomes: Vec<RecordOutcome> = events.into_iter().map(record_outcome).collect();
    let first_unpublished = outcomes.iter().position(RecordOutcome::needs_redelivery);
    let report = BatchReport {
        outcomes,
        first_unpublished,
        tally,
    };
    let counts = report.counts();
    m::record_batch(&report.tally, max_lag_ms);
    tracing::info!(
        records,
        published = counts.published,
        ignored = counts.ignored,
        dead_lettered = counts.dead_lettered,
        failed = counts.failed,
        not_sent = counts.not_sent,
        left_to_hold = counts.left_to_hold,
        not_marked = counts.not_marked,
        publish_ms = timing.publish.as_millis() as u64,
        settle_ms = timing.settle.as_millis() as u64,
        "{BATCH_HANDLED}"
    );
    report
}
