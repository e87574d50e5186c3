//! The lease manager: one poller's rounds against the lease table. Its poll loop learns which
//! partitions it may poll from the leases the manager owns, through a [`LeasedShards`]
//! ([`LeaseManager::assignment`]).

use outbox_shared::region::Region;
use outbox_shared::schema::PendingPartition;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use futures::future::join_all;
use tokio_util::sync::CancellationToken;

use super::LeasedShards;
use super::owned::{OwnedLease, Shared};
use super::plan::{acquisitions, should_hand_over};
use crate::partitions::ServedRegions;

use super::{
    Clock, Expect, Heartbeat, LeaseError, LeaseSettings, LeaseStore, LeaseView, Millis,
    SystemClock, Term,
};
use crate::metrics;

/// What one round did (for logs and tests).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoundReport {
    /// Leases renewed.
    pub renewed: usize,
    /// Renewals that failed for another reason than losing the lease (kept until the deadline).
    pub renew_errors: usize,
    /// Leases found to be another poller's now.
    pub lost: Vec<PendingPartition>,
    /// Free or expired leases taken.
    pub taken: Vec<PendingPartition>,
    /// Leases another poller handed over to this one.
    pub adopted: Vec<PendingPartition>,
    /// Leases handed over to the poller that asked.
    pub handed_over: Vec<PendingPartition>,
    /// Leases released because their region is no longer this poller's to serve (handed back,
    /// or its own adopted by another region).
    pub released: Vec<PendingPartition>,
    /// The lease this poller asked another for.
    pub requested: Option<PendingPartition>,
    /// Leases taken from another poller (expired, or handed over): the takeover metric.
    pub takeovers: u64,
    /// The table could not be read, so nothing was taken.
    pub read_failed: bool,
    /// Leases owned at the end of the round.
    pub owned: usize,
}

/// One poller's leases: its rounds against the table ([`Self::run`]: renew rounds and take
/// rounds, each every renew interval on its own, so a renewal never waits behind a read or a
/// take) and the release of everything at shutdown ([`Self::release_all`]).
///
/// Every write to an owned lease (renew, hand over) is made by the renew round; the take round
/// writes only leases this poller does not own yet, and requests, which leave the counter alone.
#[derive(Debug)]
pub struct LeaseManager<S, C = SystemClock> {
    store: S,
    clock: C,
    owner: String,
    /// Every partition this poller may lease: on a global table every region's, its own first.
    partitions: Vec<PendingPartition>,
    /// On a global table, the regions it serves now (its region rounds decide them): it leases
    /// only their partitions, and releases a region's leases once it no longer serves it.
    served: Option<ServedRegions>,
    settings: LeaseSettings,
    shared: Arc<Shared>,
    /// Where in the partition list this poller starts looking for free leases.
    rotate: usize,
    /// Take rounds run so far (the first one only reads).
    take_rounds: AtomicU64,
    /// Set at shutdown: renewals go on until the leases are released, takes and requests stop.
    stopping: AtomicBool,
    started_at: Millis,
}

impl<S: LeaseStore, C: Clock + Clone> LeaseManager<S, C> {
    /// A manager for `owner` over `partitions` (every partition of the partition count).
    pub fn new(
        store: S,
        clock: C,
        owner: impl Into<String>,
        partitions: Vec<PendingPartition>,
        settings: LeaseSettings,
    ) -> Self {
        let owner = owner.into();
        let rotate = owner.bytes().fold(0usize, |h, b| {
            h.wrapping_mul(31).wrapping_add(usize::from(b))
        });
        let started_at = clock.now();
        Self {
            store,
            clock,
            owner,
            partitions,
            served: None,
            settings,
            shared: Arc::default(),
            rotate,
            take_rounds: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
            started_at,
        }
    }

