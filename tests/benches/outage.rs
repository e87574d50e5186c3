//! Recovery from a bus outage in hold mode, on the latency model (figures in docs/benchmarks.md,
//! "Recovery at outage scale").
//!
//! Orders arrive at 100 a second for the whole run, one `OrderCreated` each, and a fifth of the
//! events are a status change of an order created in the minutes before (the aggregate's next
//! sequence). Each second's events are written to the table (seeded into the model's index) and
//! handed to the stream relay as one batch, in hold mode, as the template runs it. For the first
//! 30 minutes the bus fails every `PutEvents` call (HTTP 500), so the stream relay holds every
//! aggregate and leaves its events to the poller; then it recovers. A poller runs throughout, as
//! the service does (passes back to back while there is work, a capped backoff otherwise, a 30 s
//! grace period), with the defaults that ship. The bus has a quota of 2,400 entries a second
//! (EventBridge's default `PutEvents` quota in most regions), which both relays share.
//!
//! Measured, from the end of the outage until nothing written before it is pending and no hold is
//! left: the time, the events published per second against the quota, the largest item the
//! relays wrote, the reads per released hold, and what a consumer saw (`out_of_order`,
//! duplicates).
//!
//! Compressed time: the whole run is on tokio's paused clock, so the model's latency (10 ms a
//! call), the SDK's and the relays' backoffs, the quota and the arrivals all run in virtual time,
//! and a 30-minute outage takes as long as the CPU needs for its 180,000 events. The figures are
//! virtual seconds: they measure the relays' pacing and round trips, not this machine's CPU.
//!
//! Run: `cargo bench -p outbox-tests --bench outage` (no emulator; `OUTAGE_BENCH_MINUTES` sets the
//! outage, default 30; `OUTAGE_BENCH_KINDS=classic` or `=custom` runs one bus kind).

// The report is this benchmark's output.
#![allow(clippy::print_stdout)]

use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_shared::schema;
use outbox_shared::{NewOutboxEvent, OutboxConfig, OutboxItem};
use outbox_tests::fixtures;
use outbox_tests::latency_model::LatencyModel;
use relay_poller::CancellationToken;
use relay_runtime::{Deadline, PublisherArgs, TargetKind};
use tokio::time::Instant;

/// The allocator the relay binaries declare, so this process measures what ships.
#[global_allocator]
static ALLOCATOR: relay_runtime::Allocator = relay_runtime::Allocator;

const TABLE: &str = "model-table";
const ORDERS_PER_SECOND: usize = 100;
/// EventBridge's default `PutEvents` quota in most regions, entries a second.
const QUOTA: u32 = 2_400;
const LATENCY: Duration = Duration::from_millis(10);
/// One event in this many is a status change of an earlier order.
const UPDATE_EVERY: usize = 5;
/// A status change is of an order created within this many seconds before.
const UPDATE_WINDOW: usize = 300;

/// A Custom Event Bus's ARN on the latency model (any well-formed one: the model answers all).
const MODEL_CUSTOM_BUS: &str =
    "arn:aws:events:us-east-1:123456789012:event-busv2/model-bus/abcdefghij0123456789klmno";

fn bus_of(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Classic => "model-bus",
        TargetKind::Custom => MODEL_CUSTOM_BUS,
        other => unreachable!("the outage bench runs on the two buses, not {other}"),
    }
}

/// The orders' events, second by second: a deterministic mix of new orders and status changes.
struct Orders {
    config: OutboxConfig,
    /// When second 0 is.
    t0: DateTime<Utc>,
    /// Orders so far and their last sequence, by creation second.
    created: Vec<(String, u64)>,
    /// A linear congruential generator's state (deterministic runs).
    seed: u64,
}

impl Orders {
    fn new(t0: DateTime<Utc>) -> Self {
        Self {
            config: OutboxConfig::new(TABLE),
            t0,
            created: Vec::new(),
            seed: 0x5eed,
        }
    }

    fn next_random(&mut self) -> usize {
        self.seed = self
            .seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        usize::try_from(self.seed >> 33).expect("31 bits")
    }

    /// Second `second`'s events.
    fn second(&mut self, second: usize) -> Vec<OutboxItem> {
        (0..ORDERS_PER_SECOND)
            .map(|i| {
                let n = second * ORDERS_PER_SECOND + i;
                let recent = (UPDATE_WINDOW * ORDERS_PER_SECOND).min(self.created.len());
                let (aggregate, sequence) = if n.is_multiple_of(UPDATE_EVERY) && recent > 0 {
                    let pick = self.created.len() - 1 - self.next_random() % recent;
                    let order = &mut self.created[pick];
                    order.1 += 1;
                    order.clone()
                } else {
                    self.created.push((format!("order-{n}"), 1));
                    self.created.last().expect("pushed").clone()
                };
                let event = NewOutboxEvent {
                    partition_key: schema::user_pk(&format!("user-{}", n % 997)),
                    event_type: if sequence == 1 {
                        "OrderCreated".into()
                    } else {
                        "OrderStatusChanged".into()
                    },
                    aggregate_type: "Order".into(),
                    aggregate_id: aggregate.clone(),
                    sequence: Some(sequence),
                    payload: serde_json::json!({"orderId": aggregate, "version": sequence}),
                    trace_header: None,
                    trace_context: None,
                };
                let at = self.t0
                    + chrono::Duration::seconds(i64::try_from(second).expect("seconds"))
                    + chrono::Duration::milliseconds(i64::try_from(i * 10).expect("ms"));
                OutboxItem::pending(event, &self.config, at).expect("a valid event")
            })
            .collect()
    }
}

