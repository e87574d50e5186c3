//! `--regions 2`: the outbox on a global table of two regions (the local replicator between a
//! DynamoDB Local per region), a region's relays killed and the region cut off midway, then
//! brought back (docs/demo.md, "Two regions").
//!
//! In each region a writer configured for a global table (`WriterConfig::global_table`) writes
//! orders at `--region-rate`, a stream relay (`relay-stream-local --regions`) and [`POLLERS`]
//! pollers (`relay-poller run --regions … --lease-table …`, short failover settings) relay them,
//! all to one target (the classic bus, a rule into the sink queue). Then, in the second region:
//!
//! 1. its relays are killed (SIGKILL: a region lost, not a graceful stop); its writer keeps
//!    writing, and for [`KILL_TO_CUT`] its writes still replicate to the first region;
//! 2. it is cut off on the replicator: its writes from then on are stranded in it;
//! 3. the demo waits for the first region to adopt it (failover), and writes on a while;
//! 4. the link is restored (the stranded writes replicate) and its relays restart while its
//!    writer writes on (its stream relay at the stream's end, `--from latest`: what was written
//!    while it was down is the pollers'; until the hand-back it leaves what it reads to them
//!    too); the demo waits for the hand-back, writes on a while, and stops writing;
//! 5. once every written event arrived (or `--timeout`), the relays stop and the sink queue,
//!    read all along, is counted: per region and overall, written, published, duplicates, out of
//!    order, missing, and the failover's figures.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, MessageSystemAttributeName};
use futures::StreamExt;
use outbox_infra::LocalStack;
use outbox_infra::template::{StreamSpec, Template};
use outbox_shared::{OutboxConfig, Region};
use outbox_writer::{OutboxWriter, WriterConfig};
use relay_poller::failover::{DynamoRegionStore, RegionStore};
use relay_runtime::TargetKind;
use serde::Serialize;
use tokio::process::Child;
use tokio::sync::watch;

use crate::cli::Args;
use crate::deliveries::Delivery;
use crate::env::{Env, SOURCE};
use crate::orders::{OrderMix, write_order};
use crate::progress::phase;
use crate::relays::{spawn_relay_as, terminate};
use crate::replicator::{EmulatedRegion, Replicator, emulated_regions};
use crate::summary::out_of_order;

/// Pollers per region (`relay-poller run`, sharing the region's partitions through the leases).
pub(crate) const POLLERS: usize = 2;
/// The pollers' `--region-failover-after`: short, for a demo (the default is a minute).
pub(crate) const REGION_FAILOVER_AFTER: &str = "6s";
/// The pollers' `--lease-renew-interval` (a region round each): at most a third of the failover
/// time and of the lease duration.
/// Every renewal of a lease is a write the replicator replicates: not shorter.
pub(crate) const LEASE_RENEW_INTERVAL: &str = "2s";
const LEASE_DURATION: &str = "6s";
/// The pollers' `--grace-period`: they leave younger events to the stream relay.
pub(crate) const GRACE_PERIOD: &str = "5s";
/// Both regions up, before the second region's relays are killed.
const STEADY: Duration = Duration::from_secs(10);
/// From the kill to the cut: the killed region's writes still replicate, so its pending events
/// are in the other region's replica for it to adopt.
const KILL_TO_CUT: Duration = Duration::from_secs(2);
/// Writing on, cut off and adopted, before the link is restored.
const ADOPTED: Duration = Duration::from_secs(5);
/// Writing on once the region is handed back.
const AFTER_HAND_BACK: Duration = Duration::from_secs(5);
/// Longest wait for the adoption, and for the hand-back.
const FAILOVER_BOUND: Duration = Duration::from_secs(60);
/// How often the demo reads who publishes a region.
const LOOK_INTERVAL: Duration = Duration::from_millis(200);

/// What the two-region run observed; printed as a table, and as one JSON line with `--json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct RegionsSummary {
    pub(crate) target: TargetKind,
    /// The outbox table (global: one in each region).
    pub(crate) table: String,
    /// The pollers' lease table (global too).
    pub(crate) lease_table: String,
    /// The regions, in `--regions` order (the table's); the second is the one stopped.
    pub(crate) regions: Vec<RegionCounts>,
    /// Every region's events together.
    pub(crate) overall: RegionCounts,
    pub(crate) failover: FailoverFigures,
    /// Messages on the sink queue whose event the demo did not write (none expected).
    pub(crate) unknown_delivered: u64,
    pub(crate) seconds: f64,
}

