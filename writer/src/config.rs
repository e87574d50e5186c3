//! Writer configuration: where outbox items go, the EventBridge source of future events, the entry
//! size they must fit, and the retry bounds. Validated once, when the writer is built.

use outbox_shared::limits::{PUT_EVENTS_ABSOLUTE_MAX_BYTES, PUT_EVENTS_DEFAULT_MAX_BYTES};
use outbox_shared::{ConfigError, OutboxConfig};

use outbox_shared::RetryPolicy;

/// How the writer writes. Build it with [`WriterConfig::new`] and adjust fields as needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterConfig {
    /// Table, index, shard count and TTL retention; must match the relays' configuration.
    pub outbox: OutboxConfig,
    /// The EventBridge `Source` the relays will publish with; counted in the entry size.
    pub event_source: String,
    /// Largest EventBridge entry a written event may become; bigger events are rejected before
    /// writing, because the relays could never publish them.
    pub max_event_entry_bytes: usize,
    /// Retries of an optimistic-concurrency update after a version or transaction conflict.
    pub update_retry: RetryPolicy,
    /// Retries of a whole transaction (a create, a [`crate::OutboxTransaction`]) after a transaction
    /// conflict or throttling (DynamoDB did not apply it, so repeating it is safe).
    pub transaction_retry: RetryPolicy,
}

impl WriterConfig {
    /// Defaults: entries up to [`PUT_EVENTS_DEFAULT_MAX_BYTES`], [`RetryPolicy::default`] for both
    /// retry bounds.
    pub fn new(outbox: OutboxConfig, event_source: impl Into<String>) -> Self {
        Self {
            outbox,
            event_source: event_source.into(),
            max_event_entry_bytes: PUT_EVENTS_DEFAULT_MAX_BYTES,
            update_retry: RetryPolicy::default(),
            transaction_retry: RetryPolicy::default(),
        }
    }

    /// # Errors
    /// [`ConfigError`] naming the setting that is empty or out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.outbox.validate()?;
        if self.event_source.trim().is_empty() {
            return Err(ConfigError::Empty {
                setting: "event source",
            });
        }
        if !(1..=PUT_EVENTS_ABSOLUTE_MAX_BYTES).contains(&self.max_event_entry_bytes) {
            return Err(ConfigError::OutOfRange {
                setting: "max event entry bytes",
                detail: format!(
                    "must be between 1 and {PUT_EVENTS_ABSOLUTE_MAX_BYTES}, got {}",
                    self.max_event_entry_bytes
                ),
            });
        }
        self.update_retry.validate("update retry")?;
        self.transaction_retry.validate("transaction retry")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn defaults_are_valid() {
        WriterConfig::new(OutboxConfig::new("t"), "orders")
            .validate()
            .unwrap();
    }

    #[test]
    fn errors_name_the_setting() {
        let err = WriterConfig::new(OutboxConfig::new("t"), " ")
            .validate()
            .unwrap_err();
        assert_eq!(err.to_string(), "event source must not be empty");

        let mut config = WriterConfig::new(OutboxConfig::new("t"), "orders");
        config.max_event_entry_bytes = 0;
        assert!(
            config
                .validate()
                .unwrap_err()
                .to_string()
                .starts_with("max event entry bytes")
        );

        let mut config = WriterConfig::new(OutboxConfig::new("t"), "orders");
        config.update_retry.base_delay = Duration::from_secs(5);
        config.update_retry.max_delay = Duration::from_secs(1);
        assert!(
            config
                .validate()
                .unwrap_err()
                .to_string()
                .starts_with("update retry base delay")
        );

        let err = WriterConfig::new(OutboxConfig::new(""), "orders")
            .validate()
            .unwrap_err();
        assert_eq!(err.to_string(), "table name must not be empty");
    }
}
