//! The one place where AWS SDK errors are classified: retryable or not, and, for a failure no
//! retry can fix until a person changes something, which [`Misconfiguration`] it is.
//!
//! Timeouts, dispatch (I/O) failures, malformed responses, throttling codes, transient service
//! codes and HTTP 5xx retry; request construction failures and every other service error do not.
//! The two questions are apart: a connection refused retries (an endpoint restarting), and is
//! also what a process finds at start-up when its endpoint is wrong; the relays' start-up probes
//! (`relay_runtime::probe`) stop on any misconfiguration, the loops keep to the class.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

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

impl fmt::Display for ErrorClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Retryable => "retryable",
            Self::Permanent => "permanent",
        })
    }
}

/// What a person must change for a call to succeed: the failures no retry of the call can fix.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Misconfiguration {
    /// The resource the call names does not exist: a table, an index, a bus, a queue, a bucket
    /// ([`NOT_FOUND_CODES`]).
    Missing,
    /// The caller's identity may not make the call ([`ACCESS_DENIED_CODES`]).
    AccessDenied,
    /// The service does not take the caller's credentials: an unknown key, a bad signature, an
    /// expired token ([`CREDENTIALS_REFUSED_CODES`]).
    CredentialsRefused,
    /// The SDK found no credentials to sign with.
    NoCredentials,
    /// The endpoint's host name does not resolve: a region AWS does not have, or a mistyped
    /// endpoint.
    UnknownHost,
    /// Nothing accepts connections at the endpoint.
    ConnectionRefused,
    /// The service refuses the call with a code no retry changes and that names none of the
    /// above: an SNS topic of another region answers `InvalidParameter`.
    Refused,
}

impl Misconfiguration {
    /// What is wrong, in words that follow the resource's name ("table t does not exist").
    pub fn words(self) -> &'static str {
        match self {
            Self::Missing => "does not exist",
            Self::AccessDenied => "may not be used with these credentials",
            Self::CredentialsRefused => "is out of reach: the service refuses these credentials",
            Self::NoCredentials => "is out of reach: no AWS credentials were found",
            Self::UnknownHost => "is out of reach: the endpoint's host name does not resolve",
            Self::ConnectionRefused => {
                "is out of reach: nothing accepts connections at the endpoint"
            }
            Self::Refused => "is refused by its service",
        }
    }
}

/// Codes AWS services answer for a resource that does not exist (DynamoDB, EventBridge and the
/// Custom Event Bus, Kinesis, SQS's JSON and query protocols, S3's `NotFound` and `NoSuchBucket`,
/// IAM). A publish target's own codes are in its room ([`ServiceCodes`]).
pub const NOT_FOUND_CODES: &[&str] = &[
    "ResourceNotFoundException",
    "NotFound",
    "QueueDoesNotExist",
    "AWS.SimpleQueueService.NonExistentQueue",
    "NoSuchBucket",
    "NoSuchEntity",
];

/// Codes AWS services answer when a policy does not allow the call. A publish target's own codes
/// are in its room ([`ServiceCodes`]).
pub const ACCESS_DENIED_CODES: &[&str] = &["AccessDeniedException", "AccessDenied"];

/// Codes AWS services answer when they do not take the request's credentials.
pub const CREDENTIALS_REFUSED_CODES: &[&str] = &[
    "UnrecognizedClientException",
    "InvalidAccessKeyId",
    "InvalidSignatureException",
    "SignatureDoesNotMatch",
    "ExpiredTokenException",
    "ExpiredToken",
];

/// One failed AWS SDK call, classified: the one shape every crate uses for it.
///
/// The SDK error stays whole as the [`source`](std::error::Error::source) (shared, so the failure
/// can be cloned into several outcomes); `Display` names the operation, the class, the service's
/// error code and the SDK's own description.
#[derive(Debug, Clone)]
pub struct SdkFailure {
    /// The API operation, as AWS names it (`UpdateItem`, `PutEvents`, `SendMessage`).
    pub operation: &'static str,
    pub class: ErrorClass,
    /// The service's error code, when the service answered with one.
    pub code: Option<String>,
    /// What a person must change, when no retry can fix it ([`misconfiguration`]).
    pub misconfiguration: Option<Misconfiguration>,
    /// The SDK's description of the failure with its causes.
    pub message: String,
    /// The SDK error itself.
    pub source: Arc<dyn StdError + Send + Sync + 'static>,
}

impl fmt::Display for SdkFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed ({}", self.operation, self.class)?;
        if let Some(code) = &self.code {
            write!(f, ", {code}")?;
        }
        write!(f, "): {}", self.message)
    }
}