/// One region's events (or all): written there, and what the target delivered of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct RegionCounts {
    /// The region (`all` overall).
    pub(crate) region: String,
    pub(crate) orders: u64,
    pub(crate) written: u64,
    /// Distinct written events the target delivered.
    pub(crate) published: u64,
    /// Deliveries of an event delivered before.
    pub(crate) duplicates: u64,
    /// Events delivered (first time) before an earlier event of their aggregate.
    pub(crate) out_of_order: u64,
    /// Written events never delivered: must be 0.
    pub(crate) missing: u64,
}

/// When the second region's relays stopped, the other region took over, and it got its own
/// back; the duplicates of each phase against the events first delivered in it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct FailoverFigures {
    /// The stopped region.
    pub(crate) stopped_region: String,
    /// Its adopter (none if it was never adopted).
    pub(crate) adopter: Option<String>,
    /// `--region-failover-after`, in ms.
    pub(crate) failover_after_ms: u64,
    /// `--lease-renew-interval`, in ms: a region's heartbeat is written once a round, so its last
    /// one precedes the kill by up to a round, and the adoption may come that much sooner than
    /// `failover_after_ms` after the kill.
    pub(crate) region_round_ms: u64,
    /// From the kill (the relays gone) to the adoption read in the adopter's replica.
    pub(crate) adopted_after_ms: Option<u64>,
    /// From the kill to the first of the stopped region's events the adopter published (its
    /// arrival on the sink queue).
    pub(crate) first_adopted_publish_ms: Option<u64>,
    /// The stopped region's events first delivered while adopted (until its relays restarted).
    pub(crate) published_by_adopter: u64,
    /// The stopped region's orders written while it was cut off (held by the replicator).
    pub(crate) stranded: u64,
    /// From the restart of its relays to the hand-back read in its own replica.
    pub(crate) hand_back_after_ms: Option<u64>,
    pub(crate) steady: PhaseDuplicates,
    /// From the kill to the restart.
    pub(crate) during_failover: PhaseDuplicates,
    /// From the restart to the end.
    pub(crate) during_hand_back: PhaseDuplicates,
}

/// The deliveries that arrived in one phase of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub(crate) struct PhaseDuplicates {
    /// Events first delivered in the phase (in flight then).
    pub(crate) events: u64,
    /// Deliveries in the phase of an event delivered before.
    pub(crate) duplicates: u64,
    /// `duplicates` as a percentage of `events` (0 when none).
    pub(crate) percent: f64,
}

/// Where the run stood when: milliseconds since the epoch (the sink queue's `SentTimestamp`
/// clock, the same machine's).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Timeline {
    /// The stopped region's relays gone.
    pub(crate) stopped_ms: i64,
    /// Its adoption read in the adopter's replica.
    pub(crate) adopted_ms: Option<i64>,
    /// Its relays started again.
    pub(crate) restarted_ms: i64,
    /// Its hand-back read in its own replica.
    pub(crate) handed_back_ms: Option<i64>,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// One region: its DynamoDB client, writer, and relays while they run.
struct RegionRun {
    emulated: EmulatedRegion,
    dynamodb: aws_sdk_dynamodb::Client,
    /// The region's stack: the outbox table's replica, its bus, sink and dead-letter queues.
    env: Env,
    relays: Vec<(String, Child)>,
}

impl RegionRun {
    /// The variables that run a process in this region (the table's regions too).
    fn process_env(&self, regions: &str) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_REGION", self.emulated.region.to_string()),
            ("AWS_DEFAULT_REGION", self.emulated.region.to_string()),
            ("AWS_ENDPOINT_URL_DYNAMODB", self.emulated.endpoint.clone()),
            (
                "AWS_ENDPOINT_URL_DYNAMODB_STREAMS",
                self.emulated.endpoint.clone(),
            ),
            ("OUTBOX_REGIONS", regions.to_owned()),
        ]
    }
}

