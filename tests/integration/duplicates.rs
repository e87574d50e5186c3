//! Duplicates that AWS's real behaviour makes and the emulators smooth over: the pending index
//! lagging the table (an eventually consistent GSI, on the latency model's lagging index), and
//! Lambda re-delivering a stream batch from its first failed record (the local stream runner's
//! re-delivery, through the fault proxy). At-least-once allows a duplicate; each one costs a
//! consumer a lookup, so the relays must not publish again what they published and marked.

use std::collections::HashSet;
use std::time::Duration;

use chrono::Utc;
use clap::Parser;
use outbox_tests::fault_proxy::{FaultProxy, FaultRates};
use outbox_tests::latency_model::LatencyModel;
use outbox_tests::{TestEnv, emulator_endpoints, fixtures};
use relay_poller::CancellationToken;
use relay_poller::aws::aws_poller;
use relay_poller::{Cli, Command};

use crate::relay_faults::{assert_all_once_or_more, run_through, sink_counts};

/// Events drained through the lagging index.
const LAGGING_EVENTS: usize = 1000;
/// How long the lagging index keeps serving a marked item: a GSI's lag on AWS is usually well
/// under a second, and 2 s is a bad moment.
const INDEX_LAG: Duration = Duration::from_secs(2);

/// The poller `relay-poller drain` builds from `flags` (its defaults otherwise), on `model`.
/// `relay-poller drain` with `flags` on `model`, and the shards it drains.
fn drain_poller(
    model: &LatencyModel,
    flags: &[&str],
) -> (
    relay_poller::aws::AwsPoller,
    relay_poller::assignment::StaticShards,
) {
    let mut argv = vec![
        "relay-poller",
        "drain",
        "--table-name",
        "lag-table",
        "--event-bus-name",
        "lag-bus",
        "--source",
        outbox_tests::TEST_SOURCE,
        "--dead-letter-queue-url",
        "http://latency-model.invalid/dead-letters",
    ];
    argv.extend_from_slice(flags);
    let Command::Drain(args) = Cli::try_parse_from(argv).expect("valid flags").command else {
        unreachable!("parsed a drain");
    };
    let config = args.relay.validate().expect("valid arguments");
    let poller = aws_poller(&model.sdk_config(), &config).expect("poller");
    let shards = poller.partitions().fixed();
    (poller, shards)
}

#[tokio::test(start_paused = true)]
async fn a_drain_through_an_index_that_lags_by_2_s_publishes_at_most_1_percent_duplicates() {
    // Given 1,000 pending events, an index that keeps serving a marked item for 2 s after the
    // table marked it (as a GSI, eventually consistent, can on AWS), and `relay-poller drain`
    // with its defaults
    let model = LatencyModel::new(Duration::from_millis(10));
    model.lag_index(INDEX_LAG);
    model.seed_pending(&fixtures::pending_items(
        "lag-table",
        LAGGING_EVENTS,
        Utc::now() - chrono::Duration::minutes(1),
    ));
    let (poller, shards) = drain_poller(&model, &[]);

    // When it drains
    let started = tokio::time::Instant::now();
    let summary = poller
        .drain(&shards, Duration::ZERO, 3, &CancellationToken::new())
        .await;
    let elapsed = started.elapsed();

    // Then every event was published and marked, and the bus received at most 1 % more
    // entries than there are events
    let (sent, throttled) = model.put_events_entries();
    let duplicates = sent - throttled - LAGGING_EVENTS as u64;
    eprintln!(
        "drain through an index lagging by {INDEX_LAG:?}: {LAGGING_EVENTS} events, {duplicates} duplicates on the bus, {} passes, {:.1} s of virtual time; summary {summary:?}",
        summary.passes,
        elapsed.as_secs_f64()
    );
    assert!(summary.complete, "{summary:?}");
    assert_eq!(model.pending(), 0, "every event published and marked");
    assert!(
        duplicates * 100 <= LAGGING_EVENTS as u64,
        "{duplicates} duplicates for {LAGGING_EVENTS} events"
    );
}

/// Events the stream relay relays through the faulty AWS.
const STREAM_EVENTS: usize = 300;
/// The faults of the run: `PutEvents` entries fail at 30 % (retryable), DynamoDB calls
/// (the marks among them) at 20 %; no lost replies, whose duplicates no relay can avoid.
const STREAM_RATES: FaultRates = FaultRates {
    dynamodb_calls: 20,
    put_events_entries: 30,
    lost_replies: 0,
};
const STREAM_SEED: u64 = 0x0dd_ba7c4;

#[tokio::test(flavor = "multi_thread")]
async fn a_redelivered_stream_batch_does_not_publish_again_what_the_relay_published() {
    // Given 300 orders on the stream, and a faulty AWS in front of the emulator: a third of the
    // PutEvents entries fail, a fifth of the DynamoDB calls
    let env = TestEnv::new().await;
    let written: HashSet<String> = env
        .create_orders(STREAM_EVENTS, 32)
        .await
        .into_iter()
        .collect();
    let proxy = FaultProxy::start(&emulator_endpoints(), STREAM_RATES, STREAM_SEED).await;

    // When relay-stream-local relays them through it with hold mode off and 3 attempts per entry
    // (so some events fail all three, and Lambda's semantics re-deliver their batch from them)
    let summary = run_through(
        &env,
        &proxy,
        "relay-stream-local",
        &[
            "--from",
            "trim-horizon",
            "--exit-when-idle",
            "2s",
            "--batch-size",
            "100",
            "--publish-max-attempts",
            "3",
        ],
    )
    .await;
    let faults = proxy.counts();
    assert!(faults.failed_entries > 0, "{faults:?}");
    assert!(summary["redelivered"].as_u64().unwrap() > 0, "{summary}");

    // And the poller picks up what the stream relay left pending, without faults
    let output = env
        .relay_command("relay-poller")
        .args(["drain"])
        .env("RUST_LOG", "error")
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");

    // Then every event reached the sink, and at most 2 % of them twice. A mark that failed
    // every attempt (a call of 25 marks, now and then at these rates) leaves its events to the
    // poller, which publishes them again by design (docs/guarantees.md, "Duplicates happen"): those are
    // counted apart, as `not_marked`
    let counts = sink_counts(&env, STREAM_EVENTS).await;
    let duplicates = assert_all_once_or_more(&counts, &written);
    let not_marked = summary["not_marked"].as_u64().unwrap();
    eprintln!(
        "relay-stream-local, {STREAM_EVENTS} events, hold mode off: {duplicates} duplicates on the sink ({not_marked} of them events whose mark failed); stream summary {summary}; injected {faults:?}"
    );
    assert!(
        duplicates.saturating_sub(not_marked) * 100 <= 2 * STREAM_EVENTS as u64,
        "{duplicates} duplicates for {STREAM_EVENTS} events, {not_marked} of them not marked; stream summary {summary}"
    );
}
