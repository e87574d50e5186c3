//! Benchmark of `relay-poller` (figures in docs/benchmarks.md, section `relay-poller`).
//!
//! 1. Emulator: 2,000 pending events over 16 shards published to a bus without rules, by the
//!    poller's drain and, side by side in the same run, by a classic polling publisher (each shard
//!    polled one small page at a time, one `PutEvents` and one update per event). Reports events per
//!    second and API calls per event by operation (counted by an SDK interceptor). What the
//!    relay does before its first publish, the start-up probes, is timed apart and printed under
//!    the drain's line (the drain's events per second leave it out).
//! 2. Latency model (10 ms per call, unlimited parallelism): events per second of one poller
//!    draining 20,000 events, to the classic bus and to a Custom Event Bus (100 entries a call),
//!    their runs interleaved.
//! 3. Latency model, a fleet: drain throughput of 1, 2 and 4 pollers splitting the 16 shards as
//!    their leases settle (16, 8 or 4 shards each), all in this process, with each poller polling
//!    16 shards at once (the default) and 4 at once (a small task), and the ratio to linear.
//!
//! The process runs on the relays' allocator (`relay_runtime::Allocator`), as the binaries do;
//! the latency model runs in it too, so the model's CPU is counted against the poller.
//!
//! The latency model waits on its exact clock (`LATENCY_MODEL_CLOCK=tokio` runs it on tokio's
//! timer, which adds about 1.2 ms to each call; see `latency_model::Clock`).
//!
//! 4. Emulator, global tables: API calls per event of a drain on a single-region table and on a
//!    global table's replica (the events stamped with the poller's region, `--regions` set).
//!
//! Rerun: `scripts/emulator.sh run -- cargo bench -p outbox-tests --bench poller`
//! (`POLLER_BENCH_RUNS` sets the runs per configuration, default 3; medians are reported;
//! `POLLER_BENCH_PARTS=model`, `=fleet`, `=emulator` or `=global` runs one part).
//! Without `--bench` (as `cargo test --benches` runs it) it does one small smoke run of each.

// The report is this benchmark's output.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{PutRequest, WriteRequest};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use chrono::Utc;
use futures::StreamExt;
use outbox_shared::schema::{self, attr};
use outbox_shared::{OutboundEvent, OutboxItem, ShardCount};
use outbox_tests::TestEnv;
use outbox_tests::fixtures;
use outbox_tests::latency_model::{Clock, LatencyModel};
use relay_poller::CancellationToken;
use relay_poller::aws::{AwsClients, aws_poller, aws_poller_with};
use relay_poller::config::{RelayArgs, ShardSelection, TableArgs};
use relay_runtime::{PublisherArgs, TargetKind};

/// The allocator the relay binaries declare, so this process measures what ships.
#[global_allocator]
static ALLOCATOR: relay_runtime::Allocator = relay_runtime::Allocator;

const EVENTS: usize = 2000;
/// Events of the one-poller run on the latency model: enough that the drain's fixed cost (its
/// last empty pass and sweep, a few round trips) is a small part of the time.
const MODEL_EVENTS: usize = 20_000;
const SMOKE_EVENTS: usize = 100;
/// The classic publisher's page: "one small page at a time".
const BASELINE_PAGE: i32 = 10;
/// `BatchWriteItem` takes at most 25 items.
const BATCH_WRITE_MAX: usize = 25;
const MODEL_DELAY: Duration = Duration::from_millis(10);

/// Counts SDK call attempts by operation name.
#[derive(Debug, Clone, Default)]
struct CallCounter(Arc<Mutex<BTreeMap<String, u64>>>);

impl Intercept for CallCounter {
    fn name(&self) -> &'static str {
        "CallCounter"
    }

    fn read_before_attempt(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(metadata) = cfg.load::<Metadata>() {
            *self
                .0
                .lock()
                .unwrap()
                .entry(metadata.name().to_owned())
                .or_default() += 1;
        }
        Ok(())
    }
}

