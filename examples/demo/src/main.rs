//! `outbox-demo`: the main job end to end on the local emulators.
//!
//! 1. writes N orders through `create_order_with_outbox`, paced at `--rate` orders per second,
//!    while `relay-stream-local` relays them;
//! 2. stops the stream relay (a simulated stream outage) and writes more orders;
//! 3. backfills those with `relay-poller drain`;
//! 4. reads everything the bus delivered to the sink queue and the outbox items' `PublishedAt`, and
//!    prints a summary: written, published, duplicates, missing (must be 0), dead-lettered, the
//!    live relay's latency (write to published, the relay's own; write to delivery on the sink,
//!    through the emulator's rule), PutEvents calls.
//!
//! It exits non-zero if any event is missing. Run it with `make demo`, which installs and starts
//! the emulators first; every child process is stopped on exit, ctrl-c included. The relays' logs
//! and metrics go to files in `--log-dir`, not into the summary.

// The summary (table and JSON line) is this program's output.
#![allow(clippy::print_stdout)]

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use clap::Parser;
use futures::StreamExt;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use outbox_infra::LocalStack;
use outbox_shared::envelope::Envelope;
use outbox_shared::schema::{attr, entity};
use outbox_shared::{OutboxConfig, ShardCount};
use outbox_writer::{NewOrder, OrderLine, OutboxWriter, WriterConfig};
use serde::{Deserialize, Serialize};
use tokio::process::{Child, Command};
use tokio::sync::watch;

/// Runs the outbox relay end to end on the local emulator and prints what was delivered.
#[derive(Debug, Parser)]
#[command(name = "outbox-demo", version)]
struct Args {
    /// Orders written while the stream relay runs.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    orders: u64,
    /// Orders written during the simulated stream outage (default: a fifth of --orders, at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    outage_orders: Option<u64>,
    /// Shards of the pending-event index (writer and poller).
    #[arg(long, default_value = "16")]
    shard_count: ShardCount,
    /// Stream records per handler invocation of the stream relay.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    batch_size: u64,
    /// Orders written per second while the stream relay runs: a steady load, as a running service
    /// makes, so the latencies are the relay's and not a queue in front of the emulator.
    #[arg(long, default_value_t = DEFAULT_RATE, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    rate: u64,
    /// Orders written concurrently at most.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=256))]
    concurrency: u64,
    /// How long to wait for the stream relay to publish the first phase's events.
    #[arg(long, default_value = "5m")]
    timeout: humantime::Duration,
    /// Directory holding `relay-stream-local` and `relay-poller` (default: beside this binary).
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Where the relays' logs and metrics are written (default: a new directory under the
    /// system's temporary directory).
    #[arg(long)]
    log_dir: Option<PathBuf>,
    /// Also print the summary as one JSON line on stdout.
    #[arg(long)]
    json: bool,
    /// Use an existing table instead of provisioning one (with --event-bus-name, --sink-queue-url and
    /// --dead-letter-queue-url).
    #[arg(long, requires_all = ["event_bus_name", "sink_queue_url", "dead_letter_queue_url"])]
    table_name: Option<String>,
    #[arg(long, requires = "table_name")]
    event_bus_name: Option<String>,
    /// A queue that receives every event on the bus.
    #[arg(long, requires = "table_name")]
    sink_queue_url: Option<String>,
    #[arg(long, requires = "table_name")]
    dead_letter_queue_url: Option<String>,
}

