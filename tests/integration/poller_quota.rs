//! The poller at the bus's limits, on the latency model (no emulator): a drain against a
//! `PutEvents` quota that throttles above 500 entries/s, against a slow bus that serves calls one
//! at a time (its latency grows with the calls queued) under the relays' default SDK timeouts,
//! and against a bus that answers nothing. It runs on tokio's paused clock, so the quota, the
//! model's delays, the SDK's timeouts and the publisher's pacing all count virtual time: the
//! figures are the pacing's, whatever the machine's load.

use std::time::Duration;

use chrono::Utc;
use outbox_shared::ShardCount;
use outbox_shared::schema;
use outbox_tests::fixtures;
use outbox_tests::latency_model::LatencyModel;
use relay_poller::CancellationToken;
use relay_poller::assignment::StaticShards;
use relay_poller::aws::aws_poller;
use relay_poller::config::{RelayArgs, TableArgs};

const QUOTA: u32 = 500;
/// Long enough (40 s of quota) for the first burst, sent before the first throttle comes back,
/// to be a small part of the whole.
const EVENTS: usize = 20_000;
/// With a ceiling nothing is throttled, so no first burst is there to outweigh: 10 s of quota
/// show the rate.
const CEILING_EVENTS: usize = 5_000;

/// The poller's defaults (what `relay-poller drain` runs with), on the model's table and bus.
fn default_args() -> RelayArgs {
    RelayArgs {
        table: TableArgs {
            table_name: "quota-table".into(),
            index_name: schema::DEFAULT_INDEX_NAME.into(),
            shard_count: ShardCount::default(),
            shards: None,
            regions: relay_runtime::RegionArgs::default(),
        },
        publisher: fixtures::publisher_args("quota-bus"),
        retention: relay_runtime::RetentionArgs::default(),
        metrics: relay_runtime::metrics::MetricsArgs::default(),
        ttl_refresh_margin: relay_poller::DEFAULT_TTL_REFRESH_MARGIN,
        sweep_interval: relay_poller::DEFAULT_SWEEP_INTERVAL,
        index_lag: relay_poller::DEFAULT_INDEX_LAG,
        dead_letter_queue_url: "http://latency-model.invalid/dead-letters".into(),
        page_size: relay_poller::config::DEFAULT_PAGE_SIZE,
        shard_concurrency: 16,
        mark_concurrency: relay_poller::config::DEFAULT_MARK_CONCURRENCY,
        idle_backoff_max: Duration::from_secs(5),
        shutdown_timeout: Duration::from_secs(8),
    }
}

/// What a drain at the quota did: events per second of virtual time, and the share of the
/// entries sent that the bus throttled.
struct AtQuota {
    events_per_second: f64,
    throttled_ratio: f64,
    entries_sent: u64,
}

async fn drain_at_quota(args: &RelayArgs, events: usize) -> AtQuota {
    let model = LatencyModel::new(Duration::from_millis(10));
    model.limit_put_events(QUOTA);
    model.seed_pending(&fixtures::pending_items(
        "quota-table",
        events,
        Utc::now() - chrono::Duration::minutes(1),
    ));
    let config = args.validate().expect("valid arguments");
    let poller = aws_poller(&model.sdk_config(), &config).expect("poller");

    let started = tokio::time::Instant::now();
    let summary = poller
        .drain(
            &poller.partitions().fixed(),
            Duration::ZERO,
            3,
            &CancellationToken::new(),
        )
        .await;
    let elapsed = started.elapsed();

    assert!(summary.complete, "{summary:?}");
    assert_eq!(model.pending(), 0, "every event published and marked");
    let (sent, throttled) = model.put_events_entries();
    assert_eq!(sent - throttled, events as u64, "each event accepted once");
    eprintln!(
        "drain at a {QUOTA}/s quota: {events} events in {:.1} s of virtual time, {sent} entries sent, {throttled} throttled, {} passes",
        elapsed.as_secs_f64(),
        summary.passes
    );
    AtQuota {
        events_per_second: events as f64 / elapsed.as_secs_f64(),
        throttled_ratio: throttled as f64 / sent as f64,
        entries_sent: sent,
    }
}

#[tokio::test(start_paused = true)]
async fn a_drain_at_the_bus_quota_adapts_its_rate_and_loses_nothing() {
    // Given 20,000 pending events, a bus that throttles above 500 entries/s, and a poller with
    // its defaults (no ceiling: it learns the quota from the throttling)
    let run = drain_at_quota(&default_args(), EVENTS).await;

    // Then the drain completed (asserted inside), few entries were throttled and the poller
    // published close to the quota
    let (eps, ratio) = (run.events_per_second, run.throttled_ratio);
    assert!(
        ratio < 0.10,
        "throttled {:.1} % of {} entries sent",
        ratio * 100.0,
        run.entries_sent
    );
    let quota = f64::from(QUOTA);
    assert!(
        (eps - quota).abs() <= 0.2 * quota,
        "{eps:.0} events/s against a quota of {QUOTA}/s"
    );
}

