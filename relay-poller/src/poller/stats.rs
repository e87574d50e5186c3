//! What a pass counts, what it achieved, the poller's totals and the one-line summary `drain`
//! prints. A page's settled events are recorded once ([`Totals::record`]): in the pass's
//! statistics, the poller's totals and the metrics, all from the runtime's one [`Tally`].

use outbox_shared::schema::PendingPartition;
use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_shared::ItemKey;
use relay_runtime::{Event, Tally};
use serde::Serialize;

use crate::index::RawItem;
use crate::metrics;

/// Counts of one pass, summed over its shards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PassStats {
    /// Items read from the index (those skipped as recently marked not included).
    pub taken: u64,
    /// Items the index still returned that this poller marked (or found already marked) within
    /// the index's lag: skipped, not published again.
    pub recently_marked: u64,
    /// Published and marked by this pass.
    pub published: u64,
    /// Published, but the item was already marked (by another relay, or an earlier attempt).
    pub already_marked: u64,
    pub dead_lettered: u64,
    /// Not published (retries exhausted, or the dead-letter queue refused a poison item).
    pub failed: u64,
    /// Held back: left pending because an earlier event of the same aggregate was not published
    /// in this pass (it failed, or it was not sent).
    pub held_back: u64,
    /// Not sent: the publisher's stalled limit or the lease's poll deadline came first. Left
    /// pending; not a failure.
    pub not_sent: u64,
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
    /// Aggregate holds released: the pass published everything left under them.
    pub holds_released: u64,
    /// Last events of aggregate holds read from the table (strongly consistent) to tell whether
    /// the hold could go: those this poller had not just marked itself.
    pub hold_reads: u64,
    /// Reads of holds, or of their last events, that failed (the holds wait for the next pass).
    pub hold_errors: u64,
    /// The pass stopped taking pages because of cancellation.
    pub interrupted: bool,
    /// `CreatedAt` of the oldest pending event seen (the first item of each shard).
    pub oldest_created_at: Option<String>,
}

/// What a pass achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassOutcome {
    /// Nothing pending below the cutoff in any shard: nothing read, or only items already marked
    /// (by another relay, or by this poller within the index's lag).
    Empty,
    /// This pass published or dead-lettered events. An item found already marked is not
    /// progress: the index still serving it says nothing about what is left, and a pass started
    /// at once would read it again.
    Progress,
    /// Something is pending, but nothing left the index (failures only).
    Stalled,
}

impl PassStats {
    pub fn outcome(&self) -> PassOutcome {
        if self.published + self.dead_lettered > 0 {
            PassOutcome::Progress
        } else if self.taken == self.already_marked && self.read_errors == 0 {
            PassOutcome::Empty
        } else {
            PassOutcome::Stalled
        }
    }

    /// Records the pass's backlog and oldest pending age, once it has finished: nothing when one
    /// of its reads failed, since it saw only part of the index (no extra queries: the first page
    /// of each shard holds that shard's oldest event).
    pub fn record(&self, now: DateTime<Utc>) {
        if self.read_errors > 0 {
            return;
        }
        metrics::pass(self.taken, self.oldest_created_at.as_deref(), now);
    }

    /// Adds what a page's events came to.
    fn add(&mut self, tally: &Tally) {
        self.published += tally.marked;
        self.already_marked += tally.already_marked;
        self.dead_lettered += tally.dead_lettered;
        self.failed += tally.failed + tally.not_dead_lettered;
        self.held_back += tally.held_back;
        self.not_sent += tally.not_sent;
        self.not_marked += tally.all_not_marked();
    }

