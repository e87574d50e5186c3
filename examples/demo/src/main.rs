//! `outbox-demo`: the main job end to end on the local emulators, consumed as a user consumes it.
//!
//! 1. writes N orders through `create_order_with_outbox`, paced at `--rate` orders per second,
//!    and for `--follow-up-percent` of them two status changes through the writer's
//!    optimistic-concurrency update (so those aggregates have three events), while
//!    `relay-stream-local` relays them: the measured window, whose latencies are the relay's;
//! 2. writes the `--large-order-percent` of them that are large apart, after the measured ones
//!    (DynamoDB Local takes about a second on a large item, and every write meanwhile waits),
//!    their payloads through the payload bucket (the claim check): about 300 KB of lines, which
//!    the relays store in S3 when they publish them, and about 1 MiB, written with the writer's
//!    general transaction, which stores them in S3 first;
//! 3. stops the stream relay (a simulated stream outage) and writes more orders (large ones
//!    among them);
//! 4. backfills those with `relay-poller drain`;
//! 5. consumes the rest of what the target delivered. From phase 3 on, the demo's consumer
//!    ([`consumer`]: `outbox_consumer::BatchProcessor` with the idempotency store, and with each
//!    aggregate's order restored on the classic bus) is handed what the sink queue or the stream
//!    delivered, as a Lambda's event source hands it, and what it does not acknowledge is
//!    delivered again; before, the deliveries are only counted, so its DynamoDB calls (on the
//!    same DynamoDB Local) stay out of the relay's figures. The summary: written, published, delivered (out of order as delivered,
//!    missing: must be 0), de-duplicated by the bus, dead-lettered; what the consumer received,
//!    applied, answered as duplicates, held for order, and applied out of order or twice (must be
//!    0); the live relay's latency (write to published, the relay's own; write to delivery on
//!    the consumer side) over the measured window, the large orders' apart; calls to the target;
//!    and the large orders: written, their payloads stored by the writer and by the relays,
//!    delivered in S3 or inline, and read back with `outbox_consumer::PayloadResolver` and
//!    checked (size, SHA-256, the lines written).
//!
//! It exits non-zero if any event is missing or never applied, applied twice or out of order, or
//! any large order's payload fails its check. Run it with `make demo`, which installs and starts
//! the emulators first; every child process is stopped on exit, ctrl-c included. The relays' logs
//! and metrics go to files in `--log-dir`, not into the summary.

// The summary (table and JSON line) is this program's output.
#![allow(clippy::print_stdout)]

mod cli;
mod consumer;
mod deliveries;
mod env;
mod global_table;
mod orders;
mod payloads;
mod progress;
mod relays;
mod replicator;
mod summary;

use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{MultiProgress, ProgressDrawTarget};
use outbox_consumer::PayloadResolver;
use outbox_shared::OutboxConfig;
use outbox_writer::{OutboxWriter, WriterConfig};
use tokio::sync::watch;

use crate::cli::Args;
use crate::consumer::Consumer;
use crate::deliveries::{read_deliveries, relay_lags};
use crate::env::{SOURCE, provision};
use crate::orders::{LargeOrder, OrderMix, events_of, write_orders};
use crate::payloads::check_payloads;
use crate::progress::{bar, phase};
use crate::relays::{
    PublishedCount, relay_binary, relay_log, spawn_relay, stop_relay, stop_relay_when_done,
    wait_until_reading, watch_published,
};
use crate::summary::{Delivered, Summary, Written, print_summary, succeeded, summarize};

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse_checked();
    if args.regions > 1 {
        return main_regions(&args).await;
    }
    let outcome = tokio::select! {
        outcome = run(&args) => outcome,
        _ = tokio::signal::ctrl_c() => {
            // Dropping `run` drops its child handles, which kills them (kill_on_drop).
            eprintln!("outbox-demo: interrupted; stopped the relays");
            return ExitCode::from(130);
        }
    };
    match outcome {
        Ok(summary) if succeeded(&summary) => ExitCode::SUCCESS,
        Ok(summary) => {
            if summary.missing > 0 {
                eprintln!("outbox-demo: {} events missing", summary.missing);
            }
            if summary.not_applied > 0 {
                eprintln!(
                    "outbox-demo: {} events never applied by the consumer",
                    summary.not_applied
                );
            }
            if summary.applied_twice > 0 || summary.applied_out_of_order > 0 {
                eprintln!(
                    "outbox-demo: the consumer applied {} events twice and {} out of order",
                    summary.applied_twice, summary.applied_out_of_order
                );
            }
            if summary.payload_failures > 0 {
                eprintln!(
                    "outbox-demo: {} large orders' payloads failed their check",
                    summary.payload_failures
                );
            }
            ExitCode::FAILURE
        }
        Err(err) => match err.downcast_ref::<relay_runtime::probe::Unusable>() {
            // What the demo cannot use is one line as it is, and the code of a misconfiguration.
            Some(unusable) => {
                eprintln!("outbox-demo: {unusable}");
                ExitCode::from(relay_runtime::probe::EXIT_MISCONFIGURED)
            }
            None => {
                eprintln!("outbox-demo: {err:#}");
                ExitCode::FAILURE
            }
        },
    }
}

