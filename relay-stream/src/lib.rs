//! The stream relay: publishes outbox `INSERT`s from the table's DynamoDB Stream to EventBridge.
//!
//! - [`handler`]: the handler, generic over the publisher, status-store, dead-letter and hold
//!   ports: the batch loop, record decoding, hold mode, the batch report.
//! - [`config`]: typed settings from flags or the environment, shared by both binaries.
//! - [`lambda`]: the glue between `lambda_runtime` and the handler (metrics, response).
//! - [`local`]: `relay-stream-local`, a DynamoDB Streams reader that drives the same handler.
//! - [`records`]: conversion of `aws-sdk-dynamodbstreams` records to the Lambda event shape.
//! - [`metrics`]: metric names (CloudWatch Embedded Metric Format in the Lambda).
//!
//! The per-event path (decode, publish, dead-letter then mark), the publisher and the other AWS
//! adapters are the `relay-runtime` crate's, shared with the poller.

pub mod config;
pub mod handler;
pub mod lambda;
pub mod local;
pub mod metrics;
pub mod records;

pub use aws_lambda_events;
pub use config::RelayArgs;
pub use handler::{
    BatchCounts, BatchReport, HandlerOptions, IgnoreReason, RecordOutcome, StreamRelay,
};
pub use local::{LocalArgs, LocalRunner, RunnerOptions, StartingPosition};
pub use relay_runtime::SettingError;

use relay_runtime::{
    BusClients, BusPublisher, DynamoHoldStore, DynamoStatusStore, SqsDeadLetterSink,
};

/// The relay with its AWS adapters, as both binaries run it.
pub type AwsStreamRelay =
    StreamRelay<BusPublisher, DynamoStatusStore, SqsDeadLetterSink, DynamoHoldStore>;

/// Builds the relay and its clients from `args` once, at start-up.
///
/// # Errors
/// [`SettingError`] naming the flag and variable whose value is out of range.
pub fn build_relay(
    args: &RelayArgs,
    sdk_config: &aws_config::SdkConfig,
) -> Result<AwsStreamRelay, SettingError> {
    build_relay_with(
        args,
        BusClients::new(sdk_config),
        relay_runtime::clients::dynamodb(sdk_config),
        relay_runtime::clients::sqs(sdk_config),
    )
}

/// Like [`build_relay`] with caller-built clients (tests inject faults through them).
///
/// # Errors
/// [`SettingError`] naming the flag and variable whose value is out of range.
pub fn build_relay_with(
    args: &RelayArgs,
    bus: BusClients,
    dynamodb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
) -> Result<AwsStreamRelay, SettingError> {
    let options = args.handler_options()?;
    let publisher = BusPublisher::new(bus, args.publisher_config()?)
        .expect("publisher_config validated the configuration");
    let ttl = args.retention.ttl_policy()?;
    let status = DynamoStatusStore::new(dynamodb.clone(), &args.table_name, ttl);
    // A hold no poller ever released (none ran) lapses with the published retention.
    let holds = DynamoHoldStore::new(dynamodb, &args.table_name, ttl.published);
    let dead_letters = args
        .dead_letter_queue_url()
        .map(|url| SqsDeadLetterSink::new(sqs, url));
    Ok(StreamRelay::new(
        publisher,
        status,
        holds,
        dead_letters,
        options,
    ))
}
