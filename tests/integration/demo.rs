//! The demo, run as a user runs it, on either bus: its summary agrees with an independent count
//! of an audit queue, the table and the payload bucket (on the Custom Event Bus each order is one
//! message group of the FIFO queue), its consumer (`outbox_consumer::BatchProcessor`, with order
//! restored on the classic bus) applies every event once and in order, its large orders'
//! payloads go through the payload bucket both ways (stored by the writer, stored by the relays)
//! and are read back checked, on every target, and ctrl-c leaves no emulator or relay process
//! behind.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use outbox_shared::OutboxStatus;
use outbox_shared::schema::{attr, entity};
use outbox_tests::{TestEnv, unique_name, workspace_binary, workspace_root};

/// The demo binary (package `outbox-demo`) with the relays built beside it.
fn demo_binary() -> PathBuf {
    workspace_binary("relay-stream-local");
    workspace_binary("relay-poller");
    workspace_binary("outbox-demo")
}

/// A bus for the demo to publish to, the queue it reads, and an audit queue the demo does not
/// read that receives every event on the same bus.
struct DemoBus {
    /// `--target`.
    kind: &'static str,
    /// `--event-bus-name`: the classic bus's name, or the Custom Event Bus's ARN.
    name: String,
    /// `--sink-queue-url`.
    sink_queue_url: String,
    audit_queue_url: String,
}

/// The environment's classic bus and sink, and a rule into an audit queue.
async fn classic_bus(env: &TestEnv) -> DemoBus {
    let audit_queue_url = env.create_queue(&unique_name("audit")).await;
    env.route_all_events_to(&audit_queue_url).await;
    DemoBus {
        kind: "classic",
        name: env.bus_name.clone(),
        sink_queue_url: env.sink_queue_url.clone(),
        audit_queue_url,
    }
}

/// A Custom Event Bus on the double as the template declares it, with two of the template's
/// FIFO subscribers: one into the demo's sink queue, one into the audit queue.
async fn custom_bus(env: &TestEnv) -> DemoBus {
    let bus_arn = outbox_infra::create_custom_event_bus(&env.eventbridgev2, &unique_name("bus"))
        .await
        .unwrap();
    let (sink, audit) = (unique_name("sink"), unique_name("audit"));
    let [sink, audit] = [sink, audit].map(|name| {
        let bus_arn = bus_arn.clone();
        async move {
            outbox_infra::create_fifo_subscriber(&env.eventbridgev2, &env.sqs, &bus_arn, &name)
                .await
                .unwrap()
        }
    });
    let (sink, audit) = (sink.await, audit.await);
    DemoBus {
        kind: "custom",
        name: bus_arn.clone(),
        sink_queue_url: sink.queue_url,
        audit_queue_url: audit.queue_url,
    }
}

