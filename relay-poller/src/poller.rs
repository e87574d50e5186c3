//! The poll loop: one step ([`Poller::poll_once`]) queries every configured shard in parallel,
//! oldest first, publishes what it finds, and flips each published item out of the index.
//! [`Poller::run`] repeats the step with an idle backoff; [`Poller::drain`] repeats it until the
//! index is empty.
//!
//! Nothing is flipped before EventBridge has accepted the event, so a crash, a kill or an
//! abandoned step at any point leaves the event pending, and a later step publishes it again
//! (at-least-once; consumers de-duplicate on `metadata.eventId`).
//!
//! Order: a shard's pages are processed one after another, and the publisher never has two calls
//! with events of one aggregate in flight at once, so one aggregate's events leave in `GSI1SK`
//! order. When an event fails to publish, the later events of its aggregate are left pending for
//! the rest of the step instead of overtaking it.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::stream;
use outbox_shared::schema::{self, attr};
use outbox_shared::time::format_timestamp;
use outbox_shared::{
    DeadLetter, DeadLetterSink, FlipOutcome, ItemKey, OutboundEvent, OutboxItem, PublishOutcome,
    Publisher, StatusStore,
};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::index::{Cursor, PendingIndex, RawItem};
use crate::metrics;

/// `origin` of the dead letters this relay sends.
pub const ORIGIN: &str = "relay-poller";

/// First pause after an idle or stalled step; it doubles up to the configured maximum.
const MIN_IDLE_BACKOFF: Duration = Duration::from_millis(100);

/// What the poller polls and how much it does at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollerSettings {
    /// The shards this process polls.
    pub shards: Vec<u16>,
    pub page_size: i32,
    pub shard_concurrency: usize,
    pub flip_concurrency: usize,
    pub event_bus_name: String,
    pub source: String,
}

/// Counts of one step, summed over its shards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CycleStats {
    /// Items read from the index.
    pub taken: u64,
    /// Published and flipped by this step.
    pub published: u64,
    /// Published, but another relay had already flipped the item (a conditional-flip miss).
    pub already_published: u64,
    pub dead_lettered: u64,
    /// Not published (retries exhausted, or the dead-letter queue refused a poison item).
    pub failed: u64,
    /// Left pending because an earlier event of the same aggregate failed in this step.
    pub deferred: u64,
    /// Published, but the flip failed: the item stays pending and is published again later.
    pub flip_errors: u64,
    /// Shards whose query failed.
    pub query_errors: u64,
    /// The step stopped taking pages because of cancellation.
    pub interrupted: bool,
    /// `CreatedAt` of the oldest pending event seen (the first item of each shard).
    pub oldest_created_at: Option<String>,
}

/// What a step achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CycleOutcome {
    /// Nothing pending below the cutoff in any shard.
    Empty,
    /// Some events left the index.
    Progress,
    /// Something is pending, but nothing left the index (failures only).
    Stalled,
}

impl CycleStats {
    pub fn outcome(&self) -> CycleOutcome {
        if self.published + self.already_published + self.dead_lettered > 0 {
            CycleOutcome::Progress
        } else if self.taken == 0 && self.query_errors == 0 {
            CycleOutcome::Empty
        } else {
            CycleOutcome::Stalled
        }
    }

