//! The SQS queue's adapter: `SendMessageBatch` of `aws-sdk-sqs` to the configured queue URL, each
//! event one message ([`super::message`]: the envelope as the body, `eventType` and `eventId` as
//! message attributes; on a FIFO queue, `.fifo`, the aggregate as `MessageGroupId` and the event
//! id as `MessageDeduplicationId`), its answer read entry by entry by entry id (`Successful`,
//! `Failed` with `SenderFault`, HTTP 200). What is done with the calls (turns, retries, halves,
//! pace) is [`super::send`]'s, the same for every target.
//!
//! Order: a FIFO queue hands out each message group in the order it accepted its messages, and
//! the request builder sends an aggregate's next event only once its previous one is accepted. A
//! standard queue keeps no order (consumers order by `metadata.sequence`).
//!
//! Duplicates: a FIFO queue accepts a repeat of a `MessageDeduplicationId` within 5 minutes as a
//! success and delivers it once; a standard queue delivers it again.
//!
//! Errors: a failed entry whose `SenderFault` is false is retried; one the sender caused is poison
//! when its code says the message is at fault (`InvalidMessageContents`,
//! `InvalidParameterValue`, [`super::POISON_ENTRY_CODES`]), else a failure that stays pending
//! (`KMS.AccessDeniedException`). A whole call refused as `RequestThrottled` is retried, slower;
//! as `BatchRequestTooLong` split in halves; as `QueueDoesNotExist` or `AccessDenied` every entry
//! fails and stays pending.

use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use futures::FutureExt;
use futures::future::BoxFuture;
use outbox_shared::OutboundEvent;
use outbox_shared::limits::{
    SQS_MESSAGE_ABSOLUTE_MAX_BYTES, SQS_SEND_BATCH_MAX, SQS_SNS_DEFAULT_MAX_BYTES,
};

use super::TargetSpec;
use super::message;
use super::send::{CallAnswer, TargetAdapter, TargetCall, TimeoutsToThePublisher, answer_of};
use crate::CallTasks;
use crate::config::{PublisherConfig, SettingError, TargetKind};

/// The calls of the SQS publisher: `SendMessageBatch` is authorized as `sqs:SendMessage` on the
/// queue.
pub const CALLS: &[crate::permissions::Call] = &[crate::permissions::Call::new(
    "sqs:SendMessage",
    crate::permissions::Target::EventTarget,
)];

/// An SQS queue: 10 messages a call, 256 KiB a message and a call by default (a queue's
/// `MaximumMessageSize` may take up to 1 MiB, and a batch 1 MiB); its URL.
pub const SPEC: TargetSpec = TargetSpec {
    max_entries_per_call: SQS_SEND_BATCH_MAX,
    default_max_entry_bytes: SQS_SNS_DEFAULT_MAX_BYTES,
    max_entry_bytes: SQS_MESSAGE_ABSOLUTE_MAX_BYTES,
    default_max_request_bytes: SQS_SNS_DEFAULT_MAX_BYTES,
    max_request_bytes: SQS_MESSAGE_ABSOLUTE_MAX_BYTES,
    entry_size: message::size,
    named_by: "an SQS queue's URL",
    claims: |name| name.starts_with("https://") || name.starts_with("http://"),
    check_name,
    check_source: |_| Ok(()),
    messaging_system: "aws_sqs",
    calls: CALLS,
    call: |sdk| {
        std::sync::Arc::new(SqsQueue::new(aws_sdk_sqs::Client::from_conf(
            aws_sdk_sqs::config::Builder::from(sdk)
                .interceptor(crate::metrics::FailedCallCounter)
                .build(),
        )))
    },
};

/// Longest SQS queue name, `.fifo` included.
const QUEUE_NAME_MAX_CHARS: usize = 80;

