//! The poller: passes over the sparse, sharded `GSI1` index of pending events, each publishing
//! what it finds and marking each published item out of the index, and the two loops around them.
//!
//! The room, a file per concept:
//! - [`pass`]: one pass: every configured shard in parallel, each partition's pages oldest first,
//!   each page decoded, published and settled; an aggregate whose event failed is held back for
//!   the rest of the pass, so none of its later events overtakes it.
//! - [`sweep`]: a scan of the whole index for partitions (`GSI1PK` values) outside the configured
//!   shard count (a writer or another client on more shards, a reshard) and shards nobody has
//!   leased for a lease duration, polled before the shards, so no event is stranded under a
//!   `GSI1PK` nobody queries. Due once per sweep interval in `run`; in `drain`, on the first pass
//!   and on the pass that finds the shards empty.
//! - [`ttl`]: the TTL refresh: a pending item whose `ttl` is past or within the refresh margin gets
//!   its `ttl` pushed forward (still only while it is pending) before anything else happens to it,
//!   so DynamoDB's TTL never deletes an unpublished event that the poller can read.
//! - The items this poller marked are remembered for the index's lag
//!   ([`PollerSettings::index_lag`], `relay_runtime::RecentKeys`): `GSI1` is eventually
//!   consistent, so a pass that starts right after one that marked items can still read them, and
//!   would publish them again. A pass skips them (not taken, not published, counted in
//!   [`PassStats::recently_marked`]); an item found already marked is remembered too, and a pass
//!   that found nothing else is empty, not progress, so the loops pause instead of passing again
//!   at once.
//! - [`holds`]: the release of the aggregate holds the stream relay set, once the poller has
//!   published what it left.
//! - [`decode`]: an item read from the index becomes an outbox item or a poison case.
//! - [`stats`]: what a pass counts, its outcome, the drain's summary.
//! - [`run`] and [`drain`]: the loops.
//!
//! The per-event part (decode an item into an event or a poison case, dead-letter then mark, mark
//! concurrently) is `relay_runtime::relay`, shared with the stream relay; this room is the loops
//! around it.
//!
//! Nothing is marked before EventBridge has accepted the event, so a crash, a kill or an
//! abandoned pass at any point leaves the event pending, and a later pass publishes it again
//! (at-least-once; consumers de-duplicate on `metadata.eventId`).
//!
//! Order: a shard's pages are processed one after another, and the publisher never has two calls
//! with events of one aggregate in flight at once, so one aggregate's events leave in `GSI1SK`
//! order. When an event fails to publish, the later events of its aggregate are held back for the
//! rest of the pass instead of overtaking it. The sweep runs before the shards and hands them the
//! aggregates it held back, so after a reshard an aggregate's older events (under the old
//! `GSI1PK`) leave before its newer ones.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use outbox_shared::{ItemKey, ShardCount};
use relay_runtime::{DeadLetterSink, EventRelay, HoldStore, Publisher, RecentKeys, StatusStore};

use crate::index::PendingIndex;

pub mod decode;
pub mod drain;
pub mod holds;
pub mod pass;
pub mod run;
pub mod stats;
pub mod sweep;
pub mod ttl;

pub use stats::{DrainSummary, PassOutcome, PassStats};

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
    /// How long the pending index may still serve an item after it was marked: the items this
    /// poller marked (or found already marked) within it are skipped, not published again.
    pub index_lag: Duration,
}

/// The poller, generic over its ports.
#[derive(Debug)]
pub struct Poller<I, P, S, D, H> {
    index: I,
    relay: EventRelay<P, S, D>,
    holds: H,
    settings: PollerSettings,
    totals: stats::Totals,
    /// When the last sweep started.
    last_sweep: Mutex<Option<Instant>>,
    /// The items marked (by this poller, or found already marked) within the index's lag.
    recently_marked: RecentKeys<ItemKey>,
}

impl<I, P, S, D, H> Poller<I, P, S, D, H>
where
    I: PendingIndex,
    P: Publisher,
    S: StatusStore,
    D: DeadLetterSink,
    H: HoldStore,
{
    pub fn new(
        index: I,
        publisher: P,
        store: S,
        dead_letters: D,
        holds: H,
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
            holds,
            recently_marked: RecentKeys::new(settings.index_lag, RECENTLY_MARKED_CAPACITY),
            settings,
            totals: stats::Totals::default(),
            last_sweep: Mutex::new(None),
        }
    }

    pub fn settings(&self) -> &PollerSettings {
        &self.settings
    }

    pub fn publisher(&self) -> &P {
        self.relay.publisher()
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
mod tests;
