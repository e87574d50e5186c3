//! The EventBridge envelope.
//!
//! `Source` comes from configuration, `DetailType` is the item's `EventType`, and
//! `Detail = {"metadata": {"eventId", "eventType", "aggregateType", "aggregateId", "sequence",
//! "occurredAt"}, "data": <Payload>}`. `metadata.eventId` is the outbox item's `EventId` and is the
//! same on every re-publish, so consumers de-duplicate on it (EventBridge's own event id changes on
//! each `PutEvents`).

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::entry_field::{EntryFieldError, check_detail_type, check_trace_header};
use crate::item::OutboxItem;
use crate::limits::PUT_EVENTS_TIME_BYTES;
use crate::time::parse_timestamp;

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
}

/// The envelope's bytes besides its field values: keys, quotes, braces and a sequence number.
const ENVELOPE_OVERHEAD_BYTES: usize = 160;

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
    /// Builds the envelope of `item`.
    ///
    /// The payload is embedded as it is stored (validated, not re-serialized).
    ///
    /// A `TraceHeader` EventBridge would refuse (outside 1 to 500 characters, which the writer
    /// refuses but another client may write) is left off the entry, and the event published
    /// without it: it is tracing context, not the event, and dead-lettering a business event for
    /// its trace is worse than losing the trace; sent as it is, it would make EventBridge refuse
    /// the whole call. The relay logs it ([`check_trace_header`] says why).
    ///
    /// # Errors
    /// [`EnvelopeError`] when the payload is not JSON, a required field is empty, `CreatedAt`
    /// is not a timestamp, or `EventType` is too long to be a `DetailType`: the item is poison.
    pub fn from_item(item: &OutboxItem) -> Result<Self, EnvelopeError> {
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
        let data: &RawValue =
            serde_json::from_str(&item.payload).map_err(|e| EnvelopeError::PayloadNotJson {
                event_id: event_id.clone(),
                reason: e.to_string(),
            })?;
        let occurred =
            parse_timestamp(&item.created_at).map_err(|e| EnvelopeError::BadTimestamp {
                event_id: event_id.clone(),
                reason: e.to_string(),
            })?;
        let envelope = Envelope {
            metadata: EventMetadata {
                event_id: event_id.as_str(),
                event_type: item.event_type.as_str(),
                aggregate_type: item.aggregate_type.as_deref(),
                aggregate_id: item.aggregate_id.as_deref(),
                sequence: item.sequence,
                occurred_at: item.created_at.as_str(),
            },
            data,
        };
        // Sized for the common case (nothing to escape) so the buffer is allocated once.
        let metadata_len = [&item.event_id, &item.event_type, &item.created_at]
            .into_iter()
            .chain(item.aggregate_type.as_ref())
            .chain(item.aggregate_id.as_ref())
            .map(String::len)
            .sum::<usize>();
        let mut detail =
            Vec::with_capacity(ENVELOPE_OVERHEAD_BYTES + metadata_len + item.payload.len());
        serde_json::to_writer(&mut detail, &envelope).expect("envelope of valid JSON serializes");
        let detail = String::from_utf8(detail).expect("serde_json writes UTF-8");
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::OutboxStatus;

    fn item(payload: &str) -> OutboxItem {
        OutboxItem {
            pk: "USER#u".into(),
            sk: "OUTBOX#e1".into(),
            entity_type: "OutboxEvent".into(),
            event_id: "e1".into(),
            event_type: "OrderCreated".into(),
            payload: payload.into(),
            status: OutboxStatus::Pending,
            created_at: "2026-11-22T10:00:00.000Z".into(),
            gsi1pk: Some("OUTBOX#PENDING#1".into()),
            gsi1sk: Some("EVENT#2026-11-22T10:00:00.000Z#e1".into()),
            aggregate_type: Some("Order".into()),
            aggregate_id: Some("o1".into()),
            sequence: Some(1),
            ttl: None,
            trace_header: Some("Root=1-abc".into()),
        }
    }

    #[test]
    fn builds_the_documented_envelope() {
        let event = OutboundEvent::from_item(&item(r#"{"amount": 12}"#)).unwrap();
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
        let event = OutboundEvent::from_item(&full).unwrap();
        let values = full.event_id.len()
            + full.event_type.len()
            + full.created_at.len()
            + full.aggregate_type.as_ref().map_or(0, String::len)
            + full.aggregate_id.as_ref().map_or(0, String::len)
            + full.payload.len();
        // The overhead covers the longest metadata (every field and a 20-digit sequence).
        let mut longest = full.clone();
        longest.sequence = Some(u64::MAX);
        let longest_event = OutboundEvent::from_item(&longest).unwrap();
        assert!(longest_event.detail.len() - values <= ENVELOPE_OVERHEAD_BYTES);
        assert!(event.detail.len() > values);
    }

    #[test]
    fn entry_size_counts_time_source_type_and_detail() {
        let event = OutboundEvent::from_item(&item("{}")).unwrap();
        assert_eq!(
            event.entry_size("orders"),
            14 + "orders".len() + "OrderCreated".len() + event.detail.len()
        );
    }

    #[test]
    fn an_event_type_eventbridge_refuses_as_a_detail_type_is_poison_named_without_its_value() {
        let mut long = item("{}");
        long.event_type = "T".repeat(129);
        let err = OutboundEvent::from_item(&long).unwrap_err();
        assert!(matches!(err, EnvelopeError::Refused { .. }), "{err}");
        assert_eq!(
            err.to_string(),
            "event e1: EventType is 129 characters; EventBridge accepts a DetailType of 1 to 128"
        );
        // 128 characters of 2 bytes each are accepted: the limit counts characters
        long.event_type = "é".repeat(128);
        assert!(OutboundEvent::from_item(&long).is_ok());
    }

    #[test]
    fn a_trace_header_eventbridge_refuses_is_left_off_the_entry() {
        for refused in [String::new(), "t".repeat(501)] {
            let mut traced = item("{}");
            traced.trace_header = Some(refused);
            let event = OutboundEvent::from_item(&traced).unwrap();
            assert_eq!(event.trace_header, None);
        }
        let mut longest = item("{}");
        longest.trace_header = Some("t".repeat(500));
        let event = OutboundEvent::from_item(&longest).unwrap();
        assert_eq!(event.trace_header.map(|h| h.len()), Some(500));
    }

    #[test]
    fn a_created_at_that_is_not_a_timestamp_is_named_and_not_quoted() {
        // Given an item whose CreatedAt holds personal data instead of a timestamp
        let secret = "jane.doe@example.com";
        let mut item = item("{}");
        item.created_at = secret.into();

        // When its envelope is built
        let reason = OutboundEvent::from_item(&item).unwrap_err().to_string();

        // Then the poison reason names the attribute, never its value
        assert!(!reason.contains(secret), "{reason}");
        assert!(reason.contains("CreatedAt"), "{reason}");
    }

    #[test]
    fn non_json_payload_is_poison() {
        let err = OutboundEvent::from_item(&item("not json")).unwrap_err();
        assert!(matches!(err, EnvelopeError::PayloadNotJson { .. }), "{err}");
        let mut bad_time = item("{}");
        bad_time.created_at = "yesterday".into();
        assert!(matches!(
            OutboundEvent::from_item(&bad_time),
            Err(EnvelopeError::BadTimestamp { .. })
        ));
    }
}
