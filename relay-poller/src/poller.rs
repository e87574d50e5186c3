//! The poll loop: one pass ([`Poller::pass`]) queries every configured shard in parallel, oldest
//! first, publishes what it finds, and marks each published item out of the index.
//! [`Poller::run`] repeats passes with an idle backoff; [`Poller::drain`] repeats them until the
//! index is empty.
//!
//! The sweep: a pass that is due for one (in `run`, once per sweep interval; in `drain`, the first
//! pass and the one that finds the shards empty)
//! first scans the whole index for partitions (`GSI1PK` values) outside the configured shard
//! count (a writer or another client on more shards, a reshard) and polls those the same way,
//! before the shards, so no event is stranded under a `GSI1PK` nobody queries.
//!
//! TTL: a pending item whose `ttl` is past or within the refresh margin gets its `ttl` pushed
//! forward (still only while it is pending) before anything else happens to it, so DynamoDB's TTL
//! never deletes an unpublished event that the poller can read.
//!
//! The per-event part (decode an item into an event or a poison case, dead-letter then mark, mark
//! concurrently) is `relay_runtime::relay`, shared with the stream relay; this module is the loop
//! around it.
//!
//! Nothing is marked before EventBridge has accepted the event, so a crash, a kill or an
//! abandoned pass at any point leaves the event pending, and a later pass publishes it again
//! (at-least-once; consumers de-duplicate on `metadata.eventId`).
//!
//! Order: a shard's pages are processed one after another, and the publisher never has two calls
//! with events of one aggregate in flight at once, so one aggregate's events leave in `GSI1SK`
//! order. When an event fails to publish, the later events of its aggregate are left pending for
//! the rest of the pass instead of overtaking it. The sweep runs before the shards and hands them
//! the aggregates it held back, so after a reshard an aggregate's older events (under the old
//! `GSI1PK`) leave before its newer ones.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::stream;
use outbox_shared::schema::{self, attr};
use outbox_shared::time::format_timestamp;
use outbox_shared::{ItemKey, OutboxItem, ShardCount};
use relay_runtime::{
    DeadLetterSink, EventRelay, MarkOutcome, Poison, Publisher, ReadyEvents, Settled, StatusStore,
};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::assignment::{PageStart, ShardAssignment, StaticShards};
use crate::index::{Cursor, PartitionCounts, PendingIndex, RawItem};
use crate::metrics;

/// `origin` of the dead letters this relay sends.
pub const ORIGIN: &str = "relay-poller";

/// First pause after an idle or stalled pass; it doubles up to the configured maximum.
const MIN_IDLE_BACKOFF: Duration = Duration::from_millis(100);

/// Default of `--ttl-refresh-margin`: a pending item whose `ttl` is less than this away gets it
/// pushed forward.
pub const DEFAULT_TTL_REFRESH_MARGIN: Duration = Duration::from_secs(24 * 60 * 60);

/// Default of `--sweep-interval`: how often `run` scans the whole index for stray partitions.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(5 * 60);

/// What the poller polls and how much it does at once. Where and as whom it publishes is the
/// publisher's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollerSettings {
    /// The shards this process polls.
    pub shards: Vec<u16>,
    /// The writer's shard count: a partition (`GSI1PK`) of a shard beyond it is stray, and the
    /// sweep publishes its events.
    pub shard_count: ShardCount,
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
    /// pass and before it declares the index empty).
    pub sweep_interval: Duration,
}

/// Counts of one pass, summed over its shards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PassStats {
    /// Items read from the index.
    pub taken: u64,
    /// Published and marked by this pass.
    pub published: u64,
    /// Published, but another relay had already marked the item (a conditional-mark miss).
    pub already_published: u64,
    pub dead_lettered: u64,
    /// Not published (retries exhausted, or the dead-letter queue refused a poison item).
    pub failed: u64,
    /// Left pending because an earlier event of the same aggregate failed in this pass.
    pub deferred: u64,
    /// Published (or dead-lettered), but the mark failed: the item stays pending and is handled
    /// again later.
    pub mark_errors: u64,
    /// Pending items whose `ttl` was near or past and was pushed forward.
    pub ttl_extended: u64,
    /// `ttl` extensions that failed (retried on the next read of the item).
    pub ttl_errors: u64,
    /// Pending events found by the sweep under partitions outside the shard count (`None` when
    /// this pass did not sweep).
    pub stray_pending: Option<u64>,
    /// Reads of the index (a shard's query, the sweep's scan) that failed.
    pub read_errors: u64,
    /// The pass stopped taking pages because of cancellation.
    pub interrupted: bool,
    /// `CreatedAt` of the oldest pending event seen (the first item of each shard).
    pub oldest_created_at: Option<String>,
}

/// What a pass achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassOutcome {
    /// Nothing pending below the cutoff in any shard.
    Empty,
    /// Some events left the index.
    Progress,
    /// Something is pending, but nothing left the index (failures only).
    Stalled,
}

impl PassStats {
    pub fn outcome(&self) -> PassOutcome {
        if self.published + self.already_published + self.dead_lettered > 0 {
            PassOutcome::Progress
        } else if self.taken == 0 && self.read_errors == 0 {
            PassOutcome::Empty
        } else {
            PassOutcome::Stalled
        }
    }

