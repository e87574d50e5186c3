//! The single-table item schema: attribute names, entity types, status values and key formats.
//!
//! Every crate refers to these constants; no attribute name is spelled as a string literal
//! anywhere else. See docs/schema.md, "Item schema", for the full table.

use crate::region::Region;

/// Attribute names.
pub mod attr {
    /// Partition key of the table (`USER#{user_id}`).
    pub const PK: &str = "PK";
    /// Sort key of the table (`ORDER#{order_id}` or `OUTBOX#{event_id}`).
    pub const SK: &str = "SK";
    /// Discriminates item kinds in the single table (`Order`, `OutboxEvent`, …).
    pub const ENTITY_TYPE: &str = "EntityType";

    /// Order attributes.
    pub const ORDER_ID: &str = "OrderId";
    pub const USER_ID: &str = "UserId";
    pub const AMOUNT: &str = "Amount";
    pub const ITEMS: &str = "Items";
    pub const STATUS: &str = "Status";
    pub const VERSION: &str = "Version";
    pub const CREATED_AT: &str = "CreatedAt";
    pub const UPDATED_AT: &str = "UpdatedAt";

    /// Outbox attributes.
    pub const EVENT_ID: &str = "EventId";
    pub const EVENT_TYPE: &str = "EventType";
    pub const AGGREGATE_TYPE: &str = "AggregateType";
    pub const AGGREGATE_ID: &str = "AggregateId";
    pub const SEQUENCE: &str = "Sequence";
    pub const PAYLOAD: &str = "Payload";
    /// Where a payload too large for the item is stored (S3), a map `{Uri, Size, Sha256}`, in
    /// place of [`PAYLOAD`] ([`crate::claim_check`]).
    pub const PAYLOAD_REF: &str = "PayloadRef";
    pub const TRACE_HEADER: &str = "TraceHeader";
    /// W3C Trace Context `traceparent` captured at write time, carried in the envelope.
    pub const TRACE_PARENT: &str = "TraceParent";
    /// W3C Trace Context `tracestate` of [`TRACE_PARENT`], if any.
    pub const TRACE_STATE: &str = "TraceState";
    /// Set when a relay publishes the event.
    pub const PUBLISHED_AT: &str = "PublishedAt";
    /// Set when a relay dead-letters a poison event.
    pub const DEAD_LETTERED_AT: &str = "DeadLetteredAt";
    /// Set with the reason when a relay dead-letters a poison event.
    pub const DEAD_LETTER_REASON: &str = "DeadLetterReason";
    /// Partition key of the sparse outbox index; present only while the event is pending.
    pub const GSI1PK: &str = "GSI1PK";
    /// Sort key of the sparse outbox index; present only while the event is pending.
    pub const GSI1SK: &str = "GSI1SK";
    /// Epoch seconds after which DynamoDB TTL deletes the item (cleanup only, never correctness).
    pub const TTL: &str = "ttl";
    /// Global tables: the region whose writer wrote the event ([`crate::region`]). Its pending
    /// partition is then [`super::regional_pending_shard_pk`]. Absent on a single-region table.
    pub const ORIGIN_REGION: &str = "OriginRegion";

    /// Aggregate hold: the aggregate (`AggregateId`, or `PK` without one) the stream relay left
    /// to the poller.
    pub const ORDERING_KEY: &str = "OrderingKey";
    /// Aggregate hold: when it was set, ISO-8601 UTC (kept while the hold lasts: a hold released
    /// and set again has a new one).
    pub const HELD_SINCE: &str = "HeldSince";
    /// Aggregate hold: the item key of the last event (the highest `GSI1SK`) the stream relay
    /// left to the poller under it, a JSON array `[PK, SK]`. Its `GSI1PK` and `GSI1SK` are the
    /// hold's own, with the hold prefix ([`super::hold_partition`]), so the poller of that
    /// partition finds the hold once it has published past it.
    pub const LAST_LEFT: &str = "LastLeft";
    /// Aggregate hold: how many events were left under it, a number only ever added to while the
    /// hold exists, so it says whether anything was left since the poller read it.
    pub const LEFT_COUNT: &str = "LeftCount";
    /// Aggregate hold of an earlier release: the `GSI1PK` of the held event. Read only to migrate
    /// such a hold ([`super::LEGACY_HOLD_PARTITION`]).
    pub const HELD_PARTITION: &str = "HeldPartition";
    /// Aggregate hold of an earlier release: every event left under it, a string set of item keys
    /// that grew with each. Removed when the hold is migrated.
    pub const LEFT_EVENTS: &str = "LeftEvents";

