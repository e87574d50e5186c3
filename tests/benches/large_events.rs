//! Events of any size (issue 31, the claim check) on the emulators: how long a large event takes
//! from the writer to a consumer that has read its payload back, and what it costs in S3 calls
//! (figures in docs/benchmarks.md, section "Events of any size").
//!
//! Each event is written by the writer with a payload bucket, published by a relay binary with
//! `PAYLOAD_BUCKET`, received on the sink queue (moto delivers it inside `PutEvents`), and its
//! payload read back and checked (size and SHA-256) by `outbox_consumer::PayloadResolver`:
//! - 300 KB: fits an item, not the classic bus's 256 KiB entry, so the writer writes it inline and
//!   the relay stores it at publish;
//! - 1 MiB and 5 MiB: too large for an item, so the writer stores it before its transaction and
//!   the relay publishes the reference without reading the object.
//!
//! Two relays, one after the other on one table: `relay-stream-local` reading the table's stream
//! (polling every 250 ms, as Lambda polls a shard four times a second), then one `relay-poller
//! drain` process per event, started when the write returns (its start-up and bucket probe are in
//! its figure). Events are written one at a time, each after a random pause of up to one poll
//! interval (not timed), `LARGE_EVENTS_RUNS` of each size (default 5); the median, minimum and
//! maximum are printed. A 1 KB event, inline, is the reference the others are compared with. Then every event the drain published is put back
//! to pending, as a mark whose reply was lost leaves it, and drained again: the re-publish.
//!
//! Every S3 call (the writer's, the relays', the consumer's) goes through the fault proxy with no
//! fault (`FaultRates::NONE`), which counts them by operation and verifies `ChecksumSHA256` as S3
//! does; the other services are called directly. The bucket is versioned as the template makes
//! it, so the object versions count every write.
//!
//! Run: `scripts/emulator.sh run -- cargo bench -p outbox-tests --bench large_events` (under a
//! minute after the builds). It builds the two relay binaries in the bench profile into the same
//! target directory first (`cargo build --profile bench -p relay-poller -p relay-stream-local`;
//! their features differ from the bench's, so the first time compiles the SDK crates again).

// The report is this benchmark's output.
#![allow(clippy::print_stdout)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use outbox_consumer::PayloadResolver;
use outbox_shared::schema::{self, attr};
use outbox_shared::{NewOutboxEvent, ShardCount, shard_for};
use outbox_tests::fault_proxy::{FaultProxy, FaultRates};
use outbox_tests::{TestEnv, emulator_endpoints, workspace_root};
use outbox_writer::{OutboxTransaction, OutboxWriter, WriterConfig};
use serde_json::Value;
use tokio::process::{Child, Command};

/// Where an event's payload travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Carried {
    /// In its item and in its entry: no S3 call (the reference the others are compared with).
    Inline,
    /// In its item; stored in S3 by the relay when it publishes it.
    StoredAtPublish,
    /// Stored in S3 by the writer; its item and its entry carry the reference.
    StoredAtWrite,
}

impl Carried {
    fn describe(self) -> &'static str {
        match self {
            Self::Inline => "inline, no S3",
            Self::StoredAtPublish => "inline in its item, stored by the relay at publish",
            Self::StoredAtWrite => "stored by the writer",
        }
    }
}

/// The sizes measured: a payload of this many bytes of JSON, how the size is named, and where
/// the payload travels (the classic bus's entry takes 256 KiB, an item 400 KB).
const SIZES: [(usize, &str, Carried); 4] = [
    (1_000, "1 KB", Carried::Inline),
    (300_000, "300 KB", Carried::StoredAtPublish),
    (1024 * 1024, "1 MiB", Carried::StoredAtWrite),
    (5 * 1024 * 1024, "5 MiB", Carried::StoredAtWrite),
];
/// Events per size and relay, unless `LARGE_EVENTS_RUNS` says otherwise.
const DEFAULT_RUNS: usize = 5;
/// `relay-poller`'s arguments: a drain that stops after its first pass that publishes nothing.
const DRAIN: &[&str] = &["drain", "--max-stalled-passes", "1"];
/// The stream relay's poll interval (`relay-stream-local`'s default, Lambda's four polls a second):
/// each event is written after a random pause up to this long, so that it meets the relay at a
/// random moment between two polls, as an application's writes do, and not in step with the
/// benchmark's own loop.
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// The longest an event may take to reach the sink before the run is abandoned.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(60);

