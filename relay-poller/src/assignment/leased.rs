//! Shard assignments decided by the lease table: the shards whose lease a poller owns
//! ([`LeasedShards`], `run` with a lease table), or every shard no poller owns an unexpired lease
//! on ([`RespectLeases`], `drain --respect-leases`).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use relay_runtime::Deadline;

use super::owned::{Shared, State};
use super::{Clock, LeaseStore, Millis, SystemClock};
use super::{PageStart, PassShards, ShardAssignment};

/// The poll loop's side of a poller's leases: it polls the shards whose lease it owns, up to
/// each one's poll deadline, and none being handed over.
#[derive(Debug, Clone)]
pub struct LeasedShards<C = SystemClock> {
    shared: Arc<Shared>,
    clock: C,
    shards: Vec<u16>,
    duration_ms: Millis,
}

impl<C: Clock> LeasedShards<C> {
    /// The poll loop's side of the leases behind `shared` (see
    /// [`super::LeaseManager::assignment`]).
    pub(crate) fn new(
        shared: Arc<Shared>,
        clock: C,
        shards: Vec<u16>,
        duration_ms: Millis,
    ) -> Self {
        Self {
            shared,
            clock,
            shards,
            duration_ms,
        }
    }

    /// Shards whose lease nobody has owned for a lease duration (free or expired that long, or
    /// never written): the sweep publishes their events. Empty before the first read.
    fn orphaned(&self, state: &State, now: Millis) -> Vec<u16> {
        let Some(view) = &state.view else {
            return Vec::new();
        };
        self.shards
            .iter()
            .copied()
            // Not the shards this poller polls (a lease it owns past its poll deadline is not
            // polled: the sweep may cover it once it has expired for a duration).
            .filter(|shard| {
                state
                    .owned
                    .get(shard)
                    .is_none_or(|h| now >= h.poll_deadline)
            })
            .filter(|shard| match view.leases.get(shard) {
                Some(lease) => {
                    lease.is_takeable_at(now) && lease.expires_at + self.duration_ms <= now
                }
                None => state
                    .missing_since
                    .get(shard)
                    .is_some_and(|since| since + self.duration_ms <= now),
            })
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
            .filter(|(_, h)| !h.handing_over && now < h.poll_deadline)
            .map(|(&shard, _)| shard)
            .collect();
        PassShards {
            poll,
            orphaned: self.orphaned(&state, now),
            read_errors: 0,
        }
    }

    fn begin_page(&self, shard: u16) -> PageStart {
        let now = self.clock.now();
        let mut state = self.shared.state();
        match state.owned.get_mut(&shard) {
            Some(owned) if !owned.handing_over && now < owned.poll_deadline => {
                owned.busy += 1;
                let left = u64::try_from(owned.poll_deadline - now).unwrap_or_default();
                PageStart::Go {
                    deadline: Deadline::publish_by(
                        tokio::time::Instant::now() + Duration::from_millis(left),
                    ),
                }
            }
            _ => PageStart::Stop,
        }
    }

    fn end_page(&self, shard: u16) {
        if let Some(owned) = self.shared.state().owned.get_mut(&shard) {
            owned.busy = owned.busy.saturating_sub(1);
        }
        self.shared.idle.notify_waiters();
    }

    fn shard_polled(&self, shard: u16) {
        let now = self.clock.now();
        if let Some(owned) = self.shared.state().owned.get_mut(&shard) {
            owned.last_pass_at = Some(now);
        }
    }
}

/// `drain --respect-leases`: every shard that no poller owns an unexpired lease on, read from
/// the table before each pass; the drain takes no lease itself.
#[derive(Debug)]
pub struct RespectLeases<S, C = SystemClock> {
    store: S,
    clock: C,
    shards: Vec<u16>,
    /// The shards the last pass left to their owners.
    skipped: Mutex<BTreeSet<u16>>,
}

impl<S: LeaseStore, C: Clock> RespectLeases<S, C> {
    pub fn new(store: S, clock: C, shards: Vec<u16>) -> Self {
        Self {
            store,
            clock,
            shards,
            skipped: Mutex::default(),
        }
    }

    /// The shards the last pass left to the pollers owning them.
    pub fn skipped(&self) -> Vec<u16> {
        self.skipped
            .lock()
            .expect("never poisoned")
            .iter()
            .copied()
            .collect()
    }
}

impl<S: LeaseStore, C: Clock> ShardAssignment for RespectLeases<S, C> {
    async fn for_pass(&self) -> PassShards {
        match self.store.read().await {
            Ok(view) => {
                let now = self.clock.now();
                let (owned, poll): (Vec<u16>, Vec<u16>) =
                    self.shards.iter().copied().partition(|shard| {
                        view.leases
                            .get(shard)
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
                tracing::warn!(error = %err, "could not read the lease table; this pass polls no shard");
                PassShards {
                    read_errors: 1,
                    ..PassShards::default()
                }
            }
        }
    }

    fn begin_page(&self, _shard: u16) -> PageStart {
        PageStart::Go {
            deadline: Deadline::NONE,
        }
    }

    fn end_page(&self, _shard: u16) {}

    fn shard_polled(&self, _shard: u16) {}
}
