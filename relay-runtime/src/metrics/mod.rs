//! The relays' metrics: one naming scheme for both, one CloudWatch Embedded Metric Format set-up,
//! and the count of failed AWS calls per operation.
//!
//! Every metric is emitted in the `METRICS_NAMESPACE` namespace with the dimension
//! [`RELAY_DIMENSION`] (`relay-stream` or `relay-poller`); [`FAILED_CALLS`] adds
//! [`OPERATION_DIMENSION`]. docs/operations.md has the table (metric, unit, dimensions, emitted by,
//! alarm); the template's alarms use these names.
//!
//! Without a recorder installed (library use, tests) recording is a no-op. The recorder and the
//! documents it writes, within the format's limits, are [`emf`]'s; [`spec`] checks a document as
//! CloudWatch does.

use std::time::Duration;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::FinalizerInterceptorContextRef;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use metrics::Unit;

use crate::event::Tally;

pub mod emf;
#[cfg(any(test, feature = "testing"))]
pub mod spec;

pub use emf::Emf;

/// Default of `METRICS_NAMESPACE`, and the template's `MetricsNamespace` default.
pub const DEFAULT_NAMESPACE: &str = "OutboxRelay";
/// The dimension naming the relay that emitted a metric.
pub const RELAY_DIMENSION: &str = "Relay";
/// The dimension naming the AWS operation of [`FAILED_CALLS`].
pub const OPERATION_DIMENSION: &str = "Operation";

