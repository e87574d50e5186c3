//! The Custom Event Bus's wire format (Smithy RPC v2 CBOR), as much of it as the fault proxy and
//! the latency model need: a `PutEvents` request's entries read, answers and errors written.
//! Requests are `POST /service/AWSEventsV2/operation/{Operation}` ([`crate::CUSTOM_BUS_PATH`]),
//! with no `X-Amz-Target`; bodies are CBOR maps with the model's PascalCase member names; an
//! error is a map `{__type, message}` with the error's HTTP status.

use ciborium::Value;

/// The `Content-Type` of every request and answer.
pub const CONTENT_TYPE: &str = "application/cbor";
/// The protocol header every answer repeats.
pub const PROTOCOL_HEADER: &str = "smithy-protocol";
/// Its value.
pub const PROTOCOL: &str = "rpc-v2-cbor";

/// The operation a request's URL path names, if it is the Custom Event Bus's.
pub fn operation(path: &str) -> Option<&str> {
    let start = path.find(crate::CUSTOM_BUS_PATH)? + crate::CUSTOM_BUS_PATH.len();
    Some(path[start..].split(['?', '/']).next().unwrap_or_default())
}

/// A body decoded, if it is CBOR.
pub fn decode(body: &[u8]) -> Option<Value> {
    ciborium::from_reader(body).ok()
}

/// A value encoded.
///
/// # Panics
/// Never: writing into a `Vec` does not fail.
pub fn encode(value: &Value) -> Vec<u8> {
    let mut bytes = Vec::new();
    ciborium::into_writer(value, &mut bytes).expect("CBOR into a Vec");
    bytes
}

/// The member `key` of a map.
pub fn member<'a>(map: &'a Value, key: &str) -> Option<&'a Value> {
    map.as_map()?
        .iter()
        .find(|(k, _)| k.as_text() == Some(key))
        .map(|(_, v)| v)
}

/// A text value.
pub fn text(value: &Value) -> Option<&str> {
    value.as_text()
}

/// The `Entries` of a `PutEvents` request (or answer).
pub fn entries(request: &Value) -> Option<&Vec<Value>> {
    member(request, "Entries")?.as_array()
}

/// Sets the `Entries` of a `PutEvents` request.
pub fn set_entries(request: &mut Value, entries: Vec<Value>) {
    if let Some(map) = request.as_map_mut() {
        map.retain(|(k, _)| k.as_text() != Some("Entries"));
        map.push((Value::Text("Entries".into()), Value::Array(entries)));
    }
}

/// The `Detail` of each entry of a `PutEvents` request's body, in order (empty text for an entry
/// without one; nothing when the body is not such a request).
pub fn details(body: &[u8]) -> Vec<String> {
    decode(body)
        .as_ref()
        .and_then(entries)
        .map(|entries| {
            entries
                .iter()
                .map(|e| {
                    member(e, "Detail")
                        .and_then(text)
                        .unwrap_or_default()
                        .to_owned()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A map of text keys.
pub fn map(members: Vec<(&str, Value)>) -> Value {
    Value::Map(
        members
            .into_iter()
            .map(|(k, v)| (Value::Text(k.to_owned()), v))
            .collect(),
    )
}

/// An accepted entry's result.
pub fn published(event_id: &str, sequence_number: u64) -> Value {
    map(vec![
        ("EventId", Value::Text(event_id.to_owned())),
        (
            "SequenceNumber",
            Value::Text(format!("{sequence_number:020}")),
        ),
        ("SuccessCode", Value::Text("PUBLISHED".into())),
    ])
}

/// A refused entry's result.
pub fn entry_error(code: &str, message: &str) -> Value {
    map(vec![
        ("ErrorCode", Value::Text(code.to_owned())),
        ("ErrorMessage", Value::Text(message.to_owned())),
    ])
}

/// A `PutEvents` answer of `results`, in entry order.
pub fn put_events_answer(results: Vec<Value>) -> Vec<u8> {
    let failed = results
        .iter()
        .filter(|r| member(r, "ErrorCode").is_some())
        .count();
    encode(&map(vec![
        ("FailedEntryCount", Value::Integer(failed.into())),
        ("Entries", Value::Array(results)),
    ]))
}

/// An error answer's body.
pub fn error(code: &str, message: &str) -> Vec<u8> {
    encode(&map(vec![
        ("__type", Value::Text(code.to_owned())),
        ("message", Value::Text(message.to_owned())),
    ]))
}
