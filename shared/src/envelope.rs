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

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::claim_check::{PayloadRef, RefError};
use crate::entry_field::{EntryFieldError, check_detail_type, check_trace_header};
use crate::item::OutboxItem;
use crate::limits::PUT_EVENTS_TIME_BYTES;
use crate::time::parse_timestamp;
use crate::trace_context::TraceContext;

/// `metadata` of the envelope: who the event is about and when it happened.
///
/// Generic over the string type so the relays serialize it from borrowed `&str`s; consumers use
/// the default, `String`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "S: Deserialize<'de>"))]
pub struct EventMetadata<S = String> {
    /// Stable across re-publishes: the de-duplication key.
    pub event_id: S,
    pub event_type: S,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate_type: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate_id: Option<S>,
    /// The aggregate's version when the event was written: consumers order by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    /// The outbox item's `CreatedAt`.
    pub occurred_at: S,
    /// The W3C `traceparent` the event was written in: a consumer continues its trace from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<S>,
    /// The `tracestate` of `traceparent`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<S>,
}

/// The `Detail` of every relayed event. Consumers deserialize `Envelope<TheirData>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound(deserialize = "D: Deserialize<'de>, S: Deserialize<'de>"))]
pub struct Envelope<D, S = String> {
    pub metadata: EventMetadata<S>,
    pub data: D,
}

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

/// An event's data as its body carries it: the payload itself, or the reference to it in S3.
#[derive(Debug, Clone, Copy)]
enum Data<'a> {
    Inline(&'a RawValue),
    Stored(&'a PayloadRef),
}

impl<'a> Data<'a> {
    /// The body's `data`, or its reference members.
    fn split(self) -> (Option<&'a RawValue>, Option<DataRefOut<'a>>) {
        match self {
            Self::Inline(data) => (Some(data), None),
            Self::Stored(reference) => (None, Some(DataRefOut::of(reference))),
        }
    }
}

/// The body's members in place of `data` for a payload in S3: the CloudEvents claim-check
/// extension `dataref`, with the payload's size and SHA-256.
#[derive(Serialize)]
struct DataRefOut<'a> {
    dataref: &'a str,
    datasize: u64,
    datasha256: &'a str,
}

impl<'a> DataRefOut<'a> {
    fn of(reference: &'a PayloadRef) -> Self {
        Self {
            dataref: &reference.uri,
            datasize: reference.size,
            datasha256: &reference.sha256,
        }
    }
}

/// The envelope as the relays write it: `data`, or the reference in its place.
#[derive(Serialize)]
struct EnvelopeOut<'a> {
    metadata: EventMetadata<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a RawValue>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    stored: Option<DataRefOut<'a>>,
}

/// The envelope's bytes besides its field values: keys, quotes, braces and a sequence number.
const ENVELOPE_OVERHEAD_BYTES: usize = 200;

/// A CloudEvent's bytes besides its field values.
const CLOUDEVENT_OVERHEAD_BYTES: usize = 260;

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
    /// The envelope, today's format.
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

/// A CloudEvent as the relays write it, serialized from borrowed strings. A payload in S3 is the
/// `dataref` extension (with `datasize` and `datasha256`) in place of `data`.
#[derive(Serialize)]
struct CloudEventOut<'a> {
    specversion: &'static str,
    id: &'a str,
    source: &'a str,
    #[serde(rename = "type")]
    event_type: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    subject: Option<&'a str>,
    time: &'a str,
    datacontenttype: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a RawValue>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    stored: Option<DataRefOut<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sequence: Option<String>,
    partitionkey: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    aggregatetype: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    traceparent: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tracestate: Option<&'a str>,
}

/// One event ready for `PutEvents`, with everything a publisher needs to batch it.
///
/// Where and as whom it is published (the bus and `Source`) are the publisher's: it stamps them
/// on every entry, so they are configured once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboundEvent {
    pub event_id: String,
    /// Events with the same ordering key (the aggregate) are never in flight out of order.
    pub ordering_key: String,
    /// The Custom Event Bus's `EventGroupId`: the aggregate ([`crate::event_group`]). Within one
    /// ordering key: never shared by two events of different ordering keys from the writer.
    pub event_group: String,
    pub detail_type: String,
    pub detail: String,
    pub time: Option<aws_smithy_types::DateTime>,
    pub trace_header: Option<String>,
}