/// Runs the two-region demo (module docs).
pub(crate) async fn run(
    args: &Args,
    bin: &RelayBinaries<'_>,
    log_dir: &Path,
) -> Result<RegionsSummary> {
    let started = Instant::now();
    if args.target != TargetKind::Classic {
        bail!(
            "--regions 2 runs on the classic bus only (--target {} asked)",
            args.target
        );
    }
    for variable in ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"] {
        if std::env::var_os(variable).is_none() {
            bail!(
                "{variable} is not set: run the demo with `make demo DEMO_ARGS=\"--regions 2\"`, which starts the local emulators"
            );
        }
    }
    let emulated = emulated_regions(2)?;
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let suffix = uuid::Uuid::now_v7().simple().to_string();
    let suffix = &suffix[suffix.len() - 10..];
    let table = format!("outbox-{suffix}");
    let lease_table = format!("leases-{suffix}");
    let names: Vec<Region> = emulated.iter().map(|e| e.region.clone()).collect();
    let listed = names
        .iter()
        .map(Region::as_str)
        .collect::<Vec<_>>()
        .join(",");

    // The outbox and lease tables in both regions (the replicator replicates every table both
    // hold); in each region, as its stack would have them, a bus with a rule into a sink queue,
    // and a dead-letter queue (on moto, which keeps each region's apart).
    phase(&format!(
        "provisioning in {listed}: the outbox and lease tables from infra/template.yaml (a global \
         table on the local replicator), and a bus, sink queue and dead-letter queue in each"
    ));
    let template = Template::embedded()?;
    let mut lease_spec = template.lease_table()?;
    lease_spec.stream_specification.get_or_insert(StreamSpec {
        stream_view_type: "NEW_AND_OLD_IMAGES".to_owned(),
    });
    let mut regions = Vec::new();
    for emulated in emulated {
        regions.push(
            provision_region(&sdk, emulated, &table, &lease_table, &lease_spec, suffix).await?,
        );
    }
    let replicator = Replicator::from_env(vec![table.clone(), lease_table.clone()])?;
    let relays = Relays {
        bin,
        args,
        log_dir,
        lease_table: &lease_table,
        regions: &listed,
    };

    // The sink queue, read all along.
    let deliveries = Arc::new(Mutex::new(Vec::<Delivery>::new()));
    let (stop_reading, stop) = watch::channel(false);
    let readers: Vec<_> = regions
        .iter()
        .map(|region| {
            tokio::spawn(read_sink(
                region.env.clone(),
                stop.clone(),
                Arc::clone(&deliveries),
            ))
        })
        .collect();

    // Both regions up: relays, then writers.
    phase(&format!(
        "1/5 both regions up: in each a writer at {} orders/s, relay-stream-local and {POLLERS} \
         pollers (relay-poller run), for {} s",
        per_region_rate(args),
        STEADY.as_secs()
    ));
    for region in &mut regions {
        region.relays = relays.start(region, "trim-horizon", 1)?;
    }
    let writers: Vec<RegionWriter> = regions
        .iter()
        .enumerate()
        .map(|(i, region)| RegionWriter::start(region, &table, i as u64, args))
        .collect::<Result<_>>()?;
    tokio::time::sleep(STEADY).await;

    // The second region's relays killed; its writes replicate a while, then it is cut off.
    let (home, away) = (names[0].clone(), names[1].clone());
    phase(&format!(
        "2/5 killing {away}'s relays; its writer writes on; cut off from {home} in {} s",
        KILL_TO_CUT.as_secs()
    ));
    for (name, mut child) in std::mem::take(&mut regions[1].relays) {
        child.start_kill().ok();
        child
            .wait()
            .await
            .with_context(|| format!("killing {name}"))?;
    }
    let mut timeline = Timeline {
        stopped_ms: now_ms(),
        ..Timeline::default()
    };
    tokio::time::sleep(KILL_TO_CUT).await;
    replicator.isolate(&away, &names).await?;
    let cut_at = writers[1].written();

    // The failover: the first region adopts the second's partitions.
    phase(&format!(
        "3/5 {away} cut off (its writes stranded there); waiting for {home} to adopt it \
         (--region-failover-after {REGION_FAILOVER_AFTER})"
    ));
    let adopter_store = DynamoRegionStore::new(regions[0].dynamodb.clone(), &lease_table);
    timeline.adopted_ms = wait_for_publisher(&adopter_store, &away, &home).await;
    match timeline.adopted_ms {
        Some(at) => phase(&format!(
            "{home} adopted {away} {:.1} s after its relays stopped; writing on for {} s",
            (at - timeline.stopped_ms) as f64 / 1000.0,
            ADOPTED.as_secs()
        )),
        None => phase(&format!(
            "{home} did not adopt {away} within {} s",
            FAILOVER_BOUND.as_secs()
        )),
    }
    tokio::time::sleep(ADOPTED).await;

    // Back: the link restored, then the region's relays; the hand-back.
    phase(&format!(
        "4/5 restoring {away}'s link (its stranded writes replicate) and restarting its relays"
    ));
    // The writer pauses only so that the events stranded are counted; it writes on across the
    // relays' restart: an order created before the stream relay reads and confirmed after is
    // left to the adopter's pollers whole (the stream relay reads the adoption), in order.
    writers[1].pause().await;
    let stranded = writers[1].written() - cut_at;
    replicator.reconnect(&away, &names).await?;
    replicator.wait_caught_up().await?;
    writers[1].resume();
    regions[1].relays = relays.start(&regions[1], "latest", 2)?;
    timeline.restarted_ms = now_ms();
    let own_store = DynamoRegionStore::new(regions[1].dynamodb.clone(), &lease_table);
    timeline.handed_back_ms = if timeline.adopted_ms.is_some() {
        wait_for_publisher(&own_store, &away, &away).await
    } else {
        None
    };
    if let Some(at) = timeline.handed_back_ms {
        phase(&format!(
            "{home} handed {away} back {:.1} s after its relays restarted",
            (at - timeline.restarted_ms) as f64 / 1000.0
        ));
    }
    tokio::time::sleep(AFTER_HAND_BACK).await;

    // The end: writers stop, every event awaited, relays stopped, the queue read to the end.
    let mut written = Vec::new();
    for writer in writers {
        written.push(writer.stop().await?);
    }
    let all: HashSet<&str> = written
        .iter()
        .flat_map(|w| w.event_ids.iter().map(String::as_str))
        .collect();
    phase(&format!(
        "5/5 writers stopped ({} events); waiting for every one to arrive",
        all.len()
    ));
    let deadline = Instant::now() + Duration::from_secs(args.timeout.as_secs());
    loop {
        let arrived = {
            let deliveries = deliveries.lock().unwrap_or_else(|p| p.into_inner());
            let ids: HashSet<&str> = deliveries.iter().map(|d| d.event_id.as_str()).collect();
            all.iter().filter(|id| ids.contains(**id)).count()
        };
        if arrived == all.len() {
            break;
        }
        if Instant::now() > deadline {
            phase(&format!(
                "{} events had not arrived after --timeout {}",
                all.len() - arrived,
                args.timeout
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    for region in &mut regions {
        for (name, mut child) in std::mem::take(&mut region.relays) {
            if let Err(err) = terminate(&mut child, &name).await {
                phase(&format!("{name}: {err:#}"));
            }
        }
    }
    // Both replicas hold every write (the last marks included) before the demo ends.
    replicator.wait_caught_up().await?;
    stop_reading.send_replace(true);
    for reader in readers {
        reader.await.context("sink reader")??;
    }
    let mut deliveries = std::mem::take(&mut *deliveries.lock().unwrap_or_else(|p| p.into_inner()));
    // In the order the target put them on the queue (stable: received order on a tie).
    deliveries.sort_by_key(|delivery| delivery.arrived_ms);

    let origin: Vec<(&Region, &RegionWritten)> = names.iter().zip(&written).collect();
    let mut summary = summarize(&origin, &deliveries, &timeline, &names[1]);
    summary.failover.stranded = stranded;
    summary.table = table;
    summary.lease_table = lease_table;
    summary.seconds = (started.elapsed().as_secs_f64() * 10.0).round() / 10.0;
    Ok(summary)
}

/// `emulated`'s region: the outbox table (`table`) and the lease table (`lease_table`, as
/// `lease_spec` declares it) in its DynamoDB, and its bus, sink queue and dead-letter queue.
async fn provision_region(
    sdk: &aws_config::SdkConfig,
    emulated: EmulatedRegion,
    table: &str,
    lease_table: &str,
    lease_spec: &outbox_infra::template::TableSpec,
    suffix: &str,
) -> Result<RegionRun> {
    let sdk = sdk
        .to_builder()
        .region(aws_config::Region::new(emulated.region.to_string()))
        .build();
    let dynamodb = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .endpoint_url(&emulated.endpoint)
            .build(),
    );
    let created = outbox_infra::create_outbox_table(&dynamodb, table).await?;
    outbox_infra::create_table_from(&dynamodb, lease_table, lease_spec).await?;
    let eventbridge = aws_sdk_eventbridge::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let bus = outbox_infra::create_event_bus(&eventbridge, &format!("bus-{suffix}")).await?;
    let sink = outbox_infra::create_sink_queue(
        &eventbridge,
        &sqs,
        &bus.bus_name,
        &format!("sink-{suffix}"),
        &format!("all-events-{suffix}"),
    )
    .await?;
    let dead_letters =
        outbox_infra::create_dead_letter_queue(&sqs, &format!("dlq-{suffix}")).await?;
    let env = Env {
        stack: LocalStack {
            table_name: table.to_owned(),
            stream_arn: created.stream_arn,
            bus_name: bus.bus_name,
            sink_queue_url: sink.queue_url,
            dead_letter_queue_url: dead_letters.queue_url,
        },
        dynamodb: dynamodb.clone(),
        sqs,
        kinesis: aws_sdk_kinesis::Client::new(&sdk),
        s3: aws_sdk_s3::Client::new(&sdk),
        payload_bucket: None,
        target: TargetKind::Classic,
    };
    Ok(RegionRun {
        emulated,
        dynamodb,
        env,
        relays: Vec::new(),
    })
}

/// Orders per second each region's writer writes (`--region-rate`).
fn per_region_rate(args: &Args) -> u64 {
    args.region_rate
}

/// The relay binaries the demo starts.
pub(crate) struct RelayBinaries<'a> {
    pub(crate) stream: &'a Path,
    pub(crate) poller: &'a Path,
}

/// What starts a region's relays.
struct Relays<'a> {
    bin: &'a RelayBinaries<'a>,
    args: &'a Args,
    log_dir: &'a Path,
    lease_table: &'a str,
    regions: &'a str,
}

