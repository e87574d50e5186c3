//! A partition's pages, each relayed: the items the index still returns after this poller marked
//! them skipped, the rest decoded into events, their expiring `ttl`s refreshed, the aggregates
//! held back for the pass held back, the rest published and settled through the per-event path
//! both relays share (`relay_runtime::relay`), the page's tally recorded once, and the aggregate
//! holds the page published past released ([`super::holds`]).

use std::collections::HashMap;
use std::pin::Pin;

use chrono::Utc;
use futures::future::Either;
use outbox_shared::ItemKey;
use outbox_shared::schema::{PendingPartition, attr};
use relay_runtime::{Behind, Deadline, Event, EventRelay, RecentKeys, State};
use tokio_util::sync::CancellationToken;

use super::decode::{dead_letter_record, decode, item_key, string_attr};
use super::holds::HoldReleaser;
use super::ports::PollerPorts;
use super::stats::{PassStats, Totals};
use super::ttl::TtlRefresh;
use crate::assignment::{PageStart, ShardAssignment};
use crate::index::{IndexError, PendingPage, PendingPages, RawItem};

/// A page of the index being read.
type PageRead<'a> = Pin<Box<dyn Future<Output = Result<PendingPage, IndexError>> + Send + 'a>>;

/// The pages of the pending index, relayed, and the holds they publish past released.
pub(super) struct Pages<W: PollerPorts> {
    index: W::Index,
    relay: EventRelay<W::Publisher, W::Store, W::DeadLetters>,
    ttl: TtlRefresh<W::Ttl>,
    holds: HoldReleaser<W::Holds>,
    page_size: i32,
    /// The items marked (by this poller, or found already marked) within the index's lag.
    pub(super) recently_marked: RecentKeys<ItemKey>,
    /// What this poller relayed since it started.
    totals: Totals,
}

impl<W: PollerPorts> Pages<W> {
    pub(super) fn new(
        index: W::Index,
        relay: EventRelay<W::Publisher, W::Store, W::DeadLetters>,
        ttl: TtlRefresh<W::Ttl>,
        holds: HoldReleaser<W::Holds>,
        page_size: i32,
        recently_marked: RecentKeys<ItemKey>,
    ) -> Self {
        Self {
            index,
            relay,
            ttl,
            holds,
            page_size,
            recently_marked,
            totals: Totals::default(),
        }
    }

    pub(super) fn publisher(&self) -> &W::Publisher {
        self.relay.publisher()
    }

    /// The pages with their events written and named as `outbound` says.
    pub(super) fn with_outbound(mut self, outbound: relay_runtime::relay::Outbound) -> Self {
        self.relay = self.relay.with_outbound(outbound);
        self
    }

    /// The pages with an expiring pending event's payload copied onto itself with `client`.
    pub(super) fn with_payloads(mut self, client: aws_sdk_s3::Client) -> Self {
        self.ttl = self.ttl.with_payloads(client);
        self
    }

    pub(super) fn totals(&self) -> &Totals {
        &self.totals
    }

