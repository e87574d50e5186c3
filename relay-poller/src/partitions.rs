//! The pending partitions a poller serves, as one value built from its configuration:
//! [`Partitions`].
//!
//! On a single-region table they are the shards of the shard count (`OUTBOX#PENDING#{shard}`),
//! or the `--shards` among them. On a global table (`--regions`) every region's stream and index
//! hold every region's events, so a poller serves only its own region's partitions
//! (`OUTBOX#PENDING#{own}#{shard}`) and the other regions' pollers serve theirs: each event is
//! published once (docs/global-tables.md). A region taken over from another whose relays stopped
//! is added to the same value ([`Partitions::adopt`]), so whatever polls, leases, sweeps or
//! reports partitions asks this one value which are its.
//!
//! Items no writer stamped with a region (another client) sit under the unregioned partitions;
//! on a global table they belong to the first region of `--regions`, whose sweep publishes them
//! (as the first region's stream relay does): never every region.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use outbox_shared::ShardCount;
use outbox_shared::region::{GlobalTable, Region};
use outbox_shared::schema::{self, PendingPartition};

/// The pending partitions a poller serves: its regions' (none on a single-region table) shards.
/// Clones share one [`ServedRegions`]: a region adopted or handed back is seen at once by
/// whatever polls, leases or sweeps with a clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partitions {
    /// The global table (`--regions`), `None` on a single-region table.
    table: Option<GlobalTable>,
    /// The regions whose partitions this poller serves now: its own, then any it adopted; set by
    /// its region rounds on a global table with a lease table (`crate::failover`).
    served: ServedRegions,
    /// The writer's shard count: a partition of a shard beyond it is stray.
    shard_count: ShardCount,
    /// The shards polled in each served region (`--shards`, or all), ascending.
    shards: Vec<u16>,
}

impl Partitions {
    /// Every shard of `shard_count` on a single-region table.
    pub fn single_region(shard_count: ShardCount) -> Self {
        Self::new(None, shard_count, shard_count.shards().collect())
    }

    /// The partitions of `shards` (of `shard_count`): of the own region of `table` when there is
    /// one, else the single-region table's.
    pub fn new(table: Option<GlobalTable>, shard_count: ShardCount, shards: Vec<u16>) -> Self {
        let served = ServedRegions::default();
        served.set(table.iter().map(|t| t.own().clone()).collect());
        Self {
            table,
            served,
            shard_count,
            shards,
        }
    }

    /// The regions served, shared with every clone of these partitions: what a region round
    /// changes when it adopts or hands back a region.
    pub fn served(&self) -> &ServedRegions {
        &self.served
    }

    /// These partitions and `region`'s too (a region whose relays stopped, taken over), in every
    /// clone. A region served already, or none of the table's, changes nothing; so does a
    /// single-region table.
    pub fn adopt(&self, region: &Region) {
        if self.is_region_of_table(region) {
            self.served.insert(region.clone());
        }
    }

    fn is_region_of_table(&self, region: &Region) -> bool {
        self.table
            .as_ref()
            .is_some_and(|t| t.regions().contains(region))
    }

    /// The global table, if this is one.
    pub fn global_table(&self) -> Option<&GlobalTable> {
        self.table.as_ref()
    }

    /// The regions served now, own first, then the adopted ones in `--regions` order; empty on a
    /// single-region table.
    pub fn served_regions(&self) -> Vec<Region> {
        let Some(table) = &self.table else {
            return Vec::new();
        };
        let served = self.served.regions();
        std::iter::once(table.own())
            .chain(table.regions().iter().filter(|r| *r != table.own()))
            .filter(|r| served.contains(*r))
            .cloned()
            .collect()
    }

    pub fn shard_count(&self) -> ShardCount {
        self.shard_count
    }

