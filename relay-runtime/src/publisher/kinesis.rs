//! The Kinesis data stream's adapter: `PutRecords` of `aws-sdk-kinesis` to the configured stream
//! ARN, each event one record whose data is the envelope (the buses' `Detail`) and whose
//! `PartitionKey` is its aggregate (its event group, [`outbox_shared::event_group`]), so one
//! aggregate's records land on one shard, in the order the stream accepted them. The answer is
//! read record by record by position (`ErrorCode` per record, HTTP 200). What is done with the
//! calls (turns, retries, halves, pace) is [`super::send`]'s, the same for every target.
//!
//! Order under partial failures: AWS warns that sending again only the failed records of a
//! `PutRecords` can put them behind later records of the same partition key. That cannot happen
//! here: the request builder puts at most one event of an aggregate in a call and sends a call
//! holding an aggregate's next event only after the call holding its previous one has finished,
//! retries included, and nothing of an aggregate after an event of it that failed
//! ([`super::request`]). A record sent again is alone of its aggregate in flight.
//!
//! Duplicates: Kinesis has no de-duplication. A call whose answer was lost after it took effect is
//! sent again and its records are on the stream twice, each with its `metadata.eventId`, which
//! consumers de-duplicate on.
//!
//! Errors: a record refused with `ProvisionedThroughputExceededException` (the shard's write
//! limit, counted as a throttle: the publish rate drops) or `InternalFailure` is retried. A whole
//! call refused as `ProvisionedThroughputExceededException`, `KMSThrottlingException` or
//! `LimitExceededException` is retried; as `InvalidArgumentException` split in halves; as
//! `ResourceNotFoundException`, `AccessDeniedException` or a KMS error every record fails and
//! stays pending.

use aws_sdk_kinesis::primitives::Blob;
use aws_sdk_kinesis::types::{PutRecordsRequestEntry, PutRecordsResultEntry};
use futures::FutureExt;
use futures::future::BoxFuture;
use outbox_shared::OutboundEvent;
use outbox_shared::limits::{
    KINESIS_PUT_RECORDS_MAX_BYTES, KINESIS_PUT_RECORDS_MAX_ENTRIES, KINESIS_RECORD_MAX_BYTES,
};

use super::TargetSpec;
use super::send::{
    CallAnswer, EntryResult, TargetAdapter, TargetCall, TimeoutsToThePublisher, answer_of,
};
use crate::CallTasks;
use crate::config::{PublisherConfig, SettingError, TargetKind};

/// The calls of the Kinesis publisher: `kinesis:PutRecords` on the stream.
pub const CALLS: &[crate::permissions::Call] = &[crate::permissions::Call::new(
    "kinesis:PutRecords",
    crate::permissions::Target::EventTarget,
)];

/// A Kinesis data stream: 500 records and 5 MiB a call, 1 MiB a record (its data and partition
/// key); its ARN.
pub const SPEC: TargetSpec = TargetSpec {
    max_entries_per_call: KINESIS_PUT_RECORDS_MAX_ENTRIES,
    default_max_entry_bytes: KINESIS_RECORD_MAX_BYTES,
    max_entry_bytes: KINESIS_RECORD_MAX_BYTES,
    default_max_request_bytes: KINESIS_PUT_RECORDS_MAX_BYTES,
    max_request_bytes: KINESIS_PUT_RECORDS_MAX_BYTES,
    entry_size: record_size,
    named_by: "a Kinesis stream's ARN",
    claims: |name| super::sns::arn_service(name) == Some("kinesis"),
    check_name,
    check_source: |_| Ok(()),
    messaging_system: "aws_kinesis",
    calls: CALLS,
    call: |sdk| {
        std::sync::Arc::new(KinesisStream::new(aws_sdk_kinesis::Client::from_conf(
            aws_sdk_kinesis::config::Builder::from(sdk)
                .interceptor(crate::metrics::FailedCallCounter)
                .build(),
        )))
    },
};

