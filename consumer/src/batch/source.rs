//! The messages of each trigger, as one [`Message`]: its identifier in the response, its order
//! group, the delivery's X-Ray header, and the event JSON it carries.
//!
//! - SQS: the body is the event; behind an SNS subscription without raw delivery it is SNS's
//!   notification (`{"Type": "Notification", "TopicArn", "Message", …}`), whose `Message` is the
//!   event; behind an EventBridge rule it is the EventBridge event (its `detail` the event,
//!   which [`crate::decode`] reads). The group is the FIFO queue's `MessageGroupId`.
//! - Kinesis: the record's data is the event; the group is its partition key (the aggregate).
//! - EventBridge: the invocation's event is the message.

use aws_lambda_events::kinesis::KinesisEventRecord;
use aws_lambda_events::sqs::SqsMessage;
use serde_json::Value;

use super::error::BatchError;

/// The SQS system attribute of a FIFO message's group.
pub const MESSAGE_GROUP_ID: &str = "MessageGroupId";

/// The SQS system attribute that carries a delivery's X-Ray trace header.
pub const AWS_TRACE_HEADER: &str = "AWSTraceHeader";

/// The `Type` of an SNS notification as a subscribed queue receives it without raw delivery.
const SNS_NOTIFICATION: &str = "Notification";

/// What a message carries before it is parsed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Body<'a> {
    Text(Option<&'a str>),
    Bytes(&'a [u8]),
    Json(&'a Value),
}

/// One message of a batch, as every source's is handled.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Message<'a> {
    pub(crate) id: &'a str,
    pub(crate) group: Option<&'a str>,
    pub(crate) xray: Option<&'a str>,
    pub(crate) body: Body<'a>,
}

impl<'a> Message<'a> {
    pub(crate) fn sqs(message: &'a SqsMessage) -> Self {
        Self {
            id: message.message_id.as_deref().unwrap_or_default(),
            group: message.attributes.get(MESSAGE_GROUP_ID).map(String::as_str),
            xray: message.attributes.get(AWS_TRACE_HEADER).map(String::as_str),
            body: Body::Text(message.body.as_deref()),
        }
    }

    pub(crate) fn kinesis(record: &'a KinesisEventRecord) -> Self {
        Self {
            id: &record.kinesis.sequence_number,
            group: Some(&record.kinesis.partition_key),
            xray: None,
            body: Body::Bytes(&record.kinesis.data.0),
        }
    }

    pub(crate) fn eventbridge(event: &'a Value) -> Self {
        Self {
            id: event.get("id").and_then(Value::as_str).unwrap_or_default(),
            group: None,
            xray: None,
            body: Body::Json(event),
        }
    }

    /// The event JSON the message carries, out of an SNS notification if it is one.
    pub(crate) fn event(&self) -> Result<std::borrow::Cow<'a, Value>, BatchError> {
        let body_error = |source| BatchError::Body {
            id: self.id.to_owned(),
            source,
        };
        let parsed: Value = match self.body {
            Body::Json(value) => return Ok(std::borrow::Cow::Borrowed(value)),
            Body::Text(None) => {
                return Err(BatchError::NoBody {
                    id: self.id.to_owned(),
                });
            }
            Body::Text(Some(text)) => serde_json::from_str(text).map_err(body_error)?,
            Body::Bytes(bytes) => serde_json::from_slice(bytes).map_err(body_error)?,
        };
        match sns_message(&parsed) {
            Some(message) => Ok(std::borrow::Cow::Owned(
                serde_json::from_str(message).map_err(body_error)?,
            )),
            None => Ok(std::borrow::Cow::Owned(parsed)),
        }
    }
}

/// The `Message` of an SNS notification (a subscription without raw delivery).
fn sns_message(body: &Value) -> Option<&str> {
    if body.get("Type").and_then(Value::as_str) != Some(SNS_NOTIFICATION)
        || body.get("TopicArn").is_none()
    {
        return None;
    }
    body.get("Message").and_then(Value::as_str)
}

/// Whether an SQS batch comes from a FIFO queue: its source ARN names one (`.fifo`), or its
/// messages carry a group.
pub(crate) fn is_fifo(messages: &[SqsMessage]) -> bool {
    messages.iter().any(|m| {
        m.event_source_arn
            .as_deref()
            .is_some_and(|arn| arn.ends_with(".fifo"))
            || m.attributes.contains_key(MESSAGE_GROUP_ID)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_sns_notification_is_unwrapped_and_a_raw_body_is_not() {
        let event = json!({"metadata": {"eventId": "e1"}, "data": {}});
        let notification = json!({
            "Type": "Notification", "MessageId": "m", "TopicArn": "arn:aws:sns:us-east-1:1:t",
            "Message": event.to_string(), "Timestamp": "2026-11-22T10:00:00.000Z"
        })
        .to_string();
        let raw = event.to_string();
        for body in [notification.as_str(), raw.as_str()] {
            let message = Message {
                id: "m1",
                group: None,
                xray: None,
                body: Body::Text(Some(body)),
            };
            assert_eq!(*message.event().unwrap(), event);
        }
        let not_json = Message {
            id: "m2",
            group: None,
            xray: None,
            body: Body::Text(Some("{")),
        };
        assert!(matches!(not_json.event(), Err(BatchError::Body { id, .. }) if id == "m2"));
    }
}
