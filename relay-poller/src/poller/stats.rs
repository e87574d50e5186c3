//! What a pass counts, what it achieved, and the one-line summary `drain` prints; the metrics
//! read these, the loops fill them.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use outbox_shared::ItemKey;
use serde::Serialize;

/// Counts of one pass, summed over its shards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PassStats {
    /// Items read from the index.
    pub taken: u64,
    /// Published and marked by this pass.
    pub published: u64,
    /// Published, but the item was already marked (by another relay, or an earlier attempt).
    pub already_marked: u64,
    pub dead_lettered: u64,
    /// Not published (retries exhausted, or the dead-letter queue refused a poison item).
    pub failed: u64,
    /// Held back: left pending because an earlier event of the same aggregate failed in this
    /// pass.
    pub held_back: u64,
    /// Published (or dead-lettered), but the status update failed: the item stays pending and is
    /// handled again later.
    pub not_marked: u64,
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
        if self.published + self.already_marked + self.dead_lettered > 0 {
            PassOutcome::Progress
        } else if self.taken == 0 && self.read_errors == 0 {
            PassOutcome::Empty
        } else {
            PassOutcome::Stalled
        }
    }

    pub(crate) fn merge(&mut self, other: Self) {
        self.taken += other.taken;
        self.published += other.published;
        self.already_marked += other.already_marked;
        self.dead_lettered += other.dead_lettered;
        self.failed += other.failed;
        self.held_back += other.held_back;
        self.not_marked += other.not_marked;
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
    /// Published, but the item was already marked (by another relay, or an earlier attempt).
    pub already_marked: u64,
    pub dead_lettered: u64,
    /// Events this drain leaves unpublished because of errors.
    pub failed: u64,
    /// Events published (or dead-lettered) whose status update failed, over every pass: each
    /// stayed pending and was published again by a later pass (or remains, when incomplete).
    pub not_marked: u64,
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
    /// Entries the Custom Event Bus answered `DEDUPLICATED` (published before within its 300 s
    /// window; a part of `published`), filled in like `put_events_calls`; 0 on the classic bus.
    pub deduplicated: u64,
    /// Shards the last pass left to the pollers holding their leases (`--respect-leases`).
    pub skipped_shards: Vec<u16>,
}

/// Counters over the life of one poller, readable while it works.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    pub(crate) published: AtomicU64,
    pub(crate) already_marked: AtomicU64,
    pub(crate) dead_lettered: AtomicU64,
    pub(crate) not_marked: AtomicU64,
    /// Items whose last attempt failed and that have not left the index since.
    pub(crate) failing: Mutex<HashSet<ItemKey>>,
}

impl Totals {
    pub(crate) fn failing(&self, key: ItemKey) {
        self.failing.lock().expect("not poisoned").insert(key);
    }

    pub(crate) fn done(&self, key: &ItemKey) {
        self.failing.lock().expect("not poisoned").remove(key);
    }
}
