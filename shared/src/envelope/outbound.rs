//! An outbox item as the event the relays publish: its body in the configured format, and what a
//! publisher batches it by.

use serde_json::value::RawValue;

use super::wire::{CloudEvent, DataRef, Envelope, EventMetadata};
use super::{
    CLOUDEVENTS_SEQUENCE_DIGITS, CLOUDEVENTS_SPEC_VERSION, DATA_CONTENT_TYPE, Encoding,
    EnvelopeError, EventFormat,
};
use crate::claim_check::PayloadRef;
use crate::entry_field::{check_detail_type, check_trace_header};
use crate::item::OutboxItem;
use crate::limits::PUT_EVENTS_TIME_BYTES;
use crate::time::parse_timestamp;
use crate::trace_context::TraceContext;

/// The envelope's bytes besides its field values: keys, quotes, braces and a sequence number.
pub(super) const ENVELOPE_OVERHEAD_BYTES: usize = 200;

/// A CloudEvent's bytes besides its field values.
pub(super) const CLOUDEVENT_OVERHEAD_BYTES: usize = 260;

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
        let (data, stored): (&RawValue, Option<&PayloadRef>) = match &item.payload_ref {
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
                (RawValue::NULL, Some(reference))
            }
            None if item.payload.is_empty() => {
                return Err(EnvelopeError::NoPayload {
                    event_id: event_id.clone(),
                });
            }
            None => {
                let data = serde_json::from_str(&item.payload).map_err(|e| {
                    EnvelopeError::PayloadNotJson {
                        event_id: event_id.clone(),
                        reason: e.to_string(),
                    }
                })?;
                (data, None)
            }
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
        let detail = match stored {
            Some(reference) => referenced(&detail, reference),
            None => detail,
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

    /// The reference its body carries in place of `data` (`dataref`, `datasize`, `datasha256`:
    /// the payload stored in S3); `None` when it carries `data`.
    pub fn data_ref(&self) -> Option<PayloadRef> {
        serde_json::from_str::<DataRef>(&self.detail)
            .ok()
            .map(PayloadRef::from)
    }

    /// The same event with its `data` replaced by `reference` (the payload stored in S3): every
    /// other member kept, in its order. An event without `data` is returned as it is.
    pub fn with_data_ref(&self, reference: &PayloadRef) -> Self {
        Self {
            detail: referenced(&self.detail, reference),
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

/// `detail` with its `data` replaced by the members of [`DataRef`] naming `reference`, every
/// other member kept in its order: how a body carries a payload in S3, whoever stored it (the
/// writer, for an item's `PayloadRef`, or a relay, for an event too large for its target).
fn referenced(detail: &str, reference: &PayloadRef) -> String {
    let members = members(detail);
    let mut body = String::with_capacity(detail.len().min(4096));
    body.push('{');
    for (index, (name, value)) in members.iter().enumerate() {
        if index > 0 {
            body.push(',');
        }
        if name == "data" {
            let stored =
                serde_json::to_string(&DataRef::of(reference)).expect("a reference serializes");
            // Its members, without their braces.
            body.push_str(&stored[1..stored.len() - 1]);
        } else {
            body.push_str(&serde_json::to_string(name).expect("a string serializes"));
            body.push(':');
            body.push_str(value.get());
        }
    }
    body.push('}');
    body
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
pub(super) fn values_len(item: &OutboxItem, trace: Option<&TraceContext>) -> usize {
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

fn envelope_detail(item: &OutboxItem, data: &RawValue, trace: Option<&TraceContext>) -> String {
    let envelope = Envelope {
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
    };
    let mut detail = Vec::with_capacity(ENVELOPE_OVERHEAD_BYTES + values_len(item, trace));
    serde_json::to_writer(&mut detail, &envelope).expect("envelope of valid JSON serializes");
    String::from_utf8(detail).expect("serde_json writes UTF-8")
}

fn cloudevent_detail(
    item: &OutboxItem,
    data: &RawValue,
    trace: Option<&TraceContext>,
    source: &str,
) -> String {
    let event = CloudEvent {
        specversion: CLOUDEVENTS_SPEC_VERSION,
        id: item.event_id.as_str(),
        source,
        event_type: item.event_type.as_str(),
        subject: item.aggregate_id.as_deref(),
        time: Some(item.created_at.as_str()),
        datacontenttype: Some(DATA_CONTENT_TYPE),
        data: Some(data),
        sequence: item
            .sequence
            .map(|s| format!("{s:0width$}", width = CLOUDEVENTS_SEQUENCE_DIGITS)),
        partitionkey: Some(item.ordering_key()),
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
