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
//! ([`encode`]). The message attributes are informational (the body has every value whole), so a
//! character SQS refuses in them is replaced by U+FFFD ([`sqs_text`]).

use std::future::Future;
use std::io;
use std::sync::Arc;

use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName};
use outbox_shared::ItemKey;
use outbox_shared::SdkFailure;
use outbox_shared::claim_check::{self, PayloadRef, PayloadStore};
use outbox_shared::limits::SQS_MESSAGE_DEFAULT_MAX_BYTES;
use serde::{Deserialize, Serialize};
use tokio::sync::OnceCell;

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

/// The calls of [`SqsDeadLetterSink`]: a letter per poison event, and the queue's
/// `MaximumMessageSize` read once.
pub const CALLS: &[crate::permissions::Call] = &[
    crate::permissions::Call::new(
        "sqs:SendMessage",
        crate::permissions::Target::DeadLetterQueue,
    ),
    crate::permissions::Call::new(
        "sqs:GetQueueAttributes",
        crate::permissions::Target::DeadLetterQueue,
    ),
];

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

/// The SQS adapter: one message per poison record, JSON body, with `reason`, `origin` and
/// `eventId` as message attributes so an operator can filter without parsing bodies.
///
/// Its calls: [`CALLS`]; with a record bucket, [`RECORD_CALLS`] too.
///
/// The queue's `MaximumMessageSize` is read from the queue (`GetQueueAttributes`) at the first
/// letter and kept for the sink's life, shared by its clones: the queue is the one place the
/// limit is set, so configuration cannot drift from it, and poison is rare, so the one call is
/// made only by a process that meets some (never per message). When it cannot be read, SQS's
/// default of 256 KiB is kept instead: a larger letter then goes without its record, which the
/// item still holds.
#[derive(Debug, Clone)]
pub struct SqsDeadLetterSink {
    client: aws_sdk_sqs::Client,
    queue_url: String,
    max_message_bytes: Arc<OnceCell<usize>>,
    /// Where the record of a letter too large for the queue is kept (`None`: it is left out).
    records: Option<PayloadStore>,
}

impl SqsDeadLetterSink {
    /// A sink sending to the queue at `queue_url`; a letter too large for it goes without its
    /// record until [`with_record_bucket`](Self::with_record_bucket) names a bucket.
    pub fn new(client: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            max_message_bytes: Arc::default(),
            records: None,
        }
    }

    /// Keeps the record of a letter too large for the queue in `store`'s bucket (the payload
    /// bucket, `PAYLOAD_BUCKET`): one unconditional `PutObject` with its `ChecksumSHA256` under
    /// [`record_key`], then the letter names it ([`RecordRef`]) instead of going without it. A
    /// letter that fits calls nothing more. Its calls then include [`RECORD_CALLS`].
    #[must_use]
    pub fn with_record_bucket(mut self, store: PayloadStore) -> Self {
        self.records = Some(store);
        self
    }

    /// The bucket records of letters too large for the queue are kept in, when there is one.
    pub fn record_bucket(&self) -> Option<&str> {
        self.records.as_ref().map(PayloadStore::bucket)
    }

    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }

    /// The queue's `MaximumMessageSize`: read once, then kept.
    async fn max_message_bytes(&self) -> usize {
        *self
            .max_message_bytes
            .get_or_init(|| async {
                match self.read_max_message_bytes().await {
                    Ok(bytes) => bytes,
                    Err(failure) => {
                        tracing::warn!(error = %outbox_shared::error::describe(&failure), max_message_bytes = SQS_MESSAGE_DEFAULT_MAX_BYTES, "could not read the dead-letter queue's MaximumMessageSize; larger letters go without their records");
                        SQS_MESSAGE_DEFAULT_MAX_BYTES
                    }
                }
            })
            .await
    }

    async fn read_max_message_bytes(&self) -> Result<usize, SdkFailure> {
        const OPERATION: &str = "GetQueueAttributes";
        let answer = self
            .client
            .get_queue_attributes()
            .queue_url(&self.queue_url)
            .attribute_names(QueueAttributeName::MaximumMessageSize)
            .send()
            .await
            .map_err(|e| SdkFailure::new(OPERATION, e))?;
        let value = answer
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::MaximumMessageSize))
            .ok_or_else(|| {
                SdkFailure::incomplete(OPERATION, "no MaximumMessageSize in the answer")
            })?;
        value.parse().map_err(|_| {
            SdkFailure::incomplete(
                OPERATION,
                format!("MaximumMessageSize {value:?} is not a size"),
            )
        })
    }
}

