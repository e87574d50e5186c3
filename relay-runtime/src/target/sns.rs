//! The SNS topic's adapter: `PublishBatch` of `aws-sdk-sns` to the configured topic ARN, each
//! event one message ([`super::message`]: the envelope as the body, `eventType` and `eventId` as
//! message attributes; on a FIFO topic, `.fifo`, the aggregate as `MessageGroupId` and the event
//! id as `MessageDeduplicationId`), its answer read entry by entry by entry id (`Successful`,
//! `Failed` with `SenderFault`, HTTP 200). What is done with the calls (turns, retries, halves,
//! pace) is [`crate::publisher`]'s, the same for every target. Described by `GetTopicAttributes`.
//!
//! Order: a FIFO topic delivers each message group in the order it accepted its messages; the
//! request builder puts at most one event of an aggregate in a call and sends the next only once
//! the previous is accepted, so a group's order is its aggregate's. A standard topic keeps no
//! order (consumers order by `metadata.sequence`).
//!
//! Duplicates: a FIFO topic drops a repeat of a `MessageDeduplicationId` within 5 minutes (a call
//! sent again after a lost answer); a standard topic delivers it again.
//!
//! Errors, by their codes as the Rust SDK reports them ([`CODES`], [`POISON_CODES`],
//! [`SPLIT_CODES`]): a failed entry whose `SenderFault` is false (the service's fault) is retried;
//! one the sender caused is poison when its code says the message is at fault
//! (`InvalidParameter`, and `ParameterValueInvalid`, the SDK's code of
//! `InvalidParameterValueException`), else a failure that stays pending (`KMSAccessDenied`,
//! `AuthorizationError`). A whole call refused as `Throttled` or `KMSThrottling` is retried,
//! slower; as `InvalidParameter` or `ParameterValueInvalid` split in halves to find the entry at
//! fault (when every entry alone is refused so, the topic is failing: they stay pending,
//! [`crate::publisher`]); as `BatchRequestTooLong` split in halves, an entry alone refused so
//! pending; as `NotFound` or `AuthorizationError` every entry fails and stays pending.

use aws_sdk_sns::types::builders::PublishBatchRequestEntryBuilder;
use aws_sdk_sns::types::{MessageAttributeValue, PublishBatchRequestEntry};
use futures::FutureExt;
use futures::future::BoxFuture;
use outbox_shared::error::ServiceCodes;
use outbox_shared::{OutboundEvent, SdkFailure};

use super::call::{CallAnswer, TargetCall, answer_of};
use super::message::{self, MessageEntry};
use super::{TargetDescription, TargetKind, TargetSpec, publish_client};
use crate::CallTasks;
use crate::config::PublisherConfig;
use crate::permissions::{Call, Target};
use crate::probe::{Kind, Probed, Resource, Service, Unusable};

/// SNS's `PublishBatch` takes at most 10 messages.
pub const SNS_PUBLISH_BATCH_MAX_ENTRIES: usize = 10;

/// The calls of the SNS publisher: `PublishBatch` is authorized as `sns:Publish` on the topic.
pub const CALLS: &[Call] = &[Call::new("sns:Publish", Target::EventTarget)];

/// Its describe call, on the topic.
pub const DESCRIBE_CALLS: &[Call] = &[Call::new("sns:GetTopicAttributes", Target::EventTarget)];

/// The SNS service, as the probes name its endpoint.
pub const SERVICE: Service = Service::new("AWS_ENDPOINT_URL_SNS", "sns");

/// SNS's own codes, as the Rust SDK reports them.
pub const CODES: ServiceCodes = ServiceCodes {
    // A call or a batch entry over the account's publish quota, or its KMS key's.
    throttling: &["Throttled", "KMSThrottling"],
    // A topic that does not exist.
    not_found: &["NotFound"],
    // A policy that does not allow the call, or the topic's KMS key.
    access_denied: &["AuthorizationError", "KMSAccessDenied"],
};

