//! Typed configuration shared by the writer and the relays, validated once at start-up.

use std::time::Duration;

use crate::limits::{
    PUT_EVENTS_ABSOLUTE_MAX_BYTES, PUT_EVENTS_DEFAULT_MAX_BYTES, PUT_EVENTS_MAX_ENTRIES,
};
use crate::schema::DEFAULT_INDEX_NAME;
use crate::shard::ShardCount;

/// Default retention before DynamoDB TTL removes an outbox item: 7 days.
pub const DEFAULT_TTL_RETENTION: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Where outbox items live and how they are indexed. Writer and poller must agree on all of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxConfig {
    pub table_name: String,
    /// The sparse, sharded index of pending events (default `GSI1`).
    pub index_name: String,
    pub shard_count: ShardCount,
    /// How long an item lives after it is written before TTL cleans it up.
    pub ttl_retention: Duration,
}

impl OutboxConfig {
    /// The defaults (index `GSI1`, 16 shards, 7 days retention) for `table_name`.
    pub fn new(table_name: impl Into<String>) -> Self {
        Self {
            table_name: table_name.into(),
            index_name: DEFAULT_INDEX_NAME.to_owned(),
            shard_count: ShardCount::default(),
            ttl_retention: DEFAULT_TTL_RETENTION,
        }
    }

    /// # Errors
    /// [`ConfigError`] naming the setting that is empty or out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        non_empty("table name", &self.table_name)?;
        non_empty("index name", &self.index_name)?;
        if self.ttl_retention.is_zero() {
            return Err(ConfigError::OutOfRange {
                setting: "TTL retention",
                detail: "must be longer than zero".into(),
            });
        }
        Ok(())
    }
}

/// How events are published to EventBridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherConfig {
    pub event_bus_name: String,
    /// EventBridge `Source` of every event (one per service).
    pub source: String,
    /// Entries per `PutEvents` call, 1..=10.
    pub max_entries_per_call: usize,
    /// Size budget of one `PutEvents` request, as EventBridge counts entry sizes.
    pub max_request_bytes: usize,
    /// Size limit of one entry; larger events are rejected as poison before any call.
    pub max_entry_bytes: usize,
    /// `PutEvents` calls in flight at once.
    pub max_concurrency: usize,
    /// Attempts per entry (first try included) for retryable failures.
    pub max_attempts: usize,
    /// First retry delay; doubles per attempt, with jitter, up to `max_retry_delay`.
    pub base_retry_delay: Duration,
    pub max_retry_delay: Duration,
}

impl PublisherConfig {
    /// Defaults: 10 entries and 256 KiB per call, 16 calls in flight, 5 attempts from 50 ms.
    pub fn new(event_bus_name: impl Into<String>, source: impl Into<String>) -> Self {
        Self {
            event_bus_name: event_bus_name.into(),
            source: source.into(),
            max_entries_per_call: PUT_EVENTS_MAX_ENTRIES,
            max_request_bytes: PUT_EVENTS_DEFAULT_MAX_BYTES,
            max_entry_bytes: PUT_EVENTS_DEFAULT_MAX_BYTES,
            max_concurrency: 16,
            max_attempts: 5,
            base_retry_delay: Duration::from_millis(50),
            max_retry_delay: Duration::from_secs(2),
        }
    }

    /// # Errors
    /// [`ConfigError`] naming the setting that is empty or out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        non_empty("event bus name", &self.event_bus_name)?;
        non_empty("event source", &self.source)?;
        in_range(
            "max entries per call",
            self.max_entries_per_call,
            1,
            PUT_EVENTS_MAX_ENTRIES,
        )?;
        in_range(
            "max entry bytes",
            self.max_entry_bytes,
            1,
            PUT_EVENTS_ABSOLUTE_MAX_BYTES,
        )?;
        in_range(
            "max request bytes",
            self.max_request_bytes,
            self.max_entry_bytes,
            PUT_EVENTS_ABSOLUTE_MAX_BYTES,
        )?;
        in_range("max concurrency", self.max_concurrency, 1, 1024)?;
        in_range("max attempts", self.max_attempts, 1, 100)?;
        if self.base_retry_delay > self.max_retry_delay {
            return Err(ConfigError::OutOfRange {
                setting: "base retry delay",
                detail: format!(
                    "{:?} is longer than the max retry delay {:?}",
                    self.base_retry_delay, self.max_retry_delay
                ),
            });
        }
        Ok(())
    }
}

/// A configuration setting that is missing or out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("{setting} must not be empty")]
    Empty { setting: &'static str },
    #[error("{setting} {detail}")]
    OutOfRange {
        setting: &'static str,
        detail: String,
    },
}

fn non_empty(setting: &'static str, value: &str) -> Result<(), ConfigError> {
    if value.trim().is_empty() {
        return Err(ConfigError::Empty { setting });
    }
    Ok(())
}

fn in_range(
    setting: &'static str,
    value: usize,
    min: usize,
    max: usize,
) -> Result<(), ConfigError> {
    if !(min..=max).contains(&value) {
        return Err(ConfigError::OutOfRange {
            setting,
            detail: format!("must be between {min} and {max}, got {value}"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        OutboxConfig::new("t").validate().unwrap();
        PublisherConfig::new("bus", "orders").validate().unwrap();
    }

    #[test]
    fn errors_name_the_setting() {
        let mut p = PublisherConfig::new("bus", "orders");
        p.max_entries_per_call = 11;
        let err = p.validate().unwrap_err().to_string();
        assert_eq!(err, "max entries per call must be between 1 and 10, got 11");
        let err = PublisherConfig::new("", "orders").validate().unwrap_err();
        assert_eq!(err.to_string(), "event bus name must not be empty");
        let mut p = PublisherConfig::new("bus", "orders");
        p.max_request_bytes = 1000;
        assert!(
            p.validate()
                .unwrap_err()
                .to_string()
                .starts_with("max request bytes")
        );
    }
}
