//! The consumer's configuration, from flags or the Lambda's environment.

use std::time::Duration;

use outbox_consumer::{FailurePolicy, IdempotencyConfig, OccConfig};
use outbox_shared::ConfigError;

use crate::stock;

/// The example consumer's configuration, from flags or the Lambda's environment.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "example-consumer",
    about = "Reserves stock for OrderCreated events, once per event"
)]
pub struct ExampleArgs {
    /// The idempotency table.
    #[arg(long, env = "IDEMPOTENCY_TABLE_NAME")]
    pub idempotency_table: String,
    /// The stock table.
    #[arg(long, env = "STOCK_TABLE_NAME")]
    pub stock_table: String,
    /// The payload bucket (the stack's `PayloadBucketName`): the only bucket an event's `dataref`
    /// may name (under `payloads/`); a reference to another object is refused, not read.
    #[arg(long, env = "PAYLOAD_BUCKET")]
    pub payload_bucket: String,
    /// How long a claim keeps duplicate deliveries out (further bounded by the invocation deadline).
    #[arg(long, env = "IDEMPOTENCY_LOCK_EXPIRY", default_value = "60s", value_parser = humantime::parse_duration)]
    pub lock_expiry: Duration,
    /// How long a completed event answers duplicates with its stored response.
    #[arg(long, env = "IDEMPOTENCY_RETENTION", default_value = "7days", value_parser = humantime::parse_duration)]
    pub retention: Duration,
    /// Completed event ids remembered in memory across warm invocations (0: off).
    #[arg(long, env = "IDEMPOTENCY_CACHE_CAPACITY", default_value_t = 1024)]
    pub cache_capacity: usize,
    /// Retries of a stock update that lost a race with another order.
    #[arg(long, env = "STOCK_MAX_RETRIES", default_value_t = 10)]
    pub stock_max_retries: u32,
}

impl ExampleArgs {
    /// The validated configurations.
    ///
    /// # Errors
    /// [`ConfigError`] naming the setting that is out of range.
    pub fn configs(&self) -> Result<(IdempotencyConfig, OccConfig), ConfigError> {
        let idempotency = IdempotencyConfig {
            lock_expiry: self.lock_expiry,
            completed_retention: self.retention,
            on_failure: FailurePolicy::Release,
            cache_capacity: self.cache_capacity,
            ..IdempotencyConfig::new(&self.idempotency_table)
        };
        idempotency.validate()?;
        let mut occ = OccConfig::new(&self.stock_table, stock::attr::VERSION);
        occ.retry.max_retries = self.stock_max_retries;
        occ.validate()?;
        Ok((idempotency, occ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn args_come_from_flags_and_bad_values_name_the_flag() {
        let args = ExampleArgs::try_parse_from([
            "example-consumer",
            "--idempotency-table",
            "idem",
            "--stock-table",
            "stock",
            "--payload-bucket",
            "payloads",
            "--lock-expiry",
            "30s",
        ])
        .unwrap();
        assert_eq!(args.payload_bucket, "payloads");
        let (idempotency, occ) = args.configs().unwrap();
        assert_eq!(idempotency.lock_expiry, Duration::from_secs(30));
        assert_eq!(occ.version_attribute, stock::attr::VERSION);
        let err = ExampleArgs::try_parse_from([
            "example-consumer",
            "--idempotency-table",
            "idem",
            "--stock-table",
            "stock",
            "--payload-bucket",
            "payloads",
            "--lock-expiry",
            "soon",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("--lock-expiry"), "{err}");
    }
}
