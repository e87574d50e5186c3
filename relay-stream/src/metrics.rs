//! Metric names and the recording helpers the handler calls.
//!
//! The Lambda installs the CloudWatch Embedded Metric Format recorder and flushes after every
//! invocation; elsewhere (the local runner, tests) no recorder is installed and these are no-ops.

use crate::handler::BatchCounts;

/// Events published.
pub const PUBLISHED: &str = "published";
/// Entries sent again after a retryable failure.
pub const RETRIED: &str = "retried";
/// Poison records sent to the dead-letter queue.
pub const DEAD_LETTERED: &str = "dead_lettered";
/// Records reported for re-delivery.
pub const FAILED: &str = "failed";
/// Records that were not outbox inserts.
pub const IGNORED: &str = "ignored";
/// Status updates that failed after the event left (published or dead-lettered).
pub const MARK_FAILED: &str = "mark_failed";
/// Publish time minus the oldest published record's `ApproximateCreationDateTime`, per batch.
pub const LAG: &str = "lag";

pub(crate) fn record_batch(counts: &BatchCounts, max_lag_ms: Option<i64>) {
    metrics::counter!(PUBLISHED).increment(counts.published);
    metrics::counter!(IGNORED).increment(counts.ignored);
    metrics::counter!(DEAD_LETTERED).increment(counts.dead_lettered);
    metrics::counter!(FAILED).increment(counts.failed);
    if let Some(lag) = max_lag_ms {
        // Precision loss is irrelevant for a latency in milliseconds.
        #[allow(clippy::cast_precision_loss)]
        metrics::histogram!(LAG).record(lag.max(0) as f64);
    }
}

pub(crate) fn mark_failed() {
    metrics::counter!(MARK_FAILED).increment(1);
}

/// Records `retried` entries (the publisher counts them; the Lambda adds the per-invocation delta).
pub fn record_retried(retried: u64) {
    metrics::counter!(RETRIED).increment(retried);
}