    /// Idempotency record written by an idempotent create (see the writer).
    pub const IDEMPOTENCY_KEY: &str = "IdempotencyKey";
    pub const REQUEST_HASH: &str = "RequestHash";
}

/// `EntityType` values.
pub mod entity {
    pub const ORDER: &str = "Order";
    pub const OUTBOX_EVENT: &str = "OutboxEvent";
    pub const IDEMPOTENCY: &str = "Idempotency";
    /// The stream relay left an aggregate to the poller after one of its events failed.
    pub const AGGREGATE_HOLD: &str = "AggregateHold";
}

/// Default name of the sparse, sharded outbox index.
pub const DEFAULT_INDEX_NAME: &str = "GSI1";

const USER_PREFIX: &str = "USER#";
const ORDER_PREFIX: &str = "ORDER#";
const OUTBOX_PREFIX: &str = "OUTBOX#";
const IDEMPOTENCY_PREFIX: &str = "IDEMPOTENCY#";
const PENDING_PREFIX: &str = "OUTBOX#PENDING#";
const EVENT_PREFIX: &str = "EVENT#";
const HOLD_PREFIX: &str = "HOLD#";

/// `SK` of an aggregate hold.
pub const HOLD_SK: &str = "HOLD";

/// `GSI1PK` prefix of aggregate holds: a hold is in the index under [`hold_partition`] of the
/// partition of the last event left under it.
const HOLD_PARTITION_PREFIX: &str = "OUTBOX#HOLD#";

/// `GSI1PK` under which every aggregate hold of an earlier release was kept (one partition for
/// all of them, which DynamoDB's per-partition write limit caps). The poller migrates such holds
/// to [`hold_partition`]; nothing writes it any more.
pub const LEGACY_HOLD_PARTITION: &str = "OUTBOX#HOLD";

/// `GSI1PK` of the aggregate holds whose last event left is under the index partition
/// `partition`: `OUTBOX#HOLD#{partition}`. The holds spread over the index's partitions as the
/// events do, and the poller that polls `partition` releases them. Not a pending-event
/// partition: the sweep and the backlog count holds apart.
pub fn hold_partition(partition: &str) -> String {
    format!("{HOLD_PARTITION_PREFIX}{partition}")
}

/// The event partition of a hold partition ([`hold_partition`]), if `gsi1pk` is one.
pub fn parse_hold_partition(gsi1pk: &str) -> Option<&str> {
    gsi1pk.strip_prefix(HOLD_PARTITION_PREFIX)
}

/// Whether `gsi1pk` is a partition of aggregate holds (this release's or the legacy one), not of
/// pending events.
pub fn is_hold_partition(gsi1pk: &str) -> bool {
    gsi1pk == LEGACY_HOLD_PARTITION || parse_hold_partition(gsi1pk).is_some()
}

/// `PK` of the hold of the aggregate with `ordering_key`: `HOLD#{ordering_key}`.
pub fn hold_pk(ordering_key: &str) -> String {
    format!("{HOLD_PREFIX}{ordering_key}")
}

/// `PK` of a user's item collection: `USER#{user_id}`.
pub fn user_pk(user_id: &str) -> String {
    format!("{USER_PREFIX}{user_id}")
}

/// `SK` of an order: `ORDER#{order_id}`.
pub fn order_sk(order_id: &str) -> String {
    format!("{ORDER_PREFIX}{order_id}")
}

/// `SK` of an outbox event: `OUTBOX#{event_id}`.
pub fn outbox_sk(event_id: &str) -> String {
    format!("{OUTBOX_PREFIX}{event_id}")
}

/// `SK` of an idempotency record: `IDEMPOTENCY#{key}`.
pub fn idempotency_sk(key: &str) -> String {
    format!("{IDEMPOTENCY_PREFIX}{key}")
}

/// `GSI1PK` of a pending event on `shard`: `OUTBOX#PENDING#{shard}`.
pub fn pending_shard_pk(shard: u16) -> String {
    format!("{PENDING_PREFIX}{shard}")
}

