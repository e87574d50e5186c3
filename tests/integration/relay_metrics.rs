//! One metric, one meaning: the same events, relayed once by the stream relay and once by the
//! poller, come to the same counts under the same names in the Embedded Metric Format documents
//! each relay writes (docs/operations.md's table), so an alarm or a dashboard may sum a metric
//! across the relays.

use std::collections::BTreeMap;

use chrono::Utc;
use outbox_shared::time::format_timestamp;
use outbox_tests::fault_proxy::{FaultProxy, FaultRates};
use outbox_tests::{TestEnv, emulator_endpoints, fixtures, minimal_outbox_item};
use relay_runtime::Deadline;
use relay_runtime::metrics::{
    ALREADY_MARKED, DEAD_LETTERED, DEFAULT_NAMESPACE, Emf, NOT_MARKED, PUBLISH_FAILED, PUBLISHED,
    RELAY_DIMENSION, spec,
};
use relay_runtime::telemetry::Lines;
use serde_json::Value;

/// The counts both relays record for the events they relay (`Ignored` and `LeftToHold` are
/// about stream records, which only the stream relay reads).
const SHARED_COUNTS: [&str; 5] = [
    PUBLISHED,
    ALREADY_MARKED,
    DEAD_LETTERED,
    NOT_MARKED,
    PUBLISH_FAILED,
];

/// Orders written, one event each.
const ORDERS: usize = 6;

/// The marks: `BatchExecuteStatement` of PartiQL `UPDATE`s.
const MARKS: &str = "DynamoDB_20120810.BatchExecuteStatement";

/// The sums of [`SHARED_COUNTS`] over the documents `record` leaves, recorded as `relay`.
async fn counts_of(relay: &str, record: impl Future<Output = ()>) -> BTreeMap<&'static str, f64> {
    let emf = Emf::new(
        DEFAULT_NAMESPACE,
        RELAY_DIMENSION,
        relay,
        Lines::new(std::io::sink()),
    );
    let recorder = emf.recorder();
    {
        // The test's runtime has one thread: every task of the relay records here.
        let _local = metrics::set_default_local_recorder(&recorder);
        record.await;
    }
    let now_ms = u64::try_from(Utc::now().timestamp_millis()).expect("after 1970");
    let documents: Vec<Value> = emf
        .documents(now_ms)
        .iter()
        .map(|d| {
            assert!(spec::violations(d).is_empty(), "{d}");
            serde_json::from_str(d).expect("a JSON document")
        })
        .collect();
    SHARED_COUNTS
        .into_iter()
        .map(|name| {
            let sum = documents
                .iter()
                .flat_map(|d| spec::values_of(d, name))
                .sum();
            (name, sum)
        })
        .collect()
}

#[tokio::test]
async fn the_same_events_relayed_by_either_relay_come_to_the_same_counts() {
    // Given six orders' events and one poison event (larger than an entry, with no payload
    // bucket) on the stream, and a table whose marks are refused (the role lacks
    // dynamodb:PartiQLUpdate), so the events stay pending for the second relay
    let env = TestEnv::new().await;
    env.create_orders(ORDERS, 2).await;
    let created_at = format_timestamp(Utc::now() - chrono::Duration::minutes(1));
    env.put_raw_item(minimal_outbox_item(
        "user-poison",
        "poison-1",
        "OrderCreated",
        &format!(r#"{{"lines":"{}"}}"#, "x".repeat(300 * 1024)),
        &created_at,
        0,
    ))
    .await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 39).await;
    proxy.deny(MARKS);
    let records = relay_stream_local::read_stream_records(&env.streams, &env.stream_arn)
        .await
        .expect("stream records");

    // When the stream relay handles the stream's batch
    let args = relay_stream::RelayArgs {
        dead_letter_queue_url: Some(env.dead_letter_queue_url.clone()),
        ..fixtures::stream_relay_args(&env.table_name, fixtures::publisher_args(&env.bus_name))
    };
    let stream_relay = relay_stream::build_relay_with(
        &args,
        env.publisher(args.publisher_config().expect("publisher settings")),
        env.dynamodb_through(&proxy),
        env.sqs.clone(),
    )
    .expect("the stream relay");
    let stream = counts_of("relay-stream", async {
        stream_relay.handle(&records, Deadline::NONE).await;
    })
    .await;

    // And a poller makes one pass over the same events, still pending
    let cli = <relay_poller::Cli as clap::Parser>::try_parse_from([
        "relay-poller",
        "drain",
        "--table-name",
        &env.table_name,
        "--event-bus-name",
        &env.bus_name,
        "--source",
        outbox_tests::TEST_SOURCE,
        "--dead-letter-queue-url",
        &env.dead_letter_queue_url,
    ])
    .expect("drain flags");
    let relay_poller::Command::Drain(drain) = cli.command else {
        panic!("a drain")
    };
    let config = drain.relay.validate().expect("valid settings");
    let poller = relay_poller::aws::aws_poller_with_dead_letters(
        env.dynamodb_through(&proxy),
        env.publisher(config.publisher.clone()),
        relay_runtime::SqsDeadLetterSink::new(env.sqs.clone(), &env.dead_letter_queue_url),
        &config,
    )
    .expect("poller");
    let cancel = relay_poller::CancellationToken::new();
    let poller_counts = counts_of("relay-poller", async {
        let cutoff = relay_poller::cutoff(Utc::now(), std::time::Duration::ZERO);
        poller
            .pass(&poller.partitions().fixed(), cutoff, &cancel)
            .await;
    })
    .await;

    // Then each relay published the six events and dead-lettered the poison one, marking none
    let expected: BTreeMap<&str, f64> = [
        (PUBLISHED, ORDERS as f64),
        (ALREADY_MARKED, 0.0),
        (DEAD_LETTERED, 1.0),
        (NOT_MARKED, ORDERS as f64 + 1.0),
        (PUBLISH_FAILED, 0.0),
    ]
    .into_iter()
    .collect();
    assert_eq!(stream, expected, "relay-stream's counts");
    // And the poller's documents give each metric the same count
    assert_eq!(
        poller_counts, stream,
        "relay-poller's counts against relay-stream's"
    );
    assert_eq!(
        env.pending_in_index().await,
        ORDERS + 1,
        "nothing was marked"
    );
}
