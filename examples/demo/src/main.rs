//! `outbox-demo`: the main job end to end on the local emulators.
//!
//! 1. writes N orders through `create_order_with_outbox`, paced at `--rate` orders per second,
//!    and for `--follow-up-percent` of them two status changes through the writer's
//!    optimistic-concurrency update (so those aggregates have three events), while
//!    `relay-stream-local` relays them; `--large-order-percent` of them are large, their payloads
//!    through the payload bucket (the claim check): about 300 KB of lines, which the relays store
//!    in S3 when they publish them, and about 1 MiB, written with the writer's general
//!    transaction, which stores them in S3 first;
//! 2. stops the stream relay (a simulated stream outage) and writes more orders;
//! 3. backfills those with `relay-poller drain`;
//! 4. reads everything the bus delivered to the sink queue and the outbox items' `PublishedAt`, and
//!    prints a summary: written, published, duplicates, out of order (an event received before an
//!    earlier one of its aggregate), missing (must be 0), dead-lettered, de-duplicated by the bus,
//!    the live relay's latency (write to published, the relay's own; write to delivery on the
//!    sink, through the emulator's rule), calls to the target; and the large orders: written, their
//!    payloads stored by the writer and by the relays, delivered in S3 or inline, and read back
//!    with `outbox_consumer::PayloadResolver` and checked (size, SHA-256, the lines written).
//!
//! It exits non-zero if any event is missing or any large order's payload fails its check. Run it with `make demo`, which installs and starts
//! the emulators first; every child process is stopped on exit, ctrl-c included. The relays' logs
//! and metrics go to files in `--log-dir`, not into the summary.

// The summary (table and JSON line) is this program's output.
#![allow(clippy::print_stdout)]

mod cli;
mod deliveries;
mod env;
mod orders;
mod payloads;
mod progress;
mod relays;
mod summary;

use std::collections::HashSet;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use anyhow::{Context, Result};
use indicatif::{MultiProgress, ProgressDrawTarget};
use outbox_consumer::PayloadResolver;
use outbox_shared::OutboxConfig;
use outbox_writer::{OutboxWriter, WriterConfig};
use tokio::sync::watch;

use crate::cli::Args;
use crate::deliveries::{read_deliveries, relay_lags, watch_deliveries};
use crate::env::{SOURCE, provision};
use crate::orders::{OrderMix, events_of, write_orders};
use crate::payloads::check_payloads;
use crate::progress::{bar, phase};
use crate::relays::{relay_binary, spawn_relay, stop_relay, stop_relay_when_done};
use crate::summary::{Delivered, Summary, Written, print_summary, summarize};

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse_checked();
    let outcome = tokio::select! {
        outcome = run(&args) => outcome,
        _ = tokio::signal::ctrl_c() => {
            // Dropping `run` drops its child handles, which kills them (kill_on_drop).
            eprintln!("outbox-demo: interrupted; stopped the relays");
            return ExitCode::from(130);
        }
    };
    match outcome {
        Ok(summary) if summary.missing == 0 && summary.payload_failures == 0 => ExitCode::SUCCESS,
        Ok(summary) => {
            if summary.missing > 0 {
                eprintln!("outbox-demo: {} events missing", summary.missing);
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

async fn run(args: &Args) -> Result<Summary> {
    let started = Instant::now();
    let bin_dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("this binary has no directory")?
            .to_path_buf(),
    };
    let stream_bin = relay_binary(&bin_dir, "relay-stream-local")?;
    let poller_bin = relay_binary(&bin_dir, "relay-poller")?;
    let log_dir = match &args.log_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("outbox-demo-{}", uuid::Uuid::now_v7().simple())),
    };
    std::fs::create_dir_all(&log_dir)
        .with_context(|| format!("creating the log directory {}", log_dir.display()))?;
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

    // Phase 1: the stream relay relays orders while they are written.
    phase(&format!(
        "1/4 writing {} orders at {} orders/s while relay-stream-local relays them",
        args.orders, args.rate
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
    // The sink queue is consumed live, so the count drives the progress bar.
    let delivered = Arc::new(AtomicU64::new(0));
    let (stop_reading, stop) = watch::channel(false);
    let reader = tokio::spawn(read_deliveries(env.clone(), stop, Arc::clone(&delivered)));
    let live_events = events_of(0..args.orders, args.follow_up_percent);
    let written_bar = bars.add(bar(args.orders, "orders   "));
    let delivered_bar = bars.add(bar(live_events, "delivered"));
    let (written, watched) = tokio::join!(
        write_orders(
            &writer,
            0..args.orders,
            Some(args.rate),
            args.concurrency,
            mix,
            &written_bar
        ),
        watch_deliveries(
            &delivered,
            live_events,
            args.timeout.into(),
            &delivered_bar,
            &mut stream_relay
        ),
    );
    written_bar.finish();
    delivered_bar.finish();
    let mut written = written.context("writing orders")?;
    let live_ids: HashSet<String> = written.event_ids.iter().cloned().collect();
    if let Err(err) = watched {
        phase(&format!("stream relay did not publish everything: {err:#}"));
    }
    let stream_summary = stop_relay(stream_relay, "relay-stream-local").await?;

    // Phase 2: a stream outage; these orders are only in the table.
    phase(&format!(
        "2/4 stream relay stopped (simulated outage); writing {outage_orders} more orders"
    ));
    let outage_bar = bars.add(bar(outage_orders, "orders   "));
    // Unpaced: nothing relays these now, so no latency is measured on them.
    let outage_written = write_orders(
        &writer,
        args.orders..args.orders + outage_orders,
        None,
        args.concurrency,
        mix,
        &outage_bar,
    )
    .await;
    outage_bar.finish();
    written.extend(outage_written.context("writing outage orders")?);

    // Phase 3: backfill with the poller.
    phase("3/4 backfilling with relay-poller drain");
    let poller = spawn_relay(
        &poller_bin,
        &["drain", "--shard-count", &args.shard_count.to_string()],
        env,
        args,
        &log_dir,
    )?;
    let poller_summary = stop_relay_when_done(poller, "relay-poller drain").await?;

    // Phase 4: read the rest of what the bus delivered.
    phase("4/4 reading the sink queue");
    stop_reading.send_replace(true);
    let deliveries = reader.await.context("sink reader")??;
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
            rate: args.rate,
            large: &written.large,
        },
        &Delivered {
            deliveries: &deliveries,
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