impl Relays<'_> {
    /// Starts `region`'s stream relay (reading from `from`) and its pollers; their logs are
    /// named after the region and `generation` (1, then 2 after a restart).
    fn start(
        &self,
        region: &RegionRun,
        from: &str,
        generation: u32,
    ) -> Result<Vec<(String, Child)>> {
        let name = region.emulated.region.as_str();
        let more_env = region.process_env(self.regions);
        let mut relays = Vec::new();
        let stream_name = format!("relay-stream-local in {name}");
        relays.push((
            stream_name,
            spawn_relay_as(
                self.bin.stream,
                &[
                    "--from",
                    from,
                    "--batch-size",
                    &self.args.batch_size.to_string(),
                    "--lease-table",
                    self.lease_table,
                ],
                &region.env,
                self.args,
                &more_env,
                &self
                    .log_dir
                    .join(format!("relay-stream-local-{name}-{generation}")),
            )?,
        ));
        for poller in 1..=POLLERS {
            relays.push((
                format!("relay-poller run {poller} in {name}"),
                spawn_relay_as(
                    self.bin.poller,
                    &[
                        "run",
                        "--lease-table",
                        self.lease_table,
                        "--region-failover-after",
                        REGION_FAILOVER_AFTER,
                        "--lease-renew-interval",
                        LEASE_RENEW_INTERVAL,
                        "--lease-duration",
                        LEASE_DURATION,
                        "--grace-period",
                        GRACE_PERIOD,
                        "--idle-backoff-max",
                        "1s",
                    ],
                    &region.env,
                    self.args,
                    &more_env,
                    &self
                        .log_dir
                        .join(format!("relay-poller-run-{name}-{generation}-{poller}")),
                )?,
            ));
        }
        Ok(relays)
    }
}