/// Events the target accepted: marked, found already marked, or not marked. Count; both relays
/// ([`relayed`]).
pub const PUBLISHED: &str = "Published";
/// Published events whose conditional mark found the item already marked (by another relay, or an
/// earlier attempt): a part of [`PUBLISHED`]. Count; both relays.
pub const ALREADY_MARKED: &str = "AlreadyMarked";
/// Poison events the dead-letter queue took, marked or not. Count; both relays.
pub const DEAD_LETTERED: &str = "DeadLettered";
/// Events left pending because something failed: the publish after every attempt, or the
/// dead-letter queue that did not take a poison event (or no queue to take it). An event only
/// not sent (a deadline came first, held back behind its aggregate) is not counted. Count; both
/// relays.
pub const PUBLISH_FAILED: &str = "PublishFailed";
/// Events published (or dead-lettered) whose status update failed (not a lost race: that is
/// [`ALREADY_MARKED`]): they stay pending and are published again. The summaries' `not_marked`.
/// Count; both relays.
pub const NOT_MARKED: &str = "NotMarked";
/// Payloads stored in the payload bucket at publish, their events too large for the target (the
/// claim check, `PAYLOAD_BUCKET`): one per event, none on a re-publish. Count; both relays.
pub const PAYLOADS_STORED: &str = "PayloadsStored";
/// Events whose payload could not be stored in the payload bucket: not sent, they stay pending and
/// hold back their aggregate. Count; both relays.
pub const PAYLOAD_STORE_FAILED: &str = "PayloadStoreFailed";
/// Events of a call the target refused as a whole, each then refused alone with the same code,
/// of more than one aggregate: the target failing, not the events (an SNS topic of another region
/// answers `InvalidParameter` to every call). They stay pending, counted in [`PUBLISH_FAILED`]
/// too, and none is dead-lettered. Count; both relays.
pub const TARGET_REFUSED: &str = "TargetRefused";
/// Entries sent again after a retryable failure. Count.
pub const RETRIED: &str = "Retried";
/// Entries the Custom Event Bus answered `DEDUPLICATED`: a repeat of an event id it accepted in
/// the last 300 s, stored no second time, and counted in [`PUBLISHED`] too (a success). Count;
/// both relays, custom bus only.
pub const DEDUPLICATED: &str = "Deduplicated";
/// Entries the target refused for its quota (EventBridge's `ThrottlingException`, SNS's
/// `Throttled`, a Kinesis shard's `ProvisionedThroughputExceededException`, …). Count; both
/// relays.
pub const THROTTLED: &str = "Throttled";
/// The publish rate's limit each time throttling lowered it (`relay_runtime::publish_rate`):
/// the Minimum over a period shows how far the relay slowed down for the bus. Entries per
/// second; both relays.
pub const PUBLISH_RATE_LIMIT: &str = "PublishRateLimit";
/// The limit of publish calls in flight each time a timed-out call lowered it
/// (`relay_runtime::publish_concurrency`): the Minimum over a period shows how far the relay
/// slowed down for a slow target. Count; both relays.
pub const PUBLISH_CONCURRENCY_LIMIT: &str = "PublishConcurrencyLimit";
/// AWS calls that failed after the SDK's own retries, per [`OPERATION_DIMENSION`]. Count.
pub const FAILED_CALLS: &str = "FailedCalls";
/// Aggregates the stream relay left to the poller after one of their events failed
/// (`HOLD_FAILED_AGGREGATES`). Count; relay-stream.
pub const AGGREGATES_HELD: &str = "AggregatesHeld";
/// Stream records whose events were left to the poller under their aggregate's hold
/// (`HOLD_FAILED_AGGREGATES`): still pending, the poller's to publish. Count; relay-stream.
pub const LEFT_TO_HOLD: &str = "LeftToHold";
/// Aggregate holds released once the poller had published what was left under them. Count;
/// relay-poller.
pub const HOLDS_RELEASED: &str = "HoldsReleased";
/// Aggregate holds in the index, found by the last sweep (each poller of a fleet sweeps the
/// whole index: read the Maximum, not the Sum). Count; relay-poller.
pub const HOLDS: &str = "Holds";
/// Age of the oldest aggregate hold (since it was set), found by the last sweep; 0 without
/// holds. Seconds; relay-poller.
pub const OLDEST_HOLD_AGE: &str = "OldestHoldAgeSeconds";
/// Stream records that were not for the relay. Count; relay-stream.
pub const IGNORED: &str = "Ignored";
/// Publish time minus the oldest published record's creation time, per batch. Milliseconds;
/// relay-stream.
pub const RELAY_LAG: &str = "RelayLagMilliseconds";
/// Pending events older than the grace period seen by the last pass whose reads all succeeded.
/// Count; relay-poller.
pub const BACKLOG: &str = "Backlog";
/// Age of the oldest pending event seen by a pass whose reads all succeeded; nothing when they
/// failed, so the alarm sees missing data. Seconds; relay-poller.
pub const OLDEST_PENDING_AGE: &str = "OldestPendingAgeSeconds";
/// Pending events under partitions outside the shard count, found by the last sweep. Count;
/// relay-poller.
pub const STRAY_PENDING: &str = "StrayPending";
/// Pending items whose `ttl` was near or past and was pushed forward. Count; relay-poller.
pub const TTL_EXTENDED: &str = "TtlExtended";
/// Shard leases one poller owns, after each lease round (one value per poller and round: the
/// Minimum and Maximum over a period show how evenly the fleet shares the shards). Count;
/// relay-poller with a lease table.
pub const LEASES_OWNED: &str = "LeasesOwned";
/// Leases a poller took from another: expired ones, and ones handed over at its request. Count;
/// relay-poller with a lease table.
pub const LEASE_TAKEOVERS: &str = "LeaseTakeovers";
/// Other regions whose partitions a poller's region publishes (adopted: their relays stopped), after
/// each region round (one value per poller and round). Count; relay-poller on a global table.
pub const REGIONS_ADOPTED: &str = "RegionsAdopted";
/// Discarded stream batches (objects of the mapping's on-failure destination) whose every event
/// the poller handled, then deleted. Count; relay-poller with a discarded-batch bucket.
pub const DISCARDED_BATCHES_RECOVERED: &str = "DiscardedBatchesRecovered";
/// TTL deletions of pending events in discarded stream batches that the poller put back pending
/// (their items were gone). Count; relay-poller with a discarded-batch bucket.
pub const DISCARDED_EVENTS_RECREATED: &str = "DiscardedEventsRecreated";
/// Discarded stream batches the poller could not handle and left in the bucket for a person (not
/// an invocation record, or a deletion whose image lacks the index keys), per sweep: above 0 for
/// as long as one is there. Count; relay-poller with a discarded-batch bucket.
pub const DISCARDED_BATCHES_LEFT: &str = "DiscardedBatchesLeft";

/// `METRICS_NAMESPACE`, read the same way by both relays.
#[derive(Debug, Clone, clap::Args)]
pub struct MetricsArgs {
    /// CloudWatch namespace of the relay's embedded metrics (docs/operations.md, "Metrics"); the
    /// template sets it from its `MetricsNamespace`.
    #[arg(long, env = "METRICS_NAMESPACE", default_value = DEFAULT_NAMESPACE)]
    pub metrics_namespace: String,
}

impl Default for MetricsArgs {
    fn default() -> Self {
        Self {
            metrics_namespace: DEFAULT_NAMESPACE.to_owned(),
        }
    }
}

