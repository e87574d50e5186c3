//! What both outbox relays run on, so each concept is written once:
//!
//! - [`event`]: one event of a batch or page, from decode to its tally: its state in one value,
//!   and the [`Tally`] both relays count with.
//! - [`relay`]: the per-event path: the ready events are published; then each is settled once,
//!   marked published, or dead-lettered then marked, concurrently.
//! - [`deadline`]: when the work on a batch or page must stop (no publish after; finish by).
//! - [`publisher`]: the publisher port and its one adapter for every target: size-aware batching,
//!   bounded concurrency, per-entry retries with full jitter, the claim check for large events.
//! - [`target`]: what the relays publish to, one room per kind (the classic bus, the Custom Event
//!   Bus, an SNS topic, an SQS queue, a Kinesis stream): its entries and call, its client, its
//!   describe call, its IAM actions, its order and de-duplication, its error codes; stamps the
//!   target and `Source` on every entry.
//! - [`publish_rate`]: the publisher's pace under the target's quota (additive increase,
//!   multiplicative decrease on throttling, an optional ceiling).
//! - [`publish_concurrency`]: the publisher's calls in flight, lowered when calls time out (a
//!   slow target) and probed back up.
//! - [`status_store`]: the status-store port and its DynamoDB adapter (the conditional mark and
//!   the `ttl` of marked items).
//! - [`holds`]: the aggregate holds: the stream relay's port (hold an aggregate whose event
//!   failed, leave its events under the hold) and the poller's (release the hold once it has
//!   published them), and their DynamoDB adapter.
//! - [`adoption`]: who publishes a region's events on a global table, as the stream relay reads
//!   it once a batch (the port and its adapter on the poller fleet's lease table).
//! - [`recent`]: a short memory of the events a process settled (bounded by count and age), so a
//!   relay skips what AWS hands it again: a lagging index's marked items, a re-delivered batch.
//! - [`dead_letter`]: the dead-letter port and its SQS adapter for poison events.
//! - [`projection`]: reads that name the attributes they read (a role may be allowed no others).
//! - [`stream_record`]: what a stream record is (its operation; a deletion by DynamoDB's TTL).
//! - [`discarded_batch`]: a stream batch the event source mapping discarded, as its S3 on-failure
//!   destination keeps it (AWS's invocation record with the whole batch, and its object key).
//! - [`probe`]: what a process relies on, probed once at start-up (credentials, region, the
//!   resources its settings name); a failure no retry can fix is one line and exit code 2.
//! - [`config`]: the publisher's configuration and the flags and variables every relay reads it
//!   from; setting errors that name the flag and the variable.
//! - [`telemetry`]: the one logging and tracing set-up of every binary (OpenTelemetry spans over
//!   OTLP when the standard variables ask for them).
//! - [`metrics`]: the metric names both relays emit, their EMF set-up, the failed-call counter;
//!   [`clients`] builds the relays' DynamoDB, SQS and S3 clients with it (each target builds
//!   its own).
//! - `testing` (feature `testing`): in-memory fakes of the ports.
//!
//! The contract these work on (item schema, envelope, limits) is `outbox-shared`.

pub mod adoption;
pub mod batch_get;
pub mod claim_check;
pub mod config;
pub mod dead_letter;
pub mod deadline;
pub mod discarded_batch;
pub mod event;
pub mod holds;
pub mod metrics;
pub mod permissions;
pub mod probe;
pub mod projection;
pub mod publish_concurrency;
pub mod publish_rate;
pub mod publisher;
pub mod recent;
pub mod recreate;
pub mod relay;
pub mod status_store;
pub mod stream_record;
pub mod target;
pub mod telemetry;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

/// The global allocator of every relay binary, and of the benchmarks that measure the relays in
/// their own process, so they measure what ships:
///
/// ```text
/// #[global_allocator]
/// static ALLOCATOR: relay_runtime::Allocator = relay_runtime::Allocator;
/// ```
///
/// mimalloc (version 2) rather than glibc's malloc: on a busy poller (many tasks on two threads
/// building and dropping SDK requests) a third of the CPU went to glibc's arena locks and
/// consolidation, and the drain ran at half the rate. Version 3 peaked 9 MiB higher in the Lambda
/// (docs/benchmarks.md, "The allocator, and the model's own CPU").
pub use mimalloc::MiMalloc as Allocator;

