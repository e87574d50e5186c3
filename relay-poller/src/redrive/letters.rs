//! Reading the relays' dead-letter messages back: which outbox item a message is about, and the
//! item's attributes as the message carries them, so `redrive` can put the item back, or re-create
//! it when it is gone.
//!
//! Two shapes are ours, told apart by `origin`:
//! - `relay-stream`: `record` is the whole DynamoDB stream record (`dynamodb.NewImage`, or
//!   `OldImage` for a TTL deletion, in DynamoDB JSON);
//! - `relay-poller`: `record` is the item read from the index, its attributes as plain JSON.
//!
//! Either may come without its record when the letter was too large for the queue: the relay kept
//! the record in the payload bucket and the letter names the object (`recordRef`: its URI, size
//! and SHA-256), which `redrive` reads and reads the record from ([`record_item`]); or, without a
//! bucket, it left the record out (`recordLeftOut`), and the item in the table (`DEAD_LETTERED`)
//! holds it. Either names the item by its `key` only.
//!
//! Anything else (a message someone else sent, a body that is not a dead letter, one without a
//! key) is [`Letter::Foreign`]: it stays in the queue.

use outbox_shared::ItemKey;
use outbox_shared::claim_check::PayloadRef;
use outbox_shared::schema::attr;
use relay_runtime::DeadLetter;

use crate::table::Attributes;

/// `origin` of the stream relay's dead letters.
pub const STREAM_ORIGIN: &str = "relay-stream";
/// `origin` of the poller's dead letters.
pub const POLLER_ORIGIN: &str = crate::poller::ORIGIN;

/// What one dead-letter message is.
#[derive(Debug, Clone, PartialEq)]
pub enum Letter {
    /// A dead letter of one of the relays, about the item at `key`.
    Outbox(Box<OutboxLetter>),
    /// Not one of ours, or unreadable: it stays in the queue. The text says why.
    Foreign(String),
}

/// A relay's dead letter about one outbox item.
#[derive(Debug, Clone, PartialEq)]
pub struct OutboxLetter {
    pub key: ItemKey,
    pub event_id: Option<String>,
    pub origin: String,
    pub reason: String,
    /// The item's attributes as the message carries them (`None` when the record holds no
    /// image): what a gone item is re-created from.
    pub item: Option<Attributes>,
    /// The relay left the record out (too large for the queue): only the item in the table holds
    /// it.
    pub record_left_out: bool,
    /// The relay kept the record in the payload bucket (too large for the queue): where it is.
    pub record_ref: Option<PayloadRef>,
}

impl OutboxLetter {
    /// A string attribute of the carried item.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.item
            .as_ref()?
            .get(name)
            .and_then(|v| v.as_s().ok())
            .map(String::as_str)
    }
}

/// Reads a message body.
pub fn parse(body: &str) -> Letter {
    let letter: DeadLetter = match serde_json::from_str(body) {
        Ok(letter) => letter,
        Err(e) => return Letter::Foreign(format!("not a relay dead letter: {e}")),
    };
    if !matches!(letter.origin.as_str(), STREAM_ORIGIN | POLLER_ORIGIN) {
        return Letter::Foreign(format!(
            "origin {:?} is not one of the relays",
            letter.origin
        ));
    }
    let item = record_item(&letter.origin, &letter.record);
    let record_ref = letter.record_ref.as_ref().map(|r| r.payload_ref());
    let key = letter.key.clone().or_else(|| {
        let item = item.as_ref()?;
        Some(ItemKey {
            pk: item.get(attr::PK)?.as_s().ok()?.clone(),
            sk: item.get(attr::SK)?.as_s().ok()?.clone(),
        })
    });
    let Some(key) = key else {
        return Letter::Foreign(match &record_ref {
            Some(reference) => format!(
                "a dead letter that names no item (no key; its record is at {})",
                reference.uri
            ),
            None => "a dead letter that names no item (no key, no image)".to_owned(),
        });
    };
    Letter::Outbox(Box::new(OutboxLetter {
        key,
        event_id: letter.event_id,
        origin: letter.origin,
        reason: letter.reason,
        item,
        record_left_out: letter.record_left_out.is_some(),
        record_ref,
    }))
}

