//! Order restored where the target does not keep it (the classic bus, SNS and SQS standard): an
//! aggregate's event is applied only after its predecessor by `metadata.sequence` was.
//!
//! [`SequenceStore`] keeps one record per aggregate on the consumer's table (the idempotency
//! table by default, [`crate::tables::sequence`]): the last sequence applied, and since when an
//! early event has been waiting for its predecessor. [`SequenceStore::check`] reads it
//! (one consistent `GetItem`) and decides with [`rule::decide`]; an early event marks the wait
//! (one conditional `UpdateItem`) and is reported failed, so the source delivers it again later
//! (a delay, not a loss). [`SequenceStore::advance`] moves the record to an applied sequence
//! with a conditional `UpdateItem` (`last_sequence` still the one read), so two deliveries
//! racing on one aggregate move it once. A gap older than [`SequencingConfig::gap_bound`] is
//! applied with a `warn!` and the counter [`SEQUENCE_GAPS`], never waited on for ever.

pub mod rule;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use outbox_shared::ConfigError;
use tracing::{debug, warn};

use crate::clock::{Clock, SystemClock};
use crate::error::StoreError;
use crate::tables::sequence::{KEY_PREFIX, attr};
pub use rule::{AggregateSequence, Decision};

/// Counter of gaps applied past their bound (each an aggregate's events that never arrived):
/// an operator looks for the missing events (the relays' dead letters, the source's DLQ).
pub const SEQUENCE_GAPS: &str = "SequenceGaps";

/// Default wait for a missing predecessor: longer than the relays' own delays (the poller's grace
/// period, a held aggregate's release), short enough that an aggregate is not stuck for long.
pub const DEFAULT_GAP_BOUND: Duration = Duration::from_secs(15 * 60);

/// Settings of a [`SequenceStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequencingConfig {
    /// The consumer's table (partition key `pk`, a string): the idempotency table will do.
    pub table_name: String,
    /// How long an early event waits for its predecessor before it is applied past the gap.
    pub gap_bound: Duration,
}

impl SequencingConfig {
    /// Defaults: a gap waited on for [`DEFAULT_GAP_BOUND`].
    pub fn new(table_name: impl Into<String>) -> Self {
        Self {
            table_name: table_name.into(),
            gap_bound: DEFAULT_GAP_BOUND,
        }
    }

    /// # Errors
    /// [`ConfigError`] naming the setting that is empty or out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.table_name.trim().is_empty() {
            return Err(ConfigError::Empty {
                setting: "sequence table name",
            });
        }
        if chrono::Duration::from_std(self.gap_bound).is_err() {
            return Err(ConfigError::OutOfRange {
                setting: "gap bound",
                detail: format!("{:?} is too long", self.gap_bound),
            });
        }
        Ok(())
    }
}

/// What [`SequenceStore::check`] found for one event: pass it to [`SequenceStore::advance`]
/// once the event is applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// The aggregate's record key.
    pub key: String,
    /// The event's sequence.
    pub sequence: u64,
    /// The aggregate's record as read.
    pub read: AggregateSequence,
    pub decision: Decision,
}

/// The per-aggregate record of applied sequences. Cheap to clone.
#[derive(Clone)]
pub struct SequenceStore<C = SystemClock> {
    client: aws_sdk_dynamodb::Client,
    config: Arc<SequencingConfig>,
    clock: C,
}

impl<C> fmt::Debug for SequenceStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SequenceStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl SequenceStore<SystemClock> {
    /// # Errors
    /// [`ConfigError`] when the configuration is out of range.
    pub fn new(
        client: aws_sdk_dynamodb::Client,
        config: SequencingConfig,
    ) -> Result<Self, ConfigError> {
        Self::with_clock(client, config, SystemClock)
    }
}