/// Written by hand: `thiserror`'s `#[source]` on an `Arc` would give the `Arc` itself as the
/// source (it implements `Error` too), which no caller can downcast to the SDK error.
impl StdError for SdkFailure {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        Some(&*self.source)
    }
}

impl SdkFailure {
    /// Classifies `err`, a failure of `operation`, and keeps it as the source.
    pub fn new<E>(operation: &'static str, err: SdkError<E, HttpResponse>) -> Self
    where
        E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
    {
        Self {
            operation,
            class: classify_sdk_error(&err),
            code: error_code(&err).map(str::to_owned),
            misconfiguration: misconfiguration(&err),
            message: describe(&err),
            source: Arc::new(err),
        }
    }

    /// Classifies `err`, a failure of `operation` on a service whose own codes are `codes`.
    pub fn of_service<E>(
        operation: &'static str,
        err: SdkError<E, HttpResponse>,
        codes: &ServiceCodes,
    ) -> Self
    where
        E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
    {
        let mut failure = Self::new(operation, err);
        if let Some(code) = failure.code.as_deref() {
            if codes.throttling.contains(&code) {
                failure.class = ErrorClass::Retryable;
            }
            failure.misconfiguration = failure
                .misconfiguration
                .or_else(|| codes.misconfiguration(code));
        }
        failure
    }

    /// A call that answered without doing all it was asked (`UnprocessedKeys` left after
    /// retrying them): retryable, with no service error code.
    pub fn incomplete(operation: &'static str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            operation,
            class: ErrorClass::Retryable,
            code: None,
            misconfiguration: None,
            source: Arc::new(Incomplete(message.clone())),
            message,
        }
    }

    /// One part of a call that answered per part, failed with the service's `code` (a statement
    /// of `BatchExecuteStatement`): classified by its code, with no SDK error behind it.
    pub fn part(operation: &'static str, code: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            operation,
            class: classify_code(code),
            code: Some(code.to_owned()),
            misconfiguration: misconfiguration_of_code(code),
            source: Arc::new(PartFailed {
                code: code.to_owned(),
                message: message.clone(),
            }),
            message,
        }
    }

    pub fn is_retryable(&self) -> bool {
        self.class.is_retryable()
    }

    /// Whether the service answered with a throttling code.
    pub fn is_throttling(&self) -> bool {
        self.code.as_deref().is_some_and(is_throttling_code)
    }
}

/// The codes one service answers beyond those every AWS service shares ([`THROTTLING_CODES`],
/// [`NOT_FOUND_CODES`], [`ACCESS_DENIED_CODES`]): a publish target's room holds its own (SNS's
/// `Throttled`, a KMS key's codes behind an encrypted stream), so a crate that never calls the
/// service never lists them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServiceCodes {
    /// Codes of a call or an entry refused for the service's quota (or its KMS key's): retried,
    /// slower.
    pub throttling: &'static [&'static str],
    /// Codes of a resource that does not exist.
    pub not_found: &'static [&'static str],
    /// Codes of a call a policy does not allow (the service's own, or its KMS key's).
    pub access_denied: &'static [&'static str],
}

impl ServiceCodes {
    /// A service with no codes of its own.
    pub const NONE: Self = Self {
        throttling: &[],
        not_found: &[],
        access_denied: &[],
    };

    /// Classifies `code` as [`classify_code`] does, the service's throttling codes retryable.
    pub fn classify(&self, code: &str) -> ErrorClass {
        if self.throttling.contains(&code) {
            ErrorClass::Retryable
        } else {
            classify_code(code)
        }
    }

    /// Whether `code` means throttling, the service's own codes included.
    pub fn is_throttling(&self, code: &str) -> bool {
        self.throttling.contains(&code) || is_throttling_code(code)
    }

    /// The misconfiguration `code` means, the service's own codes included.
    pub fn misconfiguration(&self, code: &str) -> Option<Misconfiguration> {
        if self.not_found.contains(&code) {
            Some(Misconfiguration::Missing)
        } else if self.access_denied.contains(&code) {
            Some(Misconfiguration::AccessDenied)
        } else {
            misconfiguration_of_code(code)
        }
    }
}

/// Failures are equal when they describe the same failure of the same operation (the source is
/// not compared: SDK errors are not comparable).
impl PartialEq for SdkFailure {
    fn eq(&self, other: &Self) -> bool {
        self.operation == other.operation
            && self.class == other.class
            && self.code == other.code
            && self.message == other.message
    }
}

