//! An item read from the index becomes an outbox item, or a poison case with a reason that names
//! the attribute at fault and never quotes its value.

use std::collections::HashMap;

use outbox_shared::schema::{self, attr};
use outbox_shared::{ItemKey, OutboxItem};
use relay_runtime::Poison;

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

/// What an item read from the index is.
pub(crate) enum Decoded {
    /// The item, and the raw item kept whole for a dead letter should EventBridge reject it.
    Item(Box<(OutboxItem, RawItem)>),
    Poison(Box<Poison<RawItem>>),
}

/// Decodes an index item into an outbox item, or says why it is poison. `None` when even the
/// table key is missing (not an item of this table's shape; nothing can be done with it).
pub(crate) fn decode(raw: RawItem) -> Option<Decoded> {
    let key = item_key(&raw)?;
    // Decoded as the stream relay decodes an image, so a reason names the attribute and never
    // quotes its value (values may hold personal data; reasons go to logs and dead letters).
    let image: HashMap<String, serde_dynamo::AttributeValue> =
        serde_dynamo::Item::from(raw.clone()).into();
    let item: OutboxItem = match outbox_shared::image::from_image(&image) {
        Ok(item) => item,
        Err(e) => {
            let event_id = string_attr(&raw, attr::EVENT_ID);
            return Some(Decoded::Poison(Box::new(Poison::undecodable(
                Some(key),
                event_id,
                e,
                raw,
            ))));
        }
    };
    if !item.is_outbox_event() {
        return Some(Decoded::Poison(Box::new(Poison {
            key: Some(key),
            event_id: Some(item.event_id),
            reason: format!(
                "item in the pending index is not an outbox event: its {} is not {}",
                attr::ENTITY_TYPE,
                schema::entity::OUTBOX_EVENT
            ),
            source: raw,
        })));
    }
    Some(Decoded::Item(Box::new((item, raw))))
}

/// The item as the dead letter carries it: its attributes as plain JSON.
pub(crate) fn dead_letter_record(raw: &RawItem) -> serde_json::Value {
    serde_dynamo::from_item::<_, serde_json::Value>(raw.clone())
        .unwrap_or_else(|e| serde_json::json!({ "unrepresentable": e.to_string() }))
}