    /// Every partition this poller polls, region by region, shards ascending.
    pub fn all(&self) -> Vec<PendingPartition> {
        if self.table.is_none() {
            return self
                .shards
                .iter()
                .map(|&s| PendingPartition::unregioned(s))
                .collect();
        }
        self.served_regions()
            .into_iter()
            .flat_map(|region| {
                self.shards
                    .iter()
                    .map(move |&s| PendingPartition::regional(region.clone(), s))
            })
            .collect()
    }

    /// Every partition of the shard count in the served regions (`--shards` aside).
    pub fn every_shard(&self) -> Vec<PendingPartition> {
        self.every_shard_of(&self.served_regions())
    }

    /// Every partition of the shard count in every region of the table, own region first (the
    /// single-region table's shards): what a lease fleet may come to share, as regions are
    /// adopted and handed back.
    pub fn every_shard_of_every_region(&self) -> Vec<PendingPartition> {
        match &self.table {
            None => self.every_shard(),
            Some(table) => {
                let regions: Vec<Region> = std::iter::once(table.own())
                    .chain(table.regions().iter().filter(|r| *r != table.own()))
                    .cloned()
                    .collect();
                self.every_shard_of(&regions)
            }
        }
    }

    fn every_shard_of(&self, regions: &[Region]) -> Vec<PendingPartition> {
        if self.table.is_none() {
            return self
                .shard_count
                .shards()
                .map(PendingPartition::unregioned)
                .collect();
        }
        regions
            .iter()
            .flat_map(|region| {
                self.shard_count
                    .shards()
                    .map(|s| PendingPartition::regional(region.clone(), s))
            })
            .collect()
    }

    /// The partitions of [`Self::all`]'s shards in every region of the table (the single-region
    /// table's shards): what `status` reports, whoever serves them.
    pub fn of_every_region(&self) -> Vec<PendingPartition> {
        match &self.table {
            None => self.all(),
            Some(table) => table
                .regions()
                .iter()
                .flat_map(|region| {
                    self.shards
                        .iter()
                        .map(|&s| PendingPartition::regional(region.clone(), s))
                })
                .collect(),
        }
    }

    /// The assignment of a poller without leases: [`Self::all`], every page may start.
    pub fn fixed(&self) -> crate::assignment::StaticShards {
        crate::assignment::StaticShards(self.all())
    }

    /// The region whose relays publish the events under `gsi1pk` (a pending index partition): on
    /// a global table its events' region when it is one of the table's, else the first region
    /// listed (events no writer stamped, another client's scheme); `None` on a single-region
    /// table.
    pub fn region_of(&self, gsi1pk: &str) -> Option<&Region> {
        let table = self.table.as_ref()?;
        let origin = schema::parse_pending_partition(gsi1pk).and_then(|p| p.origin);
        Some(
            origin
                .and_then(|o| table.regions().iter().find(|r| **r == o))
                .unwrap_or_else(|| &table.regions()[0]),
        )
    }

    /// Whether the events under `gsi1pk` are this poller's to publish: on a single-region table
    /// all of them; on a global table those of a region it serves ([`Self::region_of`]).
    pub fn serves(&self, gsi1pk: &str) -> bool {
        self.region_of(gsi1pk)
            .is_none_or(|region| self.served.serves(region))
    }

    /// Before a page of the events under `gsi1pk`: `true` (and the page counted in flight until
    /// [`Self::end_page`]) when they are this poller's to publish now. A region being handed back
    /// waits for its pages in flight to end ([`ServedRegions`]).
    pub fn begin_page(&self, gsi1pk: &str) -> bool {
        self.region_of(gsi1pk)
            .is_none_or(|region| self.served.begin_page(region))
    }

    /// A page begun by [`Self::begin_page`] ended.
    pub fn end_page(&self, gsi1pk: &str) {
        if let Some(region) = self.region_of(gsi1pk) {
            self.served.end_page(region);
        }
    }

