//! `relay-poller` against the local emulator: the `drain` binary publishes pending events exactly
//! once per poller, survives kills, splits work by shard, keeps per-aggregate order, finds events
//! under shards outside its shard count, keeps expired pending items from expiring, and tells the
//! truth when it stops early; a `run` pass respects the grace period.

use relay_runtime::TargetKind;
use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use futures::StreamExt;
use outbox_shared::schema::{self, attr};
use outbox_shared::time::format_timestamp;
use outbox_shared::{OutboxStatus, ShardCount};
use outbox_tests::fault_proxy::{BATCH_EXECUTE_STATEMENT, FaultProxy, FaultRates};
use outbox_tests::{TestEnv, emulator_endpoints, fixtures, minimal_outbox_item};
use outbox_writer::{NewOrder, OrderLine, OrderStatus};
use relay_poller::CancellationToken;
use relay_poller::PassOutcome;
use relay_poller::config::{RelayArgs, TableArgs};
use relay_runtime::PublisherArgs;
use tokio::process::Child;

/// Writes in flight at once while seeding the table.
const WRITE_CONCURRENCY: usize = 32;

/// Bound for a drain to finish; only reached when something is broken.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(240);

fn one_line_order() -> NewOrder {
    NewOrder::new(vec![OrderLine {
        sku: "sku-1".into(),
        quantity: 2,
        unit_price_cents: 1250,
    }])
}

/// Creates `count` orders through the writer (one `OrderCreated` each); returns the event ids.
async fn create_orders(env: &TestEnv, count: usize) -> HashSet<String> {
    env.create_orders(count, WRITE_CONCURRENCY)
        .await
        .into_iter()
        .collect()
}

/// Puts a pending event with only the required attributes, as another client would.
async fn put_minimal_event(env: &TestEnv, event_id: &str, created_at: &str, payload: &str) {
    let shard = outbox_shared::shard_for(event_id, ShardCount::default());
    env.put_raw_item(minimal_outbox_item(
        "other-client",
        event_id,
        "InventoryAdjusted",
        payload,
        created_at,
        shard,
    ))
    .await;
}

