//! What a consumer receives from the relays, whichever format they publish and wherever it went:
//! [`decode`] reads the envelope (`{"metadata", "data"}`) and a CloudEvent (structured mode,
//! JSON event format) into the same [`Envelope`], alone or as the `detail` of an EventBridge
//! event, so a consumer does not care which one the relay publishes (`EVENT_FORMAT`). The
//! idempotency store's key ([`crate::EventIdKey`]) and payload hash are then the same for one
//! event in either format.
//!
//! | envelope | CloudEvent |
//! |---|---|
//! | `metadata.eventId` | `id` |
//! | `metadata.eventType` | `type` |
//! | `metadata.aggregateType` | extension `aggregatetype` |
//! | `metadata.aggregateId` | `subject` |
//! | `metadata.sequence` | extension `sequence` (a zero-padded decimal string) |
//! | `metadata.occurredAt` | `time` |
//! | `metadata.traceparent`, `metadata.tracestate` | extensions `traceparent`, `tracestate` |
//! | `data` | `data` |

use outbox_shared::{Envelope, EventMetadata};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// An event that is neither the relays' envelope nor a CloudEvent, or whose data is not what
/// the consumer expects: poison, a retry cannot help. Names what is wrong, never a value.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error(
        "not an outbox event: neither an envelope (metadata, data) nor a CloudEvent (specversion)"
    )]
    NotAnEvent,
    #[error("malformed {format}: {source}")]
    Malformed {
        format: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("CloudEvent of specversion {0}: only 1.0 is read")]
    SpecVersion(String),
    #[error("CloudEvent's sequence is not a decimal number")]
    Sequence,
}

/// A CloudEvent as the relays write it (the attributes the envelope has).
#[derive(Debug, Deserialize)]
struct CloudEventIn {
    specversion: String,
    id: String,
    #[serde(rename = "type")]
    event_type: String,
    #[serde(default)]
    subject: Option<String>,
    #[serde(default)]
    time: Option<String>,
    #[serde(default)]
    data: Value,
    #[serde(default)]
    sequence: Option<String>,
    #[serde(default)]
    aggregatetype: Option<String>,
    #[serde(default)]
    traceparent: Option<String>,
    #[serde(default)]
    tracestate: Option<String>,
}

/// The outbox event `event` carries, its data as `D`: `event` is the envelope, a CloudEvent, or
/// an EventBridge event (`{"detail-type", "detail", …}`, as the classic bus and the Custom Event
/// Bus's `PutEvents` deliver it) whose `detail` is either.
///
/// # Errors
/// [`DecodeError`] when it is none of these, or its data is not a `D`.
pub fn decode<D: DeserializeOwned>(event: &Value) -> Result<Envelope<D>, DecodeError> {
    let event = match event.get("detail") {
        Some(detail) if event.get("detail-type").is_some() => detail,
        _ => event,
    };
    if event.get("specversion").is_some() {
        return from_cloudevent(event);
    }
    if event.get("metadata").is_none() {
        return Err(DecodeError::NotAnEvent);
    }
    Envelope::<D>::deserialize(event).map_err(|source| DecodeError::Malformed {
        format: "envelope",
        source,
    })
}

/// Like [`decode`], from the text of a message body.
///
/// # Errors
/// [`DecodeError`] when it is not JSON, or [`decode`] refuses it.
pub fn decode_str<D: DeserializeOwned>(body: &str) -> Result<Envelope<D>, DecodeError> {
    let value: Value = serde_json::from_str(body).map_err(|source| DecodeError::Malformed {
        format: "message body",
        source,
    })?;
    decode(&value)
}

