//! A failed `TransactWriteItems` read back as a typed error: cancellation reasons by position
//! against the actions, the `ClientRequestToken` reused for another request.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::CancellationReason;
use outbox_shared::{ErrorClass, ItemKey, SdkFailure};

use super::ConditionFailure;
use crate::error::WriteError;

/// `CancellationReason` codes DynamoDB uses, read by position.
pub(super) mod reason {
    pub(super) const NONE: &str = "None";
    pub(super) const CONDITIONAL_CHECK_FAILED: &str = "ConditionalCheckFailed";
    pub(super) const TRANSACTION_CONFLICT: &str = "TransactionConflict";
    /// Item-level throttling codes: the transaction was not applied and can be retried.
    pub(super) const THROTTLING: &[&str] = &[
        "ThrottlingError",
        "ProvisionedThroughputExceeded",
        "RequestLimitExceeded",
    ];
}

/// The operation, as AWS names it in errors.
pub(super) const TRANSACT_WRITE_ITEMS: &str = "TransactWriteItems";

/// The service error code DynamoDB answers when a `ClientRequestToken` is reused with different
/// parameters within its 10-minute window.
pub(super) const IDEMPOTENT_PARAMETER_MISMATCH: &str = "IdempotentParameterMismatchException";

/// Maps a failed `TransactWriteItems` call to a typed error.
pub(super) fn map_sdk_error(
    err: SdkError<TransactWriteItemsError, HttpResponse>,
    outcomes: &[(ItemKey, ConditionFailure)],
) -> WriteError {
    match err.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => map_cancellation(
            cancelled.cancellation_reasons(),
            outcomes,
            cancelled.message(),
        ),
        Some(TransactWriteItemsError::IdempotentParameterMismatchException(_)) => {
            // Final for this token whatever the status code; named even when the service's
            // answer carried no code.
            let mut failure = SdkFailure::new(TRANSACT_WRITE_ITEMS, err);
            failure.class = ErrorClass::Permanent;
            failure.code = Some(IDEMPOTENT_PARAMETER_MISMATCH.to_owned());
            WriteError::Dynamo(failure)
        }
        _ => WriteError::from_sdk(TRANSACT_WRITE_ITEMS, err),
    }
}

/// Reads cancellation reasons by position. A validation failure wins (the request is wrong and
/// retrying cannot help), then a failed condition (final for this request), then a transaction
/// conflict, then throttling (both retryable).
pub(super) fn map_cancellation(
    reasons: &[CancellationReason],
    outcomes: &[(ItemKey, ConditionFailure)],
    message: Option<&str>,
) -> WriteError {
    let key_at = |i: usize| outcomes.get(i).map(|(key, _)| key.clone());
    let mut validation = None;
    let mut condition = None;
    let mut conflict = None;
    let mut throttled = None;
    for (i, r) in reasons.iter().enumerate() {
        match r.code() {
            None | Some(reason::NONE) => {}
            Some(reason::CONDITIONAL_CHECK_FAILED) => {
                condition.get_or_insert(i);
            }
            Some(reason::TRANSACTION_CONFLICT) => {
                conflict.get_or_insert(i);
            }
            Some(code) if reason::THROTTLING.contains(&code) => {
                throttled.get_or_insert(i);
            }
            Some(code) => {
                validation.get_or_insert((i, format!("{code}: {}", r.message().unwrap_or(""))));
            }
        }
    }
    if let Some((i, message)) = validation {
        return WriteError::Validation {
            key: key_at(i),
            message,
        };
    }
    if let Some(i) = condition {
        return match outcomes.get(i) {
            Some((key, outcome)) => condition_error(key.clone(), outcome),
            None => WriteError::Validation {
                key: None,
                message: format!("condition failed at unknown position {i}"),
            },
        };
    }
    if let Some(i) = conflict {
        return WriteError::TransactionConflict { key: key_at(i) };
    }
    if let Some(i) = throttled {
        return WriteError::Throttled { key: key_at(i) };
    }
    WriteError::Validation {
        key: None,
        message: format!(
            "transaction cancelled without a reason: {}",
            message.unwrap_or("no message")
        ),
    }
}

pub(super) fn condition_error(key: ItemKey, outcome: &ConditionFailure) -> WriteError {
    match outcome {
        ConditionFailure::AlreadyExists => WriteError::AlreadyExists { key },
        ConditionFailure::VersionConflict { expected_version } => WriteError::VersionConflict {
            key,
            expected_version: *expected_version,
        },
        ConditionFailure::NotFound => WriteError::NotFound { key },
        ConditionFailure::Failed => WriteError::ConditionFailed { key },
    }
}

/// The `IdempotentParameterMismatch` answer: the token was used for a different request.
pub(crate) fn is_token_mismatch(err: &WriteError) -> bool {
    matches!(err, WriteError::Dynamo(failure) if failure.code.as_deref() == Some(IDEMPOTENT_PARAMETER_MISMATCH))
}