#[tokio::test(start_paused = true)]
async fn a_ceiling_at_the_quota_keeps_the_drain_from_being_throttled() {
    // Given the same bus, and a poller told the quota with --max-publish-rate
    let mut args = default_args();
    args.publisher.max_publish_rate = std::num::NonZeroU32::new(QUOTA);
    let run = drain_at_quota(&args, CEILING_EVENTS).await;

    // Then it never exceeds it: nothing throttled, and the drain runs at the quota
    assert_eq!(
        run.entries_sent, CEILING_EVENTS as u64,
        "no entry sent twice"
    );
    let quota = f64::from(QUOTA);
    assert!(
        (run.events_per_second - quota).abs() <= 0.2 * quota,
        "{:.0} events/s against a ceiling of {QUOTA}/s",
        run.events_per_second
    );
}

/// A slow bus: stock moto's EventBridge delivering through a rule to SQS serves a few dozen
/// entries per second (42 measured, docs/benchmarks.md), one call at a time.
const SLOW_BUS_CAPACITY: u32 = 30;
/// A drain of this many takes the slow bus about 33 s at its capacity.
const SLOW_BUS_EVENTS: usize = 1000;

/// The relays' SDK timeouts at their defaults (not read from the environment): 4 s an attempt,
/// 10 s a call.
fn default_sdk_timeouts() -> aws_config::timeout::TimeoutConfig {
    aws_config::timeout::TimeoutConfig::builder()
        .connect_timeout(relay_runtime::SDK_CONNECT_TIMEOUT)
        .operation_attempt_timeout(relay_runtime::SDK_ATTEMPT_TIMEOUT)
        .operation_timeout(relay_runtime::SDK_OPERATION_TIMEOUT)
        .build()
}

/// A poller with its defaults and the default SDK timeouts on `model`, with `events` pending.
fn poller_on(model: &LatencyModel, events: usize) -> relay_poller::aws::AwsPoller {
    model.seed_pending(&fixtures::pending_items(
        "quota-table",
        events,
        Utc::now() - chrono::Duration::minutes(1),
    ));
    let sdk = model
        .sdk_config()
        .into_builder()
        .timeout_config(default_sdk_timeouts())
        .build();
    aws_poller(&sdk, &default_args().validate().expect("valid arguments")).expect("poller")
}

#[tokio::test(start_paused = true)]
async fn a_drain_against_a_slow_bus_slows_down_to_its_pace_and_loses_nothing() {
    // Given 1,000 pending events, a bus that serves 30 entries/s one call at a time (so a call
    // waits for every call queued ahead of it: 16 shards x 16 calls of 10 entries in flight
    // would wait 85 s, far past the 4 s attempt timeout), and a poller with its defaults and the
    // default SDK timeouts
    let model = LatencyModel::new(Duration::from_millis(10));
    model.serve_put_events(SLOW_BUS_CAPACITY);
    let poller = poller_on(&model, SLOW_BUS_EVENTS);

    // When it drains, as `relay-poller drain` does (3 stalled passes at most)
    let started = tokio::time::Instant::now();
    let summary = poller
        .drain(&all_shards(), Duration::ZERO, 3, &CancellationToken::new())
        .await;
    let elapsed = started.elapsed().as_secs_f64();

    // Then the drain completed with every event published and marked, near the bus's pace
    let (sent, _) = model.put_events_entries();
    let stats = poller.publisher().stats();
    let events_per_second = summary.published as f64 / elapsed;
    eprintln!(
        "drain against a bus of {SLOW_BUS_CAPACITY} entries/s: {} of {SLOW_BUS_EVENTS} published, complete {}, {elapsed:.1} s of virtual time ({events_per_second:.1} events/s), {} passes, {sent} entries sent, {} calls, {} timed out",
        summary.published, summary.complete, summary.passes, stats.publish_calls, stats.timed_out,
    );
    assert!(summary.complete, "{summary:?}");
    assert_eq!(model.pending(), 0, "every event published and marked");
    let capacity = f64::from(SLOW_BUS_CAPACITY);
    assert!(
        events_per_second >= 0.7 * capacity,
        "{events_per_second:.1} events/s on a bus of {SLOW_BUS_CAPACITY} entries/s"
    );
}

#[tokio::test(start_paused = true)]
async fn a_drain_against_a_bus_that_answers_nothing_gives_up_in_minutes() {
    // Given 200 pending events and a bus that answers no call within the SDK's timeouts
    let model = LatencyModel::new(Duration::from_millis(10));
    model.turn_slow("PutEvents", 0, Duration::from_secs(3600));
    let poller = poller_on(&model, 200);

    // When it drains
    let started = tokio::time::Instant::now();
    let summary = poller
        .drain(&all_shards(), Duration::ZERO, 3, &CancellationToken::new())
        .await;
    let elapsed = started.elapsed();

    // Then it gives up after its 3 stalled passes, every event still pending, in about the time
    // the calls' attempts take side by side (68 s before the calls in flight adapted): a slow
    // bus's calls take turns, a silent one's do not queue for timeout after timeout
    let stats = poller.publisher().stats();
    eprintln!(
        "drain against a bus that answers nothing: gave up after {:.1} s of virtual time, {} passes, {} calls, {} timed out",
        elapsed.as_secs_f64(),
        summary.passes,
        stats.publish_calls,
        stats.timed_out
    );
    assert!(!summary.complete, "{summary:?}");
    assert_eq!(model.pending(), 200);
    assert!(elapsed < Duration::from_secs(120), "{elapsed:?}");
}

/// Every shard of the default shard count: what `default_args` polls.
fn all_shards() -> StaticShards {
    StaticShards(
        outbox_shared::ShardCount::default()
            .shards()
            .map(outbox_shared::schema::PendingPartition::from)
            .collect(),
    )
}