fn from_cloudevent<D: DeserializeOwned>(event: &Value) -> Result<Envelope<D>, DecodeError> {
    let malformed = |source| DecodeError::Malformed {
        format: "CloudEvent",
        source,
    };
    let event = CloudEventIn::deserialize(event).map_err(malformed)?;
    if event.specversion != "1.0" {
        return Err(DecodeError::SpecVersion(event.specversion));
    }
    let sequence = event
        .sequence
        .map(|s| s.parse::<u64>().map_err(|_| DecodeError::Sequence))
        .transpose()?;
    Ok(Envelope {
        metadata: EventMetadata {
            event_id: event.id,
            event_type: event.event_type,
            aggregate_type: event.aggregatetype,
            aggregate_id: event.subject,
            sequence,
            occurred_at: event.time.unwrap_or_default(),
            traceparent: event.traceparent,
            tracestate: event.tracestate,
        },
        data: D::deserialize(event.data).map_err(malformed)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn envelope() -> Value {
        json!({
            "metadata": {
                "eventId": "e1", "eventType": "OrderCreated", "aggregateType": "Order",
                "aggregateId": "o1", "sequence": 7, "occurredAt": "2026-11-22T10:00:00.000Z",
                "traceparent": TRACEPARENT, "tracestate": "rojo=1"
            },
            "data": {"orderId": "o1"}
        })
    }

    fn cloudevent() -> Value {
        json!({
            "specversion": "1.0", "id": "e1", "source": "com.example.orders",
            "type": "OrderCreated", "subject": "o1", "time": "2026-11-22T10:00:00.000Z",
            "datacontenttype": "application/json", "data": {"orderId": "o1"},
            "sequence": "00000000000000000007", "partitionkey": "o1", "aggregatetype": "Order",
            "traceparent": TRACEPARENT, "tracestate": "rojo=1"
        })
    }

    fn in_eventbridge_event(detail: Value) -> Value {
        json!({"version": "0", "id": "eb-1", "detail-type": "OrderCreated",
               "source": "com.example.orders", "detail": detail})
    }

    #[test]
    fn one_event_in_either_format_and_either_wrapping_decodes_to_the_same_envelope() {
        // Given one event as the envelope and as a CloudEvent, alone and as an EventBridge
        // event's detail
        let forms = [
            envelope(),
            cloudevent(),
            in_eventbridge_event(envelope()),
            in_eventbridge_event(cloudevent()),
        ];

        // When each is decoded
        let decoded: Vec<Envelope<Value>> = forms.iter().map(|f| decode(f).unwrap()).collect();

        // Then all are the same envelope, trace context included, and so are their keys and
        // payload hashes in the idempotency store
        let expected: Envelope<Value> = serde_json::from_value(envelope()).unwrap();
        for envelope in &decoded {
            assert_eq!(envelope, &expected);
        }
        let hashes: Vec<String> = decoded
            .iter()
            .map(|e| crate::idempotency::payload_hash(e).unwrap())
            .collect();
        assert!(hashes.windows(2).all(|w| w[0] == w[1]));
        assert_eq!(expected.metadata.traceparent.as_deref(), Some(TRACEPARENT));
    }

    #[test]
    fn what_is_not_an_outbox_event_is_refused_naming_why() {
        assert!(matches!(
            decode::<Value>(&json!({"hello": 1})),
            Err(DecodeError::NotAnEvent)
        ));
        let mut later = cloudevent();
        later["specversion"] = json!("2.0");
        assert!(matches!(
            decode::<Value>(&later),
            Err(DecodeError::SpecVersion(_))
        ));
        let mut unordered = cloudevent();
        unordered["sequence"] = json!("first");
        assert!(matches!(
            decode::<Value>(&unordered),
            Err(DecodeError::Sequence)
        ));
        #[derive(Debug, Deserialize)]
        struct Order {
            #[serde(rename = "amountCents")]
            _amount: u64,
        }
        assert!(matches!(
            decode::<Order>(&cloudevent()),
            Err(DecodeError::Malformed {
                format: "CloudEvent",
                ..
            })
        ));
        assert!(decode_str::<Value>("not json").is_err());
    }
}
