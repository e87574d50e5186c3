//! `drain`: the backfill loop. Passes until one finds nothing pending in any partition, stray
//! ones included (complete), until passes stop making progress, or until cancelled; then the
//! summary it prints.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use chrono::Utc;
use relay_runtime::{DeadLetterSink, HoldStore, Publisher, StatusStore};
use tokio_util::sync::CancellationToken;

use super::stats::{DrainSummary, PassOutcome};
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
    /// Passes until one finds nothing pending (complete), `max_stalled_passes` consecutive
    /// passes publish nothing (events remain), or `cancel` fires. Between stalled passes it
    /// pauses with the same capped, doubling backoff as `run`.
    pub async fn drain(
        &self,
        grace: Duration,
        max_stalled_passes: u32,
        cancel: &CancellationToken,
    ) -> DrainSummary {
        self.drain_on(&self.static_shards(), grace, max_stalled_passes, cancel)
            .await
    }

    /// [`Self::drain`] over the shards `assignment` gives each pass (`--respect-leases`: those
    /// no other poller holds); complete when those and the stray partitions are empty.
    pub async fn drain_on<A: ShardAssignment>(
        &self,
        assignment: &A,
        grace: Duration,
        max_stalled_passes: u32,
        cancel: &CancellationToken,
    ) -> DrainSummary {
        let started = Instant::now();
        let (mut passes, mut stalled, mut complete) = (0, 0, false);
        // The first pass sweeps, and so does the pass that would declare the drain complete: a
        // drain is complete only when no partition, stray or not, holds an event.
        let mut sweep = true;
        let max_pause = self.settings.idle_backoff_max;
        let mut pause = MIN_IDLE_BACKOFF.min(max_pause);
        while !cancel.is_cancelled() {
            let now = Utc::now();
            let swept = std::mem::take(&mut sweep);
            let stats = self
                .pass_with(assignment, cutoff(now, grace), swept, cancel)
                .await;
            self.release_holds().await;
            passes += 1;
            metrics::pass(&stats, now);
            tracing::info!(
                pass = passes,
                taken = stats.taken,
                published = stats.published,
                already_marked = stats.already_marked,
                dead_lettered = stats.dead_lettered,
                failed = stats.failed,
                not_marked = stats.not_marked,
                "drain pass done"
            );
            match stats.outcome() {
                PassOutcome::Empty if !swept => sweep = true,
                PassOutcome::Empty => {
                    complete = !stats.interrupted;
                    break;
                }
                PassOutcome::Progress => stalled = 0,
                PassOutcome::Stalled => {
                    stalled += 1;
                    if stalled >= max_stalled_passes {
                        break;
                    }
                    tokio::select! {
                        () = cancel.cancelled() => break,
                        () = tokio::time::sleep(pause) => {}
                    }
                    pause = (pause * 2).min(max_pause);
                }
            }
        }
        let mut summary = self.summary(started.elapsed());
        summary.passes = passes;
        summary.complete = complete;
        summary.interrupted = cancel.is_cancelled();
        if complete {
            // Seen empty: whatever failed earlier has since left the index.
            summary.failed = 0;
            summary.remaining = Some(0);
        } else {
            summary.remaining = self.count_remaining().await;
        }
        summary
    }

    /// What an unfinished drain leaves pending, for its summary; `None` when it can't be counted.
    pub async fn count_remaining(&self) -> Option<u64> {
        match self.count_pending().await {
            Ok(n) => Some(n),
            Err(err) => {
                tracing::warn!(error = %outbox_shared::error::describe(&err), "could not count the events left pending");
                None
            }
        }
    }

    /// The totals so far, as a drain summary (for a drain cut short by the shutdown timeout).
    pub fn summary(&self, elapsed: Duration) -> DrainSummary {
        DrainSummary {
            published: self.totals.published.load(Ordering::Relaxed),
            already_marked: self.totals.already_marked.load(Ordering::Relaxed),
            dead_lettered: self.totals.dead_lettered.load(Ordering::Relaxed),
            not_marked: self.totals.not_marked.load(Ordering::Relaxed),
            failed: self.totals.failing.lock().expect("not poisoned").len() as u64,
            remaining: None,
            seconds: elapsed.as_secs_f64(),
            passes: 0,
            complete: false,
            interrupted: false,
            put_events_calls: 0,
            deduplicated: 0,
            skipped_shards: Vec::new(),
        }
    }
}