/// Codes of a message SNS refuses for what it holds: poison (`ParameterValueInvalid` is the
/// SDK's code of `InvalidParameterValueException`).
pub const POISON_CODES: &[&str] = &["InvalidParameter", "ParameterValueInvalid"];

/// Codes of a `PublishBatch` refused for its total size: split in halves.
pub const SPLIT_CODES: &[&str] = &["BatchRequestTooLong"];

/// An SNS topic: 10 messages a call, 256 KiB a message and a call by default (a topic's
/// `MaximumMessageSize` may take up to 1 MiB); its ARN.
pub const SPEC: TargetSpec = TargetSpec {
    max_entries_per_call: SNS_PUBLISH_BATCH_MAX_ENTRIES,
    default_max_entry_bytes: message::SQS_SNS_DEFAULT_MAX_BYTES,
    max_entry_bytes: outbox_shared::limits::SQS_MESSAGE_ABSOLUTE_MAX_BYTES,
    default_max_request_bytes: message::SQS_SNS_DEFAULT_MAX_BYTES,
    max_request_bytes: outbox_shared::limits::SQS_MESSAGE_ABSOLUTE_MAX_BYTES,
    entry_size: message::size,
    named_by: "an SNS topic's ARN",
    claims: |name| super::arn_service(name) == Some("sns"),
    check_name,
    check_source: |_| Ok(()),
    messaging_system: "aws.sns",
    calls: CALLS,
    call: |sdk| std::sync::Arc::new(SnsTopic::new(sdk.into())),
    resource: Kind::Topic,
    describe: |sdk, resource| describe(sdk, resource).boxed(),
    describe_calls: DESCRIBE_CALLS,
    order: message::order,
    poison_codes: POISON_CODES,
    split_codes: SPLIT_CODES,
    codes: CODES,
};

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

impl SnsTopic {
    /// The call on a client of `config` ([`publish_client!`]: tests inject faults through it).
    pub fn new(config: aws_sdk_sns::config::Builder) -> Self {
        Self {
            client: publish_client!(aws_sdk_sns, config),
        }
    }
}

impl MessageEntry for PublishBatchRequestEntryBuilder {
    fn start(id: String, body: &str) -> Self {
        PublishBatchRequestEntry::builder().id(id).message(body)
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
            .map(|(position, &i)| {
                message::entry::<PublishBatchRequestEntryBuilder>(events[i], position, fifo)
                    .build()
                    .expect("the id and the message are set")
            })
            .collect();
        let sent = pending.len();
        let call = self
            .client
            .publish_batch()
            .topic_arn(&config.target)
            .set_publish_batch_request_entries(Some(entries))
            .send();
        async move {
            answer_of(
                "PublishBatch",
                &CODES,
                call_tasks.run(call).await,
                |output| {
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
                },
            )
        }
        .boxed()
    }
}

/// Describes the topic `resource` names by its ARN (`GetTopicAttributes`).
///
/// # Errors
/// [`Unusable`] when it does not exist, may not be described, or cannot be reached.
async fn describe(
    sdk: &aws_config::SdkConfig,
    resource: &Resource,
) -> Result<Probed<TargetDescription>, Unusable> {
    let (client, seen) = crate::probe::probe_client!(aws_sdk_sns, sdk);
    let result = client
        .get_topic_attributes()
        .topic_arn(&resource.name)
        .send()
        .await
        .map(|out| TargetDescription {
            kind: TargetKind::Sns,
            arn: out
                .attributes()
                .and_then(|a| a.get("TopicArn"))
                .cloned()
                .unwrap_or_else(|| resource.name.clone()),
            state: None,
            max_entry_bytes: None,
        })
        .map_err(|e| SdkFailure::of_service("GetTopicAttributes", e, &CODES));
    crate::probe::probed(result, resource, sdk, SERVICE, &seen, DESCRIBE_CALLS)
}

#[cfg(test)]
mod tests;
