//! An item read from the index becomes an event: ready to publish, or poison with a reason that
//! names the attribute at fault and never quotes its value.

use outbox_shared::envelope::Encoding;
use outbox_shared::schema::{self, attr};
use outbox_shared::{ItemKey, OutboxItem};
use relay_runtime::{Event, State};

use crate::index::RawItem;

pub(crate) fn string_attr(raw: &RawItem, name: &str) -> Option<String> {
    raw.get(name).and_then(|v| v.as_s().ok()).cloned()
}

/// The table key of an item read from the index; `None` without a string `PK` and `SK`.
pub(crate) fn item_key(raw: &RawItem) -> Option<ItemKey> {
    Some(ItemKey {
        pk: string_attr(raw, attr::PK)?,
        sk: string_attr(raw, attr::SK)?,
    })
}

/// The event of an item read from the index (from `partition`), its body written as `encoding`
/// says: ready to publish, or poison with a reason that names the attribute at fault. An item without a string `PK` and `SK` is not
/// an item of this table's shape: nothing can be done with it, not even a dead-letter mark, so it
/// fails (logged, counted, left where it is).
pub(crate) fn decode(raw: RawItem, partition: &str, encoding: &Encoding) -> Event<RawItem> {
    // The event id is copied out of the item only for an item that does not decode: one that
    // does carries it in its `OutboxItem`.
    let Some(key) = item_key(&raw) else {
        tracing::error!(
            partition,
            "item in the pending index has no string PK/SK; skipped"
        );
        return Event {
            key: None,
            event_id: string_attr(&raw, attr::EVENT_ID),
            source: raw,
            aggregate: None,
            trace: None,
            gone_item: None,
            state: State::Failed {
                code: "NoItemKey".to_owned(),
                message: "item in the pending index has no string PK/SK".to_owned(),
            },
        };
    };
    // Decoded by the stream relay's decoder, read in place (no clone of the item, no map
    // rebuilt as serde_dynamo's), so a reason names the attribute and never quotes its value
    // (values may hold personal data; reasons go to logs and dead letters).
    let item: OutboxItem = match outbox_shared::image::from_image(&raw) {
        Ok(item) => item,
        Err(e) => {
            let event_id = string_attr(&raw, attr::EVENT_ID);
            return Event::undecodable(raw, Some(key), event_id, e);
        }
    };
    if !item.is_outbox_event() {
        return Event {
            source: raw,
            key: Some(key),
            event_id: Some(item.event_id),
            aggregate: None,
            trace: None,
            gone_item: None,
            state: State::Poison {
                reason: format!(
                    "item in the pending index is not an outbox event: its {} is not {}",
                    attr::ENTITY_TYPE,
                    schema::entity::OUTBOX_EVENT
                ),
            },
        };
    }
    Event::of_item(raw, item, encoding)
}

/// The item as the dead letter carries it: its attributes as plain JSON.
pub(crate) fn dead_letter_record(raw: &RawItem) -> serde_json::Value {
    serde_dynamo::from_item::<_, serde_json::Value>(raw.clone())
        .unwrap_or_else(|e| serde_json::json!({ "unrepresentable": e.to_string() }))
}
