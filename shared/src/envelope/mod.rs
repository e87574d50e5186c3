//! The event as the relays publish it, in one of two formats ([`EventFormat`]):
//!
//! - the envelope (the default): `Source` comes from configuration, `DetailType` is the item's
//!   `EventType`, and `Detail = {"metadata": {"eventId", "eventType", "aggregateType",
//!   "aggregateId", "sequence", "occurredAt", "traceparent", "tracestate"}, "data": <Payload>}`;
//! - CloudEvents 1.0 in structured mode, JSON event format: `{"specversion": "1.0", "id",
//!   "source", "type", "subject", "time", "datacontenttype": "application/json", "data",
//!   "sequence", "partitionkey", "aggregatetype", "traceparent", "tracestate"}`, the last five
//!   extensions (sequence, partitioning, distributed tracing, and the aggregate's type).
//!
//! Either is the classic bus's `Detail`, the body on any other target, and on the Custom Event
//! Bus the CloudEvent is the raw event itself (`PutRawEvents`, [`CLOUDEVENTS_CONTENT_TYPE`]).
//! `metadata.eventId` (`id`) is the outbox item's `EventId` and is the same on every re-publish,
//! so consumers de-duplicate on it (EventBridge's own event id changes on each `PutEvents`).
//! The trace context is the item's W3C `TraceParent` and `TraceState`
//! ([`crate::trace_context`]); one another client stored invalid is left out, and the event
//! published without it.
//!
//! A payload in S3 ([`crate::claim_check`]: the writer stored it, or a relay did because the
//! entry was too large for its target) is referenced in place of `data`, in either format, by
//! the CloudEvents claim-check extension `dataref` (`s3://BUCKET/KEY`) with `datasize` (bytes)
//! and `datasha256` (base64): `{"metadata": …, "dataref": "s3://…", "datasize": 5242880,
//! "datasha256": "…"}`.
//!
//! Each wire shape is one type for both directions ([`wire`]): the relays serialize
//! [`Envelope`], [`CloudEvent`] and [`DataRef`] from the item's borrowed strings
//! ([`OutboundEvent::from_item`]), and a consumer deserializes the same types.

mod error;
mod outbound;
pub mod wire;

pub use error::EnvelopeError;
pub use outbound::OutboundEvent;
pub use wire::{CloudEvent, DATAREF, DataRef, Envelope, EventMetadata};

/// `specversion` of the CloudEvents the relays write.
pub const CLOUDEVENTS_SPEC_VERSION: &str = "1.0";

/// The media type of a CloudEvent in structured mode, JSON event format: the Custom Event Bus
/// raw event's `ContentType`.
pub const CLOUDEVENTS_CONTENT_TYPE: &str = "application/cloudevents+json";

/// `datacontenttype` of every CloudEvent: the payload is a JSON document.
pub const DATA_CONTENT_TYPE: &str = "application/json";

/// Digits of a CloudEvent's `sequence`: the extension wants a lexicographically-orderable
/// string, so the aggregate's version is zero-padded to the width of the largest `u64`.
pub const CLOUDEVENTS_SEQUENCE_DIGITS: usize = 20;

/// What each event is published as: `EVENT_FORMAT` / `--event-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum EventFormat {
    /// The envelope `{"metadata": …, "data": …}`: the default.
    #[default]
    Envelope,
    /// A CloudEvents 1.0 JSON event in structured mode.
    CloudEvents,
}

impl EventFormat {
    /// Every format, as `EVENT_FORMAT` names it.
    pub const ALL: [Self; 2] = [Self::Envelope, Self::CloudEvents];

    /// The name `EVENT_FORMAT` takes: `envelope` or `cloudevents`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Envelope => "envelope",
            Self::CloudEvents => "cloudevents",
        }
    }
}

impl std::fmt::Display for EventFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for EventFormat {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|f| f.as_str().eq_ignore_ascii_case(value.trim()))
            .ok_or_else(|| {
                format!(
                    "{value:?} is not an event format: accepted values are {}",
                    Self::ALL.map(Self::as_str).join(", ")
                )
            })
    }
}

/// How an item becomes the body of its event: the format, and the `source` a CloudEvent names
/// (the publisher's `Source`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Encoding {
    pub format: EventFormat,
    /// The CloudEvent's `source`: the relays' `EVENT_SOURCE`. Unused by the envelope, whose
    /// `Source` the publisher stamps on each entry.
    pub source: String,
}

impl Encoding {
    /// The envelope, the default format.
    pub fn envelope() -> Self {
        Self::default()
    }

    /// CloudEvents with `source`.
    pub fn cloudevents(source: impl Into<String>) -> Self {
        Self {
            format: EventFormat::CloudEvents,
            source: source.into(),
        }
    }
}

#[cfg(test)]
mod tests;