/// A global metrics recorder was already installed.
#[derive(Debug, thiserror::Error)]
#[error("a global metrics recorder is already installed")]
pub struct RecorderInstalled;

/// Installs the EMF recorder for `relay` in `namespace`, writing to stderr through the process's
/// one output ([`crate::telemetry::Lines`]): flushed every `interval` when given (a long-running
/// process), or by the caller (the Lambda, after each invocation).
///
/// # Errors
/// When a global metrics recorder is already installed.
pub fn install_emf(
    namespace: &str,
    relay: &'static str,
    interval: Option<Duration>,
) -> Result<Emf, RecorderInstalled> {
    let emf = Emf::new(
        namespace,
        RELAY_DIMENSION,
        relay,
        crate::telemetry::Lines::stderr(),
    );
    metrics::set_global_recorder(emf.recorder()).map_err(|_| RecorderInstalled)?;
    if let Some(interval) = interval {
        emf.flush_every(interval);
    }
    describe();
    Ok(emf)
}

fn describe() {
    for (name, text) in [
        (PUBLISHED, "events the target accepted"),
        (
            ALREADY_MARKED,
            "published events whose item was already marked",
        ),
        (DEAD_LETTERED, "poison events the dead-letter queue took"),
        (
            PUBLISH_FAILED,
            "events left pending after a failed publish or dead letter",
        ),
        (
            NOT_MARKED,
            "events published or dead-lettered whose mark failed",
        ),
        (RETRIED, "entries sent again after a retryable failure"),
        (
            PAYLOADS_STORED,
            "payloads stored in the payload bucket at publish (events too large for the target)",
        ),
        (
            PAYLOAD_STORE_FAILED,
            "events whose payload could not be stored: left pending",
        ),
        (
            DEDUPLICATED,
            "entries the Custom Event Bus answered DEDUPLICATED (published before)",
        ),
        (THROTTLED, "entries the target refused for its quota"),
        (
            FAILED_CALLS,
            "AWS calls that failed after the SDK's retries",
        ),
        (IGNORED, "stream records not for the relay"),
        (
            AGGREGATES_HELD,
            "aggregates left to the poller after a failure",
        ),
        (
            LEFT_TO_HOLD,
            "stream records left to the poller under their aggregate's hold",
        ),
        (
            HOLDS_RELEASED,
            "aggregate holds released after their events were published",
        ),
        (TTL_EXTENDED, "pending items whose ttl was pushed forward"),
        (
            LEASE_TAKEOVERS,
            "shard leases taken from another poller (expired or handed over)",
        ),
        (
            DISCARDED_BATCHES_RECOVERED,
            "discarded stream batches handled whole, then deleted",
        ),
        (
            DISCARDED_EVENTS_RECREATED,
            "TTL-deleted pending events of discarded batches put back pending",
        ),
        (
            DISCARDED_BATCHES_LEFT,
            "discarded stream batches left in the bucket for a person, per sweep",
        ),
    ] {
        metrics::describe_counter!(name, Unit::Count, text);
    }
    metrics::describe_histogram!(
        RELAY_LAG,
        Unit::Milliseconds,
        "publish time minus creation time"
    );
    metrics::describe_histogram!(
        PUBLISH_RATE_LIMIT,
        Unit::CountPerSecond,
        "the publish rate's limit, each time throttling lowered it"
    );
    metrics::describe_histogram!(
        PUBLISH_CONCURRENCY_LIMIT,
        Unit::Count,
        "the limit of publish calls in flight, each time a timeout lowered it"
    );
    metrics::describe_histogram!(
        BACKLOG,
        Unit::Count,
        "pending events older than the grace period"
    );
    metrics::describe_histogram!(
        OLDEST_PENDING_AGE,
        Unit::Seconds,
        "age of the oldest pending event"
    );
    metrics::describe_histogram!(
        LEASES_OWNED,
        Unit::Count,
        "shard leases one poller owns, per lease round"
    );
    metrics::describe_histogram!(
        REGIONS_ADOPTED,
        Unit::Count,
        "other regions whose partitions a poller's region publishes, per region round"
    );
    metrics::describe_histogram!(
        STRAY_PENDING,
        Unit::Count,
        "pending events outside the shard count"
    );
    metrics::describe_histogram!(HOLDS, Unit::Count, "aggregate holds in the index");
    metrics::describe_histogram!(
        OLDEST_HOLD_AGE,
        Unit::Seconds,
        "age of the oldest aggregate hold"
    );
}