impl CallCounter {
    fn take(&self) -> BTreeMap<String, u64> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

/// `env`'s DynamoDB and EventBridge clients, their calls counted by `counter`.
fn counted_clients(
    env: &TestEnv,
    counter: &CallCounter,
) -> (aws_sdk_dynamodb::Client, aws_sdk_eventbridge::Client) {
    let sdk = &env.sdk_config;
    (
        aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(sdk)
                .interceptor(counter.clone())
                .build(),
        ),
        aws_sdk_eventbridge::Client::from_conf(
            aws_sdk_eventbridge::config::Builder::from(sdk)
                .interceptor(counter.clone())
                .build(),
        ),
    )
}

/// The poller of `config` (a classic bus) on `env`, its DynamoDB and EventBridge calls counted by
/// `counter`.
fn counted_poller(
    env: &TestEnv,
    counter: &CallCounter,
    config: &relay_poller::RelayConfig,
) -> relay_poller::aws::AwsPoller {
    let (dynamodb, eventbridge) = counted_clients(env, counter);
    let clients = AwsClients {
        dynamodb,
        sqs: aws_sdk_sqs::Client::new(&env.sdk_config),
    };
    let publisher =
        outbox_tests::fixtures::classic_publisher(eventbridge, config.publisher.clone());
    aws_poller_with(clients, publisher, config).expect("poller")
}

async fn seed(env: &TestEnv, items: &[OutboxItem]) {
    futures::stream::iter(items.chunks(BATCH_WRITE_MAX))
        .for_each_concurrent(8, |chunk| async move {
            let mut requests: Vec<WriteRequest> = chunk
                .iter()
                .map(|item| {
                    WriteRequest::builder()
                        .put_request(
                            PutRequest::builder()
                                .set_item(Some(item.to_item().unwrap()))
                                .build()
                                .unwrap(),
                        )
                        .build()
                })
                .collect();
            while !requests.is_empty() {
                let out = env
                    .dynamodb
                    .batch_write_item()
                    .request_items(&env.table_name, requests)
                    .send()
                    .await
                    .expect("batch write");
                requests = out
                    .unprocessed_items()
                    .and_then(|u| u.get(&env.table_name))
                    .cloned()
                    .unwrap_or_default();
            }
        })
        .await;
}

fn relay_args(table: &str, bus: &str, dlq: &str) -> RelayArgs {
    relay_args_of(TargetKind::Classic, table, bus, dlq)
}

/// A Custom Event Bus's ARN on the latency model (any well-formed one: the model answers all).
const MODEL_CUSTOM_BUS: &str =
    "arn:aws:events:us-east-1:123456789012:event-busv2/model-bus/abcdefghij0123456789klmno";

/// The model's target of `kind` (a FIFO topic and queue: the model answers every target alike;
/// a FIFO one's entries carry a group and a de-duplication id, so they cost what they cost).
fn model_bus(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Classic => "model-bus",
        TargetKind::Custom => MODEL_CUSTOM_BUS,
        TargetKind::Sns => "arn:aws:sns:us-east-1:123456789012:model-topic.fifo",
        TargetKind::Sqs => "https://sqs.us-east-1.amazonaws.com/123456789012/model-queue.fifo",
        TargetKind::Kinesis => "arn:aws:kinesis:us-east-1:123456789012:stream/model-stream",
    }
}

fn relay_args_of(kind: TargetKind, table: &str, bus: &str, dlq: &str) -> RelayArgs {
    RelayArgs {
        table: TableArgs {
            table_name: table.to_owned(),
            index_name: schema::DEFAULT_INDEX_NAME.into(),
            shard_count: ShardCount::default(),
            shards: None,
            regions: relay_runtime::RegionArgs::default(),
        },
        publisher: PublisherArgs {
            publish_concurrency: 10,
            ..fixtures::publisher_args_of(kind, bus)
        },
        retention: relay_runtime::RetentionArgs::default(),
        metrics: relay_runtime::metrics::MetricsArgs::default(),
        ttl_refresh_margin: relay_poller::DEFAULT_TTL_REFRESH_MARGIN,
        sweep_interval: relay_poller::DEFAULT_SWEEP_INTERVAL,
        index_lag: relay_poller::DEFAULT_INDEX_LAG,
        dead_letter_queue_url: dlq.to_owned(),
        page_size: relay_poller::config::DEFAULT_PAGE_SIZE,
        shard_concurrency: 16,
        mark_concurrency: 32,
        idle_backoff_max: Duration::from_secs(5),
        shutdown_timeout: Duration::from_secs(5),
    }
}

