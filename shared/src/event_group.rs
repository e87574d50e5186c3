//! The Custom Event Bus's system metadata of an event: its `EventGroupId` (the aggregate, so a
//! FIFO subscriber delivers one aggregate's events in the order the relay published them) and its
//! `DeduplicationId` (the event id, so a repeat within 300 s is suppressed at the bus).
//!
//! The rule, for any client that must reproduce it:
//!
//! - `EventGroupId` is `{AggregateType}#{AggregateId}` when the item has both (the writer refuses
//!   `#` in either, so the pair reads back unambiguously), the `AggregateId` alone when the item
//!   has no type, and the item's `PK` (its item collection, which orders its events in the relay
//!   too) when it has no aggregate id.
//! - `DeduplicationId` is the `EventId`.
//! - Either, when longer than 128 characters (the bus's model limit, which would refuse the whole
//!   call), is cut to its first 111 characters, then `~`, then the first 16 hex digits of the
//!   SHA-256 of the whole value: 128 characters, the same for every publish of the event, and two
//!   long values that share their first 111 characters still differ.

use sha2::{Digest, Sha256};

use crate::item::OutboxItem;
use crate::limits::{DEDUPLICATION_ID_MAX_CHARS, EVENT_GROUP_ID_MAX_CHARS};

/// Hex digits of the hash suffix of a value cut to fit (64 bits: no collision in practice).
const HASH_SUFFIX_HEX: usize = 16;

/// The `EventGroupId` of `item` (see the module's rule).
pub fn event_group_id(item: &OutboxItem) -> String {
    let group = match (&item.aggregate_type, &item.aggregate_id) {
        (Some(kind), Some(id)) if !kind.is_empty() => format!("{kind}#{id}"),
        (_, Some(id)) => id.clone(),
        (_, None) => item.pk.clone(),
    };
    fit(group, EVENT_GROUP_ID_MAX_CHARS)
}

/// The `DeduplicationId` of the event `event_id` (see the module's rule).
pub fn deduplication_id(event_id: &str) -> String {
    fit(event_id.to_owned(), DEDUPLICATION_ID_MAX_CHARS)
}

/// Longest `MessageGroupId` / `MessageDeduplicationId` SNS and SQS accept, in characters.
pub const MESSAGE_ID_MAX_CHARS: usize = 128;

/// An SNS or SQS FIFO `MessageGroupId` or `MessageDeduplicationId` for `value` (an event group or
/// an event id): at most 128 characters of ASCII letters, digits and punctuation, which is all
/// the two services accept. `value` itself when it is such; otherwise its characters outside that
/// set are replaced by `_` and, as for a value too long, the first 111 characters are kept and
/// `~` and 16 hex digits of the SHA-256 of the whole value appended, so two values that differ
/// in such a character still differ. The same for every publish of the event.
pub fn message_id(value: &str) -> String {
    if value.chars().all(|c| c.is_ascii_graphic()) {
        return fit(value.to_owned(), MESSAGE_ID_MAX_CHARS);
    }
    let cleaned: String = value
        .chars()
        .map(|c| if c.is_ascii_graphic() { c } else { '_' })
        .collect();
    let kept: String = cleaned
        .chars()
        .take(MESSAGE_ID_MAX_CHARS - HASH_SUFFIX_HEX - 1)
        .collect();
    format!("{kept}~{}", hash_suffix(value))
}

/// The first 16 hex digits of the SHA-256 of `value`.
fn hash_suffix(value: &str) -> String {
    Sha256::digest(value.as_bytes())
        .iter()
        .take(HASH_SUFFIX_HEX / 2)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `value` if it has at most `max` characters, else its first `max - 17` characters, `~` and 16
/// hex digits of its SHA-256.
fn fit(value: String, max: usize) -> String {
    if value.chars().count() <= max {
        return value;
    }
    let hex = hash_suffix(&value);
    let kept: String = value.chars().take(max - HASH_SUFFIX_HEX - 1).collect();
    format!("{kept}~{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::OutboxStatus;

    fn item(kind: Option<&str>, id: Option<&str>) -> OutboxItem {
        OutboxItem {
            pk: "USER#u1".into(),
            sk: "OUTBOX#e1".into(),
            entity_type: "OutboxEvent".into(),
            event_id: "e1".into(),
            event_type: "OrderCreated".into(),
            payload: "{}".into(),
            payload_ref: None,
            status: OutboxStatus::Pending,
            created_at: "2026-11-22T10:00:00.000Z".into(),
            gsi1pk: None,
            gsi1sk: None,
            aggregate_type: kind.map(Into::into),
            aggregate_id: id.map(Into::into),
            sequence: None,
            ttl: None,
            trace_header: None,
            trace_parent: None,
            trace_state: None,
            origin_region: None,
        }
    }

    #[test]
    fn the_group_is_the_aggregate_or_else_the_item_collection() {
        assert_eq!(event_group_id(&item(Some("Order"), Some("o1"))), "Order#o1");
        assert_eq!(event_group_id(&item(None, Some("o1"))), "o1");
        assert_eq!(event_group_id(&item(None, None)), "USER#u1");
    }

    #[test]
    fn a_long_id_is_cut_to_128_characters_with_a_stable_hash_suffix() {
        let long_a = format!("{}a", "é".repeat(200));
        let long_b = format!("{}b", "é".repeat(200));
        let (a, b) = (
            event_group_id(&item(Some("Order"), Some(&long_a))),
            event_group_id(&item(Some("Order"), Some(&long_b))),
        );
        assert_eq!(a.chars().count(), 128);
        assert!(a.starts_with("Order#éé"), "{a}");
        assert_eq!(a.chars().nth(111), Some('~'));
        assert_ne!(
            a, b,
            "values sharing their first 111 characters still differ"
        );
        assert_eq!(a, event_group_id(&item(Some("Order"), Some(&long_a))));
        let short = "0190a4c2-7b1e-7c3d-9f00-123456789abc";
        assert_eq!(deduplication_id(short), short);
        assert_eq!(deduplication_id(&"x".repeat(129)).chars().count(), 128);
        assert_eq!(deduplication_id(&"x".repeat(128)), "x".repeat(128));
    }

    #[test]
    fn a_message_group_of_characters_sns_and_sqs_refuse_is_made_of_ones_they_accept() {
        // Given ids SNS and SQS take as they are, and ids with a space, an accent or over 128
        assert_eq!(message_id("Order#o-1"), "Order#o-1");
        assert_eq!(message_id("0190e1d2-7c1a-7b3e"), "0190e1d2-7c1a-7b3e");
        let spaced = message_id("Order#order one");
        let accented = message_id("Order#ordér");
        let long = message_id(&"o".repeat(200));

        // Then each is at most 128 printable ASCII characters, stable, and distinct
        for id in [&spaced, &accented, &long] {
            assert!(id.chars().count() <= 128, "{id}");
            assert!(id.chars().all(|c| c.is_ascii_graphic()), "{id}");
        }
        assert!(spaced.starts_with("Order#order_one~"), "{spaced}");
        assert_eq!(spaced, message_id("Order#order one"));
        assert_ne!(message_id("Order#a b"), message_id("Order#a\tb"));
    }
}
