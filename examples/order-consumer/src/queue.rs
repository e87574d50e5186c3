//! The consumer on an SQS FIFO queue: the target of the Custom Event Bus's FIFO subscriber
//! (infra/template.yaml `OrderEventsSubscriber`), whose default `RAW` delivery makes each
//! message body the classic EventBridge event (the relays' `PutEvents`), or the CloudEvent itself
//! (their raw events, `EVENT_FORMAT=cloudevents`): each is decoded as one envelope, its payload
//! read from S3 when the event references it (`outbox_consumer::PayloadResolver`), and handled by [`handle_envelope`], its trace continued from the
//! event's context, else the message's X-Ray header (`AWSTraceHeader`).
//!
//! Order: SQS hands a message group (an aggregate) to one receiver at a time, in order, and a
//! Lambda batch keeps that order. [`handle_queue_batch`] handles the batch's messages one after
//! the other and stops at the first that fails: it and every later message are reported as batch
//! item failures (AWS's rule for FIFO queues with `ReportBatchItemFailures`), so the queue hands
//! them out again in their order and nothing of a group runs ahead of an earlier event that
//! failed. Duplicates (a redelivered message, a re-publish) are answered by the idempotency
//! store, as on the classic bus.

pub use aws_lambda_events::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use chrono::{DateTime, Utc};
use outbox_consumer::{Clock, IdempotencyStore, PayloadResolver};
use tracing::warn;

use crate::handler::{Handled, HandlerError, handle_envelope, unreadable};
use crate::inventory::Inventory;

/// What a batch from the queue came to: each handled message's id and outcome, in order, and
/// the response that tells Lambda which messages to leave on the queue.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueBatch {
    /// The messages handled, in the order received (those before the first failure).
    pub handled: Vec<(String, Handled)>,
    /// The first message that failed, why, and every message after it (left on the queue).
    pub response: SqsBatchResponse,
}

/// Handles a batch of queue messages in the order received, stopping at the first failure.
///
/// `deadline` is the invocation's deadline; it bounds the idempotency lock. `payloads` reads a
/// payload an event references in S3.
pub async fn handle_queue_batch<I: Inventory, C: Clock>(
    messages: &[SqsMessage],
    deadline: Option<DateTime<Utc>>,
    payloads: &PayloadResolver,
    store: &IdempotencyStore<C>,
    inventory: &I,
) -> QueueBatch {
    let mut handled = Vec::with_capacity(messages.len());
    for (index, message) in messages.iter().enumerate() {
        let id = message.message_id.clone().unwrap_or_default();
        let xray = message.attributes.get(AWS_TRACE_HEADER).map(String::as_str);
        let outcome = match decode(message, payloads).await {
            Ok(envelope) => handle_envelope(envelope, xray, deadline, store, inventory).await,
            Err(malformed) => Err(malformed),
        };
        match outcome {
            Ok(outcome) => handled.push((id, outcome)),
            Err(error) => {
                let left = messages.len() - index;
                warn!(message_id = %id, retryable = error.is_retryable(), left, error = %error,
                    "queue message not handled; it and the batch's later messages stay on the queue");
                let mut response = SqsBatchResponse::default();
                response.batch_item_failures = messages[index..]
                    .iter()
                    .map(|m| {
                        let mut failure = BatchItemFailure::default();
                        failure.item_identifier = m.message_id.clone().unwrap_or_default();
                        failure
                    })
                    .collect();
                return QueueBatch { handled, response };
            }
        }
    }
    QueueBatch {
        handled,
        response: SqsBatchResponse::default(),
    }
}

/// The message system attribute that carries a delivery's X-Ray trace header.
pub const AWS_TRACE_HEADER: &str = "AWSTraceHeader";

/// The event a message carries (`RAW` delivery: the body is the classic event, or a raw event's
/// CloudEvent), its payload read from S3 when it references it.
async fn decode(
    message: &SqsMessage,
    payloads: &PayloadResolver,
) -> Result<outbox_shared::Envelope<serde_json::Value>, HandlerError> {
    let body = message
        .body
        .as_deref()
        .ok_or_else(|| HandlerError::Malformed("queue message without a body".to_owned()))?;
    payloads.decode_str(body).await.map_err(unreadable)
}
