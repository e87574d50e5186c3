//! The sweep: a scan of the whole index for the partitions (`GSI1PK` values) a pass would not
//! query: outside the configured shard count (a writer or another client on more shards, a
//! reshard), and the shards no poller has leased for a lease duration. Each is polled as a shard
//! is, before the shards, so no event is stranded and, after a reshard, an aggregate's older
//! events (under the old `GSI1PK`) leave before its newer ones.

use std::collections::HashSet;
use std::time::Instant;

use outbox_shared::ShardCount;
use outbox_shared::schema;
use relay_runtime::{DeadLetterSink, HoldStore, Publisher, StatusStore};
use tokio_util::sync::CancellationToken;

use super::Poller;
use super::stats::PassStats;
use crate::assignment::StaticShards;
use crate::index::{PartitionCounts, PendingIndex};
use crate::metrics;

impl<I, P, S, D, H> Poller<I, P, S, D, H>
where
    I: PendingIndex,
    P: Publisher,
    S: StatusStore,
    D: DeadLetterSink,
    H: HoldStore,
{
    /// Whether a sweep is due now; if so, it counts as started.
    pub(super) fn sweep_due(&self) -> bool {
        let mut last = self.last_sweep.lock().expect("not poisoned");
        let due = last.is_none_or(|at| at.elapsed() >= self.settings.sweep_interval);
        if due {
            *last = Some(Instant::now());
        }
        due
    }

    /// Finds the partitions outside the shard count and polls each, oldest partition name first;
    /// then the partitions of `orphaned` shards (no poller has owned their lease for a lease
    /// duration). Returns the aggregates it held back after a failure, which the shards then hold
    /// back too.
    pub(super) async fn sweep(
        &self,
        before: &str,
        orphaned: &[u16],
        cancel: &CancellationToken,
    ) -> (PassStats, HashSet<String>) {
        let mut stats = PassStats::default();
        let mut held_back = HashSet::new();
        let (strays, orphans) = match self.index.partitions().await {
            Ok(all) => {
                let orphans: PartitionCounts = orphaned
                    .iter()
                    .map(|&shard| schema::pending_shard_pk(shard))
                    .filter_map(|p| all.get(&p).map(|&n| (p, n)))
                    .filter(|(_, n)| *n > 0)
                    .collect();
                (stray_partitions(all, self.settings.shard_count), orphans)
            }
            Err(err) => {
                tracing::warn!(error = %outbox_shared::error::describe(&err), "sweep of the pending index failed; retrying next pass");
                stats.read_errors += 1;
                return (stats, held_back);
            }
        };
        let stray_pending: u64 = strays.values().sum();
        metrics::stray_pending(stray_pending);
        if stray_pending > 0 {
            tracing::warn!(
                stray_pending,
                partitions = ?strays.keys().collect::<Vec<_>>(),
                shard_count = self.settings.shard_count.get(),
                "pending events under partitions outside the shard count; publishing them"
            );
        }
        if !orphans.is_empty() {
            tracing::warn!(
                pending = orphans.values().sum::<u64>(),
                partitions = ?orphans.keys().collect::<Vec<_>>(),
                "pending events under shards no poller has owned a lease on for a lease duration; publishing them"
            );
        }
        for partition in strays.keys().chain(orphans.keys()) {
            let partition_stats = self
                .poll_partition(
                    partition,
                    None::<(&StaticShards, u16)>,
                    before,
                    &mut held_back,
                    cancel,
                )
                .await;
            stats.merge(partition_stats);
        }
        stats.stray_pending = Some(stray_pending);
        (stats, held_back)
    }

    /// Counts every event pending in the index, stray partitions included.
    ///
    /// # Errors
    /// When the index can't be read.
    pub async fn count_pending(&self) -> Result<u64, crate::index::IndexError> {
        Ok(self.index.partitions().await?.values().sum())
    }
}

/// The partitions of `all` outside `shard_count`'s shards: under another shard count, or not a
/// shard partition at all.
pub(super) fn stray_partitions(all: PartitionCounts, shard_count: ShardCount) -> PartitionCounts {
    all.into_iter()
        .filter(|(partition, _)| {
            schema::parse_pending_shard_pk(partition).is_none_or(|shard| shard >= shard_count.get())
        })
        .collect()
}
