//! Error paths the emulator cannot produce, against the SDK's own mocks.

use super::*;
use crate::error::LimitError;
use crate::order::OrderLine;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
use aws_sdk_dynamodb::operation::transact_write_items::{
    TransactWriteItemsError, TransactWriteItemsOutput,
};
use aws_sdk_dynamodb::types::CancellationReason;
use aws_sdk_dynamodb::types::error::{
    IdempotentParameterMismatchException, ResourceNotFoundException, TransactionCanceledException,
};
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use outbox_shared::OutboxConfig;
use outbox_shared::RetryPolicy;
use outbox_shared::claim_check::StoreError;
use std::time::Duration;

fn client(rules: &[&Rule]) -> Client {
    mock_client!(aws_sdk_dynamodb, RuleMode::MatchAny, rules, |c| c
        .retry_config(RetryConfig::disabled()))
}

fn writer(rules: &[&Rule], retry: RetryPolicy) -> OutboxWriter {
    let mut config = WriterConfig::new(OutboxConfig::new("orders"), "test.orders");
    config.update_retry = retry;
    config.transaction_retry = retry;
    OutboxWriter::new(client(rules), config).unwrap()
}

fn quick(max_retries: u32) -> RetryPolicy {
    RetryPolicy {
        max_retries,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(1),
    }
}

fn cancelled(codes: &'static [&'static str]) -> TransactWriteItemsError {
    TransactWriteItemsError::TransactionCanceledException(
        TransactionCanceledException::builder()
            .message(
                "Transaction cancelled, please refer cancellation reasons for specific reasons",
            )
            .set_cancellation_reasons(Some(
                codes
                    .iter()
                    .map(|c| CancellationReason::builder().code(*c).build())
                    .collect(),
            ))
            .build(),
    )
}

fn order() -> NewOrder {
    NewOrder::new(vec![OrderLine::new("sku", 1, 100)]).with_order_id("o-1")
}

fn order_key() -> ItemKey {
    ItemKey {
        pk: "USER#u-1".into(),
        sk: "ORDER#o-1".into(),
    }
}

#[tokio::test]
async fn throttling_at_a_position_is_a_retryable_throttled_error() {
    let rule =
        mock!(Client::transact_write_items).then_error(|| cancelled(&["ThrottlingError", "None"]));
    let err = writer(&[&rule], quick(0))
        .create_order_with_outbox("u-1", order())
        .await
        .unwrap_err();
    assert_eq!(
        err,
        WriteError::Throttled {
            key: Some(order_key())
        }
    );
    assert!(err.is_retryable());
}

#[tokio::test]
async fn a_transaction_conflict_is_retried_until_the_bound() {
    let rule = mock!(Client::transact_write_items)
        .then_error(|| cancelled(&["None", "TransactionConflict"]));
    let err = writer(&[&rule], quick(2))
        .create_order_with_outbox("u-1", order())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, WriteError::TransactionConflict { key: Some(k) } if k.sk.starts_with("OUTBOX#")),
        "{err}"
    );
    assert_eq!(rule.num_calls(), 3);
}

#[tokio::test]
async fn a_transaction_conflict_then_success_creates_the_order() {
    let rule = mock!(Client::transact_write_items)
        .sequence()
        .error(|| cancelled(&["TransactionConflict", "None"]))
        .output(|| TransactWriteItemsOutput::builder().build())
        .build();
    let created = writer(&[&rule], quick(1))
        .create_order_with_outbox("u-1", order())
        .await
        .unwrap();
    assert_eq!(created.order_id, "o-1");
    assert!(!created.replayed);
    assert_eq!(rule.num_calls(), 2);
}

#[tokio::test]
async fn a_validation_reason_is_not_retried() {
    let rule =
        mock!(Client::transact_write_items).then_error(|| cancelled(&["ValidationError", "None"]));
    let err = writer(&[&rule], quick(3))
        .create_order_with_outbox("u-1", order())
        .await
        .unwrap_err();
    assert!(
        matches!(&err, WriteError::Validation { key: Some(k), .. } if *k == order_key()),
        "{err}"
    );
    assert!(!err.is_retryable());
    assert_eq!(rule.num_calls(), 1);
}