/// What the demo observed; also printed as JSON with `--json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Orders (and so `OrderCreated` events) written.
    pub written: u64,
    /// Events the stream relay reported published.
    pub published_by_stream: u64,
    /// Events `relay-poller drain` reported published.
    pub published_by_poller: u64,
    /// Messages on the sink queue (duplicates included).
    pub delivered: u64,
    /// Distinct `metadata.eventId`s delivered.
    pub unique_delivered: u64,
    /// Deliveries beyond the first of an event id.
    pub duplicates: u64,
    /// Written events never delivered: must be 0.
    pub missing: u64,
    /// Events sent to the dead-letter queue by either relay.
    pub dead_lettered: u64,
    /// Orders per second written while the stream relay ran (`--rate`).
    pub rate: u64,
    /// Write to published (PutEvents accepted, the item marked): the relay's own latency, over
    /// the events written while the stream relay ran.
    pub relay_lag_p50_ms: u64,
    pub relay_lag_p99_ms: u64,
    /// Write to delivery on the sink queue (through the emulator's rule), over the same events.
    pub latency_p50_ms: u64,
    pub latency_p99_ms: u64,
    /// PutEvents calls by both relays, retries included.
    pub put_events_calls: u64,
    pub seconds: f64,
}

/// The one-line JSON summary the relays print on exit (fields the demo reads).
#[derive(Debug, Default, Deserialize)]
struct RelaySummary {
    #[serde(default)]
    published: u64,
    #[serde(default)]
    dead_lettered: u64,
    #[serde(default)]
    failed: u64,
    #[serde(default)]
    put_events_calls: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let outcome = tokio::select! {
        outcome = run(&args) => outcome,
        _ = tokio::signal::ctrl_c() => {
            // Dropping `run` drops its child handles, which kills them (kill_on_drop).
            eprintln!("outbox-demo: interrupted; stopped the relays");
            return ExitCode::from(130);
        }
    };
    match outcome {
        Ok(summary) if summary.missing == 0 => ExitCode::SUCCESS,
        Ok(summary) => {
            eprintln!("outbox-demo: {} events missing", summary.missing);
            ExitCode::FAILURE
        }
        Err(err) => {
            eprintln!("outbox-demo: {err:#}");
            ExitCode::FAILURE
        }
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
    let writer = OutboxWriter::new(env.dynamodb.clone(), WriterConfig::new(outbox, SOURCE))
        .context("writer configuration")?;
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
    let written_bar = bars.add(bar(args.orders, "written  "));
    let delivered_bar = bars.add(bar(args.orders, "delivered"));
    let (written, watched) = tokio::join!(
        write_orders(
            &writer,
            0..args.orders,
            Some(args.rate),
            args.concurrency,
            &written_bar
        ),
        watch_deliveries(
            &delivered,
            args.orders,
            args.timeout.into(),
            &delivered_bar,
            &mut stream_relay
        ),
    );
    written_bar.finish();
    delivered_bar.finish();
    let mut written_ids = written.context("writing orders")?;
    let live_ids: HashSet<String> = written_ids.iter().cloned().collect();
    if let Err(err) = watched {
        phase(&format!("stream relay did not publish everything: {err:#}"));
    }
    let stream_summary = stop_relay(stream_relay, "relay-stream-local").await?;

    // Phase 2: a stream outage; these orders are only in the table.
    phase(&format!(
        "2/4 stream relay stopped (simulated outage); writing {outage_orders} more orders"
    ));
    let outage_bar = bars.add(bar(outage_orders, "written  "));
    // Unpaced: nothing relays these now, so no latency is measured on them.
    let outage_written = write_orders(
        &writer,
        args.orders..args.orders + outage_orders,
        None,
        args.concurrency,
        &outage_bar,
    )
    .await;
    outage_bar.finish();
    written_ids.extend(outage_written.context("writing outage orders")?);

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
    let dead_letters = env.queue_depth(&env.stack.dead_letter_queue_url).await?;
    let relay_lags = relay_lags(env).await?;
    let summary = summarize(
        &Written {
            all: &written_ids,
            live: &live_ids,
            rate: args.rate,
        },
        &deliveries,
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

fn phase(message: &str) {
    eprintln!("outbox-demo: {message}");
}

fn bar(len: u64, label: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{label} [{{bar:40}}] {{pos:>7}}/{{len:7}} {{per_sec:>12}} {{elapsed:>4}}"
        ))
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}

fn relay_binary(dir: &Path, name: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    if !path.is_file() {
        bail!(
            "{} not found: build the relays first (`make demo` does: cargo build --workspace --bins), or pass --bin-dir",
            path.display()
        );
    }
    Ok(path)
}

/// Default of `--rate`: orders per second the local emulators relay and deliver with room to
/// spare (measured in docs/benchmarks.md), so the figures show a steady state.
const DEFAULT_RATE: u64 = 50;

/// The EventBridge `Source` the demo's writer and relays use.
const SOURCE: &str = "demo.orders";

/// The stack the demo runs on, and the clients it reads it with.
#[derive(Debug, Clone)]
struct Env {
    stack: LocalStack,
    dynamodb: aws_sdk_dynamodb::Client,
    sqs: aws_sdk_sqs::Client,
}

impl Env {
    async fn queue_depth(&self, queue_url: &str) -> Result<u64> {
        Ok(outbox_infra::queue_depth(&self.sqs, queue_url).await?)
    }
}

async fn provision(args: &Args) -> Result<Env> {
    // The demo creates and fills its own resources: never against an account by accident.
    for variable in ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"] {
        if std::env::var_os(variable).is_none() {
            bail!(
                "{variable} is not set: run the demo with `make demo`, which starts the local emulators"
            );
        }
    }
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let stack = match (
        &args.table_name,
        &args.event_bus_name,
        &args.sink_queue_url,
        &args.dead_letter_queue_url,
    ) {
        (Some(table), Some(bus), Some(sink), Some(dlq)) => {
            LocalStack::existing(&dynamodb, table, bus, sink, dlq).await?
        }
        _ => {
            phase(
                "provisioning the table, bus, sink queue and dead-letter queue from infra/template.yaml",
            );
            let suffix = uuid::Uuid::now_v7().simple().to_string();
            let eventbridge = aws_sdk_eventbridge::Client::new(&sdk);
            LocalStack::provision(&dynamodb, &eventbridge, &sqs, &suffix[suffix.len() - 10..])
                .await?
        }
    };
    Ok(Env {
        stack,
        dynamodb,
        sqs,
    })
}

