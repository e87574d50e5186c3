//! The stream relay: publishes outbox `INSERT`s from the table's DynamoDB Stream to EventBridge.
//!
//! - [`handler`]: the handler, generic over the publisher, status-store, dead-letter and hold
//!   ports: the batch loop, record decoding, hold mode, the batch report.
//! - [`config`]: typed settings from flags or the environment (the Lambda reads the environment;
//!   the local stream reader, `relay-stream-local`, its flags too).
//! - [`lambda`]: the glue between `lambda_runtime` and the handler (metrics, response).
//! - [`metrics`]: metric names (CloudWatch Embedded Metric Format in the Lambda).
//!
//! The per-event path (publish, dead-letter then mark), the publisher and the other AWS adapters
//! are the `relay-runtime` crate's, shared with the poller. The local stream reader with Lambda's
//! batch semantics, for the demo and the tests, is a crate of its own (`relay-stream-local`).

pub mod config;
pub mod handler;
pub mod lambda;
pub mod metrics;
pub mod permissions;

pub use aws_lambda_events;
pub use config::{LambdaEnv, RelayArgs};
pub use handler::{
    BatchCounts, BatchReport, HandlerOptions, IgnoreReason, RecordOutcome, StreamRelay,
};
pub use relay_runtime::SettingError;

use relay_runtime::probe::{Found, Kind, Probe, Resource};
use relay_runtime::{
    DynamoHoldStore, DynamoRegionAdoption, DynamoStatusStore, SqsDeadLetterSink, TargetPublisher,
};

/// The relay with its AWS adapters, as both binaries run it: on a global table it reads its
/// region's adoption from the lease table (`None` on a single-region table).
pub type AwsStreamRelay = StreamRelay<
    TargetPublisher,
    DynamoStatusStore,
    SqsDeadLetterSink,
    DynamoHoldStore,
    Option<DynamoRegionAdoption>,
>;

/// What the stream relay relies on, probed at start-up (`relay_runtime::probe`): the table it
/// marks items in, the target, the dead-letter queue when one is set, and on a global table the
/// lease table it reads its region's adoption from.
///
/// # Errors
/// [`SettingError`] naming the flag and variable whose value is out of range.
pub fn probes(args: &RelayArgs) -> Result<Vec<Probe>, SettingError> {
    let publisher = args.publisher_config()?;
    let mut probes = vec![
        Probe::Table {
            table: Resource::new(
                Kind::Table,
                &args.table_name,
                SettingError::name_of::<RelayArgs>("table_name"),
            ),
            index: None,
        },
        Probe::target(&publisher),
    ];
    probes.extend(relay_runtime::probe::payload_bucket(&publisher));
    probes.extend(args.dead_letter_queue_url().map(|url| {
        Probe::Queue(Resource::new(
            Kind::DeadLetterQueue,
            url,
            SettingError::name_of::<RelayArgs>("dead_letter_queue_url"),
        ))
    }));
    probes.extend(args.adoption_table().map(|table| {
        Probe::LeaseTable(Resource::new(
            Kind::LeaseTable,
            table,
            SettingError::name_of::<RelayArgs>("lease_table"),
        ))
    }));
    Ok(probes)
}

/// Builds the relay and its clients from `args` once, at start-up.
///
/// # Errors
/// [`SettingError`] naming the flag and variable whose value is out of range.
pub fn build_relay(
    args: &RelayArgs,
    sdk_config: &aws_config::SdkConfig,
) -> Result<AwsStreamRelay, SettingError> {
    build_relay_within(args, sdk_config, &Found::default())
}

/// Like [`build_relay`], within what the start-up probes `found`: the entry budget at most the
/// target's own limit ([`relay_runtime::PublisherConfig::within_target_limit`]).
///
/// # Errors
/// [`SettingError`] naming the flag and variable whose value is out of range.
pub fn build_relay_within(
    args: &RelayArgs,
    sdk_config: &aws_config::SdkConfig,
    found: &Found,
) -> Result<AwsStreamRelay, SettingError> {
    let config = args
        .publisher_config()?
        .within_target_limit(found.target_entry_limit());
    let publisher = TargetPublisher::new(sdk_config, config)?;
    build_relay_with(
        args,
        publisher,
        relay_runtime::clients::dynamodb(sdk_config),
        relay_runtime::clients::sqs(sdk_config),
    )
}

/// Like [`build_relay`] with a caller-built publisher and clients (tests inject faults through
/// them).
///
/// # Errors
/// [`SettingError`] naming the flag and variable whose value is out of range.
pub fn build_relay_with(
    args: &RelayArgs,
    publisher: TargetPublisher,
    dynamodb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
) -> Result<AwsStreamRelay, SettingError> {
    let options = args.handler_options_in(dynamodb.config().region().map(|r| r.as_ref()))?;
    let ttl = args.retention.ttl_policy()?;
    let status = DynamoStatusStore::new(dynamodb.clone(), &args.table_name, ttl);
    // A hold no poller ever released (none ran) lapses with the published retention.
    let holds = DynamoHoldStore::new(dynamodb.clone(), &args.table_name, ttl.published);
    let adoption = args
        .adoption_table()
        .map(|table| DynamoRegionAdoption::new(dynamodb, table));
    // A letter too large for its queue keeps its record in the payload bucket, when there is one.
    let dead_letters = args.dead_letter_queue_url().map(|url| {
        let sink = SqsDeadLetterSink::new(sqs, url);
        match publisher.payload_store() {
            Some(store) => sink.with_record_bucket(store.clone()),
            None => sink,
        }
    });
    let outbound = relay_runtime::relay::Outbound::of(publisher.config());
    Ok(
        StreamRelay::new(publisher, status, holds, dead_letters, options)
            .with_adoption(adoption)
            .with_outbound(outbound),
    )
}
