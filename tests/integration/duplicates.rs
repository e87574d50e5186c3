//! Duplicates that AWS's real behaviour makes and the emulators smooth over: the pending index
//! lagging the table (an eventually consistent GSI, on the latency model's lagging index), and
//! Lambda re-delivering a stream batch from its first failed record (the local stream runner's
//! re-delivery, through the fault proxy). At-least-once allows a duplicate; each one costs a
//! consumer a lookup, so the relays must not publish again what they published and marked.

use std::time::Duration;

use chrono::Utc;
use clap::Parser;
use outbox_tests::fixtures;
use outbox_tests::latency_model::LatencyModel;
use relay_poller::CancellationToken;
use relay_poller::app::{AwsClients, aws_poller};
use relay_poller::{Cli, Command};

/// Events drained through the lagging index.
const LAGGING_EVENTS: usize = 1000;
/// How long the lagging index keeps serving a marked item: a GSI's lag on AWS is usually well
/// under a second, and 2 s is a bad moment.
const INDEX_LAG: Duration = Duration::from_secs(2);

/// The poller `relay-poller drain` builds from `flags` (its defaults otherwise), on `model`.
fn drain_poller(model: &LatencyModel, flags: &[&str]) -> relay_poller::app::AwsPoller {
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
    aws_poller(
        AwsClients::new(&model.sdk_config()),
        &args.relay.validate().expect("valid arguments"),
    )
    .expect("poller")
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
    let poller = drain_poller(&model, &[]);

    // When it drains
    let started = tokio::time::Instant::now();
    let summary = poller
        .drain(Duration::ZERO, 3, &CancellationToken::new())
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
