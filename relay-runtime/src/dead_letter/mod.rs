//! The dead-letter port and its SQS adapter: where poison events go, with the full record and the
//! reason, so they never block a stream shard or a poller pass and are never silently lost.
//!
//! A letter must fit in the queue's `MaximumMessageSize`, or SQS refuses it for good and the event
//! would stay pending forever (an item may be 400 KB, a queue may take 256 KiB). A letter that
//! does not fit keeps its record in the payload bucket when the sink has one
//! ([`SqsDeadLetterSink::with_record_bucket`]): the record is one object under
//! [`RECORD_PREFIX`] ([`record_key`]), and the letter names it ([`RecordRef`]: its URI, size and
//! SHA-256), so `redrive` restores the event from the letter even once the item is gone. Without
//! a bucket the letter goes without its record ([`RecordLeftOut`] says so): the item itself,
//! marked `DEAD_LETTERED` in the table with a `ttl` past the queue's retention, holds it, and
//! `redrive` puts it back from there.
//!
//! A letter without its record never names an item that is not there. An event whose item
//! DynamoDB's TTL deleted while pending (the stream relay publishes it from the `REMOVE` record's
//! old image, its only copy) has no item to mark: the relay puts the item back `DEAD_LETTERED`
//! from that image before the letter goes (`crate::relay`,
//! [`crate::StatusStore::recreate_dead_lettered`]), and when it cannot, sends no letter
//! ([`DeadLetterError::Recreate`]): the record is re-delivered and tried again.
//!
//! When the record cannot be stored (S3 fails), the letter is not sent: [`DeadLetterError::Record`],
//! and the event stays pending to be dead-lettered again, as when the queue itself fails. Sending
//! it without its record instead would leave the event to the item alone, which expires, or, for
//! a record whose key could not be read, to nothing: the bucket is there so that a letter can
//! always restore its event.
//!
//! A letter must also hold only characters SQS takes, or SQS refuses it for good
//! (`InvalidMessageContents`) whatever its size: XML 1.0's characters, `#x9 | #xA | #xD |
//! #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF`, in the body and in string attribute values. A
//! payload may hold any other (U+FFFE, U+FFFF, a control character), so the body is JSON written
//! with every such character escaped (`\uFFFE`): it parses back to exactly the record it was
//! (`sqs_text.rs`). The message attributes are informational (the body has every value whole), so a
//! character SQS refuses in them is replaced by U+FFFD ([`sqs_text()`]).

use std::future::Future;

use outbox_shared::ItemKey;
use outbox_shared::SdkFailure;
#[cfg(doc)]
use outbox_shared::claim_check;
use outbox_shared::claim_check::PayloadRef;
use serde::{Deserialize, Serialize};

mod record;
mod sqs;
mod sqs_text;

pub use record::{RECORD_CALLS, RECORD_PREFIX, record_key};
pub use sqs::{CALLS, SqsDeadLetterSink};
pub use sqs_text::{sqs_allows, sqs_text};

/// One poison record and why it could not be published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeadLetter {
    /// Why the record can never be published (for the operator; no payload data in it).
    pub reason: String,
    /// Which relay gave up on it (`relay-stream`, `relay-poller`).
    pub origin: String,
    /// The outbox event id, when the record decoded far enough to have one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    /// The item's key, when known, for redrive and inspection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<ItemKey>,
    /// The full record as received (a stream record, or an item read from the index); `null` when
    /// it is kept in the payload bucket (see `record_ref`) or was left out (see
    /// `record_left_out`).
    #[serde(default)]
    pub record: serde_json::Value,
    /// When the relay gave up, ISO-8601 UTC.
    pub dead_lettered_at: String,
    /// Set when the record was left out because the letter would not fit in the queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_left_out: Option<RecordLeftOut>,
    /// Set when the record is kept in the payload bucket because the letter would not fit in the
    /// queue with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_ref: Option<RecordRef>,
}

/// Where a letter's record is kept in the payload bucket, what it is, and why it is there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordRef {
    /// `s3://BUCKET/dead-letters/…`.
    pub uri: String,
    /// The record's length in bytes (its JSON).
    pub size: u64,
    /// The record's SHA-256, base64 (S3's `ChecksumSHA256`).
    pub sha256: String,
    /// The size the letter would have had with its record, as SQS counts a message.
    pub letter_bytes: usize,
    /// The queue's `MaximumMessageSize`.
    pub max_message_bytes: usize,
    /// For the operator: what it means and what to do.
    pub note: String,
}

impl RecordRef {
    /// The reference to read the record with ([`claim_check::get`] checks its size and SHA-256).
    pub fn payload_ref(&self) -> PayloadRef {
        PayloadRef {
            uri: self.uri.clone(),
            size: self.size,
            sha256: self.sha256.clone(),
        }
    }
}