impl OutboundEvent {
    /// Builds the event of `item` as `encoding` says: the envelope, or a CloudEvent.
    ///
    /// The payload is embedded as it is stored (validated, not re-serialized).
    ///
    /// A `TraceHeader` EventBridge would refuse (outside 1 to 500 characters, which the writer
    /// refuses but another client may write) is left off the entry, and the event published
    /// without it: it is tracing context, not the event, and dead-lettering a business event for
    /// its trace is worse than losing the trace; sent as it is, it would make EventBridge refuse
    /// the whole call. The relay logs it ([`check_trace_header`] says why). A `TraceParent`
    /// the W3C specification refuses is left out the same way, and a `TraceState` it refuses
    /// without its `TraceParent` ([`OutboxItem::trace_context`]).
    ///
    /// # Errors
    /// [`EnvelopeError`] when the payload is not JSON, a required field is empty, `CreatedAt`
    /// is not a timestamp, or `EventType` is too long to be a `DetailType`: the item is poison.
    pub fn from_item(item: &OutboxItem, encoding: &Encoding) -> Result<Self, EnvelopeError> {
        let event_id = &item.event_id;
        for (field, value) in [("EventId", event_id), ("EventType", &item.event_type)] {
            if value.trim().is_empty() {
                return Err(EnvelopeError::Empty {
                    event_id: event_id.clone(),
                    field,
                });
            }
        }
        check_detail_type(&item.event_type).map_err(|source| EnvelopeError::Refused {
            event_id: event_id.clone(),
            source,
        })?;
        let data = match &item.payload_ref {
            Some(_) if !item.payload.is_empty() => {
                return Err(EnvelopeError::PayloadTwice {
                    event_id: event_id.clone(),
                });
            }
            Some(reference) => {
                reference
                    .validate()
                    .map_err(|source| EnvelopeError::BadPayloadRef {
                        event_id: event_id.clone(),
                        source,
                    })?;
                Data::Stored(reference)
            }
            None if item.payload.is_empty() => {
                return Err(EnvelopeError::NoPayload {
                    event_id: event_id.clone(),
                });
            }
            None => Data::Inline(serde_json::from_str(&item.payload).map_err(|e| {
                EnvelopeError::PayloadNotJson {
                    event_id: event_id.clone(),
                    reason: e.to_string(),
                }
            })?),
        };
        let occurred =
            parse_timestamp(&item.created_at).map_err(|e| EnvelopeError::BadTimestamp {
                event_id: event_id.clone(),
                reason: e.to_string(),
            })?;
        let (trace, _) = item.trace_context();
        let detail = match encoding.format {
            EventFormat::Envelope => envelope_detail(item, data, trace.as_ref()),
            EventFormat::CloudEvents => {
                cloudevent_detail(item, data, trace.as_ref(), &encoding.source)
            }
        };
        Ok(Self {
            event_id: event_id.clone(),
            ordering_key: item.ordering_key().to_owned(),
            event_group: crate::event_group::event_group_id(item),
            detail_type: item.event_type.clone(),
            detail,
            time: Some(aws_smithy_types::DateTime::from_millis(
                occurred.timestamp_millis(),
            )),
            trace_header: item
                .trace_header
                .clone()
                .filter(|header| check_trace_header(header).is_ok()),
        })
    }

    /// The entry size as EventBridge counts it when published with `source`: 14 bytes for `Time`
    /// if set, plus the UTF-8 bytes of `Source`, `DetailType` and `Detail`.
    pub fn entry_size(&self, source: &str) -> usize {
        let time = if self.time.is_some() {
            PUT_EVENTS_TIME_BYTES
        } else {
            0
        };
        time + source.len() + self.detail_type.len() + self.detail.len()
    }

    /// The text of the event's `data`, its payload as stored; `None` when the payload is already
    /// in S3 (the body has `dataref`) or the body has no `data`.
    pub fn data(&self) -> Option<&str> {
        members(&self.detail)
            .into_iter()
            .find(|(name, _)| name == "data")
            .map(|(_, value)| value.get())
    }

