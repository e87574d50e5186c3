//! Metrics the poller records, through the `metrics` facade.
//!
//! The binary installs a CloudWatch Embedded Metric Format recorder ([`install_emf`]); without a
//! recorder (library use, tests) recording is a no-op.

use std::time::Duration;

use chrono::{DateTime, Utc};
use metrics::Unit;
use outbox_shared::time::parse_timestamp;

use crate::poller::CycleStats;

/// Events published and flipped by this poller.
pub const PUBLISHED: &str = "Published";
/// Events published, whose conditional flip found another relay had already flipped them.
pub const CONDITIONAL_FLIP_MISSES: &str = "ConditionalFlipMisses";
/// Poison events sent to the dead-letter queue.
pub const DEAD_LETTERED: &str = "DeadLettered";
/// Events not published after every retry (they stay pending).
pub const PUBLISH_FAILED: &str = "PublishFailed";
/// Events pending and older than the grace period at the last step (the configured shards).
pub const BACKLOG: &str = "Backlog";
/// Age of the oldest pending event seen at the last step.
pub const OLDEST_PENDING_AGE: &str = "OldestPendingAgeSeconds";

/// CloudWatch namespace of the poller's metrics.
pub const NAMESPACE: &str = "OutboxRelay";

pub(crate) fn published(n: u64) {
    if n > 0 {
        metrics::counter!(PUBLISHED).increment(n);
    }
}

pub(crate) fn flip_misses(n: u64) {
    if n > 0 {
        metrics::counter!(CONDITIONAL_FLIP_MISSES).increment(n);
    }
}

pub(crate) fn dead_lettered(n: u64) {
    metrics::counter!(DEAD_LETTERED).increment(n);
}

pub(crate) fn publish_failed(n: u64) {
    metrics::counter!(PUBLISH_FAILED).increment(n);
}

/// Backlog and oldest age from a finished step (no extra queries: the step's first page of each
/// shard holds that shard's oldest event).
pub(crate) fn cycle(stats: &CycleStats, now: DateTime<Utc>) {
    #[allow(clippy::cast_precision_loss)] // a backlog beyond 2^52 events is not a concern
    metrics::gauge!(BACKLOG).set(stats.taken as f64);
    metrics::gauge!(OLDEST_PENDING_AGE).set(oldest_age(stats.oldest_created_at.as_deref(), now));
}

/// Seconds since `created_at`, 0 when there is none (or it does not parse).
pub fn oldest_age(created_at: Option<&str>, now: DateTime<Utc>) -> f64 {
    created_at
        .and_then(|t| parse_timestamp(t).ok())
        .map_or(0.0, |t| {
            (now - t).to_std().unwrap_or(Duration::ZERO).as_secs_f64()
        })
}

/// Installs the CloudWatch EMF recorder, flushing every `interval` to stderr (stdout carries the
/// commands' results). CloudWatch Logs extracts EMF documents from either stream.
///
/// # Errors
/// When a global recorder is already installed.
pub fn install_emf(
    interval: Duration,
) -> Result<&'static metrics_cloudwatch_embedded::Collector, metrics_cloudwatch_embedded::Error> {
    let collector = metrics_cloudwatch_embedded::Builder::new()
        .cloudwatch_namespace(NAMESPACE)
        .with_dimension("Service", "relay-poller")
        // An idle poller must still report its zero backlog: the oldest-pending alarm treats
        // missing data as "the poller is down".
        .emit_zeros(true)
        .with_auto_flush_writer(interval, std::io::stderr)
        .init()?;
    metrics::describe_counter!(PUBLISHED, Unit::Count, "events published and flipped");
    metrics::describe_counter!(
        CONDITIONAL_FLIP_MISSES,
        Unit::Count,
        "published events another relay had already flipped"
    );
    metrics::describe_counter!(DEAD_LETTERED, Unit::Count, "poison events dead-lettered");
    metrics::describe_counter!(
        PUBLISH_FAILED,
        Unit::Count,
        "events left pending after retries"
    );
    metrics::describe_gauge!(
        BACKLOG,
        Unit::Count,
        "pending events older than the grace period"
    );
    metrics::describe_gauge!(
        OLDEST_PENDING_AGE,
        Unit::Seconds,
        "age of the oldest pending event"
    );
    Ok(collector)
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn oldest_age_is_seconds_since_created_at() {
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 10, 1, 0).unwrap();
        assert_eq!(oldest_age(Some("2026-11-22T10:00:00.000Z"), now), 60.0);
        assert_eq!(oldest_age(None, now), 0.0);
        assert_eq!(oldest_age(Some("garbage"), now), 0.0);
        assert_eq!(oldest_age(Some("2026-11-22T11:00:00Z"), now), 0.0);
    }
}
