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

use outbox_shared::ShardCount;
use outbox_shared::region::{GlobalTable, Region};
use outbox_shared::schema::{self, PendingPartition};

/// The pending partitions a poller serves: its regions' (none on a single-region table) shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partitions {
    /// The global table (`--regions`), `None` on a single-region table.
    table: Option<GlobalTable>,
    /// The regions whose partitions this poller serves: its own first, then any it adopted.
    served: Vec<Region>,
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
        let served = table.iter().map(|t| t.own().clone()).collect();
        Self {
            table,
            served,
            shard_count,
            shards,
        }
    }

    /// These partitions and `region`'s too (a region whose relays stopped, taken over). A region
    /// served already, or none of the table's, changes nothing; so does a single-region table.
    #[must_use]
    pub fn adopt(mut self, region: &Region) -> Self {
        let of_table = self
            .table
            .as_ref()
            .is_some_and(|t| t.regions().contains(region));
        if of_table && !self.served.contains(region) {
            self.served.push(region.clone());
        }
        self
    }

    /// The global table, if this is one.
    pub fn global_table(&self) -> Option<&GlobalTable> {
        self.table.as_ref()
    }

    /// The regions served, own first; empty on a single-region table.
    pub fn served_regions(&self) -> &[Region] {
        &self.served
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
        self.served
            .iter()
            .flat_map(|region| {
                self.shards
                    .iter()
                    .map(|&s| PendingPartition::regional(region.clone(), s))
            })
            .collect()
    }

    /// Every partition of the shard count in the served regions (`--shards` aside): what a lease
    /// fleet shares.
    pub fn every_shard(&self) -> Vec<PendingPartition> {
        Self {
            shards: self.shard_count.shards().collect(),
            ..self.clone()
        }
        .all()
    }

    /// The partitions of [`Self::all`]'s shards in every region of the table (the single-region
    /// table's shards): what `status` reports, whoever serves them.
    pub fn of_every_region(&self) -> Vec<PendingPartition> {
        match &self.table {
            None => self.all(),
            Some(table) => Self {
                served: table.regions().to_vec(),
                ..self.clone()
            }
            .all(),
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
            .is_none_or(|region| self.served.contains(region))
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
        let partitions = global("eu-west-1").adopt(&r("us-east-1"));
        assert_eq!(
            partitions.served_regions(),
            [r("eu-west-1"), r("us-east-1")]
        );
        assert_eq!(partitions.all().len(), 8);
        assert!(partitions.serves("OUTBOX#PENDING#us-east-1#0"));
        // Not a region of the table: nothing changes
        assert_eq!(
            global("eu-west-1").adopt(&r("ap-south-1")),
            global("eu-west-1")
        );
    }
}