/// Records what a batch's (or a page's) events came to, with the meanings of docs/operations.md:
/// the one place both relays turn their [`Tally`] into counts, so a metric summed across the
/// relays means one thing.
pub fn relayed(tally: &Tally) {
    count(PUBLISHED, tally.published());
    count(ALREADY_MARKED, tally.already_marked);
    count(DEAD_LETTERED, tally.all_dead_lettered());
    count(NOT_MARKED, tally.all_not_marked());
    count(PUBLISH_FAILED, tally.failed + tally.not_dead_lettered);
    count(IGNORED, tally.ignored);
    count(LEFT_TO_HOLD, tally.left_to_hold);
}

/// Adds `n` to the counter `name` (nothing for 0).
pub fn count(name: &'static str, n: u64) {
    if n > 0 {
        metrics::counter!(name).increment(n);
    }
}

/// Records one value of the histogram `name`.
pub fn observe(name: &'static str, value: f64) {
    metrics::histogram!(name).record(value);
}

/// Counts every call of the client it is registered on that failed after the SDK's own retries,
/// as [`FAILED_CALLS`] with the call's operation. Register it on every client a relay builds
/// (see [`crate::clients`]).
///
/// A DynamoDB write whose condition failed is not a failed call: the service did what was asked
/// (a mark another relay made first, a lease another poller took first), so it is not counted.
#[derive(Debug, Clone, Copy, Default)]
pub struct FailedCallCounter;

impl Intercept for FailedCallCounter {
    fn name(&self) -> &'static str {
        "FailedCallCounter"
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(Err(err)) = context.output_or_error()
            && !is_condition_failed(err.as_operation_error())
        {
            let operation = cfg
                .load::<Metadata>()
                .map_or("Unknown", Metadata::name)
                .to_owned();
            metrics::counter!(FAILED_CALLS, OPERATION_DIMENSION => operation).increment(1);
        }
        Ok(())
    }
}