/// What one run measured.
#[derive(Debug)]
struct Outcome {
    events: usize,
    left_to_hold: u64,
    holds_at_recovery: usize,
    /// Events pending at the recovery that were past the grace period (what the poller could
    /// publish at once).
    backlog_at_recovery: usize,
    /// From the recovery until that backlog was published.
    drain_seconds: f64,
    /// Entries the bus accepted a second in that time (both relays).
    events_per_second: f64,
    /// From the recovery until nothing written before it was pending and no hold was left.
    recovery_seconds: f64,
    largest_item: usize,
    hold_items_read_per_release: f64,
    event_reads_per_release: f64,
    released: u64,
    out_of_order: u64,
    duplicates: u64,
    delivered: u64,
}

async fn run(kind: TargetKind, outage_seconds: usize) -> Outcome {
    let model = LatencyModel::new(LATENCY);
    model.limit_put_events(QUOTA);
    model.track_order();
    model.fail_put_events(true);
    let sdk = model.sdk_config();
    let publisher = PublisherArgs {
        source: "bench.orders".into(),
        ..fixtures::publisher_args_of(kind, bus_of(kind))
    };
    let mut stream_args = fixtures::stream_relay_args(TABLE, publisher.clone());
    stream_args.hold_failed_aggregates = true;
    stream_args.dead_letter_queue_url = Some("http://model.invalid/dlq".into());
    let stream = relay_stream::build_relay(&stream_args, &sdk).expect("valid stream relay");
    let cli = <relay_poller::Cli as clap::Parser>::try_parse_from([
        "relay-poller",
        "run",
        "--table-name",
        TABLE,
        "--event-bus-kind",
        &kind.to_string(),
        "--event-bus-name",
        bus_of(kind),
        "--source",
        "bench.orders",
        "--dead-letter-queue-url",
        "http://model.invalid/dlq",
    ])
    .expect("valid poller flags");
    let relay_poller::Command::Run(run_args) = cli.command else {
        panic!("parsed a run")
    };
    let grace = run_args.grace_period;
    let config = run_args.relay.validate().expect("valid poller config");
    let poller = relay_poller::aws::aws_poller(&sdk, &config).expect("valid poller");
    let shards = poller.partitions().fixed();

    // The virtual clock's second 0 is the wall clock's `t0`: events carry it as `CreatedAt`, and
    // the poller's cutoff is read off the virtual clock.
    let t0 = Utc::now() - chrono::Duration::days(1);
    let start = Instant::now();
    let virtual_now = move || t0 + chrono::Duration::from_std(start.elapsed()).expect("a duration");
    let recovery = start + Duration::from_secs(u64::try_from(outage_seconds).expect("seconds"));
    let sort_key_at = |second: i64| {
        schema::pending_sort_key(
            &outbox_shared::time::format_timestamp(t0 + chrono::Duration::seconds(second)),
            "",
        )
    };
    let outage_end = i64::try_from(outage_seconds).expect("seconds");
    // What was written before the recovery, and what was past the grace period then.
    let recovered_sort_key = sort_key_at(outage_end);
    let eligible_sort_key =
        sort_key_at(outage_end - i64::try_from(grace.as_secs()).expect("seconds"));

    // The writers and the stream: each second's events written, then handed to the stream relay
    // as one batch (it falls behind when a batch takes longer than a second, as a stream does).
    let done = CancellationToken::new();
    let (batches_tx, mut batches_rx) = tokio::sync::mpsc::unbounded_channel::<Vec<OutboxItem>>();
    let writer = {
        let (model, done) = (model.clone(), done.clone());
        async move {
            let mut orders = Orders::new(t0);
            let mut written = 0;
            for second in 0.. {
                tokio::time::sleep_until(start + Duration::from_secs(second)).await;
                if done.is_cancelled() {
                    break;
                }
                let items = orders.second(usize::try_from(second).expect("seconds"));
                model.seed_pending(&items);
                written += items.len();
                if batches_tx.send(items).is_err() {
                    break;
                }
            }
            written
        }
    };
    let stream_relay = async {
        let mut left_to_hold = 0;
        let mut sequence = 0;
        while let Some(items) = batches_rx.recv().await {
            let records: Vec<_> = items
                .iter()
                .map(|item| {
                    sequence += 1;
                    fixtures::insert_record(item, sequence)
                })
                .collect();
            left_to_hold += stream
                .handle(&records, Deadline::NONE)
                .await
                .counts()
                .left_to_hold;
        }
        left_to_hold
    };
    let outage = {
        let model = model.clone();
        let eligible_sort_key = eligible_sort_key.clone();
        async move {
            tokio::time::sleep_until(recovery).await;
            let holds = model.hold_report().holds;
            let backlog = model.pending_before(&eligible_sort_key);
            let (entries, throttled) = model.put_events_entries();
            model.fail_put_events(false);
            (holds, backlog, entries - throttled)
        }
    };
    // The poller's loop, as `run`'s, its cutoff on the virtual clock; it ends once, after the
    // recovery, nothing written before it is pending and no hold is left.
    let polling = {
        let (model, done, poller, shards) = (model.clone(), done.clone(), &poller, &shards);
        let (recovered_sort_key, eligible_sort_key) =
            (recovered_sort_key.clone(), eligible_sort_key.clone());
        async move {
            let cancel = CancellationToken::new();
            let mut pause = Duration::from_millis(100);
            let mut drained = None;
            loop {
                let cutoff = virtual_now() - chrono::Duration::from_std(grace).expect("grace");
                let stats = poller.pass(shards, cutoff, &cancel).await;
                let now = Instant::now();
                if now >= recovery
                    && drained.is_none()
                    && model.pending_before(&eligible_sort_key) == 0
                {
                    let (entries, throttled) = model.put_events_entries();
                    drained = Some((now, entries - throttled));
                }
                if now >= recovery
                    && model.pending_before(&recovered_sort_key) == 0
                    && model.hold_report().holds == 0
                {
                    done.cancel();
                    return (now, drained.expect("drained before recovered"));
                }
                if stats.outcome() == relay_poller::poller::PassOutcome::Progress {
                    pause = Duration::from_millis(100);
                } else {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(config.idle_backoff_max);
                }
            }
        }
    };
    let (
        written,
        left_to_hold,
        (holds_at_recovery, backlog_at_recovery, accepted_at_recovery),
        (ended, (drained, accepted_when_drained)),
    ) = tokio::join!(writer, stream_relay, outage, polling);

    let drain_seconds = (drained - recovery).as_secs_f64();
    let order = model.order_report();
    let holds = model.hold_report();
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52
    Outcome {
        events: written,
        left_to_hold,
        holds_at_recovery,
        backlog_at_recovery,
        drain_seconds,
        events_per_second: (accepted_when_drained - accepted_at_recovery) as f64 / drain_seconds,
        recovery_seconds: (ended - recovery).as_secs_f64(),
        largest_item: holds.largest_item,
        hold_items_read_per_release: holds.items_read as f64 / holds.released.max(1) as f64,
        event_reads_per_release: holds.event_keys_read as f64 / holds.released.max(1) as f64,
        released: holds.released,
        out_of_order: order.out_of_order,
        duplicates: order.duplicates,
        delivered: order.delivered,
    }
}