/// `relay-poller drain` pointed at `env`, stdout piped for the summary.
fn spawn_drain(env: &TestEnv, extra: &[&str]) -> Child {
    env.relay_command("relay-poller")
        .arg("drain")
        .args(extra)
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
    already_marked: u64,
    dead_lettered: u64,
    failed: u64,
    not_marked: u64,
    remaining: Option<u64>,
    complete: bool,
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
async fn drain_publishes_1000_pending_events_exactly_once() {
    // Given 1,000 pending events over 16 shards, and no stream relay running
    let env = TestEnv::new().await;
    let written = create_orders(&env, 1000).await;
    assert_eq!(env.pending_in_index().await, 1000);

    // When the poller drains the table, 40 items a page: every shard's events take two pages
    // or more (as 2,000 events did at the default 100 before issue 40 halved the suite)
    let summary = drain_to_completion(&env, &["--page-size", "40"]).await;

    // Then every event arrived exactly once, the summary agrees, and the index is empty
    let sink = sink_counts(&env, 1000).await;
    assert_eq!(sink.keys().cloned().collect::<HashSet<_>>(), written);
    assert!(sink.values().all(|&n| n == 1), "duplicates on the sink");
    assert_eq!(summary.published, 1000);
    assert_eq!(
        (
            summary.already_marked,
            summary.dead_lettered,
            summary.failed
        ),
        (0, 0, 0)
    );
    assert!(summary.seconds > 0.0);
    assert_eq!(env.pending_in_index().await, 0);
    let statuses = statuses(&env).await;
    assert_eq!(statuses.len(), 1000);
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

    // And the marks gave the items (written without a ttl) one from the time of the mark: the
    // retention (7 days) when published, beyond the dead-letter queue's 14 days when dead-lettered
    let day = 24 * 3600;
    let now = Utc::now().timestamp();
    for item in env.outbox_items().await {
        let ttl = item
            .ttl
            .unwrap_or_else(|| panic!("{} has no ttl", item.event_id));
        let days = (ttl - now) as f64 / f64::from(day);
        match item.status {
            OutboxStatus::Published => assert!((6.9..=7.0).contains(&days), "{days}"),
            OutboxStatus::DeadLettered => assert!((14.9..=15.0).contains(&days), "{days}"),
            other => panic!("{} is {other:?}", item.event_id),
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn run_passes_leave_events_younger_than_the_grace_period_alone() {
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
            regions: relay_runtime::RegionArgs::default(),
        },
        publisher: PublisherArgs {
            publish_concurrency: 4,
            ..fixtures::publisher_args(&env.bus_name)
        },
        retention: relay_runtime::RetentionArgs::default(),
        metrics: relay_runtime::metrics::MetricsArgs::default(),
        ttl_refresh_margin: relay_poller::DEFAULT_TTL_REFRESH_MARGIN,
        sweep_interval: relay_poller::DEFAULT_SWEEP_INTERVAL,
        index_lag: relay_poller::DEFAULT_INDEX_LAG,
        dead_letter_queue_url: env.dead_letter_queue_url.clone(),
        page_size: 7,
        shard_concurrency: 4,
        mark_concurrency: 8,
        idle_backoff_max: Duration::from_secs(5),
        shutdown_timeout: Duration::from_secs(5),
    };
    let config = args.validate().unwrap();
    let poller = relay_poller::aws::aws_poller(&env.sdk_config, &config).unwrap();
    let shards = poller.partitions().fixed();
    let grace = Duration::from_secs(60);
    let cancel = CancellationToken::new();

    // When the run loop is driven pass by pass until it reports empty
    let mut published = 0;
    loop {
        let cutoff = relay_poller::cutoff(chrono::Utc::now(), grace);
        let stats = poller.pass(&shards, cutoff, &cancel).await;
        published += stats.published;
        if stats.outcome() == PassOutcome::Empty {
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

    // Then nothing is missing, and every duplicate is a mark the other poller won
    assert!(a.0.success() && b.0.success(), "{a:?} {b:?}");
    let sink = sink_counts(&env, 400).await;
    assert_eq!(sink.keys().cloned().collect::<HashSet<_>>(), written);
    let duplicates: u64 = sink.values().map(|n| n - 1).sum();
    let (a, b) = (a.1, b.1);
    assert_eq!(a.published + b.published, 400);
    assert_eq!(a.already_marked + b.already_marked, duplicates);
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
    assert_eq!(a.1.already_marked + b.1.already_marked, 0);
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

    // Then the terminated drain exits within 10 s, non-zero (events remain), and its summary
    // says how many remain
    let output = tokio::time::timeout(Duration::from_secs(10), terminated.wait_with_output())
        .await
        .expect("exits within 10 s of SIGTERM")
        .expect("output");
    assert_eq!(output.status.code(), Some(1), "{:?}", output.status);
    let line = String::from_utf8(output.stdout).unwrap();
    let summary: DrainSummaryLine = serde_json::from_str(line.trim()).expect("summary line");
    assert!(summary.published > 0);
    assert!(!summary.complete);
    let left = env.pending_in_index().await as u64;
    assert!(left > 0, "the terminated drain had finished");
    assert_eq!(summary.remaining, Some(left), "{summary:?}");

    // And a final drain leaves nothing missing
    drain_to_completion(&env, &[]).await;
    let sink = sink_counts(&env, 1000).await;
    assert_eq!(sink.keys().cloned().collect::<HashSet<_>>(), written);
    assert_eq!(env.pending_in_index().await, 0);
}

on_every_target!(events_of_one_aggregate_arrive_in_sequence_order);

async fn events_of_one_aggregate_arrive_in_sequence_order(kind: TargetKind) {
    // Given 30 orders, each created and moved through four more statuses (sequences 1..=5)
    let env = TestEnv::with_target(kind).await;
    let writer = env.writer();
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

/// `count` pending events with only the required attributes, spread over the shards of a writer
/// on `shard_count` shards, created five minutes ago; their ids.
async fn put_events_on_shards(env: &TestEnv, count: usize, shard_count: ShardCount) -> Vec<String> {
    let created_at = format_timestamp(Utc::now() - chrono::Duration::minutes(5));
    let ids: Vec<String> = (0..count).map(|i| format!("resharded-{i:04}")).collect();
    futures::stream::iter(&ids)
        .for_each_concurrent(WRITE_CONCURRENCY, |id| {
            let item = minimal_outbox_item(
                "other-client",
                id,
                "InventoryAdjusted",
                r#"{"sku":"s1","delta":1}"#,
                &created_at,
                outbox_shared::shard_for(id, shard_count),
            );
            env.put_raw_item(item)
        })
        .await;
    ids
}

/// `relay-poller status --json` for a poller on `shard_count` shards.
async fn status_json(env: &TestEnv, shard_count: &str) -> serde_json::Value {
    let output = env
        .relay_command("relay-poller")
        .args(["status", "--json", "--shard-count", shard_count])
        .output()
        .await
        .expect("relay-poller status");
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).expect("status --json is JSON")
}

#[tokio::test(flavor = "multi_thread")]
async fn drain_publishes_events_under_shards_outside_its_shard_count() {
    // Given 300 pending events written over 32 shards
    let env = TestEnv::new().await;
    let written: HashSet<String> = put_events_on_shards(&env, 300, ShardCount::new(32).unwrap())
        .await
        .into_iter()
        .collect();

    // Then a poller on 16 shards sees the ones beyond its shards as stray
    let status = status_json(&env, "16").await;
    let stray = status["stray_pending"].as_u64().expect("stray_pending");
    let in_shards = status["total_pending"].as_u64().expect("total_pending");
    assert_eq!(stray + in_shards, 300, "{status}");
    assert!(
        stray > 100,
        "about half of 300 are beyond shard 15: {status}"
    );
    let partitions = status["partitions"].as_array().expect("partitions");
    for partition in partitions {
        let name = partition["partition"].as_str().unwrap();
        let shard = schema::parse_pending_shard_pk(name).expect("a shard partition");
        assert_eq!(partition["stray"], shard >= 16, "{partition}");
    }

    // When a drain runs on 16 shards
    let summary = drain_to_completion(&env, &["--shard-count", "16"]).await;

    // Then all 300 are published once and the index is empty
    assert_eq!((summary.published, summary.remaining), (300, Some(0)));
    let sink = sink_counts(&env, 300).await;
    assert_eq!(sink.keys().cloned().collect::<HashSet<_>>(), written);
    assert!(sink.values().all(|&n| n == 1), "{sink:?}");
    assert_eq!(env.pending_in_index().await, 0);
    assert_eq!(status_json(&env, "16").await["stray_pending"], 0);
}

/// Sets the `ttl` of `event_id`'s item to `ttl` (epoch seconds).
async fn set_ttl(env: &TestEnv, pk: &str, sk: &str, ttl: i64) {
    env.dynamodb
        .update_item()
        .table_name(&env.table_name)
        .key(attr::PK, AttributeValue::S(pk.to_owned()))
        .key(attr::SK, AttributeValue::S(sk.to_owned()))
        .update_expression("SET #ttl = :ttl")
        .expression_attribute_names("#ttl", attr::TTL)
        .expression_attribute_values(":ttl", AttributeValue::N(ttl.to_string()))
        .send()
        .await
        .expect("set ttl");
}

on_every_target!(expired_pending_events_are_published_and_kept_the_retention_after);

async fn expired_pending_events_are_published_and_kept_the_retention_after(kind: TargetKind) {
    // Given 20 orders whose pending events' ttl passed yesterday (the poller was down longer than
    // the retention), and 20 events of another client with only the required attributes and an
    // expired ttl
    let env = TestEnv::with_target(kind).await;
    // On AWS an expired item is deleted within days of its ttl; DynamoDB Local deletes it within
    // seconds, before or while the drain reads it. TTL is turned off for this table, so the items
    // are still there when the drain runs, as they would be on AWS for a while; then on again on
    // an attribute no item has (a table whose TTL is off while it holds expired items stalls
    // DynamoDB Local 1.25.1's deletions in the other tables, which the tests that wait for a TTL
    // deletion saw as none within a minute). Two calls: DynamoDB changes a TTL's attribute only
    // through off.
    outbox_tests::set_time_to_live(&env.dynamodb, &env.table_name, false, attr::TTL).await;
    outbox_tests::set_time_to_live(&env.dynamodb, &env.table_name, true, "noSuchAttribute").await;
    let mut written = create_orders(&env, 20).await;
    let yesterday = Utc::now().timestamp() - 24 * 3600;
    for item in env.outbox_items().await {
        set_ttl(&env, &item.pk, &item.sk, yesterday).await;
    }
    let created_at = format_timestamp(Utc::now() - chrono::Duration::days(8));
    for i in 0..20 {
        let id = format!("expired-{i:02}");
        let mut item = minimal_outbox_item(
            "other-client",
            &id,
            "InventoryAdjusted",
            "{}",
            &created_at,
            outbox_shared::shard_for(&id, ShardCount::default()),
        );
        item.insert(
            attr::TTL.to_owned(),
            AttributeValue::N(yesterday.to_string()),
        );
        env.put_raw_item(item).await;
        written.insert(id);
    }

    // When a drain runs
    let summary = drain_to_completion(&env, &[]).await;

    // Then all 40 are published, and each item now expires the retention (7 days) from now
    assert_eq!(summary.published, 40);
    let sink = sink_counts(&env, 40).await;
    assert_eq!(sink.keys().cloned().collect::<HashSet<_>>(), written);
    let six_days = Utc::now().timestamp() + 6 * 24 * 3600;
    let items = env.outbox_items().await;
    assert_eq!(items.len(), 40);
    for item in items {
        assert_eq!(item.status, OutboxStatus::Published, "{}", item.event_id);
        let ttl = item.ttl.expect("a published item has a ttl");
        assert!(ttl > six_days, "{} expires at {ttl}", item.event_id);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drain_that_cannot_publish_exits_non_zero_and_says_how_many_remain() {
    // Given 30 pending events and a bus that refuses every PutEvents (a policy without
    // events:PutEvents: the bus exists, so the drain starts, and every call fails)
    let env = TestEnv::new().await;
    create_orders(&env, 30).await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 7).await;
    proxy.deny("AWSEvents.PutEvents");

    // When a drain through it gives up after one stalled pass
    let child = env
        .relay_command("relay-poller")
        .args([
            "drain",
            "--max-stalled-passes",
            "1",
            "--publish-max-attempts",
            "1",
        ])
        .envs(proxy.endpoint_env())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn relay-poller");
    let (status, summary) = finish(child).await;

    // Then it exits 1, and its summary says all 30 remain
    assert_eq!(status.code(), Some(1), "{summary:?}");
    assert!(!summary.complete);
    assert_eq!(summary.published, 0);
    assert_eq!(summary.remaining, Some(30), "{summary:?}");
    assert_eq!(env.pending_in_index().await, 30);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drain_that_cannot_mark_exits_non_zero_and_counts_each_publish_not_marked() {
    // Given 10 pending events, and a DynamoDB that refuses every BatchExecuteStatement (a policy
    // without dynamodb:PartiQLUpdate)
    let env = TestEnv::new().await;
    create_orders(&env, 10).await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 7).await;
    proxy.deny(BATCH_EXECUTE_STATEMENT);

    // When a drain through it gives up after two passes that marked nothing
    let child = env
        .relay_command("relay-poller")
        .args([
            "drain",
            "--max-stalled-passes",
            "2",
            "--idle-backoff-max",
            "100ms",
        ])
        .envs(proxy.endpoint_env())
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn relay-poller");
    let (status, summary) = finish(child).await;

    // Then it exits 1: each pass published all 10 again, none counts as published, all 20
    // publishes count as not marked, and the 10 remain pending
    assert_eq!(status.code(), Some(1), "{summary:?}");
    assert!(!summary.complete);
    assert_eq!(
        (summary.published, summary.not_marked),
        (0, 20),
        "{summary:?}"
    );
    assert_eq!(summary.remaining, Some(10), "{summary:?}");
    assert_eq!(sink_counts(&env, 20).await.values().sum::<u64>(), 20);
    assert_eq!(env.pending_in_index().await, 10);
}

#[tokio::test(flavor = "multi_thread")]
async fn at_a_terminal_the_last_line_of_a_drain_is_its_outcome_in_words() {
    // Given 3 pending events
    let env = TestEnv::new().await;
    create_orders(&env, 3).await;

    // When a person runs a drain at a terminal (`script` gives it one)
    let poller = outbox_tests::workspace_binary("relay-poller");
    let output = tokio::process::Command::new("script")
        .envs(env.relay_env())
        .args(["-qec", &format!("{} drain", poller.display()), "/dev/null"])
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .output()
        .await
        .expect("script runs");

    // Then it exits 0 and the last line it sees says what happened, in words, after the logs
    let terminal = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = terminal
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(output.status.code(), Some(0), "{terminal}");
    let last = lines.last().copied().unwrap_or_default();
    assert!(
        last.starts_with(
            "relay-poller: drain: published 3 events (0 already marked, 0 dead-lettered) in "
        ) && last.ends_with("; nothing left pending"),
        "{terminal}"
    );
    assert!(
        lines.iter().any(|l| l.contains("drain finished")),
        "the log lines stay: {terminal}"
    );
}
