//! Why one message of a batch failed: each is that message's failure, reported to Lambda in the
//! `batchItemFailures` response, never the invocation's.

use crate::error::StoreError;
use crate::idempotency::IdempotencyError;
use crate::received::DecodeError;

/// A handler's own error, whatever its type (`anyhow::Error`, a `thiserror` enum, a `String`).
pub type HandlerError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a message failed. [`BatchError::is_retryable`] says whether its next delivery may
/// succeed (a message that cannot is still reported: the source's redrive policy moves it to
/// its dead-letter queue).
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// The message has no body (an SQS message) or no data.
    #[error("message {id}: no body")]
    NoBody { id: String },
    /// The body (or an SNS notification's `Message` in it) is not JSON.
    #[error("message {id}: the body is not JSON: {source}")]
    Body {
        id: String,
        #[source]
        source: serde_json::Error,
    },
    /// The body is not an outbox event, or its payload could not be read (claim check).
    #[error("message {id}: {source}")]
    Decode {
        id: String,
        #[source]
        source: DecodeError,
    },
    /// The caller's handler failed.
    #[error("event {event_id}: the handler failed: {source}")]
    Handler {
        event_id: String,
        #[source]
        source: HandlerError,
    },
    /// The idempotency store refused the event (another delivery holds it, or its id came with
    /// another payload) or failed. (Boxed: it is the largest variant.)
    #[error("event {event_id}: {source}")]
    Idempotency {
        event_id: String,
        #[source]
        source: Box<IdempotencyError<HandlerError>>,
    },
    /// Order restored: the event's predecessor in its aggregate was not applied yet. The source
    /// delivers it again later.
    #[error(
        "event {event_id}: sequence {sequence} of aggregate {aggregate} is early ({last} applied \
         so far): it is delivered again later"
    )]
    Early {
        event_id: String,
        aggregate: String,
        sequence: u64,
        last: u64,
    },
    /// The sequence store failed. (Boxed, as `Idempotency`.)
    #[error("event {event_id}: sequence store: {source}")]
    Sequencing {
        event_id: String,
        #[source]
        source: Box<StoreError>,
    },
}

impl BatchError {
    /// Whether delivering the message again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::NoBody { .. } | Self::Body { .. } => false,
            Self::Decode { source, .. } => source.is_retryable(),
            Self::Handler { .. } | Self::Early { .. } => true,
            Self::Idempotency { source, .. } => source.is_retryable(),
            Self::Sequencing { source, .. } => source.is_retryable(),
        }
    }
}
