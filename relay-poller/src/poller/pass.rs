//! One pass: every shard the assignment gives it, in parallel (after a sweep when one is due),
//! each partition's pages one after another, oldest first; each page decoded, its expiring `ttl`s
//! refreshed, its events published, and each event settled: marked, dead-lettered then marked, or
//! left pending. An aggregate whose event failed is held back for the rest of the pass. The
//! items the index still returns after this poller marked them (the index lags the table) are
//! skipped before anything else.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::stream;
use outbox_shared::schema::{self, attr};
use outbox_shared::time::format_timestamp;
use relay_runtime::{
    DeadLetterSink, HoldStore, MarkOutcome, Publisher, ReadyEvents, Settled, StatusStore,
};
use tokio_util::sync::CancellationToken;

use super::decode::{Decoded, dead_letter_record, decode, item_key, string_attr};
use super::stats::PassStats;
use super::{Poller, cutoff};
use crate::assignment::{PageStart, ShardAssignment, StaticShards};
use crate::index::{Cursor, PendingIndex, RawItem};
use crate::metrics;

impl<I, P, S, D, H> Poller<I, P, S, D, H>
where
    I: PendingIndex,
    P: Publisher,
    S: StatusStore,
    D: DeadLetterSink,
    H: HoldStore,
{
    /// One pass of `run`: [`Poller::pass`] for the events older than `grace` now.
    pub async fn pass_now(&self, grace: Duration, cancel: &CancellationToken) -> PassStats {
        self.pass(cutoff(Utc::now(), grace), cancel).await
    }

    /// One pass: every configured shard, all pages of events created before `cutoff`, after a
    /// sweep of the stray partitions when one is due (see
    /// [`super::PollerSettings::sweep_interval`]).
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

    pub(super) async fn pass_with<A: ShardAssignment>(
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
        let (sweep_stats, held_back) = if sweep {
            self.sweep(before, &shards.orphaned, cancel).await
        } else {
            (PassStats::default(), HashSet::new())
        };
        let held_back = &held_back;
        let mut stats = stream::iter(shards.poll.iter().copied())
            .map(|shard| async move {
                let mut held_back = held_back.clone();
                let partition = schema::pending_shard_pk(shard);
                self.poll_partition(
                    &partition,
                    Some((assignment, shard)),
                    before,
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
        stats.merge(sweep_stats);
        stats.read_errors += shards.read_errors;
        stats
    }

    /// Every page of `partition` below `before`. `held_back` holds the aggregates with a failed
    /// event in this pass: their later events must not overtake it.
    ///
    /// `lease` is the assignment and shard of a shard's partition, which says whether each page
    /// may start (a lease can be lost or handed over mid-pass); `None` for the partitions the
    /// sweep found, whose pages always may.
    pub(super) async fn poll_partition<A: ShardAssignment>(
        &self,
        partition: &str,
        lease: Option<(&A, u16)>,
        before: &str,
        held_back: &mut HashSet<String>,
        cancel: &CancellationToken,
    ) -> PassStats {
        let mut stats = PassStats::default();
        let mut start: Option<Cursor> = None;
        loop {
            if cancel.is_cancelled() {
                stats.interrupted = true;
                break;
            }
            let page_start = lease.map_or(PageStart::Go { stop_at: None }, |(a, shard)| {
                a.begin_page(shard)
            });
            let PageStart::Go { stop_at } = page_start else {
                tracing::debug!(
                    partition,
                    "no longer this poller's shard; pass over it stopped"
                );
                break;
            };
            let page = self
                .index
                .query_page(partition, before, self.settings.page_size, start.take())
                .await;
            let page = match page {
                Ok(page) => page,
                Err(err) => {
                    if let Some((a, shard)) = lease {
                        a.end_page(shard);
                    }
                    tracing::warn!(partition, error = %err.failure, "pending index query failed; retrying next pass");
                    stats.read_errors += 1;
                    break;
                }
            };
            let items = self.without_recently_marked(page.items, &mut stats);
            if stats.oldest_created_at.is_none() {
                stats.oldest_created_at = items
                    .first()
                    .and_then(|item| string_attr(item, attr::CREATED_AT));
            }
            self.process_page(partition, items, stop_at, held_back, &mut stats)
                .await;
            if let Some((a, shard)) = lease {
                a.end_page(shard);
            }
            match page.next {
                Some(next) => start = Some(next),
                None => {
                    if let Some((a, shard)) = lease {
                        a.shard_polled(shard);
                    }
                    break;
                }
            }
        }
        stats
    }

    /// `items` without those this poller marked (or found already marked) within the index's lag:
    /// the index, eventually consistent, can still return an item for a while after the table
    /// marked it, and publishing it again would only be a duplicate. Counted in `stats`.
    fn without_recently_marked(&self, items: Vec<RawItem>, stats: &mut PassStats) -> Vec<RawItem> {
        let before = items.len();
        let items: Vec<RawItem> = items
            .into_iter()
            .filter(|raw| !item_key(raw).is_some_and(|key| self.recently_marked.contains(&key)))
            .collect();
        stats.recently_marked += (before - items.len()) as u64;
        items
    }

    /// Decodes, refreshes, publishes and settles one page, adding what happened to `stats`.
    async fn process_page(
        &self,
        partition: &str,
        items: Vec<RawItem>,
        stop_at: Option<tokio::time::Instant>,
        held_back: &mut HashSet<String>,
        stats: &mut PassStats,
    ) {
        stats.taken += items.len() as u64;
        let mut ready = ReadyEvents::with_capacity(items.len());
        let mut poison = Vec::new();
        let mut expiring = Vec::new();
        // `ttl` at or below this is pushed forward before the item can expire.
        let refresh_below =
            relay_runtime::status_store::ttl_after(Utc::now(), self.settings.ttl_refresh_margin);
        for raw in items {
            match decode(raw) {
                Some(Decoded::Item(decoded)) => {
                    let (item, raw) = *decoded;
                    if item.ttl.is_some_and(|ttl| ttl <= refresh_below) {
                        expiring.push((item.key(), item.event_id.clone()));
                    }
                    if held_back.contains(item.ordering_key()) {
                        stats.held_back += 1;
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
            .settle(ready, outcomes, poison, dead_letter_record)
            .await;
        self.account(settled, held_back, stats);
    }

    /// What the settled events of a page mean for the pass: counted in `stats`, the poller's
    /// totals and the metrics; the aggregate of an event not published is held back.
    fn account(
        &self,
        settled: Vec<Settled<RawItem>>,
        held_back: &mut HashSet<String>,
        stats: &mut PassStats,
    ) {
        let (mut marked, mut already_marked, mut dead_lettered, mut not_marked) = (0, 0, 0, 0);
        // Out of the table's pending set, and possibly still in the index for its lag.
        let mut left_pending = Vec::new();
        for result in settled {
            match result {
                Settled::Published { key, mark, .. } => match mark {
                    Ok(MarkOutcome::Marked) => {
                        marked += 1;
                        self.totals.done(&key);
                        left_pending.push(key);
                    }
                    Ok(MarkOutcome::AlreadyMarked) => {
                        already_marked += 1;
                        self.totals.done(&key);
                        left_pending.push(key);
                    }
                    Err(_) => {
                        not_marked += 1;
                        self.totals.failing(key);
                    }
                },
                Settled::Failed {
                    key, ordering_key, ..
                } => {
                    stats.failed += 1;
                    metrics::publish_failed(1);
                    held_back.insert(ordering_key);
                    self.totals.failing(key);
                }
                Settled::NotSent { key, .. } => self.totals.failing(key),
                Settled::HeldBack {
                    key, ordering_key, ..
                } => {
                    stats.held_back += 1;
                    held_back.insert(ordering_key);
                    self.totals.failing(key);
                }
                // The poller's poison always has a key: decode needs PK and SK to read an item.
                Settled::DeadLettered { poison, mark } => match (poison.key, mark) {
                    (Some(key), Some(Ok(MarkOutcome::Marked))) => {
                        dead_lettered += 1;
                        self.totals.done(&key);
                        left_pending.push(key);
                    }
                    (Some(key), Some(Ok(MarkOutcome::AlreadyMarked))) => {
                        self.totals.done(&key);
                        left_pending.push(key);
                    }
                    (Some(key), Some(Err(_))) => {
                        not_marked += 1;
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
        self.recently_marked.remember(left_pending);
        stats.published += marked;
        stats.already_marked += already_marked;
        stats.dead_lettered += dead_lettered;
        stats.not_marked += not_marked;
        self.totals.published.fetch_add(marked, Ordering::Relaxed);
        self.totals
            .already_marked
            .fetch_add(already_marked, Ordering::Relaxed);
        self.totals
            .dead_lettered
            .fetch_add(dead_lettered, Ordering::Relaxed);
        self.totals
            .not_marked
            .fetch_add(not_marked, Ordering::Relaxed);
        metrics::published(marked);
        metrics::already_marked(already_marked);
        metrics::dead_lettered(dead_lettered);
        metrics::not_marked(not_marked);
    }

    /// Publishes `items` (pending items read from the table) now, through the same path as a
    /// pass, in the given order, holding back an aggregate after a failure: what `redrive`
    /// publishes its events with.
    pub async fn publish_items(&self, items: Vec<RawItem>) -> PassStats {
        let mut stats = PassStats::default();
        let mut held_back = HashSet::new();
        let page_size = usize::try_from(self.settings.page_size).unwrap_or(1).max(1);
        for page in items.chunks(page_size) {
            self.process_page("redrive", page.to_vec(), None, &mut held_back, &mut stats)
                .await;
        }
        stats
    }
}
