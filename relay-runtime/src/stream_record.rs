//! What a DynamoDB stream record is, as Lambda hands it to a function (the Lambda event shape,
//! `aws_lambda_events`): its operation, and whether DynamoDB's TTL made it. The stream relay
//! decodes its batches with these, and the poller the batches the mapping discarded
//! ([`crate::discarded_batch`]).

use aws_lambda_events::dynamodb::EventRecord;
use outbox_shared::region::{GlobalTable, Region};
use outbox_shared::schema::attr::ORIGIN_REGION;

/// The stream `eventName` of a new item.
pub const INSERT: &str = "INSERT";
/// The stream `eventName` of a deleted item.
pub const REMOVE: &str = "REMOVE";
/// `userIdentity` of a deletion by DynamoDB's TTL: `type` and `principalId` (DynamoDB Streams API
/// reference, `Record.userIdentity`).
pub const TTL_DELETION_IDENTITY: (&str, &str) = ("Service", "dynamodb.amazonaws.com");

/// Whether `record` is DynamoDB's TTL deleting an item (its `userIdentity` is the TTL service).
pub fn is_ttl_deletion(record: &EventRecord) -> bool {
    record.event_name == REMOVE
        && record.user_identity.as_ref().is_some_and(|identity| {
            (identity.type_.as_str(), identity.principal_id.as_str()) == TTL_DELETION_IDENTITY
        })
}

/// Whether this relay, in its region of `table` (a global table), publishes the event of
/// `record`, an outbox `INSERT` or TTL deletion. On a global table every region's stream holds
/// every region's writes, so each region's relay publishes only its share, and each event is
/// published once:
/// - an `INSERT` of an item stamped with this region (`OriginRegion`): its writer wrote it here;
/// - an `INSERT` of an item stamped with no region of the table, or none at all (another client
///   writing without it): the first region of `--regions` publishes it, the same rule as the
///   pollers' ([`first_region_publishes`]), never every region;
/// - a TTL deletion, whatever its origin: DynamoDB shows TTL's `userIdentity` only in the region
///   whose TTL deleted the item, and replicates the delete to the others without it, so exactly
///   one region sees a TTL deletion as one ([`is_ttl_deletion`]).
///
/// Anything else is not an event to publish, and not this function's to decide (it says `true`).
pub fn published_in_this_region(record: &EventRecord, table: &GlobalTable) -> bool {
    if record.event_name != INSERT {
        return true;
    }
    let origin = match record.change.new_image.get(ORIGIN_REGION) {
        Some(serde_dynamo::AttributeValue::S(origin)) => Some(origin.as_str()),
        _ => None,
    };
    publishing_region(origin, table) == table.own()
}

/// The region whose relays publish an event stamped `origin` on `table`: its origin when that is
/// one of the table's regions, else the first region listed ([`first_region_publishes`]).
pub fn publishing_region<'t>(origin: Option<&str>, table: &'t GlobalTable) -> &'t Region {
    origin
        .and_then(|origin| table.regions().iter().find(|r| r.as_str() == origin))
        .unwrap_or_else(|| first_region_publishes(table))
}

/// The region that publishes the events no writer stamped with one of the table's regions: the
/// first of `--regions`. One rule for the stream relay and the poller, so such an event is
/// published by one region, not by each.
pub fn first_region_publishes(table: &GlobalTable) -> &Region {
    &table.regions()[0]
}

#[cfg(test)]
mod tests {
    use aws_lambda_events::dynamodb::UserIdentity;
    use outbox_shared::region::Region;

    use super::*;

    fn insert(origin: Option<&str>) -> EventRecord {
        let mut record = EventRecord::default();
        INSERT.clone_into(&mut record.event_name);
        if let Some(origin) = origin {
            record.change.new_image.insert(
                ORIGIN_REGION.to_owned(),
                serde_dynamo::AttributeValue::S(origin.to_owned()),
            );
        }
        record
    }

    fn table(own: &str) -> GlobalTable {
        let r = |name: &str| Region::new(name).unwrap();
        GlobalTable::new(r(own), vec![r("us-east-1"), r("eu-west-1")]).unwrap()
    }

    #[test]
    fn each_region_publishes_the_inserts_written_in_it() {
        for (origin, publisher) in [("us-east-1", "us-east-1"), ("eu-west-1", "eu-west-1")] {
            for own in ["us-east-1", "eu-west-1"] {
                assert_eq!(
                    published_in_this_region(&insert(Some(origin)), &table(own)),
                    own == publisher,
                    "{origin} in {own}"
                );
            }
        }
    }

    #[test]
    fn unstamped_inserts_are_published_by_the_first_region_listed_only() {
        for origin in [None, Some("ap-south-1")] {
            assert!(published_in_this_region(
                &insert(origin),
                &table("us-east-1")
            ));
            assert!(!published_in_this_region(
                &insert(origin),
                &table("eu-west-1")
            ));
        }
    }

    #[test]
    fn a_ttl_deletion_is_published_where_ttl_deleted_it_whatever_its_origin() {
        // The region whose TTL deleted the item sees TTL's identity: it publishes
        let mut deleted = removal(Some(TTL_DELETION_IDENTITY));
        deleted.change.old_image.insert(
            ORIGIN_REGION.to_owned(),
            serde_dynamo::AttributeValue::S("us-east-1".to_owned()),
        );
        assert!(published_in_this_region(&deleted, &table("eu-west-1")));
        assert!(is_ttl_deletion(&deleted));
        // The other region sees the replicated delete without it: not a TTL deletion there
        let mut replicated = deleted.clone();
        replicated.user_identity = None;
        assert!(!is_ttl_deletion(&replicated));
    }

    fn removal(identity: Option<(&str, &str)>) -> EventRecord {
        let mut record = EventRecord::default();
        record.event_name = REMOVE.to_owned();
        record.user_identity = identity.map(|(type_, principal)| {
            let mut user = UserIdentity::default();
            type_.clone_into(&mut user.type_);
            principal.clone_into(&mut user.principal_id);
            user
        });
        record
    }

    #[test]
    fn only_a_removal_by_the_ttl_service_is_a_ttl_deletion() {
        assert!(is_ttl_deletion(&removal(Some(TTL_DELETION_IDENTITY))));
        assert!(!is_ttl_deletion(&removal(None)), "a user's delete");
        assert!(!is_ttl_deletion(&removal(Some(("Service", "other")))));
        let mut insert = removal(Some(TTL_DELETION_IDENTITY));
        INSERT.clone_into(&mut insert.event_name);
        assert!(!is_ttl_deletion(&insert));
    }
}
