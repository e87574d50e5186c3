//! Re-creating an outbox event whose item is gone (TTL deleted it, or someone did) from its last
//! image: the item goes back as `PENDING` under its aggregate's shard of the pending index, with its
//! own `GSI1SK` (so it keeps its place in its aggregate's order) and its `ttl` pushed ahead, as the
//! writer would have set them, by a `PutItem` with the condition that no item has its key. A second
//! re-create of the same event, or one of an item that came back meanwhile (re-created and since
//! published included), writes nothing.
//!
//! The one path for both who re-create pending: `redrive`, for a dead letter whose item is gone,
//! and the poller, for a TTL deletion in a stream batch the mapping discarded
//! ([`crate::discarded`]). The conditional put itself ([`GoneItems`], [`DynamoGoneItems`]) is
//! `relay_runtime::recreate`'s, which the stream relay also puts a TTL deletion's poison event back
//! `DEAD_LETTERED` with.

use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use outbox_shared::schema::{self, attr};
use outbox_shared::{OutboxStatus, ShardCount, shard_for};
pub use relay_runtime::recreate::{CALLS, DynamoGoneItems, GoneItems, Recreated};
use relay_runtime::status_store::ttl_after;

use crate::table::Attributes;

/// The index keys of an outbox item: its aggregate's shard (`AggregateId`, or `PK` without one,
/// as the writer shards) in its region's partitions when it has an `OriginRegion` (a global
/// table's), and its `CreatedAt` and `EventId`; `None` when it lacks them.
pub fn index_keys(item: &Attributes, shard_count: ShardCount) -> Option<(String, String)> {
    let string = |name: &str| item.get(name).and_then(|v| v.as_s().ok());
    let created_at = string(attr::CREATED_AT)?;
    let event_id = string(attr::EVENT_ID)?;
    let ordering_key = string(attr::AGGREGATE_ID).or_else(|| string(attr::PK))?;
    let origin = match string(attr::ORIGIN_REGION) {
        Some(origin) => Some(outbox_shared::region::Region::new(origin.as_str()).ok()?),
        None => None,
    };
    Some((
        schema::pending_partition(origin.as_ref(), shard_for(ordering_key, shard_count)),
        schema::pending_sort_key(created_at, event_id),
    ))
}

/// `image` (an outbox item's last image) as a pending item to put back: `PENDING`, in the index
/// under [`index_keys`], without what a mark or a dead letter set, its `ttl` `retention` after
/// `now`. `None` when the image lacks what the index keys need.
pub fn pending_image(
    mut image: Attributes,
    shard_count: ShardCount,
    retention: Duration,
    now: DateTime<Utc>,
) -> Option<Attributes> {
    let (partition, sort_key) = index_keys(&image, shard_count)?;
    for gone in [
        attr::DEAD_LETTERED_AT,
        attr::DEAD_LETTER_REASON,
        attr::PUBLISHED_AT,
    ] {
        image.remove(gone);
    }
    image.insert(
        attr::STATUS.to_owned(),
        AttributeValue::S(OutboxStatus::Pending.as_str().to_owned()),
    );
    image.insert(attr::GSI1PK.to_owned(), AttributeValue::S(partition));
    image.insert(attr::GSI1SK.to_owned(), AttributeValue::S(sort_key));
    image.insert(
        attr::TTL.to_owned(),
        AttributeValue::N(ttl_after(now, retention).to_string()),
    );
    Some(image)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn image(pairs: &[(&str, &str)]) -> Attributes {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), AttributeValue::S((*v).to_owned())))
            .collect()
    }

    #[test]
    fn a_gone_items_image_goes_back_pending_under_its_aggregates_shard_with_its_ttl_ahead() {
        let shards = ShardCount::new(16).unwrap();
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        let old = image(&[
            (attr::PK, "USER#u1"),
            (attr::SK, "OUTBOX#e1"),
            (attr::EVENT_ID, "e1"),
            (attr::AGGREGATE_ID, "o-1"),
            (attr::CREATED_AT, "2026-11-14T08:00:00.000Z"),
            (attr::STATUS, "DEAD_LETTERED"),
            (attr::DEAD_LETTER_REASON, "r"),
            (attr::GSI1PK, "OUTBOX#PENDING#999"),
        ]);

        let item = pending_image(old, shards, Duration::from_secs(7 * 86_400), now).unwrap();

        let s = |name: &str| item[name].as_s().unwrap().as_str();
        assert_eq!(s(attr::STATUS), "PENDING");
        assert_eq!(
            s(attr::GSI1PK),
            schema::pending_shard_pk(shard_for("o-1", shards))
        );
        assert_eq!(s(attr::GSI1SK), "EVENT#2026-11-14T08:00:00.000Z#e1");
        assert!(!item.contains_key(attr::DEAD_LETTER_REASON));
        assert_eq!(
            item[attr::TTL].as_n().unwrap(),
            &(now.timestamp() + 7 * 86_400).to_string()
        );
    }

    #[test]
    fn an_image_without_its_creation_time_or_id_cannot_go_back() {
        let shards = ShardCount::new(16).unwrap();
        let old = image(&[(attr::PK, "USER#u1"), (attr::SK, "OUTBOX#e1")]);
        assert!(pending_image(old, shards, Duration::from_secs(60), Utc::now()).is_none());
    }
}
