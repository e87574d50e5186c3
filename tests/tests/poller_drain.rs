//! `relay-poller` against the local emulator: the `drain` binary publishes pending events exactly
//! once per poller, survives kills, splits work by shard, keeps per-aggregate order; a `run` step
//! respects the grace period.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use futures::StreamExt;
use outbox_shared::schema::{self, attr, entity};
use outbox_shared::time::format_timestamp;
use outbox_shared::{OutboxStatus, ShardCount};
use outbox_tests::{TestEnv, workspace_binary};
use outbox_writer::{NewOrder, OrderLine, OrderStatus, OutboxWriter, WriterConfig};
use relay_poller::CancellationToken;
use relay_poller::CycleOutcome;
use relay_poller::config::{RelayArgs, TableArgs};
use tokio::process::{Child, Command};

/// Writes in flight at once while seeding the table.
const WRITE_CONCURRENCY: usize = 32;

/// Bound for a drain to finish; only reached when something is broken.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(240);

fn writer(env: &TestEnv) -> OutboxWriter {
    let config = WriterConfig::new(env.outbox_config(), outbox_tests::TEST_SOURCE);
    OutboxWriter::new(env.dynamodb.clone(), config).expect("writer config")
}

fn one_line_order() -> NewOrder {
    NewOrder::new(vec![OrderLine {
        sku: "sku-1".into(),
        quantity: 2,
        unit_price_cents: 1250,
    }])
}

/// Creates `count` orders through the writer (one `OrderCreated` each); returns the event ids.
async fn create_orders(env: &TestEnv, count: usize) -> HashSet<String> {
    let writer = writer(env);
    futures::stream::iter(0..count)
        .map(|i| {
            let writer = writer.clone();
            async move {
                writer
                    .create_order_with_outbox(&format!("user-{}", i % 50), one_line_order())
                    .await
                    .expect("create order")
                    .event_id
            }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await
}

/// Puts a pending event with only the required attributes, as another client would.
async fn put_minimal_event(env: &TestEnv, event_id: &str, created_at: &str, payload: &str) {
    let shard = outbox_shared::shard_for(event_id, ShardCount::default());
    let item: HashMap<String, AttributeValue> = [
        (attr::PK, schema::user_pk("other-client")),
        (attr::SK, schema::outbox_sk(event_id)),
        (attr::ENTITY_TYPE, entity::OUTBOX_EVENT.to_owned()),
        (attr::EVENT_ID, event_id.to_owned()),
        (attr::EVENT_TYPE, "InventoryAdjusted".to_owned()),
        (attr::PAYLOAD, payload.to_owned()),
        (attr::STATUS, schema::status::PENDING.to_owned()),
        (attr::CREATED_AT, created_at.to_owned()),
        (attr::GSI1PK, schema::pending_shard_pk(shard)),
        (attr::GSI1SK, schema::pending_sort_key(created_at, event_id)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), AttributeValue::S(v)))
    .collect();
    env.dynamodb
        .put_item()
        .table_name(&env.table_name)
        .set_item(Some(item))
        .send()
        .await
        .expect("put item");
}

/// `relay-poller drain` pointed at `env`, stdout piped for the summary.
fn spawn_drain(env: &TestEnv, extra: &[&str]) -> Child {
    Command::new(workspace_binary("relay-poller"))
        .arg("drain")
        .args(extra)
        .envs(env.relay_env())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn relay-poller")
}

/// Waits for a drain to exit; its exit status and summary line.
async fn finish(child: Child) -> (std::process::ExitStatus, DrainSummaryLine) {
    let output = tokio::time::timeout(DRAIN_TIMEOUT, child.wait_with_output())
        .await
        .expect("drain finishes")
        .expect("drain output");
    let stdout = String::from_utf8(output.stdout).expect("utf-8 stdout");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "exactly one summary line on stdout: {stdout:?}"
    );
    let summary = serde_json::from_str(lines[0]).expect("summary is JSON");
    (output.status, summary)
}

