//! What SNS and SQS take of an event, the same for both: the message body is the envelope (the
//! buses' `Detail`), the event type and id are message attributes (`eventType`, `eventId`, for
//! subscription filter policies and consumers that route before parsing), and on a FIFO topic or
//! queue (a name ending `.fifo`) the aggregate is the `MessageGroupId` and the event id the
//! `MessageDeduplicationId` ([`outbox_shared::event_group::message_id`]). A message is sized as
//! both services count it against their limits: the body's UTF-8 bytes plus each attribute's
//! name, data type and value. One entry builder ([`entry`]) writes the message of either
//! service's batch entry ([`MessageEntry`]).
//!
//! Order and duplicates: a FIFO topic or queue delivers each message group in the order it
//! accepted its messages and drops a repeat of a `MessageDeduplicationId` within 5 minutes; a
//! standard one keeps neither ([`order`]).

use outbox_shared::OutboundEvent;
use outbox_shared::event_group::message_id;

/// SNS's and SQS's message size unless the topic or queue sets a larger `MaximumMessageSize`
/// (256 KiB), a message's and a batch's: the publisher's default for both.
pub const SQS_SNS_DEFAULT_MAX_BYTES: usize = 256 * 1024;

/// The message attribute holding the event's type (its `EventType`).
pub const EVENT_TYPE_ATTRIBUTE: &str = "eventType";

/// The message attribute holding the event's id (its `EventId`, `metadata.eventId`).
pub const EVENT_ID_ATTRIBUTE: &str = "eventId";

/// The data type of both attributes.
pub const STRING: &str = "String";

/// The suffix of a FIFO topic's or queue's name: SNS and SQS name no other kind so.
pub const FIFO_SUFFIX: &str = ".fifo";

/// Whether the topic ARN or queue URL `target` is a FIFO one.
pub fn is_fifo(target: &str) -> bool {
    target.ends_with(FIFO_SUFFIX)
}

/// The message attributes of `event`: its type and its id, as strings.
pub fn attributes(event: &OutboundEvent) -> [(&'static str, &str); 2] {
    [
        (EVENT_TYPE_ATTRIBUTE, event.detail_type.as_str()),
        (EVENT_ID_ATTRIBUTE, event.event_id.as_str()),
    ]
}

/// The FIFO ids of `event`: its `MessageGroupId` (the aggregate) and its
/// `MessageDeduplicationId` (the event id).
pub fn fifo_ids(event: &OutboundEvent) -> (String, String) {
    (message_id(&event.event_group), message_id(&event.event_id))
}

/// A batch entry of SNS (`PublishBatchRequestEntry`) or SQS (`SendMessageBatchRequestEntry`),
/// being built: what [`entry`] sets on it.
pub trait MessageEntry: Sized {
    /// An entry with its batch id and its body.
    fn start(id: String, body: &str) -> Self;
    /// The entry with the string message attribute `name` set to `value`.
    fn attribute(self, name: &str, value: &str) -> Self;
    /// The entry with its FIFO message group and de-duplication id.
    fn fifo(self, group: String, deduplication: String) -> Self;
}

/// The batch entry of `event` at `position` in its call: its body, its attributes, and on a
/// FIFO target its group and de-duplication id.
pub fn entry<B: MessageEntry>(event: &OutboundEvent, position: usize, fifo: bool) -> B {
    let mut entry = B::start(entry_id(position), &event.detail);
    for (name, value) in attributes(event) {
        entry = entry.attribute(name, value);
    }
    if fifo {
        let (group, deduplication) = fifo_ids(event);
        entry = entry.fifo(group, deduplication);
    }
    entry
}

/// What order and de-duplication a topic or queue named `target` gives each aggregate.
pub fn order(target: &str) -> &'static str {
    if is_fifo(target) {
        ", FIFO: each aggregate in order, re-publishes within 5 minutes suppressed"
    } else {
        ", standard: no order and no de-duplication (a FIFO target's name ends in .fifo)"
    }
}