    /// The manager leasing only the partitions of the regions `served` names now (a poller's
    /// [`crate::partitions::Partitions::served`], set by its region rounds), of those it was
    /// given.
    #[must_use]
    pub fn serving(mut self, served: ServedRegions) -> Self {
        self.served = Some(served);
        self
    }

    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The region whose pollers share these leases (the first partition's: its own), on a global
    /// table.
    fn region(&self) -> Option<&Region> {
        self.partitions.first().and_then(|p| p.origin.as_ref())
    }

    /// The partitions this poller may lease now: those of the regions it serves.
    fn partitions(&self) -> Vec<PendingPartition> {
        self.partitions
            .iter()
            .filter(|p| serves(self.served.as_ref(), p))
            .cloned()
            .collect()
    }

    /// The partitions this poller owns now.
    pub fn owned(&self) -> BTreeSet<PendingPartition> {
        self.shared.state().owned.keys().cloned().collect()
    }

    /// Takes no more leases and asks for none (shutdown has begun); renewals go on until
    /// [`Self::release_all`].
    pub fn stop_taking(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// The poll loop's view of these leases.
    pub fn assignment(&self) -> LeasedShards<C> {
        LeasedShards::new(
            self.shared.clone(),
            self.clock.clone(),
            self.partitions.clone(),
            self.served.clone(),
            self.settings.duration_ms(),
        )
    }

    /// Renew rounds and take rounds, each every renew interval, until `cancel` fires.
    ///
    /// # Errors
    /// [`LeaseError::TableMissing`]: without its table the poller cannot share the partitions.
    pub async fn run(&self, cancel: &CancellationToken) -> Result<(), LeaseError> {
        let every = || {
            let mut every = tokio::time::interval(self.settings.renew_interval);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            every
        };
        let renewing = async {
            let mut every = every();
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return Ok(()),
                    _ = every.tick() => {}
                }
                let report = self.renew_round().await?;
                if !(report.lost.is_empty() && report.handed_over.is_empty()) {
                    tracing::debug!(owner = %self.owner, owned = report.owned, lost = ?report.lost, handed_over = ?report.handed_over, "renew round");
                }
            }
        };
        let taking = async {
            let mut every = every();
            loop {
                tokio::select! {
                    () = cancel.cancelled() => return Ok(()),
                    _ = every.tick() => {}
                }
                let report = self.take_round().await?;
                if !(report.taken.is_empty() && report.adopted.is_empty()) {
                    tracing::debug!(owner = %self.owner, owned = report.owned, taken = ?report.taken, adopted = ?report.adopted, "take round");
                }
            }
        };
        tokio::try_join!(renewing, taking).map(|_| ())
    }

    /// A renew round, then a take round.
    ///
    /// # Errors
    /// [`LeaseError::TableMissing`]; every other failure is logged and retried next round.
    pub async fn round(&self) -> Result<RoundReport, LeaseError> {
        let renewed = self.renew_round().await?;
        let taken = self.take_round().await?;
        Ok(RoundReport {
            renewed: renewed.renewed,
            renew_errors: renewed.renew_errors,
            lost: renewed.lost,
            handed_over: renewed.handed_over,
            released: renewed.released,
            taken: taken.taken,
            adopted: taken.adopted,
            requested: taken.requested,
            takeovers: taken.takeovers,
            read_failed: taken.read_failed,
            owned: taken.owned,
        })
    }

    /// Heartbeat, renew every owned lease, and hand over those another poller asked for (once no
    /// page of the partition is in flight; judged on the table as the last take round read it).
    ///
    /// # Errors
    /// [`LeaseError::TableMissing`]; every other failure is logged and retried next round.
    pub async fn renew_round(&self) -> Result<RoundReport, LeaseError> {
        let mut report = RoundReport::default();
        self.release_unserved(&mut report).await;
        let now = self.clock.now();
        let duration = self.settings.duration_ms();
        let heartbeat = Heartbeat {
            owner: self.owner.clone(),
            region: self.region().cloned(),
            heartbeat_at: now,
            expires_at: now + duration,
            started_at: self.started_at,
        };
        let (beat, requests) = tokio::join!(
            self.store.heartbeat(&heartbeat),
            self.renew_all(now, &mut report)
        );
        match beat {
            Ok(()) => {}
            Err(err @ LeaseError::TableMissing { .. }) => return Err(err),
            Err(err) => tracing::warn!(owner = %self.owner, error = %err, "heartbeat failed"),
        }
        let view = self.shared.state().view.clone();
        if let Some(view) = view {
            self.answer_requests(&view, requests, &mut report).await;
        }
        report.owned = self.shared.state().owned.len();
        metrics::leases_owned(report.owned);
        Ok(report)
    }