/// SQS message attribute values are at most 256 KiB with the body; keep the reason attribute short.
const MAX_REASON_ATTRIBUTE_BYTES: usize = 256;

/// Whether SQS takes `c` in a message body or a string attribute value (`SendMessage` answers
/// `InvalidMessageContents` otherwise): XML 1.0's characters, `#x9 | #xA | #xD | #x20-#xD7FF |
/// #xE000-#xFFFD | #x10000-#x10FFFF`. U+D800 to U+DFFF are no characters (no `str` holds them).
pub fn sqs_allows(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
}

/// `text` with each character SQS refuses replaced by U+FFFD, for a message attribute: the
/// attributes are for filtering and reading at a glance, the body holds every value exactly.
pub fn sqs_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().all(sqs_allows) {
        return text.into();
    }
    text.chars()
        .map(|c| {
            if sqs_allows(c) {
                c
            } else {
                char::REPLACEMENT_CHARACTER
            }
        })
        .collect::<String>()
        .into()
}

fn string_attribute(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(sqs_text(value))
        .build()
        .expect("data type is set")
}

/// serde_json's compact output with each character SQS refuses written as a `\uXXXX` escape
/// (a surrogate pair above U+FFFF, though SQS refuses none there). serde_json escapes the control
/// characters below U+0020 itself; what reaches a string fragment are U+FFFE and U+FFFF. Every
/// string goes through here, object keys too, and an escape stands for the same character in
/// JSON, so the body parses back to the same value.
struct SqsJson;

impl serde_json::ser::Formatter for SqsJson {
    fn write_string_fragment<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        let mut rest = fragment;
        while let Some((at, c)) = rest.char_indices().find(|(_, c)| !sqs_allows(*c)) {
            writer.write_all(&rest.as_bytes()[..at])?;
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(writer, "\\u{unit:04x}")?;
            }
            rest = &rest[at + c.len_utf8()..];
        }
        writer.write_all(rest.as_bytes())
    }
}

/// The message attributes of `letter`'s message.
fn attributes(letter: &DeadLetter) -> Vec<(&'static str, MessageAttributeValue)> {
    let reason = crate::status_store::truncate(&letter.reason, MAX_REASON_ATTRIBUTE_BYTES);
    let mut attributes = vec![
        (
            "reason",
            string_attribute(if reason.is_empty() { "-" } else { reason }),
        ),
        ("origin", string_attribute(&letter.origin)),
    ];
    if let Some(id) = letter.event_id.as_deref().filter(|id| !id.is_empty()) {
        attributes.push(("eventId", string_attribute(id)));
    }
    attributes
}

/// A message's size as SQS counts it against the queue's `MaximumMessageSize`: the body's bytes
/// and each message attribute's name, data type and value.
fn message_size(body: &str, attributes: &[(&str, MessageAttributeValue)]) -> usize {
    let attributes: usize = attributes
        .iter()
        .map(|(name, value)| {
            name.len()
                + value.data_type().len()
                + value.string_value().map_or(0, str::len)
                + value.binary_value().map_or(0, |b| b.as_ref().len())
        })
        .sum();
    body.len() + attributes
}

