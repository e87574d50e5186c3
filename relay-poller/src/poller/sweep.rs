//! The sweep: a scan of the whole index for the partitions (`GSI1PK` values) a pass would not
//! query: outside the configured shard count (a writer or another client on more shards, a
//! reshard), and the shards no poller has leased for a lease duration. A pass polls each as it
//! polls a shard, before the shards, so no event is stranded and, after a reshard, an
//! aggregate's older events (under the old `GSI1PK`) leave before its newer ones. This component
//! finds them; the pass polls them.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use outbox_shared::schema::PendingPartition;

use crate::index::{IndexError, PartitionCounts, PendingCounts};
use crate::metrics;
use crate::partitions::Partitions;
use outbox_shared::schema::LEGACY_HOLD_PARTITION;

/// What a sweep found: the partitions to poll before the shards, stray ones first (oldest
/// partition name first), then the orphaned shards'.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Found {
    pub(super) partitions: Vec<String>,
    /// Pending events under partitions outside the shard count.
    pub(super) stray_pending: u64,
}

/// The sweep of the whole index.
#[derive(Debug)]
pub(super) struct Sweep<C> {
    index: C,
    partitions: Partitions,
    /// How often a sweep is due (`run`).
    interval: Duration,
    /// When the last sweep that was due started.
    last: Mutex<Option<Instant>>,
}

impl<C: PendingCounts> Sweep<C> {
    pub(super) fn new(index: C, partitions: Partitions, interval: Duration) -> Self {
        Self {
            index,
            partitions,
            interval,
            last: Mutex::new(None),
        }
    }

    /// Whether a sweep is due now (an interval since the last, or never); if so, it counts as
    /// started.
    pub(super) fn due(&self) -> bool {
        let mut last = self.last.lock().expect("not poisoned");
        let due = last.is_none_or(|at| at.elapsed() >= self.interval);
        if due {
            *last = Some(Instant::now());
        }
        due
    }

    /// Finds the partitions outside the shard count, then the partitions of `orphaned` shards
    /// (no poller has owned their lease for a lease duration) that hold events or aggregate holds
    /// (a partition whose events are all out but whose holds are not is polled for them);
    /// records the strays' count, the holds' and the age of the oldest.
    ///
    /// # Errors
    /// When the index can't be scanned (logged; the next pass sweeps again).
    pub(super) async fn partitions(
        &self,
        orphaned: &[PendingPartition],
    ) -> Result<Found, IndexError> {
        let all = self.index.partitions().await.inspect_err(|err| {
            tracing::warn!(error = %outbox_shared::error::describe(err), "sweep of the pending index failed; retrying next pass");
        })?;
        metrics::holds(
            all.hold_count(),
            all.oldest_hold.as_deref(),
            chrono::Utc::now(),
        );
        let orphans: PartitionCounts = orphaned
            .iter()
            .map(PendingPartition::gsi1pk)
            .filter_map(|p| {
                let n = all.pending.get(&p).copied().unwrap_or_default();
                (n > 0 || all.holds.contains_key(&p)).then_some((p, n))
            })
            .collect();
        let strays = stray_partitions(all.pending, &self.partitions);
        let stray_pending: u64 = strays.values().sum();
        // Holds under a stray partition whose events are all out: polled for the holds alone.
        let stray_holds: Vec<String> = stray_partitions(all.holds, &self.partitions)
            .into_keys()
            .filter(|p| p != LEGACY_HOLD_PARTITION && !strays.contains_key(p))
            .collect();
        metrics::stray_pending(stray_pending);
        if stray_pending > 0 {
            tracing::warn!(
                stray_pending,
                partitions = ?strays.keys().collect::<Vec<_>>(),
                shard_count = self.partitions.shard_count().get(),
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
        Ok(Found {
            partitions: strays
                .into_keys()
                .chain(stray_holds)
                .chain(orphans.into_keys())
                .collect(),
            stray_pending,
        })
    }

    /// Counts every event pending in the index, stray partitions included.
    ///
    /// # Errors
    /// When the index can't be read.
    pub(super) async fn count_pending(&self) -> Result<u64, IndexError> {
        Ok(self.index.partitions().await?.pending.values().sum())
    }
}

/// The partitions of `all` outside every region's shards ([`Partitions::is_indexed`]): under
/// another shard count, or not a pending partition at all; of those, the ones whose events are
/// this poller's to publish ([`Partitions::serves`]: on a global table, another region's strays
/// are that region's).
pub(super) fn stray_partitions(all: PartitionCounts, partitions: &Partitions) -> PartitionCounts {
    all.into_iter()
        .filter(|(partition, _)| !partitions.is_indexed(partition) && partitions.serves(partition))
        .collect()
}