impl Eq for SdkFailure {}

/// Error codes AWS services use for throttling. A publish target's own codes are in its room
/// ([`ServiceCodes`]).
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
    // A statement of DynamoDB's BatchExecuteStatement names its error without "Exception".
    "ThrottlingError",
    "ProvisionedThroughputExceeded",
];

/// DynamoDB: another transaction touched the same item; retrying the whole transaction works.
pub const TRANSACTION_CONFLICT_CODE: &str = "TransactionConflictException";

/// Error codes AWS services use for transient server-side failures.
pub const TRANSIENT_CODES: &[&str] = &[
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
    "InternalFailure",
    "InternalException",
    "InternalServerError",
    "ServiceUnavailable",
    TRANSACTION_CONFLICT_CODE,
    // A statement of DynamoDB's BatchExecuteStatement names its error without "Exception".
    "TransactionConflict",
    // S3 (HTTP 409): a conflicting operation on the key during a conditional `PutObject`
    // (`If-None-Match`); S3 documents that the upload is to be retried.
    CONDITIONAL_REQUEST_CONFLICT_CODE,
];

/// S3's code of a conditional write that met a conflicting operation on its key (HTTP 409):
/// retried, as `PutObject`'s documentation says.
pub const CONDITIONAL_REQUEST_CONFLICT_CODE: &str = "ConditionalRequestConflict";

/// An error and its causes, outermost first, joined by `": "` (a cause whose text is already
/// there is left out: many errors repeat their source's text in their own): for logs and messages an operator reads, where the SDK's own
/// `DisplayErrorContext` appends the whole `Debug` form of the error too.
pub fn describe(err: &dyn StdError) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(current) = cause {
        let part = current.to_string();
        if !part.is_empty() && !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = current.source();
    }
    text
}

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

/// What a person must change for `err`'s call to succeed, when no retry can fix it: a service
/// code of a missing resource, a denied call or refused credentials; a connection refused, or a
/// host name that does not resolve (read from the dispatch failure's causes: the HTTP client
/// says `dns error`, and a refused connection is an [`std::io::ErrorKind::ConnectionRefused`]).
/// The SDK's own "no credentials" is not read here: a process resolves its credentials before
/// its first call (`relay_runtime::probe::credentials`), which names what it looked for.
pub fn misconfiguration<E, R>(err: &SdkError<E, R>) -> Option<Misconfiguration>
where
    E: ProvideErrorMetadata,
{
    match err {
        SdkError::ServiceError(ctx) => ctx.err().code().and_then(misconfiguration_of_code),
        SdkError::DispatchFailure(failure) if !failure.is_timeout() => failure
            .as_connector_error()
            .and_then(|connector| unreachable_endpoint(connector)),
        _ => None,
    }
}

/// The misconfiguration a service's error `code` means, if any.
pub fn misconfiguration_of_code(code: &str) -> Option<Misconfiguration> {
    if NOT_FOUND_CODES.contains(&code) {
        Some(Misconfiguration::Missing)
    } else if ACCESS_DENIED_CODES.contains(&code) {
        Some(Misconfiguration::AccessDenied)
    } else if CREDENTIALS_REFUSED_CODES.contains(&code) {
        Some(Misconfiguration::CredentialsRefused)
    } else {
        None
    }
}

/// A refused connection or an unresolvable host among `err`'s causes.
fn unreachable_endpoint(err: &(dyn StdError + 'static)) -> Option<Misconfiguration> {
    let mut cause = Some(err);
    while let Some(current) = cause {
        if let Some(io) = current.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            return Some(Misconfiguration::ConnectionRefused);
        }
        // hyper-util's connector names a failed lookup `dns error` (its `ConnectError`), and the
        // resolver's own error says it could not look the name up.
        let text = current.to_string();
        if text.starts_with("dns error") || text.contains("failed to lookup address") {
            return Some(Misconfiguration::UnknownHost);
        }
        cause = current.source();
    }
    None
}