#[tokio::test]
async fn a_failed_version_check_is_a_version_conflict() {
    let read = mock!(Client::get_item).then_output(|| {
        GetItemOutput::builder()
            .item(attr::VERSION, AttributeValue::N("3".into()))
            .item(attr::STATUS, AttributeValue::S("CREATED".into()))
            .build()
    });
    let write = mock!(Client::transact_write_items)
        .then_error(|| cancelled(&["ConditionalCheckFailed", "None"]));
    let err = writer(&[&read, &write], quick(0))
        .update_order_status_with_outbox("u-1", "o-1", OrderStatus::Paid)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        WriteError::VersionConflict {
            key: order_key(),
            expected_version: 3
        }
    );
    assert_eq!(read.num_calls(), 1);
}

#[tokio::test]
async fn a_reused_token_without_a_record_is_retried_with_a_fresh_token() {
    // The first request with this token never committed, so DynamoDB's token memory must not
    // block the create; the idempotency record's condition still guards it.
    let derived = client_request_token("orders", "u-1", "k");
    let ours = derived.clone();
    let write = mock!(Client::transact_write_items)
        .match_requests(move |r| r.client_request_token() == Some(ours.as_str()))
        .then_error(|| {
            TransactWriteItemsError::IdempotentParameterMismatchException(
                IdempotentParameterMismatchException::builder().build(),
            )
        });
    let write_without_token = mock!(Client::transact_write_items)
        // The SDK fills in a fresh token of its own when none is set.
        .match_requests(move |r| r.client_request_token() != Some(derived.as_str()))
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let read = mock!(Client::get_item).then_output(|| GetItemOutput::builder().build());
    let created = writer(&[&write, &write_without_token, &read], quick(1))
        .create_order_with_outbox("u-1", order().with_idempotency_key("k"))
        .await
        .unwrap();
    assert!(!created.replayed);
    assert_eq!(
        (
            write.num_calls(),
            read.num_calls(),
            write_without_token.num_calls()
        ),
        (1, 1, 1)
    );
}

#[tokio::test]
async fn a_reused_token_with_a_record_replays_it() {
    let hash = order().with_idempotency_key("k").request_hash("u-1");
    let write = mock!(Client::transact_write_items).then_error(|| {
        TransactWriteItemsError::IdempotentParameterMismatchException(
            IdempotentParameterMismatchException::builder().build(),
        )
    });
    let read = mock!(Client::get_item).then_output(move || {
        GetItemOutput::builder()
            .item(attr::REQUEST_HASH, AttributeValue::S(hash.clone()))
            .item(attr::ORDER_ID, AttributeValue::S("o-1".into()))
            .item(attr::EVENT_ID, AttributeValue::S("e-first".into()))
            .build()
    });
    let created = writer(&[&write, &read], quick(0))
        .create_order_with_outbox("u-1", order().with_idempotency_key("k"))
        .await
        .unwrap();
    assert_eq!(
        created,
        CreatedOrder {
            order_id: "o-1".into(),
            event_id: "e-first".into(),
            replayed: true
        }
    );
}

#[tokio::test]
async fn another_failed_call_keeps_the_sdk_error_as_its_source() {
    let rule = mock!(Client::transact_write_items).then_error(|| {
        TransactWriteItemsError::ResourceNotFoundException(
            ResourceNotFoundException::builder()
                .message("Requested resource not found")
                .build(),
        )
    });
    let err = writer(&[&rule], quick(3))
        .create_order_with_outbox("u-1", order())
        .await
        .unwrap_err();
    let WriteError::Dynamo(failure) = &err else {
        panic!("not a DynamoDB failure: {err}");
    };
    assert_eq!(failure.operation, "TransactWriteItems");
    assert!(!err.is_retryable());
    assert_eq!(rule.num_calls(), 1);
    let source = std::error::Error::source(&err).expect("the failure is the source");
    let sdk = std::error::Error::source(source).expect("the SDK error is its source");
    assert!(
        sdk.downcast_ref::<SdkError<TransactWriteItemsError, HttpResponse>>()
            .is_some()
    );
}

#[test]
fn client_request_tokens_are_stable_short_and_scoped() {
    let token = client_request_token("orders", "u-1", "k");
    assert_eq!(token, client_request_token("orders", "u-1", "k"));
    assert!(token.len() <= CLIENT_REQUEST_TOKEN_MAX_LEN);
    assert_ne!(token, client_request_token("orders", "u-2", "k"));
    assert_ne!(token, client_request_token("orders", "u-1", "k2"));
}

#[test]
fn the_writer_is_shareable_across_tasks() {
    fn check<T: Send + Sync + Clone>() {}
    check::<OutboxWriter>();
}