    /// Whether `gsi1pk` is one of the partitions the writer indexes pending events under, in any
    /// region of the table: a shard within the shard count, regional on a global table (one of
    /// its regions), unregioned on a single-region table. Any other is stray: the sweep publishes
    /// its events, if they are this poller's ([`Self::serves`]).
    pub fn is_indexed(&self, gsi1pk: &str) -> bool {
        let Some(partition) = schema::parse_pending_partition(gsi1pk) else {
            return false;
        };
        if partition.shard >= self.shard_count.get() {
            return false;
        }
        match (&self.table, &partition.origin) {
            (None, None) => true,
            (Some(table), Some(origin)) => table.regions().contains(origin),
            _ => false,
        }
    }
}

#[derive(Debug, Default)]
struct Served {
    regions: BTreeSet<Region>,
    /// Pages in flight per region.
    busy: BTreeMap<Region, u32>,
}

/// The regions whose partitions a poller publishes now, and the pages in flight per region (a
/// hand-back waits for its region's to end). Cloned handles share one set. On a global table with
/// a lease table, the region rounds set it ([`crate::failover::RegionManager`]): empty until the
/// first round has read the adoptions, so a region that comes back does not publish its own
/// partitions before it knows whether another region adopted them.
#[derive(Debug, Clone, Default)]
pub struct ServedRegions {
    inner: Arc<(Mutex<Served>, tokio::sync::Notify)>,
}

impl PartialEq for ServedRegions {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner) || self.regions() == other.regions()
    }
}

impl Eq for ServedRegions {}