/// Whether `err` is a call that got no answer in time: the SDK's attempt or operation timeout
/// (`TimeoutError`), or a connection that could not be opened in time. Retryable, and like a
/// throttle a sign that the service, or the network to it, has more than it can take.
pub fn is_timeout<E, R>(err: &SdkError<E, R>) -> bool {
    match err {
        SdkError::TimeoutError(_) => true,
        SdkError::DispatchFailure(failure) => failure.is_timeout(),
        _ => false,
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

/// The source of an [`SdkFailure::incomplete`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Incomplete(String);

/// A part of a call that failed ([`SdkFailure::part`]).
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
struct PartFailed {
    code: String,
    message: String,
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
    fn a_failure_describes_its_causes_without_the_debug_form() {
        let err = ErrorMetadata::builder()
            .code("ResourceNotFoundException")
            .message("Cannot do operations on a non-existent table")
            .build();
        let raw = HttpResponse::new(StatusCode::try_from(400).unwrap(), SdkBody::empty());
        let sdk: SdkError<ErrorMetadata, HttpResponse> =
            SdkError::ServiceError(ServiceError::builder().source(err).raw(raw).build());

        let failure = SdkFailure::new("Query", sdk);

        assert_eq!(
            failure.to_string(),
            "Query failed (permanent, ResourceNotFoundException): service error: \
             Error { code: \"ResourceNotFoundException\", message: \"Cannot do operations on a \
             non-existent table\" }"
        );
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
    fn a_conditional_put_s3_answers_with_a_conflict_is_retried() {
        // S3 answers a conditional PutObject that met a conflicting operation on its key with
        // HTTP 409 ConditionalRequestConflict, and documents that the upload is to be retried.
        let failure = SdkFailure::new(
            "PutObject",
            service_error("ConditionalRequestConflict", 409),
        );
        assert_eq!(failure.class, ErrorClass::Retryable);
        assert_eq!(failure.misconfiguration, None);
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
        assert!(is_timeout(&timeout));
        let construction: SdkError<ErrorMetadata, HttpResponse> =
            SdkError::construction_failure("bad input");
        assert_eq!(classify_sdk_error(&construction), ErrorClass::Permanent);
        assert!(!is_timeout(&construction));
    }

    #[test]
    fn a_call_with_no_answer_in_time_is_timed_out_and_a_refusal_is_not() {
        use aws_smithy_runtime_api::client::result::ConnectorError;
        let connect: SdkError<ErrorMetadata, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::timeout("connect timed out".into()));
        assert!(is_timeout(&connect));
        assert!(!is_timeout(&service_error("ThrottlingException", 400)));
    }

    #[test]
    fn sdk_failure_keeps_the_sdk_error_as_its_source() {
        let failure = SdkFailure::new("UpdateItem", service_error("ThrottlingException", 400));
        assert_eq!(failure.class, ErrorClass::Retryable);
        assert!(failure.is_throttling());
        assert_eq!(failure.code.as_deref(), Some("ThrottlingException"));
        let text = failure.to_string();
        assert!(
            text.starts_with("UpdateItem failed (retryable, ThrottlingException): "),
            "{text}"
        );
        let source = std::error::Error::source(&failure).expect("the SDK error is the source");
        assert!(
            source
                .downcast_ref::<SdkError<ErrorMetadata, HttpResponse>>()
                .is_some()
        );
    }

    #[test]
    fn a_missing_resource_a_denied_call_or_a_refused_connection_is_a_misconfiguration() {
        use aws_smithy_runtime_api::client::result::ConnectorError;
        assert_eq!(
            misconfiguration(&service_error("ResourceNotFoundException", 400)),
            Some(Misconfiguration::Missing)
        );
        assert_eq!(
            misconfiguration(&service_error(
                "AWS.SimpleQueueService.NonExistentQueue",
                400
            )),
            Some(Misconfiguration::Missing)
        );
        assert_eq!(
            misconfiguration(&service_error("AccessDeniedException", 400)),
            Some(Misconfiguration::AccessDenied)
        );
        assert_eq!(
            misconfiguration(&service_error("UnrecognizedClientException", 400)),
            Some(Misconfiguration::CredentialsRefused)
        );
        assert_eq!(
            misconfiguration(&service_error("ThrottlingException", 400)),
            None
        );
        let refused: SdkError<ErrorMetadata, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::io(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionRefused,
            ))));
        assert_eq!(
            misconfiguration(&refused),
            Some(Misconfiguration::ConnectionRefused)
        );
        // Still retryable in a loop: an endpoint restarting refuses connections for a while.
        assert_eq!(classify_sdk_error(&refused), ErrorClass::Retryable);
        let timeout: SdkError<ErrorMetadata, HttpResponse> =
            SdkError::dispatch_failure(ConnectorError::timeout("connect timed out".into()));
        assert_eq!(misconfiguration(&timeout), None);
    }

    #[test]
    fn error_code_reads_the_service_code() {
        assert_eq!(
            error_code(&service_error("SlowDown", 503)),
            Some("SlowDown")
        );
    }
}
