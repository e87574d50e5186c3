//! What the stream handler records, under the names both relays share
//! (`relay_runtime::metrics`).
//!
//! These take plain values and import nothing of the handler, which calls them.
//!
//! The Lambda installs the CloudWatch Embedded Metric Format recorder and flushes after every
//! invocation; elsewhere (the local runner, tests) no recorder is installed and these are no-ops.

use relay_runtime::Tally;
use relay_runtime::metrics::{AGGREGATES_HELD, RELAY_LAG, count, observe, relayed};

/// What a batch's events came to (the runtime's one recording for both relays), and its relay lag.
pub(crate) fn record_batch(tally: &Tally, max_lag_ms: Option<i64>) {
    relayed(tally);
    if let Some(lag) = max_lag_ms {
        // Precision loss is irrelevant for a latency in milliseconds.
        #[allow(clippy::cast_precision_loss)]
        observe(RELAY_LAG, lag.max(0) as f64);
    }
}

pub(crate) fn aggregates_held(aggregates: u64) {
    count(AGGREGATES_HELD, aggregates);
}
