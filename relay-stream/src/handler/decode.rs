//! What each stream record is, before publishing: an outbox event (from an `INSERT`'s new image,
//! or a TTL deletion's old image) ready to publish, poison, or not for this relay.

use std::collections::HashMap;

use aws_lambda_events::dynamodb::EventRecord;
use outbox_shared::envelope::Encoding;
use outbox_shared::region::GlobalTable;
use outbox_shared::schema::{self, attr, entity};
use outbox_shared::{ItemKey, OutboxItem, OutboxStatus};
use relay_runtime::stream_record::INSERT;
pub(super) use relay_runtime::stream_record::is_ttl_deletion;
use relay_runtime::stream_record::published_in_this_region;
use relay_runtime::{Event, IgnoreReason, LeftEvent};
use serde_dynamo::AttributeValue;

/// The full stream record, as the dead letter carries it.
pub(super) fn dead_letter_record(record: &EventRecord) -> serde_json::Value {
    serde_json::to_value(record).unwrap_or_else(|e| {
        serde_json::Value::String(format!("record could not be serialized: {e}"))
    })
}

pub(super) fn string_attr<'a>(
    image: &'a HashMap<String, AttributeValue>,
    name: &str,
) -> Option<&'a str> {
    match image.get(name) {
        Some(AttributeValue::S(s)) => Some(s),
        _ => None,
    }
}

/// The item's key from the record's `Keys` (or its image), when both are strings.
fn record_key(record: &EventRecord) -> Option<ItemKey> {
    let from = |image: &HashMap<String, AttributeValue>| {
        Some(ItemKey {
            pk: string_attr(image, attr::PK)?.to_owned(),
            sk: string_attr(image, attr::SK)?.to_owned(),
        })
    };
    from(&record.change.keys)
        .or_else(|| from(&record.change.new_image))
        .or_else(|| from(&record.change.old_image))
}

/// Whether the poller can see the event of `record`: an `INSERT` of an item in the pending index
/// under a sort key its queries reach (`EVENT#{CreatedAt}#{EventId}`; any partition, which the
/// sweep finds). A `REMOVE`'s item is gone, and an item another client wrote outside the index, or
/// under another sort key, is in no page the poller reads: only this relay can publish it.
pub(super) fn poller_can_see(record: &EventRecord) -> bool {
    let image = &record.change.new_image;
    let field = |name| string_attr(image, name);
    record.event_name == INSERT
        && field(attr::GSI1PK).is_some()
        && match (
            field(attr::GSI1SK),
            field(attr::CREATED_AT),
            field(attr::EVENT_ID),
        ) {
            (Some(sort_key), Some(created_at), Some(event_id)) => {
                sort_key == schema::pending_sort_key(created_at, event_id)
            }
            _ => false,
        }
}

/// What the poller is left of `event` when its aggregate is held: its key and where the index
/// holds it; `None` when the poller can't see it ([`poller_can_see`]).
pub(super) fn left_event(event: &Event<&EventRecord>) -> Option<LeftEvent> {
    let record = event.source;
    if !poller_can_see(record) {
        return None;
    }
    let image = &record.change.new_image;
    Some(LeftEvent {
        key: event.key.clone()?,
        partition: string_attr(image, attr::GSI1PK)?.to_owned(),
        sort_key: string_attr(image, attr::GSI1SK)?.to_owned(),
    })
}

/// The event of `record`: an outbox `INSERT` (its new image), or a TTL deletion of a pending
/// outbox item (its old image: the event was never published, and this record is the last place
/// it exists), ready to publish (its body written as `encoding` says) or poison; any other
/// record is ignored. A TTL deletion's event carries the old image as its gone item's
/// ([`Event::gone_item`]): should it be dead-lettered, the item is put back from it first.
///
/// On a global table (`table`), an event another region publishes is ignored
/// ([`published_in_this_region`]): the event source mapping's filter already leaves it out, and
/// this is the second check.
pub(super) fn decode<'r>(
    record: &'r EventRecord,
    encoding: &Encoding,
    table: Option<&GlobalTable>,
) -> Event<&'r EventRecord> {
    let image = if record.event_name == INSERT {
        &record.change.new_image
    } else if is_ttl_deletion(record) {
        &record.change.old_image
    } else {
        return Event::ignored(record, IgnoreReason::NotInsert(record.event_name.clone()));
    };
    if string_attr(image, attr::ENTITY_TYPE) != Some(entity::OUTBOX_EVENT) {
        return Event::ignored(record, IgnoreReason::NotOutboxEvent);
    }
    if let Some(table) = table.filter(|t| !published_in_this_region(record, t)) {
        let origin = string_attr(image, attr::ORIGIN_REGION).map(str::to_owned);
        tracing::debug!(
            origin = origin.as_deref().unwrap_or("none"),
            own = %table.own(),
            "another region's event: its relays publish it"
        );
        return Event::ignored(record, IgnoreReason::OtherRegion(origin));
    }
    // Decoded through a reference: the record stays whole for the dead-letter queue and the
    // response, and nothing is cloned but the item's own fields.
    let event = match outbox_shared::image::from_image::<OutboxItem>(image) {
        Ok(item) if item.status != OutboxStatus::Pending => {
            return Event::ignored(record, IgnoreReason::NotPending(item.status));
        }
        Ok(item) => Event::of_item(record, item, encoding),
        Err(err) => Event::undecodable(
            record,
            record_key(record),
            string_attr(image, attr::EVENT_ID).map(str::to_owned),
            err,
        ),
    };
    if record.event_name == INSERT {
        return event;
    }
    // A TTL deletion: the item is gone, and a dead letter puts it back from this image.
    event.with_gone_item(image.clone().into())
}
