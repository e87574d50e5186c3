//! What a batch came to: each message's outcome in the order received, and the response that
//! tells Lambda which of them to deliver again.

use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse};
use aws_lambda_events::streams::{KinesisBatchItemFailure, KinesisEventResponse};

use super::error::BatchError;
use super::rules::{Rules, Semantics};

/// A message acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Processed<R> {
    /// The handler ran now; its response.
    Handled(R),
    /// The idempotency store had the event completed: its stored response, the handler not run.
    Replayed(R),
    /// Order restored: its sequence was applied before (a duplicate), the handler not run.
    AlreadyApplied,
}

impl<R> Processed<R> {
    /// Whether the handler ran for this delivery.
    pub fn handled(&self) -> bool {
        matches!(self, Self::Handled(_))
    }

    /// The handler's response, now or stored.
    pub fn response(&self) -> Option<&R> {
        match self {
            Self::Handled(r) | Self::Replayed(r) => Some(r),
            Self::AlreadyApplied => None,
        }
    }
}

/// One message's outcome.
#[derive(Debug)]
pub enum ItemStatus<R> {
    Done(Processed<R>),
    Failed(BatchError),
    /// Not handled: an earlier failure holds it back under its source's rule (reported, so it
    /// is delivered again after the failed one).
    HeldBack,
}

/// One message of the batch.
#[derive(Debug)]
pub struct ItemReport<R> {
    /// Its identifier in the `batchItemFailures` response: the SQS message id, the Kinesis
    /// sequence number, the EventBridge event's id.
    pub id: String,
    /// The outbox event's id, once decoded.
    pub event_id: Option<String>,
    pub status: ItemStatus<R>,
    /// Order restored: the sequences missing before it when it was applied past a gap.
    pub gap: Option<u64>,
}

impl<R> ItemReport<R> {
    pub(crate) fn new(id: String) -> Self {
        Self {
            id,
            event_id: None,
            status: ItemStatus::HeldBack,
            gap: None,
        }
    }

    /// Whether the message is acknowledged (not delivered again).
    pub fn is_done(&self) -> bool {
        matches!(self.status, ItemStatus::Done(_))
    }

    /// Whether the handler ran for this message in this invocation.
    pub fn handled(&self) -> bool {
        matches!(&self.status, ItemStatus::Done(p) if p.handled())
    }

    pub fn error(&self) -> Option<&BatchError> {
        match &self.status {
            ItemStatus::Failed(e) => Some(e),
            _ => None,
        }
    }
}

/// A batch's outcome, in the order received.
#[derive(Debug)]
pub struct BatchReport<R> {
    pub semantics: Semantics,
    pub items: Vec<ItemReport<R>>,
}

impl<R> BatchReport<R> {
    /// The identifiers to report under the source's rule: every message failed or held back,
    /// but on a stream only the first failed (Lambda retries from it).
    pub fn failures(&self) -> Vec<&str> {
        let not_done = self
            .items
            .iter()
            .filter(|i| !i.is_done())
            .map(|i| i.id.as_str());
        if Rules::reports_every_failure(self.semantics) {
            not_done.collect()
        } else {
            not_done.take(1).collect()
        }
    }

    /// The response to an SQS trigger (`ReportBatchItemFailures`).
    pub fn sqs_response(&self) -> SqsBatchResponse {
        let mut response = SqsBatchResponse::default();
        response.batch_item_failures = self
            .failures()
            .into_iter()
            .map(|id| {
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = id.to_owned();
                failure
            })
            .collect();
        response
    }

    /// The response to a Kinesis trigger (`ReportBatchItemFailures`).
    pub fn kinesis_response(&self) -> KinesisEventResponse {
        let mut response = KinesisEventResponse::default();
        response.batch_item_failures = self
            .failures()
            .into_iter()
            .map(|id| {
                let mut failure = KinesisBatchItemFailure::default();
                failure.item_identifier = Some(id.to_owned());
                failure
            })
            .collect();
        response
    }

    /// How many messages the handler ran for.
    pub fn handled(&self) -> usize {
        self.items.iter().filter(|i| i.handled()).count()
    }
}