impl<C: Clock> SequenceStore<C> {
    /// A store reading time from `clock` (tests inject a [`crate::ManualClock`]).
    ///
    /// # Errors
    /// [`ConfigError`] when the configuration is out of range.
    pub fn with_clock(
        client: aws_sdk_dynamodb::Client,
        config: SequencingConfig,
        clock: C,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            client,
            config: Arc::new(config),
            clock,
        })
    }

    pub fn config(&self) -> &SequencingConfig {
        &self.config
    }

    /// The record key of an aggregate.
    pub fn key(aggregate_type: Option<&str>, aggregate_id: &str) -> String {
        format!(
            "{KEY_PREFIX}{}#{aggregate_id}",
            aggregate_type.unwrap_or_default()
        )
    }

    /// Whether the event numbered `sequence` of the aggregate keyed `key` applies now. An early
    /// one marks the aggregate's wait (best effort: a failed condition means the record moved,
    /// and the next delivery reads it again).
    ///
    /// # Errors
    /// [`StoreError`] when the read or the mark fails, or the record is not one this crate wrote.
    pub async fn check(&self, key: &str, sequence: u64) -> Result<Check, StoreError> {
        let read = self.read(key).await?;
        let now = self.clock.now();
        let decision = rule::decide(&read, sequence, now, self.config.gap_bound);
        if decision == Decision::Early {
            self.mark_waiting(key, &read, sequence, now).await?;
        }
        debug!(
            key,
            sequence,
            last = read.last,
            ?decision,
            "sequence checked"
        );
        Ok(Check {
            key: key.to_owned(),
            sequence,
            read,
            decision,
        })
    }

    /// Records `check`'s event as the aggregate's last applied, if the record is still as
    /// `check` read it. A gap applied is logged (`warn!`) and counted ([`SEQUENCE_GAPS`]).
    /// Answers whether this call moved it (`false`: another delivery of the event did).
    ///
    /// # Errors
    /// [`StoreError`] when the update fails.
    pub async fn advance(&self, check: &Check) -> Result<bool, StoreError> {
        let table = &self.config.table_name;
        let sent = self
            .client
            .update_item()
            .table_name(table)
            .key(attr::PK, AttributeValue::S(check.key.clone()))
            .update_expression("SET #last = :sequence, #applied = :now REMOVE #since, #lowest")
            .condition_expression("attribute_not_exists(#pk) OR #last = :read")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#last", attr::LAST_SEQUENCE)
            .expression_attribute_names("#applied", attr::APPLIED_AT)
            .expression_attribute_names("#since", attr::GAP_SINCE)
            .expression_attribute_names("#lowest", attr::LOWEST_WAITING)
            .expression_attribute_values(":sequence", number(check.sequence))
            .expression_attribute_values(":read", number(check.read.last))
            .expression_attribute_values(":now", millis(self.clock.now()))
            .send()
            .await;
        match sent {
            Ok(_) => {
                if let Decision::ApplyAfterGap { missing, waited } = check.decision {
                    warn!(key = %check.key, sequence = check.sequence, last = check.read.last,
                        missing, waited_secs = waited.as_secs(),
                        "applied past a gap in the aggregate's sequence: its missing events never \
                         arrived within the bound");
                    metrics::counter!(SEQUENCE_GAPS).increment(1);
                }
                Ok(true)
            }
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                debug!(key = %check.key, sequence = check.sequence,
                    "the aggregate's sequence moved meanwhile: another delivery applied it");
                Ok(false)
            }
            Err(e) => Err(StoreError::from_sdk("UpdateItem", table, e)),
        }
    }

    async fn read(&self, key: &str) -> Result<AggregateSequence, StoreError> {
        let table = &self.config.table_name;
        let output = self
            .client
            .get_item()
            .table_name(table)
            .key(attr::PK, AttributeValue::S(key.to_owned()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", table, e))?;
        output
            .item()
            .map_or(Ok(AggregateSequence::default()), |item| self.parse(item))
    }

    fn parse(
        &self,
        item: &HashMap<String, AttributeValue>,
    ) -> Result<AggregateSequence, StoreError> {
        let number = |name: &str| -> Result<Option<i64>, StoreError> {
            item.get(name)
                .map(|v| {
                    v.as_n().ok().and_then(|n| n.parse().ok()).ok_or_else(|| {
                        StoreError::malformed(
                            "GetItem",
                            &self.config.table_name,
                            format!("{name} is not a number"),
                        )
                    })
                })
                .transpose()
        };
        let unsigned = |value: Option<i64>| value.and_then(|v| u64::try_from(v).ok());
        Ok(AggregateSequence {
            last: unsigned(number(attr::LAST_SEQUENCE)?).unwrap_or_default(),
            gap_since: number(attr::GAP_SINCE)?.and_then(DateTime::from_timestamp_millis),
            lowest_waiting: unsigned(number(attr::LOWEST_WAITING)?),
        })
    }

    /// Starts the aggregate's wait (if none is on) and keeps the lowest sequence waiting.
    async fn mark_waiting(
        &self,
        key: &str,
        read: &AggregateSequence,
        sequence: u64,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let table = &self.config.table_name;
        let sent = self
            .client
            .update_item()
            .table_name(table)
            .key(attr::PK, AttributeValue::S(key.to_owned()))
            .update_expression(
                "SET #since = if_not_exists(#since, :now), #lowest = :sequence, \
                 #last = if_not_exists(#last, :zero)",
            )
            .condition_expression(
                "(attribute_not_exists(#pk) OR #last = :read) AND \
                 (attribute_not_exists(#lowest) OR #lowest > :sequence)",
            )
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#last", attr::LAST_SEQUENCE)
            .expression_attribute_names("#since", attr::GAP_SINCE)
            .expression_attribute_names("#lowest", attr::LOWEST_WAITING)
            .expression_attribute_values(":now", millis(now))
            .expression_attribute_values(":sequence", number(sequence))
            .expression_attribute_values(":read", number(read.last))
            .expression_attribute_values(":zero", number(0))
            .send()
            .await;
        match sent {
            Ok(_) => Ok(()),
            Err(e)
                if e.as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                Ok(())
            }
            Err(e) => Err(StoreError::from_sdk("UpdateItem", table, e)),
        }
    }
}

fn number(value: u64) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn millis(at: DateTime<Utc>) -> AttributeValue {
    AttributeValue::N(at.timestamp_millis().to_string())
}
