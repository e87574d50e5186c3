//! Unit tests of the idempotency store: its configuration's checks, its errors' advice on
//! retrying, and the store's error paths against the SDK's mocks.

use super::*;

#[test]
fn default_config_is_valid_and_errors_name_the_setting() {
    IdempotencyConfig::new("t").validate().unwrap();
    let err = IdempotencyConfig::new(" ").validate().unwrap_err();
    assert_eq!(err.to_string(), "idempotency table name must not be empty");
    let config = IdempotencyConfig {
        lock_expiry: Duration::from_secs(120),
        completed_retention: Duration::from_secs(60),
        ..IdempotencyConfig::new("t")
    };
    assert!(
        config
            .validate()
            .unwrap_err()
            .to_string()
            .starts_with("completed retention")
    );
}

#[test]
fn refusals_say_whether_to_retry() {
    let in_progress: IdempotencyError<String> = IdempotencyError::InProgress {
        key: "k".into(),
        expires_at: Utc::now(),
    };
    assert!(in_progress.is_retryable());
    let mismatch: IdempotencyError<String> = IdempotencyError::PayloadMismatch { key: "k".into() };
    assert!(!mismatch.is_retryable());
}

mod mocked {
    //! Error paths the emulator cannot produce.

    use super::*;
    use crate::test_support::{mock_client, throttled};
    use aws_sdk_dynamodb::Client;
    use aws_sdk_dynamodb::operation::delete_item::DeleteItemError;
    use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
    use aws_sdk_dynamodb::types::error::ProvisionedThroughputExceededException;
    use aws_smithy_mocks::mock;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn throughput_exceeded() -> ProvisionedThroughputExceededException {
        ProvisionedThroughputExceededException::builder()
            .message("throttled")
            .meta(throttled())
            .build()
    }

    #[tokio::test]
    async fn a_throttled_claim_is_a_retryable_store_error_and_the_logic_does_not_run() {
        let claim = mock!(Client::update_item).then_error(|| {
            UpdateItemError::ProvisionedThroughputExceededException(throughput_exceeded())
        });
        let store =
            IdempotencyStore::new(mock_client(&[&claim]), IdempotencyConfig::new("t")).unwrap();
        let runs = AtomicUsize::new(0);
        let result = store
            .run("k", &"payload", None, || async {
                runs.fetch_add(1, Ordering::SeqCst);
                Ok::<_, String>(())
            })
            .await;
        match result {
            Err(IdempotencyError::Store(e)) => assert!(e.is_retryable(), "{e}"),
            other => panic!("expected a store error, got {other:?}"),
        }
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_release_that_fails_still_reports_the_business_failure() {
        let claim = mock!(Client::update_item).then_output(|| UpdateItemOutput::builder().build());
        let release = mock!(Client::delete_item).then_error(|| {
            DeleteItemError::ProvisionedThroughputExceededException(throughput_exceeded())
        });
        let store = IdempotencyStore::new(
            mock_client(&[&claim, &release]),
            IdempotencyConfig::new("t"),
        )
        .unwrap();
        let result = store
            .run("k", &"payload", None, || async {
                Err::<(), _>("inventory down".to_owned())
            })
            .await;
        match result {
            Err(e @ IdempotencyError::Business { .. }) => {
                assert!(e.is_retryable());
                assert!(e.to_string().contains("inventory down"), "{e}");
            }
            other => panic!("expected the business failure, got {other:?}"),
        }
        assert_eq!(release.num_calls(), 1);
    }
}