    fn merge(&mut self, other: Self) {
        self.taken += other.taken;
        self.published += other.published;
        self.already_published += other.already_published;
        self.dead_lettered += other.dead_lettered;
        self.failed += other.failed;
        self.deferred += other.deferred;
        self.mark_errors += other.mark_errors;
        self.ttl_extended += other.ttl_extended;
        self.ttl_errors += other.ttl_errors;
        self.stray_pending = match (self.stray_pending, other.stray_pending) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.read_errors += other.read_errors;
        self.interrupted |= other.interrupted;
        self.oldest_created_at = match (self.oldest_created_at.take(), other.oldest_created_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

/// The one-line summary `drain` prints.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DrainSummary {
    pub published: u64,
    pub already_published: u64,
    pub dead_lettered: u64,
    /// Events this drain leaves unpublished because of errors.
    pub failed: u64,
    /// Events still pending in the index when the drain stopped (0 when complete; `None` when
    /// they could not be counted).
    pub remaining: Option<u64>,
    pub seconds: f64,
    /// Passes over all shards.
    pub passes: u64,
    /// The index (the configured shards, below the cutoff) was seen empty.
    pub complete: bool,
    /// Stopped by SIGTERM or ctrl-c.
    pub interrupted: bool,
    /// `PutEvents` calls sent (filled in by the binary from the EventBridge publisher's stats).
    pub put_events_calls: u64,
    /// Shards the last pass left to the pollers holding their leases (`--respect-leases`).
    pub skipped_shards: Vec<u16>,
}

/// Counters over the life of one poller, readable while it works.
#[derive(Debug, Default)]
struct Totals {
    published: AtomicU64,
    already_published: AtomicU64,
    dead_lettered: AtomicU64,
    /// Items whose last attempt failed and that have not left the index since.
    failing: Mutex<HashSet<ItemKey>>,
}

impl Totals {
    fn failing(&self, key: ItemKey) {
        self.failing.lock().expect("not poisoned").insert(key);
    }

    fn done(&self, key: &ItemKey) {
        self.failing.lock().expect("not poisoned").remove(key);
    }
}

/// The poller, generic over its ports.
#[derive(Debug)]
pub struct Poller<I, P, S, D> {
    index: I,
    relay: EventRelay<P, S, D>,
    settings: PollerSettings,
    totals: Totals,
    /// When the last sweep started.
    last_sweep: Mutex<Option<Instant>>,
}

fn string_attr(raw: &RawItem, name: &str) -> Option<String> {
    raw.get(name).and_then(|v| v.as_s().ok()).cloned()
}

/// What an item read from the index is.
enum Decoded {
    /// The item, and the raw item kept whole for a dead letter should EventBridge reject it.
    Item(Box<(OutboxItem, RawItem)>),
    Poison(Box<Poison<RawItem>>),
}

/// Decodes an index item into an outbox item, or says why it is poison. `None` when even the
/// table key is missing (not an item of this table's shape; nothing can be done with it).
fn decode(raw: RawItem) -> Option<Decoded> {
    let key = ItemKey {
        pk: string_attr(&raw, attr::PK)?,
        sk: string_attr(&raw, attr::SK)?,
    };
    // Decoded as the stream relay decodes an image, so a reason names the attribute and never
    // quotes its value (values may hold personal data; reasons go to logs and dead letters).
    let image: HashMap<String, serde_dynamo::AttributeValue> =
        serde_dynamo::Item::from(raw.clone()).into();
    let item: OutboxItem = match outbox_shared::image::from_image(&image) {
        Ok(item) => item,
        Err(e) => {
            let event_id = string_attr(&raw, attr::EVENT_ID);
            return Some(Decoded::Poison(Box::new(Poison::undecodable(
                Some(key),
                event_id,
                e,
                raw,
            ))));
        }
    };
    if !item.is_outbox_event() {
        return Some(Decoded::Poison(Box::new(Poison {
            key: Some(key),
            event_id: Some(item.event_id),
            reason: format!(
                "item in the pending index is not an outbox event: its {} is not {}",
                attr::ENTITY_TYPE,
                schema::entity::OUTBOX_EVENT
            ),
            source: raw,
        })));
    }
    Some(Decoded::Item(Box::new((item, raw))))
}

/// The item as the dead letter carries it: its attributes as plain JSON.
fn dead_letter_record(raw: &RawItem) -> serde_json::Value {
    serde_dynamo::from_item::<_, serde_json::Value>(raw.clone())
        .unwrap_or_else(|e| serde_json::json!({ "unrepresentable": e.to_string() }))
}

impl<I, P, S, D> Poller<I, P, S, D>
where
    I: PendingIndex,
    P: Publisher,
    S: StatusStore,
    D: DeadLetterSink,
{
    pub fn new(
        index: I,
        publisher: P,
        store: S,
        dead_letters: D,
        settings: PollerSettings,
    ) -> Self {
        Self {
            index,
            relay: EventRelay::new(
                publisher,
                store,
                Some(dead_letters),
                ORIGIN,
                settings.mark_concurrency,
            ),
            settings,
            totals: Totals::default(),
            last_sweep: Mutex::new(None),
        }
    }

    pub fn settings(&self) -> &PollerSettings {
        &self.settings
    }

    pub fn publisher(&self) -> &P {
        self.relay.publisher()
    }

    /// One pass of `run`: [`Poller::pass`] for the events older than `grace` now.
    pub async fn pass_now(&self, grace: Duration, cancel: &CancellationToken) -> PassStats {
        self.pass(cutoff(Utc::now(), grace), cancel).await
    }

    /// One pass: every configured shard, all pages of events created before `cutoff`, after a
    /// sweep of the stray partitions when one is due (see [`PollerSettings::sweep_interval`]).
    ///
    /// Stops taking new pages once `cancel` fires; the page in hand is finished.
    pub async fn pass(&self, cutoff: DateTime<Utc>, cancel: &CancellationToken) -> PassStats {
        self.pass_on(&self.static_shards(), cutoff, cancel).await
    }

    /// [`Self::pass`] over the shards `assignment` gives this pass.
    pub async fn pass_on<A: ShardAssignment>(
        &self,
        assignment: &A,
        cutoff: DateTime<Utc>,
        cancel: &CancellationToken,
    ) -> PassStats {
        let sweep = self.sweep_due();
        self.pass_with(assignment, cutoff, sweep, cancel).await
    }

    /// The configured shards (`--shards`, or all), every page allowed.
    pub fn static_shards(&self) -> StaticShards {
        StaticShards(self.settings.shards.clone())
    }

    /// Whether a sweep is due now; if so, it counts as started.
    fn sweep_due(&self) -> bool {
        let mut last = self.last_sweep.lock().expect("not poisoned");
        let due = last.is_none_or(|at| at.elapsed() >= self.settings.sweep_interval);
        if due {
            *last = Some(Instant::now());
        }
        due
    }

    async fn pass_with<A: ShardAssignment>(
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
        let (sweep_stats, held) = if sweep {
            self.sweep(before, &shards.orphaned, cancel).await
        } else {
            (PassStats::default(), HashSet::new())
        };
        let held = &held;
        let mut stats = stream::iter(shards.poll.iter().copied())
            .map(|shard| async move {
                let mut blocked = held.clone();
                let partition = schema::pending_shard_pk(shard);
                let gate = ShardGate { assignment, shard };
                self.poll_partition(&partition, &gate, before, &mut blocked, cancel)
                    .await
            })
            .buffer_unordered(self.settings.shard_concurrency)
            .fold(PassStats::default(), |mut total, shard| async move {
                total.merge(shard);
                total
            })
            .await;
        stats.merge(sweep_stats);
        stats.read_errors += shards.read_errors;
        stats
    }

    /// Finds the partitions outside the shard count and polls each, oldest partition name first;
    /// then the partitions of `unheld` shards (no poller has held their lease for a lease
    /// duration). Returns the aggregates it held back after a failure, which the shards then hold
    /// back too.
    async fn sweep(
        &self,
        before: &str,
        unheld: &[u16],
        cancel: &CancellationToken,
    ) -> (PassStats, HashSet<String>) {
        let mut stats = PassStats::default();
        let mut blocked = HashSet::new();
        let (strays, orphans) = match self.index.partitions().await {
            Ok(all) => {
                let orphans: PartitionCounts = unheld
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
                return (stats, blocked);
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
                "pending events under shards no poller has held a lease on for a lease duration; publishing them"
            );
        }
        for partition in strays.keys().chain(orphans.keys()) {
            let partition_stats = self
                .poll_partition(partition, &Ungated, before, &mut blocked, cancel)
                .await;
            stats.merge(partition_stats);
        }
        stats.stray_pending = Some(stray_pending);
        (stats, blocked)
    }

    /// Counts every event pending in the index, stray partitions included.
    ///
    /// # Errors
    /// When the index can't be read.
    pub async fn count_pending(&self) -> Result<u64, crate::index::IndexError> {
        Ok(self.index.partitions().await?.values().sum())
    }

    /// Every page of `partition` below `before`. `blocked` holds the aggregates with a failed
    /// event in this pass: their later events must not overtake it.
    ///
    /// `gate` says whether each page may start (a lease can be lost or handed over mid-pass).
    async fn poll_partition(
        &self,
        partition: &str,
        gate: &impl Gate,
        before: &str,
        blocked: &mut HashSet<String>,
        cancel: &CancellationToken,
    ) -> PassStats {
        let mut stats = PassStats::default();
        let mut start: Option<Cursor> = None;
        loop {
            if cancel.is_cancelled() {
                stats.interrupted = true;
                break;
            }
            let PageStart::Go { stop_at } = gate.begin() else {
                tracing::debug!(
                    partition,
                    "no longer this poller's shard; pass over it stopped"
                );
                break;
            };
            let page = match self
                .index
                .query_page(partition, before, self.settings.page_size, start.take())
                .await
            {
                Ok(page) => page,
                Err(err) => {
                    gate.end();
                    tracing::warn!(partition, error = %err.failure, "pending index query failed; retrying next pass");
                    stats.read_errors += 1;
                    break;
                }
            };
            if stats.oldest_created_at.is_none() {
                stats.oldest_created_at = page
                    .items
                    .first()
                    .and_then(|item| string_attr(item, attr::CREATED_AT));
            }
            self.process_page(partition, page.items, stop_at, blocked, &mut stats)
                .await;
            gate.end();
            match page.next {
                Some(next) => start = Some(next),
                None => {
                    gate.polled();
                    break;
                }
            }
        }
        stats
    }

    async fn process_page(
        &self,
        partition: &str,
        items: Vec<RawItem>,
        stop_at: Option<tokio::time::Instant>,
        blocked: &mut HashSet<String>,
        stats: &mut PassStats,
    ) {
        stats.taken += items.len() as u64;
        let mut ready = ReadyEvents::with_capacity(items.len());
        let mut poison = Vec::new();
        let mut expiring = Vec::new();
        // `ttl` at or below this is pushed forward before the item can expire.
        let refresh_below =
            relay_runtime::status::ttl_after(Utc::now(), self.settings.ttl_refresh_margin);
        for raw in items {
            match decode(raw) {
                Some(Decoded::Item(decoded)) => {
                    let (item, raw) = *decoded;
                    if item.ttl.is_some_and(|ttl| ttl <= refresh_below) {
                        expiring.push((item.key(), item.event_id.clone()));
                    }
                    if blocked.contains(item.ordering_key()) {
                        stats.deferred += 1;
                        self.totals.failing(item.key());
                        continue;
                    }
                    if let Err(p) = ready.push_item(item, raw) {
                        poison.push(p);
                    }
                }
                Some(Decoded::Poison(p)) => poison.push(*p),
                None => {
                    tracing::error!(
                        partition,
                        "item in the pending index has no string PK/SK; skipped"
                    );
                    stats.failed += 1;
                }
            }
        }
        if !expiring.is_empty() {
            self.extend_ttls(expiring, stats).await;
        }
        if ready.is_empty() && poison.is_empty() {
            return;
        }
        let outcomes = self.relay.publish_until(ready.events(), stop_at).await;
        let settled = self
            .relay
            .settle(
                ready,
                outcomes.into_iter().map(Some).collect(),
                poison,
                dead_letter_record,
            )
            .await;
        let (mut marked, mut missed, mut dead_lettered) = (0, 0, 0);
        for result in settled {
            match result {
                Settled::Published { key, mark, .. } => match mark {
                    Ok(MarkOutcome::Marked) => {
                        marked += 1;
                        self.totals.done(&key);
                    }
                    Ok(MarkOutcome::AlreadyDone) => {
                        missed += 1;
                        self.totals.done(&key);
                    }
                    Err(_) => {
                        stats.mark_errors += 1;
                        self.totals.failing(key);
                    }
                },
                Settled::Failed {
                    key, ordering_key, ..
                } => {
                    stats.failed += 1;
                    metrics::publish_failed(1);
                    blocked.insert(ordering_key);
                    self.totals.failing(key);
                }
                Settled::NotAttempted { key, .. } => self.totals.failing(key),
                Settled::HeldBack {
                    key, ordering_key, ..
                } => {
                    stats.deferred += 1;
                    blocked.insert(ordering_key);
                    self.totals.failing(key);
                }
                // The poller's poison always has a key: decode needs PK and SK to read an item.
                Settled::DeadLettered { poison, mark } => match (poison.key, mark) {
                    (Some(key), Some(Ok(MarkOutcome::Marked))) => {
                        dead_lettered += 1;
                        self.totals.done(&key);
                    }
                    (Some(key), Some(Ok(MarkOutcome::AlreadyDone))) => self.totals.done(&key),
                    (Some(key), Some(Err(_))) => {
                        stats.mark_errors += 1;
                        self.totals.failing(key);
                    }
                    (_, None) | (None, _) => {}
                },
                Settled::NotDeadLettered { poison, .. } => {
                    stats.failed += 1;
                    if let Some(key) = poison.key {
                        self.totals.failing(key);
                    }
                }
            }
        }
        stats.published += marked;
        stats.already_published += missed;
        stats.dead_lettered += dead_lettered;
        self.totals.published.fetch_add(marked, Ordering::Relaxed);
        self.totals
            .already_published
            .fetch_add(missed, Ordering::Relaxed);
        self.totals
            .dead_lettered
            .fetch_add(dead_lettered, Ordering::Relaxed);
        metrics::published(marked);
        metrics::mark_misses(missed);
        metrics::dead_lettered(dead_lettered);
    }

    /// Publishes `items` (pending items read from the table) now, through the same path as a
    /// pass, in the given order, holding back an aggregate after a failure: what `redrive`
    /// publishes its events with.
    pub async fn publish_items(&self, items: Vec<RawItem>) -> PassStats {
        let mut stats = PassStats::default();
        let mut blocked = HashSet::new();
        let page_size = usize::try_from(self.settings.page_size).unwrap_or(1).max(1);
        for page in items.chunks(page_size) {
            self.process_page("redrive", page.to_vec(), None, &mut blocked, &mut stats)
                .await;
        }
        stats
    }

    /// Releases the aggregate holds whose aggregate has no pending event left (the poller has
    /// published what the stream relay left to it), so the stream relay publishes the aggregate's
    /// new events again. A hold set again meanwhile stays.
    pub async fn release_holds(&self) {
        let holds = match self.index.holds().await {
            Ok(holds) => holds,
            Err(err) => {
                tracing::warn!(error = %outbox_shared::error::describe(&err), "could not read the aggregate holds");
                return;
            }
        };
        for hold in holds {
            match self.index.has_pending(&hold).await {
                Ok(false) => match self.index.release(&hold).await {
                    Ok(true) => {
                        tracing::info!(ordering_key = %hold.ordering_key, "aggregate hold released");
                    }
                    Ok(false) => {}
                    Err(err) => {
                        tracing::warn!(error = %outbox_shared::error::describe(&err), "could not release an aggregate hold")
                    }
                },
                Ok(true) => {}
                Err(err) => {
                    tracing::warn!(error = %outbox_shared::error::describe(&err), "could not check an aggregate hold")
                }
            }
        }
    }

    /// Pushes the `ttl` of pending items forward, concurrently; a failure is retried the next
    /// time the item is read.
    async fn extend_ttls(&self, items: Vec<(ItemKey, String)>, stats: &mut PassStats) {
        let results: Vec<_> = stream::iter(items)
            .map(|(key, event_id)| async move {
                let result = self.relay.status().extend_ttl(&key).await;
                (event_id, result)
            })
            .buffer_unordered(self.settings.mark_concurrency)
            .collect()
            .await;
        for (event_id, result) in results {
            match result {
                Ok(MarkOutcome::Marked) => stats.ttl_extended += 1,
                Ok(MarkOutcome::AlreadyDone) => {}
                Err(err) => {
                    tracing::warn!(event_id = %event_id, error = %err.failure, "could not extend the ttl of a pending event");
                    stats.ttl_errors += 1;
                }
            }
        }
        metrics::ttl_extended(stats.ttl_extended);
    }

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
                already_published = stats.already_published,
                dead_lettered = stats.dead_lettered,
                failed = stats.failed,
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
            already_published: self.totals.already_published.load(Ordering::Relaxed),
            dead_lettered: self.totals.dead_lettered.load(Ordering::Relaxed),
            failed: self.totals.failing.lock().expect("not poisoned").len() as u64,
            remaining: None,
            seconds: elapsed.as_secs_f64(),
            passes: 0,
            complete: false,
            interrupted: false,
            put_events_calls: 0,
            skipped_shards: Vec::new(),
        }
    }
}

