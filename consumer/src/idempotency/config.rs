//! Settings of the idempotency store: the table, how long a claim keeps others out, how long a
//! completed key answers with its response, and what a failure of the business logic does.

use std::time::Duration;

use outbox_shared::ConfigError;

/// Default lock: long enough for a typical consumer, short enough that a crashed holder's key is
/// free again within a minute.
pub const DEFAULT_LOCK_EXPIRY: Duration = Duration::from_secs(60);

/// Default window in which a completed key answers with its stored response: the outbox's own
/// retention, the longest a relay can still re-deliver an event.
pub const DEFAULT_COMPLETED_RETENTION: Duration = outbox_shared::config::DEFAULT_TTL_RETENTION;

/// What happens to a claim when the business logic fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Delete the record: the next delivery runs the logic at once.
    Release,
    /// Keep the record as `FAILED` with the error and a failure count; the key can be claimed
    /// again after `retry_after` (zero: at once). Keeps the payload check and a trace of failures.
    MarkFailed { retry_after: Duration },
}

/// Settings of an [`IdempotencyStore`](super::IdempotencyStore).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyConfig {
    pub table_name: String,
    /// How long a claim keeps others out while the logic runs; a crashed holder's key is free
    /// after it. In a Lambda it is further bounded by the invocation's deadline.
    pub lock_expiry: Duration,
    /// How long a completed key answers with its stored response (and TTL keeps records).
    pub completed_retention: Duration,
    pub on_failure: FailurePolicy,
    /// Completed keys remembered in memory (0: no cache).
    pub cache_capacity: usize,
}

impl IdempotencyConfig {
    /// Defaults: 60 s lock, 7 days retention, release on failure, no cache.
    pub fn new(table_name: impl Into<String>) -> Self {
        Self {
            table_name: table_name.into(),
            lock_expiry: DEFAULT_LOCK_EXPIRY,
            completed_retention: DEFAULT_COMPLETED_RETENTION,
            on_failure: FailurePolicy::Release,
            cache_capacity: 0,
        }
    }

    /// # Errors
    /// [`ConfigError`] naming the setting that is empty or out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.table_name.trim().is_empty() {
            return Err(ConfigError::Empty {
                setting: "idempotency table name",
            });
        }
        if self.lock_expiry < Duration::from_millis(1) {
            return Err(ConfigError::OutOfRange {
                setting: "lock expiry",
                detail: "must be at least 1 ms".into(),
            });
        }
        if self.completed_retention < self.lock_expiry {
            return Err(ConfigError::OutOfRange {
                setting: "completed retention",
                detail: format!(
                    "{:?} is shorter than the lock expiry {:?}",
                    self.completed_retention, self.lock_expiry
                ),
            });
        }
        for (setting, duration) in [
            ("lock expiry", self.lock_expiry),
            ("completed retention", self.completed_retention),
        ] {
            if chrono::Duration::from_std(duration).is_err() {
                return Err(ConfigError::OutOfRange {
                    setting,
                    detail: format!("{duration:?} is too long"),
                });
            }
        }
        Ok(())
    }
}
