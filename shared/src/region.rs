//! Global tables: which region wrote an event, and which regions a global table spans.
//!
//! On a DynamoDB global table every region's stream holds every write, wherever it began
//! (docs/global-tables.md). So that each event is published once, the writer stamps each outbox
//! item with the region it was written in ([`crate::schema::attr::ORIGIN_REGION`]) and indexes it
//! under that region's pending partitions ([`crate::schema::regional_pending_shard_pk`]); each
//! region's relays publish their own region's events, and another region's pollers adopt a region
//! whose relays stopped. A single-region table has no origin and keeps the unregioned keys.

use std::fmt;
use std::str::FromStr;

/// An AWS region name as the SDK's config holds it (`us-east-1`, `eu-west-3`, `us-gov-west-1`):
/// lowercase ASCII letters, digits and hyphens, starting with a letter and not ending with a
/// hyphen, at most 32 characters. It is part of an index key (`OUTBOX#PENDING#{region}#{shard}`),
/// so `#` and anything else a key could not round-trip is refused.
#[derive(
    Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(try_from = "String", into = "String")]
pub struct Region(String);

impl TryFrom<String> for Region {
    type Error = InvalidRegion;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        Self::new(name)
    }
}

impl From<Region> for String {
    fn from(region: Region) -> Self {
        region.0
    }
}

/// A region name that is not one ([`Region`] says what one is).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{0:?} is not a region name: expected lowercase letters, digits and hyphens, such as us-east-1"
)]
pub struct InvalidRegion(pub String);

const MAX_REGION_LEN: usize = 32;

impl Region {
    /// # Errors
    /// [`InvalidRegion`] when `name` is not a region name.
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidRegion> {
        let name = name.into();
        let valid = !name.is_empty()
            && name.len() <= MAX_REGION_LEN
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && !name.ends_with('-')
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if valid {
            Ok(Self(name))
        } else {
            Err(InvalidRegion(name))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Region {
    type Err = InvalidRegion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl AsRef<str> for Region {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The regions of a global table as one relay sees them: its own (from its SDK config) and every
/// region the table spans (`--regions` / `OUTBOX_REGIONS`), its own among them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalTable {
    own: Region,
    regions: Vec<Region>,
}

/// `--regions` that cannot describe a global table this relay is part of.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GlobalTableError {
    #[error(
        "--regions ({regions}) does not include this relay's own region {own} (AWS_REGION): \
         list every region of the global table, this one included"
    )]
    OwnRegionMissing { own: Region, regions: String },
    #[error("--regions names {0} twice")]
    Repeated(Region),
    #[error("--regions needs at least two regions for a global table, got {0}")]
    TooFew(usize),
}

impl GlobalTable {
    /// # Errors
    /// [`GlobalTableError`] when `regions` has fewer than two regions, repeats one, or leaves
    /// out `own`.
    pub fn new(own: Region, regions: Vec<Region>) -> Result<Self, GlobalTableError> {
        if regions.len() < 2 {
            return Err(GlobalTableError::TooFew(regions.len()));
        }
        for (i, region) in regions.iter().enumerate() {
            if regions[..i].contains(region) {
                return Err(GlobalTableError::Repeated(region.clone()));
            }
        }
        if !regions.contains(&own) {
            let regions = regions
                .iter()
                .map(Region::as_str)
                .collect::<Vec<_>>()
                .join(",");
            return Err(GlobalTableError::OwnRegionMissing { own, regions });
        }
        Ok(Self { own, regions })
    }

    /// The region this relay runs in: the events it publishes while every region is up.
    pub fn own(&self) -> &Region {
        &self.own
    }

    /// Every region of the table, in the order configured.
    pub fn regions(&self) -> &[Region] {
        &self.regions
    }

    /// The other regions, whose events this relay publishes only when it adopts them.
    pub fn others(&self) -> impl Iterator<Item = &Region> {
        self.regions.iter().filter(move |r| **r != self.own)
    }
}

/// The region items of the poller fleet's lease table, which decide who publishes a region's
/// events (docs/global-tables.md, "Failover and hand-back"): their keys and attribute names, one
/// definition for the pollers that write them and the stream relay that reads its region's
/// adoption.
pub mod lease_item {
    use super::Region;

    /// The lease table's partition key (a lease, a poller's heartbeat, a region item).
    pub const LEASE_KEY: &str = "LeaseKey";
    /// The region publishing an adopted region's events; absent while it publishes its own.
    pub const ADOPTER: &str = "Adopter";
    /// Bumped by every change of an adoption; a write expects the epoch it read.
    pub const EPOCH: &str = "Epoch";
    /// When the adoption last changed (epoch milliseconds, the writer's clock).
    pub const CHANGED_AT: &str = "ChangedAt";
    /// `true` when an operator adopted the region (`adopt-region`): no automatic hand-back.
    pub const BY_OPERATOR: &str = "ByOperator";

    /// `LeaseKey` of a region's heartbeat, which its pollers write every round.
    pub fn heartbeat_key(region: &Region) -> String {
        format!("REGION#{region}")
    }

    /// `LeaseKey` of a region's adoption: which region publishes its events.
    pub fn adoption_key(region: &Region) -> String {
        format!("ADOPTION#{region}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(name: &str) -> Region {
        Region::new(name).unwrap()
    }

    #[test]
    fn region_names_are_what_the_sdk_holds() {
        for name in ["us-east-1", "eu-west-3", "us-gov-west-1", "cn-north-1"] {
            assert_eq!(r(name).as_str(), name);
        }
        for bad in ["", "US-EAST-1", "us#east-1", "us-east-1-", "1us", "us east"] {
            assert!(Region::new(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_global_table_includes_its_own_region_once() {
        let table = GlobalTable::new(r("us-east-1"), vec![r("us-east-1"), r("eu-west-1")]).unwrap();
        assert_eq!(table.others().collect::<Vec<_>>(), [&r("eu-west-1")]);
        assert_eq!(
            GlobalTable::new(r("us-east-2"), vec![r("us-east-1"), r("eu-west-1")])
                .unwrap_err()
                .to_string(),
            "--regions (us-east-1,eu-west-1) does not include this relay's own region us-east-2 \
             (AWS_REGION): list every region of the global table, this one included"
        );
        assert_eq!(
            GlobalTable::new(r("us-east-1"), vec![r("us-east-1")]).unwrap_err(),
            GlobalTableError::TooFew(1)
        );
        assert_eq!(
            GlobalTable::new(r("us-east-1"), vec![r("us-east-1"), r("us-east-1")]).unwrap_err(),
            GlobalTableError::Repeated(r("us-east-1"))
        );
    }
}