/// Whether the pages of one partition may start: a shard's depend on its assignment (its lease);
/// the sweep's partitions are [`Ungated`].
trait Gate: Sync {
    fn begin(&self) -> PageStart;
    fn end(&self);
    /// Every page of the partition was taken.
    fn polled(&self);
}

struct Ungated;

impl Gate for Ungated {
    fn begin(&self) -> PageStart {
        PageStart::Go { stop_at: None }
    }

    fn end(&self) {}

    fn polled(&self) {}
}

struct ShardGate<'a, A> {
    assignment: &'a A,
    shard: u16,
}

impl<A: ShardAssignment> Gate for ShardGate<'_, A> {
    fn begin(&self) -> PageStart {
        self.assignment.begin_page(self.shard)
    }

    fn end(&self) {
        self.assignment.end_page(self.shard);
    }

    fn polled(&self) {
        self.assignment.shard_polled(self.shard);
    }
}

/// The partitions of `all` outside `shard_count`'s shards: under another shard count, or not a
/// shard partition at all.
fn stray_partitions(all: PartitionCounts, shard_count: ShardCount) -> PartitionCounts {
    all.into_iter()
        .filter(|(partition, _)| {
            schema::parse_pending_shard_pk(partition).is_none_or(|shard| shard >= shard_count.get())
        })
        .collect()
}

