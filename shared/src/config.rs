//! Typed configuration shared by the writer and the relays, validated once at start-up.

use std::time::Duration;

use crate::region::Region;
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
    /// On a global table, the region the writer writes in: each new item is stamped with it
    /// (`OriginRegion`) and indexed under that region's partitions
    /// (`OUTBOX#PENDING#{region}#{shard}`), so only that region's relays publish it. `None` (the
    /// default): a single-region table, unregioned partitions. The writer sets it from its
    /// client's region when configured for a global table (`WriterConfig::global_table`).
    pub origin_region: Option<Region>,
}

impl OutboxConfig {
    /// The defaults (index `GSI1`, 16 shards, 7 days retention) for `table_name`.
    pub fn new(table_name: impl Into<String>) -> Self {
        Self {
            table_name: table_name.into(),
            index_name: DEFAULT_INDEX_NAME.to_owned(),
            shard_count: ShardCount::default(),
            ttl_retention: DEFAULT_TTL_RETENTION,
            origin_region: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        OutboxConfig::new("t").validate().unwrap();
    }
}
