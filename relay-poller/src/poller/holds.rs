//! The release of aggregate holds: the stream relay holds an aggregate whose event failed and
//! leaves its events to the poller (`HOLD_FAILED_AGGREGATES`); once the poller has published
//! them, it releases the hold, and the stream relay publishes the aggregate's events again.
//!
//! Holds are released in step with the backlog, by the poller that polls their events' partition
//! (its shard's lease holder, in a fleet): a hold sits in the index under the hold partition of
//! its last event's partition, sorted by that event's `GSI1SK` (`relay_runtime::holds`), so as a
//! pass publishes a partition's pages it reads the partition's holds alongside
//! ([`PartitionHolds::passed`]), each once, and only those it has published past. A hold met so
//! is released unless its aggregate is held back in this pass (an earlier event of it was not
//! published), or its last event is still pending on the table: read strongly consistent, unless
//! this poller marked it a moment ago. The release's condition keeps a hold under which an event
//! was left since it was read. No read grows with a partition's events, and a hold costs one
//! read of a page of holds and at most one read of one item.
//!
//! A hold kept gets its `ttl` pushed out before it lapses, so DynamoDB's TTL never deletes a hold
//! whose events the poller has not published yet (a poller that keeps failing to publish them).

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use futures::StreamExt;
use outbox_shared::ItemKey;
use relay_runtime::{Behind, Hold, HoldCursor, HoldRelease, RecentKeys};

use super::stats::PassStats;

/// The release of the aggregate holds: the poller's side of the holds, and nothing else.
#[derive(Debug)]
pub(super) struct HoldReleaser<H> {
    holds: H,
    /// A hold kept whose `ttl` is past or less than this away gets it pushed out.
    ttl_refresh_margin: Duration,
    /// Holds read at once from a hold partition.
    page_size: i32,
    /// Releases (and `ttl` extensions) in flight at once.
    concurrency: usize,
}

impl<H: HoldRelease> HoldReleaser<H> {
    pub(super) fn new(
        holds: H,
        ttl_refresh_margin: Duration,
        page_size: i32,
        concurrency: usize,
    ) -> Self {
        Self {
            holds,
            ttl_refresh_margin,
            page_size: page_size.max(1),
            concurrency: concurrency.max(1),
        }
    }

    /// The holds of `partition` a pass may release, the pass reading the partition's events
    /// below `before`.
    pub(super) fn of_partition<'a>(
        &'a self,
        partition: &'a str,
        before: &'a str,
    ) -> PartitionHolds<'a, H> {
        PartitionHolds {
            releaser: self,
            partition,
            before,
            met: VecDeque::new(),
            next: None,
            read_all: false,
        }
    }

    /// Whether `hold`'s `ttl` is past or within the TTL refresh margin.
    fn expires_soon(&self, hold: &Hold) -> bool {
        let margin = i64::try_from(self.ttl_refresh_margin.as_secs()).unwrap_or(i64::MAX);
        hold.ttl
            .is_some_and(|ttl| ttl <= chrono::Utc::now().timestamp().saturating_add(margin))
    }
}

/// The holds of one partition in one pass, read in the order of their last events as the pass
/// publishes past them.
#[derive(Debug)]
pub(super) struct PartitionHolds<'a, H> {
    releaser: &'a HoldReleaser<H>,
    partition: &'a str,
    before: &'a str,
    /// Holds read and not yet published past.
    met: VecDeque<Hold>,
    /// Where the next page of holds starts.
    next: Option<HoldCursor>,
    /// Every hold below `before` was read (or a read failed: the rest wait for the next pass).
    read_all: bool,
}