/// `--regions 2`: the two-region run ([`global_table`]), its summary, and its exit code (1 when
/// an event is missing or out of order).
async fn main_regions(args: &Args) -> ExitCode {
    let outcome = tokio::select! {
        outcome = run_regions(args) => outcome,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("outbox-demo: interrupted; stopped the relays");
            return ExitCode::from(130);
        }
    };
    match outcome {
        Ok(summary) if global_table::succeeded(&summary) => ExitCode::SUCCESS,
        Ok(summary) => {
            eprintln!(
                "outbox-demo: {} events missing, {} out of order",
                summary.overall.missing, summary.overall.out_of_order
            );
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("outbox-demo: {err:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run_regions(args: &Args) -> Result<global_table::RegionsSummary> {
    let (bin_dir, log_dir) = directories(args)?;
    let stream = relay_binary(&bin_dir, "relay-stream-local")?;
    let poller = relay_binary(&bin_dir, "relay-poller")?;
    let summary = global_table::run(
        args,
        &global_table::RelayBinaries {
            stream: &stream,
            poller: &poller,
        },
        &log_dir,
    )
    .await?;
    global_table::print_summary(&summary, &log_dir);
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    }
    Ok(summary)
}

/// Where the relay binaries are (`--bin-dir`, or beside this one) and the relays' logs go
/// (`--log-dir`, or a new temporary directory), created.
fn directories(args: &Args) -> Result<(std::path::PathBuf, std::path::PathBuf)> {
    let bin_dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("this binary has no directory")?
            .to_path_buf(),
    };
    let log_dir = match &args.log_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("outbox-demo-{}", uuid::Uuid::now_v7().simple())),
    };
    std::fs::create_dir_all(&log_dir)
        .with_context(|| format!("creating the log directory {}", log_dir.display()))?;
    Ok((bin_dir, log_dir))
}

/// The measured window's writer and the stream relay's progress, for its two parts (the warm-up,
/// then the measured orders).
struct Relaying<'a> {
    writer: &'a OutboxWriter,
    args: &'a Args,
    mix: OrderMix,
    written_bar: &'a indicatif::ProgressBar,
    published: &'a mut PublishedCount,
    published_bar: &'a indicatif::ProgressBar,
    relay: &'a mut tokio::process::Child,
}

impl Relaying<'_> {
    /// Writes `orders` at the rate while the stream relay publishes, until it has published
    /// `published` events since the window's first order (or the timeout passed).
    async fn write(
        &mut self,
        orders: &[u64],
        published: u64,
    ) -> (Result<orders::WrittenEvents>, Result<()>) {
        tokio::join!(
            write_orders(
                self.writer,
                orders,
                Some(self.args.rate),
                self.args.concurrency,
                self.mix,
                self.written_bar
            ),
            watch_published(
                self.published,
                0,
                published,
                self.args.timeout.into(),
                self.published_bar,
                self.relay
            ),
        )
    }
}