fn main() {
    let minutes: usize = std::env::var("OUTAGE_BENCH_MINUTES")
        .ok()
        .map_or(30, |m| m.parse().expect("OUTAGE_BENCH_MINUTES is a number"));
    let kinds: Vec<TargetKind> = match std::env::var("OUTAGE_BENCH_KINDS").as_deref() {
        Ok("classic") => vec![TargetKind::Classic],
        Ok("custom") => vec![TargetKind::Custom],
        _ => vec![TargetKind::Classic, TargetKind::Custom],
    };
    for kind in kinds {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("runtime");
        let cpu = std::time::Instant::now();
        let outcome = runtime.block_on(run(kind, minutes * 60));
        println!(
            "outage of {minutes} min at {ORDERS_PER_SECOND} orders/s, {kind} bus, quota {QUOTA} entries/s (virtual time; {:.0} s of CPU): \
             {} events written, {} left to holds, {} holds and {} events past the grace period pending at recovery; \
             those published in {:.1} s, {:.0} events/s accepted ({:.0} % of the quota); \
             nothing written before the recovery pending and no hold after {:.1} s; \
             largest item written {} bytes; per released hold ({}): {:.2} hold items read, {:.2} event reads; \
             consumer: {} delivered, {} duplicates, {} out of order",
            cpu.elapsed().as_secs_f64(),
            outcome.events,
            outcome.left_to_hold,
            outcome.holds_at_recovery,
            outcome.backlog_at_recovery,
            outcome.drain_seconds,
            outcome.events_per_second,
            outcome.events_per_second * 100.0 / f64::from(QUOTA),
            outcome.recovery_seconds,
            outcome.largest_item,
            outcome.released,
            outcome.hold_items_read_per_release,
            outcome.event_reads_per_release,
            outcome.delivered,
            outcome.duplicates,
            outcome.out_of_order,
        );
    }
}
