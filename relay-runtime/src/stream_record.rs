//! What a DynamoDB stream record is, as Lambda hands it to a function (the Lambda event shape,
//! `aws_lambda_events`): its operation, and whether DynamoDB's TTL made it. The stream relay
//! decodes its batches with these, and the poller the batches the mapping discarded
//! ([`crate::discarded_batch`]).

use aws_lambda_events::dynamodb::EventRecord;

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

#[cfg(test)]
mod tests {
    use aws_lambda_events::dynamodb::UserIdentity;

    use super::*;

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
