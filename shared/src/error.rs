//! The one place where AWS SDK errors are classified as retryable or not.
//!
//! Timeouts, dispatch (I/O) failures, malformed responses, throttling codes, transient service
//! codes and HTTP 5xx retry; request construction failures and every other service error do not.

use aws_smithy_runtime_api::client::orchestrator::HttpResponse;
use aws_smithy_runtime_api::client::result::SdkError;
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// Whether repeating the same request can succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Transient: throttling, a timeout, a 5xx. Retry with backoff.
    Retryable,
    /// The request itself is wrong, or the outcome is final (a failed condition). Do not retry.
    Permanent,
}

impl ErrorClass {
    pub fn is_retryable(self) -> bool {
        self == Self::Retryable
    }
}

/// Error codes AWS services use for throttling.
pub const THROTTLING_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
];

/// Error codes AWS services use for transient server-side failures.
pub const TRANSIENT_CODES: &[&str] = &[
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
    "InternalFailure",
    "InternalException",
    "InternalServerError",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    // DynamoDB: another transaction touched the same item; retrying the whole transaction works.
    "TransactionConflictException",
];

/// Classifies an error code (service-level or a `PutEvents` entry's `ErrorCode`).
pub fn classify_code(code: &str) -> ErrorClass {
    if THROTTLING_CODES.contains(&code) || TRANSIENT_CODES.contains(&code) {
        ErrorClass::Retryable
    } else {
        ErrorClass::Permanent
    }
}

/// Whether a code means throttling (as opposed to another transient failure).
pub fn is_throttling_code(code: &str) -> bool {
    THROTTLING_CODES.contains(&code)
}

/// Classifies any SDK error.
pub fn classify_sdk_error<E>(err: &SdkError<E, HttpResponse>) -> ErrorClass
where
    E: ProvideErrorMetadata,
{
    match err {
        SdkError::ConstructionFailure(_) => ErrorClass::Permanent,
        SdkError::TimeoutError(_) | SdkError::ResponseError(_) => ErrorClass::Retryable,
        SdkError::DispatchFailure(failure) => {
            if failure.is_user() {
                ErrorClass::Permanent
            } else {
                ErrorClass::Retryable
            }
        }
        SdkError::ServiceError(ctx) => {
            let code_class = ctx.err().code().map(classify_code);
            if code_class == Some(ErrorClass::Retryable) || ctx.raw().status().is_server_error() {
                ErrorClass::Retryable
            } else {
                ErrorClass::Permanent
            }
        }
        _ => ErrorClass::Retryable,
    }
}

/// The service error code of an SDK error, if the service answered with one.
pub fn error_code<E, R>(err: &SdkError<E, R>) -> Option<&str>
where
    E: ProvideErrorMetadata,
{
    match err {
        SdkError::ServiceError(ctx) => ctx.err().code(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_smithy_runtime_api::client::result::ServiceError;
    use aws_smithy_runtime_api::http::StatusCode;
    use aws_smithy_types::body::SdkBody;
    use aws_smithy_types::error::ErrorMetadata;

    fn service_error(code: &str, status: u16) -> SdkError<ErrorMetadata, HttpResponse> {
        let err = ErrorMetadata::builder().code(code).build();
        let raw = HttpResponse::new(StatusCode::try_from(status).unwrap(), SdkBody::empty());
        SdkError::ServiceError(ServiceError::builder().source(err).raw(raw).build())
    }

    #[test]
    fn throttling_and_transient_codes_retry() {
        for code in [
            "ThrottlingException",
            "ProvisionedThroughputExceededException",
            "InternalFailure",
        ] {
            assert_eq!(
                classify_sdk_error(&service_error(code, 400)),
                ErrorClass::Retryable,
                "{code}"
            );
        }
    }

    #[test]
    fn server_errors_retry_whatever_the_code() {
        assert_eq!(
            classify_sdk_error(&service_error("Whatever", 503)),
            ErrorClass::Retryable
        );
    }

    #[test]
    fn client_errors_do_not_retry() {
        for code in [
            "ValidationException",
            "ConditionalCheckFailedException",
            "AccessDeniedException",
        ] {
            assert_eq!(
                classify_sdk_error(&service_error(code, 400)),
                ErrorClass::Permanent,
                "{code}"
            );
        }
    }

    #[test]
    fn timeouts_retry_and_construction_failures_do_not() {
        let timeout: SdkError<ErrorMetadata, HttpResponse> = SdkError::timeout_error("slow");
        assert_eq!(classify_sdk_error(&timeout), ErrorClass::Retryable);
        let construction: SdkError<ErrorMetadata, HttpResponse> =
            SdkError::construction_failure("bad input");
        assert_eq!(classify_sdk_error(&construction), ErrorClass::Permanent);
    }

    #[test]
    fn error_code_reads_the_service_code() {
        assert_eq!(
            error_code(&service_error("SlowDown", 503)),
            Some("SlowDown")
        );
    }
}
