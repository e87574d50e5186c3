//! Idempotency keys and payload fingerprints.
//!
//! The key says "which request is this"; the payload hash says "is it really the same request".
//! A reused key with another payload is a caller bug, rejected rather than answered with someone
//! else's stored response.

use std::fmt::Write as _;

use outbox_shared::Envelope;
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// Longest key DynamoDB accepts as a partition key value (2,048 bytes).
pub const MAX_KEY_BYTES: usize = 2048;

/// Derives the idempotency key of an event. Closures `Fn(&Ev) -> String` implement it too.
pub trait KeyExtractor<Ev: ?Sized>: Send + Sync {
    fn key(&self, event: &Ev) -> String;
}

impl<Ev: ?Sized, F> KeyExtractor<Ev> for F
where
    F: Fn(&Ev) -> String + Send + Sync,
{
    fn key(&self, event: &Ev) -> String {
        self(event)
    }
}

/// The default key: the envelope's `metadata.eventId`, identical on every re-publish of an
/// outbox event (EventBridge's own `id` changes with each `PutEvents`, so it is no key).
#[derive(Debug, Clone, Copy, Default)]
pub struct EventIdKey;

impl<D> KeyExtractor<Envelope<D>> for EventIdKey {
    fn key(&self, event: &Envelope<D>) -> String {
        event.metadata.event_id.clone()
    }
}

/// The envelope's `metadata.eventId` of an EventBridge event as a Lambda receives it.
#[cfg(feature = "eventbridge")]
impl<D> KeyExtractor<aws_lambda_events::eventbridge::EventBridgeEvent<Envelope<D>>> for EventIdKey
where
    D: Serialize + serde::de::DeserializeOwned,
{
    fn key(&self, event: &aws_lambda_events::eventbridge::EventBridgeEvent<Envelope<D>>) -> String {
        event.detail.metadata.event_id.clone()
    }
}

/// Hex SHA-256 of the payload's canonical JSON (object keys sorted at every level), so the same
/// document hashes the same whatever order its fields arrived in.
///
/// # Errors
/// The serializer's message when the payload cannot be represented as JSON.
pub fn payload_hash<P: Serialize + ?Sized>(payload: &P) -> Result<String, String> {
    let value = serde_json::to_value(payload).map_err(|e| e.to_string())?;
    let mut canonical = String::new();
    write_canonical(&value, &mut canonical);
    Ok(hex::encode(Sha256::digest(canonical.as_bytes())))
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, value)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(value, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        scalar => {
            let _ = write!(out, "{scalar}");
        }
    }
}

/// Checks a key before it reaches DynamoDB, which rejects empty or over-long partition keys.
pub(crate) fn validate_key(key: &str) -> Result<(), String> {
    if key.is_empty() {
        return Err("must not be empty".to_owned());
    }
    if key.len() > MAX_KEY_BYTES {
        return Err(format!(
            "is {} bytes, more than DynamoDB's {MAX_KEY_BYTES}",
            key.len()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_shared::EventMetadata;
    use serde_json::json;

    #[test]
    fn hash_ignores_field_order_but_not_values() {
        let a: Value = serde_json::from_str(r#"{"b": 1, "a": {"y": [1, 2], "x": "s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a": {"x": "s", "y": [1, 2]}, "b": 1}"#).unwrap();
        assert_eq!(payload_hash(&a).unwrap(), payload_hash(&b).unwrap());
        let c = json!({"a": {"x": "s", "y": [2, 1]}, "b": 1});
        assert_ne!(payload_hash(&a).unwrap(), payload_hash(&c).unwrap());
        assert_eq!(payload_hash(&a).unwrap().len(), 64);
    }

    #[test]
    fn default_key_is_the_envelope_event_id_and_closures_work_too() {
        let envelope = Envelope {
            metadata: EventMetadata {
                event_id: "evt-1".into(),
                event_type: "OrderCreated".into(),
                aggregate_type: None,
                aggregate_id: Some("o-1".into()),
                sequence: Some(1),
                occurred_at: "2026-11-22T10:00:00.000Z".into(),
                traceparent: None,
                tracestate: None,
            },
            data: json!({"orderId": "o-1"}),
        };
        assert_eq!(EventIdKey.key(&envelope), "evt-1");
        let by_order = |e: &Envelope<Value>| format!("order-{}", e.data["orderId"]);
        assert_eq!(by_order.key(&envelope), "order-\"o-1\"");
    }

    #[test]
    fn keys_are_checked_against_dynamodb_limits() {
        assert!(validate_key("k").is_ok());
        assert!(validate_key("").is_err());
        assert!(validate_key(&"k".repeat(MAX_KEY_BYTES + 1)).is_err());
    }
}
