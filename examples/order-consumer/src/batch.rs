//! The consumer on a queue or a stream, through `outbox_consumer`'s [`BatchProcessor`]: an SQS
//! queue (standard or FIFO: the Custom Event Bus's FIFO subscriber, whose default `RAW` delivery
//! makes each body the classic EventBridge event or a raw event's CloudEvent; an SNS topic's
//! subscription, raw or not; an EventBridge rule's target) or a Kinesis stream, each the
//! trigger of an event source mapping with `FunctionResponseTypes: [ReportBatchItemFailures]`.
//!
//! The processor reads each message in either format (its payload from S3 when it references
//! it), continues its trace (the event's context, else the message's `AWSTraceHeader`), and
//! runs [`reserve`] once per event id through the idempotency store; a message it cannot decode
//! is that message's failure. Its response follows the source's rule: on a FIFO queue the
//! failed message and every later one of the batch are reported unhandled, so no order's later
//! event runs ahead of an earlier one that failed; on a standard queue each failed message
//! alone; on Kinesis the first failed record's sequence number, nothing after it handled.

use chrono::{DateTime, Utc};
use outbox_consumer::batch::aws_lambda_events::kinesis::KinesisEvent;
use outbox_consumer::batch::aws_lambda_events::sqs::SqsEvent;
use outbox_consumer::{
    BatchProcessor, BatchReport, Clock, IdempotencyStore, Invocation, PayloadResolver,
};
use outbox_shared::Envelope;
use outbox_writer::{ORDER_CREATED, OrderCreated};
use tracing::info;

use crate::handler::HandlerError;
use crate::inventory::{Inventory, Reservation};

/// What one event came to: its reservation, or `None` for an event of another type (ignored).
/// Stored by the idempotency store as the reservation itself, the response
/// [`crate::handle_event`] stores for the same event.
pub type Reserved = Option<Reservation>;

/// The consumer's processor: events of any size (`payloads`), once per event id (`store`).
pub fn processor<C: Clock>(
    payloads: PayloadResolver,
    store: IdempotencyStore<C>,
) -> BatchProcessor<C> {
    BatchProcessor::new()
        .with_payloads(payloads)
        .with_idempotency(store)
}

/// What the invocation tells each message: its deadline (bounding the idempotency lock) and its
/// X-Ray header.
pub fn invocation(deadline: Option<DateTime<Utc>>) -> Invocation {
    Invocation {
        deadline,
        xray_header: std::env::var(outbox_writer::LAMBDA_TRACE_ENV).ok(),
    }
}

/// Handles an SQS trigger's batch; answer with [`BatchReport::sqs_response`].
pub async fn handle_sqs_batch<I: Inventory, C: Clock>(
    event: &SqsEvent,
    invocation: &Invocation,
    processor: &BatchProcessor<C>,
    inventory: &I,
) -> BatchReport<Reserved> {
    processor
        .process_sqs(event, invocation, |envelope| reserve(envelope, inventory))
        .await
}

/// Handles a Kinesis trigger's batch; answer with [`BatchReport::kinesis_response`].
pub async fn handle_kinesis_batch<I: Inventory, C: Clock>(
    event: &KinesisEvent,
    invocation: &Invocation,
    processor: &BatchProcessor<C>,
    inventory: &I,
) -> BatchReport<Reserved> {
    processor
        .process_kinesis(event, invocation, |envelope| reserve(envelope, inventory))
        .await
}

/// Reserves stock for an `OrderCreated`; ignores an event of another type.
///
/// # Errors
/// [`HandlerError::Malformed`] when its data is not an `OrderCreated`;
/// [`HandlerError::Retryable`] when the inventory failed.
pub async fn reserve<I: Inventory>(
    envelope: Envelope<serde_json::Value>,
    inventory: &I,
) -> Result<Reserved, HandlerError> {
    if envelope.metadata.event_type != ORDER_CREATED {
        info!(detail_type = %envelope.metadata.event_type, "ignoring event");
        return Ok(None);
    }
    let order: OrderCreated = serde_json::from_value(envelope.data)
        .map_err(|e| HandlerError::Malformed(e.to_string()))?;
    let reservation = inventory
        .reserve(&order.order_id, &order.items)
        .await
        .map_err(|e| HandlerError::Retryable(e.to_string()))?;
    info!(event_id = %envelope.metadata.event_id, order_id = %order.order_id, "OrderCreated handled");
    Ok(Some(reservation))
}