/// Events created before this are old enough to publish.
fn cutoff(now: DateTime<Utc>, grace: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(grace)
        .ok()
        .and_then(|grace| now.checked_sub_signed(grace))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use chrono::TimeZone;
    use outbox_shared::{NewOutboxEvent, OutboundEvent, OutboxConfig};
    use relay_runtime::{DeadLetter, DeadLetterError, PublishOutcome, StatusError};

    use super::*;
    use crate::index::{IndexError, PendingPage, ShardBacklog};

    /// The index and the table in one: partition (GSI1PK) -> GSI1SK -> item; marks remove from
    /// the index.
    #[derive(Debug, Default)]
    struct Table {
        index: Mutex<BTreeMap<String, BTreeMap<String, RawItem>>>,
        /// `ttl` extensions by key.
        extended: Mutex<Vec<ItemKey>>,
        statuses: Mutex<HashMap<ItemKey, String>>,
        /// Events of these aggregates fail to publish.
        failing_aggregates: Mutex<HashSet<String>>,
        /// Event ids EventBridge rejects as malformed.
        rejected: Mutex<HashSet<String>>,
        published: Mutex<Vec<OutboundEvent>>,
        dead_letters: Mutex<Vec<DeadLetter>>,
        /// Keys whose mark "another relay" wins: the item leaves the index without our mark.
        stolen: Mutex<HashSet<ItemKey>>,
    }

    fn key_of(raw: &RawItem) -> ItemKey {
        ItemKey {
            pk: string_attr(raw, attr::PK).unwrap(),
            sk: string_attr(raw, attr::SK).unwrap(),
        }
    }

    impl Table {
        fn insert(&self, raw: RawItem) {
            let shard = string_attr(&raw, attr::GSI1PK).unwrap();
            let sk = string_attr(&raw, attr::GSI1SK).unwrap();
            self.statuses
                .lock()
                .unwrap()
                .insert(key_of(&raw), "PENDING".into());
            self.index
                .lock()
                .unwrap()
                .entry(shard)
                .or_default()
                .insert(sk, raw);
        }

        fn pending(&self) -> usize {
            self.index.lock().unwrap().values().map(BTreeMap::len).sum()
        }

        fn status(&self, key: &ItemKey) -> String {
            self.statuses.lock().unwrap()[key].clone()
        }

        fn mark(&self, key: &ItemKey, status: &str) -> MarkOutcome {
            if self.stolen.lock().unwrap().remove(key) {
                self.remove(key);
                return MarkOutcome::AlreadyDone;
            }
            if self.remove(key) {
                self.statuses
                    .lock()
                    .unwrap()
                    .insert(key.clone(), status.into());
                MarkOutcome::Marked
            } else {
                MarkOutcome::AlreadyDone
            }
        }

        fn remove(&self, key: &ItemKey) -> bool {
            let mut index = self.index.lock().unwrap();
            for shard in index.values_mut() {
                let found = shard
                    .iter()
                    .find(|(_, raw)| &key_of(raw) == key)
                    .map(|(sk, _)| sk.clone());
                if let Some(sk) = found {
                    shard.remove(&sk);
                    return true;
                }
            }
            false
        }
    }

    impl PendingIndex for &Table {
        async fn query_page(
            &self,
            shard: &str,
            before: &str,
            limit: i32,
            start: Option<Cursor>,
        ) -> Result<PendingPage, IndexError> {
            let index = self.index.lock().unwrap();
            let after = start.map(|c| c[attr::GSI1SK].as_s().unwrap().clone());
            let mut items: Vec<RawItem> = index
                .get(shard)
                .into_iter()
                .flatten()
                .filter(|(sk, _)| sk.as_str() < before && after.as_ref().is_none_or(|a| *sk > a))
                .map(|(_, raw)| raw.clone())
                .collect();
            let more = items.len() > limit as usize;
            items.truncate(limit as usize);
            let next = more.then(|| {
                let last = items.last().unwrap();
                HashMap::from([(attr::GSI1SK.to_owned(), last[attr::GSI1SK].clone())])
            });
            Ok(PendingPage { items, next })
        }

        async fn backlog(&self, _shard: u16) -> Result<ShardBacklog, IndexError> {
            unreachable!("not used by the poller")
        }

        async fn holds(&self) -> Result<Vec<crate::index::Hold>, IndexError> {
            Ok(Vec::new())
        }

        async fn has_pending(&self, _hold: &crate::index::Hold) -> Result<bool, IndexError> {
            unreachable!("no holds")
        }

        async fn release(&self, _hold: &crate::index::Hold) -> Result<bool, IndexError> {
            unreachable!("no holds")
        }

        async fn partitions(&self) -> Result<PartitionCounts, IndexError> {
            Ok(self
                .index
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, items)| !items.is_empty())
                .map(|(partition, items)| (partition.clone(), items.len() as u64))
                .collect())
        }
    }

    impl Publisher for &Table {
        async fn publish_until(
            &self,
            events: &[OutboundEvent],
            _stop_at: Option<tokio::time::Instant>,
        ) -> Vec<PublishOutcome> {
            let failing = self.failing_aggregates.lock().unwrap().clone();
            let rejected = self.rejected.lock().unwrap().clone();
            events
                .iter()
                .map(|e| {
                    if failing.contains(&e.ordering_key) {
                        PublishOutcome::Failed {
                            code: "ThrottlingException".into(),
                            message: "slow down".into(),
                        }
                    } else if rejected.contains(&e.event_id) {
                        PublishOutcome::Rejected {
                            code: "MalformedDetail".into(),
                            message: "bad".into(),
                        }
                    } else {
                        self.published.lock().unwrap().push(e.clone());
                        PublishOutcome::Published
                    }
                })
                .collect()
        }
    }

    impl StatusStore for &Table {
        async fn mark_published(&self, key: &ItemKey) -> Result<MarkOutcome, StatusError> {
            Ok(self.mark(key, "PUBLISHED"))
        }

        async fn mark_dead_lettered(
            &self,
            key: &ItemKey,
            _reason: &str,
        ) -> Result<MarkOutcome, StatusError> {
            Ok(self.mark(key, "DEAD_LETTERED"))
        }

        async fn held(
            &self,
            _ordering_keys: &[String],
        ) -> Result<std::collections::HashSet<String>, outbox_shared::SdkFailure> {
            Ok(std::collections::HashSet::new())
        }

        async fn hold(
            &self,
            _ordering_key: &str,
            _partition: &str,
        ) -> Result<(), outbox_shared::SdkFailure> {
            Ok(())
        }

        async fn extend_ttl(&self, key: &ItemKey) -> Result<MarkOutcome, StatusError> {
            self.extended.lock().unwrap().push(key.clone());
            Ok(MarkOutcome::Marked)
        }
    }

    impl DeadLetterSink for &Table {
        async fn send(&self, letter: &DeadLetter) -> Result<(), DeadLetterError> {
            self.dead_letters.lock().unwrap().push(letter.clone());
            Ok(())
        }
    }

    /// Well in the past, so drains (which cut off at the real now) take these events.
    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 1, 1, 10, 0, 0).unwrap()
    }

    /// A pending event of `aggregate` with `sequence`, created `offset_ms` after t0.
    fn event(aggregate: &str, sequence: u64, offset_ms: i64) -> RawItem {
        let new = NewOutboxEvent {
            partition_key: schema::user_pk("u1"),
            event_type: "OrderStatusChanged".into(),
            aggregate_type: "Order".into(),
            aggregate_id: aggregate.into(),
            sequence: Some(sequence),
            payload: serde_json::json!({"n": sequence}),
            trace_header: None,
        };
        let at = t0() + chrono::Duration::milliseconds(offset_ms);
        let id = format!("{aggregate}-{sequence}");
        OutboxItem::pending_with_id(new, &OutboxConfig::new("t"), at, id)
            .unwrap()
            .to_item()
            .unwrap()
    }

    fn poller(table: &Table, page_size: i32) -> Poller<&Table, &Table, &Table, &Table> {
        let settings = PollerSettings {
            shards: (0..16).collect(),
            shard_count: ShardCount::new(16).unwrap(),
            page_size,
            shard_concurrency: 4,
            mark_concurrency: 3,
            idle_backoff_max: Duration::from_secs(1),
            ttl_refresh_margin: DEFAULT_TTL_REFRESH_MARGIN,
            sweep_interval: DEFAULT_SWEEP_INTERVAL,
        };
        Poller::new(table, table, table, table, settings)
    }

    fn later() -> DateTime<Utc> {
        t0() + chrono::Duration::hours(1)
    }

    #[tokio::test]
    async fn steps_until_empty_publishing_each_aggregate_in_order() {
        // Given 3 aggregates with 25 events each, interleaved in time
        let table = Table::default();
        for seq in 1..=25 {
            for (i, agg) in ["a", "b", "c"].iter().enumerate() {
                table.insert(event(agg, seq, i64::try_from(seq * 3).unwrap() + i as i64));
            }
        }
        let poller = poller(&table, 7);
        let cancel = CancellationToken::new();

        // When the loop is driven pass by pass until it reports empty
        let first = poller.pass(later(), &cancel).await;
        let second = poller.pass(later(), &cancel).await;

        // Then the first pass took everything and the second found nothing
        assert_eq!(first.outcome(), PassOutcome::Progress);
        assert_eq!((first.taken, first.published), (75, 75));
        assert_eq!(second.outcome(), PassOutcome::Empty);
        assert_eq!(table.pending(), 0);
        let published = table.published.lock().unwrap().clone();
        assert_eq!(published.len(), 75);
        for agg in ["a", "b", "c"] {
            let ids: Vec<_> = published
                .iter()
                .filter(|e| e.ordering_key == agg)
                .map(|e| e.event_id.clone())
                .collect();
            let want: Vec<_> = (1..=25).map(|s| format!("{agg}-{s}")).collect();
            assert_eq!(ids, want);
        }
        let key = key_of(&event("a", 1, 0));
        assert_eq!(table.status(&key), "PUBLISHED");
    }

    #[tokio::test]
    async fn leaves_events_younger_than_the_cutoff_alone() {
        // Given an old and a young event
        let table = Table::default();
        table.insert(event("old", 1, 0));
        table.insert(event("young", 1, 10_000));

        // When a pass runs with a cutoff between them
        let stats = poller(&table, 100)
            .pass(
                t0() + chrono::Duration::seconds(5),
                &CancellationToken::new(),
            )
            .await;

        // Then only the old one is published
        assert_eq!(stats.published, 1);
        assert_eq!(table.status(&key_of(&event("old", 1, 0))), "PUBLISHED");
        assert_eq!(table.status(&key_of(&event("young", 1, 0))), "PENDING");
        assert_eq!(table.pending(), 1);
    }

    #[tokio::test]
    async fn poison_items_are_dead_lettered_and_do_not_stop_the_step() {
        // Given an undecodable item, one EventBridge rejects, and a good one
        let table = Table::default();
        let mut undecodable = event("p", 1, 0);
        undecodable.remove(attr::PAYLOAD);
        table.insert(undecodable.clone());
        table.insert(event("r", 1, 1));
        table.rejected.lock().unwrap().insert("r-1".into());
        table.insert(event("g", 1, 2));
        let poller = poller(&table, 100);

        // When the loop runs until empty
        let stats = poller.pass(later(), &CancellationToken::new()).await;
        let next = poller.pass(later(), &CancellationToken::new()).await;

        // Then both poison items are dead-lettered with reason and record, and marked
        assert_eq!((stats.published, stats.dead_lettered), (1, 2));
        assert_eq!(next.outcome(), PassOutcome::Empty);
        let letters = table.dead_letters.lock().unwrap().clone();
        assert_eq!(letters.len(), 2);
        let undecodable_letter = letters
            .iter()
            .find(|l| l.event_id.as_deref() == Some("p-1"))
            .unwrap();
        assert!(
            undecodable_letter.reason.contains("undecodable"),
            "{}",
            undecodable_letter.reason
        );
        assert_eq!(undecodable_letter.record["EventId"], "p-1");
        assert_eq!(undecodable_letter.origin, ORIGIN);
        let rejected = letters
            .iter()
            .find(|l| l.event_id.as_deref() == Some("r-1"))
            .unwrap();
        assert!(rejected.reason.contains("MalformedDetail"));
        assert_eq!(table.status(&key_of(&undecodable)), "DEAD_LETTERED");
        assert_eq!(table.status(&key_of(&event("g", 1, 0))), "PUBLISHED");
    }

    #[tokio::test]
    async fn a_failed_event_holds_back_the_rest_of_its_aggregate() {
        // Given aggregate x whose first event fails, over several pages, and a healthy aggregate y
        let table = Table::default();
        for seq in 1..=5 {
            table.insert(event("x", seq, i64::try_from(seq).unwrap()));
            table.insert(event("y", seq, i64::try_from(seq).unwrap()));
        }
        table.failing_aggregates.lock().unwrap().insert("x".into());
        let poller = poller(&table, 2);

        // When a drain runs while x keeps failing
        let summary = poller
            .drain(Duration::ZERO, 2, &CancellationToken::new())
            .await;

        // Then y is published, x stays pending, and the drain reports it incomplete
        assert!(!summary.complete);
        assert_eq!(summary.remaining, Some(5));
        assert_eq!(summary.published, 5);
        assert!(summary.failed >= 1, "{summary:?}");
        assert_eq!(table.pending(), 5);
        assert!(
            table
                .published
                .lock()
                .unwrap()
                .iter()
                .all(|e| e.ordering_key == "y")
        );

        // And once x recovers, a drain completes with x in order
        table.failing_aggregates.lock().unwrap().clear();
        let summary = poller
            .drain(Duration::ZERO, 2, &CancellationToken::new())
            .await;
        assert!(summary.complete);
        assert_eq!(summary.failed, 0);
        let x: Vec<_> = table
            .published
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.ordering_key == "x")
            .map(|e| e.event_id.clone())
            .collect();
        assert_eq!(x, ["x-1", "x-2", "x-3", "x-4", "x-5"]);
    }

    #[tokio::test]
    async fn a_lost_mark_race_is_counted_not_an_error() {
        // Given an event another relay marks while this one publishes it
        let table = Table::default();
        let raw = event("a", 1, 0);
        table.insert(raw.clone());
        table.stolen.lock().unwrap().insert(key_of(&raw));

        // When the poller drains
        let summary = poller(&table, 10)
            .drain(Duration::ZERO, 3, &CancellationToken::new())
            .await;

        // Then it is counted as already published and the drain completes
        assert_eq!((summary.published, summary.already_published), (0, 1));
        assert!(summary.complete);
        assert_eq!(summary.failed, 0);
    }

    #[tokio::test]
    async fn a_cancelled_poller_takes_no_work() {
        // Given pending events and a cancelled token
        let table = Table::default();
        table.insert(event("a", 1, 0));
        let cancel = CancellationToken::new();
        cancel.cancel();

        // When it passes, runs and drains
        let stats = poller(&table, 10).pass(later(), &cancel).await;
        poller(&table, 10).run(Duration::ZERO, cancel.clone()).await;
        let summary = poller(&table, 10).drain(Duration::ZERO, 3, &cancel).await;

        // Then nothing was taken and the event stays pending
        assert!(stats.interrupted);
        assert_eq!(stats.taken, 0);
        assert!(summary.interrupted && !summary.complete);
        assert_eq!(table.pending(), 1);
    }

    /// `raw` moved to `partition`, as a writer on another shard count would have put it.
    fn under(mut raw: RawItem, partition: &str) -> RawItem {
        raw.insert(
            attr::GSI1PK.to_owned(),
            aws_sdk_dynamodb::types::AttributeValue::S(partition.to_owned()),
        );
        raw
    }

    #[tokio::test]
    async fn the_sweep_publishes_partitions_outside_the_shard_count_in_aggregate_order() {
        // Given aggregate m resharded from 32 to 16 shards: events 1-3 under shard 20 of 32, 4-5
        // under its own shard of 16; and aggregate n entirely under shard 31 of 32
        let table = Table::default();
        let stray = schema::pending_shard_pk(20);
        for seq in 1..=3 {
            table.insert(under(event("m", seq, i64::try_from(seq).unwrap()), &stray));
        }
        for seq in 4..=5 {
            table.insert(event("m", seq, i64::try_from(seq).unwrap()));
        }
        table.insert(under(event("n", 1, 0), &schema::pending_shard_pk(31)));
        let poller = poller(&table, 2);

        // When a drain runs with the poller on 16 shards
        let summary = poller
            .drain(Duration::ZERO, 2, &CancellationToken::new())
            .await;

        // Then everything is published, m in sequence order, and the index is empty
        assert!(summary.complete, "{summary:?}");
        assert_eq!((summary.published, summary.remaining), (6, Some(0)));
        assert_eq!(table.pending(), 0);
        let m: Vec<_> = table
            .published
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.ordering_key == "m")
            .map(|e| e.event_id.clone())
            .collect();
        assert_eq!(m, ["m-1", "m-2", "m-3", "m-4", "m-5"]);
    }

    #[tokio::test]
    async fn a_stray_aggregate_that_fails_holds_back_its_events_in_the_shards() {
        // Given aggregate m with event 1 under a stray partition, failing, and event 2 in a shard
        let table = Table::default();
        table.insert(under(event("m", 1, 1), &schema::pending_shard_pk(20)));
        table.insert(event("m", 2, 2));
        table.failing_aggregates.lock().unwrap().insert("m".into());

        // When a pass runs
        let stats = poller(&table, 10)
            .pass(later(), &CancellationToken::new())
            .await;

        // Then event 2 did not overtake event 1
        assert_eq!(stats.stray_pending, Some(1));
        assert_eq!((stats.failed, stats.deferred), (1, 1));
        assert!(table.published.lock().unwrap().is_empty());
        assert_eq!(table.pending(), 2);
    }

    #[tokio::test]
    async fn run_sweeps_once_per_interval_and_every_drain_pass_sweeps() {
        // Given a stray event and a poller whose sweep interval is long
        let table = Table::default();
        let poller = poller(&table, 10);
        let cancel = CancellationToken::new();

        // When passes run back to back
        let first = poller.pass(later(), &cancel).await;
        table.insert(under(event("n", 1, 0), &schema::pending_shard_pk(31)));
        let second = poller.pass(later(), &cancel).await;

        // Then only the first swept, and the stray event waits for the next sweep...
        assert_eq!(first.stray_pending, Some(0));
        assert_eq!(second.stray_pending, None);
        assert_eq!(table.pending(), 1);
        // ...which a drain always does
        let summary = poller.drain(Duration::ZERO, 2, &cancel).await;
        assert!(summary.complete);
        assert_eq!(table.pending(), 0);
    }

    #[tokio::test]
    async fn pending_items_near_their_ttl_get_it_extended_before_anything_else() {
        // Given an event whose ttl is past (written in January with 7 days), one whose ttl is
        // far away, and a failing aggregate whose event stays pending
        let table = Table::default();
        let expired = event("a", 1, 0);
        let mut fresh = event("b", 1, 1);
        let far = Utc::now().timestamp() + 30 * 24 * 3600;
        fresh.insert(
            attr::TTL.to_owned(),
            aws_sdk_dynamodb::types::AttributeValue::N(far.to_string()),
        );
        let held = event("c", 1, 2);
        for raw in [&expired, &fresh, &held] {
            table.insert(raw.clone());
        }
        table.failing_aggregates.lock().unwrap().insert("c".into());

        // When a pass runs
        let stats = poller(&table, 10)
            .pass(later(), &CancellationToken::new())
            .await;

        // Then the two items with a past ttl were extended (the one left pending included), the
        // fresh one was not
        assert_eq!(stats.ttl_extended, 2);
        let extended = table.extended.lock().unwrap().clone();
        assert!(extended.contains(&key_of(&expired)));
        assert!(extended.contains(&key_of(&held)));
        assert!(!extended.contains(&key_of(&fresh)));
        assert_eq!(table.status(&key_of(&held)), "PENDING");
    }

    #[tokio::test]
    async fn poison_reasons_name_attributes_and_never_quote_values() {
        // Given pending items whose attributes hold personal data in the wrong type or entity
        let table = Table::default();
        let secret = "jane.doe@example.com";
        let mut wrong_type = event("p", 1, 0);
        wrong_type.insert(
            attr::SEQUENCE.to_owned(),
            aws_sdk_dynamodb::types::AttributeValue::S(secret.to_owned()),
        );
        table.insert(wrong_type);
        let mut not_outbox = event("q", 1, 1);
        not_outbox.insert(
            attr::ENTITY_TYPE.to_owned(),
            aws_sdk_dynamodb::types::AttributeValue::S(secret.to_owned()),
        );
        table.insert(not_outbox);

        // When they are drained
        let summary = poller(&table, 10)
            .drain(Duration::ZERO, 2, &CancellationToken::new())
            .await;

        // Then both are dead-lettered with reasons that name the attribute but not the value
        assert_eq!(summary.dead_lettered, 2);
        let letters = table.dead_letters.lock().unwrap().clone();
        for letter in &letters {
            assert!(!letter.reason.contains(secret), "{}", letter.reason);
        }
        let reasons: Vec<&str> = letters.iter().map(|l| l.reason.as_str()).collect();
        assert!(
            reasons.iter().any(|r| r.contains(attr::SEQUENCE)),
            "{reasons:?}"
        );
        assert!(
            reasons.iter().any(|r| r.contains(attr::ENTITY_TYPE)),
            "{reasons:?}"
        );
    }

    #[test]
    fn outcome_reflects_progress() {
        let empty = PassStats::default();
        assert_eq!(empty.outcome(), PassOutcome::Empty);
        let stalled = PassStats {
            taken: 3,
            failed: 3,
            ..PassStats::default()
        };
        assert_eq!(stalled.outcome(), PassOutcome::Stalled);
        let errored = PassStats {
            read_errors: 1,
            ..PassStats::default()
        };
        assert_eq!(errored.outcome(), PassOutcome::Stalled);
        let progress = PassStats {
            taken: 3,
            already_published: 1,
            ..PassStats::default()
        };
        assert_eq!(progress.outcome(), PassOutcome::Progress);
    }

    #[test]
    fn cutoff_never_underflows() {
        assert_eq!(
            cutoff(t0(), Duration::from_secs(30)),
            t0() - chrono::Duration::seconds(30)
        );
        assert_eq!(cutoff(t0(), Duration::MAX), DateTime::<Utc>::MIN_UTC);
    }
}
