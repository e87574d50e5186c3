//! Shard assignments decided by the lease table: the partitions whose lease a poller owns
//! ([`LeasedShards`], `run` with a lease table), or every partition no poller owns an unexpired lease
//! on ([`RespectLeases`], `drain --respect-leases`).

use outbox_shared::schema::PendingPartition;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relay_runtime::Deadline;

use super::manager::serves;
use super::owned::{Shared, State};
use super::{Clock, LeaseStore, Millis, SystemClock};
use super::{PageStart, PassShards, ShardAssignment};
use crate::partitions::ServedRegions;

/// The poll loop's side of a poller's leases: it polls the partitions whose lease it owns, up to
/// each one's poll deadline, and none being handed over.
#[derive(Debug, Clone)]
pub struct LeasedShards<C = SystemClock> {
    shared: Arc<Shared>,
    clock: C,
    partitions: Vec<PendingPartition>,
    /// On a global table, the regions served now: no page of another region's partition starts.
    served: Option<ServedRegions>,
    duration_ms: Millis,
}

impl<C: Clock> LeasedShards<C> {
    /// The poll loop's side of the leases behind `shared` (see
    /// [`super::LeaseManager::assignment`]).
    pub(crate) fn new(
        shared: Arc<Shared>,
        clock: C,
        partitions: Vec<PendingPartition>,
        served: Option<ServedRegions>,
        duration_ms: Millis,
    ) -> Self {
        Self {
            shared,
            clock,
            partitions,
            served,
            duration_ms,
        }
    }

    /// Shards whose lease nobody has owned for a lease duration (free or expired that long, or
    /// never written): the sweep publishes their events. Empty before the first read.
    fn orphaned(&self, state: &State, now: Millis) -> Vec<PendingPartition> {
        let Some(view) = &state.view else {
            return Vec::new();
        };
        self.partitions
            .iter()
            .filter(|&partition| serves(self.served.as_ref(), partition))
            // Not the partitions this poller polls (a lease it owns past its poll deadline is not
            // polled: the sweep may cover it once it has expired for a duration).
            .filter(|&partition| {
                state
                    .owned
                    .get(partition)
                    .is_none_or(|h| now >= h.poll_deadline)
            })
            .filter(|&partition| match view.leases.get(partition) {
                Some(lease) => {
                    lease.is_takeable_at(now) && lease.expires_at + self.duration_ms <= now
                }
                None => state
                    .missing_since
                    .get(partition)
                    .is_some_and(|since| since + self.duration_ms <= now),
            })
            .cloned()
            .collect()
    }
}

impl<C: Clock> ShardAssignment for LeasedShards<C> {
    async fn for_pass(&self) -> PassShards {
        let now = self.clock.now();
        let state = self.shared.state();
        let poll = state
            .owned
            .iter()
            .filter(|(partition, _)| serves(self.served.as_ref(), partition))
            .filter(|(_, h)| !h.handing_over && now < h.poll_deadline)
            .map(|(partition, _)| partition.clone())
            .collect();
        PassShards {
            poll,
            orphaned: self.orphaned(&state, now),
            read_errors: 0,
        }
    }

    fn begin_page(&self, partition: &PendingPartition) -> PageStart {
        // The region first (a region being handed back counts its pages in flight), then the
        // lease.
        let region = self.served.as_ref().zip(partition.origin.as_ref());
        if region.is_some_and(|(served, region)| !served.begin_page(region)) {
            return PageStart::Stop;
        }
        let now = self.clock.now();
        let mut state = self.shared.state();
        match state.owned.get_mut(partition) {
            Some(owned) if !owned.handing_over && now < owned.poll_deadline => {
                owned.busy += 1;
                let left = u64::try_from(owned.poll_deadline - now).unwrap_or_default();
                PageStart::Go {
                    deadline: Deadline::publish_by(
                        tokio::time::Instant::now() + Duration::from_millis(left),
                    ),
                }
            }
            _ => {
                drop(state);
                if let Some((served, region)) = region {
                    served.end_page(region);
                }
                PageStart::Stop
            }
        }
    }

    fn end_page(&self, partition: &PendingPartition) {
        if let Some(owned) = self.shared.state().owned.get_mut(partition) {
            owned.busy = owned.busy.saturating_sub(1);
        }
        self.shared.idle.notify_waiters();
        if let Some((served, region)) = self.served.as_ref().zip(partition.origin.as_ref()) {
            served.end_page(region);
        }
    }

    fn partition_polled(&self, partition: &PendingPartition) {
        let now = self.clock.now();
        if let Some(owned) = self.shared.state().owned.get_mut(partition) {
            owned.last_pass_at = Some(now);
        }
    }
}

/// `drain --respect-leases`: every partition that no poller owns an unexpired lease on, read from
/// the table before each pass; the drain takes no lease itself.
#[derive(Debug)]
pub struct RespectLeases<S, C = SystemClock> {
    store: S,
    clock: C,
    partitions: Vec<PendingPartition>,
    /// The partitions the last pass left to their owners.
    skipped: Mutex<BTreeSet<PendingPartition>>,
}

impl<S: LeaseStore, C: Clock> RespectLeases<S, C> {
    pub fn new(store: S, clock: C, partitions: Vec<PendingPartition>) -> Self {
        Self {
            store,
            clock,
            partitions,
            skipped: Mutex::default(),
        }
    }

    /// The partitions the last pass left to the pollers owning them.
    pub fn skipped(&self) -> Vec<PendingPartition> {
        self.skipped
            .lock()
            .expect("never poisoned")
            .iter()
            .cloned()
            .collect()
    }
}

impl<S: LeaseStore, C: Clock> ShardAssignment for RespectLeases<S, C> {
    async fn for_pass(&self) -> PassShards {
        match self.store.read().await {
            Ok(view) => {
                let now = self.clock.now();
                let (owned, poll): (Vec<PendingPartition>, Vec<PendingPartition>) =
                    self.partitions.iter().cloned().partition(|partition| {
                        view.leases
                            .get(partition)
                            .is_some_and(|l| l.holder_at(now).is_some())
                    });
                *self.skipped.lock().expect("never poisoned") = owned.into_iter().collect();
                PassShards {
                    poll,
                    orphaned: Vec::new(),
                    read_errors: 0,
                }
            }
            Err(err) => {
                tracing::warn!(error = %err, "could not read the lease table; this pass polls no partition");
                PassShards {
                    read_errors: 1,
                    ..PassShards::default()
                }
            }
        }
    }

    fn begin_page(&self, _partition: &PendingPartition) -> PageStart {
        PageStart::Go {
            deadline: Deadline::NONE,
        }
    }

    fn end_page(&self, _partition: &PendingPartition) {}

    fn partition_polled(&self, _partition: &PendingPartition) {}
}
