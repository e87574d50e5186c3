//! The Lambda handler: reserves stock for each `OrderCreated` event exactly once, however often
//! the relay delivers it, in whichever format the relay publishes it (the envelope or a
//! CloudEvent) and wherever its payload is (in the event, or in S3 when it was too large to
//! travel in it: `outbox_consumer::PayloadResolver`), each in a `process` span that continues the
//! event's trace (`outbox_consumer::process_span`).

pub use aws_lambda_events::eventbridge::EventBridgeEvent;
use chrono::{DateTime, Utc};
use outbox_consumer::{
    Clock, DecodeError, EventIdKey, IdempotencyError, IdempotencyStore, Outcome, PayloadResolver,
};
use outbox_shared::Envelope;
use outbox_writer::{ORDER_CREATED, OrderCreated};
use serde::{Deserialize, Serialize};
use tracing::{Instrument as _, info, warn};

use crate::inventory::{Inventory, InventoryError, Reservation};

/// What the handler did with one event (the Lambda's response).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "handled")]
pub enum Handled {
    /// Not an `OrderCreated` event: nothing to do.
    Ignored { detail_type: String },
    /// Reserved now (`replayed: false`) or answered from the stored response (`replayed: true`).
    Processed {
        replayed: bool,
        reservation: Reservation,
    },
}

/// Why an event was not handled. Returning it fails the invocation, so EventBridge's retry policy
/// (and then the function's on-failure destination) takes over.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The `detail` is not an `OrderCreated` envelope: poison, retrying cannot help.
    #[error("malformed OrderCreated event: {0}")]
    Malformed(String),
    /// Another delivery of the same event is being processed, or the inventory, the store or S3
    /// (reading the event's payload) failed.
    #[error("retryable: {0}")]
    Retryable(String),
    /// The event can never be processed: its id was used with another payload, or its payload
    /// is gone from S3 (past the payload bucket's lifecycle) or is not the one it names.
    #[error("not retryable: {0}")]
    Permanent(String),
}

impl HandlerError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Retryable(_))
    }
}

impl From<HandlerError> for lambda_runtime::Diagnostic {
    fn from(error: HandlerError) -> Self {
        let error_type = match error {
            HandlerError::Malformed(_) => "MalformedEvent",
            HandlerError::Retryable(_) => "Retryable",
            HandlerError::Permanent(_) => "Permanent",
        };
        Self {
            error_type: error_type.to_owned(),
            error_message: error.to_string(),
        }
    }
}

/// Handles one EventBridge event (its `detail` the envelope or a CloudEvent, its payload in it or
/// in S3): reserves stock for an `OrderCreated` once per event id. Its trace continues from the
/// event's context, else the invocation's X-Ray header (`_X_AMZN_TRACE_ID`).
///
/// `deadline` is the invocation's deadline; it bounds the idempotency lock. `payloads` reads a
/// payload the event references in S3; an event of another type is ignored without reading it.
///
/// # Errors
/// [`HandlerError`], saying whether a retry can help.
pub async fn handle_event<I: Inventory, C: Clock>(
    event: &EventBridgeEvent<serde_json::Value>,
    deadline: Option<DateTime<Utc>>,
    payloads: &PayloadResolver,
    store: &IdempotencyStore<C>,
    inventory: &I,
) -> Result<Handled, HandlerError> {
    // The bus's DetailType is the event type in either format (what rules route on): an event
    // of another type is not decoded at all.
    if event.detail_type != ORDER_CREATED {
        info!(detail_type = %event.detail_type, "ignoring event");
        return Ok(Handled::Ignored {
            detail_type: event.detail_type.clone(),
        });
    }
    let envelope = payloads.decode(&event.detail).await.map_err(unreadable)?;
    let xray = std::env::var(outbox_writer::LAMBDA_TRACE_ENV).ok();
    handle_envelope(envelope, xray.as_deref(), deadline, store, inventory).await
}

/// Handles one decoded event in its `process` span (its parent the event's trace context, else
/// `xray_header`'s): reserves stock for an `OrderCreated` once per event id, ignores the rest.
///
/// # Errors
/// [`HandlerError`], saying whether a retry can help.
pub async fn handle_envelope<I: Inventory, C: Clock>(
    envelope: Envelope<serde_json::Value>,
    xray_header: Option<&str>,
    deadline: Option<DateTime<Utc>>,
    store: &IdempotencyStore<C>,
    inventory: &I,
) -> Result<Handled, HandlerError> {
    let span = outbox_consumer::process_span(&envelope, xray_header);
    reserve_once(envelope, deadline, store, inventory)
        .instrument(span)
        .await
}

async fn reserve_once<I: Inventory, C: Clock>(
    envelope: Envelope<serde_json::Value>,
    deadline: Option<DateTime<Utc>>,
    store: &IdempotencyStore<C>,
    inventory: &I,
) -> Result<Handled, HandlerError> {
    if envelope.metadata.event_type != ORDER_CREATED {
        info!(detail_type = %envelope.metadata.event_type, "ignoring event");
        return Ok(Handled::Ignored {
            detail_type: envelope.metadata.event_type,
        });
    }
    let envelope = Envelope::<OrderCreated> {
        data: serde_json::from_value(envelope.data)
            .map_err(|e| HandlerError::Malformed(e.to_string()))?,
        metadata: envelope.metadata,
    };
    let event_id = envelope.metadata.event_id.clone();
    let order_id = envelope.data.order_id.clone();
    let outcome = store
        .run_event(&envelope, &EventIdKey, deadline, || {
            inventory.reserve(&envelope.data.order_id, &envelope.data.items)
        })
        .await;
    match outcome {
        Ok(outcome) => {
            let replayed = matches!(outcome, Outcome::AlreadyCompleted(_));
            info!(event_id = %event_id, order_id = %order_id, replayed, "OrderCreated handled");
            Ok(Handled::Processed {
                replayed,
                reservation: outcome.into_response(),
            })
        }
        Err(e) => {
            warn!(event_id = %event_id, order_id = %order_id, retryable = e.is_retryable(), error = %e,
                "OrderCreated not handled");
            Err(classify(&e))
        }
    }
}

/// Why an event could not be read: S3 failing is retryable; a payload gone or not the one the
/// event names is final; anything else is the event's own fault (poison).
fn unreadable(error: DecodeError) -> HandlerError {
    match error {
        error if error.is_retryable() => HandlerError::Retryable(error.to_string()),
        error @ DecodeError::Payload(_) => HandlerError::Permanent(error.to_string()),
        error => HandlerError::Malformed(error.to_string()),
    }
}

fn classify(error: &IdempotencyError<InventoryError>) -> HandlerError {
    if error.is_retryable() {
        HandlerError::Retryable(error.to_string())
    } else {
        HandlerError::Permanent(error.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_created_matches_the_writer_contract() {
        let data = serde_json::json!({
            "orderId": "o-1", "userId": "u-1",
            "items": [{"sku": "SKU-1", "quantity": 2, "unitPriceCents": 150}],
            "amountCents": 300, "status": "CREATED", "version": 1,
            "createdAt": "2026-11-22T10:00:00.000Z"
        });
        let order: OrderCreated = serde_json::from_value(data.clone()).unwrap();
        assert_eq!(order.items[0].quantity, 2);
        assert_eq!(serde_json::to_value(&order).unwrap(), data);
    }
}
