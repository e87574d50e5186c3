//! The dead-letter port and its SQS adapter: where poison events go, with the full record and the
//! reason, so they never block a stream shard or a poller pass and are never silently lost.

use std::future::Future;

use aws_sdk_sqs::types::MessageAttributeValue;
use outbox_shared::ItemKey;
use outbox_shared::SdkFailure;
use serde::{Deserialize, Serialize};

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
    /// The full record as received (a stream record, or an item read from the index).
    pub record: serde_json::Value,
    /// When the relay gave up, ISO-8601 UTC.
    pub dead_lettered_at: String,
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

/// The SQS adapter: one message per poison record, JSON body, with `reason`, `origin` and
/// `eventId` as message attributes so an operator can filter without parsing bodies.
#[derive(Debug, Clone)]
pub struct SqsDeadLetterSink {
    client: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsDeadLetterSink {
    pub fn new(client: aws_sdk_sqs::Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
        }
    }

    pub fn queue_url(&self) -> &str {
        &self.queue_url
    }
}

/// SQS message attribute values are at most 256 KiB with the body; keep the reason attribute short.
const MAX_REASON_ATTRIBUTE_BYTES: usize = 256;

fn string_attribute(value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type("String")
        .string_value(value)
        .build()
        .expect("data type is set")
}

impl DeadLetterSink for SqsDeadLetterSink {
    async fn send(&self, letter: &DeadLetter) -> Result<(), DeadLetterError> {
        let body = serde_json::to_string(letter).map_err(|e| DeadLetterError::Encode {
            event_id: letter.event_id.clone(),
            message: e.to_string(),
        })?;
        let reason = crate::status_store::truncate(&letter.reason, MAX_REASON_ATTRIBUTE_BYTES);
        let mut request = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .message_attributes(
                "reason",
                string_attribute(if reason.is_empty() { "-" } else { reason }),
            )
            .message_attributes("origin", string_attribute(&letter.origin));
        if let Some(id) = letter.event_id.as_deref().filter(|id| !id.is_empty()) {
            request = request.message_attributes("eventId", string_attribute(id));
        }
        request.send().await.map_err(|e| DeadLetterError::Send {
            event_id: letter.event_id.clone(),
            failure: SdkFailure::new("SendMessage", e),
        })?;
        Ok(())
    }
}
