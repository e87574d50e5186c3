//! `run`: the always-on loop. Passes back to back while they make progress, then a doubling
//! pause (up to the configured maximum) while the index is idle or stalled, until cancelled.

use std::time::Duration;

use chrono::Utc;
use relay_runtime::{DeadLetterSink, HoldStore, Publisher, StatusStore};
use tokio_util::sync::CancellationToken;

use super::stats::PassOutcome;
use super::{MIN_IDLE_BACKOFF, Poller, cutoff};
use crate::assignment::ShardAssignment;
use crate::index::PendingIndex;
use crate::metrics;

impl<I, P, S, D, H> Poller<I, P, S, D, H>
where
    I: PendingIndex,
    P: Publisher,
    S: StatusStore,
    D: DeadLetterSink,
    H: HoldStore,
{
    /// Polls until `cancel` fires: passes back to back while there is work, pausing with a
    /// doubling backoff (up to the configured maximum) while the index is idle or stalled.
    pub async fn run(&self, grace: Duration, cancel: CancellationToken) {
        self.run_on(&self.static_shards(), grace, cancel).await;
    }

    /// [`Self::run`] over the shards `assignment` gives each pass (the leases held).
    pub async fn run_on<A: ShardAssignment>(
        &self,
        assignment: &A,
        grace: Duration,
        cancel: CancellationToken,
    ) {
        let max_pause = self.settings.idle_backoff_max;
        let mut pause = MIN_IDLE_BACKOFF.min(max_pause);
        while !cancel.is_cancelled() {
            let now = Utc::now();
            let stats = self.pass_on(assignment, cutoff(now, grace), &cancel).await;
            self.release_holds().await;
            metrics::pass(&stats, now);
            let outcome = stats.outcome();
            tracing::debug!(
                ?outcome,
                taken = stats.taken,
                published = stats.published,
                read_errors = stats.read_errors,
                "pass done"
            );
            if outcome == PassOutcome::Progress {
                pause = MIN_IDLE_BACKOFF.min(max_pause);
                continue;
            }
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(max_pause);
        }
        tracing::info!("poller stopped taking work");
    }
}
