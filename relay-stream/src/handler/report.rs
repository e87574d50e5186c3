//! What a batch ends in: an outcome per record, the counts, and the partial-batch response
//! Lambda checkpoints from.

use aws_lambda_events::dynamodb::EventRecord;
use aws_lambda_events::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use outbox_shared::OutboxStatus;

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
    Held {
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
    pub failed: u64,
    /// Left pending for the poller (`hold_failed_aggregates`).
    pub held: u64,
    /// Published or dead-lettered, but the status update failed: the item stays pending and the
    /// poller publishes it again (a part of `published` and `dead_lettered`, not more).
    pub not_marked: u64,
}

impl std::ops::AddAssign for BatchCounts {
    fn add_assign(&mut self, other: Self) {
        self.published += other.published;
        self.ignored += other.ignored;
        self.dead_lettered += other.dead_lettered;
        self.failed += other.failed;
        self.held += other.held;
        self.not_marked += other.not_marked;
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
                RecordOutcome::Published { marked, .. } => {
                    counts.published += 1;
                    counts.not_marked += u64::from(!marked);
                }
                RecordOutcome::DeadLettered { marked, .. } => {
                    counts.dead_lettered += 1;
                    counts.not_marked += u64::from(!marked);
                }
                RecordOutcome::Failed { .. } | RecordOutcome::NotSent { .. } => {
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