/// An S3 client configuration whose calls `rules` answer in order (no network, no SDK retries),
/// for this crate's unit tests.
#[cfg(test)]
pub(crate) fn mocked_s3(rules: &[&aws_smithy_mocks::Rule]) -> aws_sdk_s3::config::Builder {
    aws_smithy_mocks::mock_client!(
        aws_sdk_s3,
        aws_smithy_mocks::RuleMode::Sequential,
        rules,
        |c| c.retry_config(aws_sdk_s3::config::retry::RetryConfig::disabled())
    )
    .config()
    .to_builder()
}

/// A DynamoDB client configuration whose calls `rules` answer in order (no network, no SDK
/// retries), for this crate's unit tests.
#[cfg(test)]
pub(crate) fn mocked_dynamodb(
    rules: &[&aws_smithy_mocks::Rule],
) -> aws_sdk_dynamodb::config::Builder {
    aws_smithy_mocks::mock_client!(
        aws_sdk_dynamodb,
        aws_smithy_mocks::RuleMode::Sequential,
        rules,
        |c| c.retry_config(aws_sdk_dynamodb::config::retry::RetryConfig::disabled())
    )
    .config()
    .to_builder()
}

pub use adoption::{AdoptionError, DynamoRegionAdoption, RegionAdoption, SingleRegion};
pub use config::{
    PublisherArgs, PublisherConfig, RegionArgs, RegionList, RetentionArgs, SettingError, TargetKind,
};
pub use dead_letter::{
    DeadLetter, DeadLetterError, DeadLetterSink, RecordLeftOut, RecordRef, SqsDeadLetterSink,
};
pub use deadline::Deadline;
pub use event::{Behind, Event, IgnoreReason, State, Tally};
pub use holds::{
    AggregateHolds, DynamoHoldStore, Hold, HoldCursor, HoldPage, HoldRelease, LeftEvent,
};
pub use publisher::{PublishOutcome, PublishStats, Publisher, TargetPublisher};
pub use recent::RecentKeys;
pub use relay::{EventRelay, Outbound};
pub use status_store::{DynamoStatusStore, MarkOutcome, StatusError, StatusStore, TtlPolicy};
pub use target::{ClassicBus, CustomBus, KinesisStream, SnsTopic, SqsQueue, TargetCall};

use std::time::Duration;

/// Longest a connection may take to open.
pub const SDK_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Default of `SDK_ATTEMPT_TIMEOUT`: longest one attempt of a call may take (a `PutEvents` of 10
/// entries of 256 KiB included).
pub const SDK_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(4);
/// Default of `SDK_OPERATION_TIMEOUT`: longest a call may take, its retries included; what bounds
/// a call already in flight when the stream relay's deadline margin begins.
pub const SDK_OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// The SDK timeouts of every relay client, from `SDK_ATTEMPT_TIMEOUT` and `SDK_OPERATION_TIMEOUT`
/// (humantime durations) or the defaults: without them a slow endpoint holds a call (and a
/// Lambda invocation) for as long as it likes.
///
/// # Errors
/// [`SettingError`] naming the variable whose value is not a duration, or an attempt timeout
/// longer than the operation timeout.
pub fn sdk_timeouts() -> Result<aws_config::timeout::TimeoutConfig, SettingError> {
    const ATTEMPT: &str = "SDK_ATTEMPT_TIMEOUT";
    const OPERATION: &str = "SDK_OPERATION_TIMEOUT";
    let read = |env: &str, default: Duration| match std::env::var(env) {
        Ok(text) => humantime::parse_duration(&text)
            .map_err(|e| SettingError::env_only(env, format!("{text:?}: {e}"))),
        Err(_) => Ok(default),
    };
    let attempt = read(ATTEMPT, SDK_ATTEMPT_TIMEOUT)?;
    let operation = read(OPERATION, SDK_OPERATION_TIMEOUT)?;
    if attempt > operation || attempt.is_zero() {
        return Err(SettingError::env_only(
            ATTEMPT,
            format!(
                "must be longer than zero and at most {OPERATION} ({})",
                humantime::format_duration(operation)
            ),
        ));
    }
    Ok(aws_config::timeout::TimeoutConfig::builder()
        .connect_timeout(SDK_CONNECT_TIMEOUT)
        .operation_attempt_timeout(attempt)
        .operation_timeout(operation)
        .build())
}

/// Where an adapter runs its SDK calls while the caller waits.
///
/// A relay sends waves of calls at once (a page's marks, a page's `PutEvents`). Awaited in the
/// task that drives the wave, every call's serialization, signing and parsing runs on that task's
/// core in turn; on their own tasks they spread over every core. Measured on the latency model
/// (docs/benchmarks.md): the poller, whose shards run in one task, drains about 19 % more events
/// per second with its calls on their own tasks. The stream relay keeps them in its task: the
/// Lambda runs a one-thread runtime, where other tasks would not spread, and on two threads its
/// 100-event batch took 4 ms longer (each call's hand-over is on its critical path).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CallTasks {
    /// Each call is awaited in the caller's task.
    #[default]
    Inline,
    /// Each call runs on its own spawned task. A call whose caller stops waiting (a deadline)
    /// still completes, as a sent request does.
    Spawned,
}