impl<H: HoldRelease> PartitionHolds<'_, H> {
    /// Releases the holds the pass has published past: those whose last event sorts at or below
    /// `up_to` (the last event of the page just relayed, or the cutoff once the partition is
    /// done), unless their aggregate is in `held_back` or their last event is still pending
    /// (`marked`: what this poller marked lately, known not to be). Counted in `stats`.
    pub(super) async fn passed(
        &mut self,
        up_to: &str,
        held_back: &HashMap<String, Behind>,
        marked: &RecentKeys<ItemKey>,
        stats: &mut PassStats,
    ) {
        let passed = self.take_passed(up_to, stats).await;
        if passed.is_empty() {
            return;
        }
        let (candidates, mut kept): (Vec<Hold>, Vec<Hold>) = passed
            .into_iter()
            .partition(|hold| !held_back.contains_key(&hold.ordering_key));
        let to_read: Vec<ItemKey> = candidates
            .iter()
            .filter_map(|hold| hold.last_left.clone())
            .filter(|key| !marked.contains(key))
            .collect();
        let pending: HashSet<ItemKey> = if to_read.is_empty() {
            HashSet::new()
        } else {
            stats.hold_reads += to_read.len() as u64;
            match self.releaser.holds.still_pending(&to_read).await {
                Ok(pending) => pending,
                Err(err) => {
                    tracing::warn!(partition = self.partition, error = %outbox_shared::error::describe(&err), "could not read the last events of aggregate holds; they are kept until the next pass");
                    stats.hold_errors += 1;
                    to_read.into_iter().collect()
                }
            }
        };
        let (releasable, still): (Vec<Hold>, Vec<Hold>) =
            candidates.into_iter().partition(|hold| {
                hold.last_left
                    .as_ref()
                    .is_none_or(|key| !pending.contains(key))
            });
        kept.extend(still);
        let releaser = self.releaser;
        let answers: Vec<(Hold, bool)> = futures::stream::iter(releasable)
            .map(|hold| async move {
                let released = match releaser.holds.release(&hold).await {
                    Ok(released) => released,
                    Err(err) => {
                        tracing::warn!(ordering_key = %hold.ordering_key, error = %outbox_shared::error::describe(&err), "could not release an aggregate hold; retrying next pass");
                        false
                    }
                };
                (hold, released)
            })
            .buffer_unordered(releaser.concurrency)
            .collect()
            .await;
        for (hold, released) in answers {
            if released {
                tracing::debug!(ordering_key = %hold.ordering_key, "aggregate hold released");
                stats.holds_released += 1;
            } else {
                kept.push(hold);
            }
        }
        let expiring = kept.into_iter().filter(|hold| releaser.expires_soon(hold));
        futures::stream::iter(expiring)
            .for_each_concurrent(releaser.concurrency, |hold| async move {
                if let Err(err) = releaser.holds.extend(&hold).await {
                    tracing::warn!(ordering_key = %hold.ordering_key, error = %outbox_shared::error::describe(&err), "could not push out the ttl of an aggregate hold");
                }
            })
            .await;
    }

    /// The holds whose last event sorts at or below `up_to`, read a page at a time as needed.
    async fn take_passed(&mut self, up_to: &str, stats: &mut PassStats) -> Vec<Hold> {
        let mut passed = Vec::new();
        loop {
            while self
                .met
                .front()
                .is_some_and(|hold| hold.sort_key.as_str() <= up_to)
            {
                passed.extend(self.met.pop_front());
            }
            if !self.met.is_empty() || self.read_all {
                return passed;
            }
            let page = self
                .releaser
                .holds
                .page(
                    self.partition,
                    self.before,
                    self.releaser.page_size,
                    self.next.take(),
                )
                .await;
            match page {
                Ok(page) => {
                    self.met.extend(page.holds);
                    self.next = page.next;
                    self.read_all = self.next.is_none();
                }
                Err(err) => {
                    tracing::warn!(partition = self.partition, error = %outbox_shared::error::describe(&err), "could not read the aggregate holds; retrying next pass");
                    stats.hold_errors += 1;
                    self.read_all = true;
                }
            }
        }
    }
}
