//! DynamoDB failures of the helpers: a failed call keeps the classified
//! [`SdkFailure`] (and through it the SDK error) as its source.

use std::time::Duration;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use outbox_shared::SdkFailure;

/// A DynamoDB call of a helper failed, or answered with something this crate did not write (not
/// a failed condition: those are outcomes).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The call failed; [`SdkFailure::class`] says whether repeating it can succeed.
    #[error("table {table}: {source}")]
    Call {
        table: String,
        #[source]
        source: SdkFailure,
    },
    /// A record that does not have the shape this crate writes: not retryable, an operator looks.
    #[error("DynamoDB {operation} on table {table}: malformed record: {detail}")]
    Malformed {
        operation: &'static str,
        table: String,
        detail: String,
    },
    /// A new table did not become `ACTIVE` in time. Retryable.
    #[error("table {table} is not ACTIVE after {waited:?} (status {status})")]
    NotActive {
        table: String,
        waited: Duration,
        status: String,
    },
}

impl StoreError {
    /// Whether repeating the call can succeed (throttling, timeouts, 5xx, a table still being
    /// created).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Call { source, .. } => source.is_retryable(),
            Self::Malformed { .. } => false,
            Self::NotActive { .. } => true,
        }
    }

    /// The table the failed call was made on.
    pub fn table(&self) -> &str {
        match self {
            Self::Call { table, .. }
            | Self::Malformed { table, .. }
            | Self::NotActive { table, .. } => table,
        }
    }

    /// A failed call of `operation` on `table`, classified (for a consumer's own calls too).
    pub fn from_sdk<E>(operation: &'static str, table: &str, err: SdkError<E, HttpResponse>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        Self::Call {
            table: table.to_owned(),
            source: SdkFailure::new(operation, err),
        }
    }

    pub(crate) fn malformed(operation: &'static str, table: &str, detail: String) -> Self {
        Self::Malformed {
            operation,
            table: table.to_owned(),
            detail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::error::ErrorMetadata;

    #[test]
    fn a_failed_call_names_table_and_operation_and_keeps_the_sdk_error() {
        let err = StoreError::from_sdk(
            "GetItem",
            "idem",
            SdkError::<ErrorMetadata, HttpResponse>::timeout_error("slow"),
        );
        assert!(err.is_retryable());
        assert_eq!(err.table(), "idem");
        assert!(
            err.to_string()
                .starts_with("table idem: GetItem failed (retryable"),
            "{err}"
        );
        let failure = std::error::Error::source(&err).expect("the classified failure");
        let sdk = failure.source().expect("the SDK error");
        assert!(
            sdk.downcast_ref::<SdkError<ErrorMetadata, HttpResponse>>()
                .is_some()
        );
    }
}