/// When (ms since the epoch) `store`'s replica first names `publisher` as publishing `region`,
/// read every [`LOOK_INTERVAL`]; `None` after [`FAILOVER_BOUND`]. A read that fails is tried
/// again.
async fn wait_for_publisher(
    store: &DynamoRegionStore,
    region: &Region,
    publisher: &Region,
) -> Option<i64> {
    let bound = Instant::now() + FAILOVER_BOUND;
    while Instant::now() < bound {
        if let Ok(view) = store.read().await
            && view.publisher_of(region) == publisher
        {
            return Some(now_ms());
        }
        tokio::time::sleep(LOOK_INTERVAL).await;
    }
    None
}

/// A region's writer's state, set by the demo.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Writing {
    On,
    Paused,
    Stopped,
}

/// What a region's writer wrote: its events' ids, and its orders.
#[derive(Debug, Default)]
pub(crate) struct RegionWritten {
    pub(crate) orders: u64,
    pub(crate) event_ids: Vec<String>,
}

/// A region's writer writing orders in the background until stopped.
struct RegionWriter {
    state: watch::Sender<Writing>,
    /// Orders started and not finished.
    in_flight: Arc<AtomicU64>,
    /// Orders finished.
    written: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Result<RegionWritten>>,
}

impl RegionWriter {
    /// Starts writing orders in `region` (numbered from `index` million, so no two regions share
    /// an order number, each with the same share of follow-ups) at `--region-rate`.
    fn start(region: &RegionRun, table: &str, index: u64, args: &Args) -> Result<Self> {
        let writer = OutboxWriter::new(
            region.dynamodb.clone(),
            WriterConfig {
                global_table: true,
                ..WriterConfig::new(
                    OutboxConfig {
                        shard_count: args.shard_count,
                        ..OutboxConfig::new(table)
                    },
                    SOURCE,
                )
            },
        )
        .context("writer configuration")?;
        let mix = OrderMix {
            follow_up_percent: args.follow_up_percent,
            large_order_percent: 0,
        };
        let (state, watched) = watch::channel(Writing::On);
        let in_flight = Arc::new(AtomicU64::new(0));
        let written = Arc::new(AtomicU64::new(0));
        #[allow(clippy::cast_precision_loss)]
        let period = Duration::from_secs_f64(1.0 / per_region_rate(args) as f64);
        let concurrency = usize::try_from(args.concurrency).unwrap_or(16);
        let task = tokio::spawn(write_until_stopped(
            writer,
            index * 1_000_000,
            period,
            concurrency,
            mix,
            watched,
            (Arc::clone(&in_flight), Arc::clone(&written)),
        ));
        Ok(Self {
            state,
            in_flight,
            written,
            task,
        })
    }