// The claim check's calls: what S3 failing does to a write, and which writes call S3 at all.

const BUCKET: &str = "orders-payloads";

fn s3(rules: &[&Rule]) -> aws_sdk_s3::Client {
    mock_client!(aws_sdk_s3, RuleMode::MatchAny, rules, |c| c
        .retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled()))
}

/// A writer with a payload bucket, its DynamoDB calls answered by `dynamodb`, its S3 calls by
/// `s3_rules`.
fn claim_checking_writer(dynamodb: &[&Rule], s3_rules: &[&Rule]) -> OutboxWriter {
    let mut config = WriterConfig::new(OutboxConfig::new("orders"), "test.orders");
    config.payload_bucket = Some(BUCKET.into());
    config.transaction_retry = quick(0);
    OutboxWriter::with_s3(client(dynamodb), s3(s3_rules), config).unwrap()
}

/// One event whose payload's JSON text is about `bytes` long.
fn event_of_bytes(bytes: usize) -> OutboxTransaction {
    OutboxTransaction::new().event(NewOutboxEvent {
        partition_key: "USER#u-1".into(),
        event_type: "OrderImported".into(),
        aggregate_type: "Order".into(),
        aggregate_id: "o-1".into(),
        sequence: Some(1),
        payload: serde_json::json!({ "lines": "x".repeat(bytes) }),
        trace_header: None,
        trace_context: None,
    })
}

/// S3's answer to a refused call: its status and its XML error.
fn s3_refusal(status: u16, code: &str) -> HttpResponse {
    HttpResponse::new(
        status.try_into().unwrap(),
        aws_sdk_s3::primitives::SdkBody::from(format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
             <Error><Code>{code}</Code><Message>refused by the test</Message></Error>"
        )),
    )
}

#[tokio::test]
async fn an_s3_failure_writes_nothing_and_is_retryable_as_its_class_says() {
    for (status, code, retryable) in [
        (503, "SlowDown", true),
        (500, "InternalError", true),
        (403, "AccessDenied", false),
    ] {
        // Given S3 refusing every PutObject
        let put = mock!(aws_sdk_s3::Client::put_object)
            .then_http_response(move || s3_refusal(status, code));
        let write = mock!(Client::transact_write_items)
            .then_output(|| TransactWriteItemsOutput::builder().build());
        let writer = claim_checking_writer(&[&write], &[&put]);

        // When an event too large for an item is committed
        let err = writer.commit(event_of_bytes(500_000)).await.unwrap_err();

        // Then the write fails with S3's failure, retryable as its class says, and no
        // transaction was sent
        let WriteError::PayloadNotStored {
            source: StoreError::Failed(source),
            ..
        } = &err
        else {
            panic!("not a payload S3 did not store: {err:?}");
        };
        assert_eq!(source.operation, "PutObject");
        assert_eq!(source.code.as_deref(), Some(code));
        assert_eq!(err.is_retryable(), retryable, "{err}");
        assert!(err.to_string().contains("nothing was written"), "{err}");
        assert_eq!((put.num_calls(), write.num_calls()), (1, 0), "{code}");
        let sdk = std::error::Error::source(source).expect("the SDK error is the source");
        assert!(
            sdk.downcast_ref::<SdkError<aws_sdk_s3::operation::put_object::PutObjectError, HttpResponse>>()
                .is_some()
        );
    }
}