    pub(crate) fn merge(&mut self, other: Self) {
        self.taken += other.taken;
        self.recently_marked += other.recently_marked;
        self.published += other.published;
        self.already_marked += other.already_marked;
        self.dead_lettered += other.dead_lettered;
        self.failed += other.failed;
        self.held_back += other.held_back;
        self.not_sent += other.not_sent;
        self.not_marked += other.not_marked;
        self.ttl_extended += other.ttl_extended;
        self.ttl_errors += other.ttl_errors;
        self.stray_pending = match (self.stray_pending, other.stray_pending) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.read_errors += other.read_errors;
        self.holds_released += other.holds_released;
        self.hold_reads += other.hold_reads;
        self.hold_errors += other.hold_errors;
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
    /// Aggregate holds released, over every pass.
    pub holds_released: u64,
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
    /// Calls sent to the target (filled in by the binary from the publisher's stats).
    #[serde(flatten)]
    pub calls: relay_runtime::publisher::PublishCalls,
    /// Entries the Custom Event Bus answered `DEDUPLICATED` (published before within its 300 s
    /// window; a part of `published`), filled in like `calls`; 0 on every other target.
    pub deduplicated: u64,
    /// Payloads the claim check wrote to the payload bucket (`PAYLOAD_BUCKET`), filled in like
    /// `calls`: one per event too large for the target.
    pub payloads_stored: u64,
    /// Payloads found already in the bucket (stored by an earlier publish): nothing written.
    pub payloads_already_stored: u64,
    /// Partitions the last pass left to the pollers holding their leases (`--respect-leases`):
    /// a shard's number on a single-region table, `{region}#{shard}` on a global table.
    #[serde(serialize_with = "partition_names")]
    pub skipped_shards: Vec<PendingPartition>,
}

/// Partitions as the drain summary names them: a shard's number, or `{region}#{shard}`.
fn partition_names<S: serde::Serializer>(
    partitions: &[PendingPartition],
    serializer: S,
) -> Result<S::Ok, S::Error> {
    #[derive(serde::Serialize)]
    #[serde(untagged)]
    enum Name {
        Shard(u16),
        Regional(String),
    }
    serializer.collect_seq(partitions.iter().map(|p| match p.origin {
        None => Name::Shard(p.shard),
        Some(_) => Name::Regional(p.to_string()),
    }))
}

/// Counters over the life of one poller, readable while it works.
#[derive(Debug, Default)]
pub(crate) struct Totals {
    published: AtomicU64,
    already_marked: AtomicU64,
    dead_lettered: AtomicU64,
    not_marked: AtomicU64,
    holds_released: AtomicU64,
    /// Items whose last attempt failed (not merely not sent) and that have not left the index
    /// since.
    failing: Mutex<HashSet<ItemKey>>,
}

impl Totals {
    /// Records a page's settled `events` once: in the pass's `stats`, these totals, and the
    /// metrics.
    pub(crate) fn record(&self, events: &[Event<RawItem>], stats: &mut PassStats) {
        let tally = Tally::of(events);
        stats.add(&tally);
        self.published.fetch_add(tally.marked, Ordering::Relaxed);
        self.already_marked
            .fetch_add(tally.already_marked, Ordering::Relaxed);
        self.dead_lettered
            .fetch_add(tally.dead_lettered, Ordering::Relaxed);
        self.not_marked
            .fetch_add(tally.all_not_marked(), Ordering::Relaxed);
        {
            let mut failing = self.failing.lock().expect("not poisoned");
            for event in events {
                let Some(key) = &event.key else { continue };
                if event.left_the_index() {
                    failing.remove(key);
                } else if event.is_failing() {
                    failing.insert(key.clone());
                }
            }
        }
        relay_runtime::metrics::relayed(&tally);
    }

    /// Records `n` aggregate holds released.
    pub(crate) fn released(&self, n: u64) {
        self.holds_released.fetch_add(n, Ordering::Relaxed);
    }

    /// The totals so far as a drain's summary, `elapsed` after it started (the rest is the
    /// drain's to fill in).
    pub(crate) fn summary(&self, elapsed: Duration) -> DrainSummary {
        DrainSummary {
            published: self.published.load(Ordering::Relaxed),
            already_marked: self.already_marked.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
            not_marked: self.not_marked.load(Ordering::Relaxed),
            holds_released: self.holds_released.load(Ordering::Relaxed),
            failed: self.failing.lock().expect("not poisoned").len() as u64,
            remaining: None,
            seconds: elapsed.as_secs_f64(),
            passes: 0,
            complete: false,
            interrupted: false,
            calls: relay_runtime::publisher::PublishCalls::default(),
            deduplicated: 0,
            payloads_stored: 0,
            payloads_already_stored: 0,
            skipped_shards: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use relay_runtime::metrics::{BACKLOG, OLDEST_PENDING_AGE};

    use super::*;

    /// The values `record` leaves for `name`.
    fn recorded(name: &str, record: impl FnOnce()) -> Vec<f64> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        ::metrics::with_local_recorder(&recorder, record);
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == name)
            .flat_map(|(.., value)| -> Vec<f64> {
                match value {
                    DebugValue::Histogram(values) => values.into_iter().map(|v| v.0).collect(),
                    other => panic!("{name} is {other:?}"),
                }
            })
            .collect()
    }

    #[test]
    fn a_pass_whose_reads_failed_reports_no_oldest_age_and_an_idle_one_reports_zero() {
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 10, 1, 0).unwrap();
        let idle = PassStats::default();
        let failed = PassStats {
            read_errors: 16,
            ..PassStats::default()
        };
        let busy = PassStats {
            taken: 5,
            oldest_created_at: Some("2026-11-22T10:00:00.000Z".into()),
            ..PassStats::default()
        };
        assert_eq!(recorded(OLDEST_PENDING_AGE, || idle.record(now)), [0.0]);
        assert!(recorded(OLDEST_PENDING_AGE, || failed.record(now)).is_empty());
        assert!(recorded(BACKLOG, || failed.record(now)).is_empty());
        assert_eq!(recorded(OLDEST_PENDING_AGE, || busy.record(now)), [60.0]);
        assert_eq!(recorded(BACKLOG, || busy.record(now)), [5.0]);
    }
}