/// One measured run: events per second and calls per event by operation.
#[derive(Debug)]
struct Run {
    events_per_second: f64,
    calls_per_event: BTreeMap<String, f64>,
    /// The start-up probes' wall time, for a drain that ran them (outside `events_per_second`).
    probes: Option<Duration>,
}

fn per_event(calls: BTreeMap<String, u64>, events: usize) -> BTreeMap<String, f64> {
    calls
        .into_iter()
        .map(|(op, n)| (op, n as f64 / events as f64))
        .collect()
}

async fn poller_on_emulator(events: usize) -> Run {
    poller_on_emulator_in(events, &[]).await
}

/// The regions of the global table of the `global` part: the environment's client is in the
/// first (`us-east-1`), whose poller drains.
const GLOBAL_REGIONS: [&str; 2] = ["us-east-1", "eu-west-1"];

/// A drain of `events` pending events on the emulator, as [`poller_on_emulator`]; with `regions`
/// (a global table's, the first the poller's own), the events are stamped with the first region
/// and pending under its partitions, as its writer writes them, and the poller is configured with
/// the regions (`--regions`).
async fn poller_on_emulator_in(events: usize, regions: &[&str]) -> Run {
    let env = TestEnv::new().await;
    let bus = env.create_bus_without_rules().await;
    let mut items = pending_items(&env.table_name, events);
    if let Some(own) = regions.first() {
        let own = outbox_shared::Region::new(*own).unwrap();
        for item in &mut items {
            let shard = schema::parse_pending_partition(item.gsi1pk.as_deref().unwrap())
                .unwrap()
                .shard;
            item.gsi1pk = Some(schema::regional_pending_shard_pk(&own, shard));
            item.origin_region = Some(own.clone());
        }
    }
    seed(&env, &items).await;
    let counter = CallCounter::default();
    let mut args = relay_args(&env.table_name, &bus, &env.dead_letter_queue_url);
    if !regions.is_empty() {
        args.table.regions = relay_runtime::RegionArgs::of(regions).unwrap();
    }
    let config = args.validate().unwrap();
    // What `drain` does before its first publish, timed apart from the drain: the start-up probes
    // (the table and its index, the bus, the dead-letter queue).
    let probing = Instant::now();
    relay_runtime::probe::each(
        &env.sdk_config,
        &relay_poller::probes::relay_probes(&config),
    )
    .await
    .expect("start-up probes");
    let probes = probing.elapsed();
    let poller = counted_poller(&env, &counter, &config);
    let started = Instant::now();
    let summary = poller
        .drain(
            &poller.partitions().fixed(),
            Duration::ZERO,
            3,
            &CancellationToken::new(),
        )
        .await;
    let elapsed = started.elapsed();
    assert!(
        summary.complete && summary.published == events as u64,
        "{summary:?}"
    );
    assert_eq!(env.pending_in_index().await, 0);
    Run {
        events_per_second: events as f64 / elapsed.as_secs_f64(),
        calls_per_event: per_event(counter.take(), events),
        probes: Some(probes),
    }
}