#[tokio::test]
async fn a_payload_over_the_largest_accepted_is_refused_before_any_call() {
    // Given a writer with a payload bucket accepting payloads up to 1 MiB
    let put = mock!(aws_sdk_s3::Client::put_object)
        .then_output(|| aws_sdk_s3::operation::put_object::PutObjectOutput::builder().build());
    let write = mock!(Client::transact_write_items)
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let mut config = WriterConfig::new(OutboxConfig::new("orders"), "test.orders");
    config.payload_bucket = Some(BUCKET.into());
    config.max_payload_bytes = 1024 * 1024;
    let writer = OutboxWriter::with_s3(client(&[&write]), s3(&[&put]), config).unwrap();

    // When an event of 2 MB is committed
    let err = writer.commit(event_of_bytes(2_000_000)).await.unwrap_err();

    // Then it is refused with the sizes and the setting, before S3 or DynamoDB is called
    assert!(
        matches!(
            &err,
            WriteError::LimitExceeded(LimitError::PayloadTooLarge { bytes, max: 1_048_576, .. })
                if *bytes > 2_000_000
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert_eq!((put.num_calls(), write.num_calls()), (0, 0));
}

#[tokio::test]
async fn a_payload_that_fits_its_item_makes_no_s3_call() {
    // Given a writer with a payload bucket
    let put = mock!(aws_sdk_s3::Client::put_object)
        .then_output(|| aws_sdk_s3::operation::put_object::PutObjectOutput::builder().build());
    let write = mock!(Client::transact_write_items)
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let writer = claim_checking_writer(&[&write], &[&put]);

    // When a small event, one of 300 KB (its item fits) and an order are written
    let small = writer.commit(event_of_bytes(100)).await.unwrap();
    let fits = writer.commit(event_of_bytes(300_000)).await.unwrap();
    writer
        .create_order_with_outbox("u-1", order().with_idempotency_key("k"))
        .await
        .unwrap();

    // Then S3 was never called and the payloads are inline
    assert_eq!((put.num_calls(), write.num_calls()), (0, 3));
    for committed in [small, fits] {
        assert_eq!(committed.events[0].payload_ref, None);
        assert!(!committed.events[0].payload.is_empty());
    }
}

#[tokio::test]
async fn a_large_payload_is_stored_once_then_referenced_by_the_transaction() {
    // Given S3 and DynamoDB accepting, DynamoDB first with a transaction conflict
    let put = mock!(aws_sdk_s3::Client::put_object)
        .match_requests(|r| {
            r.bucket() == Some(BUCKET)
                && r.key().is_some_and(|k| k.starts_with("payloads/"))
                && r.if_none_match() == Some("*")
                && r.checksum_sha256().is_some()
        })
        .then_output(|| aws_sdk_s3::operation::put_object::PutObjectOutput::builder().build());
    let write = mock!(Client::transact_write_items)
        .match_requests(|r| {
            r.transact_items().iter().all(|i| {
                i.put().is_some_and(|p| {
                    p.item().contains_key(attr::PAYLOAD_REF)
                        && !p.item().contains_key(attr::PAYLOAD)
                })
            })
        })
        .sequence()
        .error(|| cancelled(&["TransactionConflict"]))
        .output(|| TransactWriteItemsOutput::builder().build())
        .build();
    let mut config = WriterConfig::new(OutboxConfig::new("orders"), "test.orders");
    config.payload_bucket = Some(BUCKET.into());
    config.transaction_retry = quick(1);
    let writer = OutboxWriter::with_s3(client(&[&write]), s3(&[&put]), config).unwrap();

    // When an event of 500 KB is committed
    let committed = writer.commit(event_of_bytes(500_000)).await.unwrap();

    // Then its payload was stored once, before the transaction, which was retried alone, and
    // the item as written refers to it
    assert_eq!((put.num_calls(), write.num_calls()), (1, 2));
    let event = &committed.events[0];
    assert_eq!(event.payload, "");
    let reference = event.payload_ref.as_ref().expect("a reference");
    assert_eq!(
        reference.uri,
        format!("s3://{BUCKET}/payloads/{}", event.event_id)
    );
}

#[test]
fn a_payload_bucket_needs_a_writer_with_an_s3_client() {
    let mut config = WriterConfig::new(OutboxConfig::new("orders"), "test.orders");
    config.payload_bucket = Some(BUCKET.into());
    let err = OutboxWriter::new(client(&[]), config).unwrap_err();
    assert_eq!(
        err.to_string(),
        "payload bucket is set, but OutboxWriter::new has no S3 client to store payloads with: \
         build the writer with OutboxWriter::from_sdk_config or OutboxWriter::with_s3"
    );
}

/// DynamoDB's `DescribeTable` answer for a global table of `consistency` (`STRONG`, `EVENTUAL`):
/// the JSON the service sends (awsJson1_0), a replica in each of two regions.
fn described(consistency: &str) -> HttpResponse {
    HttpResponse::new(
        200.try_into().unwrap(),
        aws_sdk_s3::primitives::SdkBody::from(format!(
            r#"{{"Table":{{"TableName":"orders","TableStatus":"ACTIVE",
            "TableArn":"arn:aws:dynamodb:us-east-1:123456789012:table/orders",
            "KeySchema":[{{"AttributeName":"PK","KeyType":"HASH"}},{{"AttributeName":"SK","KeyType":"RANGE"}}],
            "AttributeDefinitions":[{{"AttributeName":"PK","AttributeType":"S"}},{{"AttributeName":"SK","AttributeType":"S"}}],
            "BillingModeSummary":{{"BillingMode":"PAY_PER_REQUEST"}},
            "GlobalTableVersion":"2019.11.21",
            "MultiRegionConsistency":"{consistency}",
            "Replicas":[{{"RegionName":"us-east-2","ReplicaStatus":"ACTIVE"}},{{"RegionName":"us-west-2","ReplicaStatus":"ACTIVE"}}]}}}}"#
        )),
    )
}

