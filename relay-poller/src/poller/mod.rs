//! The poller: passes over the sparse, sharded `GSI1` index of pending events, each publishing
//! what it finds and marking each published item out of the index, and the two loops around them.
//!
//! The room: this file is the poller and its loops ([`Poller::pass`], [`Poller::run`],
//! [`Poller::drain`]); the rest are its components, each a type holding only the ports it uses:
//! - [`pages`]: a partition's pages, oldest first, each relayed: the items this poller marked
//!   within the index's lag skipped, the rest decoded ([`decode`]) into events, their expiring
//!   `ttl`s refreshed, the aggregates held back for the pass held back, the rest published and
//!   settled, and the page's tally recorded once ([`stats`]). Ports: the index's pages, the
//!   publisher, the status store, the dead-letter sink, the TTL refresh's.
//! - [`sweep`]: a scan of the whole index for partitions (`GSI1PK` values) outside the configured
//!   shard count (a writer or another client on more shards, a reshard) and shards nobody has
//!   leased for a lease duration, polled before the shards, so no event is stranded under a
//!   `GSI1PK` nobody queries. Due once per sweep interval in `run`; in `drain`, on the first pass
//!   and on the pass that would find the index empty. Port: the index's counts.
//! - [`ttl`]: the TTL refresh: a pending item whose `ttl` is past or within the refresh margin gets
//!   its `ttl` pushed forward (still only while it is pending) before anything else happens to it,
//!   so DynamoDB's TTL never deletes an unpublished event that the poller can read. Its own port.
//! - [`holds`]: the release of the aggregate holds the stream relay set, page by page as a pass
//!   publishes past their last events, by the poller polling their partition. Port: the poller's
//!   side of the holds.
//!
//! The items this poller marked are remembered for the index's lag
//! ([`PollerSettings::index_lag`], `relay_runtime::RecentKeys`): `GSI1` is eventually consistent,
//! so a pass that starts right after one that marked items can still read them, and would publish
//! them again. A pass skips them (counted in [`PassStats::recently_marked`]); an item found already
//! marked is remembered too, and a pass that found nothing else is empty, not progress, so the
//! loops pause instead of passing again at once.
//!
//! Nothing is marked before the bus has accepted the event, so a crash, a kill or an abandoned
//! pass at any point leaves the event pending, and a later pass publishes it again
//! (at-least-once; consumers de-duplicate on `metadata.eventId`).
//!
//! Order: a shard's pages are processed one after another, and the publisher never has two calls
//! with events of one aggregate in flight at once, so one aggregate's events leave in `GSI1SK`
//! order. When an event is not published (it failed, or it was not sent: the publisher's stalled
//! limit or a lease's poll deadline came first), the later events of its aggregate are held back
//! for the rest of the pass instead of overtaking it. The sweep runs before the shards and hands
//! them the aggregates it held back, so after a reshard an aggregate's older events (under the old
//! `GSI1PK`) leave before its newer ones.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::stream;
use outbox_shared::schema::{self, PendingPartition};
use outbox_shared::time::format_timestamp;
use relay_runtime::{Behind, EventRelay, RecentKeys};
use tokio_util::sync::CancellationToken;

use crate::assignment::{ShardAssignment, StaticShards};
use crate::index::RawItem;
use crate::partitions::Partitions;

pub mod decode;
pub mod holds;
pub mod pages;
pub mod ports;
pub mod stats;
pub mod sweep;
pub mod ttl;

use holds::HoldReleaser;
use pages::Pages;
pub use ports::{PollerPorts, Ports};
pub use stats::{DrainSummary, PassOutcome, PassStats};
use sweep::Sweep;
use ttl::TtlRefresh;

/// `origin` of the dead letters this relay sends, and the relay its metrics name.
pub const ORIGIN: &str = "relay-poller";

/// First pause after an idle or stalled pass; it doubles up to the configured maximum.
const MIN_IDLE_BACKOFF: Duration = Duration::from_millis(100);

/// Default of `--ttl-refresh-margin`: a pending item whose `ttl` is less than this away gets it
/// pushed forward.
pub const DEFAULT_TTL_REFRESH_MARGIN: Duration = Duration::from_secs(24 * 60 * 60);

/// Default of `--index-lag`: how long the pending index may still serve an item after it was
/// marked. A GSI's propagation is usually well under a second on AWS; a few seconds cover a bad
/// moment, and the cost is only the memory of the keys marked in that time.
pub const DEFAULT_INDEX_LAG: Duration = Duration::from_secs(5);

