//! What SNS and SQS take of an event, the same for both: the message body is the envelope (the
//! buses' `Detail`), the event type and id are message attributes (`eventType`, `eventId`, for
//! subscription filter policies and consumers that route before parsing), and on a FIFO topic or
//! queue (a name ending `.fifo`) the aggregate is the `MessageGroupId` and the event id the
//! `MessageDeduplicationId` ([`outbox_shared::event_group::message_id`]). A message is sized as
//! both services count it against their limits: the body's UTF-8 bytes plus each attribute's
//! name, data type and value.

use outbox_shared::OutboundEvent;
use outbox_shared::event_group::message_id;

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
    failed: impl IntoIterator<Item = (String, super::send::EntryResult)>,
) -> Vec<super::send::EntryResult> {
    use super::send::EntryResult;
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
pub fn failed_entry(code: &str, message: &str, sender_fault: bool) -> super::send::EntryResult {
    let (code, message) = (code.to_owned(), message.to_owned());
    if sender_fault {
        super::send::EntryResult::Refused { code, message }
    } else {
        super::send::EntryResult::Retry { code, message }
    }
}

#[cfg(test)]
mod tests {
    use super::super::send::EntryResult;
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