/// The item's attributes in a relay's `record` (from `origin`): a stream record's image, or the
/// poller's plain item; `None` when it holds none.
pub fn record_item(origin: &str, record: &serde_json::Value) -> Option<Attributes> {
    match origin {
        STREAM_ORIGIN => stream_image(record),
        POLLER_ORIGIN => plain_item(record),
        _ => None,
    }
}

/// The image of a stream record: the new one, or the old one of a `REMOVE`.
fn stream_image(record: &serde_json::Value) -> Option<Attributes> {
    let change = record.get("dynamodb")?;
    ["NewImage", "OldImage"]
        .iter()
        .filter_map(|name| change.get(*name))
        .find_map(|image| {
            let item: serde_dynamo::Item = serde_json::from_value(image.clone()).ok()?;
            let attributes: Attributes = item.into();
            (!attributes.is_empty()).then_some(attributes)
        })
}

/// An item written as plain JSON (the poller's dead letters).
fn plain_item(record: &serde_json::Value) -> Option<Attributes> {
    let item: serde_dynamo::Item = serde_dynamo::to_item(record).ok()?;
    let attributes: Attributes = item.into();
    (!attributes.is_empty()).then_some(attributes)
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::types::AttributeValue;
    use serde_json::json;

    use super::*;

    fn letter(origin: &str, record: serde_json::Value, key: Option<ItemKey>) -> String {
        serde_json::to_string(&DeadLetter {
            reason: "EventBridge rejected the entry: EntryTooLarge: too big".into(),
            origin: origin.into(),
            event_id: Some("e1".into()),
            key,
            record,
            dead_lettered_at: "2026-11-22T10:00:00.000Z".into(),
            record_left_out: None,
            record_ref: None,
        })
        .unwrap()
    }

    fn outbox(letter: Letter) -> OutboxLetter {
        match letter {
            Letter::Outbox(l) => *l,
            Letter::Foreign(why) => panic!("foreign: {why}"),
        }
    }

    #[test]
    fn reads_the_stream_relays_record_image() {
        let record = json!({
            "eventName": "INSERT",
            "dynamodb": {
                "Keys": {"PK": {"S": "USER#u1"}, "SK": {"S": "OUTBOX#e1"}},
                "NewImage": {
                    "PK": {"S": "USER#u1"}, "SK": {"S": "OUTBOX#e1"},
                    "EventId": {"S": "e1"}, "Sequence": {"N": "3"}
                }
            }
        });
        let parsed = outbox(parse(&letter(STREAM_ORIGIN, record, None)));
        assert_eq!(parsed.key.sk, "OUTBOX#e1");
        assert_eq!(parsed.attribute(attr::EVENT_ID), Some("e1"));
        let item = parsed.item.unwrap();
        assert_eq!(item[attr::SEQUENCE], AttributeValue::N("3".into()));
    }

    #[test]
    fn reads_the_old_image_of_a_ttl_removal() {
        let record = json!({
            "eventName": "REMOVE",
            "dynamodb": {"OldImage": {"PK": {"S": "USER#u1"}, "SK": {"S": "OUTBOX#e1"}}}
        });
        let parsed = outbox(parse(&letter(STREAM_ORIGIN, record, None)));
        assert_eq!(parsed.key.pk, "USER#u1");
    }

    #[test]
    fn reads_the_pollers_plain_item() {
        let record =
            json!({"PK": "USER#u1", "SK": "OUTBOX#e1", "Sequence": 3, "ttl": 1_800_000_000});
        let key = ItemKey {
            pk: "USER#u1".into(),
            sk: "OUTBOX#e1".into(),
        };
        let parsed = outbox(parse(&letter(POLLER_ORIGIN, record, Some(key.clone()))));
        assert_eq!(parsed.key, key);
        let item = parsed.item.unwrap();
        assert_eq!(item[attr::SEQUENCE], AttributeValue::N("3".into()));
        assert_eq!(item[attr::PK], AttributeValue::S("USER#u1".into()));
    }

    #[test]
    fn reads_a_letter_without_its_record_by_its_key() {
        let key = ItemKey {
            pk: "USER#u1".into(),
            sk: "OUTBOX#e1".into(),
        };
        for origin in [STREAM_ORIGIN, POLLER_ORIGIN] {
            let whole = DeadLetter {
                reason: "EventBridge rejected the entry: EntryTooLarge: too big".into(),
                origin: origin.into(),
                event_id: Some("e1".into()),
                key: Some(key.clone()),
                record: json!({"PK": "USER#u1"}),
                dead_lettered_at: "2026-11-22T10:00:00.000Z".into(),
                record_left_out: None,
                record_ref: None,
            };
            let body = serde_json::to_string(&whole.without_record(300_000, 262_144)).unwrap();
            let parsed = outbox(parse(&body));
            assert_eq!(parsed.key, key);
            assert_eq!(parsed.event_id.as_deref(), Some("e1"));
            assert_eq!(parsed.item, None);
            assert!(parsed.record_left_out);
            assert_eq!(parsed.record_ref, None);
        }
    }

    #[test]
    fn reads_a_letter_whose_record_is_in_the_bucket_by_its_key_and_reference() {
        let key = ItemKey {
            pk: "USER#u1".into(),
            sk: "OUTBOX#e1".into(),
        };
        let reference = PayloadRef::of("payloads", "dead-letters/e1/u.json", b"{}");
        for origin in [STREAM_ORIGIN, POLLER_ORIGIN] {
            let whole = DeadLetter {
                reason: "EventBridge rejected the entry: EntryTooLarge: too big".into(),
                origin: origin.into(),
                event_id: Some("e1".into()),
                key: Some(key.clone()),
                record: json!({"PK": "USER#u1"}),
                dead_lettered_at: "2026-11-22T10:00:00.000Z".into(),
                record_left_out: None,
                record_ref: None,
            };
            let named = whole.with_record_ref(reference.clone(), 300_000, 262_144);
            let parsed = outbox(parse(&serde_json::to_string(&named).unwrap()));
            assert_eq!(parsed.key, key);
            assert_eq!(parsed.item, None, "the record is in the bucket");
            assert!(!parsed.record_left_out);
            assert_eq!(parsed.record_ref.as_ref(), Some(&reference));
        }
        // And a keyless one stays in the queue, saying where its record is
        let keyless = DeadLetter {
            reason: "undecodable".into(),
            origin: STREAM_ORIGIN.into(),
            event_id: None,
            key: None,
            record: json!(null),
            dead_lettered_at: "2026-11-22T10:00:00.000Z".into(),
            record_left_out: None,
            record_ref: None,
        }
        .with_record_ref(reference.clone(), 300_000, 262_144);
        let parsed = parse(&serde_json::to_string(&keyless).unwrap());
        assert!(
            matches!(&parsed, Letter::Foreign(why) if why.contains(&reference.uri)),
            "{parsed:?}"
        );
    }

    #[test]
    fn a_record_read_back_gives_the_item_as_an_in_message_record_does() {
        let stream =
            json!({"dynamodb": {"NewImage": {"PK": {"S": "USER#u1"}, "SK": {"S": "OUTBOX#e1"}}}});
        let plain = json!({"PK": "USER#u1", "SK": "OUTBOX#e1"});
        for (origin, record) in [(STREAM_ORIGIN, stream), (POLLER_ORIGIN, plain)] {
            let item = record_item(origin, &record).expect("an item");
            assert_eq!(item[attr::SK], AttributeValue::S("OUTBOX#e1".into()));
        }
        assert_eq!(record_item("someone-else", &json!({"PK": "x"})), None);
    }

    #[test]
    fn anything_else_is_foreign() {
        assert!(matches!(parse("hello"), Letter::Foreign(_)));
        assert!(matches!(parse(r#"{"a":1}"#), Letter::Foreign(_)));
        let other = letter("someone-else", json!({}), None);
        assert!(matches!(parse(&other), Letter::Foreign(why) if why.contains("someone-else")));
        let keyless = letter(POLLER_ORIGIN, json!("not an item"), None);
        assert!(matches!(parse(&keyless), Letter::Foreign(why) if why.contains("no key")));
    }
}
