//! The SNS topic's adapter: `PublishBatch` of `aws-sdk-sns` to the configured topic ARN, each
//! event one message ([`super::message`]: the envelope as the body, `eventType` and `eventId` as
//! message attributes; on a FIFO topic, `.fifo`, the aggregate as `MessageGroupId` and the event
//! id as `MessageDeduplicationId`), its answer read entry by entry by entry id (`Successful`,
//! `Failed` with `SenderFault`, HTTP 200). What is done with the calls (turns, retries, halves,
//! pace) is [`super::send`]'s, the same for every target.
//!
//! Order: a FIFO topic delivers each message group in the order it accepted its messages; the
//! request builder puts at most one event of an aggregate in a call and sends the next only once
//! the previous is accepted, so a group's order is its aggregate's. A standard topic keeps no
//! order (consumers order by `metadata.sequence`).
//!
//! Duplicates: a FIFO topic drops a repeat of a `MessageDeduplicationId` within 5 minutes (a call
//! sent again after a lost answer); a standard topic delivers it again.
//!
//! Errors: a failed entry whose `SenderFault` is false (the service's fault) is retried; one the
//! sender caused is poison when its code says the message is at fault (`InvalidParameter`, …,
//! [`super::POISON_ENTRY_CODES`]), else a failure that stays pending (`KMSAccessDenied`,
//! `AuthorizationError`). A whole call refused as `Throttled` is retried, slower; as
//! `InvalidParameter` or `BatchRequestTooLong` split in halves; as `NotFound` or
//! `AuthorizationError` every entry fails and stays pending.

use aws_sdk_sns::types::{MessageAttributeValue, PublishBatchRequestEntry};
use futures::FutureExt;
use futures::future::BoxFuture;
use outbox_shared::OutboundEvent;
use outbox_shared::limits::{SNS_PUBLISH_BATCH_MAX_ENTRIES, SQS_SNS_DEFAULT_MAX_BYTES};

use super::TargetSpec;
use super::message;
use super::send::{CallAnswer, TargetAdapter, TargetCall, TimeoutsToThePublisher, answer_of};
use crate::CallTasks;
use crate::config::{PublisherConfig, SettingError, TargetKind};

/// The calls of the SNS publisher: `PublishBatch` is authorized as `sns:Publish` on the topic.
pub const CALLS: &[crate::permissions::Call] = &[crate::permissions::Call::new(
    "sns:Publish",
    crate::permissions::Target::EventTarget,
)];

/// An SNS topic: 10 messages a call, 256 KiB a message and a call by default (a topic's
/// `MaximumMessageSize` may take up to 1 MiB); its ARN.
pub const SPEC: TargetSpec = TargetSpec {
    max_entries_per_call: SNS_PUBLISH_BATCH_MAX_ENTRIES,
    default_max_entry_bytes: SQS_SNS_DEFAULT_MAX_BYTES,
    max_entry_bytes: outbox_shared::limits::SQS_MESSAGE_ABSOLUTE_MAX_BYTES,
    default_max_request_bytes: SQS_SNS_DEFAULT_MAX_BYTES,
    max_request_bytes: outbox_shared::limits::SQS_MESSAGE_ABSOLUTE_MAX_BYTES,
    entry_size: message::size,
    named_by: "an SNS topic's ARN",
    claims: |name| arn_service(name) == Some("sns"),
    check_name,
    check_source: |_| Ok(()),
    messaging_system: "aws.sns",
    calls: CALLS,
    call: |sdk| {
        std::sync::Arc::new(SnsTopic::new(aws_sdk_sns::Client::from_conf(
            aws_sdk_sns::config::Builder::from(sdk)
                .interceptor(crate::metrics::FailedCallCounter)
                .build(),
        )))
    },
};

/// The service of an ARN (`arn:PARTITION:SERVICE:…`), if `name` is one.
pub(crate) fn arn_service(name: &str) -> Option<&str> {
    let mut parts = name.split(':');
    (parts.next() == Some("arn"))
        .then(|| parts.nth(1))
        .flatten()
}

/// Longest SNS topic name, `.fifo` included.
const TOPIC_NAME_MAX_CHARS: usize = 256;

/// Checks that `value` is a topic ARN, `arn:PARTITION:sns:REGION:ACCOUNT:NAME`, the name of
/// letters, digits, `-` and `_` (a FIFO topic's then `.fifo`), at most 256 characters.
fn check_name(value: &str) -> Result<(), String> {
    let valid = match value.split(':').collect::<Vec<_>>()[..] {
        ["arn", partition, "sns", region, account, name] => {
            partition.starts_with("aws")
                && !region.is_empty()
                && account.len() == 12
                && account.chars().all(|c| c.is_ascii_digit())
                && !name.is_empty()
                && name.chars().count() <= TOPIC_NAME_MAX_CHARS
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
        "must be an SNS topic's ARN (arn:aws:sns:REGION:ACCOUNT:NAME, NAME ending .fifo for a FIFO \
         topic)"
            .to_owned(),
    )
}

/// The SNS topic's `PublishBatch` call.
#[derive(Debug, Clone)]
pub struct SnsTopic {
    client: aws_sdk_sns::Client,
}

impl TargetAdapter<SnsTopic> {
    /// The SNS topic's publisher on `client` ([`SnsTopic::new`]).
    ///
    /// # Errors
    /// [`SettingError`] when the configuration is out of range, or is not for a topic.
    pub fn new(client: aws_sdk_sns::Client, config: PublisherConfig) -> Result<Self, SettingError> {
        Self::with_target(SnsTopic::new(client), config)
    }
}

impl SnsTopic {
    /// The call on `client`, which keeps its settings, except that a call that times out is not
    /// retried by the SDK: the publisher retries it, after lowering its calls in flight.
    pub fn new(client: aws_sdk_sns::Client) -> Self {
        let client = aws_sdk_sns::Client::from_conf(
            client
                .config()
                .to_builder()
                .retry_classifier(TimeoutsToThePublisher)
                .build(),
        );
        Self { client }
    }

    /// The batch entry of `event` at `position` in its call.
    fn entry(event: &OutboundEvent, position: usize, fifo: bool) -> PublishBatchRequestEntry {
        let mut entry = PublishBatchRequestEntry::builder()
            .id(message::entry_id(position))
            .message(&event.detail);
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
        entry.build().expect("the id and the message are set")
    }
}

impl TargetCall for SnsTopic {
    fn kind(&self) -> TargetKind {
        TargetKind::Sns
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
            .publish_batch()
            .topic_arn(&config.target)
            .set_publish_batch_request_entries(Some(entries))
            .send();
        async move {
            answer_of("PublishBatch", call_tasks.run(call).await, |output| {
                message::results_by_id(
                    sent,
                    output
                        .successful()
                        .iter()
                        .filter_map(|s| s.id().map(str::to_owned)),
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