/// Checks that `value` is a queue URL, `https://HOST/ACCOUNT/NAME` (any host: the endpoint the
/// queue was created on, a VPC endpoint's, a local emulator's), the account 12 digits, the name of
/// letters, digits, `-` and `_` (a FIFO queue's then `.fifo`), at most 80 characters. An ARN is
/// not a URL: `SendMessageBatch` takes the URL.
fn check_name(value: &str) -> Result<(), String> {
    let path = value
        .strip_prefix("https://")
        .or_else(|| value.strip_prefix("http://"));
    let valid = match path.map(|p| p.split('/').collect::<Vec<_>>()).as_deref() {
        Some([host, account, name]) => {
            !host.is_empty()
                && account.len() == 12
                && account.chars().all(|c| c.is_ascii_digit())
                && !name.is_empty()
                && name.chars().count() <= QUEUE_NAME_MAX_CHARS
                && name
                    .strip_suffix(message::FIFO_SUFFIX)
                    .unwrap_or(name)
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_".contains(c))
        }
        _ => false,
    };
    if valid {
        return Ok(());
    }
    Err(
        "must be an SQS queue's URL (https://sqs.REGION.amazonaws.com/ACCOUNT/NAME, NAME ending \
         .fifo for a FIFO queue)"
            .to_owned(),
    )
}

/// The SQS queue's `SendMessageBatch` call.
#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: aws_sdk_sqs::Client,
}

impl TargetAdapter<SqsQueue> {
    /// The SQS queue's publisher on `client` ([`SqsQueue::new`]).
    ///
    /// # Errors
    /// [`SettingError`] when the configuration is out of range, or is not for a queue.
    pub fn new(client: aws_sdk_sqs::Client, config: PublisherConfig) -> Result<Self, SettingError> {
        Self::with_target(SqsQueue::new(client), config)
    }
}

impl SqsQueue {
    /// The call on `client`, which keeps its settings, except that a call that times out is not
    /// retried by the SDK: the publisher retries it, after lowering its calls in flight.
    pub fn new(client: aws_sdk_sqs::Client) -> Self {
        let client = aws_sdk_sqs::Client::from_conf(
            client
                .config()
                .to_builder()
                .retry_classifier(TimeoutsToThePublisher)
                .build(),
        );
        Self { client }
    }

    /// The batch entry of `event` at `position` in its call.
    fn entry(event: &OutboundEvent, position: usize, fifo: bool) -> SendMessageBatchRequestEntry {
        let mut entry = SendMessageBatchRequestEntry::builder()
            .id(message::entry_id(position))
            .message_body(&event.detail);
        for (name, value) in message::attributes(event) {
            entry = entry.message_attributes(
                name,
                MessageAttributeValue::builder()
                    .data_type(message::STRING)
                    .string_value(value)
                    .build()
                    .expect("the data type is set"),
            );
        }
        if fifo {
            let (group, deduplication) = message::fifo_ids(event);
            entry = entry
                .message_group_id(group)
                .message_deduplication_id(deduplication);
        }
        entry.build().expect("the id and the body are set")
    }
}

impl TargetCall for SqsQueue {
    fn kind(&self) -> TargetKind {
        TargetKind::Sqs
    }

    fn put<'a>(
        &'a self,
        config: &'a PublisherConfig,
        events: &[&OutboundEvent],
        pending: &[usize],
        call_tasks: CallTasks,
    ) -> BoxFuture<'a, CallAnswer> {
        let fifo = message::is_fifo(&config.target);
        let entries = pending
            .iter()
            .enumerate()
            .map(|(position, &i)| Self::entry(events[i], position, fifo))
            .collect();
        let sent = pending.len();
        let call = self
            .client
            .send_message_batch()
            .queue_url(&config.target)
            .set_entries(Some(entries))
            .send();
        async move {
            answer_of("SendMessageBatch", call_tasks.run(call).await, |output| {
                message::results_by_id(
                    sent,
                    output.successful().iter().map(|s| s.id().to_owned()),
                    output.failed().iter().map(|f| {
                        (
                            f.id().to_owned(),
                            message::failed_entry(
                                f.code(),
                                f.message().unwrap_or_default(),
                                f.sender_fault(),
                            ),
                        )
                    }),
                )
            })
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests;