/// Whether `err` is a write refused by its condition: a DynamoDB write's, or the claim check's
/// conditional `PutObject` that found the payload already stored (`412 PreconditionFailed`, a
/// re-publish: nothing failed).
fn is_condition_failed(
    err: Option<&aws_smithy_runtime_api::client::interceptors::context::Error>,
) -> bool {
    use aws_sdk_dynamodb::operation::{
        delete_item::DeleteItemError, put_item::PutItemError, update_item::UpdateItemError,
    };
    use aws_sdk_s3::error::ProvideErrorMetadata;
    let Some(err) = err else {
        return false;
    };
    if err
        .downcast_ref::<aws_sdk_s3::operation::put_object::PutObjectError>()
        .is_some_and(|e| e.code() == Some(outbox_shared::claim_check::PRECONDITION_FAILED))
    {
        return true;
    }
    err.downcast_ref::<UpdateItemError>()
        .is_some_and(UpdateItemError::is_conditional_check_failed_exception)
        || err
            .downcast_ref::<PutItemError>()
            .is_some_and(PutItemError::is_conditional_check_failed_exception)
        || err
            .downcast_ref::<DeleteItemError>()
            .is_some_and(DeleteItemError::is_conditional_check_failed_exception)
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
    use aws_sdk_dynamodb::types::error::ProvisionedThroughputExceededException;
    use aws_smithy_mocks::mock;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;

    /// The counters `record` leaves, by name.
    fn counters(record: impl FnOnce()) -> std::collections::BTreeMap<String, u64> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, record);
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter_map(|(key, .., value)| match value {
                DebugValue::Counter(n) => Some((key.key().name().to_owned(), n)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_tally_is_counted_with_the_meanings_of_the_operations_table() {
        // Given a tally with one event in every state but three marked
        let tally = Tally {
            ignored: 1,
            marked: 3,
            already_marked: 1,
            not_marked: 1,
            dead_lettered: 1,
            dead_lettered_already_marked: 1,
            dead_lettered_not_marked: 1,
            not_dead_lettered: 1,
            failed: 1,
            not_sent: 1,
            held_back: 1,
            left_to_hold: 1,
        };

        // When it is recorded
        let counted = counters(|| relayed(&tally));

        // Then Published is every event the target accepted, DeadLettered every letter the queue
        // took, NotMarked both kinds of failed marks, PublishFailed what failed and stays pending;
        // an event only not sent or held back is in none of them
        let expected: std::collections::BTreeMap<String, u64> = [
            (PUBLISHED, 5),
            (ALREADY_MARKED, 1),
            (DEAD_LETTERED, 3),
            (NOT_MARKED, 2),
            (PUBLISH_FAILED, 2),
            (IGNORED, 1),
            (LEFT_TO_HOLD, 1),
        ]
        .into_iter()
        .map(|(name, n)| (name.to_owned(), n))
        .collect();
        assert_eq!(counted, expected);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_failed_call_is_counted_with_its_operation_and_a_good_one_is_not() {
        // Given a DynamoDB client whose first UpdateItem fails, second succeeds and third is
        // refused by its condition
        let failing = mock!(aws_sdk_dynamodb::Client::update_item).then_error(|| {
            UpdateItemError::ProvisionedThroughputExceededException(
                ProvisionedThroughputExceededException::builder()
                    .message("slow down")
                    .build(),
            )
        });
        let ok = mock!(aws_sdk_dynamodb::Client::update_item).then_output(|| {
            aws_sdk_dynamodb::operation::update_item::UpdateItemOutput::builder().build()
        });
        let condition = mock!(aws_sdk_dynamodb::Client::update_item).then_error(|| {
            UpdateItemError::ConditionalCheckFailedException(
                aws_sdk_dynamodb::types::error::ConditionalCheckFailedException::builder()
                    .message("the condition failed")
                    .build(),
            )
        });
        let config = crate::mocked_dynamodb(&[&failing, &ok, &condition])
            .interceptor(FailedCallCounter)
            .build();
        let client = aws_sdk_dynamodb::Client::from_conf(config);
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _local = metrics::set_default_local_recorder(&recorder);

        // When both calls are made
        let update = || {
            client
                .update_item()
                .table_name("t")
                .key("PK", aws_sdk_dynamodb::types::AttributeValue::S("k".into()))
        };
        assert!(update().send().await.is_err());
        assert!(update().send().await.is_ok());
        assert!(update().send().await.is_err());

        // Then one failed UpdateItem is counted (the refused condition is not a failure)
        let counted: Vec<_> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == FAILED_CALLS)
            .map(|(key, _, _, value)| {
                let labels: Vec<(String, String)> = key
                    .key()
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect();
                (labels, value)
            })
            .collect();
        assert_eq!(
            counted,
            vec![(
                vec![(OPERATION_DIMENSION.to_owned(), "UpdateItem".to_owned())],
                DebugValue::Counter(1)
            )]
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_payload_found_already_stored_is_not_a_failed_call_and_an_s3_failure_is() {
        // Given an S3 client whose first PutObject finds the object there (412), second fails (503)
        let response = |status: u16, code: &str| {
            aws_smithy_runtime_api::http::Response::new(
                aws_smithy_runtime_api::http::StatusCode::try_from(status).unwrap(),
                aws_smithy_types::body::SdkBody::from(format!(
                    "<Error><Code>{code}</Code><Message>m</Message></Error>"
                )),
            )
        };
        let there = mock!(aws_sdk_s3::Client::put_object)
            .then_http_response(move || response(412, "PreconditionFailed"));
        // (the object found holds the payload, written just now)
        let holds = mock!(aws_sdk_s3::Client::head_object).then_output(|| {
            aws_sdk_s3::operation::head_object::HeadObjectOutput::builder()
                .content_length(2)
                .checksum_sha256(outbox_shared::claim_check::sha256_base64(b"{}"))
                .last_modified(aws_smithy_types::DateTime::from(
                    std::time::SystemTime::now(),
                ))
                .build()
        });
        let out = mock!(aws_sdk_s3::Client::put_object)
            .then_http_response(move || response(503, "ServiceUnavailable"));
        let client = aws_sdk_s3::Client::from_conf(
            crate::mocked_s3(&[&there, &holds, &out])
                .interceptor(FailedCallCounter)
                .build(),
        );
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _local = metrics::set_default_local_recorder(&recorder);
        let store = outbox_shared::PayloadStore::new(client, "b");

        // When the same payload is stored twice
        let (_, stored) = store.put("e1", b"{}").await.unwrap();
        assert_eq!(stored, outbox_shared::claim_check::Stored::AlreadyThere);
        assert!(store.put("e1", b"{}").await.is_err());

        // Then only the 503 is a failed PutObject
        let counted: Vec<_> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == FAILED_CALLS)
            .map(|(.., value)| value)
            .collect();
        assert_eq!(counted, vec![DebugValue::Counter(1)]);
    }
}
