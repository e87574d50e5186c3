//! What the stream handler records, under the names both relays share
//! (`relay_runtime::metrics`).
//!
//! The Lambda installs the CloudWatch Embedded Metric Format recorder and flushes after every
//! invocation; elsewhere (the local runner, tests) no recorder is installed and these are no-ops.

use relay_runtime::metrics::{
    AGGREGATES_HELD, DEAD_LETTERED, IGNORED, LEFT_TO_HOLD, NOT_MARKED, PUBLISH_FAILED, PUBLISHED,
    RELAY_LAG, count, observe,
};

use crate::handler::report::BatchCounts;

pub(crate) fn record_batch(counts: &BatchCounts, max_lag_ms: Option<i64>) {
    count(PUBLISHED, counts.published);
    count(IGNORED, counts.ignored);
    count(DEAD_LETTERED, counts.dead_lettered);
    count(PUBLISH_FAILED, counts.failed);
    count(LEFT_TO_HOLD, counts.left_to_hold);
    count(NOT_MARKED, counts.not_marked);
    if let Some(lag) = max_lag_ms {
        // Precision loss is irrelevant for a latency in milliseconds.
        #[allow(clippy::cast_precision_loss)]
        observe(RELAY_LAG, lag.max(0) as f64);
    }
}

pub(crate) fn aggregates_held(aggregates: u64) {
    count(AGGREGATES_HELD, aggregates);
}
