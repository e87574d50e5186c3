//! What one call did to its entries ([`Attempt`]): an answer read entry by entry
//! ([`read_results`]), or a call that failed as a whole ([`call_failed`]), each code read with the
//! target's own ([`TargetSpec`]: poison, throttling, retryable).

use outbox_shared::error::{ErrorClass, SdkFailure};

use super::PublishOutcome;
use crate::target::{EntryResult, TargetSpec};

/// What one call did to its entries.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Attempt {
    /// Entries that ended: published, or refused for good.
    pub(crate) done: Vec<(usize, PublishOutcome)>,
    /// Entries to send again (a retryable code), in their call order.
    pub(crate) retry: Vec<usize>,
    /// The code and message of the last retryable refusal (empty when `retry` is).
    pub(crate) retry_error: (String, String),
    /// Entries of a call refused as a whole for what one entry can cause, to send again in
    /// halves (empty otherwise).
    pub(crate) split: Vec<usize>,
    /// The code the call of `split` was refused with (empty when `split` is).
    pub(crate) split_code: String,
    /// Entries the target accepted (deduplicated ones included).
    pub(crate) accepted: usize,
    /// Entries the target had accepted before (`DEDUPLICATED`), a part of `accepted`.
    pub(crate) deduplicated: usize,
    /// Entries refused for the quota (a throttling code).
    pub(crate) throttled: usize,
    /// The call got no answer in time (the SDK's timeout): the target is congested.
    pub(crate) timed_out: bool,
}

/// Reads an answer entry by entry: every target answers HTTP 200 even when entries failed,
/// so each result is checked, and matched to its entry by position (`pending[i]` is the event of
/// result `i`). An answer with another number of results than entries can't be matched: nothing
/// in it is called published, and every entry is sent again.
pub(crate) fn read_results(
    spec: &TargetSpec,
    pending: &[usize],
    results: &[EntryResult],
) -> Attempt {
    let mut attempt = Attempt::default();
    if results.len() != pending.len() {
        attempt.retry = pending.to_vec();
        attempt.retry_error = (
            "ResponseMismatch".to_owned(),
            format!(
                "the target answered {} results for {} entries",
                results.len(),
                pending.len()
            ),
        );
        return attempt;
    }
    for (&index, result) in pending.iter().zip(results) {
        let (code, message) = match result {
            EntryResult::Published | EntryResult::Deduplicated => {
                attempt.done.push((index, PublishOutcome::Published));
                attempt.accepted += 1;
                attempt.deduplicated += usize::from(*result == EntryResult::Deduplicated);
                continue;
            }
            EntryResult::Refused { code, message } => (code, message),
            EntryResult::Retry { code, message } => {
                attempt.throttled += usize::from(spec.codes.is_throttling(code));
                attempt.retry.push(index);
                attempt.retry_error = (code.clone(), message.clone());
                continue;
            }
        };
        attempt.throttled += usize::from(spec.codes.is_throttling(code));
        match spec.codes.classify(code) {
            ErrorClass::Retryable => {
                attempt.retry.push(index);
                attempt.retry_error = (code.clone(), message.clone());
            }
            ErrorClass::Permanent => attempt.done.push((
                index,
                permanent_outcome(spec, code.clone(), message.clone()),
            )),
        }
    }
    attempt
}

/// A call that failed as a whole (after the SDK's retries): every entry is sent
/// again when the failure is retryable; a call of several entries refused with a code one entry
/// can cause (a field over a model constraint fails them all), or with one of the call's size, is
/// split ([`TargetSpec::splits`]); otherwise every entry fails, or, alone, is poison when the code
/// says so.
pub(crate) fn call_failed(spec: &TargetSpec, pending: &[usize], failure: &SdkFailure) -> Attempt {
    let code = failure
        .code
        .clone()
        .unwrap_or_else(|| "RequestFailed".into());
    let message = failure.to_string();
    let throttled = if spec.codes.is_throttling(&code) {
        pending.len()
    } else {
        0
    };
    match failure.class {
        ErrorClass::Retryable => Attempt {
            retry: pending.to_vec(),
            retry_error: (code, message),
            throttled,
            ..Attempt::default()
        },
        ErrorClass::Permanent if pending.len() > 1 && spec.splits(&code) => {
            tracing::info!(code = %code, entries = pending.len(), "publish call rejected as a whole: sending it in halves to find the entry at fault");
            Attempt {
                split: pending.to_vec(),
                split_code: code,
                ..Attempt::default()
            }
        }
        ErrorClass::Permanent => {
            tracing::warn!(code = %code, entries = pending.len(), "publish call rejected");
            Attempt {
                done: pending
                    .iter()
                    .map(|&i| (i, permanent_outcome(spec, code.clone(), message.clone())))
                    .collect(),
                throttled,
                ..Attempt::default()
            }
        }
    }
}

/// The outcome of an entry refused with the non-retryable `code`: poison when the event itself
/// can never be accepted ([`TargetSpec::is_poison`]), its message naming what refused it (the
/// bus, topic, queue or data stream); a failure (it stays pending) otherwise.
pub(crate) fn permanent_outcome(
    spec: &TargetSpec,
    code: String,
    message: String,
) -> PublishOutcome {
    if spec.is_poison(&code) {
        PublishOutcome::Rejected {
            message: format!("the {} refused it: {message}", spec.resource),
            code,
        }
    } else {
        PublishOutcome::Failed { code, message }
    }
}