/// Starts a relay; its stderr (logs, and the poller's metrics) goes to a file in `log_dir`, its
/// stdout (the summary line) to the demo.
fn spawn_relay(
    binary: &Path,
    extra: &[&str],
    env: &Env,
    args: &Args,
    log_dir: &Path,
) -> Result<Child> {
    let name = binary.file_name().unwrap_or_default().to_string_lossy();
    let log_path = log_dir.join(format!(
        "{name}{}.log",
        extra
            .first()
            .map(|sub| format!("-{sub}"))
            .filter(|_| name == "relay-poller")
            .unwrap_or_default()
    ));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut command = Command::new(binary);
    command
        .args(extra)
        .envs(env.stack.relay_env(SOURCE))
        .env("OUTBOX_SHARD_COUNT", args.shard_count.to_string())
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true);
    let child = command
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    if let Some(pid) = child.id() {
        phase(&format!("started {name} (pid {pid})"));
    }
    Ok(child)
}

/// Writes the orders numbered `numbers`, starting `rate` per second when given (at most
/// `concurrency` in flight); returns each order's event id.
async fn write_orders(
    writer: &OutboxWriter,
    numbers: std::ops::Range<u64>,
    rate: Option<u64>,
    concurrency: u64,
    bar: &ProgressBar,
) -> Result<Vec<String>> {
    let pace = rate.map(|rate| {
        // Precision loss is irrelevant for a period (rate is at most 100,000).
        #[allow(clippy::cast_precision_loss)]
        let mut interval = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
        // Behind schedule (a slow write held a slot), catch up at once: the rate is an average.
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        interval
    });
    let paced = futures::stream::unfold((numbers, pace), |(mut numbers, mut pace)| async move {
        let n = numbers.next()?;
        if let Some(interval) = pace.as_mut() {
            interval.tick().await;
        }
        Some((n, (numbers, pace)))
    });
    let results: Vec<Result<String>> = paced
        .map(|n| async move {
            let user = format!("user-{}", n % 97);
            let order = NewOrder::new(vec![
                OrderLine::new(format!("sku-{}", n % 13), 1 + (n % 3) as u32, 1_250),
                OrderLine::new("sku-gift-wrap", 1, 300),
            ]);
            let created = writer
                .create_order_with_outbox(&user, order)
                .await
                .with_context(|| format!("order {n} for {user}"))?;
            bar.inc(1);
            Ok(created.event_id)
        })
        .buffer_unordered(usize::try_from(concurrency).unwrap_or(16))
        .collect()
        .await;
    results.into_iter().collect()
}

