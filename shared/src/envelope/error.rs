//! Why an outbox item cannot become an event.

use crate::claim_check::RefError;
use crate::entry_field::EntryFieldError;

/// An outbox item that can never become an EventBridge entry: poison.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    #[error("event {event_id}: Payload is not valid JSON: {reason}")]
    PayloadNotJson { event_id: String, reason: String },
    #[error("event {event_id}: {field} must not be empty")]
    Empty {
        event_id: String,
        field: &'static str,
    },
    /// `reason` is the parser's, which names what is wrong, never the text (it may hold
    /// personal data).
    #[error("event {event_id}: CreatedAt (a string) is not an RFC 3339 timestamp: {reason}")]
    BadTimestamp { event_id: String, reason: String },
    /// A field EventBridge would refuse (and with it every entry of the call).
    #[error("event {event_id}: {source}")]
    Refused {
        event_id: String,
        source: EntryFieldError,
    },
    /// `PayloadRef` (another client's) does not say where or what the payload is.
    #[error("event {event_id}: PayloadRef: {source}")]
    BadPayloadRef { event_id: String, source: RefError },
    /// Neither `Payload` nor `PayloadRef`: the event has no data.
    #[error("event {event_id}: has neither Payload nor PayloadRef")]
    NoPayload { event_id: String },
    /// Both `Payload` and `PayloadRef`: which one is the event's data is not known.
    #[error("event {event_id}: has both Payload and PayloadRef; an item has one or the other")]
    PayloadTwice { event_id: String },
}