/// The classic polling publisher: shard by shard, a small page at a time, and per event one
/// `PutEvents` call and one conditional update, in sequence.
async fn baseline_on_emulator(events: usize) -> Run {
    let env = TestEnv::new().await;
    let bus = env.create_bus_without_rules().await;
    seed(&env, &pending_items(&env.table_name, events)).await;
    let counter = CallCounter::default();
    let (dynamodb, eventbridge) = counted_clients(&env, &counter);
    let before = schema::pending_sort_key(&outbox_shared::time::format_timestamp(Utc::now()), "");
    let started = Instant::now();
    let mut published = 0;
    for shard in ShardCount::default().shards() {
        loop {
            let page = dynamodb
                .query()
                .table_name(&env.table_name)
                .index_name(schema::DEFAULT_INDEX_NAME)
                .key_condition_expression("#pk = :pk AND #sk < :before")
                .expression_attribute_names("#pk", attr::GSI1PK)
                .expression_attribute_names("#sk", attr::GSI1SK)
                .expression_attribute_values(
                    ":pk",
                    aws_sdk_dynamodb::types::AttributeValue::S(schema::pending_shard_pk(shard)),
                )
                .expression_attribute_values(
                    ":before",
                    aws_sdk_dynamodb::types::AttributeValue::S(before.clone()),
                )
                .limit(BASELINE_PAGE)
                .send()
                .await
                .expect("query");
            if page.items().is_empty() {
                break;
            }
            for raw in page.items() {
                let item: OutboxItem = serde_dynamo::from_item(raw.clone()).unwrap();
                let event =
                    OutboundEvent::from_item(&item, &outbox_shared::envelope::Encoding::envelope())
                        .unwrap();
                let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                    .event_bus_name(&bus)
                    .source(outbox_tests::TEST_SOURCE)
                    .detail_type(&event.detail_type)
                    .detail(&event.detail)
                    .set_time(event.time)
                    .build();
                let out = eventbridge
                    .put_events()
                    .entries(entry)
                    .send()
                    .await
                    .expect("put events");
                assert_eq!(out.failed_entry_count(), 0);
                // The classic mark: one conditional UpdateItem per event.
                dynamodb
                    .update_item()
                    .table_name(&env.table_name)
                    .key(
                        attr::PK,
                        aws_sdk_dynamodb::types::AttributeValue::S(item.pk.clone()),
                    )
                    .key(
                        attr::SK,
                        aws_sdk_dynamodb::types::AttributeValue::S(item.sk.clone()),
                    )
                    .update_expression("SET #status = :published REMOVE #gsi1pk, #gsi1sk")
                    .condition_expression("attribute_exists(#gsi1pk)")
                    .expression_attribute_names("#status", attr::STATUS)
                    .expression_attribute_names("#gsi1pk", attr::GSI1PK)
                    .expression_attribute_names("#gsi1sk", attr::GSI1SK)
                    .expression_attribute_values(
                        ":published",
                        aws_sdk_dynamodb::types::AttributeValue::S("PUBLISHED".into()),
                    )
                    .send()
                    .await
                    .expect("mark");
                published += 1;
            }
        }
    }
    let elapsed = started.elapsed();
    assert_eq!(published, events);
    Run {
        events_per_second: events as f64 / elapsed.as_secs_f64(),
        calls_per_event: per_event(counter.take(), events),
        probes: None,
    }
}

/// Shards of the Kinesis stream whose write quota (1,000 records a second a shard) the model
/// enforces in the benchmark's quota-bound configuration.
const MODEL_STREAM_SHARDS: u32 = 4;

/// One drain of `events` on the latency model's target of `kind`; with `shards`, a stream that
/// takes 1,000 records a second a shard ([`LatencyModel::limit_stream_writes`]).
async fn poller_on_latency_model(kind: TargetKind, events: usize, shards: Option<u32>) -> Run {
    let model = LatencyModel::new(MODEL_DELAY).with_clock(Clock::for_benchmarks());
    if let Some(shards) = shards {
        model.limit_stream_writes(shards);
    }
    model.seed_pending(&pending_items("model-table", events));
    let sdk = model.sdk_config();
    let config = relay_args_of(
        kind,
        "model-table",
        model_bus(kind),
        "http://model.invalid/dlq",
    )
    .validate()
    .unwrap();
    let poller = aws_poller(&sdk, &config).unwrap();
    let started = Instant::now();
    let summary = poller
        .drain(
            &poller.partitions().fixed(),
            Duration::ZERO,
            3,
            &CancellationToken::new(),
        )
        .await;
    let elapsed = started.elapsed();
    assert!(
        summary.complete && summary.published == events as u64,
        "{summary:?}"
    );
    assert_eq!(model.pending(), 0);
    Run {
        events_per_second: events as f64 / elapsed.as_secs_f64(),
        calls_per_event: per_event(model.calls(), events),
        probes: None,
    }
}

