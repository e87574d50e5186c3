use super::outbound::{CLOUDEVENT_OVERHEAD_BYTES, ENVELOPE_OVERHEAD_BYTES, values_len};
use super::*;
use crate::claim_check::PayloadRef;
use crate::item::{OutboxItem, OutboxStatus};

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
        origin_region: None,
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
        OutboundEvent::from_item(&longest, &Encoding::cloudevents("com.example.orders")).unwrap();
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

        // Then the body is the original with its `data` member, and only it, replaced in place by
        // the reference's three members (built here by plain text replacement, apart from the
        // rule under test)
        let data_member = format!(r#""data":{}"#, event.data().unwrap());
        assert_eq!(
            event.detail.matches(&data_member).count(),
            1,
            "{}",
            event.detail
        );
        let expected = event.detail.replace(
            &data_member,
            &format!(
                r#""dataref":"{}","datasize":{},"datasha256":"{}""#,
                reference.uri, reference.size, reference.sha256
            ),
        );
        assert_eq!(referenced.detail, expected, "{encoding:?}");
        // And it is what the writer's reference gives, member for member and in order
        let mut stored = traced.clone();
        stored.payload = String::new();
        stored.payload_ref = Some(reference);
        let written = OutboundEvent::from_item(&stored, &encoding).unwrap();
        assert_eq!(referenced, written, "{encoding:?}");
        assert_eq!(referenced.data(), None);
    }
}