/// Most item keys remembered as recently marked: 10 s of a bus's highest `PutEvents` quota
/// (10,000 entries/s), about 20 MB. Beyond it the oldest are forgotten early (duplicates at most).
pub const RECENTLY_MARKED_CAPACITY: usize = 100_000;

/// Default of `--sweep-interval`: how often `run` scans the whole index for stray partitions.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// How much the poller does at once, and when. Which shards it polls is the assignment's; where
/// and as whom it publishes is the publisher's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollerSettings {
    /// The partitions this poller serves ([`Partitions`]): its region's on a global table. A
    /// partition (`GSI1PK`) of no region's shards is stray, and the sweep publishes its events
    /// when they are this poller's.
    pub partitions: Partitions,
    pub page_size: i32,
    pub shard_concurrency: usize,
    /// Status updates and dead letters in flight at once, per shard.
    pub mark_concurrency: usize,
    /// Longest pause between passes that found nothing to do (or only failures), in `run` and
    /// `drain` alike.
    pub idle_backoff_max: Duration,
    /// A pending item whose `ttl` is past or less than this away gets it pushed forward.
    pub ttl_refresh_margin: Duration,
    /// How often `run` sweeps the whole index for stray partitions (`drain` sweeps on its first
    /// pass and before it declares the index empty too).
    pub sweep_interval: Duration,
    /// How long the pending index may still serve an item after it was marked: the items this
    /// poller marked (or found already marked) within it are skipped, not published again.
    pub index_lag: Duration,
}

/// The poller, its components over its ports ([`PollerPorts`]): the index's pages and counts,
/// the publisher, the status store, the dead-letter sink, the TTL refresh's store and the
/// poller's side of the holds.
pub struct Poller<W: PollerPorts> {
    pages: Pages<W>,
    sweep: Sweep<W::Index>,
    settings: PollerSettings,
}