/// `letter` as a message body: JSON holding only characters SQS takes ([`SqsJson`]).
fn encode(letter: &DeadLetter) -> Result<String, DeadLetterError> {
    let mut body = Vec::new();
    letter
        .serialize(&mut serde_json::Serializer::with_formatter(
            &mut body, SqsJson,
        ))
        .map_err(|e| DeadLetterError::Encode {
            event_id: letter.event_id.clone(),
            message: e.to_string(),
        })?;
    Ok(String::from_utf8(body).expect("serde_json writes UTF-8"))
}

impl SqsDeadLetterSink {
    /// The body of `letter`'s message within `max_message_bytes` with `attributes`: the whole
    /// letter, or, when that is too large, the letter naming its record kept in the record
    /// bucket, or without it when the sink has no bucket.
    ///
    /// # Errors
    /// [`DeadLetterError::Encode`] when the letter cannot be written as JSON;
    /// [`DeadLetterError::Record`] when its record could not be kept in the bucket.
    async fn fitting_body(
        &self,
        letter: &DeadLetter,
        attributes: &[(&str, MessageAttributeValue)],
        max_message_bytes: usize,
    ) -> Result<String, DeadLetterError> {
        let body = encode(letter)?;
        let size = message_size(&body, attributes);
        if size <= max_message_bytes {
            return Ok(body);
        }
        let event_id = letter.event_id.as_deref().unwrap_or("(no id)");
        let Some(store) = &self.records else {
            tracing::warn!(
                event_id,
                letter_bytes = size,
                max_message_bytes,
                "dead letter too large for the queue; it goes without its record, which the item holds"
            );
            return encode(&letter.without_record(size, max_message_bytes));
        };
        let reference = keep_record(store, letter).await?;
        tracing::info!(
            event_id,
            letter_bytes = size,
            max_message_bytes,
            uri = %reference.uri,
            "dead letter too large for the queue; its record is kept in the payload bucket"
        );
        encode(&letter.with_record_ref(reference, size, max_message_bytes))
    }
}