    fn merge(&mut self, other: Self) {
        self.taken += other.taken;
        self.published += other.published;
        self.already_published += other.already_published;
        self.dead_lettered += other.dead_lettered;
        self.failed += other.failed;
        self.deferred += other.deferred;
        self.flip_errors += other.flip_errors;
        self.query_errors += other.query_errors;
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
    pub seconds: f64,
    /// Steps over all shards.
    pub passes: u64,
    /// The index (the configured shards, below the cutoff) was seen empty.
    pub complete: bool,
    /// Stopped by SIGTERM or ctrl-c.
    pub interrupted: bool,
    /// `PutEvents` calls sent (filled in by the binary from the EventBridge publisher's stats).
    pub put_events_calls: u64,
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
    publisher: P,
    store: S,
    dead_letters: D,
    settings: PollerSettings,
    totals: Totals,
}

/// An item that can never be published, and why.
struct Poison {
    key: ItemKey,
    event_id: Option<String>,
    reason: String,
}

/// A pending item ready to publish.
struct Ready {
    key: ItemKey,
    event: OutboundEvent,
    raw: RawItem,
}

fn string_attr(raw: &RawItem, name: &str) -> Option<String> {
    raw.get(name).and_then(|v| v.as_s().ok()).cloned()
}

/// Decodes an index item into an event, or says why it is poison. `None` when even the table
/// key is missing (not an item of this table's shape; nothing can be done with it).
/// The poison case is boxed: it carries the whole raw item, and decoding mostly succeeds.
fn decode(raw: RawItem, bus: &str, source: &str) -> Option<Result<Ready, Box<(Poison, RawItem)>>> {
    let key = ItemKey {
        pk: string_attr(&raw, attr::PK)?,
        sk: string_attr(&raw, attr::SK)?,
    };
    let poison = |reason: String, raw: RawItem| {
        let event_id = string_attr(&raw, attr::EVENT_ID);
        Err(Box::new((
            Poison {
                key: key.clone(),
                event_id,
                reason,
            },
            raw,
        )))
    };
    let item: OutboxItem = match serde_dynamo::from_item(raw.clone()) {
        Ok(item) => item,
        Err(e) => return Some(poison(format!("undecodable outbox item: {e}"), raw)),
    };
    if !item.is_outbox_event() {
        let reason = format!(
            "item in the pending index has {} {:?}, not {:?}",
            attr::ENTITY_TYPE,
            item.entity_type,
            schema::entity::OUTBOX_EVENT
        );
        return Some(poison(reason, raw));
    }
    Some(match OutboundEvent::from_item(&item, bus, source) {
        Ok(event) => Ok(Ready {
            key: key.clone(),
            event,
            raw,
        }),
        Err(e) => poison(e.to_string(), raw),
    })
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
            publisher,
            store,
            dead_letters,
            settings,
            totals: Totals::default(),
        }
    }

    pub fn settings(&self) -> &PollerSettings {
        &self.settings
    }

    pub fn publisher(&self) -> &P {
        &self.publisher
    }

    /// One step of `run`: [`Poller::poll_once`] for the events older than `grace` now.
    pub async fn step(&self, grace: Duration, cancel: &CancellationToken) -> CycleStats {
        self.poll_once(cutoff(Utc::now(), grace), cancel).await
    }

    /// One step: every configured shard, all pages of events created before `cutoff`.
    ///
    /// Stops taking new pages once `cancel` fires; the page in hand is finished.
    pub async fn poll_once(&self, cutoff: DateTime<Utc>, cancel: &CancellationToken) -> CycleStats {
        // The smallest sort key at `cutoff`: every event created before it sorts below.
        let before = schema::pending_sort_key(&format_timestamp(cutoff), "");
        let before = before.as_str();
        stream::iter(self.settings.shards.iter().copied())
            .map(|shard| self.poll_shard(shard, before, cancel))
            .buffer_unordered(self.settings.shard_concurrency)
            .fold(CycleStats::default(), |mut total, shard| async move {
                total.merge(shard);
                total
            })
            .await
    }

    async fn poll_shard(&self, shard: u16, before: &str, cancel: &CancellationToken) -> CycleStats {
        let mut stats = CycleStats::default();
        // Aggregates with a failed event in this step: their later events must not overtake it.
        let mut blocked: HashSet<String> = HashSet::new();
        let mut start: Option<Cursor> = None;
        loop {
            if cancel.is_cancelled() {
                stats.interrupted = true;
                break;
            }
            let page = match self
                .index
                .query_page(shard, before, self.settings.page_size, start.take())
                .await
            {
                Ok(page) => page,
                Err(err) => {
                    tracing::warn!(shard, error = %err, "pending index query failed; retrying next step");
                    stats.query_errors += 1;
                    break;
                }
            };
            if stats.oldest_created_at.is_none() {
                stats.oldest_created_at = page
                    .items
                    .first()
                    .and_then(|item| string_attr(item, attr::CREATED_AT));
            }
            self.process_page(shard, page.items, &mut blocked, &mut stats)
                .await;
            match page.next {
                Some(next) => start = Some(next),
                None => break,
            }
        }
        stats
    }

    async fn process_page(
        &self,
        shard: u16,
        items: Vec<RawItem>,
        blocked: &mut HashSet<String>,
        stats: &mut CycleStats,
    ) {
        stats.taken += items.len() as u64;
        let mut ready = Vec::with_capacity(items.len());
        for raw in items {
            match decode(raw, &self.settings.event_bus_name, &self.settings.source) {
                Some(Ok(item)) if blocked.contains(&item.event.ordering_key) => {
                    stats.deferred += 1;
                    self.totals.failing(item.key);
                }
                Some(Ok(item)) => ready.push(item),
                Some(Err(poisoned)) => {
                    let (poison, raw) = *poisoned;
                    self.dead_letter(poison, &raw, stats).await
                }
                None => {
                    tracing::error!(
                        shard,
                        "item in the pending index has no string PK/SK; skipped"
                    );
                    stats.failed += 1;
                }
            }
        }
        if ready.is_empty() {
            return;
        }
        let events: Vec<OutboundEvent> = ready.iter().map(|r| r.event.clone()).collect();
        let outcomes = self.publisher.publish(&events).await;
        let mut flips = Vec::with_capacity(ready.len());
        for (item, outcome) in ready.into_iter().zip(outcomes) {
            match outcome {
                PublishOutcome::Published => flips.push(item),
                PublishOutcome::Rejected { code, message } => {
                    let poison = Poison {
                        key: item.key,
                        event_id: Some(item.event.event_id),
                        reason: format!("EventBridge rejected the event: {code}: {message}"),
                    };
                    self.dead_letter(poison, &item.raw, stats).await;
                }
                PublishOutcome::Failed { code, message } => {
                    tracing::warn!(shard, event_id = %item.event.event_id, code = %code, error = %message, "event not published; it stays pending");
                    stats.failed += 1;
                    metrics::publish_failed(1);
                    blocked.insert(item.event.ordering_key);
                    self.totals.failing(item.key);
                }
            }
        }
        let results: Vec<_> = stream::iter(flips)
            .map(|item| async move {
                let result = self.store.mark_published(&item.key).await;
                (item, result)
            })
            .buffer_unordered(self.settings.flip_concurrency)
            .collect()
            .await;
        let (mut flipped, mut missed) = (0, 0);
        for (item, result) in results {
            match result {
                Ok(FlipOutcome::Flipped) => {
                    flipped += 1;
                    self.totals.done(&item.key);
                }
                Ok(FlipOutcome::AlreadyDone) => {
                    tracing::debug!(shard, event_id = %item.event.event_id, "already flipped by another relay");
                    missed += 1;
                    self.totals.done(&item.key);
                }
                Err(err) => {
                    tracing::warn!(shard, event_id = %item.event.event_id, error = %err, "published but not flipped; it will be published again");
                    stats.flip_errors += 1;
                    self.totals.failing(item.key);
                }
            }
        }
        stats.published += flipped;
        stats.already_published += missed;
        self.totals.published.fetch_add(flipped, Ordering::Relaxed);
        self.totals
            .already_published
            .fetch_add(missed, Ordering::Relaxed);
        metrics::published(flipped);
        metrics::flip_misses(missed);
    }

    /// Sends a poison item to the dead-letter queue, then marks it so it leaves the index. If the
    /// queue refuses it, the item stays pending: it is never marked without a dead letter.
    async fn dead_letter(&self, poison: Poison, raw: &RawItem, stats: &mut CycleStats) {
        let record = serde_dynamo::from_item::<_, serde_json::Value>(raw.clone())
            .unwrap_or_else(|e| serde_json::json!({ "unrepresentable": e.to_string() }));
        let letter = DeadLetter {
            reason: poison.reason.clone(),
            origin: ORIGIN.to_owned(),
            event_id: poison.event_id.clone(),
            key: Some(poison.key.clone()),
            record,
            dead_lettered_at: format_timestamp(Utc::now()),
        };
        if let Err(err) = self.dead_letters.send(&letter).await {
            tracing::error!(key = %poison.key, error = %err, "poison event could not be dead-lettered; it stays pending");
            stats.failed += 1;
            self.totals.failing(poison.key);
            return;
        }
        match self
            .store
            .mark_dead_lettered(&poison.key, &poison.reason)
            .await
        {
            Ok(FlipOutcome::Flipped) => {
                tracing::warn!(key = %poison.key, event_id = ?poison.event_id, reason = %poison.reason, "poison event dead-lettered");
                stats.dead_lettered += 1;
                self.totals.dead_lettered.fetch_add(1, Ordering::Relaxed);
                metrics::dead_lettered(1);
                self.totals.done(&poison.key);
            }
            Ok(FlipOutcome::AlreadyDone) => self.totals.done(&poison.key),
            Err(err) => {
                tracing::warn!(key = %poison.key, error = %err, "dead-lettered but not marked; it will be dead-lettered again");
                stats.flip_errors += 1;
                self.totals.failing(poison.key);
            }
        }
    }

    /// Polls until `cancel` fires: steps back to back while there is work, pausing with a
    /// doubling backoff (up to `idle_backoff_max`) while the index is idle or stalled.
    pub async fn run(
        &self,
        grace: Duration,
        idle_backoff_max: Duration,
        cancel: CancellationToken,
    ) {
        let mut pause = MIN_IDLE_BACKOFF.min(idle_backoff_max);
        while !cancel.is_cancelled() {
            let now = Utc::now();
            let stats = self.poll_once(cutoff(now, grace), &cancel).await;
            metrics::cycle(&stats, now);
            let outcome = stats.outcome();
            tracing::debug!(
                ?outcome,
                taken = stats.taken,
                published = stats.published,
                "poll step done"
            );
            if outcome == CycleOutcome::Progress {
                pause = MIN_IDLE_BACKOFF.min(idle_backoff_max);
                continue;
            }
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(pause) => {}
            }
            pause = (pause * 2).min(idle_backoff_max);
        }
        tracing::info!("poller stopped taking work");
    }

    /// Steps until a step finds nothing pending (complete), `max_stalled_passes` consecutive
    /// steps publish nothing (events remain), or `cancel` fires.
    pub async fn drain(
        &self,
        grace: Duration,
        max_stalled_passes: u32,
        cancel: &CancellationToken,
    ) -> DrainSummary {
        let started = Instant::now();
        let (mut passes, mut stalled, mut complete) = (0, 0, false);
        let mut pause = MIN_IDLE_BACKOFF;
        while !cancel.is_cancelled() {
            let now = Utc::now();
            let stats = self.poll_once(cutoff(now, grace), cancel).await;
            passes += 1;
            metrics::cycle(&stats, now);
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
                CycleOutcome::Empty => {
                    complete = !stats.interrupted;
                    break;
                }
                CycleOutcome::Progress => stalled = 0,
                CycleOutcome::Stalled => {
                    stalled += 1;
                    if stalled >= max_stalled_passes {
                        break;
                    }
                    tokio::select! {
                        () = cancel.cancelled() => break,
                        () = tokio::time::sleep(pause) => {}
                    }
                    pause *= 2;
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
        }
        summary
    }

    /// The totals so far, as a drain summary (for a drain cut short by the shutdown timeout).
    pub fn summary(&self, elapsed: Duration) -> DrainSummary {
        DrainSummary {
            published: self.totals.published.load(Ordering::Relaxed),
            already_published: self.totals.already_published.load(Ordering::Relaxed),
            dead_lettered: self.totals.dead_lettered.load(Ordering::Relaxed),
            failed: self.totals.failing.lock().expect("not poisoned").len() as u64,
            seconds: elapsed.as_secs_f64(),
            passes: 0,
            complete: false,
            interrupted: false,
            put_events_calls: 0,
        }
    }
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
    use outbox_shared::{DeadLetterError, NewOutboxEvent, OutboxConfig, StatusError};

    use super::*;
    use crate::index::{IndexError, PendingPage, ShardBacklog};

    /// The index and the table in one: shard -> GSI1SK -> item; flips remove from the index.
    #[derive(Debug, Default)]
    struct Table {
        index: Mutex<BTreeMap<u16, BTreeMap<String, RawItem>>>,
        statuses: Mutex<HashMap<ItemKey, String>>,
        /// Events of these aggregates fail to publish.
        failing_aggregates: Mutex<HashSet<String>>,
        /// Event ids EventBridge rejects as malformed.
        rejected: Mutex<HashSet<String>>,
        published: Mutex<Vec<OutboundEvent>>,
        dead_letters: Mutex<Vec<DeadLetter>>,
        /// Keys whose flip "another relay" wins: the item leaves the index without our flip.
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
            let shard =
                schema::parse_pending_shard_pk(&string_attr(&raw, attr::GSI1PK).unwrap()).unwrap();
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

        fn flip(&self, key: &ItemKey, status: &str) -> FlipOutcome {
            if self.stolen.lock().unwrap().remove(key) {
                self.remove(key);
                return FlipOutcome::AlreadyDone;
            }
            if self.remove(key) {
                self.statuses
                    .lock()
                    .unwrap()
                    .insert(key.clone(), status.into());
                FlipOutcome::Flipped
            } else {
                FlipOutcome::AlreadyDone
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
            shard: u16,
            before: &str,
            limit: i32,
            start: Option<Cursor>,
        ) -> Result<PendingPage, IndexError> {
            let index = self.index.lock().unwrap();
            let after = start.map(|c| c[attr::GSI1SK].as_s().unwrap().clone());
            let mut items: Vec<RawItem> = index
                .get(&shard)
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
    }

    impl Publisher for &Table {
        async fn publish(&self, events: &[OutboundEvent]) -> Vec<PublishOutcome> {
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
        async fn mark_published(&self, key: &ItemKey) -> Result<FlipOutcome, StatusError> {
            Ok(self.flip(key, "PUBLISHED"))
        }

        async fn mark_dead_lettered(
            &self,
            key: &ItemKey,
            _reason: &str,
        ) -> Result<FlipOutcome, StatusError> {
            Ok(self.flip(key, "DEAD_LETTERED"))
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
            page_size,
            shard_concurrency: 4,
            flip_concurrency: 3,
            event_bus_name: "bus".into(),
            source: "orders".into(),
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

        // When the loop is driven step by step until it reports empty
        let first = poller.poll_once(later(), &cancel).await;
        let second = poller.poll_once(later(), &cancel).await;

        // Then the first step took everything and the second found nothing
        assert_eq!(first.outcome(), CycleOutcome::Progress);
        assert_eq!((first.taken, first.published), (75, 75));
        assert_eq!(second.outcome(), CycleOutcome::Empty);
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

        // When a step runs with a cutoff between them
        let stats = poller(&table, 100)
            .poll_once(
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
        let stats = poller.poll_once(later(), &CancellationToken::new()).await;
        let next = poller.poll_once(later(), &CancellationToken::new()).await;

        // Then both poison items are dead-lettered with reason and record, and marked
        assert_eq!((stats.published, stats.dead_lettered), (1, 2));
        assert_eq!(next.outcome(), CycleOutcome::Empty);
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
    async fn a_lost_flip_race_is_counted_not_an_error() {
        // Given an event another relay flips while this one publishes it
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

        // When it steps, runs and drains
        let stats = poller(&table, 10).poll_once(later(), &cancel).await;
        poller(&table, 10)
            .run(Duration::ZERO, Duration::from_secs(1), cancel.clone())
            .await;
        let summary = poller(&table, 10).drain(Duration::ZERO, 3, &cancel).await;

        // Then nothing was taken and the event stays pending
        assert!(stats.interrupted);
        assert_eq!(stats.taken, 0);
        assert!(summary.interrupted && !summary.complete);
        assert_eq!(table.pending(), 1);
    }

    #[test]
    fn outcome_reflects_progress() {
        let empty = CycleStats::default();
        assert_eq!(empty.outcome(), CycleOutcome::Empty);
        let stalled = CycleStats {
            taken: 3,
            failed: 3,
            ..CycleStats::default()
        };
        assert_eq!(stalled.outcome(), CycleOutcome::Stalled);
        let errored = CycleStats {
            query_errors: 1,
            ..CycleStats::default()
        };
        assert_eq!(errored.outcome(), CycleOutcome::Stalled);
        let progress = CycleStats {
            taken: 3,
            already_published: 1,
            ..CycleStats::default()
        };
        assert_eq!(progress.outcome(), CycleOutcome::Progress);
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
