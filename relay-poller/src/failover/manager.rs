//! A poller's region rounds ([`RegionManager`]): they set the regions it serves
//! ([`ServedRegions`], shared with its [`crate::partitions::Partitions`]), which its poll loop,
//! leases and sweep read before each page of a region's partition.

use std::collections::BTreeSet;
use std::sync::{Mutex, MutexGuard};

use outbox_shared::{GlobalTable, Region};
use tokio_util::sync::CancellationToken;

use super::plan::{self, Decision, Seen};
use super::{FailoverSettings, RegionStore, RegionView};
use crate::assignment::{Clock, Millis};
use crate::metrics;
pub use crate::partitions::ServedRegions;

/// What one region round did (for logs and tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegionReport {
    /// The heartbeat write failed.
    pub heartbeat_failed: bool,
    /// The region items could not be read: nothing was decided.
    pub read_failed: bool,
    /// Regions this region adopted.
    pub adopted: Vec<Region>,
    /// Regions this region handed back.
    pub handed_back: Vec<Region>,
    /// This region reclaimed its own partitions from a dead adopter.
    pub reclaimed: bool,
    /// Adoption writes refused because the item changed since it was read (another poller of
    /// this region wrote first), or hand-backs left for the next round (a page in flight).
    pub not_written: Vec<Region>,
    /// The regions served at the end of the round.
    pub served: BTreeSet<Region>,
}

#[derive(Debug, Default)]
pub(super) struct State {
    seen: Seen,
    /// When the region items were last read.
    pub(super) read_at: Option<Millis>,
    view: Option<RegionView>,
}

/// One poller's region rounds: every interval it writes its region's heartbeat, reads the region
/// items, adopts a dead region (the preferred adopter only), hands back one whose heartbeat has
/// been fresh for the hysteresis, reclaims its own from a dead adopter, and sets the regions it
/// serves. A poller that cannot read the items for `--region-failover-after` serves nothing until
/// it can: by then another region may have adopted its own.
#[derive(Debug)]
pub struct RegionManager<S, C> {
    store: S,
    clock: C,
    table: GlobalTable,
    owner: String,
    settings: FailoverSettings,
    pub(super) served: ServedRegions,
    state: Mutex<State>,
}

impl<S: RegionStore, C: Clock> RegionManager<S, C> {
    /// A manager for poller `owner` of region `table.own()`.
    pub fn new(
        store: S,
        clock: C,
        table: GlobalTable,
        owner: impl Into<String>,
        settings: FailoverSettings,
    ) -> Self {
        Self {
            store,
            clock,
            table,
            owner: owner.into(),
            settings,
            served: ServedRegions::default(),
            state: Mutex::default(),
        }
    }

    /// The manager setting `served` (a poller's [`crate::partitions::Partitions::served`], shared
    /// with its poll loop, leases and sweep) instead of a set of its own. It serves nothing until
    /// its first round has read the adoptions.
    #[must_use]
    pub fn serving(mut self, served: ServedRegions) -> Self {
        served.set(BTreeSet::new());
        self.served = served;
        self
    }

    /// The regions this poller serves (shared with its poll loop).
    pub fn served(&self) -> ServedRegions {
        self.served.clone()
    }

    /// The region items as the last round read them.
    pub fn view(&self) -> Option<RegionView> {
        self.state().view.clone()
    }

    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("region state lock is never poisoned")
    }

    /// A round every interval until `cancel` fires.
    pub async fn run(&self, cancel: &CancellationToken) {
        let mut every = tokio::time::interval(self.settings.interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = cancel.cancelled() => return,
                _ = every.tick() => {}
            }
            self.round().await;
        }
    }

    /// One round: heartbeat, read, decide, write, serve.
    pub async fn round(&self) -> RegionReport {
        let mut report = RegionReport::default();
        let me = self.table.own().clone();
        let now = self.clock.now();
        if let Err(err) = self.store.heartbeat(&me, &self.owner, now).await {
            report.heartbeat_failed = true;
            tracing::warn!(region = %me, owner = %self.owner, error = %err, "region heartbeat failed");
        }
        let mut view = match self.store.read().await {
            Ok(view) => view,
            Err(err) => {
                report.read_failed = true;
                let read_at = self.state().read_at;
                let blind = read_at.is_none_or(|at| now - at >= self.settings.failover_after_ms());
                if blind && !self.served.regions().is_empty() {
                    tracing::error!(region = %me, owner = %self.owner, error = %err, "region items unread for --region-failover-after: publishing no region until they can be read (another region may have adopted this one's)");
                    self.served.set(BTreeSet::new());
                } else {
                    tracing::warn!(region = %me, owner = %self.owner, error = %err, "could not read the region items; serving the same regions this round");
                }
                report.served = self.served.regions();
                return report;
            }
        };
        let decisions = {
            let mut state = self.state();
            state.seen.observe(&self.table, &view, now, &self.settings);
            state.read_at = Some(now);
            plan::decide(&self.table, &view, &state.seen, now, &self.settings)
        };
        let mut withheld = BTreeSet::new();
        for decision in decisions {
            let change = decision.change();
            if let Decision::HandBack(_) = decision {
                // No new page of its partitions, and the ones in flight finished, before the
                // hand-back is written: the home region starts after it.
                self.served.stop(&change.region);
                if !self
                    .served
                    .wait_idle(&change.region, self.settings.interval / 2)
                    .await
                {
                    withheld.insert(change.region.clone());
                    report.not_written.push(change.region.clone());
                    continue;
                }
            }
            match self.store.change(change).await {
                Ok(true) => {
                    view.adoptions
                        .insert(change.region.clone(), change.applied());
                    match &decision {
                        Decision::Adopt(_) => {
                            tracing::info!(region = %change.region, adopter = %me, epoch = change.next_epoch(), "region adopted: its relays stopped; publishing its partitions");
                            report.adopted.push(change.region.clone());
                        }
                        Decision::HandBack(_) => {
                            tracing::info!(region = %change.region, adopter = %me, epoch = change.next_epoch(), "region handed back: its relays are back");
                            report.handed_back.push(change.region.clone());
                        }
                        Decision::Reclaim(_) => {
                            tracing::info!(region = %me, epoch = change.next_epoch(), "own partitions reclaimed from a dead adopter");
                            report.reclaimed = true;
                        }
                    }
                }
                Ok(false) => {
                    tracing::debug!(region = %change.region, "adoption changed since read (another poller wrote first)");
                    report.not_written.push(change.region.clone());
                    if let Decision::HandBack(_) = decision {
                        withheld.insert(change.region.clone());
                    }
                }
                Err(err) => {
                    tracing::warn!(region = %change.region, error = %err, "could not change the adoption; retrying next round");
                    report.not_written.push(change.region.clone());
                    if let Decision::HandBack(_) = decision {
                        withheld.insert(change.region.clone());
                    }
                }
            }
        }
        let mut served = plan::served(&self.table, &view, now, &self.settings);
        served.retain(|r| !withheld.contains(r));
        let before = self.served.regions();
        for stopped in before.difference(&served) {
            tracing::info!(region = %stopped, owner = %self.owner, publisher = %view.publisher_of(stopped), "no longer publishing the region's partitions");
        }
        self.served.set(served.clone());
        metrics::regions_adopted(served.iter().filter(|r| **r != me).count());
        self.state().view = Some(view);
        report.served = served;
        report
    }
}