/// Why a letter carries no record, and where the record is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordLeftOut {
    /// The size the letter would have had with its record, as SQS counts a message.
    pub letter_bytes: usize,
    /// The queue's `MaximumMessageSize`.
    pub max_message_bytes: usize,
    /// For the operator: what it means and what to do.
    pub note: String,
}

/// The note of a letter without its record, about an item the relay could mark.
pub const RECORD_IN_THE_TABLE: &str = "The record was left out: with it the letter is larger than \
     the dead-letter queue's MaximumMessageSize. The item itself, at `key` in the table, holds it: \
     it is marked DEAD_LETTERED and its ttl outlives this queue's retention. `relay-poller redrive` \
     puts it back from the table.";

/// The note of a letter without its record, about a record whose item key could not be read.
pub const RECORD_LOST: &str = "The record was left out: with it the letter is larger than the \
     dead-letter queue's MaximumMessageSize, and the relay could not read the item's key, so \
     nothing else holds it.";

/// The note of a letter whose record is kept in the payload bucket.
pub const RECORD_IN_THE_BUCKET: &str = "The record is kept in the payload bucket at `uri`: with \
     it the letter is larger than the dead-letter queue's MaximumMessageSize. `relay-poller \
     redrive` reads it from there (checked against `size` and `sha256`) and restores the event \
     even when its item is gone. The object expires with the bucket's lifecycle rule for \
     dead-letters/.";

impl DeadLetter {
    /// This letter with its record kept at `reference` instead of in it (`letter_bytes`, the
    /// size it had with it, is over `max_message_bytes`).
    pub fn with_record_ref(
        &self,
        reference: PayloadRef,
        letter_bytes: usize,
        max_message_bytes: usize,
    ) -> Self {
        Self {
            record: serde_json::Value::Null,
            record_left_out: None,
            record_ref: Some(RecordRef {
                uri: reference.uri,
                size: reference.size,
                sha256: reference.sha256,
                letter_bytes,
                max_message_bytes,
                note: RECORD_IN_THE_BUCKET.to_owned(),
            }),
            ..self.clone()
        }
    }

    /// This letter without its record, saying why (`letter_bytes`, the size it had with it, is
    /// over `max_message_bytes`) and where the record is.
    pub fn without_record(&self, letter_bytes: usize, max_message_bytes: usize) -> Self {
        let note = if self.key.is_some() {
            RECORD_IN_THE_TABLE
        } else {
            RECORD_LOST
        };
        Self {
            record: serde_json::Value::Null,
            record_left_out: Some(RecordLeftOut {
                letter_bytes,
                max_message_bytes,
                note: note.to_owned(),
            }),
            record_ref: None,
            ..self.clone()
        }
    }
}

/// The dead-letter destination could not take a record.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeadLetterError {
    /// The queue did not take the message.
    #[error("could not send event {} to the dead-letter queue", event_id.as_deref().unwrap_or("(no id)"))]
    Send {
        event_id: Option<String>,
        #[source]
        failure: SdkFailure,
    },
    /// The letter was too large for the queue and its record could not be kept in the payload
    /// bucket: the letter was not sent (it would name an object that is not there).
    #[error(
        "could not keep the record of event {} at {uri} (its letter is too large for the \
         dead-letter queue); the letter was not sent",
        event_id.as_deref().unwrap_or("(no id)")
    )]
    Record {
        event_id: Option<String>,
        uri: String,
        /// Boxed: the error stays small on every path that returns it.
        #[source]
        failure: Box<SdkFailure>,
    },
    /// The event's item is gone (DynamoDB's TTL deleted it while pending) and could not be put
    /// back `DEAD_LETTERED`: the letter was not sent (it would name an item that is not there).
    #[error(
        "could not put the item of event {} back as DEAD_LETTERED (DynamoDB's TTL deleted it); \
         the letter was not sent",
        event_id.as_deref().unwrap_or("(no id)")
    )]
    Recreate {
        event_id: Option<String>,
        /// Boxed: the error stays small on every path that returns it.
        #[source]
        failure: Box<SdkFailure>,
    },
    /// The letter could not be written as JSON.
    #[error("could not encode the dead letter of event {}: {message}", event_id.as_deref().unwrap_or("(no id)"))]
    Encode {
        event_id: Option<String>,
        message: String,
    },
}

/// Port: where poison records go.
pub trait DeadLetterSink: Send + Sync {
    fn send(&self, letter: &DeadLetter)
    -> impl Future<Output = Result<(), DeadLetterError>> + Send;
}

/// A borrowed sink is a sink (a test keeps its fake to inspect it).
impl<D: DeadLetterSink> DeadLetterSink for &D {
    fn send(
        &self,
        letter: &DeadLetter,
    ) -> impl Future<Output = Result<(), DeadLetterError>> + Send {
        (**self).send(letter)
    }
}

#[cfg(test)]
mod tests;
