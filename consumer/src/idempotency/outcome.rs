//! What a call of the idempotency store answers: the response (run now or stored before), or why
//! the key was refused or its logic could not be recorded, and whether retrying can help.

use std::fmt;

use chrono::{DateTime, Utc};

use crate::error::StoreError;

/// What the caller gets when the key was not refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome<R> {
    /// The logic ran now and its response is stored.
    Executed(R),
    /// The key had completed before: the stored response, the logic not run.
    AlreadyCompleted(R),
}

impl<R> Outcome<R> {
    pub fn response(&self) -> &R {
        match self {
            Self::Executed(r) | Self::AlreadyCompleted(r) => r,
        }
    }

    pub fn into_response(self) -> R {
        match self {
            Self::Executed(r) | Self::AlreadyCompleted(r) => r,
        }
    }

    /// Whether this call ran the logic.
    pub fn executed(&self) -> bool {
        matches!(self, Self::Executed(_))
    }
}

/// Why a key was refused or its logic could not be recorded.
#[derive(Debug, thiserror::Error)]
pub enum IdempotencyError<E: fmt::Display + fmt::Debug> {
    /// Another caller holds the key. Retryable: after `expires_at` it has either completed or
    /// its lock has expired.
    #[error("key {key:?} is in progress elsewhere until {expires_at}")]
    InProgress {
        key: String,
        expires_at: DateTime<Utc>,
    },
    /// The key's logic failed recently and
    /// [`FailurePolicy::MarkFailed`](super::FailurePolicy::MarkFailed) holds it until `retry_at`.
    #[error("key {key:?} failed recently; it can be retried after {retry_at}")]
    RetryLater {
        key: String,
        retry_at: DateTime<Utc>,
    },
    /// The key was used before with a different payload: a caller bug, never retryable.
    #[error("key {key:?} was already used with a different payload")]
    PayloadMismatch { key: String },
    /// The business logic failed; the claim was released or marked failed per the policy, so a
    /// retry runs it again.
    #[error("business logic for key {key:?} failed: {error}")]
    Business { key: String, error: E },
    /// The logic ran, but our lock had expired and another caller took the key over before we
    /// could record the response. The effect may have happened twice; retrying returns the other
    /// caller's response.
    #[error("key {key:?}: the claim expired and was taken over before the response was stored")]
    ClaimLost { key: String },
    #[error("key {key:?} {reason}")]
    InvalidKey { key: String, reason: String },
    /// The payload or response cannot be (de)serialized as JSON.
    #[error("key {key:?}: {what} is not serializable: {reason}")]
    Serialization {
        key: String,
        what: &'static str,
        reason: String,
    },
    /// The logic ran but its response cannot be stored (the item limit is 400 KB). The claim is
    /// left to expire rather than released, so the effect is not repeated at once.
    #[error("key {key:?}: the response is {bytes} bytes, more than the {max} a record can hold")]
    ResponseTooLarge {
        key: String,
        bytes: usize,
        max: usize,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl<E: fmt::Display + fmt::Debug> IdempotencyError<E> {
    /// Whether delivering the same event again can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::InProgress { .. }
            | Self::RetryLater { .. }
            | Self::Business { .. }
            | Self::ClaimLost { .. } => true,
            Self::Store(e) => e.is_retryable(),
            Self::PayloadMismatch { .. }
            | Self::InvalidKey { .. }
            | Self::Serialization { .. }
            | Self::ResponseTooLarge { .. } => false,
        }
    }
}