/// Every event on the audit queue, with its message group (FIFO queues), once `expected` have
/// arrived (the double delivers after PutEvents returns) or 30 s passed.
async fn audit_events(
    env: &TestEnv,
    queue_url: &str,
    expected: usize,
) -> Vec<(serde_json::Value, Option<String>)> {
    use aws_sdk_sqs::types::MessageSystemAttributeName;
    let deadline = Instant::now() + Duration::from_secs(30);
    while env.queue_depth(queue_url).await < expected as u64 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    env.drain_queue(queue_url)
        .await
        .iter()
        .map(|message| {
            let group = message
                .attributes()
                .and_then(|a| a.get(&MessageSystemAttributeName::MessageGroupId))
                .cloned();
            (
                serde_json::from_str(message.body().unwrap()).unwrap(),
                group,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn summary_matches_an_independent_count_of_queue_and_table() {
    // Given a provisioned stack whose bus also feeds an audit queue the demo does not read
    let env = TestEnv::new().await;
    let bus = classic_bus(&env).await;

    // When the demo runs with a small N over it, Then its figures match the queue and the table
    let audit = demo_summary_matches_queue_and_table(&env, &bus).await;

    // And the classic bus's audit queue is a standard queue, without message groups
    assert!(audit.iter().all(|(_, group)| group.is_none()));
}

#[tokio::test(flavor = "multi_thread")]
async fn on_the_custom_bus_the_summary_matches_and_each_order_is_one_message_group_in_order() {
    // Given a stack whose Custom Event Bus has the template's FIFO subscriber twice: into the
    // demo's sink queue and into an audit queue
    let env = TestEnv::new().await;
    let bus = custom_bus(&env).await;

    // When the demo runs with --bus custom over it, Then its figures match the queue and the table
    let audit = demo_summary_matches_queue_and_table(&env, &bus).await;

    // And each order's events share one message group of the FIFO queue, no two orders one
    let mut groups: HashMap<String, HashSet<String>> = HashMap::new();
    for (event, group) in &audit {
        let aggregate = event["detail"]["metadata"]["aggregateId"].as_str().unwrap();
        let group = group.clone().expect("a FIFO message has a group");
        groups
            .entry(group)
            .or_default()
            .insert(aggregate.to_owned());
    }
    assert_eq!(groups.len(), 52, "one group per order: {groups:?}");
    assert!(
        groups.values().all(|aggregates| aggregates.len() == 1),
        "{groups:?}"
    );
}

/// `--large-order-percent` of the demo runs here: of their 52 orders (0 to 51), orders 9, 19,
/// 29, 39 and 49 are large; 9, 29 and 49 over an entry, 19 and 39 (both with follow-ups) over an
/// item; 9 to 39 written after the 36 measured orders (relayed by the stream relay), 49 during
/// the outage (published by the poller).
const LARGE_ORDER_PERCENT: &str = "10";

/// What the demo's summary says of its large orders at [`LARGE_ORDER_PERCENT`] of 52 orders, on a
/// target whose entry an order over an entry exceeds (every one but Kinesis), and on Kinesis,
/// whose 1 MiB record takes it inline.
fn assert_large_orders_checked(summary: &serde_json::Value, target: &str) {
    let (by_relays, in_s3, inline) = match target {
        "kinesis" => (0, 2, 3),
        _ => (3, 5, 0),
    };
    assert_eq!(summary["large_orders"], 5, "{target}: {summary}");
    assert_eq!(
        summary["payloads_stored_by_writer"], 2,
        "{target}: {summary}"
    );
    assert_eq!(
        summary["payloads_stored_by_relays"], by_relays,
        "{target}: {summary}"
    );
    assert_eq!(
        summary["large_delivered_in_s3"], in_s3,
        "{target}: {summary}"
    );
    assert_eq!(
        summary["large_delivered_inline"], inline,
        "{target}: {summary}"
    );
    assert_eq!(summary["payloads_checked"], in_s3, "{target}: {summary}");
    assert_eq!(summary["payload_failures"], 0, "{target}: {summary}");
    // The large orders' relay lag is apart from the measured orders'
    let (p50, p99) = (
        summary["large_relay_lag_p50_ms"].as_u64().unwrap(),
        summary["large_relay_lag_p99_ms"].as_u64().unwrap(),
    );
    assert!(p50 > 0 && p50 <= p99, "{target}: {summary}");
}

/// What the demo's consumer (`outbox_consumer::BatchProcessor` with the idempotency store, and
/// order restored on the classic bus) says it did with the 78 events written: each applied once,
/// none out of order, every delivery of one it had applied answered as a duplicate, and every
/// message it was handed accounted for.
fn assert_consumer_applied_each_once_in_order(summary: &serde_json::Value, target: &str) {
    let count = |name: &str| summary[name].as_u64().unwrap();
    assert_eq!(
        summary["order_restored"],
        target == "classic",
        "{target}: {summary}"
    );
    assert_eq!(count("applied"), 78, "{target}: {summary}");
    assert_eq!(count("not_applied"), 0, "{target}: {summary}");
    assert_eq!(count("applied_twice"), 0, "{target}: {summary}");
    assert_eq!(count("applied_out_of_order"), 0, "{target}: {summary}");
    assert_eq!(count("gaps_applied"), 0, "{target}: {summary}");
    // Every repeat the target delivered was answered from the store, not applied again
    assert!(
        count("duplicates") >= count("delivered") - count("unique_delivered"),
        "{target}: {summary}"
    );
    // Each message handed to the consumer was applied, a duplicate, held for order or retried
    assert_eq!(
        count("received"),
        count("applied") + count("duplicates") + count("held_for_order") + count("retried"),
        "{target}: {summary}"
    );
    assert!(
        count("received") >= count("delivered"),
        "{target}: {summary}"
    );
}

/// Runs the demo with a small N over `env`'s table, dead-letter queue and a payload bucket and
/// `bus`, and checks its summary against an independent count of `bus`'s audit queue, of the
/// table and of the bucket; the audit queue's events, in the order received.
async fn demo_summary_matches_queue_and_table(
    env: &TestEnv,
    bus: &DemoBus,
) -> Vec<(serde_json::Value, Option<String>)> {
    let demo = demo_binary();
    let bucket = env.create_payload_bucket().await;
    let log_dir = std::env::temp_dir().join(unique_name("demo-logs"));
    let output = tokio::process::Command::new(&demo)
        .envs(env.credentials_env())
        .env_remove("RUST_LOG")
        .arg("--log-dir")
        .arg(&log_dir)
        .args(["--target", bus.kind])
        .args([
            "--orders",
            "40",
            "--outage-orders",
            "12",
            "--shard-count",
            "4",
        ])
        .args(["--batch-size", "10", "--json", "--timeout", "2m"])
        .args([
            "--table-name",
            &env.table_name,
            "--event-bus-name",
            &bus.name,
        ])
        .args(["--sink-queue-url", &bus.sink_queue_url])
        .args(["--dead-letter-queue-url", &env.dead_letter_queue_url])
        .args(["--payload-bucket", &bucket])
        .args(["--large-order-percent", LARGE_ORDER_PERCENT])
        .output()
        .await
        .expect("run the demo");

    // Then it succeeds and its figures match what the queue and the table hold
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "demo failed: {stdout}\n{stderr}");
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .expect("JSON summary line");
    let summary: serde_json::Value = serde_json::from_str(line).unwrap();
    assert!(
        stdout.contains("missing"),
        "summary table printed: {stdout}"
    );
    // What a person reads has no raw log or metric lines: the relays' go to files.
    let raw: Vec<&str> = stderr
        .lines()
        .chain(stdout.lines().filter(|l| *l != line))
        .filter(|l| l.trim_start().starts_with('{'))
        .collect();
    assert!(
        raw.is_empty(),
        "raw log or metric lines in the demo's output: {raw:?}"
    );
    // The live relay's latencies: write to published (the relay's own) and write to delivery.
    assert_eq!(summary["rate"], 50, "{summary}");
    assert_eq!(summary["target"], bus.kind, "{summary}");
    for (p50, p99) in [
        ("relay_lag_p50_ms", "relay_lag_p99_ms"),
        ("latency_p50_ms", "latency_p99_ms"),
    ] {
        let (p50, p99) = (
            summary[p50].as_u64().unwrap(),
            summary[p99].as_u64().unwrap(),
        );
        assert!(p50 > 0 && p50 <= p99, "{summary}");
    }

    // Every order was written once the stream relay read the stream (its log says when), so its
    // start-up is not in the relay's lag
    let relay_log = std::fs::read_to_string(log_dir.join("relay-stream-local.log"))
        .expect("the stream relay's log");
    let reading_at = relay_log
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .find(|line| line["fields"]["message"] == relay_stream_local::READING_SHARD)
        .and_then(|line| line["timestamp"].as_str().map(str::to_owned))
        .unwrap_or_else(|| {
            panic!(
                "no line {:?} in the stream relay's log: {relay_log}",
                relay_stream_local::READING_SHARD
            )
        });
    // (to the millisecond, as the writer stamps `CreatedAt`)
    let reading_at = chrono::SubsecRound::trunc_subsecs(
        outbox_shared::time::parse_timestamp(&reading_at).unwrap(),
        3,
    );
    let written_first = env
        .outbox_items()
        .await
        .iter()
        .map(|item| outbox_shared::time::parse_timestamp(&item.created_at).unwrap())
        .min()
        .expect("outbox items");
    assert!(
        written_first >= reading_at,
        "first order written at {written_first}, before the stream relay read the stream at {reading_at}"
    );
    std::fs::remove_dir_all(&log_dir).ok();

    // (78 events: 52 orders, a quarter of them with two follow-ups)
    let audit_received = audit_events(env, &bus.audit_queue_url, 78).await;
    let audit_events: Vec<serde_json::Value> = audit_received
        .iter()
        .map(|(event, _)| event.clone())
        .collect();
    let audit: Vec<String> = audit_events
        .iter()
        .map(|event| {
            event["detail"]["metadata"]["eventId"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    let unique: HashSet<&str> = audit.iter().map(String::as_str).collect();
    let items = env.scan_items().await;
    let orders = items
        .iter()
        .filter(|i| i[attr::ENTITY_TYPE].as_s().unwrap() == entity::ORDER)
        .count();
    let outbox = env.outbox_items().await;

    // 52 orders, a quarter of them (every fourth) with two follow-up events: 13 * 2 more
    assert_eq!(summary["orders"], 52);
    assert_eq!(orders, 52);
    assert_eq!(summary["written"], 78);
    assert_eq!(outbox.len(), 78);
    assert!(outbox.iter().all(|i| i.status == OutboxStatus::Published));
    assert_eq!(summary["delivered"], audit.len());
    assert_eq!(summary["unique_delivered"], unique.len());
    assert_eq!(
        summary["delivered"].as_u64().unwrap() - summary["unique_delivered"].as_u64().unwrap(),
        (audit.len() - unique.len()) as u64
    );
    assert_eq!(summary["missing"], 0);
    assert!(outbox.iter().all(|i| unique.contains(i.event_id.as_str())));
    assert_eq!(summary["dead_lettered"], 0);
    let published = summary["published_by_stream"].as_u64().unwrap()
        + summary["published_by_poller"].as_u64().unwrap();
    assert!(
        published >= 78,
        "relays published {published} of 78: {summary}"
    );
    // Each order's events arrived in the order written, at the demo's consumer and on the audit
    // queue (the relays publish an aggregate's events one after the other; moto delivers each
    // inside its PutEvents call, the double's FIFO subscriber in ingestion order), and with no
    // reply lost nothing was published twice, so the bus de-duplicated nothing
    assert_eq!(summary["delivered_out_of_order"], 0, "{summary}");
    assert_eq!(out_of_order_on(&audit_events), 0, "{audit_events:?}");
    assert_eq!(summary["deduplicated"], 0, "{summary}");
    assert!(summary["publish_calls"].as_u64().unwrap() >= 6, "{summary}");
    // the key's earlier name, kept one release for scripts (deprecated), says the same
    assert_eq!(
        summary["put_events_calls"], summary["publish_calls"],
        "{summary}"
    );

    // The consumer applied each event once, in order
    assert_consumer_applied_each_once_in_order(&summary, bus.kind);

    // Five of the orders were large: the writer stored two payloads, the relays three (one of
    // them the poller, after the outage), each read back intact by the demo
    assert_large_orders_checked(&summary, bus.kind);
    // and the bucket holds one object per large order, which their events on the audit queue
    // name in place of their data
    let objects = env.object_keys(&bucket).await;
    assert_eq!(objects.len(), 5, "{objects:?}");
    assert!(
        objects.iter().all(|key| key.starts_with("payloads/")),
        "{objects:?}"
    );
    let mut referenced: Vec<String> = audit_events
        .iter()
        .filter_map(|event| {
            let detail = &event["detail"];
            let uri = detail["dataref"].as_str()?;
            assert!(detail.get("data").is_none(), "{detail}");
            Some(uri.strip_prefix(&format!("s3://{bucket}/"))?.to_owned())
        })
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    referenced.sort();
    assert_eq!(referenced, objects);
    audit_received
}

/// An independent count of the events received before an earlier event (lower
/// `metadata.sequence`) of their aggregate, over the first delivery of each event id, in the
/// order `events` were received.
fn out_of_order_on(events: &[serde_json::Value]) -> u64 {
    let mut seen = HashSet::new();
    let mut received: Vec<(String, u64)> = Vec::new();
    for event in events {
        let metadata = &event["detail"]["metadata"];
        if !seen.insert(metadata["eventId"].as_str().unwrap().to_owned()) {
            continue;
        }
        received.push((
            metadata["aggregateId"].as_str().unwrap().to_owned(),
            metadata["sequence"].as_u64().unwrap(),
        ));
    }
    let early = received
        .iter()
        .enumerate()
        .filter(|(i, (aggregate, sequence))| {
            received[i + 1..]
                .iter()
                .any(|(later, lower)| later == aggregate && lower < sequence)
        });
    early.count() as u64
}

/// Every `(pid N)` in a line such as `… (pid 1234), … (pid 1235)`.
fn pids_in(line: &str) -> Vec<u32> {
    line.split("(pid ")
        .skip(1)
        .filter_map(|rest| rest.split(')').next()?.trim().parse().ok())
        .collect()
}

fn running(pid: u32) -> bool {
    // A zombie has exited; only its parent's bookkeeping is left.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    })
}

#[test]
fn ctrl_c_leaves_no_emulator_or_relay_running() {
    // Given the demo started the way `make demo` starts it, with its own emulator, in its own
    // process group (as a terminal's foreground job)
    let demo = demo_binary();
    let mut child = Command::new(workspace_root().join("scripts/emulator.sh"))
        .args(["run", "--"])
        .arg(&demo)
        .args(["--orders", "100000", "--shard-count", "4"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("start the demo");
    let group = child.id();
    let (lines_tx, lines) = mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut pids = Vec::new();
    let (mut emulators, mut relay) = (false, false);
    let deadline = Instant::now() + Duration::from_secs(120);
    while !(emulators && relay) && Instant::now() < deadline {
        let Ok(line) = lines.recv_timeout(Duration::from_secs(1)) else {
            continue;
        };
        // The emulators' line names each emulator's pid (DynamoDB Local, moto, the Custom Event
        // Bus double, the OTLP receiver); the demo's, the relay's.
        let emulators_line = line.contains("DynamoDB Local listening");
        let relay_line = line.contains("started relay-stream-local");
        if emulators_line || relay_line {
            let found = pids_in(&line);
            assert!(!found.is_empty(), "no pid in {line:?}");
            pids.extend(found);
        }
        emulators |= emulators_line;
        relay |= relay_line;
    }
    assert!(
        emulators && relay,
        "the emulators and the stream relay should have started: {pids:?}"
    );
    // Let it write for a moment, so ctrl-c lands mid-run.
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        pids.iter().all(|&p| running(p)),
        "all running before ctrl-c"
    );

    // When ctrl-c reaches the foreground process group
    let sent = Command::new("kill")
        .args(["-INT", "--", &format!("-{group}")])
        .status()
        .unwrap();
    assert!(sent.success());

    // Then the demo exits non-zero and neither emulator nor the relay is left running
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the demo did not exit within 30 s of ctrl-c"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!status.success(), "an interrupted demo reports failure");
    let settle = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&p| running(p)) && Instant::now() < settle {
        std::thread::sleep(Duration::from_millis(100));
    }
    let left: Vec<u32> = pids.iter().copied().filter(|&p| running(p)).collect();
    assert!(left.is_empty(), "still running after ctrl-c: {left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn on_sns_sqs_and_kinesis_the_consumer_side_gets_every_event_once_and_in_order() {
    for target in ["sns", "sqs", "kinesis"] {
        // Given the demo provisioning its own stack for the target (a FIFO topic into a FIFO
        // queue, a FIFO queue, a stream read back)
        let output = tokio::process::Command::new(demo_binary())
            .args(["--target", target])
            .args([
                "--orders",
                "40",
                "--outage-orders",
                "12",
                "--shard-count",
                "4",
            ])
            .args(["--batch-size", "10", "--json", "--timeout", "2m"])
            .args(["--large-order-percent", LARGE_ORDER_PERCENT])
            .output()
            .await
            .expect("run the demo");

        // Then every event written was delivered to the consumer once, none out of order, and
        // the consumer applied each once, in order
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{target}: demo failed: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let line = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .expect("JSON summary line");
        let summary: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(summary["target"], target, "{summary}");
        assert_eq!(summary["missing"], 0, "{target}: {summary}");
        assert_eq!(summary["delivered_out_of_order"], 0, "{target}: {summary}");
        assert_eq!(
            summary["delivered"], summary["unique_delivered"],
            "{target}: {summary}"
        );
        assert_eq!(
            summary["unique_delivered"], summary["written"],
            "{target}: {summary}"
        );
        assert_consumer_applied_each_once_in_order(&summary, target);
        // And its large orders' payloads went through the payload bucket the demo provisioned
        // and were read back intact (on Kinesis those over a bus's entry travel in the record)
        assert_large_orders_checked(&summary, target);
    }
}

mod two_regions {
    //! `outbox-demo --regions 2` on the local global table (`EMULATOR_REGIONS`, which `make test`
    //! sets): a region's relays killed and the region cut off midway, then brought back; every
    //! event published, each region's in order, duplicates within the bound docs/demo.md states
    //! (docs/global-tables.md, "What the window costs"), and the table in both regions agreeing.

    use aws_sdk_dynamodb::types::AttributeValue;
    use outbox_shared::schema::{attr, entity, status};
    use outbox_tests::regions::emulated_regions;
    use outbox_tests::{TestEnv, scan_table};

    use super::demo_binary;

    /// The demo's stream relays read batches of this many records: the killed one had at most
    /// one batch published and not marked.
    const BATCH_SIZE: u64 = 10;

    #[tokio::test(flavor = "multi_thread")]
    async fn a_region_killed_cut_off_and_brought_back_loses_nothing_and_keeps_each_order() {
        // Given the local global table's two regions (a panic with instructions, never a skip)
        let regions = emulated_regions();
        let env = TestEnv::new().await;

        // When the demo runs on them: both up, the second region's relays killed and the region
        // cut off while its writer writes on, adopted, restored, its relays restarted
        let output = tokio::process::Command::new(demo_binary())
            .envs(env.credentials_env())
            .args(["--regions", "2", "--json", "--timeout", "3m"])
            .args([
                "--batch-size",
                &BATCH_SIZE.to_string(),
                "--shard-count",
                "4",
            ])
            .output()
            .await
            .expect("run the demo");

        // Then it succeeds, its summary a table for people and one JSON line
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.success(), "demo failed: {stdout}\n{stderr}");
        let line = stdout
            .lines()
            .rev()
            .find(|l| l.starts_with('{'))
            .expect("JSON summary line");
        let summary: serde_json::Value = serde_json::from_str(line).unwrap();
        let raw: Vec<&str> = stderr
            .lines()
            .chain(stdout.lines().filter(|l| *l != line))
            .filter(|l| l.trim_start().starts_with('{'))
            .collect();
        assert!(
            raw.is_empty(),
            "raw log lines in the demo's output: {raw:?}"
        );
        let count = |value: &serde_json::Value| value.as_u64().unwrap();

        // And every event of each region was published, none out of order
        let rows = summary["regions"].as_array().unwrap();
        assert_eq!(rows.len(), 2, "{summary}");
        for (row, (region, _)) in rows.iter().zip(&regions) {
            assert_eq!(row["region"], region.as_str(), "{summary}");
            assert!(count(&row["written"]) > 0, "{summary}");
            assert_eq!(row["published"], row["written"], "{summary}");
            assert_eq!(row["missing"], 0, "{summary}");
            assert_eq!(row["out_of_order"], 0, "{summary}");
        }
        assert_eq!(summary["overall"]["missing"], 0, "{summary}");
        assert_eq!(summary["overall"]["out_of_order"], 0, "{summary}");
        assert_eq!(summary["unknown_delivered"], 0, "{summary}");

        // And the first region adopted the second no sooner than the failover time allows, published
        // its events, and handed it back
        let failover = &summary["failover"];
        assert_eq!(
            failover["stopped_region"],
            regions[1].0.as_str(),
            "{summary}"
        );
        assert_eq!(failover["adopter"], regions[0].0.as_str(), "{summary}");
        // (counted from the region's last heartbeat, written up to a round before the kill)
        let after = count(&failover["failover_after_ms"]);
        let round = count(&failover["region_round_ms"]);
        assert!(round > 0, "{summary}");
        assert!(
            count(&failover["adopted_after_ms"]) + round >= after,
            "{summary}"
        );
        assert!(
            count(&failover["first_adopted_publish_ms"])
                >= count(&failover["adopted_after_ms"]) - 1000,
            "{summary}"
        );
        assert!(count(&failover["published_by_adopter"]) > 0, "{summary}");
        assert!(count(&failover["stranded"]) > 0, "{summary}");
        assert!(failover["hand_back_after_ms"].is_u64(), "{summary}");

        // And the duplicates stay within the bound: during the failover, the killed stream
        // relay's one batch published and not marked, plus 2 % of the events in flight (pages
        // both regions read before a mark replicated); at the hand-back, 2 %
        let phase = |name: &str| {
            let phase = &failover[name];
            (count(&phase["duplicates"]), count(&phase["events"]))
        };
        let (failover_duplicates, failover_events) = phase("during_failover");
        assert!(
            failover_duplicates <= BATCH_SIZE + failover_events.div_ceil(50),
            "{summary}"
        );
        let (hand_back_duplicates, hand_back_events) = phase("during_hand_back");
        assert!(
            hand_back_duplicates <= hand_back_events.div_ceil(50),
            "{summary}"
        );

        // And each region's replica holds every event written, each PUBLISHED (an independent
        // count of the tables, after the demo stopped writing and replication caught up)
        let table = summary["table"].as_str().unwrap();
        for (region, endpoint) in &regions {
            let dynamodb = aws_sdk_dynamodb::Client::from_conf(
                aws_sdk_dynamodb::config::Builder::from(&env.sdk_config)
                    .region(aws_sdk_dynamodb::config::Region::new(region.to_string()))
                    .endpoint_url(endpoint)
                    .build(),
            );
            let events: Vec<_> = scan_table(&dynamodb, table)
                .await
                .into_iter()
                .filter(|item| {
                    item.get(attr::ENTITY_TYPE)
                        == Some(&AttributeValue::S(entity::OUTBOX_EVENT.to_owned()))
                })
                .collect();
            assert_eq!(
                events.len() as u64,
                count(&summary["overall"]["written"]),
                "{region}"
            );
            assert!(
                events.iter().all(|item| item.get(attr::STATUS)
                    == Some(&AttributeValue::S(status::PUBLISHED.to_owned()))),
                "{region}: not every event PUBLISHED"
            );
            // Best effort: the replicator reads every table the regions hold
            for table in [table, summary["lease_table"].as_str().unwrap()] {
                let _ = dynamodb.delete_table().table_name(table).send().await;
            }
        }
    }
}