/// The message's size as SNS and SQS count it: the body and each attribute's name, data type
/// and value, in UTF-8 bytes (the `Source` is not sent to these targets).
pub fn size(event: &OutboundEvent, _source: &str) -> usize {
    event.detail.len()
        + attributes(event)
            .iter()
            .map(|(name, value)| name.len() + STRING.len() + value.len())
            .sum::<usize>()
}

/// The batch entry id of the entry at `position` in its call (unique within the call, as both
/// services require; results name their entry by it).
pub fn entry_id(position: usize) -> String {
    position.to_string()
}

/// The position of the entry a batch result names, if it names one of the `entries` of the call.
pub fn position_of(id: &str, entries: usize) -> Option<usize> {
    id.parse().ok().filter(|&position| position < entries)
}

/// A batch answer read by entry id (SNS's and SQS's `Successful` and `Failed` lists), in entry
/// order: an entry the answer names twice or not at all is sent again (both services answer
/// every entry, so this is a mismatch).
pub fn results_by_id(
    entries: usize,
    successful: impl IntoIterator<Item = String>,
    failed: impl IntoIterator<Item = (String, super::call::EntryResult)>,
) -> Vec<super::call::EntryResult> {
    use super::call::EntryResult;
    let mut results: Vec<Option<EntryResult>> = vec![None; entries];
    let answered = successful
        .into_iter()
        .map(|id| (id, EntryResult::Published))
        .chain(failed);
    let mut mismatch = false;
    for (id, result) in answered {
        match position_of(&id, entries) {
            Some(position) if results[position].is_none() => results[position] = Some(result),
            _ => mismatch = true,
        }
    }
    if mismatch || results.iter().any(Option::is_none) {
        // `read_results` sends every entry again when the results do not match the entries.
        return Vec::new();
    }
    results.into_iter().flatten().collect()
}

/// One failed entry of an SNS or SQS batch: retried when the service says the fault is its own
/// (`SenderFault` false), else read by its code.
pub fn failed_entry(code: &str, message: &str, sender_fault: bool) -> super::call::EntryResult {
    let (code, message) = (code.to_owned(), message.to_owned());
    if sender_fault {
        super::call::EntryResult::Refused { code, message }
    } else {
        super::call::EntryResult::Retry { code, message }
    }
}

#[cfg(test)]
mod tests {
    use super::super::call::EntryResult;
    use super::*;

    #[test]
    fn results_are_matched_to_their_entries_by_id_and_a_mismatch_sends_them_all_again() {
        // Given an answer naming entries 0 and 2 successful, 1 failed by the service's fault
        let results = results_by_id(
            3,
            ["2".to_owned(), "0".to_owned()],
            [(
                "1".to_owned(),
                failed_entry("InternalError", "later", false),
            )],
        );

        // Then each result is in its entry's place
        assert_eq!(
            results,
            [
                EntryResult::Published,
                EntryResult::Retry {
                    code: "InternalError".into(),
                    message: "later".into()
                },
                EntryResult::Published
            ]
        );
        // And an answer that leaves an entry out, names one twice or one unknown matches none
        assert!(results_by_id(2, ["0".to_owned()], []).is_empty());
        assert!(results_by_id(1, ["0".to_owned(), "0".to_owned()], []).is_empty());
        assert!(results_by_id(1, ["7".to_owned()], []).is_empty());
    }

    #[test]
    fn a_message_is_sized_with_its_attributes() {
        let event = crate::testing::outbound("e-1", "order-1");
        assert_eq!(
            size(&event, "ignored"),
            event.detail.len()
                + "eventType".len()
                + 6
                + event.detail_type.len()
                + "eventId".len()
                + 6
                + "e-1".len()
        );
        assert!(is_fifo("arn:aws:sns:eu-west-1:123456789012:orders.fifo"));
        assert!(!is_fifo(
            "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"
        ));
    }
}
