//! DynamoDB failures of the helpers, classified once with `outbox_shared::classify_sdk_error`.

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use outbox_shared::classify_sdk_error;

/// A DynamoDB call of a helper failed (not a failed condition: those are outcomes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("DynamoDB {operation} on table {table} failed: {message}")]
pub struct StoreError {
    pub operation: &'static str,
    pub table: String,
    pub message: String,
    /// Whether repeating the call can succeed (throttling, timeouts, 5xx).
    pub retryable: bool,
}

impl StoreError {
    pub(crate) fn from_sdk<E>(
        operation: &'static str,
        table: &str,
        err: &SdkError<E, HttpResponse>,
    ) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        Self {
            operation,
            table: table.to_owned(),
            message: DisplayErrorContext(err).to_string(),
            retryable: classify_sdk_error(err).is_retryable(),
        }
    }

    /// A record that does not have the shape this crate writes: not retryable, an operator looks.
    pub(crate) fn malformed(operation: &'static str, table: &str, detail: String) -> Self {
        Self {
            operation,
            table: table.to_owned(),
            message: format!("malformed record: {detail}"),
            retryable: false,
        }
    }
}
