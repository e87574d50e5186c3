//! A poller's region rounds ([`RegionManager`]), and the regions it serves ([`ServedRegions`]),
//! which its poll loop reads before each page of a region's partition.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use outbox_shared::{GlobalTable, Region};
use tokio_util::sync::CancellationToken;

use super::plan::{self, Decision, Seen};
use super::{FailoverSettings, RegionStore, RegionView};
use crate::assignment::{Clock, Millis};
use crate::metrics;

#[derive(Debug, Default)]
struct Served {
    regions: BTreeSet<Region>,
    /// Pages in flight per region.
    busy: BTreeMap<Region, u32>,
}

/// The regions whose partitions this poller publishes, as its region rounds decide them, and the
/// pages in flight per region (a hand-back waits for its region's to end). Cloned handles share
/// one set. Empty until the first round has read the adoptions: a region that comes back does not
/// publish its own partitions before it knows whether another region adopted them.
#[derive(Debug, Clone, Default)]
pub struct ServedRegions {
    inner: Arc<(Mutex<Served>, tokio::sync::Notify)>,
}

impl ServedRegions {
    fn lock(&self) -> MutexGuard<'_, Served> {
        self.inner
            .0
            .lock()
            .expect("served regions lock is never poisoned")
    }

    /// The regions served now.
    pub fn regions(&self) -> BTreeSet<Region> {
        self.lock().regions.clone()
    }

    /// Whether `region` is served now.
    pub fn serves(&self, region: &Region) -> bool {
        self.lock().regions.contains(region)
    }

    /// Before a page of one of `region`'s partitions: `true` (and the page counted in flight
    /// until [`Self::end_page`]) when it may start.
    pub fn begin_page(&self, region: &Region) -> bool {
        let mut served = self.lock();
        if !served.regions.contains(region) {
            return false;
        }
        *served.busy.entry(region.clone()).or_default() += 1;
        true
    }

    /// A page begun by [`Self::begin_page`] ended.
    pub fn end_page(&self, region: &Region) {
        if let Some(busy) = self.lock().busy.get_mut(region) {
            *busy = busy.saturating_sub(1);
        }
        self.inner.1.notify_waiters();
    }

    pub(super) fn set(&self, regions: BTreeSet<Region>) {
        self.lock().regions = regions;
    }

    /// Stops `region`: no new page of its partitions starts.
    fn stop(&self, region: &Region) {
        self.lock().regions.remove(region);
    }

    /// Waits up to `timeout` for `region` to have no page in flight.
    async fn wait_idle(&self, region: &Region, timeout: Duration) -> bool {
        let busy = || self.lock().busy.get(region).is_some_and(|b| *b > 0);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.inner.1.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !busy() {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return !busy();
            }
        }
    }
}

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
