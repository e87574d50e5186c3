//! DynamoDB and S3 clients answered by `aws-smithy-mocks` rules, for error paths the emulator
//! cannot produce (throttling at a chosen call, an S3 outage).

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::ErrorMetadata;
use aws_smithy_mocks::{Rule, RuleMode, mock_client};

/// A client whose calls are answered by `rules` (SDK retries off, so each rule answers once).
pub(crate) fn mock_client(rules: &[&Rule]) -> Client {
    mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, rules, |c| c
        .retry_config(RetryConfig::disabled()))
}

/// The error metadata DynamoDB sends when a table's throughput is exceeded.
pub(crate) fn throttled() -> ErrorMetadata {
    ErrorMetadata::builder()
        .code("ProvisionedThroughputExceededException")
        .message("Rate of requests exceeds the allowed throughput")
        .build()
}

/// An S3 client whose calls are answered by `rules` (SDK retries off, so each rule answers once).
pub(crate) fn mock_s3_client(rules: &[&Rule]) -> aws_sdk_s3::Client {
    mock_client!(aws_sdk_s3, RuleMode::MatchAny, rules, |c| c
        .retry_config(RetryConfig::disabled()))
}

/// S3's answer to a refused or failed call: `status`, and the REST-XML error with `code`.
pub(crate) fn s3_error(status: u16, code: &str) -> aws_smithy_runtime_api::http::Response {
    aws_smithy_runtime_api::http::Response::new(
        aws_smithy_runtime_api::http::StatusCode::try_from(status).expect("an HTTP status"),
        aws_smithy_types::body::SdkBody::from(format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code>\
             <Message>{code}</Message><RequestId>R1</RequestId></Error>"
        )),
    )
}

/// One `OrderCreated` event with `payload` as `encoding` writes it twice: with its data inline,
/// and with its data referenced as stored in bucket `b` (the item's `PayloadRef`, as the writer
/// stores a payload too large for an item); and the reference.
/// The payload bucket of [`inline_and_claim_checked`]'s references.
pub(crate) const PAYLOAD_BUCKET: &str = "order-payloads";

pub(crate) fn inline_and_claim_checked(
    payload: &serde_json::Value,
    encoding: &outbox_shared::envelope::Encoding,
) -> (
    serde_json::Value,
    serde_json::Value,
    outbox_shared::PayloadRef,
) {
    use outbox_shared::{NewOutboxEvent, OutboundEvent, OutboxConfig, OutboxItem, PayloadStore};
    let item = OutboxItem::pending_with_id(
        NewOutboxEvent {
            partition_key: "USER#u1".into(),
            event_type: "OrderCreated".into(),
            aggregate_type: "Order".into(),
            aggregate_id: "o1".into(),
            sequence: Some(3),
            payload: payload.clone(),
            trace_header: None,
            trace_context: None,
        },
        &OutboxConfig::new("outbox"),
        chrono::Utc::now(),
        "e1".into(),
    )
    .expect("a valid item");
    let reference = PayloadStore::new(mock_s3_client(&[]), PAYLOAD_BUCKET)
        .reference(&item.event_id, item.payload.as_bytes());
    let mut stored = item.clone();
    stored.payload = String::new();
    stored.payload_ref = Some(reference.clone());
    let body = |item: &OutboxItem| {
        let event = OutboundEvent::from_item(item, encoding).expect("an event");
        serde_json::from_str(&event.detail).expect("JSON")
    };
    (body(&item), body(&stored), reference)
}