    /// Orders written so far.
    fn written(&self) -> u64 {
        self.written.load(Ordering::SeqCst)
    }

    /// Starts no more orders, and returns once those in flight are written.
    async fn pause(&self) {
        self.state.send_replace(Writing::Paused);
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn resume(&self) {
        self.state.send_replace(Writing::On);
    }

    /// Stops writing; what it wrote.
    async fn stop(self) -> Result<RegionWritten> {
        self.state.send_replace(Writing::Stopped);
        self.task.await.context("a region's writer")?
    }
}

/// Writes orders numbered from `first`, one every `period` while `state` is on (at most
/// `concurrency` at once), until it is stopped.
async fn write_until_stopped(
    writer: OutboxWriter,
    first: u64,
    period: Duration,
    concurrency: usize,
    mix: OrderMix,
    state: watch::Receiver<Writing>,
    (in_flight, written): (Arc<AtomicU64>, Arc<AtomicU64>),
) -> Result<RegionWritten> {
    let mut pace = tokio::time::interval(period);
    // After a pause, go on at the rate, not in a burst.
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let numbers = futures::stream::unfold(
        (first, pace, state, Arc::clone(&in_flight)),
        |(n, mut pace, mut state, in_flight)| async move {
            pace.tick().await;
            loop {
                let now = *state.borrow_and_update();
                match now {
                    Writing::On => break,
                    Writing::Stopped => return None,
                    Writing::Paused => {
                        if state.changed().await.is_err() {
                            return None;
                        }
                    }
                }
            }
            // Counted before it starts, so a pause waits for it.
            in_flight.fetch_add(1, Ordering::SeqCst);
            Some((n, (n + 1, pace, state, in_flight)))
        },
    );
    let writer = &writer;
    let results: Vec<Result<crate::orders::WrittenEvents>> = numbers
        .map(|n| {
            let (in_flight, written) = (&in_flight, &written);
            async move {
                let result = write_order(writer, n, mix).await;
                written.fetch_add(1, Ordering::SeqCst);
                in_flight.fetch_sub(1, Ordering::SeqCst);
                result
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    let mut region = RegionWritten::default();
    for result in results {
        region.event_ids.extend(result?.event_ids);
        region.orders += 1;
    }
    Ok(region)
}

/// Reads the sink queue until `stop` is set and it is empty: each message's first delivery
/// (every message is deleted once read; a repeat of an event is a message of its own).
async fn read_sink(
    env: Env,
    stop: watch::Receiver<bool>,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
) -> Result<()> {
    let queue_url = &env.stack.sink_queue_url;
    loop {
        let received = env
            .sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .context("receiving from the sink queue")?;
        let messages = received.messages();
        if messages.is_empty() {
            if *stop.borrow() && env.queue_depth(queue_url).await? == 0 {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let mut read = Vec::with_capacity(messages.len());
        for message in messages {
            read.push(Delivery::of_message(message)?);
        }
        deliveries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(read);
        let entries: Vec<DeleteMessageBatchRequestEntry> = messages
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
            .queue_url(queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .context("deleting from the sink queue")?;
    }
}

/// Counts `deliveries` (in the order they arrived) against what each region wrote, and the
/// failover's figures from `timeline` for `stopped`.
pub(crate) fn summarize(
    written: &[(&Region, &RegionWritten)],
    deliveries: &[Delivery],
    timeline: &Timeline,
    stopped: &Region,
) -> RegionsSummary {
    let origin: HashMap<&str, &Region> = written
        .iter()
        .flat_map(|(region, w)| w.event_ids.iter().map(move |id| (id.as_str(), *region)))
        .collect();
    let regions: Vec<RegionCounts> = written
        .iter()
        .map(|(region, w)| {
            counts(region.as_str(), w, deliveries, |id| {
                origin.get(id) == Some(region)
            })
        })
        .collect();
    let all = RegionWritten {
        orders: written.iter().map(|(_, w)| w.orders).sum(),
        event_ids: written
            .iter()
            .flat_map(|(_, w)| w.event_ids.iter().cloned())
            .collect(),
    };
    let mut overall = counts("all", &all, deliveries, |id| origin.contains_key(id));
    // Out of order overall is each region's (an aggregate is written in one region).
    overall.out_of_order = regions.iter().map(|r| r.out_of_order).sum();

    // The failover's figures: from the arrivals of the stopped region's events.
    let mut seen: HashSet<&str> = HashSet::new();
    let mut phases = [
        PhaseDuplicates::default(),
        PhaseDuplicates::default(),
        PhaseDuplicates::default(),
    ];
    let mut first_adopted: Option<i64> = None;
    let mut published_by_adopter = 0;
    // The adopter publishes nothing before its adoption, read here within a look (and a round
    // of its own) after it was written: a delivery of the stopped region's before that is one
    // its own relays sent before they were killed.
    let adopted_from = timeline.adopted_ms.map(|at| at - 1000);
    for delivery in deliveries {
        let at = delivery.arrived_ms.unwrap_or_default();
        let window = if at < timeline.stopped_ms {
            0
        } else if at < timeline.restarted_ms {
            1
        } else {
            2
        };
        let first = seen.insert(delivery.event_id.as_str());
        if first {
            phases[window].events += 1;
        } else {
            phases[window].duplicates += 1;
        }
        let from_stopped = origin.get(delivery.event_id.as_str()) == Some(&stopped);
        if first && from_stopped && window == 1 && adopted_from.is_some_and(|from| at >= from) {
            published_by_adopter += 1;
            first_adopted.get_or_insert(at);
        }
    }
    for phase in &mut phases {
        #[allow(clippy::cast_precision_loss)]
        let percent = if phase.events == 0 {
            0.0
        } else {
            phase.duplicates as f64 * 100.0 / phase.events as f64
        };
        phase.percent = (percent * 100.0).round() / 100.0;
    }
    let since = |from: i64, to: Option<i64>| to.and_then(|to| u64::try_from(to - from).ok());
    let [steady, during_failover, during_hand_back] = phases;
    RegionsSummary {
        target: TargetKind::Classic,
        table: String::new(),
        lease_table: String::new(),
        regions,
        overall,
        failover: FailoverFigures {
            stopped_region: stopped.to_string(),
            adopter: timeline.adopted_ms.and(
                written
                    .iter()
                    .map(|(r, _)| *r)
                    .find(|r| *r != stopped)
                    .map(ToString::to_string),
            ),
            failover_after_ms: humantime::parse_duration(REGION_FAILOVER_AFTER)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or_default(),
            region_round_ms: humantime::parse_duration(LEASE_RENEW_INTERVAL)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or_default(),
            adopted_after_ms: since(timeline.stopped_ms, timeline.adopted_ms),
            first_adopted_publish_ms: since(timeline.stopped_ms, first_adopted),
            published_by_adopter,
            stranded: 0,
            hand_back_after_ms: since(timeline.restarted_ms, timeline.handed_back_ms),
            steady,
            during_failover,
            during_hand_back,
        },
        unknown_delivered: deliveries
            .iter()
            .filter(|d| !origin.contains_key(d.event_id.as_str()))
            .count() as u64,
        seconds: 0.0,
    }
}

/// The counts of the events `written` (named `name`) among `deliveries`, those that `ours`.
fn counts(
    name: &str,
    written: &RegionWritten,
    deliveries: &[Delivery],
    ours: impl Fn(&str) -> bool,
) -> RegionCounts {
    let delivered: Vec<&Delivery> = deliveries
        .iter()
        .filter(|d| ours(d.event_id.as_str()))
        .collect();
    let unique: HashSet<&str> = delivered.iter().map(|d| d.event_id.as_str()).collect();
    RegionCounts {
        region: name.to_owned(),
        orders: written.orders,
        written: written.event_ids.len() as u64,
        published: unique.len() as u64,
        duplicates: (delivered.len() - unique.len()) as u64,
        out_of_order: out_of_order(delivered.iter().map(|d| d.place())),
        missing: written
            .event_ids
            .iter()
            .filter(|id| !unique.contains(id.as_str()))
            .count() as u64,
    }
}

/// Whether the run kept the promise: nothing missing, nothing out of order.
pub(crate) fn succeeded(summary: &RegionsSummary) -> bool {
    summary.overall.missing == 0 && summary.overall.out_of_order == 0
}

/// Prints the summary table on stdout, and what its figures count.
pub(crate) fn print_summary(s: &RegionsSummary, log_dir: &Path) {
    let ms = |value: Option<u64>| {
        value.map_or_else(
            || "none".to_owned(),
            |ms| format!("{:.1} s", ms as f64 / 1000.0),
        )
    };
    println!();
    println!("outbox demo summary: two regions, one global table");
    println!("{}", "-".repeat(78));
    println!(
        "{:<12} {:>8} {:>8} {:>10} {:>11} {:>13} {:>8}",
        "region", "orders", "written", "published", "duplicates", "out of order", "missing"
    );
    for row in s.regions.iter().chain(std::iter::once(&s.overall)) {
        println!(
            "{:<12} {:>8} {:>8} {:>10} {:>11} {:>13} {:>8}",
            row.region,
            row.orders,
            row.written,
            row.published,
            row.duplicates,
            row.out_of_order,
            row.missing
        );
    }
    println!("{}", "-".repeat(78));
    let f = &s.failover;
    let phase = |p: &PhaseDuplicates| {
        format!(
            "{} of {} events ({:.2} %)",
            p.duplicates, p.events, p.percent
        )
    };
    let rows: Vec<(&str, String)> = vec![
        ("stopped region", f.stopped_region.clone()),
        (
            "adopted by",
            f.adopter.clone().unwrap_or_else(|| "nobody".to_owned()),
        ),
        ("--region-failover-after", ms(Some(f.failover_after_ms))),
        ("stop to adoption", ms(f.adopted_after_ms)),
        (
            "stop to first adopted publish",
            ms(f.first_adopted_publish_ms),
        ),
        (
            "published by the adopter",
            f.published_by_adopter.to_string(),
        ),
        ("orders written while cut off", f.stranded.to_string()),
        ("restart to hand-back", ms(f.hand_back_after_ms)),
        ("duplicates, both up", phase(&f.steady)),
        ("duplicates, failover", phase(&f.during_failover)),
        ("duplicates, hand-back", phase(&f.during_hand_back)),
        ("elapsed", format!("{:.1} s", s.seconds)),
    ];
    for (label, value) in rows {
        println!("{label:<34} {value:>43}");
    }
    if s.unknown_delivered > 0 {
        println!(
            "{:<34} {:>43}",
            "delivered, not written by the demo", s.unknown_delivered
        );
    }
    println!(
        "{}",
        if succeeded(s) {
            "result: every written event delivered, each region's in order"
        } else if s.overall.missing > 0 {
            "result: EVENTS MISSING"
        } else {
            "result: EVENTS OUT OF ORDER"
        }
    );
    println!();
    println!("published: distinct events the target delivered (a rule into the sink queue);");
    println!("  duplicates: further deliveries of one; out of order: delivered before an earlier");
    println!("  event of the same order. Failover: from the kill of the stopped region's relays");
    println!("  to the adoption read in the adopter's replica, and to the first of its events the");
    println!(
        "  adopter published; hand-back: from the restart of its relays to the hand-back read"
    );
    println!(
        "  in its own replica. Duplicates per phase (both up; kill to restart; restart to the"
    );
    println!("  end) against the events first delivered in it.");
    println!("relay logs and metrics: {}", log_dir.display());
}

#[cfg(test)]
mod tests;
