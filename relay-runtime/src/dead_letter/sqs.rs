//! The SQS adapter of the dead-letter port: one message per poison record, fitted to the queue's
//! `MaximumMessageSize`.

use std::sync::Arc;

use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName};
use outbox_shared::SdkFailure;
use outbox_shared::claim_check::PayloadStore;
use outbox_shared::limits::SQS_MESSAGE_DEFAULT_MAX_BYTES;
use tokio::sync::OnceCell;

#[cfg(doc)]
use super::RecordRef;
use super::record::keep_record;
#[cfg(doc)]
use super::record::{RECORD_CALLS, record_key};
use super::sqs_text::{encode, sqs_text};
use super::{DeadLetter, DeadLetterError, DeadLetterSink};

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

/// The SQS adapter: one message per poison record, JSON body, with `reason`, `origin` and
/// `eventId` as message attributes so an operator can filter without parsing bodies.
///
/// Its calls: [`CALLS`]; with a record bucket, [`RECORD_CALLS`] too.
///
/// The queue's `MaximumMessageSize` is read from the queue (`GetQueueAttributes`) at the first
/// letter and kept for the sink's life, shared by its clones: the queue is the one place the
/// limit is set, so configuration cannot drift from it, and poison is rare, so the one call is
/// made only by a process that meets some (never per message once read). When it cannot be
/// read, a letter is measured against SQS's default of 256 KiB (a larger one goes without its
/// record, which the item still holds) and the next letter reads the limit again, so one failed
/// read does not pin the default for the process's life.
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

    /// The queue's `MaximumMessageSize`: read once, then kept. A read that failed keeps nothing:
    /// this letter is measured against SQS's default, and the next letter reads the limit again.
    async fn max_message_bytes(&self) -> usize {
        match self
            .max_message_bytes
            .get_or_try_init(|| self.read_max_message_bytes())
            .await
        {
            Ok(bytes) => *bytes,
            Err(failure) => {
                tracing::warn!(error = %outbox_shared::error::describe(&failure), max_message_bytes = SQS_MESSAGE_DEFAULT_MAX_BYTES, "could not read the dead-letter queue's MaximumMessageSize; this letter is measured against SQS's default, the next reads it again");
                SQS_MESSAGE_DEFAULT_MAX_BYTES
            }
        }
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

pub(super) fn string_attribute(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(sqs_text(value))
        .build()
        .expect("data type is set")
}

/// The message attributes of `letter`'s message.
pub(super) fn attributes(letter: &DeadLetter) -> Vec<(&'static str, MessageAttributeValue)> {
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
pub(super) fn message_size(body: &str, attributes: &[(&str, MessageAttributeValue)]) -> usize {
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