    /// Read the table, adopt the leases handed over to this poller, take free or expired leases
    /// up to the fair share, ask for one lease when short. The first take round only reads (so
    /// pollers started together see each other's heartbeats before any takes a share).
    ///
    /// # Errors
    /// [`LeaseError::TableMissing`]; every other failure is logged and retried next round.
    pub async fn take_round(&self) -> Result<RoundReport, LeaseError> {
        let mut report = RoundReport::default();
        let now = self.clock.now();
        let view = match self.store.read().await {
            Ok(view) => view.fleet(self.region(), &self.partitions()),
            Err(err @ LeaseError::TableMissing { .. }) => return Err(err),
            Err(err) => {
                tracing::warn!(owner = %self.owner, error = %err, "could not read the lease table; taking nothing this round");
                report.read_failed = true;
                self.finish(&mut report);
                return Ok(report);
            }
        };
        self.remember(&view, now);
        if self.stopping.load(Ordering::Relaxed) {
            self.finish(&mut report);
            return Ok(report);
        }
        self.adopt(&view, &mut report).await;
        if self.take_rounds.load(Ordering::Relaxed) > 0 {
            self.acquire(&view, &mut report).await;
        }
        self.finish(&mut report);
        Ok(report)
    }

    fn finish(&self, report: &mut RoundReport) {
        self.take_rounds.fetch_add(1, Ordering::Relaxed);
        report.owned = self.shared.state().owned.len();
        metrics::lease_takeovers(report.takeovers);
    }

    /// Renews every owned lease; the hand-over requests found on them.
    async fn renew_all(
        &self,
        now: Millis,
        report: &mut RoundReport,
    ) -> Vec<(PendingPartition, String)> {
        let owned: Vec<(PendingPartition, u64, Option<Millis>)> = self
            .shared
            .state()
            .owned
            .iter()
            .map(|(partition, h)| (partition.clone(), h.counter, h.last_pass_at))
            .collect();
        let expires_at = now + self.settings.duration_ms();
        let results = join_all(owned.iter().map(|&(ref partition, counter, last_pass_at)| {
            self.store.renew(
                partition,
                &self.owner,
                counter,
                Term {
                    at: now,
                    expires_at,
                },
                last_pass_at,
            )
        }))
        .await;
        let mut requests = Vec::new();
        let mut state = self.shared.state();
        for ((partition, _, _), result) in owned.into_iter().zip(results) {
            match result {
                Ok(Some(lease)) => {
                    report.renewed += 1;
                    if let Some(owned) = state.owned.get_mut(&partition) {
                        owned.counter = lease.counter;
                        owned.poll_deadline = now + self.settings.poll_window_ms();
                        // A request that was dropped meanwhile: poll the partition again.
                        owned.handing_over &= lease.handoff_to.is_some();
                    }
                    if let Some(requester) = lease.handoff_to {
                        requests.push((partition, requester));
                    }
                }
                Ok(None) => {
                    state.owned.remove(&partition);
                    report.lost.push(partition.clone());
                    tracing::warn!(%partition, owner = %self.owner, "lease lost to another poller; stopped polling the partition");
                }
                Err(err) => {
                    report.renew_errors += 1;
                    tracing::warn!(%partition, owner = %self.owner, error = %err, "lease renewal failed; the partition is polled until its poll deadline");
                }
            }
        }
        requests
    }