/// `pollers` pollers draining `events` together on the latency model, each on its share of the
/// 16 shards (what their leases settle to), polling `shard_concurrency` of them at once.
async fn fleet_on_latency_model(events: usize, pollers: u16, shard_concurrency: usize) -> Run {
    let model = LatencyModel::new(MODEL_DELAY).with_clock(Clock::for_benchmarks());
    model.seed_pending(&pending_items("model-table", events));
    let sdk = model.sdk_config();
    let each = ShardCount::default().get() / pollers;
    let fleet: Vec<_> = (0..pollers)
        .map(|i| {
            let mut args = relay_args("model-table", "model-bus", "http://model.invalid/dlq");
            let shards: ShardSelection = format!("{}-{}", i * each, (i + 1) * each - 1)
                .parse()
                .unwrap();
            args.table.shards = Some(shards);
            args.shard_concurrency = shard_concurrency;
            let config = args.validate().unwrap();
            let poller = aws_poller(&sdk, &config).unwrap();
            let shards = poller.partitions().fixed();
            (poller, shards)
        })
        .collect();
    let cancel = CancellationToken::new();
    let started = Instant::now();
    let summaries = futures::future::join_all(
        fleet
            .iter()
            .map(|(poller, shards)| poller.drain(shards, Duration::ZERO, 3, &cancel)),
    )
    .await;
    let elapsed = started.elapsed();
    let published: u64 = summaries.iter().map(|s| s.published).sum();
    assert!(
        summaries.iter().all(|s| s.complete) && published == events as u64,
        "{summaries:?}"
    );
    assert_eq!(model.pending(), 0);
    Run {
        events_per_second: events as f64 / elapsed.as_secs_f64(),
        calls_per_event: per_event(model.calls(), events),
        probes: None,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn report(name: &str, runs: &[Run]) -> f64 {
    let eps = median(runs.iter().map(|r| r.events_per_second).collect());
    let mut ops: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for run in runs {
        for (op, n) in &run.calls_per_event {
            ops.entry(op.clone()).or_default().push(*n);
        }
    }
    let calls: Vec<String> = ops
        .into_iter()
        .map(|(op, values)| format!("{op} {:.3}", median(values)))
        .collect();
    let each: Vec<String> = runs
        .iter()
        .map(|r| format!("{:.0}", r.events_per_second))
        .collect();
    println!(
        "{name:<34} median {eps:>7.0} events/s  (runs: {})  calls/event: {}",
        each.join(", "),
        calls.join(", ")
    );
    let probes: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.probes)
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    if !probes.is_empty() {
        println!(
            "{:<34} start-up probes before it (not in its events/s): median {:.0} ms",
            "",
            median(probes)
        );
    }
    eps
}

#[tokio::main]
async fn main() {
    let bench = std::env::args().any(|a| a == "--bench");
    let (events, runs) = if bench {
        let runs = std::env::var("POLLER_BENCH_RUNS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(3);
        (EVENTS, runs)
    } else {
        (SMOKE_EVENTS, 1)
    };
    println!("relay-poller benchmark: {events} events over 16 shards, {runs} run(s) each");
    // POLLER_BENCH_PARTS=model, =fleet, =emulator or =global runs one part (default: all).
    let parts = std::env::var("POLLER_BENCH_PARTS").unwrap_or_default();
    let (model, fleet, emulator) = match parts.as_str() {
        "model" => (true, false, false),
        "fleet" => (false, true, false),
        "emulator" => (false, false, true),
        "global" => (false, false, false),
        _ => (true, true, true),
    };
    if parts == "global" || parts.is_empty() {
        run_global_on_emulator(events, runs).await;
    }
    if model {
        run_on_latency_model(if bench { MODEL_EVENTS } else { events }, runs).await;
    }
    if fleet {
        run_fleet_on_latency_model(events, runs, if bench { &[1, 2, 4] } else { &[1, 2] }).await;
    }
    if emulator {
        run_on_emulator(events, runs).await;
    }
}

async fn run_on_latency_model(events: usize, runs: usize) {
    // Interleaved, so every kind sees the same machine. POLLER_BENCH_TARGETS=sns,sqs runs those
    // kinds only (default: all five).
    let only = std::env::var("POLLER_BENCH_TARGETS").unwrap_or_default();
    // Kinesis twice: with no quota (the relay's own ceiling, as for the others) and as a stream
    // of MODEL_STREAM_SHARDS shards at AWS's documented 1,000 records a second each.
    let kinds: Vec<(TargetKind, Option<u32>)> = [
        (TargetKind::Classic, None),
        (TargetKind::Custom, None),
        (TargetKind::Sns, None),
        (TargetKind::Sqs, None),
        (TargetKind::Kinesis, None),
        (TargetKind::Kinesis, Some(MODEL_STREAM_SHARDS)),
    ]
    .into_iter()
    .filter(|(kind, _)| only.is_empty() || only.split(',').any(|k| k == kind.to_string()))
    .collect();
    let mut runs_of: Vec<Vec<Run>> = kinds.iter().map(|_| Vec::new()).collect();
    for _ in 0..runs {
        for ((kind, shards), runs) in kinds.iter().zip(runs_of.iter_mut()) {
            runs.push(poller_on_latency_model(*kind, events, *shards).await);
        }
    }
    for ((kind, shards), runs) in kinds.iter().zip(&runs_of) {
        let quota = shards.map_or(String::new(), |shards| {
            format!(", {shards} shards at 1,000 records/s each")
        });
        report(
            &format!(
                "latency model (10 ms/call): poller, {events} events, target {kind} ({}){quota}",
                model_bus(*kind)
            ),
            runs,
        );
    }
}

async fn run_fleet_on_latency_model(events: usize, runs: usize, sizes: &[u16]) {
    for shard_concurrency in [16, 4] {
        let mut one = None;
        for &pollers in sizes {
            // Interleaved with nothing else: each configuration's runs back to back.
            let mut fleet_runs = Vec::new();
            for _ in 0..runs {
                fleet_runs.push(fleet_on_latency_model(events, pollers, shard_concurrency).await);
            }
            let name = format!("fleet: {pollers} poller(s), {shard_concurrency} shards at once");
            let eps = report(&name, &fleet_runs);
            let base = *one.get_or_insert(eps);
            println!(
                "{:<34} {:.2}x one poller, {:.0} % of linear",
                "",
                eps / base,
                100.0 * eps / (base * f64::from(pollers))
            );
        }
    }
}

async fn run_on_emulator(events: usize, runs: usize) {
    let (mut baseline, mut poller) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        baseline.push(baseline_on_emulator(events).await);
        poller.push(poller_on_emulator(events).await);
    }
    let base = report("emulator: classic baseline", &baseline);
    let ours = report("emulator: relay-poller drain", &poller);
    println!("emulator speed-up over the baseline: {:.2}x", ours / base);
}

/// Calls per event of a drain on a single-region table and on a global table's replica (the
/// events written in the poller's region, `--regions` set), interleaved (docs/benchmarks.md,
/// "Global tables").
async fn run_global_on_emulator(events: usize, runs: usize) {
    let (mut single, mut global) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        single.push(poller_on_emulator_in(events, &[]).await);
        global.push(poller_on_emulator_in(events, &GLOBAL_REGIONS).await);
    }
    report("emulator: drain, single-region table", &single);
    report(
        &format!(
            "emulator: drain, global table ({}), its own region's events",
            GLOBAL_REGIONS.join(",")
        ),
        &global,
    );
}

/// `count` pending events, one per aggregate, created a minute ago.
fn pending_items(table: &str, count: usize) -> Vec<OutboxItem> {
    fixtures::pending_items(table, count, Utc::now() - chrono::Duration::minutes(1))
}