/// The summary fields the issue promises (the binary prints more).
#[derive(Debug, serde::Deserialize)]
struct DrainSummaryLine {
    published: u64,
    already_published: u64,
    dead_lettered: u64,
    failed: u64,
    seconds: f64,
}

async fn drain_to_completion(env: &TestEnv, extra: &[&str]) -> DrainSummaryLine {
    let (status, summary) = finish(spawn_drain(env, extra)).await;
    assert!(status.success(), "drain exit {status}: {summary:?}");
    summary
}

/// Event ids on the sink, with how often each arrived.
async fn sink_counts(env: &TestEnv, at_least: usize) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for message in env
        .wait_for_sink(at_least as u64, Duration::from_secs(30))
        .await
    {
        *counts.entry(message.event_id().to_owned()).or_default() += 1;
    }
    counts
}

async fn statuses(env: &TestEnv) -> HashMap<String, OutboxStatus> {
    env.outbox_items()
        .await
        .into_iter()
        .map(|item| (item.event_id, item.status))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn drain_publishes_2000_pending_events_exactly_once() {
    // Given 2,000 pending events over 16 shards, and no stream relay running
    let env = TestEnv::new().await;
    let written = create_orders(&env, 2000).await;
    assert_eq!(env.pending_in_index().await, 2000);

    // When the poller drains the table
    let summary = drain_to_completion(&env, &[]).await;

    // Then every event arrived exactly once, the summary agrees, and the index is empty
    let sink = sink_counts(&env, 2000).await;
    assert_eq!(sink.keys().cloned().collect::<HashSet<_>>(), written);
    assert!(sink.values().all(|&n| n == 1), "duplicates on the sink");
    assert_eq!(summary.published, 2000);
    assert_eq!(
        (
            summary.already_published,
            summary.dead_lettered,
            summary.failed
        ),
        (0, 0, 0)
    );
    assert!(summary.seconds > 0.0);
    assert_eq!(env.pending_in_index().await, 0);
    let statuses = statuses(&env).await;
    assert_eq!(statuses.len(), 2000);
    assert!(statuses.values().all(|s| *s == OutboxStatus::Published));
}

#[tokio::test(flavor = "multi_thread")]
async fn drain_relays_other_clients_events_and_dead_letters_poison() {
    // Given 300 events with only the required attributes, and 2 whose payload is not JSON
    let env = TestEnv::new().await;
    let created_at = format_timestamp(Utc::now() - chrono::Duration::minutes(5));
    let good: Vec<String> = (0..300).map(|i| format!("ext-{i:04}")).collect();
    futures::stream::iter(&good)
        .for_each_concurrent(WRITE_CONCURRENCY, |id| {
            put_minimal_event(&env, id, &created_at, r#"{"sku":"s1","delta":-1}"#)
        })
        .await;
    for id in ["poison-1", "poison-2"] {
        put_minimal_event(&env, id, &created_at, "not json {").await;
    }

    // When the poller drains the table
    let summary = drain_to_completion(&env, &[]).await;

    // Then the good events arrive once each, in the documented envelope
    let messages = env.wait_for_sink(300, Duration::from_secs(30)).await;
    let ids: HashSet<String> = messages.iter().map(|m| m.event_id().to_owned()).collect();
    assert_eq!(ids, good.iter().cloned().collect());
    assert_eq!(messages.len(), 300);
    let first = &messages[0];
    assert_eq!(first.detail_type(), "InventoryAdjusted");
    assert_eq!(first.envelope.data["delta"], -1);
    assert_eq!(first.envelope.metadata.occurred_at, created_at);

    // And the poison events went to the dead-letter queue with a reason and were marked
    let letters = env.drain_dead_letters().await;
    let mut dead: Vec<_> = letters
        .iter()
        .map(|l| l.event_id.clone().unwrap_or_default())
        .collect();
    dead.sort();
    assert_eq!(dead, ["poison-1", "poison-2"]);
    assert!(letters.iter().all(|l| l.reason.contains("not valid JSON")));
    assert_eq!(letters[0].record[attr::PAYLOAD], "not json {");
    assert_eq!(
        (summary.published, summary.dead_lettered, summary.failed),
        (300, 2, 0)
    );
    let statuses = statuses(&env).await;
    assert_eq!(statuses["poison-1"], OutboxStatus::DeadLettered);
    assert_eq!(statuses["ext-0000"], OutboxStatus::Published);
    assert_eq!(env.pending_in_index().await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn run_steps_leave_events_younger_than_the_grace_period_alone() {
    // Given 40 events written 10 minutes ago and 40 written just now
    let env = TestEnv::new().await;
    let old_at = format_timestamp(Utc::now() - chrono::Duration::minutes(10));
    let new_at = format_timestamp(Utc::now());
    for i in 0..40 {
        put_minimal_event(&env, &format!("old-{i}"), &old_at, "{}").await;
        put_minimal_event(&env, &format!("new-{i}"), &new_at, "{}").await;
    }
    let args = RelayArgs {
        table: TableArgs {
            table_name: env.table_name.clone(),
            index_name: schema::DEFAULT_INDEX_NAME.into(),
            shard_count: ShardCount::default(),
            shards: None,
        },
        event_bus_name: env.bus_name.clone(),
        source: outbox_tests::TEST_SOURCE.into(),
        dead_letter_queue_url: env.dead_letter_queue_url.clone(),
        page_size: 7,
        shard_concurrency: 4,
        publish_concurrency: 4,
        flip_concurrency: 8,
        shutdown_timeout: Duration::from_secs(5),
    };
    let poller = relay_poller::app::aws_poller(
        relay_poller::app::AwsClients::new(&env.sdk_config),
        &args.validate().unwrap(),
    )
    .unwrap();
    let grace = Duration::from_secs(60);
    let cancel = CancellationToken::new();

    // When the run loop is stepped until it reports empty
    let mut published = 0;
    loop {
        let stats = poller.step(grace, &cancel).await;
        published += stats.published;
        if stats.outcome() == CycleOutcome::Empty {
            break;
        }
    }

    // Then exactly the old events were published; the young ones are still pending
    assert_eq!(published, 40);
    let ids: HashSet<String> = sink_counts(&env, 40).await.into_keys().collect();
    assert_eq!(ids, (0..40).map(|i| format!("old-{i}")).collect());
    let statuses = statuses(&env).await;
    assert!((0..40).all(|i| statuses[&format!("new-{i}")] == OutboxStatus::Pending));
    assert_eq!(env.pending_in_index().await, 40);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_pollers_on_the_whole_range_miss_nothing_and_count_duplicates() {
    // Given 400 pending events
    let env = TestEnv::new().await;
    let written = create_orders(&env, 400).await;

    // When two pollers drain the whole range at once
    let (a, b) = tokio::join!(
        finish(spawn_drain(&env, &[])),
        finish(spawn_drain(&env, &[]))
    );

    // Then nothing is missing, and every duplicate is a flip the other poller won
    assert!(a.0.success() && b.0.success(), "{a:?} {b:?}");
    let sink = sink_counts(&env, 400).await;
    assert_eq!(sink.keys().cloned().collect::<HashSet<_>>(), written);
    let duplicates: u64 = sink.values().map(|n| n - 1).sum();
    let (a, b) = (a.1, b.1);
    assert_eq!(a.published + b.published, 400);
    assert_eq!(a.already_published + b.already_published, duplicates);
    assert_eq!(env.pending_in_index().await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_pollers_splitting_the_shards_publish_each_event_once() {
    // Given 400 pending events
    let env = TestEnv::new().await;
    let written = create_orders(&env, 400).await;

    // When one poller drains shards 0-7 and another 8-15, at once
    let (a, b) = tokio::join!(
        finish(spawn_drain(&env, &["--shards", "0-7"])),
        finish(spawn_drain(&env, &["--shards", "8-15"]))
    );

    // Then every event arrived exactly once
    assert!(a.0.success() && b.0.success(), "{a:?} {b:?}");
    let sink = sink_counts(&env, 400).await;
    assert_eq!(sink.keys().cloned().collect::<HashSet<_>>(), written);
    assert!(
        sink.values().all(|&n| n == 1),
        "duplicates with split shards"
    );
    assert_eq!(a.1.published + b.1.published, 400);
    assert_eq!(a.1.already_published + b.1.already_published, 0);
    assert!(a.1.published > 0 && b.1.published > 0);
}

/// Waits until the index holds fewer than `below` events (the drain is under way).
async fn wait_until_pending_below(env: &TestEnv, below: usize) {
    while env.pending_in_index().await >= below {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn killed_and_terminated_drains_lose_nothing() {
    // Given 1,000 pending events, and drains slowed down to small pages so they can be caught
    // mid-way
    let env = TestEnv::new().await;
    let written = create_orders(&env, 1000).await;
    let slow = ["--page-size", "5", "--shard-concurrency", "2"];

    // When a drain is killed with SIGKILL mid-way
    let mut killed = spawn_drain(&env, &slow);
    wait_until_pending_below(&env, 950).await;
    killed.kill().await.expect("SIGKILL");

    // And the next one is stopped with SIGTERM mid-way
    let pending = env.pending_in_index().await;
    assert!(pending > 0, "the killed drain had finished");
    let terminated = spawn_drain(&env, &slow);
    wait_until_pending_below(&env, pending - 20).await;
    let pid = terminated.id().expect("pid");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill -TERM");
    assert!(status.success());

    // Then the terminated drain exits 0 within 10 s with its summary
    let output = tokio::time::timeout(Duration::from_secs(10), terminated.wait_with_output())
        .await
        .expect("exits within 10 s of SIGTERM")
        .expect("output");
    assert!(output.status.success(), "{:?}", output.status);
    let line = String::from_utf8(output.stdout).unwrap();
    let summary: DrainSummaryLine = serde_json::from_str(line.trim()).expect("summary line");
    assert!(summary.published > 0);

    // And a final drain leaves nothing missing
    drain_to_completion(&env, &[]).await;
    let sink = sink_counts(&env, 1000).await;
    assert_eq!(sink.keys().cloned().collect::<HashSet<_>>(), written);
    assert_eq!(env.pending_in_index().await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn events_of_one_aggregate_arrive_in_sequence_order() {
    // Given 30 orders, each created and moved through four more statuses (sequences 1..=5)
    let env = TestEnv::new().await;
    let writer = writer(&env);
    let orders: Vec<(String, String)> = futures::stream::iter(0..30)
        .map(|i| {
            let writer = writer.clone();
            async move {
                let user = format!("user-{i}");
                let created = writer
                    .create_order_with_outbox(&user, one_line_order())
                    .await
                    .expect("create");
                for status in [
                    OrderStatus::Confirmed,
                    OrderStatus::Paid,
                    OrderStatus::Shipped,
                    OrderStatus::Delivered,
                ] {
                    writer
                        .update_order_status_with_outbox(&user, &created.order_id, status)
                        .await
                        .expect("update");
                }
                (user, created.order_id)
            }
        })
        .buffer_unordered(WRITE_CONCURRENCY)
        .collect()
        .await;

    // When the poller drains, in small pages so an aggregate spans several pages and calls
    drain_to_completion(&env, &["--page-size", "3"]).await;

    // Then each order's events arrived in Sequence order, all five of them
    let messages = env.wait_for_sink(150, Duration::from_secs(30)).await;
    let mut by_order: HashMap<String, Vec<u64>> = HashMap::new();
    for m in &messages {
        let meta = &m.envelope.metadata;
        by_order
            .entry(meta.aggregate_id.clone().expect("aggregate id"))
            .or_default()
            .push(meta.sequence.expect("sequence"));
    }
    assert_eq!(by_order.len(), orders.len());
    for (_, order_id) in &orders {
        assert_eq!(by_order[order_id], [1, 2, 3, 4, 5], "order {order_id}");
    }
}
