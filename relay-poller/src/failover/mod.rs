//! Region failover on a global table: which regions' partitions a region's pollers publish.
//!
//! Each region's pollers publish their own region's partitions (`OUTBOX#PENDING#{region}#{shard}`)
//! while every region is up. When a region's relays stop, another region's pollers *adopt* its
//! partitions and publish its replicated pending events through the same leases and the same pass
//! as their own; when it returns they *hand them back*. Two items per region in the lease table
//! (global, so replicated like the outbox table) decide it:
//!
//! - `REGION#{region}`, the region's **heartbeat**: every poller of the region writes its clock's
//!   time there every round. Only that region writes it, so last writer wins cannot mix two
//!   regions' values.
//! - `ADOPTION#{region}`, the region's **adoption**: the region publishing it when its own pollers
//!   do not (`Adopter`, absent while it publishes itself), an `Epoch` bumped by every change, when
//!   it changed, and whether an operator made it (`relay-poller adopt-region`: no automatic
//!   hand-back then).
//!
//! The rule every poller follows, on its own region's replica: region `x` publishes region `r`'s
//! partitions only while `ADOPTION#r` names `x` as adopter (`r` itself: while it names none, and
//! one round after a hand-back, so the adopter's last marks reach it first). Conditions are
//! checked on the local replica only and concurrent writes of two regions are settled by last
//! writer wins, so two regions can both write an adoption of `r`; but every replica ends up with
//! the same item, and the region it does not name stops at its next round after reading it: two
//! regions publish one region at once for at most the replication latency plus one round
//! ([`FailoverSettings::interval`]). The cost is duplicates (the same event id, published twice;
//! the conditional status mark still guards every item), never a loss (docs/global-tables.md,
//! "Failover and hand-back").
//!
//! The room: this file is what the items are, the settings and the errors; [`plan`] the decisions,
//! pure functions of the items, the time and what this poller saw before; [`store`] the
//! [`RegionStore`] port and its DynamoDB adapter (on the lease table); [`manager`] a poller's
//! region rounds and the regions it serves ([`ServedRegions`]), which the poll loop reads;
//! [`operator`] what `adopt-region` and `hand-back-region` change.

pub mod manager;
pub mod operator;
pub mod plan;
pub mod store;

use std::collections::BTreeMap;
use std::time::Duration;

use outbox_shared::Region;

use crate::assignment::Millis;

pub use manager::{RegionManager, RegionReport, ServedRegions};
pub use store::{DynamoRegionStore, RegionStore};

/// Attribute names of the region items in the lease table (`outbox_shared::region::lease_item`,
/// which the stream relay reads too).
pub mod attr {
    pub use outbox_shared::region::lease_item::{
        ADOPTER, BY_OPERATOR, CHANGED_AT, EPOCH, LEASE_KEY,
    };
    /// When a poller of the region last wrote its heartbeat (epoch milliseconds, its clock).
    pub const HEARTBEAT_AT: &str = crate::assignment::attr::HEARTBEAT_AT;
    /// The poller that wrote the region's heartbeat last.
    pub const OWNER: &str = crate::assignment::attr::OWNER;
}

pub use outbox_shared::region::lease_item::{adoption_key, heartbeat_key};

/// Default of `--region-failover-after`.
pub const DEFAULT_FAILOVER_AFTER: Duration = Duration::from_secs(60);

/// How regions fail over and come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailoverSettings {
    /// A region whose heartbeat is this old (or that has none for this long) is adopted.
    pub failover_after: Duration,
    /// How long an adopted region's heartbeat must be fresh before it is handed back (hysteresis,
    /// so a region that flaps does not bounce its partitions).
    pub hand_back_after: Duration,
    /// How often a poller writes its region's heartbeat and reads the adoptions (the lease renew
    /// interval). A region that stops publishing another does so at its next round.
    pub interval: Duration,
}

impl FailoverSettings {
    /// Failover after `failover_after`, hand-back after its heartbeat was fresh as long, a round
    /// every `interval`.
    pub fn new(failover_after: Duration, interval: Duration) -> Self {
        Self {
            failover_after,
            hand_back_after: failover_after,
            interval,
        }
    }

    pub(crate) fn failover_after_ms(&self) -> Millis {
        crate::assignment::lease::millis(self.failover_after)
    }

    pub(crate) fn hand_back_after_ms(&self) -> Millis {
        crate::assignment::lease::millis(self.hand_back_after)
    }

    pub(crate) fn interval_ms(&self) -> Millis {
        crate::assignment::lease::millis(self.interval)
    }
}

/// A region's heartbeat as its replica in this region holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionHeartbeat {
    pub region: Region,
    /// When one of its pollers last wrote it, by that poller's clock.
    pub heartbeat_at: Millis,
    /// The poller that wrote it.
    pub owner: String,
}

/// Who publishes a region's partitions, as the replica in this region holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adoption {
    pub region: Region,
    /// The region publishing them; `None`: the region publishes its own.
    pub adopter: Option<Region>,
    pub epoch: u64,
    pub changed_at: Millis,
    /// Adopted by an operator: kept until an operator hands it back (or the adopter dies).
    pub by_operator: bool,
}

/// The region items of the lease table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegionView {
    pub heartbeats: BTreeMap<Region, RegionHeartbeat>,
    pub adoptions: BTreeMap<Region, Adoption>,
}

impl RegionView {
    /// The region publishing `region`'s partitions by this view: its adopter, or itself.
    pub fn publisher_of<'a>(&'a self, region: &'a Region) -> &'a Region {
        self.adoptions
            .get(region)
            .and_then(|a| a.adopter.as_ref())
            .unwrap_or(region)
    }

    /// The epoch an adoption write expects `region`'s item at: `None` when there is none.
    pub fn epoch_of(&self, region: &Region) -> Option<u64> {
        self.adoptions.get(region).map(|a| a.epoch)
    }
}

/// What an adoption write changes `region`'s item to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdoptionChange {
    pub region: Region,
    /// The new publisher (`None`: the region itself).
    pub adopter: Option<Region>,
    /// The epoch read (`None`: no item yet); the write sets it one higher.
    pub expect: Option<u64>,
    pub at: Millis,
    pub by_operator: bool,
}

impl AdoptionChange {
    /// The epoch the write sets.
    pub fn next_epoch(&self) -> u64 {
        self.expect.map_or(1, |e| e + 1)
    }

    /// The item as the write leaves it.
    pub fn applied(&self) -> Adoption {
        Adoption {
            region: self.region.clone(),
            adopter: self.adopter.clone(),
            epoch: self.next_epoch(),
            changed_at: self.at,
            by_operator: self.by_operator,
        }
    }
}

/// A call on the region items that failed, or an item that is not one.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegionError {
    /// The call failed (after the SDK's retries).
    #[error("{} on lease table {table} (region items) failed", .failure.operation)]
    Call {
        table: String,
        #[source]
        failure: outbox_shared::SdkFailure,
    },
    /// An item the relay did not write, or wrote with another version of it.
    #[error("lease table {table}: item {key} is malformed: {reason}")]
    Malformed {
        table: String,
        key: String,
        reason: String,
    },
}

#[cfg(test)]
mod tests;