/// Reads the shard number back from a `GSI1PK`, if it has the (single-region) pending-shard
/// format. A regional partition ([`regional_pending_shard_pk`]) is not one: see
/// [`parse_pending_partition`].
pub fn parse_pending_shard_pk(gsi1pk: &str) -> Option<u16> {
    gsi1pk.strip_prefix(PENDING_PREFIX)?.parse().ok()
}

/// `GSI1PK` of a pending event of a global table written in `origin`, on `shard`:
/// `OUTBOX#PENDING#{origin}#{shard}`. Each region's partitions are apart, so a region's pollers
/// query their own and another region's pollers can adopt them whole.
pub fn regional_pending_shard_pk(origin: &Region, shard: u16) -> String {
    format!("{PENDING_PREFIX}{origin}#{shard}")
}

/// `GSI1PK` of a pending event on `shard`, regional when the event has an `origin`
/// ([`regional_pending_shard_pk`]), else [`pending_shard_pk`].
pub fn pending_partition(origin: Option<&Region>, shard: u16) -> String {
    match origin {
        Some(origin) => regional_pending_shard_pk(origin, shard),
        None => pending_shard_pk(shard),
    }
}

/// A pending-event partition read back from its `GSI1PK`: the region that wrote its events, if
/// regional, and its shard. Ordered by region (the unregioned first), then shard.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PendingPartition {
    pub origin: Option<Region>,
    pub shard: u16,
}

impl PendingPartition {
    /// The unregioned partition of `shard` (a single-region table).
    pub fn unregioned(shard: u16) -> Self {
        Self {
            origin: None,
            shard,
        }
    }

    /// The partition of `shard` of the events written in `origin`.
    pub fn regional(origin: Region, shard: u16) -> Self {
        Self {
            origin: Some(origin),
            shard,
        }
    }

    /// Its `GSI1PK` ([`pending_partition`]).
    pub fn gsi1pk(&self) -> String {
        pending_partition(self.origin.as_ref(), self.shard)
    }
}

/// `3` for an unregioned partition, `eu-west-1#3` for a regional one: what logs and the lease
/// table name a partition by.
impl std::fmt::Display for PendingPartition {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.origin {
            Some(origin) => write!(f, "{origin}#{}", self.shard),
            None => write!(f, "{}", self.shard),
        }
    }
}

/// Reads the [`Display`](std::fmt::Display) form back (`3`, `eu-west-1#3`).
impl std::str::FromStr for PendingPartition {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        parse_pending_partition(&format!("{PENDING_PREFIX}{name}")).ok_or_else(|| {
            format!("{name:?} is not a partition: expected a shard (3) or a region and a shard (eu-west-1#3)")
        })
    }
}

impl From<u16> for PendingPartition {
    fn from(shard: u16) -> Self {
        Self::unregioned(shard)
    }
}

/// Reads a `GSI1PK` of either pending format back ([`pending_shard_pk`],
/// [`regional_pending_shard_pk`]); `None` for anything else (holds, another client's scheme).
pub fn parse_pending_partition(gsi1pk: &str) -> Option<PendingPartition> {
    let rest = gsi1pk.strip_prefix(PENDING_PREFIX)?;
    match rest.split_once('#') {
        None => Some(PendingPartition {
            origin: None,
            shard: rest.parse().ok()?,
        }),
        Some((region, shard)) => Some(PendingPartition {
            origin: Some(Region::new(region).ok()?),
            shard: shard.parse().ok()?,
        }),
    }
}

/// `GSI1SK` of a pending event: `EVENT#{created_at}#{event_id}`, oldest first.
pub fn pending_sort_key(created_at: &str, event_id: &str) -> String {
    format!("{EVENT_PREFIX}{created_at}#{event_id}")
}

/// Every attribute of an outbox item, keys and index keys included, and those a relay's mark
/// sets (`PublishedAt`, `DeadLetteredAt`, `DeadLetterReason`): what a reader of outbox items may
/// read, and none of an order's own (`OrderId`, `UserId`, `Amount`, `Items`, `Version`, …; an
/// order shares only the keys, `Status` and `CreatedAt`). The operator commands read the table
/// with a projection on these, the only attributes their role may read
/// (`relay_runtime::permissions::Target::OutboxAttributes`).
pub const OUTBOX_ATTRIBUTES: &[&str] = &[
    attr::PK,
    attr::SK,
    attr::ENTITY_TYPE,
    attr::EVENT_ID,
    attr::EVENT_TYPE,
    attr::AGGREGATE_TYPE,
    attr::AGGREGATE_ID,
    attr::SEQUENCE,
    attr::PAYLOAD,
    attr::PAYLOAD_REF,
    attr::TRACE_HEADER,
    attr::TRACE_PARENT,
    attr::TRACE_STATE,
    attr::STATUS,
    attr::CREATED_AT,
    attr::GSI1PK,
    attr::GSI1SK,
    attr::TTL,
    attr::ORIGIN_REGION,
    attr::PUBLISHED_AT,
    attr::DEAD_LETTERED_AT,
    attr::DEAD_LETTER_REASON,
];