    /// The same event with its `data` replaced by `reference` (the payload stored in S3): every
    /// other member kept, in its order. An event without `data` is returned as it is.
    pub fn with_data_ref(&self, reference: &PayloadRef) -> Self {
        let members = members(&self.detail);
        let mut detail = String::with_capacity(self.detail.len().min(4096));
        detail.push('{');
        for (index, (name, value)) in members.iter().enumerate() {
            if index > 0 {
                detail.push(',');
            }
            if name == "data" {
                let stored = serde_json::to_string(&DataRefOut::of(reference))
                    .expect("a reference serializes");
                // Its members, without their braces.
                detail.push_str(&stored[1..stored.len() - 1]);
            } else {
                detail.push_str(&serde_json::to_string(name).expect("a string serializes"));
                detail.push(':');
                detail.push_str(value.get());
            }
        }
        detail.push('}');
        Self {
            detail,
            ..self.clone_without_detail()
        }
    }

    /// A copy of everything but the body (which may be megabytes).
    fn clone_without_detail(&self) -> Self {
        Self {
            event_id: self.event_id.clone(),
            ordering_key: self.ordering_key.clone(),
            event_group: self.event_group.clone(),
            detail_type: self.detail_type.clone(),
            detail: String::new(),
            time: self.time,
            trace_header: self.trace_header.clone(),
        }
    }
}

/// The top-level members of a body the relays wrote (a JSON object), in their order; none when
/// it is not one.
fn members(detail: &str) -> Vec<(String, &RawValue)> {
    struct Members;
    impl<'de> serde::de::Visitor<'de> for Members {
        type Value = Vec<(String, &'de RawValue)>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(
            self,
            mut map: A,
        ) -> Result<Self::Value, A::Error> {
            let mut members = Vec::new();
            while let Some(entry) = map.next_entry::<String, &'de RawValue>()? {
                members.push(entry);
            }
            Ok(members)
        }
    }
    let mut deserializer = serde_json::Deserializer::from_str(detail);
    serde::Deserializer::deserialize_map(&mut deserializer, Members).unwrap_or_default()
}

/// The lengths of the item's values a body carries, to size its buffer once (the common case:
/// nothing to escape).
fn values_len(item: &OutboxItem, trace: Option<&TraceContext>) -> usize {
    [&item.event_id, &item.event_type, &item.created_at]
        .into_iter()
        .chain(item.aggregate_type.as_ref())
        .chain(item.aggregate_id.as_ref())
        .map(String::len)
        .sum::<usize>()
        + trace.map_or(0, |t| {
            t.traceparent().len() + t.tracestate().map_or(0, str::len)
        })
        + item.payload.len()
        + item
            .payload_ref
            .as_ref()
            .map_or(0, |r| r.uri.len() + r.sha256.len() + 20)
}

fn envelope_detail(item: &OutboxItem, data: Data<'_>, trace: Option<&TraceContext>) -> String {
    let (data, stored) = data.split();
    let envelope = EnvelopeOut {
        metadata: EventMetadata {
            event_id: item.event_id.as_str(),
            event_type: item.event_type.as_str(),
            aggregate_type: item.aggregate_type.as_deref(),
            aggregate_id: item.aggregate_id.as_deref(),
            sequence: item.sequence,
            occurred_at: item.created_at.as_str(),
            traceparent: trace.map(TraceContext::traceparent),
            tracestate: trace.and_then(TraceContext::tracestate),
        },
        data,
        stored,
    };
    let mut detail = Vec::with_capacity(ENVELOPE_OVERHEAD_BYTES + values_len(item, trace));
    serde_json::to_writer(&mut detail, &envelope).expect("envelope of valid JSON serializes");
    String::from_utf8(detail).expect("serde_json writes UTF-8")
}