/// Shows deliveries arriving until `expected` events arrived or `timeout` passed.
async fn watch_deliveries(
    delivered: &AtomicU64,
    expected: u64,
    timeout: Duration,
    bar: &ProgressBar,
    relay: &mut Child,
) -> Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        let count = delivered.load(Ordering::Relaxed);
        bar.set_position(count.min(expected));
        if count >= expected {
            return Ok(());
        }
        if let Some(status) = relay.try_wait()? {
            bail!("relay-stream-local exited early with {status}");
        }
        if Instant::now() >= deadline {
            bail!("{count} of {expected} events arrived within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Stops a long-running relay with SIGTERM and reads its summary line.
async fn stop_relay(mut child: Child, name: &str) -> Result<RelaySummary> {
    if let Some(pid) = child.id() {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .context("sending SIGTERM")?;
        if !status.success() {
            bail!("could not send SIGTERM to {name} (pid {pid})");
        }
    }
    let finished = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    if finished.is_err() {
        child.kill().await.ok();
        bail!("{name} did not stop within 30 s of SIGTERM");
    }
    read_summary(child, name).await
}

/// Waits for a relay that exits by itself and reads its summary line.
async fn stop_relay_when_done(mut child: Child, name: &str) -> Result<RelaySummary> {
    let status = child.wait().await?;
    let summary = read_summary(child, name).await?;
    if !status.success() {
        bail!("{name} exited with {status} (summary: {summary:?})");
    }
    Ok(summary)
}

async fn read_summary(mut child: Child, name: &str) -> Result<RelaySummary> {
    use tokio::io::AsyncReadExt;
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        stdout.read_to_string(&mut out).await?;
    }
    let line = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .with_context(|| format!("{name} printed no JSON summary line (stdout: {out:?})"))?;
    let summary: RelaySummary =
        serde_json::from_str(line).with_context(|| format!("{name} summary {line:?}"))?;
    if summary.failed > 0 {
        phase(&format!("{name} reported {} failed events", summary.failed));
    }
    Ok(summary)
}

/// One delivery on the sink queue: the event id and write-to-delivery latency.
struct Delivery {
    event_id: String,
    latency_ms: Option<u64>,
}

/// Reads and deletes sink-queue messages as they arrive, until `stop` is set and the queue is empty.
async fn read_deliveries(
    env: Env,
    stop: watch::Receiver<bool>,
    delivered: Arc<AtomicU64>,
) -> Result<Vec<Delivery>> {
    let mut deliveries = Vec::new();
    loop {
        let received = env
            .sqs
            .receive_message()
            .queue_url(&env.stack.sink_queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(300)
            .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
            .send()
            .await
            .context("receiving from the sink queue")?;
        let messages = received.messages();
        if messages.is_empty() {
            if *stop.borrow() && env.queue_depth(&env.stack.sink_queue_url).await? == 0 {
                return Ok(deliveries);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        delivered.fetch_add(messages.len() as u64, Ordering::Relaxed);
        for message in messages {
            let body = message.body().unwrap_or_default();
            let event: serde_json::Value =
                serde_json::from_str(body).with_context(|| format!("sink message {body:?}"))?;
            let envelope: Envelope<serde_json::Value> =
                serde_json::from_value(event["detail"].clone())
                    .with_context(|| format!("sink message detail {body:?}"))?;
            let sent_ms = message
                .attributes()
                .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
                .and_then(|t| t.parse::<i64>().ok());
            let occurred_ms = outbox_shared::time::parse_timestamp(&envelope.metadata.occurred_at)
                .ok()
                .map(|t| t.timestamp_millis());
            let latency_ms = sent_ms
                .zip(occurred_ms)
                .and_then(|(sent, occurred)| u64::try_from(sent - occurred).ok());
            deliveries.push(Delivery {
                event_id: envelope.metadata.event_id,
                latency_ms,
            });
        }
        // Ten at a time: every SQS call costs moto a scan of the queue.
        let entries = messages
            .iter()
            .enumerate()
            .filter_map(|(i, m)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .set_receipt_handle(m.receipt_handle().map(str::to_owned))
                    .build()
                    .ok()
            })
            .collect();
        env.sqs
            .delete_message_batch()
            .queue_url(&env.stack.sink_queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .context("deleting from the sink queue")?;
    }
}

/// Write to published (`PublishedAt` minus `CreatedAt`) of every published outbox item.
async fn relay_lags(env: &Env) -> Result<HashMap<String, u64>> {
    let mut lags = HashMap::new();
    let mut pages = env
        .dynamodb
        .scan()
        .table_name(&env.stack.table_name)
        .consistent_read(true)
        .filter_expression("#entity = :outbox AND attribute_exists(#published)")
        .projection_expression("#id, #created, #published")
        .expression_attribute_names("#entity", attr::ENTITY_TYPE)
        .expression_attribute_names("#id", attr::EVENT_ID)
        .expression_attribute_names("#created", attr::CREATED_AT)
        .expression_attribute_names("#published", attr::PUBLISHED_AT)
        .expression_attribute_values(
            ":outbox",
            AttributeValue::S(entity::OUTBOX_EVENT.to_owned()),
        )
        .into_paginator()
        .items()
        .send();
    while let Some(item) = pages.next().await {
        let item = item.context("reading the outbox items")?;
        let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok());
        let (Some(id), Some(created), Some(published)) = (
            text(attr::EVENT_ID),
            text(attr::CREATED_AT),
            text(attr::PUBLISHED_AT),
        ) else {
            continue;
        };
        let lag = outbox_shared::time::parse_timestamp(published)
            .ok()
            .zip(outbox_shared::time::parse_timestamp(created).ok())
            .and_then(|(published, created)| {
                u64::try_from((published - created).num_milliseconds()).ok()
            });
        if let Some(lag) = lag {
            lags.insert(id.clone(), lag);
        }
    }
    Ok(lags)
}

/// The events the demo wrote: all of them, those written while the stream relay ran (whose
/// latencies are the live relay's), and the rate those were written at.
struct Written<'a> {
    all: &'a [String],
    live: &'a HashSet<String>,
    rate: u64,
}

fn summarize(
    written: &Written<'_>,
    deliveries: &[Delivery],
    relay_lags: &HashMap<String, u64>,
    stream: &RelaySummary,
    poller: &RelaySummary,
    dead_letters_on_queue: u64,
    elapsed: Duration,
) -> Summary {
    let mut first_latency: HashMap<&str, Option<u64>> = HashMap::new();
    for delivery in deliveries {
        first_latency
            .entry(delivery.event_id.as_str())
            .or_insert(delivery.latency_ms);
    }
    let written_set: HashSet<&str> = written.all.iter().map(String::as_str).collect();
    let missing = written_set
        .iter()
        .filter(|id| !first_latency.contains_key(*id))
        .count();
    let mut latencies: Vec<u64> = first_latency
        .iter()
        .filter(|(id, _)| written.live.contains(**id))
        .filter_map(|(_, l)| *l)
        .collect();
    latencies.sort_unstable();
    let mut lags: Vec<u64> = relay_lags
        .iter()
        .filter(|(id, _)| written.live.contains(*id))
        .map(|(_, lag)| *lag)
        .collect();
    lags.sort_unstable();
    let delivered = deliveries.len() as u64;
    let unique = first_latency.len() as u64;
    Summary {
        written: written.all.len() as u64,
        published_by_stream: stream.published,
        published_by_poller: poller.published,
        delivered,
        unique_delivered: unique,
        duplicates: delivered - unique,
        missing: missing as u64,
        dead_lettered: (stream.dead_lettered + poller.dead_lettered).max(dead_letters_on_queue),
        rate: written.rate,
        relay_lag_p50_ms: percentile(&lags, 50),
        relay_lag_p99_ms: percentile(&lags, 99),
        latency_p50_ms: percentile(&latencies, 50),
        latency_p99_ms: percentile(&latencies, 99),
        put_events_calls: stream.put_events_calls + poller.put_events_calls,
        seconds: (elapsed.as_secs_f64() * 10.0).round() / 10.0,
    }
}

/// Nearest-rank percentile of sorted values (0 when empty).
fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

fn print_summary(s: &Summary, log_dir: &Path) {
    let rows: [(&str, String); 12] = [
        ("written", s.written.to_string()),
        (
            "published by stream relay",
            s.published_by_stream.to_string(),
        ),
        (
            "published by poller (backfill)",
            s.published_by_poller.to_string(),
        ),
        ("delivered to sink queue", s.delivered.to_string()),
        ("duplicates", s.duplicates.to_string()),
        ("missing", s.missing.to_string()),
        ("dead-lettered", s.dead_lettered.to_string()),
        ("live relay, written at", format!("{} orders/s", s.rate)),
        (
            "  relay lag p50 / p99",
            format!("{} / {} ms", s.relay_lag_p50_ms, s.relay_lag_p99_ms),
        ),
        (
            "  write-to-delivery p50 / p99",
            format!("{} / {} ms", s.latency_p50_ms, s.latency_p99_ms),
        ),
        ("PutEvents calls", s.put_events_calls.to_string()),
        ("elapsed", format!("{:.1} s", s.seconds)),
    ];
    println!();
    println!("{:<32} {:>16}", "outbox demo summary", "");
    println!("{}", "-".repeat(49));
    for (label, value) in rows {
        println!("{label:<32} {value:>16}");
    }
    println!(
        "{}",
        if s.missing == 0 {
            "result: every written event was delivered"
        } else {
            "result: EVENTS MISSING"
        }
    );
    println!();
    println!("relay lag: an order's write to its event's publication (PutEvents accepted and the");
    println!(
        "  item marked PUBLISHED), the relay's own latency, over the orders written while the"
    );
    println!(
        "  stream relay ran; write-to-delivery: to the event's arrival on the sink queue through"
    );
    println!("  the local emulator's EventBridge rule (moto delivers inside the PutEvents call).");
    println!("relay logs and metrics: {}", log_dir.display());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 50), 50);
        assert_eq!(percentile(&values, 99), 99);
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[], 50), 0);
    }

    #[test]
    fn summary_counts_duplicates_and_missing() {
        let written = vec![
            "a".to_owned(),
            "b".to_owned(),
            "c".to_owned(),
            "d".to_owned(),
        ];
        let d = |id: &str, ms| Delivery {
            event_id: id.to_owned(),
            latency_ms: Some(ms),
        };
        let deliveries = vec![d("a", 10), d("a", 50), d("b", 20), d("c", 9000)];
        let live: HashSet<String> = ["a", "b"].map(str::to_owned).into();
        let lags: HashMap<String, u64> = [("a", 5), ("b", 7), ("c", 8000)]
            .map(|(id, lag)| (id.to_owned(), lag))
            .into();
        let s = summarize(
            &Written {
                all: &written,
                live: &live,
                rate: 50,
            },
            &deliveries,
            &lags,
            &RelaySummary::default(),
            &RelaySummary::default(),
            0,
            Duration::from_secs(1),
        );
        assert_eq!(
            (s.delivered, s.unique_delivered, s.duplicates, s.missing),
            (4, 3, 1, 1)
        );
        // Latencies are the live relay's: the backfilled event "c" is not among them.
        assert_eq!((s.latency_p50_ms, s.latency_p99_ms), (10, 20));
        assert_eq!((s.relay_lag_p50_ms, s.relay_lag_p99_ms), (5, 7));
        assert_eq!(s.rate, 50);
    }
}