    /// Every page of `partition` below `before`, one after another, each followed by the release
    /// of the holds it published past. `held_back` holds the aggregates with an event not
    /// published in this pass, and what they wait behind: their later events must not overtake
    /// it, and their holds stay.
    ///
    /// `lease` is the assignment and the partition leased (a shard, of a region on a global
    /// table), which says whether each page
    /// may start, and until when it may publish (a lease can be lost or handed over mid-pass);
    /// `None` for the partitions the sweep found, whose pages always may.
    ///
    /// The next page is read while this one is relayed (its cursor is known once this one is
    /// read), so a backlog's pages cost a `Query`'s round trip less each. A page read ahead is
    /// dropped unread when the pass stops before it (cancelled, the lease lost).
    ///
    /// The holds are read after a page only when it moved something out of the index: a page
    /// whose every event stayed pending (an outage) releases no hold, and neither does an idle
    /// partition's empty page, so reading them would only cost. With `keep_holds` (a pass that
    /// sweeps), the holds are read at the partition's end anyway: those kept get their `ttl`
    /// pushed out even while nothing is published, and a hold left over (its release failed, its
    /// poller stopped before it) is released.
    pub(super) async fn poll<A: ShardAssignment>(
        &self,
        partition: &str,
        lease: Option<(&A, &PendingPartition)>,
        before: &str,
        keep_holds: bool,
        held_back: &mut HashMap<String, Behind>,
        cancel: &CancellationToken,
    ) -> PassStats {
        let mut stats = PassStats::default();
        // The next page, being read (or read) while this one was relayed.
        let mut read_ahead: Option<PageRead<'_>> = None;
        let mut holds = self.holds.of_partition(partition, before);
        loop {
            if cancel.is_cancelled() {
                stats.interrupted = true;
                break;
            }
            let page_start = lease.map_or(
                PageStart::Go {
                    deadline: Deadline::NONE,
                },
                |(a, leased)| a.begin_page(leased),
            );
            let PageStart::Go { deadline } = page_start else {
                tracing::debug!(
                    partition,
                    "no longer this poller's partition; pass over it stopped"
                );
                break;
            };
            let page = match read_ahead.take() {
                Some(read) => read.await,
                None => {
                    self.index
                        .query_page(partition, before, self.page_size, None)
                        .await
                }
            };
            let page = match page {
                Ok(page) => page,
                Err(err) => {
                    if let Some((a, leased)) = lease {
                        a.end_page(leased);
                    }
                    tracing::warn!(partition, error = %err.failure, "pending index query failed; retrying next pass");
                    stats.read_errors += 1;
                    break;
                }
            };
            // Every event of the partition up to here was read in this pass: the last of the
            // page, or, on the last page, everything below the cutoff.
            let passed = match &page.next {
                Some(_) => page
                    .items
                    .last()
                    .and_then(|item| string_attr(item, attr::GSI1SK)),
                None => Some(before.to_owned()),
            };
            let items = self.without_recently_marked(page.items, &mut stats);
            if stats.oldest_created_at.is_none() {
                stats.oldest_created_at = items
                    .first()
                    .and_then(|item| string_attr(item, attr::CREATED_AT));
            }
            let last_page = page.next.is_none();
            let relay = self.relay_page(partition, items, deadline, held_back, &mut stats);
            let progressed = match page.next {
                // The relay is not held up by the read: once the page is relayed, the read goes
                // on (unpolled until the next page starts), and the page ends as before.
                Some(next) => {
                    let read: PageRead<'_> = Box::pin(self.index.query_page(
                        partition,
                        before,
                        self.page_size,
                        Some(next),
                    ));
                    // The read is polled first, so its request is on its way before the relay
                    // starts its own.
                    match futures::future::select(read, std::pin::pin!(relay)).await {
                        Either::Left((next_page, relay)) => {
                            read_ahead = Some(Box::pin(std::future::ready(next_page)));
                            relay.await
                        }
                        Either::Right((progressed, read)) => {
                            read_ahead = Some(read);
                            progressed
                        }
                    }
                }
                None => relay.await,
            };
            if let Some(passed) = passed.filter(|_| progressed || (last_page && keep_holds)) {
                let released = stats.holds_released;
                holds
                    .passed(&passed, held_back, &self.recently_marked, &mut stats)
                    .await;
                self.totals.released(stats.holds_released - released);
                crate::metrics::holds_released(stats.holds_released - released);
            }
            if let Some((a, leased)) = lease {
                a.end_page(leased);
            }
            if last_page {
                if let Some((a, leased)) = lease {
                    a.partition_polled(leased);
                }
                break;
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

    /// Relays one page of `partition`: each item decoded into an event, its `ttl` refreshed when
    /// it expires soon, held back behind an earlier event of its aggregate not published in this
    /// pass, published (no publish starting after `deadline`) and settled; then what was not
    /// published holds its aggregate back for the rest of the pass, what left the index is
    /// remembered for the index's lag, and the page's tally is recorded. Whether the page moved
    /// anything out of the index.
    async fn relay_page(
        &self,
        partition: &str,
        items: Vec<RawItem>,
        deadline: Deadline,
        held_back: &mut HashMap<String, Behind>,
        stats: &mut PassStats,
    ) -> bool {
        stats.taken += items.len() as u64;
        let mut events: Vec<Event<RawItem>> = items
            .into_iter()
            .map(|raw| decode(raw, partition, self.relay.encoding()))
            .collect();
        let (extended, errors) = self.ttl.refresh(&events, Utc::now()).await;
        stats.ttl_extended += extended;
        stats.ttl_errors += errors;
        for event in &mut events {
            if let Some(&behind) = event.aggregate.as_ref().and_then(|a| held_back.get(a)) {
                event.hold_back(behind);
            }
        }
        if events
            .iter()
            .any(|e| e.is_ready() || matches!(e.state, State::Poison { .. }))
        {
            self.relay.publish(&mut events, deadline).await;
            self.relay
                .settle(&mut events, Deadline::NONE, dead_letter_record)
                .await;
        }
        for event in &events {
            if let (Some(aggregate), Some(behind)) = (&event.aggregate, event.blocks()) {
                held_back.entry(aggregate.clone()).or_insert(behind);
            }
        }
        // Out of the table's pending set, and possibly still in the index for its lag.
        self.recently_marked.remember(
            events
                .iter()
                .filter(|e| e.left_the_index())
                .filter_map(|e| e.key.clone()),
        );
        self.totals.record(&events, stats);
        events.iter().any(Event::left_the_index)
    }

    /// Relays `items` in the given order, a page at a time, holding back an aggregate after an
    /// event not published, with no deadline: `redrive`'s publish.
    pub(super) async fn relay_items(&self, items: Vec<RawItem>) -> PassStats {
        let mut stats = PassStats::default();
        let mut held_back = HashMap::new();
        let page_size = usize::try_from(self.page_size).unwrap_or(1).max(1);
        for page in items.chunks(page_size) {
            self.relay_page(
                "redrive",
                page.to_vec(),
                Deadline::NONE,
                &mut held_back,
                &mut stats,
            )
            .await;
        }
        stats
    }
}