fn global_writer(rules: &[&Rule]) -> OutboxWriter {
    let config = WriterConfig {
        global_table: true,
        ..WriterConfig::new(OutboxConfig::new("orders"), "test.orders")
    };
    OutboxWriter::new(client(rules), config).unwrap()
}

#[tokio::test]
async fn a_strong_consistency_table_is_refused_before_anything_is_written() {
    // Given a global table of multi-region strong consistency
    let describe = mock!(Client::describe_table).then_http_response(|| described("STRONG"));
    let write = mock!(Client::transact_write_items)
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let writer = global_writer(&[&describe, &write]);

    // When an order is created
    let err = writer
        .create_order_with_outbox("u-1", order())
        .await
        .unwrap_err();

    // Then the writer refuses it, naming the table and why, and sends no transaction
    assert_eq!(
        err,
        WriteError::StrongConsistencyTable {
            table: "orders".into()
        }
    );
    let message = err.to_string();
    for part in [
        "table orders",
        "multi-region strong consistency (MRSC)",
        "neither transactions nor TTL",
        "multi-region eventual consistency (MREC)",
    ] {
        assert!(message.contains(part), "{part} in {message}");
    }
    assert!(!err.is_retryable());
    assert_eq!(write.num_calls(), 0);
}

#[tokio::test]
async fn an_eventual_consistency_table_is_read_once_and_its_events_stamped() {
    // Given a global table of multi-region eventual consistency
    let describe = mock!(Client::describe_table).then_http_response(|| described("EVENTUAL"));
    let write = mock!(Client::transact_write_items)
        .then_output(|| TransactWriteItemsOutput::builder().build());
    let writer = global_writer(&[&describe, &write]);

    // When two orders are created
    for id in ["o-1", "o-2"] {
        writer
            .create_order_with_outbox("u-1", order().with_order_id(id))
            .await
            .unwrap();
    }

    // Then the table was read once, both were written, and the writer stamps the client's region
    assert_eq!(describe.num_calls(), 1);
    assert_eq!(write.num_calls(), 2);
    assert_eq!(
        writer
            .config()
            .outbox
            .origin_region
            .as_ref()
            .map(|r| r.as_str()),
        Some("us-east-1")
    );
}

#[tokio::test]
async fn a_transaction_refused_for_strong_consistency_is_the_same_error() {
    // Given a table converted to strong consistency after the writer's first look (its
    // DescribeTable said EVENTUAL), whose TransactWriteItems is refused
    let describe = mock!(Client::describe_table).then_http_response(|| described("EVENTUAL"));
    let write = mock!(Client::transact_write_items).then_error(|| {
        TransactWriteItemsError::generic(
            aws_sdk_dynamodb::error::ErrorMetadata::builder()
                .code("ValidationException")
                .message("Transactions are not supported for tables with multi-region strong consistency")
                .build(),
        )
    });
    let writer = global_writer(&[&describe, &write]);

    // When an order is created
    let err = writer
        .create_order_with_outbox("u-1", order())
        .await
        .unwrap_err();

    // Then the refusal says what it is
    assert_eq!(
        err,
        WriteError::StrongConsistencyTable {
            table: "orders".into()
        }
    );
}

#[test]
fn a_single_region_writer_stamps_nothing_and_a_global_one_needs_a_region() {
    use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials};
    use aws_smithy_mocks::create_mock_http_client;

    let single = writer(&[], quick(0));
    assert_eq!(single.config().outbox.origin_region, None);

    // A client with no region (mock_client! sets one)
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .http_client(create_mock_http_client())
        .build();
    let err = OutboxWriter::new(
        Client::from_conf(config),
        WriterConfig {
            global_table: true,
            ..WriterConfig::new(OutboxConfig::new("orders"), "test.orders")
        },
    )
    .unwrap_err();
    assert!(err.to_string().contains("region"), "{err}");
}
