//! Error paths the emulator cannot produce, against the SDK's own mocks.

use super::*;
use crate::order::OrderLine;
use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
use aws_sdk_dynamodb::operation::transact_write_items::{
    TransactWriteItemsError, TransactWriteItemsOutput,
};
use aws_sdk_dynamodb::types::CancellationReason;
use aws_sdk_dynamodb::types::error::{
    IdempotentParameterMismatchException, ResourceNotFoundException, TransactionCanceledException,
};
use aws_smithy_mocks::{MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock};
use outbox_shared::OutboxConfig;
use outbox_shared::RetryPolicy;
use std::time::Duration;

fn client(rules: &[&Rule]) -> Client {
    let interceptor = rules.iter().fold(
        MockResponseInterceptor::new().rule_mode(RuleMode::MatchAny),
        |i, rule| i.with_rule(rule),
    );
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .http_client(create_mock_http_client())
        .interceptor(interceptor)
        .retry_config(RetryConfig::disabled())
        .build();
    Client::from_conf(config)
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
