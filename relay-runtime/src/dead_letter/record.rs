//! The record of a letter too large for its queue, kept in the payload bucket under a key of its
//! own, which the letter names.

use outbox_shared::ItemKey;
use outbox_shared::claim_check::{self, PayloadRef, PayloadStore};

use super::{DeadLetter, DeadLetterError};

/// Where the record of a letter too large for its queue is kept in the payload bucket
/// ([`record_key`]); the bucket's lifecycle rule for it must outlive the queue's retention.
pub const RECORD_PREFIX: &str = "dead-letters/";

/// Who a record is about when it has neither an event id nor an item key.
const UNIDENTIFIED: &str = "unidentified";

/// The key of one letter's record in the payload bucket:
/// `dead-letters/{event}/{unique}.json`, where `{event}` is the event id as the claim check keys
/// it ([`claim_check::object_key`]: the id itself, or `sha256-{hex}` for an id a URI would
/// escape), or, without an event id, `sha256-{hex}` of the item's key (no user id in a key), and
/// `unidentified` without either; `{unique}` tells apart the letters of one event (a record
/// dead-lettered, redriven and dead-lettered again).
pub fn record_key(event_id: Option<&str>, key: Option<&ItemKey>, unique: uuid::Uuid) -> String {
    let event = match (event_id.filter(|id| !id.is_empty()), key) {
        (Some(id), _) => claim_check::key_segment(id),
        // A newline is no key-safe character: the item's key is always hashed.
        (None, Some(key)) => claim_check::key_segment(&format!("{}\n{}", key.pk, key.sk)),
        (None, None) => UNIDENTIFIED.to_owned(),
    };
    format!("{RECORD_PREFIX}{event}/{unique}.json")
}

/// The calls of a letter too large for its queue: its record is kept in the payload bucket
/// (`dead-letters/…`), and the letter names it.
pub const RECORD_CALLS: &[crate::permissions::Call] = &[crate::permissions::Call::new(
    "s3:PutObject",
    crate::permissions::Target::DeadLetterRecords,
)];

/// Stores `letter`'s record (its JSON) in `store`'s bucket under a key of its own
/// ([`record_key`]): an unconditional `PutObject` (the key is new) with the record's
/// `ChecksumSHA256`, which S3 verifies. Its reference.
///
/// # Errors
/// [`DeadLetterError::Encode`] when the record cannot be written as JSON;
/// [`DeadLetterError::Record`] when S3 did not take it.
pub(super) async fn keep_record(
    store: &PayloadStore,
    letter: &DeadLetter,
) -> Result<PayloadRef, DeadLetterError> {
    let record = serde_json::to_vec(&letter.record).map_err(|e| DeadLetterError::Encode {
        event_id: letter.event_id.clone(),
        message: e.to_string(),
    })?;
    let key = record_key(
        letter.event_id.as_deref(),
        letter.key.as_ref(),
        uuid::Uuid::now_v7(),
    );
    store
        .put_object(&key, &record)
        .await
        .map_err(|failure| DeadLetterError::Record {
            event_id: letter.event_id.clone(),
            uri: claim_check::uri(store.bucket(), &key),
            failure: Box::new(failure),
        })
}