    fn remember(&self, view: &LeaseView, now: Millis) {
        let mut state = self.shared.state();
        for partition in &self.partitions() {
            if view.leases.contains_key(partition) {
                state.missing_since.remove(partition);
            } else {
                state.missing_since.entry(partition.clone()).or_insert(now);
            }
        }
        state.view = Some(view.clone());
    }

    /// Hands over the leases other pollers asked for, once no page of the partition is in flight,
    /// or drops the request when it no longer evens the split.
    async fn answer_requests(
        &self,
        view: &LeaseView,
        requests: Vec<(PendingPartition, String)>,
        report: &mut RoundReport,
    ) {
        for (partition, requester) in requests {
            let mine = self.shared.state().owned.len();
            let now = self.clock.now();
            if !should_hand_over(view, &self.owner, mine, &requester, &self.partitions(), now) {
                if let Err(err) = self.store.clear_handoff(&partition, &self.owner).await {
                    tracing::warn!(%partition, owner = %self.owner, error = %err, "could not clear a hand-over request");
                }
                // This round's renewal confirmed the lease is this poller's: a partition stopped by a
                // hand-over that went unanswered polls again.
                if let Some(owned) = self.shared.state().owned.get_mut(&partition) {
                    owned.handing_over = false;
                }
                continue;
            }
            let Some((counter, last_pass_at)) = self.stop_polling(&partition) else {
                continue;
            };
            if !self
                .wait_idle(&partition, self.settings.renew_interval / 2)
                .await
            {
                // A page is still in flight: the request stays, the next renewal brings it back.
                continue;
            }
            let now = self.clock.now();
            let expires_at = now + self.settings.duration_ms();
            let written = self
                .store
                .hand_over(
                    &partition,
                    &self.owner,
                    counter,
                    &requester,
                    Term {
                        at: now,
                        expires_at,
                    },
                    last_pass_at,
                )
                .await;
            match written {
                Ok(true) => {
                    self.shared.state().owned.remove(&partition);
                    report.handed_over.push(partition.clone());
                    tracing::info!(%partition, owner = %self.owner, to = %requester, "lease handed over");
                }
                // The partition stays stopped (`handing_over`) until a renewal says whose the lease
                // is: "not mine" may be the SDK's retry of a hand-over that was written (DynamoDB
                // answers the retried conditional write ConditionalCheckFailed), and a failed call
                // may have been written too; either way the requester adopts the lease at its next
                // round, and a holder that polled again would poll the partition beside it for up to a
                // renew interval. The next renewal fails if the lease is the requester's (lost), or
                // brings the request back (answered again) or finds it withdrawn (polled again).
                Ok(false) => {
                    tracing::debug!(%partition, owner = %self.owner, to = %requester, "hand-over not confirmed: the request was withdrawn, the lease changed, or a retried write was refused; the partition stays stopped until the next renewal");
                }
                Err(err) => {
                    tracing::warn!(%partition, owner = %self.owner, error = %err, "hand-over failed; the partition stays stopped until the next renewal");
                }
            }
        }
    }

    /// Releases the leases of the regions this poller no longer serves (a region handed back, or
    /// its own adopted by another region), once no page of them is in flight, so the pollers
    /// serving them now take them at their next round rather than a lease duration later.
    async fn release_unserved(&self, report: &mut RoundReport) {
        let Some(served) = &self.served else {
            return;
        };
        let unserved: Vec<PendingPartition> = self
            .shared
            .state()
            .owned
            .keys()
            .filter(|p| !serves(Some(served), p))
            .cloned()
            .collect();
        for partition in unserved {
            let Some((counter, last_pass_at)) = self.stop_polling(&partition) else {
                continue;
            };
            if !self
                .wait_idle(&partition, self.settings.renew_interval / 2)
                .await
            {
                // A page is still in flight: renewed this round, released at the next.
                continue;
            }
            self.shared.state().owned.remove(&partition);
            let now = self.clock.now();
            if self
                .release(&[(partition.clone(), counter, last_pass_at)], now)
                .await
                == 1
            {
                tracing::info!(%partition, owner = %self.owner, "lease released: its region is no longer this poller's to serve");
            }
            report.released.push(partition);
        }
    }