/// The relays measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Relay {
    Stream,
    Drain,
}

impl Relay {
    fn name(self) -> &'static str {
        match self {
            Self::Stream => "relay-stream-local",
            Self::Drain => "relay-poller drain",
        }
    }
}

/// One event's journey, timed from the start of its write.
#[derive(Debug, Clone, Copy)]
struct Sample {
    /// The writer's commit (its `PutObject` included when the payload is stored at write).
    write: Duration,
    /// To its message on the sink queue.
    delivered: Duration,
    /// To its payload read back and checked by the consumer.
    read: Duration,
    /// S3 calls by where they were made.
    puts_at_write: u64,
    puts_at_publish: u64,
    gets_by_consumer: u64,
}

/// S3 calls through the proxy so far, by operation (`PutObject`, `GetObject`, …).
fn s3_calls(proxy: &FaultProxy) -> BTreeMap<String, u64> {
    proxy
        .counts_by_target()
        .into_iter()
        .filter_map(|(target, counts)| {
            let operation = target.strip_prefix("AmazonS3.")?.to_owned();
            let calls = counts.passed_calls
                + counts.failed_calls
                + counts.invalid_calls
                + counts.lost_replies
                + counts.denied_calls;
            Some((operation, calls))
        })
        .collect()
}

/// The calls of `operation` made between `before` and `after`.
fn delta(before: &BTreeMap<String, u64>, after: &BTreeMap<String, u64>, operation: &str) -> u64 {
    after.get(operation).copied().unwrap_or(0) - before.get(operation).copied().unwrap_or(0)
}

/// A JSON payload of exactly `bytes` bytes: an order with that many bytes of line items.
fn payload_of_size(order: &str, bytes: usize) -> Value {
    let skeleton = serde_json::json!({"orderId": order, "lines": ""}).to_string();
    let payload =
        serde_json::json!({"orderId": order, "lines": "l".repeat(bytes - skeleton.len())});
    assert_eq!(payload.to_string().len(), bytes);
    payload
}

/// An `OrderImported` event of its own aggregate, `bytes` of payload.
fn event_of_size(order: &str, bytes: usize) -> NewOutboxEvent {
    NewOutboxEvent {
        partition_key: schema::user_pk(&format!("user-{order}")),
        event_type: "OrderImported".into(),
        aggregate_type: "Order".into(),
        aggregate_id: order.into(),
        sequence: Some(1),
        payload: payload_of_size(order, bytes),
        trace_header: None,
        trace_context: None,
    }
}

/// An S3 client of `env` whose calls go through `proxy`.
fn s3_through(env: &TestEnv, proxy: &FaultProxy) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&env.sdk_config)
            .endpoint_url(proxy.url())
            .build(),
    )
}

/// Builds the relay binaries in the bench profile, into the running bench's target directory;
/// the directory they are in.
///
/// # Panics
/// When cargo cannot build them.
fn bench_binaries() -> PathBuf {
    // Bench executables live in <target>/release/deps; the bench profile's binaries in
    // <target>/release.
    let exe = std::env::current_exe().expect("current exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the bench executable sits in <target>/<profile>/deps")
        .to_path_buf();
    let target_dir = profile_dir.parent().expect("a target directory");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = std::process::Command::new(cargo)
        .current_dir(workspace_root())
        .args([
            "build",
            "--quiet",
            "--profile",
            "bench",
            "-p",
            "relay-poller",
            "-p",
            "relay-stream-local",
            "--bins",
            "--target-dir",
        ])
        .arg(target_dir)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "cargo build of the relays failed");
    profile_dir
}

/// What one run of the benchmark works on: an environment with a payload bucket, the proxy its
/// S3 calls go through, the writer, the consumer's resolver and the relay binaries.
struct Bench {
    env: TestEnv,
    bucket: String,
    proxy: FaultProxy,
    writer: OutboxWriter,
    resolver: PayloadResolver,
    binaries: PathBuf,
}