impl ServedRegions {
    fn lock(&self) -> MutexGuard<'_, Served> {
        self.inner
            .0
            .lock()
            .expect("served regions lock is never poisoned")
    }

    /// The regions served now.
    pub fn regions(&self) -> BTreeSet<Region> {
        self.lock().regions.clone()
    }

    /// Whether `region` is served now.
    pub fn serves(&self, region: &Region) -> bool {
        self.lock().regions.contains(region)
    }

    /// Before a page of one of `region`'s partitions: `true` (and the page counted in flight
    /// until [`Self::end_page`]) when it may start.
    pub fn begin_page(&self, region: &Region) -> bool {
        let mut served = self.lock();
        if !served.regions.contains(region) {
            return false;
        }
        *served.busy.entry(region.clone()).or_default() += 1;
        true
    }

    /// A page begun by [`Self::begin_page`] ended.
    pub fn end_page(&self, region: &Region) {
        if let Some(busy) = self.lock().busy.get_mut(region) {
            *busy = busy.saturating_sub(1);
        }
        self.inner.1.notify_waiters();
    }

    /// Serves exactly `regions` from now on.
    pub(crate) fn set(&self, regions: BTreeSet<Region>) {
        self.lock().regions = regions;
    }

    fn insert(&self, region: Region) {
        self.lock().regions.insert(region);
    }

    /// Stops `region`: no new page of its partitions starts.
    pub(crate) fn stop(&self, region: &Region) {
        self.lock().regions.remove(region);
    }

    /// Waits up to `timeout` for `region` to have no page in flight.
    pub(crate) async fn wait_idle(&self, region: &Region, timeout: Duration) -> bool {
        let busy = || self.lock().busy.get(region).is_some_and(|b| *b > 0);
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.inner.1.notified();
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str) -> Region {
        Region::new(name).unwrap()
    }

    fn global(own: &str) -> Partitions {
        let table = GlobalTable::new(r(own), vec![r("us-east-1"), r("eu-west-1")]).unwrap();
        Partitions::new(Some(table), ShardCount::new(4).unwrap(), vec![0, 1, 2, 3])
    }

    #[test]
    fn a_single_region_poller_serves_the_unregioned_shards() {
        let partitions = Partitions::single_region(ShardCount::new(2).unwrap());
        assert_eq!(
            partitions.all(),
            [
                PendingPartition::unregioned(0),
                PendingPartition::unregioned(1)
            ]
        );
        assert!(partitions.serves("OUTBOX#PENDING#1"));
        assert!(partitions.serves("OUTBOX#PENDING#eu-west-1#1"));
        assert!(partitions.is_indexed("OUTBOX#PENDING#1"));
        assert!(!partitions.is_indexed("OUTBOX#PENDING#2"));
        assert!(!partitions.is_indexed("OUTBOX#PENDING#eu-west-1#1"));
    }

    #[test]
    fn a_global_table_poller_serves_its_own_regions_partitions_only() {
        let partitions = global("eu-west-1");
        assert_eq!(partitions.all().len(), 4);
        assert!(
            partitions
                .all()
                .iter()
                .all(|p| p.origin == Some(r("eu-west-1")))
        );
        assert!(partitions.serves("OUTBOX#PENDING#eu-west-1#3"));
        assert!(!partitions.serves("OUTBOX#PENDING#us-east-1#3"));
        // Every region's partitions are indexed ones, not stray
        assert!(partitions.is_indexed("OUTBOX#PENDING#us-east-1#3"));
        assert!(!partitions.is_indexed("OUTBOX#PENDING#us-east-1#4"));
        assert!(!partitions.is_indexed("OUTBOX#PENDING#ap-south-1#0"));
        assert!(!partitions.is_indexed("OUTBOX#PENDING#3"));
    }

    #[test]
    fn unstamped_events_belong_to_the_first_region_listed() {
        for gsi1pk in [
            "OUTBOX#PENDING#3",
            "OUTBOX#PENDING#ap-south-1#0",
            "OTHER#CLIENT",
        ] {
            assert!(global("us-east-1").serves(gsi1pk), "{gsi1pk}");
            assert!(!global("eu-west-1").serves(gsi1pk), "{gsi1pk}");
        }
    }

    #[test]
    fn an_adopted_region_is_served_beside_the_own_one() {
        let partitions = global("eu-west-1");
        let clone = partitions.clone();
        partitions.adopt(&r("us-east-1"));
        // Seen by every clone: the poll loop, the sweep and the leases share one value
        for partitions in [&partitions, &clone] {
            assert_eq!(
                partitions.served_regions(),
                [r("eu-west-1"), r("us-east-1")]
            );
            assert_eq!(partitions.all().len(), 8);
            assert!(partitions.serves("OUTBOX#PENDING#us-east-1#0"));
        }
        // Not a region of the table: nothing changes
        let partitions = global("eu-west-1");
        partitions.adopt(&r("ap-south-1"));
        assert_eq!(partitions, global("eu-west-1"));
    }

    #[tokio::test]
    async fn a_region_no_longer_served_starts_no_page_and_its_pages_in_flight_are_counted() {
        let partitions = global("eu-west-1");
        partitions.adopt(&r("us-east-1"));
        assert!(partitions.begin_page("OUTBOX#PENDING#us-east-1#0"));
        partitions.served().stop(&r("us-east-1"));
        assert!(!partitions.begin_page("OUTBOX#PENDING#us-east-1#1"));
        // Unstamped events are the first region's (us-east-1): stopped with it
        assert!(!partitions.begin_page("OUTBOX#PENDING#1"));
        assert!(partitions.begin_page("OUTBOX#PENDING#eu-west-1#1"));
        let idle = partitions
            .served()
            .wait_idle(&r("us-east-1"), Duration::ZERO)
            .await;
        assert!(!idle, "one page of us-east-1 is in flight");
        partitions.end_page("OUTBOX#PENDING#us-east-1#0");
        let idle = partitions
            .served()
            .wait_idle(&r("us-east-1"), Duration::ZERO)
            .await;
        assert!(idle);
        assert_eq!(
            partitions.every_shard_of_every_region()[0],
            PendingPartition::regional(r("eu-west-1"), 0),
            "own region first"
        );
        assert_eq!(partitions.every_shard_of_every_region().len(), 8);
    }
}
