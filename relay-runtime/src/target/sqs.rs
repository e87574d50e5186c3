//! The SQS queue's adapter: `SendMessageBatch` of `aws-sdk-sqs` to the configured queue URL, each
//! event one message ([`super::message`]: the envelope as the body, `eventType` and `eventId` as
//! message attributes; on a FIFO queue, `.fifo`, the aggregate as `MessageGroupId` and the event
//! id as `MessageDeduplicationId`), its answer read entry by entry by entry id (`Successful`,
//! `Failed` with `SenderFault`, HTTP 200). What is done with the calls (turns, retries, halves,
//! pace) is [`crate::publisher`]'s, the same for every target. Described by `GetQueueAttributes`, as
//! the dead-letter queue is ([`crate::probe::queue`]).
//!
//! Order: a FIFO queue hands out each message group in the order it accepted its messages, and
//! the request builder sends an aggregate's next event only once its previous one is accepted. A
//! standard queue keeps no order (consumers order by `metadata.sequence`).
//!
//! Duplicates: a FIFO queue accepts a repeat of a `MessageDeduplicationId` within 5 minutes as a
//! success and delivers it once; a standard queue delivers it again.
//!
//! Errors, by their codes as the Rust SDK reports them (SQS's query-compatible codes: [`CODES`],
//! [`POISON_CODES`], [`SPLIT_CODES`]): a failed entry whose `SenderFault` is false is retried; one
//! the sender caused is poison when its code says the message is at fault
//! (`InvalidMessageContents`, `InvalidParameterValue`), else a failure that stays pending. A whole
//! call refused as `RequestThrottled` or `KMS.ThrottlingException` is retried, slower; as
//! `AWS.SimpleQueueService.BatchRequestTooLong` split in halves, an entry alone refused so
//! pending; as `AWS.SimpleQueueService.NonExistentQueue`, `AccessDenied` or
//! `KMS.AccessDeniedException` (the queue's key) every entry fails and stays pending.

use aws_sdk_sqs::types::builders::SendMessageBatchRequestEntryBuilder;
use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
use futures::FutureExt;
use futures::future::BoxFuture;
use outbox_shared::OutboundEvent;
use outbox_shared::error::ServiceCodes;
use outbox_shared::limits::{SQS_MESSAGE_ABSOLUTE_MAX_BYTES, SQS_SEND_BATCH_MAX};

use super::call::{CallAnswer, TargetCall, answer_of};
use super::message::{self, MessageEntry};
use super::{TargetDescription, TargetKind, TargetSpec, publish_client};
use crate::CallTasks;
use crate::config::PublisherConfig;
use crate::permissions::{Call, Target};
use crate::probe::{Kind, Probed, Resource, Unusable};

/// The calls of the SQS publisher: `SendMessageBatch` is authorized as `sqs:SendMessage` on the
/// queue.
pub const CALLS: &[Call] = &[Call::new("sqs:SendMessage", Target::EventTarget)];

/// Its describe call, on the queue.
pub const DESCRIBE_CALLS: &[Call] = &[Call::new("sqs:GetQueueAttributes", Target::EventTarget)];

/// SQS's own codes as the publisher reads them, beside the queue codes every relay shares
/// (`outbox_shared::error`: the dead-letter queue is a queue too).
pub const CODES: ServiceCodes = ServiceCodes {
    // The queue's KMS key over its quota.
    throttling: &["KMS.ThrottlingException"],
    not_found: &[],
    // A key policy that does not let the caller encrypt with the queue's KMS key.
    access_denied: &["KMS.AccessDeniedException"],
};

/// Codes of a message SQS refuses for what it holds or its size: poison. `InvalidParameterValue`
/// is a message over the queue's `MaximumMessageSize` ("Message must be shorter than N bytes"),
/// an entry the SDK's model does not name (recorded from the emulator).
pub const POISON_CODES: &[&str] = &["InvalidMessageContents", "InvalidParameterValue"];

/// Codes of a `SendMessageBatch` refused for its total size: split in halves.
pub const SPLIT_CODES: &[&str] = &["AWS.SimpleQueueService.BatchRequestTooLong"];

/// An SQS queue: 10 messages a call, 256 KiB a message and a call by default (a queue's
/// `MaximumMessageSize` may take up to 1 MiB, and a batch 1 MiB); its URL.
pub const SPEC: TargetSpec = TargetSpec {
    max_entries_per_call: SQS_SEND_BATCH_MAX,
    default_max_entry_bytes: message::SQS_SNS_DEFAULT_MAX_BYTES,
    max_entry_bytes: SQS_MESSAGE_ABSOLUTE_MAX_BYTES,
    default_max_request_bytes: message::SQS_SNS_DEFAULT_MAX_BYTES,
    max_request_bytes: SQS_MESSAGE_ABSOLUTE_MAX_BYTES,
    entry_size: message::size,
    named_by: "an SQS queue's URL",
    claims: |name| name.starts_with("https://") || name.starts_with("http://"),
    check_name,
    check_source: |_| Ok(()),
    messaging_system: "aws_sqs",
    calls: CALLS,
    call: |sdk| std::sync::Arc::new(SqsQueue::new(sdk.into())),
    resource: Kind::Queue,
    describe: |sdk, resource| describe(sdk, resource).boxed(),
    describe_calls: DESCRIBE_CALLS,
    order: message::order,
    poison_codes: POISON_CODES,
    split_codes: SPLIT_CODES,
    codes: CODES,
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

impl SqsQueue {
    /// The call on a client of `config` ([`publish_client!`]: tests inject faults through it).
    pub fn new(config: aws_sdk_sqs::config::Builder) -> Self {
        Self {
            client: publish_client!(aws_sdk_sqs, config),
        }
    }
}

impl MessageEntry for SendMessageBatchRequestEntryBuilder {
    fn start(id: String, body: &str) -> Self {
        SendMessageBatchRequestEntry::builder()
            .id(id)
            .message_body(body)
    }

    fn attribute(self, name: &str, value: &str) -> Self {
        self.message_attributes(
            name,
            MessageAttributeValue::builder()
                .data_type(message::STRING)
                .string_value(value)
                .build()
                .expect("the data type is set"),
        )
    }

    fn fifo(self, group: String, deduplication: String) -> Self {
        self.message_group_id(group)
            .message_deduplication_id(deduplication)
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
            .map(|(position, &i)| {
                message::entry::<SendMessageBatchRequestEntryBuilder>(events[i], position, fifo)
                    .build()
                    .expect("the id and the body are set")
            })
            .collect();
        let sent = pending.len();
        let call = self
            .client
            .send_message_batch()
            .queue_url(&config.target)
            .set_entries(Some(entries))
            .send();
        async move {
            answer_of(
                "SendMessageBatch",
                &CODES,
                call_tasks.run(call).await,
                |output| {
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
                },
            )
        }
        .boxed()
    }
}

/// Describes the queue `resource` names by its URL, as the dead-letter queue is.
///
/// # Errors
/// [`Unusable`] when it does not exist, may not be described, or cannot be reached.
async fn describe(
    sdk: &aws_config::SdkConfig,
    resource: &Resource,
) -> Result<Probed<TargetDescription>, Unusable> {
    Ok(match crate::probe::queue(sdk, resource).await? {
        Probed::Found(queue) => Probed::Found(TargetDescription {
            kind: TargetKind::Sqs,
            arn: queue.arn,
            state: None,
            max_entry_bytes: queue
                .maximum_message_size
                .and_then(|size| usize::try_from(size).ok()),
        }),
        Probed::Unknown(failure) => Probed::Unknown(failure),
    })
}

#[cfg(test)]
mod tests;