/// Longest Kinesis stream name.
const STREAM_NAME_MAX_CHARS: usize = 128;

/// A record's size as Kinesis counts it against its limits: its data and its partition key.
fn record_size(event: &OutboundEvent, _source: &str) -> usize {
    event.detail.len() + partition_key(event).len()
}

/// The record's partition key: its aggregate (at most 128 characters, inside Kinesis's 256).
fn partition_key(event: &OutboundEvent) -> &str {
    &event.event_group
}

/// Checks that `value` is a stream ARN, `arn:PARTITION:kinesis:REGION:ACCOUNT:stream/NAME`, the
/// name of letters, digits, `_`, `.` and `-`, at most 128 characters.
fn check_name(value: &str) -> Result<(), String> {
    let valid = match value.split(':').collect::<Vec<_>>()[..] {
        ["arn", partition, "kinesis", region, account, resource] => {
            partition.starts_with("aws")
                && !region.is_empty()
                && account.len() == 12
                && account.chars().all(|c| c.is_ascii_digit())
                && resource.strip_prefix("stream/").is_some_and(|name| {
                    !name.is_empty()
                        && name.chars().count() <= STREAM_NAME_MAX_CHARS
                        && name
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
                })
        }
        _ => false,
    };
    if valid {
        return Ok(());
    }
    Err("must be a Kinesis stream's ARN (arn:aws:kinesis:REGION:ACCOUNT:stream/NAME)".to_owned())
}

/// The Kinesis stream's `PutRecords` call.
#[derive(Debug, Clone)]
pub struct KinesisStream {
    client: aws_sdk_kinesis::Client,
}

impl TargetAdapter<KinesisStream> {
    /// The Kinesis stream's publisher on `client` ([`KinesisStream::new`]).
    ///
    /// # Errors
    /// [`SettingError`] when the configuration is out of range, or is not for a stream.
    pub fn new(
        client: aws_sdk_kinesis::Client,
        config: PublisherConfig,
    ) -> Result<Self, SettingError> {
        Self::with_target(KinesisStream::new(client), config)
    }
}

impl KinesisStream {
    /// The call on `client`, which keeps its settings, except that a call that times out is not
    /// retried by the SDK: the publisher retries it, after lowering its calls in flight.
    pub fn new(client: aws_sdk_kinesis::Client) -> Self {
        let client = aws_sdk_kinesis::Client::from_conf(
            client
                .config()
                .to_builder()
                .retry_classifier(TimeoutsToThePublisher)
                .build(),
        );
        Self { client }
    }

    /// The record of `event`.
    fn record(event: &OutboundEvent) -> PutRecordsRequestEntry {
        PutRecordsRequestEntry::builder()
            .data(Blob::new(event.detail.as_bytes()))
            .partition_key(partition_key(event))
            .build()
            .expect("the data is set")
    }
}

impl TargetCall for KinesisStream {
    fn kind(&self) -> TargetKind {
        TargetKind::Kinesis
    }

    fn put<'a>(
        &'a self,
        config: &'a PublisherConfig,
        events: &[&OutboundEvent],
        pending: &[usize],
        call_tasks: CallTasks,
    ) -> BoxFuture<'a, CallAnswer> {
        let records = pending.iter().map(|&i| Self::record(events[i])).collect();
        let call = self
            .client
            .put_records()
            .stream_arn(&config.target)
            .set_records(Some(records))
            .send();
        async move {
            answer_of("PutRecords", call_tasks.run(call).await, |output| {
                output.records().iter().map(record_result).collect()
            })
        }
        .boxed()
    }
}

/// One record's result: an `ErrorCode` is a refusal, a sequence number an acceptance.
fn record_result(result: &PutRecordsResultEntry) -> EntryResult {
    match result.error_code() {
        None => EntryResult::Published,
        Some(code) => EntryResult::Refused {
            code: code.to_owned(),
            message: result.error_message().unwrap_or_default().to_owned(),
        },
    }
}

#[cfg(test)]
mod tests;
