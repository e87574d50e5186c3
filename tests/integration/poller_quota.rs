//! The poller at the bus's quota, on the latency model (no emulator): a drain against a
//! `PutEvents` quota that throttles above 500 entries/s. It runs on tokio's paused clock, so the
//! quota, the model's 10 ms per call and the publisher's pacing all count virtual time: the
//! figures are the pacing's, whatever the machine's load.

use std::time::Duration;

use chrono::Utc;
use outbox_shared::ShardCount;
use outbox_shared::schema;
use outbox_tests::fixtures;
use outbox_tests::latency_model::LatencyModel;
use relay_poller::CancellationToken;
use relay_poller::app::{AwsClients, aws_poller};
use relay_poller::config::{RelayArgs, TableArgs};

const QUOTA: u32 = 500;
/// Long enough (40 s of quota) for the first burst, sent before the first throttle comes back,
/// to be a small part of the whole.
const EVENTS: usize = 20_000;

/// The poller's defaults (what `relay-poller drain` runs with), on the model's table and bus.
fn default_args() -> RelayArgs {
    RelayArgs {
        table: TableArgs {
            table_name: "quota-table".into(),
            index_name: schema::DEFAULT_INDEX_NAME.into(),
            shard_count: ShardCount::default(),
            shards: None,
        },
        publisher: fixtures::publisher_args("quota-bus"),
        retention: relay_runtime::RetentionArgs::default(),
        metrics: relay_runtime::metrics::MetricsArgs::default(),
        ttl_refresh_margin: relay_poller::DEFAULT_TTL_REFRESH_MARGIN,
        sweep_interval: relay_poller::DEFAULT_SWEEP_INTERVAL,
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

async fn drain_at_quota(args: &RelayArgs) -> AtQuota {
    let model = LatencyModel::new(Duration::from_millis(10));
    model.limit_put_events(QUOTA);
    model.seed_pending(&fixtures::pending_items(
        "quota-table",
        EVENTS,
        Utc::now() - chrono::Duration::minutes(1),
    ));
    let poller = aws_poller(
        AwsClients::new(&model.sdk_config()),
        &args.validate().expect("valid arguments"),
    )
    .expect("poller");

    let started = tokio::time::Instant::now();
    let summary = poller
        .drain(Duration::ZERO, 3, &CancellationToken::new())
        .await;
    let elapsed = started.elapsed();

    assert!(summary.complete, "{summary:?}");
    assert_eq!(model.pending(), 0, "every event published and marked");
    let (sent, throttled) = model.put_events_entries();
    assert_eq!(sent - throttled, EVENTS as u64, "each event accepted once");
    eprintln!(
        "drain at a {QUOTA}/s quota: {EVENTS} events in {:.1} s of virtual time, {sent} entries sent, {throttled} throttled, {} passes",
        elapsed.as_secs_f64(),
        summary.passes
    );
    AtQuota {
        events_per_second: EVENTS as f64 / elapsed.as_secs_f64(),
        throttled_ratio: throttled as f64 / sent as f64,
        entries_sent: sent,
    }
}

#[tokio::test(start_paused = true)]
async fn a_drain_at_the_bus_quota_adapts_its_rate_and_loses_nothing() {
    // Given 20,000 pending events, a bus that throttles above 500 entries/s, and a poller with
    // its defaults (no ceiling: it learns the quota from the throttling)
    let run = drain_at_quota(&default_args()).await;

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
    let run = drain_at_quota(&args).await;

    // Then it never exceeds it: nothing throttled, and the drain runs at the quota
    assert_eq!(run.entries_sent, EVENTS as u64, "no entry sent twice");
    let quota = f64::from(QUOTA);
    assert!(
        (run.events_per_second - quota).abs() <= 0.2 * quota,
        "{:.0} events/s against a ceiling of {QUOTA}/s",
        run.events_per_second
    );
}
