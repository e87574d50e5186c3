//! The port every target's call answers: the entries of some events sent in one call, and the
//! answer read entry by entry ([`TargetCall`], [`CallAnswer`], [`EntryResult`]); a call's SDK
//! result read as an answer with the target's error codes ([`answer_of`]); and the retry
//! classifier every publish client has ([`TimeoutsToThePublisher`]).

use std::fmt;

use futures::future::BoxFuture;
use outbox_shared::OutboundEvent;
use outbox_shared::error::{SdkFailure, ServiceCodes};

use super::TargetKind;
use crate::CallTasks;
use crate::config::PublisherConfig;

/// One target's call: the entries of some events sent in one call, and the answer read.
/// Object-safe, so the relays choose the target from their configuration at start.
pub trait TargetCall: Send + Sync + fmt::Debug {
    /// The kind of target this call publishes to.
    fn kind(&self) -> TargetKind;

    /// Sends one call of the events at `pending` (in that order) as `config` says, run as
    /// `call_tasks` says.
    fn put<'a>(
        &'a self,
        config: &'a PublisherConfig,
        events: &[&OutboundEvent],
        pending: &[usize],
        call_tasks: CallTasks,
    ) -> BoxFuture<'a, CallAnswer>;
}

/// What a target answered to one call.
#[derive(Debug)]
pub enum CallAnswer {
    /// The call was answered: one result per entry, in entry order (the answer's own order).
    Answered(Vec<EntryResult>),
    /// The call failed as a whole (after the SDK's retries); `timed_out` when it got no answer
    /// in time.
    Failed {
        failure: SdkFailure,
        timed_out: bool,
    },
}

/// One entry's result in an answered call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryResult {
    /// Accepted.
    Published,
    /// Accepted before (the Custom Event Bus's `DEDUPLICATED`): stored once, a success.
    Deduplicated,
    /// Refused with the target's `code`: retried when the code is a retryable one, else poison
    /// or a failure as the code says ([`super::TargetSpec::is_poison`]).
    Refused { code: String, message: String },
    /// Refused for the target's own reason, whatever the code (SNS's and SQS's `SenderFault`
    /// false): retried.
    Retry { code: String, message: String },
}

impl EntryResult {
    /// What a target answered for one entry, read the same way on every target that answers
    /// with an `ErrorCode`: a code is a refusal (its message beside it), no code an acceptance,
    /// `deduplicated` when the target says it had accepted the entry before.
    pub fn answered(
        error_code: Option<&str>,
        error_message: Option<&str>,
        deduplicated: bool,
    ) -> Self {
        match error_code {
            Some(code) => Self::Refused {
                code: code.to_owned(),
                message: error_message.unwrap_or_default().to_owned(),
            },
            None if deduplicated => Self::Deduplicated,
            None => Self::Published,
        }
    }
}

/// A call's SDK result as a [`CallAnswer`]: answered entries read by `read`, a failure classified
/// with the target's own `codes` beside the shared ones (and whether it timed out).
pub(crate) fn answer_of<O, E>(
    operation: &'static str,
    codes: &ServiceCodes,
    result: Result<
        O,
        aws_smithy_runtime_api::client::result::SdkError<
            E,
            aws_smithy_runtime_api::client::orchestrator::HttpResponse,
        >,
    >,
    read: impl FnOnce(O) -> Vec<EntryResult>,
) -> CallAnswer
where
    E: aws_smithy_types::error::metadata::ProvideErrorMetadata
        + std::error::Error
        + Send
        + Sync
        + 'static,
{
    match result {
        Ok(output) => CallAnswer::Answered(read(output)),
        Err(err) => CallAnswer::Failed {
            timed_out: outbox_shared::error::is_timeout(&err),
            failure: SdkFailure::of_service(operation, err, codes),
        },
    }
}

/// Keeps the SDK from retrying a publish call that timed out: the publisher sees the timeout at
/// once and, the target being congested, lowers its calls in flight before it sends the entries
/// again (with its own backoff). Retried by the SDK, the call went straight back into the
/// target's queue, behind the calls it had just waited for, and the publisher learnt of the
/// timeout only at the operation timeout (10 s, not 4). Other failures keep the SDK's retries.
#[derive(Debug)]
pub(crate) struct TimeoutsToThePublisher;

impl aws_smithy_runtime_api::client::retries::classifiers::ClassifyRetry
    for TimeoutsToThePublisher
{
    fn classify_retry(
        &self,
        ctx: &aws_smithy_runtime_api::client::interceptors::context::InterceptorContext,
    ) -> aws_smithy_runtime_api::client::retries::classifiers::RetryAction {
        use aws_smithy_runtime_api::client::retries::classifiers::RetryAction;
        let timed_out = ctx.output_or_error().is_some_and(|answer| {
            answer.is_err_and(|err| {
                err.is_timeout_error() || err.as_connector_error().is_some_and(|c| c.is_timeout())
            })
        });
        if timed_out {
            RetryAction::RetryForbidden
        } else {
            RetryAction::NoActionIndicated
        }
    }

    fn name(&self) -> &'static str {
        "TimeoutsToThePublisher"
    }
}
