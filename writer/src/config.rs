//! Writer configuration: where outbox items go, the EventBridge source of future events, the entry
//! size they must fit, the payload bucket and the largest payload, and the retry bounds. Validated
//! once, when the writer is built.

use outbox_shared::limits::{PUT_EVENTS_ABSOLUTE_MAX_BYTES, PUT_EVENTS_DEFAULT_MAX_BYTES};
use outbox_shared::{ConfigError, OutboxConfig};

use outbox_shared::RetryPolicy;
use outbox_shared::claim_check::check_bucket_name;

/// The largest payload a writer accepts unless configured otherwise (10 MiB): enough for an
/// order with thousands of lines, small enough that one event does not hold a service's memory.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 10 * 1024 * 1024;

/// How the writer writes. Build it with [`WriterConfig::new`] and adjust fields as needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriterConfig {
    /// Table, index, shard count and TTL retention; must match the relays' configuration.
    pub outbox: OutboxConfig,
    /// The EventBridge `Source` the relays will publish with; counted in the entry size.
    pub event_source: String,
    /// Largest EventBridge entry a written event may become; bigger events are rejected before
    /// writing, because the relays could never publish them. Only without a
    /// [`payload_bucket`](Self::payload_bucket): with one, the relays store the payload of an event
    /// too large for their target in S3 when they publish it.
    pub max_event_entry_bytes: usize,
    /// The S3 bucket of the claim check (the template's payload bucket; the relays'
    /// `PAYLOAD_BUCKET`), or `None` to write every payload inline, as events up to
    /// [`max_event_entry_bytes`](Self::max_event_entry_bytes).
    ///
    /// With a bucket, an outbox item that would exceed DynamoDB's 400 KB item limit has its
    /// payload stored first, under `payloads/{event_id}`, with one `PutObject`; the transaction
    /// then writes the item with a `PayloadRef` in place of its `Payload`. Smaller payloads cost
    /// nothing more. The writer needs `s3:PutObject` and `s3:GetObject` on `payloads/*` in the
    /// bucket (an object already under the key is checked before it is referenced).
    ///
    /// An object whose transaction then failed (the order existed, a conflict outlasted the
    /// retries) is an orphan: no item refers to it, so no relay publishes it, and the bucket's
    /// lifecycle rule on `payloads/` expires it.
    pub payload_bucket: Option<String>,
    /// The account that owns the payload bucket (the stack's account): every S3 call of the
    /// writer carries it (S3's `ExpectedBucketOwner`), so a bucket deleted and re-created under
    /// the same name by another account is refused, not written to. `None`: no owner is sent.
    pub expected_bucket_owner: Option<outbox_shared::bucket_owner::ExpectedBucketOwner>,
    /// Largest payload (its JSON text, in bytes) the writer accepts, inline or stored in S3; a
    /// larger one is refused before any call ([`crate::LimitError::PayloadTooLarge`]). Default
    /// [`DEFAULT_MAX_PAYLOAD_BYTES`].
    pub max_payload_bytes: usize,
    /// Retries of an optimistic-concurrency update after a version or transaction conflict.
    pub update_retry: RetryPolicy,
    /// Retries of a whole transaction (a create, a [`crate::OutboxTransaction`]) after a transaction
    /// conflict or throttling (DynamoDB did not apply it, so repeating it is safe).
    pub transaction_retry: RetryPolicy,
    /// The table is a DynamoDB global table (multi-region eventual consistency): each event is
    /// stamped with the writer's region, its DynamoDB client's (`OriginRegion`), and pending under
    /// that region's partitions (`OUTBOX#PENDING#{region}#{shard}`), so only that region's relays
    /// publish it (docs/global-tables.md). Before its first write the writer reads the table once
    /// (`dynamodb:DescribeTable`) and refuses a multi-region strong consistency table
    /// ([`crate::WriteError::StrongConsistencyTable`]). Default `false`: a single-region table.
    pub global_table: bool,
}

impl WriterConfig {
    /// Defaults: entries up to [`PUT_EVENTS_DEFAULT_MAX_BYTES`], no payload bucket, payloads up to
    /// [`DEFAULT_MAX_PAYLOAD_BYTES`], [`RetryPolicy::default`] for both retry bounds.
    pub fn new(outbox: OutboxConfig, event_source: impl Into<String>) -> Self {
        Self {
            outbox,
            event_source: event_source.into(),
            max_event_entry_bytes: PUT_EVENTS_DEFAULT_MAX_BYTES,
            payload_bucket: None,
            expected_bucket_owner: None,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            update_retry: RetryPolicy::default(),
            transaction_retry: RetryPolicy::default(),
            global_table: false,
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
        if let Some(bucket) = &self.payload_bucket {
            if bucket.trim().is_empty() {
                return Err(ConfigError::Empty {
                    setting: "payload bucket",
                });
            }
            check_bucket_name(bucket).map_err(|detail| ConfigError::OutOfRange {
                setting: "payload bucket",
                detail,
            })?;
        }
        if self.max_payload_bytes == 0 {
            return Err(ConfigError::OutOfRange {
                setting: "max payload bytes",
                detail: "must be at least 1, got 0".to_owned(),
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
        let config = WriterConfig::new(OutboxConfig::new("t"), "orders");
        config.validate().unwrap();
        assert_eq!(config.payload_bucket, None);
        assert_eq!(config.max_payload_bytes, 10_485_760);
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

        let mut config = WriterConfig::new(OutboxConfig::new("t"), "orders");
        config.payload_bucket = Some(" ".into());
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "payload bucket must not be empty"
        );

        let mut config = WriterConfig::new(OutboxConfig::new("t"), "orders");
        config.payload_bucket = Some("s3://orders-payloads".into());
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "payload bucket \"s3://orders-payloads\" is not a bucket name: only lowercase letters, \
             digits, dots and hyphens (a bucket's name, not its ARN or an s3:// URI)"
        );
        config.payload_bucket = Some("orders-payloads".into());
        config.validate().unwrap();

        let mut config = WriterConfig::new(OutboxConfig::new("t"), "orders");
        config.max_payload_bytes = 0;
        assert_eq!(
            config.validate().unwrap_err().to_string(),
            "max payload bytes must be at least 1, got 0"
        );
    }
}
