//! The Kinesis data stream's adapter: `PutRecords` of `aws-sdk-kinesis` to the configured stream
//! ARN, each event one record whose data is the envelope (the buses' `Detail`) and whose
//! `PartitionKey` is its aggregate (its event group, [`outbox_shared::event_group`]), so one
//! aggregate's records land on one shard, in the order the stream accepted them. The answer is
//! read record by record by position (`ErrorCode` per record, HTTP 200). What is done with the
//! calls (turns, retries, halves, pace) is [`crate::publisher`]'s, the same for every target.
//! Described by `DescribeStreamSummary` (its ARN and status).
//!
//! Order under partial failures: AWS warns that sending again only the failed records of a
//! `PutRecords` can put them behind later records of the same partition key. That cannot happen
//! here: the request builder puts at most one event of an aggregate in a call and sends a call
//! holding an aggregate's next event only after the call holding its previous one has finished,
//! retries included, and nothing of an aggregate after an event of it that failed
//! ([`crate::publisher::request`]). A record sent again is alone of its aggregate in flight.
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
use outbox_shared::error::ServiceCodes;
use outbox_shared::{OutboundEvent, SdkFailure};

use super::call::{CallAnswer, EntryResult, TargetCall, answer_of};
use super::{TargetDescription, TargetKind, TargetSpec, publish_client};
use crate::CallTasks;
use crate::config::PublisherConfig;
use crate::permissions::{Call, Target};
use crate::probe::{Kind, Probed, Resource, Service, Unusable};

/// Kinesis's `PutRecords` takes at most 500 records.
pub const KINESIS_PUT_RECORDS_MAX_ENTRIES: usize = 500;
/// A Kinesis record's data and partition key together are at most 1 MiB (a stream's default).
pub const KINESIS_RECORD_MAX_BYTES: usize = 1024 * 1024;
/// A `PutRecords` call's records, data and partition keys, are at most 5 MiB.
pub const KINESIS_PUT_RECORDS_MAX_BYTES: usize = 5 * 1024 * 1024;
/// A Kinesis partition key is 1 to 256 Unicode characters.
pub const KINESIS_PARTITION_KEY_MAX_CHARS: usize = 256;

/// The calls of the Kinesis publisher: `kinesis:PutRecords` on the stream.
pub const CALLS: &[Call] = &[Call::new("kinesis:PutRecords", Target::EventTarget)];

/// Its describe call, on the stream.
pub const DESCRIBE_CALLS: &[Call] = &[Call::new(
    "kinesis:DescribeStreamSummary",
    Target::EventTarget,
)];

/// The Kinesis service, as the probes name its endpoint.
pub const SERVICE: Service = Service::new("AWS_ENDPOINT_URL_KINESIS", "kinesis");

/// Kinesis's own codes, as the Rust SDK reports them (its `ProvisionedThroughputExceededException`
/// and `LimitExceededException` are DynamoDB's too, so every relay's).
pub const CODES: ServiceCodes = ServiceCodes {
    // The stream's KMS key's quota.
    throttling: &["KMSThrottlingException"],
    not_found: &[],
    // The stream's KMS key does not allow the call.
    access_denied: &["KMSAccessDeniedException"],
};

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
    claims: |name| super::arn_service(name) == Some("kinesis"),
    check_name,
    check_source: |_| Ok(()),
    messaging_system: "aws_kinesis",
    calls: CALLS,
    call: |sdk| std::sync::Arc::new(KinesisStream::new(sdk.into())),
    resource: Kind::DataStream,
    describe: |sdk, resource| describe(sdk, resource).boxed(),
    describe_calls: DESCRIBE_CALLS,
    order: |_| ", each aggregate in order on its shard, no de-duplication",
    // A record (or a call) the service refuses for what it holds or its size.
    poison_codes: &["InvalidArgumentException"],
    split_codes: &[],
    codes: CODES,
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

impl KinesisStream {
    /// The call on a client of `config` ([`publish_client!`]: tests inject faults through it).
    pub fn new(config: aws_sdk_kinesis::config::Builder) -> Self {
        Self {
            client: publish_client!(aws_sdk_kinesis, config),
        }
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
            answer_of("PutRecords", &CODES, call_tasks.run(call).await, |output| {
                output.records().iter().map(record_result).collect()
            })
        }
        .boxed()
    }
}

/// One record's result: an `ErrorCode` is a refusal, a sequence number an acceptance.
fn record_result(result: &PutRecordsResultEntry) -> EntryResult {
    EntryResult::answered(result.error_code(), result.error_message(), false)
}

/// Describes the stream `resource` names by its ARN (`DescribeStreamSummary`).
///
/// # Errors
/// [`Unusable`] when it does not exist, may not be described, or cannot be reached.
async fn describe(
    sdk: &aws_config::SdkConfig,
    resource: &Resource,
) -> Result<Probed<TargetDescription>, Unusable> {
    let (client, seen) = crate::probe::probe_client!(aws_sdk_kinesis, sdk);
    let result = client
        .describe_stream_summary()
        .stream_arn(&resource.name)
        .send()
        .await
        .map(|out| {
            let summary = out.stream_description_summary();
            TargetDescription {
                kind: TargetKind::Kinesis,
                arn: summary
                    .map(|s| s.stream_arn().to_owned())
                    .unwrap_or_default(),
                state: summary.map(|s| s.stream_status().as_str().to_owned()),
                max_entry_bytes: summary
                    .and_then(|s| s.max_record_size_in_kib())
                    .and_then(|kib| usize::try_from(kib).ok())
                    .map(|kib| kib * 1024),
            }
        })
        .map_err(|e| SdkFailure::of_service("DescribeStreamSummary", e, &CODES));
    crate::probe::probed(result, resource, sdk, SERVICE, &seen, DESCRIBE_CALLS)
}

#[cfg(test)]
mod tests;