impl<W: PollerPorts> std::fmt::Debug for Poller<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poller")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl<W: PollerPorts> Poller<W> {
    pub fn new(ports: W, settings: PollerSettings) -> Self {
        let Ports {
            index,
            publisher,
            store,
            dead_letters,
            ttl,
            holds,
        } = ports.into_ports();
        let relay = EventRelay::new(
            publisher,
            store,
            Some(dead_letters),
            ORIGIN,
            settings.mark_concurrency,
        );
        Self {
            sweep: Sweep::new(
                index.clone(),
                settings.partitions.clone(),
                settings.sweep_interval,
            ),
            pages: Pages::new(
                index,
                relay,
                TtlRefresh::new(ttl, settings.ttl_refresh_margin, settings.mark_concurrency),
                HoldReleaser::new(
                    holds,
                    settings.ttl_refresh_margin,
                    settings.page_size,
                    settings.mark_concurrency,
                ),
                settings.page_size,
                RecentKeys::new(settings.index_lag, RECENTLY_MARKED_CAPACITY),
            ),
            settings,
        }
    }

    /// The poller with its events written and named as `outbound` says: the publisher's format
    /// and bus (the envelope, and no bus on its spans, unless set).
    #[must_use]
    pub fn with_outbound(mut self, outbound: relay_runtime::relay::Outbound) -> Self {
        self.pages = self.pages.with_outbound(outbound);
        self
    }

    /// The poller copying the payload of a pending event whose `ttl` it pushes out onto itself
    /// with `client` (the payload bucket's), so the bucket's lifecycle does not expire it under
    /// its event.
    #[must_use]
    pub fn with_payloads(mut self, client: aws_sdk_s3::Client) -> Self {
        self.pages = self.pages.with_payloads(client);
        self
    }

    pub fn settings(&self) -> &PollerSettings {
        &self.settings
    }

    /// The partitions this poller serves: its region's on a global table.
    pub fn partitions(&self) -> &Partitions {
        &self.settings.partitions
    }

    pub fn publisher(&self) -> &W::Publisher {
        self.pages.publisher()
    }

    /// One pass: the shards `assignment` gives it, in parallel, every page of events created
    /// before `cutoff`, after a sweep of the stray and orphaned partitions when one is due (see
    /// [`PollerSettings::sweep_interval`]); an aggregate whose event was not published is held
    /// back for the rest of the pass.
    ///
    /// Stops taking new pages once `cancel` fires; the page in hand is finished.
    pub async fn pass<A: ShardAssignment>(
        &self,
        assignment: &A,
        cutoff: DateTime<Utc>,
        cancel: &CancellationToken,
    ) -> PassStats {
        self.pass_sweeping(assignment, cutoff, self.sweep.due(), cancel)
            .await
    }

    /// [`Self::pass`], sweeping first when `sweep` says so (a drain decides for itself when).
    async fn pass_sweeping<A: ShardAssignment>(
        &self,
        assignment: &A,
        cutoff: DateTime<Utc>,
        sweep: bool,
        cancel: &CancellationToken,
    ) -> PassStats {
        // The smallest sort key at `cutoff`: every event created before it sorts below.
        let before = schema::pending_sort_key(&format_timestamp(cutoff), "");
        let before = before.as_str();
        let shards = assignment.for_pass().await;
        let mut stats = PassStats::default();
        let mut held_back: HashMap<String, Behind> = HashMap::new();
        if sweep {
            match self.sweep.partitions(&shards.orphaned).await {
                Ok(found) => {
                    for partition in &found.partitions {
                        // A region no longer served (handed back, or adopted by another) since
                        // the sweep: its pollers publish it now.
                        if !self.settings.partitions.begin_page(partition) {
                            continue;
                        }
                        let partition_stats = self
                            .pages
                            .poll(
                                partition,
                                None::<(&StaticShards, &PendingPartition)>,
                                before,
                                true,
                                &mut held_back,
                                cancel,
                            )
                            .await;
                        self.settings.partitions.end_page(partition);
                        stats.merge(partition_stats);
                    }
                    stats.stray_pending = Some(found.stray_pending);
                }
                Err(_) => stats.read_errors += 1,
            }
        }
        let held_back = &held_back;
        let shard_stats = stream::iter(shards.poll.iter().cloned())
            .map(|leased| async move {
                let mut held_back = held_back.clone();
                self.pages
                    .poll(
                        &leased.gsi1pk(),
                        Some((assignment, &leased)),
                        before,
                        sweep,
                        &mut held_back,
                        cancel,
                    )
                    .await
            })
            .buffer_unordered(self.settings.shard_concurrency)
            .fold(PassStats::default(), |mut total, shard| async move {
                total.merge(shard);
                total
            })
            .await;
        stats.merge(shard_stats);
        stats.read_errors += shards.read_errors;
        stats
    }

    /// Polls until `cancel` fires: passes over the shards `assignment` gives each pass, back to
    /// back while there is work, pausing with a doubling backoff (up to the configured maximum)
    /// while the index is idle or stalled.
    pub async fn run<A: ShardAssignment>(
        &self,
        assignment: &A,
        grace: Duration,
        cancel: CancellationToken,
    ) {
        let max_pause = self.settings.idle_backoff_max;
        let mut pause = MIN_IDLE_BACKOFF.min(max_pause);
        while !cancel.is_cancelled() {
            let now = Utc::now();
            let stats = self.pass(assignment, cutoff(now, grace), &cancel).await;
            stats.record(now);
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

    /// The backfill: passes over the shards `assignment` gives each pass (`--respect-leases`:
    /// those no other poller holds) until one finds nothing pending in them nor in any stray
    /// partition (complete), `max_stalled_passes` consecutive passes publish nothing (events
    /// remain), or `cancel` fires. Between stalled passes it pauses with the same capped, doubling
    /// backoff as `run`.
    pub async fn drain<A: ShardAssignment>(
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
                .pass_sweeping(assignment, cutoff(now, grace), swept, cancel)
                .await;
            passes += 1;
            stats.record(now);
            tracing::info!(
                pass = passes,
                taken = stats.taken,
                published = stats.published,
                already_marked = stats.already_marked,
                recently_marked = stats.recently_marked,
                dead_lettered = stats.dead_lettered,
                failed = stats.failed,
                not_marked = stats.not_marked,
                holds_released = stats.holds_released,
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
        match self.sweep.count_pending().await {
            Ok(n) => Some(n),
            Err(err) => {
                tracing::warn!(error = %outbox_shared::error::describe(&err), "could not count the events left pending");
                None
            }
        }
    }

    /// The totals so far, as a drain summary (for a drain cut short by the shutdown timeout).
    pub fn summary(&self, elapsed: Duration) -> DrainSummary {
        self.pages.totals().summary(elapsed)
    }

    /// Publishes `items` (pending items read from the table) now, through the same path as a
    /// pass, in the given order, holding back an aggregate after an event not published: what
    /// `redrive` publishes its events with.
    pub async fn publish_items(&self, items: Vec<RawItem>) -> PassStats {
        self.pages.relay_items(items).await
    }
}

/// Events created before this are old enough to publish: `grace` before `now`.
pub fn cutoff(now: DateTime<Utc>, grace: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(grace)
        .ok()
        .and_then(|grace| now.checked_sub_signed(grace))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

#[cfg(test)]
mod tests;