/// `Status` values of an outbox item.
pub mod status {
    pub const PENDING: &str = "PENDING";
    pub const PUBLISHED: &str = "PUBLISHED";
    pub const DEAD_LETTERED: &str = "DEAD_LETTERED";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_is_named_by_its_region_and_shard_and_read_back() {
        let regional = PendingPartition::regional(Region::new("eu-west-1").unwrap(), 3);
        assert_eq!(regional.to_string(), "eu-west-1#3");
        assert_eq!(regional.gsi1pk(), "OUTBOX#PENDING#eu-west-1#3");
        assert_eq!("eu-west-1#3".parse(), Ok(regional));
        assert_eq!(PendingPartition::from(7).to_string(), "7");
        assert_eq!("7".parse(), Ok(PendingPartition::unregioned(7)));
        assert!("x#".parse::<PendingPartition>().is_err());
        assert!(
            PendingPartition::from(9) < PendingPartition::regional(Region::new("a-1").unwrap(), 0)
        );
    }

    #[test]
    fn key_formats_match_the_documented_schema() {
        assert_eq!(user_pk("u-1"), "USER#u-1");
        assert_eq!(order_sk("o-1"), "ORDER#o-1");
        assert_eq!(outbox_sk("e-1"), "OUTBOX#e-1");
        assert_eq!(pending_shard_pk(7), "OUTBOX#PENDING#7");
        assert_eq!(
            pending_sort_key("2026-01-01T00:00:00.000Z", "e-1"),
            "EVENT#2026-01-01T00:00:00.000Z#e-1"
        );
    }

    #[test]
    fn shard_pk_round_trips() {
        assert_eq!(parse_pending_shard_pk(&pending_shard_pk(15)), Some(15));
        assert_eq!(parse_pending_shard_pk("OUTBOX#PENDING#x"), None);
        assert_eq!(parse_pending_shard_pk("USER#1"), None);
    }

    #[test]
    fn a_regional_partition_names_its_region_and_is_no_single_region_shard() {
        let region = Region::new("eu-west-1").unwrap();
        let pk = regional_pending_shard_pk(&region, 3);
        assert_eq!(pk, "OUTBOX#PENDING#eu-west-1#3");
        assert_eq!(pending_partition(Some(&region), 3), pk);
        assert_eq!(pending_partition(None, 3), "OUTBOX#PENDING#3");
        assert_eq!(parse_pending_shard_pk(&pk), None);
        assert_eq!(
            parse_pending_partition(&pk),
            Some(PendingPartition {
                origin: Some(region),
                shard: 3
            })
        );
        assert_eq!(
            parse_pending_partition("OUTBOX#PENDING#3"),
            Some(PendingPartition {
                origin: None,
                shard: 3
            })
        );
        for other in [
            "OUTBOX#PENDING#EU#3",
            "OUTBOX#PENDING#eu-west-1#x",
            "OUTBOX#HOLD#OUTBOX#PENDING#3",
        ] {
            assert_eq!(parse_pending_partition(other), None, "{other}");
        }
    }

    #[test]
    fn a_hold_partition_names_its_event_partition_and_is_no_shard() {
        let holds = hold_partition(&pending_shard_pk(7));
        assert_eq!(holds, "OUTBOX#HOLD#OUTBOX#PENDING#7");
        assert_eq!(parse_hold_partition(&holds), Some("OUTBOX#PENDING#7"));
        assert_eq!(parse_pending_shard_pk(&holds), None);
        assert!(is_hold_partition(&holds));
        assert!(is_hold_partition(LEGACY_HOLD_PARTITION));
        assert!(!is_hold_partition(&pending_shard_pk(7)));
        assert_eq!(parse_hold_partition(LEGACY_HOLD_PARTITION), None);
    }
}