async fn run(args: &Args) -> Result<Summary> {
    let started = Instant::now();
    let (bin_dir, log_dir) = directories(args)?;
    let stream_bin = relay_binary(&bin_dir, "relay-stream-local")?;
    let poller_bin = relay_binary(&bin_dir, "relay-poller")?;
    let env = &provision(args).await?;
    let outbox = OutboxConfig {
        shard_count: args.shard_count,
        ..OutboxConfig::new(&env.stack.table_name)
    };
    // With the payload bucket, the writer stores first the payloads too large for an item.
    let writer = OutboxWriter::with_s3(
        env.dynamodb.clone(),
        env.s3.clone(),
        WriterConfig {
            payload_bucket: env.payload_bucket.clone(),
            ..WriterConfig::new(outbox, SOURCE)
        },
    )
    .context("writer configuration")?;
    let mix = OrderMix {
        follow_up_percent: args.follow_up_percent,
        // `Args::parse_checked` refused large orders without a payload bucket.
        large_order_percent: args.large_order_percent,
    };
    let outage_orders = args.outage_orders.unwrap_or((args.orders / 5).max(1));
    let bars = MultiProgress::with_draw_target(ProgressDrawTarget::stderr());
    // The orders the stream relay relays: those measured, then the large ones apart, so the
    // emulator's time on a large item (DynamoDB Local takes about a second on one) does not hold
    // up the measured orders written meanwhile.
    let live = LargeOrder::select(0..args.orders, args.large_order_percent, false);
    // The first of them warm the emulators, relayed before the measured window and not measured
    // (`--warm-up-percent`).
    let warm_up_orders = usize::try_from(args.orders * args.warm_up_percent / 100)
        .unwrap_or(usize::MAX)
        .min(live.len());
    let (warm_up, measured) = live.split_at(warm_up_orders);
    let large_live = LargeOrder::select(0..args.orders, args.large_order_percent, true);
    let consumer = Arc::new(Consumer::provision(env).await?);

    // Phase 1: the stream relay relays orders while they are written.
    phase(&format!(
        "1/5 writing {} orders at {} orders/s while relay-stream-local relays them \
         (the first {} warm the emulators, not measured)",
        live.len(),
        args.rate,
        warm_up.len()
    ));
    let mut stream_relay = spawn_relay(
        &stream_bin,
        &[
            "--from",
            "trim-horizon",
            "--batch-size",
            &args.batch_size.to_string(),
        ],
        env,
        args,
        &log_dir,
    )?;
    // The measured window starts once the relay reads the stream, as a running relay does: its
    // start-up (probes, the shard list) is not its lag.
    wait_until_reading(
        &mut stream_relay,
        &relay_log(&log_dir, "relay-stream-local"),
        args.timeout.into(),
    )
    .await?;
    // The stream relay's progress, from its log: what the target delivered is consumed once
    // the relay's part is over, and nothing meanwhile asks the emulators for it.
    let mut published = PublishedCount::new(relay_log(&log_dir, "relay-stream-local"));
    let warm_up_events = events_of(warm_up.iter().copied(), args.follow_up_percent);
    let live_events = warm_up_events + events_of(measured.iter().copied(), args.follow_up_percent);
    let written_bar = bars.add(bar(live.len() as u64, "orders   "));
    let published_bar = bars.add(bar(live_events, "published"));
    // The warm-up: written and published before the measured window opens.
    let mut relaying = Relaying {
        writer: &writer,
        args,
        mix,
        written_bar: &written_bar,
        published: &mut published,
        published_bar: &published_bar,
        relay: &mut stream_relay,
    };
    let (warm_written, watched) = relaying.write(warm_up, warm_up_events).await;
    let mut written = warm_written.context("writing the warm-up orders")?;
    watched.context("the warm-up orders")?;
    // The measured window.
    let (measured_written, watched) = relaying.write(measured, live_events).await;
    written_bar.finish();
    published_bar.finish();
    let measured_written = measured_written.context("writing orders")?;
    let live_ids: HashSet<String> = measured_written.event_ids.iter().cloned().collect();
    written.extend(measured_written);
    if let Err(err) = watched {
        phase(&format!("stream relay did not publish everything: {err:#}"));
    }

    // Phase 2: the large orders, apart from the measured ones, through the same stream relay.
    phase(&format!(
        "2/5 writing {} large orders apart, while relay-stream-local relays them",
        large_live.len()
    ));
    let large_bar = bars.add(bar(large_live.len() as u64, "orders   "));
    let large_events = events_of(large_live.iter().copied(), args.follow_up_percent);
    let large_published_bar = bars.add(bar(large_events, "published"));
    let large_written = write_orders(
        &writer,
        &large_live,
        None,
        args.concurrency,
        mix,
        &large_bar,
    )
    .await
    .context("writing large orders")?;
    large_bar.finish();
    let large_ids: HashSet<String> = large_written
        .large
        .iter()
        .map(|large| large.event_id.clone())
        .collect();
    written.extend(large_written);
    let watched = watch_published(
        &mut published,
        live_events,
        large_events,
        args.timeout.into(),
        &large_published_bar,
        &mut stream_relay,
    )
    .await;
    large_published_bar.finish();
    if let Err(err) = watched {
        phase(&format!("stream relay did not publish everything: {err:#}"));
    }
    let stream_summary = stop_relay(stream_relay, "relay-stream-local").await?;

    // From here on, the consumer consumes what the target delivered, as it arrives.
    let (stop_reading, stop) = watch::channel(false);
    let reader = tokio::spawn(read_deliveries(env.clone(), Arc::clone(&consumer), stop));

    // Phase 3: a stream outage; these orders are only in the table.
    phase(&format!(
        "3/5 stream relay stopped (simulated outage); writing {outage_orders} more orders"
    ));
    let outage_bar = bars.add(bar(outage_orders, "orders   "));
    // Unpaced: nothing relays these now, so no latency is measured on them.
    let outage_numbers: Vec<u64> = (args.orders..args.orders + outage_orders).collect();
    let outage_written = write_orders(
        &writer,
        &outage_numbers,
        None,
        args.concurrency,
        mix,
        &outage_bar,
    )
    .await;
    outage_bar.finish();
    written.extend(outage_written.context("writing outage orders")?);

    // Phase 4: backfill with the poller.
    phase("4/5 backfilling with relay-poller drain");
    let poller = spawn_relay(
        &poller_bin,
        &["drain", "--shard-count", &args.shard_count.to_string()],
        env,
        args,
        &log_dir,
    )?;
    let poller_summary = stop_relay_when_done(poller, "relay-poller drain").await?;

    // Phase 5: consume the rest of what the target delivered.
    phase("5/5 consuming the rest of what the target delivered");
    stop_reading.send_replace(true);
    let deliveries = reader.await.context("sink reader")??;
    let order_restored = consumer.restores_order();
    let (applied, consumed) = Arc::try_unwrap(consumer)
        .map_err(|_| anyhow::anyhow!("the consumer is still in use"))?
        .into_parts();
    for given_up in &consumed.given_up {
        phase(&format!("the consumer gave up on a message: {given_up}"));
    }
    if !written.large.is_empty() {
        phase(&format!(
            "reading back the payloads of {} large orders with PayloadResolver",
            written.large.len()
        ));
    }
    let payloads = check_payloads(
        &PayloadResolver::new(
            env.s3.clone(),
            env.payload_bucket.clone().unwrap_or_default(),
        ),
        &written.large,
        &deliveries,
    )
    .await;
    for failure in &payloads.failures {
        phase(&format!(
            "large order's payload failed its check: {failure}"
        ));
    }
    let dead_letters = env.queue_depth(&env.stack.dead_letter_queue_url).await?;
    let relay_lags = relay_lags(env).await?;
    let summary = summarize(
        &Written {
            target: args.target,
            orders: args.orders + outage_orders,
            all: &written.event_ids,
            live: &live_ids,
            live_large: &large_ids,
            rate: args.rate,
            warm_up_orders: warm_up.len() as u64,
            large: &written.large,
        },
        &Delivered {
            deliveries: &deliveries,
            applied: &applied,
            consumed: &consumed,
            order_restored,
            payloads: &payloads,
        },
        &relay_lags,
        &stream_summary,
        &poller_summary,
        dead_letters,
        started.elapsed(),
    );
    print_summary(&summary, &log_dir);
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    }
    Ok(summary)
}