/// Stores `letter`'s record (its JSON) in `store`'s bucket under a key of its own
/// ([`record_key`]): an unconditional `PutObject` (the key is new) with the record's
/// `ChecksumSHA256`, which S3 verifies. Its reference.
///
/// # Errors
/// [`DeadLetterError::Encode`] when the record cannot be written as JSON;
/// [`DeadLetterError::Record`] when S3 did not take it.
async fn keep_record(
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

impl DeadLetterSink for SqsDeadLetterSink {
    async fn send(&self, letter: &DeadLetter) -> Result<(), DeadLetterError> {
        let attributes = attributes(letter);
        let max_message_bytes = self.max_message_bytes().await;
        let body = self
            .fitting_body(letter, &attributes, max_message_bytes)
            .await?;
        let mut request = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body);
        for (name, value) in attributes {
            request = request.message_attributes(name, value);
        }
        request.send().await.map_err(|e| DeadLetterError::Send {
            event_id: letter.event_id.clone(),
            failure: SdkFailure::new("SendMessage", e),
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use aws_sdk_sqs::Client;
    use aws_sdk_sqs::config::retry::RetryConfig;
    use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
    use aws_sdk_sqs::operation::get_queue_attributes::{
        GetQueueAttributesError, GetQueueAttributesOutput,
    };
    use aws_sdk_sqs::operation::send_message::SendMessageOutput;
    use aws_sdk_sqs::types::error::InvalidAddress;
    use aws_smithy_mocks::{
        MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock,
    };

    use super::*;

    /// An SQS client answered by `rules`, in order (SDK retries off).
    fn mock_sqs(rules: &[&Rule]) -> Client {
        let interceptor = rules.iter().fold(
            MockResponseInterceptor::new().rule_mode(RuleMode::Sequential),
            |i, rule| i.with_rule(rule),
        );
        let config = aws_sdk_sqs::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "test"))
            .http_client(create_mock_http_client())
            .interceptor(interceptor)
            .retry_config(RetryConfig::disabled())
            .build();
        Client::from_conf(config)
    }

    fn queue_limit(bytes: usize) -> Rule {
        mock!(Client::get_queue_attributes)
            .match_requests(|req| req.attribute_names() == [QueueAttributeName::MaximumMessageSize])
            .then_output(move || {
                GetQueueAttributesOutput::builder()
                    .attributes(QueueAttributeName::MaximumMessageSize, bytes.to_string())
                    .build()
            })
    }

    /// A `SendMessage` that is taken; its body and size as SQS counts it go to `sent`.
    fn taken(sent: &Arc<Mutex<Vec<(String, usize)>>>) -> Rule {
        let sent = sent.clone();
        mock!(Client::send_message)
            .match_requests(move |req| {
                let attributes: Vec<(&str, MessageAttributeValue)> = req
                    .message_attributes()
                    .into_iter()
                    .flatten()
                    .map(|(name, value)| (name.as_str(), value.clone()))
                    .collect();
                let body = req.message_body().unwrap_or_default().to_owned();
                let size = message_size(&body, &attributes);
                sent.lock().unwrap().push((body, size));
                true
            })
            .then_output(|| SendMessageOutput::builder().message_id("m").build())
    }

    /// A letter whose record is a payload of `payload_bytes` bytes.
    fn letter(id: &str, key: Option<ItemKey>, payload_bytes: usize) -> DeadLetter {
        DeadLetter {
            reason: "EventBridge rejected the entry: EntryTooLarge: the entry is too large".into(),
            origin: "relay-poller".into(),
            event_id: Some(id.into()),
            key,
            record: serde_json::json!({"PK": "USER#u", "Payload": "x".repeat(payload_bytes)}),
            dead_lettered_at: "2026-11-22T10:00:00.000Z".into(),
            record_left_out: None,
            record_ref: None,
        }
    }

    fn key(id: &str) -> Option<ItemKey> {
        Some(ItemKey {
            pk: "USER#u".into(),
            sk: format!("OUTBOX#{id}"),
        })
    }

    fn parse(body: &str) -> DeadLetter {
        serde_json::from_str(body).unwrap()
    }

    #[test]
    fn a_message_is_measured_as_sqs_counts_it() {
        // Body bytes (UTF-8, not characters), then each attribute's name, data type and value
        let attributes = [
            ("reason", string_attribute("é")),
            ("id", string_attribute("ab")),
        ];
        assert_eq!(
            message_size("€", &attributes),
            3 + ("reason".len() + "String".len() + 2) + ("id".len() + "String".len() + 2)
        );
    }

    /// Characters at and beside each boundary of the set SQS allows, and whether it allows each.
    /// (U+D800 to U+DFFF, between `#xD7FF` and `#xE000`, are no `char`s.)
    const BOUNDARIES: &[(char, bool)] = &[
        ('\u{0}', false),
        ('\u{8}', false),
        ('\u{9}', true),
        ('\u{A}', true),
        ('\u{B}', false),
        ('\u{C}', false),
        ('\u{D}', true),
        ('\u{E}', false),
        ('\u{1F}', false),
        ('\u{20}', true),
        ('\u{7F}', true),
        ('\u{D7FF}', true),
        ('\u{E000}', true),
        ('\u{FFFD}', true),
        ('\u{FFFE}', false),
        ('\u{FFFF}', false),
        ('\u{10000}', true),
        ('\u{1FFFE}', true),
        ('\u{10FFFF}', true),
    ];

    #[test]
    fn sqs_allows_exactly_xml_characters_at_every_boundary() {
        for (c, allowed) in BOUNDARIES {
            assert_eq!(sqs_allows(*c), *allowed, "{c:?}");
        }
    }

    #[test]
    fn a_body_holds_only_characters_sqs_allows_and_decodes_to_the_letter_it_was() {
        // A letter whose record, key, id and reason hold every boundary character, alone and
        // between others (in object keys too)
        let all: String = BOUNDARIES.iter().map(|(c, _)| *c).collect();
        let mut whole = letter(&format!("e-{all}"), key(&all), 10);
        whole.reason = format!("reason {all}");
        whole.record = serde_json::json!({
            "Payload": format!("before{all}after"),
            format!("key{all}"): [all.clone(), {"nested": all.clone()}],
        });
        for (c, _) in BOUNDARIES {
            whole.record[format!("alone {:X}", u32::from(*c))] = c.to_string().into();
        }

        // When it is written as a body
        let body = encode(&whole).unwrap();

        // Then every character is one SQS allows, those it refuses written as JSON escapes
        // (serde_json's own for the control characters, `\b` and `\f` among them)
        assert!(body.chars().all(sqs_allows), "{body:?}");
        for (c, allowed) in BOUNDARIES {
            if !allowed {
                let escape = match c {
                    '\u{8}' => "\\b".to_owned(),
                    '\u{C}' => "\\f".to_owned(),
                    c => format!("\\u{:04x}", u32::from(*c)),
                };
                let alone = format!(r#""alone {:X}":"{escape}""#, u32::from(*c));
                assert!(body.contains(&alone), "{alone} in {body}");
            }
        }
        // And it decodes to exactly the letter (the JSON serde_json writes, but escaped)
        assert_eq!(parse(&body), whole);
        let plain = serde_json::to_string(&whole).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&body).unwrap(),
            serde_json::from_str::<serde_json::Value>(&plain).unwrap()
        );
        // And a letter without such characters is the JSON serde_json writes
        let ordinary = letter("e1", key("e1"), 10);
        assert_eq!(
            encode(&ordinary).unwrap(),
            serde_json::to_string(&ordinary).unwrap()
        );
    }

    #[test]
    fn an_attribute_value_has_each_character_sqs_refuses_replaced() {
        for (c, allowed) in BOUNDARIES {
            let value = string_attribute(&format!("a{c}b"));
            let expected = if *allowed {
                *c
            } else {
                char::REPLACEMENT_CHARACTER
            };
            assert_eq!(value.string_value(), Some(format!("a{expected}b").as_str()));
        }
        assert!(matches!(
            sqs_text("plain"),
            std::borrow::Cow::Borrowed("plain")
        ));
    }

    #[tokio::test]
    async fn a_letter_of_characters_sqs_refuses_is_sent_with_only_characters_it_allows() {
        // Given a queue that takes messages
        let sent = Arc::new(Mutex::new(Vec::new()));
        let limit = queue_limit(SQS_MESSAGE_DEFAULT_MAX_BYTES);
        let checked = sent.clone();
        let send = mock!(Client::send_message)
            .match_requests(move |req| {
                let values: Vec<String> = req
                    .message_attributes()
                    .into_iter()
                    .flatten()
                    .filter_map(|(_, v)| v.string_value().map(str::to_owned))
                    .collect();
                checked
                    .lock()
                    .unwrap()
                    .push((req.message_body().unwrap_or_default().to_owned(), values));
                true
            })
            .then_output(|| SendMessageOutput::builder().message_id("m").build());
        let sink = SqsDeadLetterSink::new(mock_sqs(&[&limit, &send]), "q");

        // When a letter whose id, reason and record hold U+FFFE and U+FFFF is sent
        let mut poison = letter("e\u{FFFE}\u{FFFF}", key("e"), 10);
        poison.reason = "reason \u{FFFF}".into();
        poison.record["Payload"] = "\u{FFFE}\u{1}\u{FFFF}".into();
        sink.send(&poison).await.unwrap();

        // Then its body and every attribute value hold only characters SQS allows, and the body
        // decodes to the letter
        let sent = sent.lock().unwrap().clone();
        let (body, values) = &sent[0];
        assert!(body.chars().all(sqs_allows), "{body:?}");
        assert!(
            values.iter().flat_map(|v| v.chars()).all(sqs_allows),
            "{values:?}"
        );
        assert!(
            values.contains(&"e\u{FFFD}\u{FFFD}".to_owned()),
            "{values:?}"
        );
        assert_eq!(parse(body), poison);
    }

    #[tokio::test]
    async fn a_letter_too_large_for_the_queue_goes_without_its_record_and_the_limit_is_read_once() {
        // Given a queue that takes messages of 2 KiB
        let sent = Arc::new(Mutex::new(Vec::new()));
        let limit = queue_limit(2048);
        let (first, second, third) = (taken(&sent), taken(&sent), taken(&sent));
        let sink = SqsDeadLetterSink::new(mock_sqs(&[&limit, &first, &second, &third]), "q");

        // When a letter that fits, one that does not, and a keyless one that does not are sent
        for letter in [
            letter("small", key("small"), 100),
            letter("large", key("large"), 4000),
            letter("keyless", None, 4000),
        ] {
            sink.send(&letter).await.unwrap();
        }

        // Then the queue's limit was read once, and every message fits in it
        assert_eq!(limit.num_calls(), 1);
        let sent = sent.lock().unwrap().clone();
        assert_eq!(sent.len(), 3);
        assert!(sent.iter().all(|(_, size)| *size <= 2048), "{sent:?}");

        // And the small letter is whole
        let small = parse(&sent[0].0);
        assert_eq!(small, letter("small", key("small"), 100));

        // And the large one has everything but its record, and says where the record is
        let large = parse(&sent[1].0);
        let whole = letter("large", key("large"), 4000);
        let left_out = large.record_left_out.clone().expect("record left out");
        assert_eq!(left_out.max_message_bytes, 2048);
        assert_eq!(
            left_out.letter_bytes,
            message_size(&encode(&whole).unwrap(), &attributes(&whole))
        );
        assert_eq!(left_out.note, RECORD_IN_THE_TABLE);
        assert_eq!(
            large,
            DeadLetter {
                record: serde_json::Value::Null,
                record_left_out: Some(left_out),
                ..whole
            }
        );

        // And the keyless one says nothing else holds its record
        let keyless = parse(&sent[2].0);
        assert_eq!(keyless.record_left_out.unwrap().note, RECORD_LOST);
    }

    #[tokio::test]
    async fn when_the_limit_cannot_be_read_sqs_default_is_kept() {
        // Given a queue whose attributes cannot be read (once), and that takes messages
        let sent = Arc::new(Mutex::new(Vec::new()));
        let unreadable = mock!(Client::get_queue_attributes).then_error(|| {
            GetQueueAttributesError::InvalidAddress(
                InvalidAddress::builder().message("denied").build(),
            )
        });
        let (first, second) = (taken(&sent), taken(&sent));
        let sink = SqsDeadLetterSink::new(mock_sqs(&[&unreadable, &first, &second]), "q");

        // When a letter over 256 KiB and one under it are sent
        let over = letter("over", key("over"), SQS_MESSAGE_DEFAULT_MAX_BYTES);
        let under = letter("under", key("under"), SQS_MESSAGE_DEFAULT_MAX_BYTES - 2048);
        sink.send(&over).await.unwrap();
        sink.send(&under).await.unwrap();

        // Then the limit was asked for once, and 256 KiB was kept: the first goes without its
        // record, the second whole
        assert_eq!(unreadable.num_calls(), 1);
        let sent = sent.lock().unwrap().clone();
        let over_sent = parse(&sent[0].0);
        assert_eq!(over_sent.record, serde_json::Value::Null);
        assert_eq!(
            over_sent.record_left_out.unwrap().max_message_bytes,
            SQS_MESSAGE_DEFAULT_MAX_BYTES
        );
        assert_eq!(parse(&sent[1].0), under);
    }

    /// An S3 client answered by `rules`, in order (SDK retries off).
    fn mock_s3(rules: &[&Rule]) -> aws_sdk_s3::Client {
        aws_sdk_s3::Client::from_conf(crate::mocked_s3(rules).build())
    }

    /// What a `PutObject` was asked to store.
    #[derive(Debug, Clone)]
    struct Put {
        bucket: String,
        key: String,
        checksum_sha256: Option<String>,
        body: Vec<u8>,
    }

    /// A `PutObject` that is taken; what it stored goes to `puts`.
    fn stored(puts: &Arc<Mutex<Vec<Put>>>) -> Rule {
        let puts = puts.clone();
        mock!(aws_sdk_s3::Client::put_object)
            .match_requests(move |req| {
                puts.lock().unwrap().push(Put {
                    bucket: req.bucket().unwrap_or_default().to_owned(),
                    key: req.key().unwrap_or_default().to_owned(),
                    checksum_sha256: req.checksum_sha256().map(str::to_owned),
                    body: req.body().bytes().unwrap_or_default().to_vec(),
                });
                true
            })
            .then_output(|| aws_sdk_s3::operation::put_object::PutObjectOutput::builder().build())
    }

    #[tokio::test]
    async fn a_letter_too_large_for_the_queue_keeps_its_record_in_the_bucket_and_names_it() {
        // Given a queue that takes messages of 2 KiB, and a record bucket
        let sent = Arc::new(Mutex::new(Vec::new()));
        let puts = Arc::new(Mutex::new(Vec::new()));
        let limit = queue_limit(2048);
        let (first, second) = (taken(&sent), taken(&sent));
        let put = stored(&puts);
        let sink = SqsDeadLetterSink::new(mock_sqs(&[&limit, &first, &second]), "q")
            .with_record_bucket(PayloadStore::new(mock_s3(&[&put]), "orders-payloads"));
        assert_eq!(sink.record_bucket(), Some("orders-payloads"));

        // When a letter that fits and one that does not are sent
        let small = letter("small", key("small"), 100);
        let large = letter("large", key("large"), 4000);
        sink.send(&small).await.unwrap();
        sink.send(&large).await.unwrap();

        // Then one object was stored, for the large letter: its record, under dead-letters/ and
        // its event id, with its SHA-256 for S3 to check
        assert_eq!(put.num_calls(), 1);
        let puts = puts.lock().unwrap().clone();
        let object = &puts[0];
        assert_eq!(object.bucket, "orders-payloads");
        assert!(
            object.key.starts_with("dead-letters/large/") && object.key.ends_with(".json"),
            "{}",
            object.key
        );
        let record: serde_json::Value = serde_json::from_slice(&object.body).unwrap();
        assert_eq!(record, large.record);
        let sha256 = claim_check::sha256_base64(&object.body);
        assert_eq!(object.checksum_sha256.as_deref(), Some(sha256.as_str()));

        // And the small letter is whole, the large one names the object instead of carrying its
        // record, and both fit
        let sent = sent.lock().unwrap().clone();
        assert!(sent.iter().all(|(_, size)| *size <= 2048), "{sent:?}");
        assert_eq!(parse(&sent[0].0), small);
        let named = parse(&sent[1].0);
        let record_ref = named.record_ref.clone().expect("a record reference");
        assert_eq!(
            record_ref,
            RecordRef {
                uri: format!("s3://orders-payloads/{}", object.key),
                size: object.body.len() as u64,
                sha256,
                letter_bytes: message_size(&encode(&large).unwrap(), &attributes(&large)),
                max_message_bytes: 2048,
                note: RECORD_IN_THE_BUCKET.to_owned(),
            }
        );
        assert_eq!(
            named,
            DeadLetter {
                record: serde_json::Value::Null,
                record_ref: Some(record_ref.clone()),
                ..large
            }
        );
        assert_eq!(record_ref.payload_ref().validate(), Ok(()));
        let body: serde_json::Value = serde_json::from_str(&sent[1].0).unwrap();
        assert_eq!(body["recordRef"]["uri"], record_ref.uri, "{body}");
        assert!(body.get("recordLeftOut").is_none(), "{body}");
    }

    #[tokio::test]
    async fn when_s3_fails_a_letter_too_large_is_not_sent_so_its_event_stays_pending() {
        // Given a queue that takes messages of 2 KiB, and a record bucket S3 cannot write to now
        let sent = Arc::new(Mutex::new(Vec::new()));
        let limit = queue_limit(2048);
        let send = taken(&sent);
        let unavailable = mock!(aws_sdk_s3::Client::put_object).then_http_response(|| {
            aws_smithy_runtime_api::http::Response::new(
                aws_smithy_runtime_api::http::StatusCode::try_from(503).unwrap(),
                aws_smithy_types::body::SdkBody::from(
                    "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>",
                ),
            )
        });
        let sink = SqsDeadLetterSink::new(mock_sqs(&[&limit, &send]), "q").with_record_bucket(
            PayloadStore::new(mock_s3(&[&unavailable]), "orders-payloads"),
        );

        // When a letter too large for the queue is sent
        let err = sink
            .send(&letter("large", key("large"), 4000))
            .await
            .unwrap_err();

        // Then the sink fails it, retryable, naming the event, the object and S3's answer, and
        // sent nothing: the relay keeps the event pending (never a letter without its record, nor
        // one naming an object that is not there)
        let DeadLetterError::Record {
            event_id,
            uri,
            failure,
        } = &err
        else {
            panic!("{err:?}")
        };
        assert_eq!(event_id.as_deref(), Some("large"));
        assert!(
            uri.starts_with("s3://orders-payloads/dead-letters/large/"),
            "{uri}"
        );
        assert_eq!(failure.operation, "PutObject");
        assert_eq!(failure.code.as_deref(), Some("SlowDown"));
        assert!(failure.is_retryable(), "{failure}");
        let text = err.to_string();
        assert!(
            text.contains("large") && text.contains(uri.as_str()),
            "{text}"
        );
        assert_eq!(unavailable.num_calls(), 1);
        assert_eq!(send.num_calls(), 0, "no letter sent");
        assert!(sent.lock().unwrap().is_empty());
    }

    #[test]
    fn each_letter_of_an_event_has_a_record_key_of_its_own() {
        // The event id as the claim check keys it, then a unique part
        let (a, b) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
        let id = "0193a5e0-7c1a-7cc3-9f00-0a1b2c3d4e5f";
        assert_eq!(
            record_key(Some(id), key(id).as_ref(), a),
            format!("dead-letters/{id}/{a}.json")
        );
        assert_ne!(
            record_key(Some(id), None, a),
            record_key(Some(id), None, b),
            "dead-lettered twice, two records"
        );
        // An id a URI would escape is hashed, as the claim check hashes it
        let odd = record_key(Some("order 1/../x?"), None, a);
        let hashed = claim_check::object_key("order 1/../x?");
        assert_eq!(
            odd,
            format!(
                "dead-letters/{}/{a}.json",
                &hashed[claim_check::KEY_PREFIX.len()..]
            )
        );
        // Without an event id, the item's key, hashed (it names a user); without either, a
        // fixed word
        let keyed = record_key(None, key("e1").as_ref(), a);
        assert!(keyed.starts_with("dead-letters/sha256-"), "{keyed}");
        assert!(!keyed.contains("USER"), "{keyed}");
        assert_eq!(keyed, record_key(Some(""), key("e1").as_ref(), a));
        assert_eq!(
            record_key(None, None, a),
            format!("dead-letters/unidentified/{a}.json")
        );
    }
}