fn cloudevent_detail(
    item: &OutboxItem,
    data: Data<'_>,
    trace: Option<&TraceContext>,
    source: &str,
) -> String {
    let (data, stored) = data.split();
    let event = CloudEventOut {
        specversion: CLOUDEVENTS_SPEC_VERSION,
        id: &item.event_id,
        source,
        event_type: &item.event_type,
        subject: item.aggregate_id.as_deref(),
        time: &item.created_at,
        datacontenttype: DATA_CONTENT_TYPE,
        data,
        stored,
        sequence: item
            .sequence
            .map(|s| format!("{s:0width$}", width = CLOUDEVENTS_SEQUENCE_DIGITS)),
        partitionkey: item.ordering_key(),
        aggregatetype: item.aggregate_type.as_deref(),
        traceparent: trace.map(TraceContext::traceparent),
        tracestate: trace.and_then(TraceContext::tracestate),
    };
    let mut detail = Vec::with_capacity(
        CLOUDEVENT_OVERHEAD_BYTES
            + source.len()
            + values_len(item, trace)
            + item.ordering_key().len(),
    );
    serde_json::to_writer(&mut detail, &event).expect("a CloudEvent of valid JSON serializes");
    String::from_utf8(detail).expect("serde_json writes UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::OutboxStatus;

    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn envelope(item: &OutboxItem) -> Result<OutboundEvent, EnvelopeError> {
        OutboundEvent::from_item(item, &Encoding::envelope())
    }

    fn cloudevent(item: &OutboxItem) -> serde_json::Value {
        let event =
            OutboundEvent::from_item(item, &Encoding::cloudevents("com.example.orders")).unwrap();
        serde_json::from_str(&event.detail).unwrap()
    }

    fn item(payload: &str) -> OutboxItem {
        OutboxItem {
            pk: "USER#u".into(),
            sk: "OUTBOX#e1".into(),
            entity_type: "OutboxEvent".into(),
            event_id: "e1".into(),
            event_type: "OrderCreated".into(),
            payload: payload.into(),
            payload_ref: None,
            status: OutboxStatus::Pending,
            created_at: "2026-11-22T10:00:00.000Z".into(),
            gsi1pk: Some("OUTBOX#PENDING#1".into()),
            gsi1sk: Some("EVENT#2026-11-22T10:00:00.000Z#e1".into()),
            aggregate_type: Some("Order".into()),
            aggregate_id: Some("o1".into()),
            sequence: Some(1),
            ttl: None,
            trace_header: Some("Root=1-abc".into()),
            trace_parent: None,
            trace_state: None,
        }
    }

    #[test]
    fn builds_the_documented_envelope() {
        let event = envelope(&item(r#"{"amount": 12}"#)).unwrap();
        assert_eq!(event.detail_type, "OrderCreated");
        assert_eq!(event.ordering_key, "o1");
        let detail: serde_json::Value = serde_json::from_str(&event.detail).unwrap();
        assert_eq!(
            detail,
            serde_json::json!({
                "metadata": {
                    "eventId": "e1", "eventType": "OrderCreated", "aggregateType": "Order",
                    "aggregateId": "o1", "sequence": 1, "occurredAt": "2026-11-22T10:00:00.000Z"
                },
                "data": {"amount": 12}
            })
        );
        let parsed: Envelope<serde_json::Value> = serde_json::from_str(&event.detail).unwrap();
        assert_eq!(parsed.metadata.event_id, "e1");
        assert_eq!(event.trace_header.as_deref(), Some("Root=1-abc"));
    }

    #[test]
    fn detail_fits_the_buffer_it_is_written_into() {
        let full = item(r#"{"amount": 12}"#);
        let event = envelope(&full).unwrap();
        let values = full.event_id.len()
            + full.event_type.len()
            + full.created_at.len()
            + full.aggregate_type.as_ref().map_or(0, String::len)
            + full.aggregate_id.as_ref().map_or(0, String::len)
            + full.payload.len();
        // The overhead covers the longest metadata (every field and a 20-digit sequence).
        let mut longest = full.clone();
        longest.sequence = Some(u64::MAX);
        let longest_event = envelope(&longest).unwrap();
        assert!(longest_event.detail.len() - values <= ENVELOPE_OVERHEAD_BYTES);
        assert!(event.detail.len() > values);
    }

    #[test]
    fn entry_size_counts_time_source_type_and_detail() {
        let event = envelope(&item("{}")).unwrap();
        assert_eq!(
            event.entry_size("orders"),
            14 + "orders".len() + "OrderCreated".len() + event.detail.len()
        );
    }

    #[test]
    fn an_event_type_eventbridge_refuses_as_a_detail_type_is_poison_named_without_its_value() {
        let mut long = item("{}");
        long.event_type = "T".repeat(129);
        let err = envelope(&long).unwrap_err();
        assert!(matches!(err, EnvelopeError::Refused { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "event e1: EventType is 129 characters; EventBridge accepts a DetailType of 1 to 128"
        );
        // 128 characters of 2 bytes each are accepted: the limit counts characters
        long.event_type = "é".repeat(128);
        assert!(envelope(&long).is_ok());
    }

    #[test]
    fn a_trace_header_eventbridge_refuses_is_left_off_the_entry() {
        for refused in [String::new(), "t".repeat(501)] {
            let mut traced = item("{}");
            traced.trace_header = Some(refused);
            let event = envelope(&traced).unwrap();
            assert_eq!(event.trace_header, None);
        }
        let mut longest = item("{}");
        longest.trace_header = Some("t".repeat(500));
        let event = envelope(&longest).unwrap();
        assert_eq!(event.trace_header.map(|h| h.len()), Some(500));
    }

    #[test]
    fn a_created_at_that_is_not_a_timestamp_is_named_and_not_quoted() {
        // Given an item whose CreatedAt holds personal data instead of a timestamp
        let secret = "jane.doe@example.com";
        let mut item = item("{}");
        item.created_at = secret.into();

        // When its envelope is built
        let reason = envelope(&item).unwrap_err().to_string();

        // Then the poison reason names the attribute, never its value
        assert!(!reason.contains(secret), "{reason}");
        assert!(reason.contains("CreatedAt"), "{reason}");
    }

    #[test]
    fn non_json_payload_is_poison() {
        let err = envelope(&item("not json")).unwrap_err();
        assert!(matches!(err, EnvelopeError::PayloadNotJson { .. }), "{err}");
        let mut bad_time = item("{}");
        bad_time.created_at = "yesterday".into();
        assert!(matches!(
            envelope(&bad_time),
            Err(EnvelopeError::BadTimestamp { .. })
        ));
    }

    #[test]
    fn the_items_trace_context_is_in_the_envelope_and_an_invalid_one_is_left_out() {
        // Given an item written in a trace, with a tracestate
        let mut traced = item("{}");
        traced.trace_parent = Some(TRACEPARENT.into());
        traced.trace_state = Some("rojo=00f067aa0ba902b7".into());

        // Then its envelope carries both
        let detail: serde_json::Value =
            serde_json::from_str(&envelope(&traced).unwrap().detail).unwrap();
        assert_eq!(detail["metadata"]["traceparent"], TRACEPARENT);
        assert_eq!(detail["metadata"]["tracestate"], "rojo=00f067aa0ba902b7");

        // And an invalid tracestate is left out, the traceparent kept
        traced.trace_state = Some("Not A State".into());
        let detail: serde_json::Value =
            serde_json::from_str(&envelope(&traced).unwrap().detail).unwrap();
        assert_eq!(detail["metadata"]["traceparent"], TRACEPARENT);
        assert!(detail["metadata"].get("tracestate").is_none(), "{detail}");

        // And an invalid traceparent (another client's) leaves the event without a trace,
        // published all the same
        traced.trace_parent = Some("00-not-a-trace".into());
        let detail: serde_json::Value =
            serde_json::from_str(&envelope(&traced).unwrap().detail).unwrap();
        assert!(detail["metadata"].get("traceparent").is_none(), "{detail}");
    }

    #[test]
    fn a_cloudevent_has_the_documented_attributes_and_extensions() {
        // Given an item written in a trace
        let mut traced = item(r#"{"amount": 12}"#);
        traced.trace_parent = Some(TRACEPARENT.into());
        traced.trace_state = Some("rojo=1".into());

        // When it is written as a CloudEvent
        let event = cloudevent(&traced);

        // Then it is a CloudEvents 1.0 JSON event with the outbox's extensions
        assert_eq!(
            event,
            serde_json::json!({
                "specversion": "1.0",
                "id": "e1",
                "source": "com.example.orders",
                "type": "OrderCreated",
                "subject": "o1",
                "time": "2026-11-22T10:00:00.000Z",
                "datacontenttype": "application/json",
                "data": {"amount": 12},
                "sequence": "00000000000000000001",
                "partitionkey": "o1",
                "aggregatetype": "Order",
                "traceparent": TRACEPARENT,
                "tracestate": "rojo=1"
            })
        );
        // And sequences order as strings as they do as numbers
        let mut later = traced.clone();
        later.sequence = Some(10);
        assert!(cloudevent(&later)["sequence"].as_str() > event["sequence"].as_str());
    }

    #[test]
    fn a_cloudevent_without_an_aggregate_or_trace_omits_what_it_has_not() {
        let mut bare = item("{}");
        bare.aggregate_id = None;
        bare.aggregate_type = None;
        bare.sequence = None;
        let event = cloudevent(&bare);
        for absent in [
            "subject",
            "sequence",
            "aggregatetype",
            "traceparent",
            "tracestate",
        ] {
            assert!(event.get(absent).is_none(), "{absent}: {event}");
        }
        // The partition key is the item collection, as the relays order such events
        assert_eq!(event["partitionkey"], "USER#u");
    }

    #[test]
    fn a_cloudevent_fits_the_buffer_it_is_written_into() {
        let mut longest = item(r#"{"amount": 12}"#);
        longest.sequence = Some(u64::MAX);
        longest.trace_parent = Some(TRACEPARENT.into());
        longest.trace_state = Some("k=v".into());
        let event =
            OutboundEvent::from_item(&longest, &Encoding::cloudevents("com.example.orders"))
                .unwrap();
        let values = values_len(&longest, longest.trace_context().0.as_ref())
            + "com.example.orders".len()
            + longest.ordering_key().len();
        assert!(event.detail.len() - values <= CLOUDEVENT_OVERHEAD_BYTES);
    }

    #[test]
    fn a_payload_in_s3_is_referenced_in_place_of_data_in_either_format() {
        // Given an item the writer stored the payload of in S3
        let mut stored = item("");
        let reference = PayloadRef::of("orders-payloads", "payloads/e1", br#"{"amount": 12}"#);
        stored.payload_ref = Some(reference.clone());

        // Then its envelope and its CloudEvent carry the reference, and no data
        let detail: serde_json::Value =
            serde_json::from_str(&envelope(&stored).unwrap().detail).unwrap();
        assert_eq!(detail["dataref"], "s3://orders-payloads/payloads/e1");
        assert_eq!(detail["datasize"], 14);
        assert_eq!(detail["datasha256"], reference.sha256.as_str());
        assert!(detail.get("data").is_none(), "{detail}");
        assert_eq!(detail["metadata"]["eventId"], "e1");
        let event = cloudevent(&stored);
        assert_eq!(event["dataref"], "s3://orders-payloads/payloads/e1");
        assert_eq!(event["datasize"], 14);
        assert!(event.get("data").is_none(), "{event}");
        assert_eq!(event["partitionkey"], "o1");
        // And an event whose payload is in S3 has no data to store again
        assert_eq!(envelope(&stored).unwrap().data(), None);
    }

    #[test]
    fn an_item_with_a_bad_or_second_payload_reference_or_none_is_poison_named() {
        let err = envelope(&item("")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "event e1: has neither Payload nor PayloadRef"
        );
        let mut both = item("{}");
        both.payload_ref = Some(PayloadRef::of("b", "payloads/e1", b"{}"));
        assert!(matches!(
            envelope(&both),
            Err(EnvelopeError::PayloadTwice { .. })
        ));
        let mut bad = item("");
        bad.payload_ref = Some(PayloadRef {
            uri: "http://b/k".into(),
            size: 2,
            sha256: "x".into(),
        });
        let err = envelope(&bad).unwrap_err();
        assert!(err.to_string().contains("PayloadRef"), "{err}");
    }

    #[test]
    fn an_event_with_its_data_referenced_keeps_every_other_member_in_order() {
        for encoding in [
            Encoding::envelope(),
            Encoding::cloudevents("com.example.orders"),
        ] {
            // Given an event with its payload in its body
            let mut traced = item(r#"{"lines": [1, 2, 3]}"#);
            traced.trace_parent = Some(TRACEPARENT.into());
            let event = OutboundEvent::from_item(&traced, &encoding).unwrap();
            assert_eq!(event.data(), Some(r#"{"lines": [1, 2, 3]}"#));

            // When its data is replaced by its reference
            let reference = PayloadRef::of("b", "payloads/e1", event.data().unwrap().as_bytes());
            let referenced = event.with_data_ref(&reference);

            // Then the body is what the writer's reference gives, member for member and in order
            let mut stored = traced.clone();
            stored.payload = String::new();
            stored.payload_ref = Some(reference);
            let written = OutboundEvent::from_item(&stored, &encoding).unwrap();
            assert_eq!(referenced, written, "{encoding:?}");
            assert_eq!(referenced.data(), None);
        }
    }
}