    /// Stops new pages of `partition`; its counter and last pass, if it is still owned.
    fn stop_polling(&self, partition: &PendingPartition) -> Option<(u64, Option<Millis>)> {
        let mut state = self.shared.state();
        let owned = state.owned.get_mut(partition)?;
        owned.handing_over = true;
        Some((owned.counter, owned.last_pass_at))
    }

    /// Waits up to `timeout` for `partition` to have no page in flight.
    async fn wait_idle(&self, partition: &PendingPartition, timeout: Duration) -> bool {
        let busy = || {
            self.shared
                .state()
                .owned
                .get(partition)
                .is_some_and(|h| h.busy > 0)
        };
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.shared.idle.notified();
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

    /// Renews the leases another poller handed over to this one, which makes them its own.
    async fn adopt(&self, view: &LeaseView, report: &mut RoundReport) {
        let now = self.clock.now();
        let owned = self.owned();
        let partitions = self.partitions();
        let handed: Vec<(PendingPartition, u64)> = view
            .leases
            .values()
            .filter(|l| partitions.contains(&l.partition) && !owned.contains(&l.partition))
            .filter(|l| l.holder_at(now) == Some(self.owner.as_str()))
            .map(|l| (l.partition.clone(), l.counter))
            .collect();
        for (partition, counter) in handed {
            let now = self.clock.now();
            let expires_at = now + self.settings.duration_ms();
            match self
                .store
                .renew(
                    &partition,
                    &self.owner,
                    counter,
                    Term {
                        at: now,
                        expires_at,
                    },
                    None,
                )
                .await
            {
                Ok(Some(lease)) => {
                    self.own(partition.clone(), lease.counter, now);
                    report.adopted.push(partition.clone());
                    report.takeovers += 1;
                    tracing::info!(%partition, owner = %self.owner, "lease taken over (handed over)");
                }
                Ok(None) => {}
                Err(err) => {
                    tracing::warn!(%partition, owner = %self.owner, error = %err, "could not take a lease handed over; retrying next round");
                }
            }
        }
    }

    fn own(&self, partition: PendingPartition, counter: u64, written_at: Millis) {
        self.shared.state().owned.insert(
            partition,
            OwnedLease {
                counter,
                poll_deadline: written_at + self.settings.poll_window_ms(),
                handing_over: false,
                busy: 0,
                last_pass_at: None,
            },
        );
    }

    /// Takes free and expired leases up to the fair share; asks for one when short.
    async fn acquire(&self, view: &LeaseView, report: &mut RoundReport) {
        let now = self.clock.now();
        let plan = acquisitions(
            view,
            &self.owner,
            &self.partitions(),
            &self.owned(),
            now,
            self.rotate,
        );
        let expires_at = now + self.settings.duration_ms();
        let results = join_all(plan.take.iter().map(|&(ref partition, expect)| {
            self.store.take(
                partition,
                expect,
                &self.owner,
                Term {
                    at: now,
                    expires_at,
                },
            )
        }))
        .await;
        for (&(ref partition, expect), result) in plan.take.iter().zip(results) {
            match result {
                Ok(Some(lease)) => {
                    self.own(partition.clone(), lease.counter, now);
                    report.taken.push(partition.clone());
                    let previous = match expect {
                        Expect::Missing => None,
                        Expect::Counter(_) => view
                            .leases
                            .get(partition)
                            .and_then(|l| l.owner.clone())
                            .filter(|o| *o != self.owner),
                    };
                    match previous {
                        Some(from) => {
                            report.takeovers += 1;
                            tracing::info!(%partition, owner = %self.owner, from = %from, "lease taken over (expired)");
                        }
                        None => tracing::info!(%partition, owner = %self.owner, "lease taken"),
                    }
                }
                Ok(None) => {
                    tracing::debug!(%partition, owner = %self.owner, "another poller took the lease first");
                }
                Err(err) => {
                    tracing::warn!(%partition, owner = %self.owner, error = %err, "could not take a lease");
                }
            }
        }
        if let Some(steal) = plan.steal {
            match self
                .store
                .request_handoff(&steal.partition, &steal.holder, &self.owner)
                .await
            {
                Ok(true) => {
                    report.requested = Some(steal.partition.clone());
                    tracing::info!(partition = %steal.partition, owner = %self.owner, holder = %steal.holder, "asked for a lease (fair share)");
                }
                Ok(false) => {}
                Err(err) => {
                    tracing::warn!(partition = %steal.partition, owner = %self.owner, error = %err, "could not ask for a lease");
                }
            }
        }
    }

    /// Withdraws this poller's open hand-over requests, frees every lease it owns and removes its
    /// heartbeat (at shutdown, once no page is in flight), so the other pollers take the partitions at
    /// their next round. A lease handed over to it just before it withdrew is freed too. Returns
    /// how many were released.
    pub async fn release_all(&self) -> usize {
        if let Ok(view) = self.store.read().await {
            let asked: Vec<PendingPartition> = view
                .leases
                .values()
                .filter(|l| l.handoff_to.as_deref() == Some(self.owner.as_str()))
                .map(|l| l.partition.clone())
                .collect();
            for partition in asked {
                if let Err(err) = self.store.withdraw_request(&partition, &self.owner).await {
                    tracing::warn!(%partition, owner = %self.owner, error = %err, "could not withdraw a hand-over request; its holder drops it once this poller's heartbeat expires");
                }
            }
        }
        let mut owned: Vec<(PendingPartition, u64, Option<Millis>)> =
            std::mem::take(&mut self.shared.state().owned)
                .into_iter()
                .map(|(partition, h)| (partition, h.counter, h.last_pass_at))
                .collect();
        let now = self.clock.now();
        let mut released = self.release(&owned, now).await;
        // Handed over to this poller after its last round: its own to release as well.
        if let Ok(view) = self.store.read().await {
            owned = view
                .leases
                .values()
                .filter(|l| l.holder_at(now) == Some(self.owner.as_str()))
                .map(|l| (l.partition.clone(), l.counter, None))
                .collect();
            released += self.release(&owned, now).await;
        }
        if let Err(err) = self.store.remove_heartbeat(&self.owner).await {
            tracing::warn!(owner = %self.owner, error = %err, "could not remove the heartbeat; it expires instead");
        }
        metrics::leases_owned(0);
        tracing::info!(owner = %self.owner, released, "leases released");
        released
    }

    async fn release(
        &self,
        leases: &[(PendingPartition, u64, Option<Millis>)],
        now: Millis,
    ) -> usize {
        let results = join_all(
            leases
                .iter()
                .map(|&(ref partition, counter, last_pass_at)| {
                    self.store
                        .release(partition, &self.owner, counter, now, last_pass_at)
                }),
        )
        .await;
        let mut released = 0;
        for ((partition, _, _), result) in leases.iter().zip(results) {
            match result {
                Ok(true) => released += 1,
                Ok(false) => {}
                Err(err) => {
                    tracing::warn!(%partition, owner = %self.owner, error = %err, "could not release a lease; it expires instead");
                }
            }
        }
        released
    }
}

/// Whether `partition` is of a region `served` names (every partition without regions).
pub(super) fn serves(served: Option<&ServedRegions>, partition: &PendingPartition) -> bool {
    match (served, &partition.origin) {
        (Some(served), Some(region)) => served.serves(region),
        _ => true,
    }
}

#[cfg(test)]
mod tests;