impl CallTasks {
    /// Runs `call` as configured and returns its output.
    pub(crate) async fn run<F>(self, call: F) -> F::Output
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        if self == Self::Inline {
            return call.await;
        }
        match tokio::spawn(call).await {
            Ok(output) => output,
            Err(err) if err.is_panic() => std::panic::resume_unwind(err.into_panic()),
            Err(_) => panic!("an SDK call's task was cancelled: the runtime is shutting down"),
        }
    }
}

/// The relays' DynamoDB, SQS and S3 clients, built from one configuration, each counting its
/// failed calls ([`metrics::FailedCallCounter`]). A target builds its own client
/// ([`target::TargetSpec::call`]).
pub mod clients {
    use crate::metrics::FailedCallCounter;

    pub fn dynamodb(sdk: &aws_config::SdkConfig) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(sdk)
                .interceptor(FailedCallCounter)
                .build(),
        )
    }

    pub fn sqs(sdk: &aws_config::SdkConfig) -> aws_sdk_sqs::Client {
        aws_sdk_sqs::Client::from_conf(
            aws_sdk_sqs::config::Builder::from(sdk)
                .interceptor(FailedCallCounter)
                .build(),
        )
    }

    /// Every call carries the buckets' owner ([`crate::expected_bucket_owner`]) when one is
    /// set, so S3 refuses a bucket of another account.
    pub fn s3(sdk: &aws_config::SdkConfig) -> aws_sdk_s3::Client {
        let mut config = aws_sdk_s3::config::Builder::from(sdk).interceptor(FailedCallCounter);
        if let Ok(Some(owner)) = crate::expected_bucket_owner() {
            config = config.interceptor(owner);
        }
        aws_sdk_s3::Client::from_conf(config.build())
    }
}

/// The account that owns the stack's buckets (`EXPECTED_BUCKET_OWNER`, the template's
/// `AWS::AccountId`): every S3 call of the relays, `redrive` and the example consumer carries it
/// (S3's `ExpectedBucketOwner`), so a bucket deleted and re-created under the same name by another
/// account is refused, not written to. Unset or empty: no owner (a local emulator's buckets).
///
/// # Errors
/// [`SettingError`] naming the variable when it is not an account id.
pub fn expected_bucket_owner()
-> Result<Option<outbox_shared::bucket_owner::ExpectedBucketOwner>, SettingError> {
    use outbox_shared::bucket_owner::{ExpectedBucketOwner, VARIABLE};
    ExpectedBucketOwner::from_env().map_err(|reason| SettingError::env_only(VARIABLE, reason))
}

/// Loads the AWS SDK configuration from the standard sources (environment, profile, IMDS), with
/// [`sdk_timeouts`] on every client built from it.
///
/// The local emulator is reached through the standard `AWS_ENDPOINT_URL` setting, so there is no
/// code branch for it.
///
/// # Errors
/// [`SettingError`] when a timeout variable is invalid.
pub async fn load_aws_config() -> Result<aws_config::SdkConfig, SettingError> {
    // Checked here, at start, so a bad value stops the process with one line; the S3 clients
    // (clients::s3) read it again.
    expected_bucket_owner()?;
    Ok(aws_config::defaults(aws_config::BehaviorVersion::latest())
        .timeout_config(sdk_timeouts()?)
        .load()
        .await)
}