impl Bench {
    async fn new(binaries: PathBuf) -> Self {
        let env = TestEnv::new().await;
        let bucket = env.create_payload_bucket().await;
        let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 31).await;
        let s3 = s3_through(&env, &proxy);
        let mut config = WriterConfig::new(env.outbox_config(), outbox_tests::TEST_SOURCE);
        config.payload_bucket = Some(bucket.clone());
        let writer = OutboxWriter::with_s3(env.dynamodb.clone(), s3.clone(), config)
            .expect("valid writer configuration");
        let resolver = PayloadResolver::new(s3, &bucket);
        Self {
            env,
            bucket,
            proxy,
            writer,
            resolver,
            binaries,
        }
    }

    /// Starts `bin` (`relay-stream-local` or `relay-poller`) with `args` on this environment,
    /// with the payload bucket, its S3 calls through the proxy.
    fn start(&self, bin: &str, args: &[&str]) -> RelayProcess {
        // Its logs and metrics, kept in a file (a pipe nobody reads could fill and stop it) and
        // shown when it fails.
        let stderr = tempfile::tempfile().expect("a temporary file");
        let child = Command::new(self.binaries.join(bin))
            .args(args)
            .envs(self.env.relay_env())
            .env("AWS_ENDPOINT_URL_S3", self.proxy.url())
            .env("PAYLOAD_BUCKET", &self.bucket)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr.try_clone().expect("a file handle"))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{bin} starts: {e}"));
        RelayProcess {
            name: format!("{bin} {}", args.join(" ")),
            child,
            stderr,
        }
    }

    /// Waits for the next message on the sink queue, deletes it, and returns its event.
    async fn next_delivery(&self) -> Value {
        let deadline = Instant::now() + DELIVERY_TIMEOUT;
        loop {
            let received = self
                .env
                .sqs
                .receive_message()
                .queue_url(&self.env.sink_queue_url)
                .max_number_of_messages(1)
                .wait_time_seconds(0)
                .send()
                .await
                .expect("receive message");
            if let Some(message) = received.messages().first() {
                self.env
                    .sqs
                    .delete_message()
                    .queue_url(&self.env.sink_queue_url)
                    .receipt_handle(message.receipt_handle().expect("receipt handle"))
                    .send()
                    .await
                    .expect("delete message");
                return serde_json::from_str(message.body().expect("body")).expect("JSON event");
            }
            assert!(
                Instant::now() < deadline,
                "nothing delivered in {DELIVERY_TIMEOUT:?}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Writes one event of `bytes`, has it published (by the running stream relay, or by a drain
    /// started once it is written), waits for it on the sink and reads its payload back.
    async fn one_event(&self, relay: Relay, order: &str, bytes: usize, carried: Carried) -> Sample {
        let event = event_of_size(order, bytes);
        let payload = event.payload.clone();
        let pause = rand::random_range(0..POLL_INTERVAL.as_millis() as u64);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        let before = s3_calls(&self.proxy);
        let started = Instant::now();
        let committed = self
            .writer
            .commit(OutboxTransaction::new().event(event))
            .await
            .expect("the event is written");
        let write = started.elapsed();
        let written = s3_calls(&self.proxy);
        let drain = match relay {
            Relay::Stream => None,
            Relay::Drain => Some(self.start("relay-poller", DRAIN)),
        };
        let delivered_event = self.next_delivery().await;
        let delivered = started.elapsed();
        let published = s3_calls(&self.proxy);
        let envelope = self
            .resolver
            .decode::<Value>(&delivered_event)
            .await
            .expect("the consumer reads the payload");
        let read = started.elapsed();
        let after = s3_calls(&self.proxy);
        assert_eq!(
            envelope.metadata.event_id,
            committed.event_ids()[0],
            "the event delivered is the one written"
        );
        assert!(
            envelope.data == payload,
            "the payload read is the one written"
        );
        assert_eq!(
            delivered_event["detail"].get("dataref").is_some(),
            carried != Carried::Inline,
            "a {bytes}-byte event is published {}: {}",
            carried.describe(),
            delivered_event["detail"]
        );
        if let Some(drain) = drain {
            let summary = drain.finished().await;
            assert_eq!(summary["published"], 1, "{summary}");
        }
        Sample {
            write,
            delivered,
            read,
            puts_at_write: delta(&before, &written, "PutObject"),
            puts_at_publish: delta(&written, &published, "PutObject"),
            gets_by_consumer: delta(&published, &after, "GetObject"),
        }
    }

    /// Every size, `runs` events of each, through `relay`; the samples by size.
    async fn sizes(&self, relay: Relay, runs: usize) -> Vec<(&'static str, Carried, Vec<Sample>)> {
        let mut all = Vec::new();
        for (bytes, name, carried) in SIZES {
            let mut samples = Vec::with_capacity(runs);
            for run in 0..runs {
                let order = format!("o-{}-{}-{run}", relay_tag(relay), bytes);
                samples.push(self.one_event(relay, &order, bytes, carried).await);
            }
            all.push((name, carried, samples));
        }
        all
    }

    /// Puts every published event back to pending, as a mark whose reply was lost leaves it.
    async fn make_published_events_pending_again(&self) -> usize {
        let items = self.env.outbox_items().await;
        for item in &items {
            let shard = shard_for(item.ordering_key(), ShardCount::default());
            self.env
                .dynamodb
                .update_item()
                .table_name(&self.env.table_name)
                .key(attr::PK, AttributeValue::S(item.pk.clone()))
                .key(attr::SK, AttributeValue::S(item.sk.clone()))
                .update_expression("SET #status = :pending, #gsi1pk = :pk, #gsi1sk = :sk")
                .expression_attribute_names("#status", attr::STATUS)
                .expression_attribute_names("#gsi1pk", attr::GSI1PK)
                .expression_attribute_names("#gsi1sk", attr::GSI1SK)
                .expression_attribute_values(
                    ":pending",
                    AttributeValue::S(schema::status::PENDING.into()),
                )
                .expression_attribute_values(
                    ":pk",
                    AttributeValue::S(schema::pending_shard_pk(shard)),
                )
                .expression_attribute_values(
                    ":sk",
                    AttributeValue::S(schema::pending_sort_key(&item.created_at, &item.event_id)),
                )
                .send()
                .await
                .expect("put the item back to pending");
        }
        items.len()
    }

    /// The objects in the bucket and their versions (writes) in all.
    async fn objects_and_versions(&self) -> (usize, usize) {
        let keys = self.env.object_keys(&self.bucket).await;
        let mut versions = 0;
        for key in &keys {
            versions += self.env.object_versions(&self.bucket, key).await;
        }
        (keys.len(), versions)
    }
}

fn relay_tag(relay: Relay) -> &'static str {
    match relay {
        Relay::Stream => "stream",
        Relay::Drain => "drain",
    }
}

/// A relay binary running, its logs in a file.
struct RelayProcess {
    name: String,
    child: Child,
    stderr: std::fs::File,
}

impl RelayProcess {
    /// Waits for it to exit; its JSON summary (the last JSON line it printed).
    ///
    /// # Panics
    /// When it fails or prints no summary, with its logs.
    async fn finished(mut self) -> Value {
        use std::io::{Read, Seek};
        let output = self.child.wait_with_output().await.expect("the relay runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        let summary = stdout
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with('{'))
            .and_then(|line| serde_json::from_str(line).ok());
        match summary {
            Some(summary) if output.status.success() => summary,
            _ => {
                let mut logs = String::new();
                self.stderr.rewind().expect("rewind the logs");
                self.stderr
                    .read_to_string(&mut logs)
                    .expect("read the logs");
                panic!(
                    "{}: {}: {stdout}\nstderr:\n{logs}",
                    self.name, output.status
                );
            }
        }
    }

    /// Stops it with SIGTERM, as ECS stops a task; its JSON summary.
    async fn stopped(self) -> Value {
        let pid = self.child.id().expect("the relay is running");
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "SIGTERM to {}", self.name);
        self.finished().await
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// `median (min … max)` of `values`, in milliseconds.
fn spread(mut values: Vec<Duration>) -> String {
    values.sort();
    format!(
        "{:.0} ms ({:.0} … {:.0})",
        ms(values[values.len() / 2]),
        ms(values[0]),
        ms(values[values.len() - 1])
    )
}

/// `n` calls over `events`, per event.
fn per_event(samples: &[Sample], calls: impl Fn(&Sample) -> u64) -> String {
    let total: u64 = samples.iter().map(calls).sum();
    format!("{:.2}", total as f64 / samples.len() as f64)
}

fn report(relay: Relay, results: &[(&str, Carried, Vec<Sample>)]) {
    for (size, carried, samples) in results {
        println!(
            "{}, {size} ({}; {} events): write {}, write to delivery {}, write to payload read {}; \
             S3 calls per event: PutObject at write {}, PutObject at publish {}, GetObject by the consumer {}",
            relay.name(),
            carried.describe(),
            samples.len(),
            spread(samples.iter().map(|s| s.write).collect()),
            spread(samples.iter().map(|s| s.delivered).collect()),
            spread(samples.iter().map(|s| s.read).collect()),
            per_event(samples, |s| s.puts_at_write),
            per_event(samples, |s| s.puts_at_publish),
            per_event(samples, |s| s.gets_by_consumer),
        );
    }
}

fn main() {
    let runs = std::env::var("LARGE_EVENTS_RUNS")
        .ok()
        .map(|v| v.parse().expect("LARGE_EVENTS_RUNS is a number"))
        .unwrap_or(DEFAULT_RUNS);
    let binaries = bench_binaries();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        // The stream relay, reading a new table's stream from its start; a small event first, so
        // that the timed events find it reading.
        let stream_bench = Bench::new(binaries.clone()).await;
        let stream = stream_bench.start("relay-stream-local", &["--from", "trim-horizon"]);
        stream_bench
            .one_event(Relay::Stream, "o-warm-up", 1_000, Carried::Inline)
            .await;
        let stream_results = stream_bench.sizes(Relay::Stream, runs).await;
        let stream_summary = stream.stopped().await;
        report(Relay::Stream, &stream_results);
        println!("relay-stream-local summary: {stream_summary}");

        // The drain, one process per event, on a table of its own.
        let drain_bench = Bench::new(binaries).await;
        let drain_results = drain_bench.sizes(Relay::Drain, runs).await;
        report(Relay::Drain, &drain_results);
        let probes: BTreeMap<String, u64> = s3_calls(&drain_bench.proxy)
            .into_iter()
            .filter(|(operation, _)| !["PutObject", "GetObject"].contains(&operation.as_str()))
            .collect();
        println!(
            "relay-poller drain: other S3 calls of its {} processes: {probes:?}",
            runs * SIZES.len()
        );

        // The re-publish: every event the drain published, pending again, drained again. Its
        // 300 KB events' payloads are stored again with the conditional PutObject, which S3
        // answers 412 (the object is there) and which writes nothing.
        let (objects, versions) = drain_bench.objects_and_versions().await;
        let pending = drain_bench.make_published_events_pending_again().await;
        let before = s3_calls(&drain_bench.proxy);
        let summary = drain_bench.start("relay-poller", DRAIN).finished().await;
        let after = s3_calls(&drain_bench.proxy);
        let mut redelivered = 0;
        while redelivered < pending {
            drain_bench.next_delivery().await;
            redelivered += 1;
        }
        let (objects_after, versions_after) = drain_bench.objects_and_versions().await;
        println!(
            "re-publish by relay-poller drain of {pending} events ({} of them stored at publish): \
             PutObject {}, GetObject {}, published {}, payloads stored {}, payloads already stored {}; \
             objects {objects} with {versions} versions before, {objects_after} with {versions_after} after",
            runs,
            delta(&before, &after, "PutObject"),
            delta(&before, &after, "GetObject"),
            summary["published"],
            summary["payloads_stored"],
            summary["payloads_already_stored"],
        );
    });
}
