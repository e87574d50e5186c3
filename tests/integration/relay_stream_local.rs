//! `relay-stream-local` end to end: orders written with the writer (or items written by another
//! client) are read from the emulator's stream and arrive on the bus, marked published.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::time::Duration;

use outbox_shared::OutboxStatus;
use outbox_tests::fault_proxy::{BATCH_EXECUTE_STATEMENT, FaultProxy, FaultRates, GET_RECORDS};
use outbox_tests::{TEST_SOURCE, TestEnv, emulator_endpoints, minimal_outbox_item};
use relay_runtime::TargetKind;
use serde_json::Value;

/// Runs `relay-stream-local` against `env` until the stream is idle and returns its summary.
async fn run_relay(env: &TestEnv, args: &[&str]) -> Value {
    let output = env
        .relay_command("relay-stream-local")
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .expect("relay-stream-local runs");
    let logs = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit status {}: {logs}",
        output.status
    );
    assert_logs_are_json_lines(&logs);
    summary_of(&output.stdout)
}

/// Logs redirected away from a terminal are one JSON object a line, with no colour codes.
fn assert_logs_are_json_lines(logs: &str) {
    assert!(!logs.is_empty(), "no log lines at info");
    assert!(
        !logs.contains('\u{1b}'),
        "colour codes in redirected logs: {logs}"
    );
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        let parsed: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("log line {line:?}: {e}"));
        assert!(parsed["level"].is_string(), "{line}");
    }
}

fn summary_of(stdout: &[u8]) -> Value {
    let stdout = String::from_utf8_lossy(stdout);
    let line = stdout.lines().last().expect("a summary line on stdout");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("summary {line:?}: {e}"))
}

/// Writes `count` orders one at a time; their event ids.
async fn create_orders(env: &TestEnv, count: usize) -> Vec<String> {
    env.create_orders(count, 1).await
}

/// Asserts every outbox item is `PUBLISHED` and out of the pending index.
async fn assert_all_published(env: &TestEnv, expected: usize) {
    let items = env.outbox_items().await;
    assert_eq!(items.len(), expected);
    for item in &items {
        assert_eq!(item.status, OutboxStatus::Published, "{}", item.event_id);
        assert_eq!(item.gsi1pk, None, "{}", item.event_id);
        assert_eq!(item.gsi1sk, None, "{}", item.event_id);
    }
    assert_eq!(env.pending_in_index().await, 0);
}

#[tokio::test]
async fn an_idle_shard_is_read_at_the_base_rate_however_long_a_read_takes() {
    // Given an empty stream whose GetRecords answers 150 ms late
    let env = TestEnv::new().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 13).await;
    proxy.slow_down(GET_RECORDS, Duration::from_millis(150));

    // When relay-stream-local reads it (a poll interval of 250 ms, the default) until it has been
    // idle for 3 s
    let output = env
        .relay_command("relay-stream-local")
        .args(["--from", "trim-horizon", "--exit-when-idle", "3s"])
        .envs(proxy.endpoint_env())
        .env("RUST_LOG", "error")
        .output()
        .await
        .expect("relay-stream-local runs");
    assert!(
        output.status.success(),
        "exit status {}: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );

    // Then it read the shard four times a second, as Lambda polls it: a read every 250 ms from
    // the start of the last (13 reads in the 3 s), not 250 ms after each ended (every 400 ms: 9),
    // and never faster
    let reads = proxy.counts_for(GET_RECORDS).passed_calls;
    assert!(
        (11..=14).contains(&reads),
        "{reads} GetRecords calls in 3 s idle: expected 13, a read every 250 ms"
    );
}

#[tokio::test]
async fn a_run_that_could_mark_nothing_reports_every_event_not_marked_and_exits_non_zero() {
    // Given 20 orders on the stream, and a DynamoDB that refuses every BatchExecuteStatement (a
    // policy without dynamodb:PartiQLUpdate; an endpoint without PartiQL refuses it likewise)
    let env = TestEnv::new().await;
    let written: HashSet<String> = create_orders(&env, 20).await.into_iter().collect();
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 7).await;
    proxy.deny(BATCH_EXECUTE_STATEMENT);

    // When relay-stream-local relays them through it
    let output = env
        .relay_command("relay-stream-local")
        .args(["--from", "trim-horizon", "--exit-when-idle", "1s"])
        .envs(proxy.endpoint_env())
        .env("RUST_LOG", "error")
        .output()
        .await
        .expect("relay-stream-local runs");

    // Then it published all 20, its summary counts every one of them not marked, and it exits
    // non-zero
    let summary = summary_of(&output.stdout);
    assert_eq!(summary["published"], 20, "{summary}");
    assert_eq!(summary["not_marked"], summary["published"], "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert!(
        !output.status.success(),
        "exit status {}: {summary}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(proxy.counts_for(BATCH_EXECUTE_STATEMENT).denied_calls > 0);
    // And the events did reach the bus, and stay pending for the poller to publish again
    let received: HashSet<String> = env
        .wait_for_sink(20, Duration::from_secs(30))
        .await
        .iter()
        .map(|m| m.event_id().to_owned())
        .collect();
    assert_eq!(received, written);
    assert_eq!(env.pending_in_index().await, 20);
}

#[tokio::test]
async fn relays_250_orders_in_exactly_25_publish_calls() {
    // Given 250 orders created with the writer
    let env = TestEnv::new().await;
    let event_ids = create_orders(&env, 250).await;

    // When relay-stream-local reads the stream from the start in batches of 100
    let summary = run_relay(
        &env,
        &[
            "--batch-size",
            "100",
            "--from",
            "trim-horizon",
            "--exit-when-idle",
            "1s",
        ],
    )
    .await;

    // Then it published 250 events in 25 PutEvents calls (counted by the publisher), ignoring the
    // 250 order inserts and the 250 MODIFY records its own "mark published" updates produced
    assert_eq!(summary["published"], 250, "{summary}");
    assert_eq!(summary["publish_calls"], 25, "{summary}");
    // and under the key's earlier name, kept one release for scripts (deprecated)
    assert_eq!(summary["put_events_calls"], 25, "{summary}");
    assert_eq!(summary["ignored"], 500, "{summary}");
    assert_eq!(summary["dead_lettered"], 0, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");

    // And exactly 250 messages with the documented envelope arrive on the sink queue
    let messages = env.wait_for_sink(250, Duration::from_secs(30)).await;
    assert_eq!(messages.len(), 250);
    let items: HashMap<String, _> = env
        .outbox_items()
        .await
        .into_iter()
        .map(|i| (i.event_id.clone(), i))
        .collect();
    let received: HashSet<&str> = messages.iter().map(|m| m.event_id()).collect();
    let written: HashSet<&str> = event_ids.iter().map(String::as_str).collect();
    assert_eq!(received, written);
    for message in &messages {
        let item = &items[message.event_id()];
        assert_eq!(message.source(), TEST_SOURCE);
        assert_eq!(message.detail_type(), "OrderCreated");
        let metadata = &message.envelope.metadata;
        assert_eq!(metadata.event_type, "OrderCreated");
        assert_eq!(metadata.aggregate_id, item.aggregate_id);
        assert_eq!(metadata.occurred_at, item.created_at);
        assert_eq!(message.envelope.data["status"], "CREATED");
        assert_eq!(
            message.envelope.data["orderId"].as_str(),
            item.aggregate_id.as_deref()
        );
    }

    // And every outbox item ends PUBLISHED without GSI1 keys
    assert_all_published(&env, 250).await;
}

#[tokio::test]
async fn relays_items_written_by_another_client_with_only_the_required_attributes() {
    // Given outbox items put by a non-Rust client with only the required attributes
    let env = TestEnv::new().await;
    let mut ids = Vec::new();
    for i in 0..12 {
        let id = format!("ext-{i:03}");
        let created_at = format!("2026-11-22T10:00:{i:02}Z");
        env.put_raw_item(minimal_outbox_item(
            "external",
            &id,
            "InventoryReserved",
            &format!(r#"{{"reservation":{i}}}"#),
            &created_at,
            i % 4,
        ))
        .await;
        ids.push(id);
    }

    // When relay-stream-local relays the stream
    let summary = run_relay(&env, &["--exit-when-idle", "1s"]).await;

    // Then each arrives once with its own event id and payload, and is marked published
    assert_eq!(summary["published"], 12, "{summary}");
    let messages = env.wait_for_sink(12, Duration::from_secs(20)).await;
    let mut received: Vec<(String, Value)> = messages
        .iter()
        .map(|m| (m.event_id().to_owned(), m.envelope.data.clone()))
        .collect();
    received.sort_by(|a, b| a.0.cmp(&b.0));
    let expected: Vec<(String, Value)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.clone(), serde_json::json!({"reservation": i})))
        .collect();
    assert_eq!(received, expected);
    assert!(
        messages
            .iter()
            .all(|m| m.detail_type() == "InventoryReserved")
    );
    assert_all_published(&env, 12).await;
}

#[tokio::test]
async fn sigterm_prints_the_summary_and_exits_zero() {
    // Given relay-stream-local following the stream from `latest`, with no idle exit
    let env = TestEnv::new().await;
    let child = env
        .relay_command("relay-stream-local")
        .args(["--from", "latest"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("relay-stream-local starts");
    // Give it time to take its LATEST iterator before writing (LATEST excludes earlier records).
    tokio::time::sleep(Duration::from_secs(2)).await;

    // When orders are written while it runs, and it then receives SIGTERM
    let event_ids = create_orders(&env, 5).await;
    let messages = env.wait_for_sink(5, Duration::from_secs(20)).await;
    let pid = child.id().expect("running").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let output = child.wait_with_output().await.expect("exits");

    // Then it exits 0 with a summary counting what it published
    assert!(output.status.success(), "exit status {}", output.status);
    let summary = summary_of(&output.stdout);
    assert_eq!(summary["published"], 5, "{summary}");
    let received: HashSet<String> = messages.iter().map(|m| m.event_id().to_owned()).collect();
    assert_eq!(received, event_ids.into_iter().collect());
}

/// Sets the `ttl` of the pending outbox items of `event_ids` to `ttl` (epoch seconds).
async fn expire_pending_items(env: &TestEnv, event_ids: &[String], ttl: i64) -> usize {
    let pending: Vec<_> = env
        .outbox_items()
        .await
        .into_iter()
        .filter(|item| item.status == OutboxStatus::Pending && event_ids.contains(&item.event_id))
        .collect();
    for item in &pending {
        env.dynamodb
            .update_item()
            .table_name(&env.table_name)
            .key(
                "PK",
                aws_sdk_dynamodb::types::AttributeValue::S(item.pk.clone()),
            )
            .key(
                "SK",
                aws_sdk_dynamodb::types::AttributeValue::S(item.sk.clone()),
            )
            .update_expression("SET #ttl = :ttl")
            .expression_attribute_names("#ttl", outbox_shared::schema::attr::TTL)
            .expression_attribute_values(
                ":ttl",
                aws_sdk_dynamodb::types::AttributeValue::N(ttl.to_string()),
            )
            .send()
            .await
            .expect("set ttl");
    }
    pending.len()
}

/// On one target: a REMOVE's event is published as an INSERT's is, through the drain's publisher,
/// whose run on every target is `poller_drain::expired_pending_events_are_published_and_kept_the_retention_after`.
#[tokio::test(flavor = "multi_thread")]
async fn pending_events_deleted_by_ttl_are_published_from_their_removes() {
    // Given 12 pending events on a table provisioned from the template, whose INSERTs the relay
    // will never see: it starts from LATEST, as it would after the stream's 24 h
    let env = TestEnv::with_target(TargetKind::Classic).await;
    let expiring = create_orders(&env, 12).await;
    let child = env
        .relay_command("relay-stream-local")
        .args(["--from", "latest", "--exit-when-idle", "30s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("relay-stream-local starts");
    // It reads past LATEST once an order written now arrives on the bus
    let mut canaries = 0;
    while env.sink_depth().await == 0 {
        assert!(canaries < 10, "relay-stream-local published no new order");
        create_orders(&env, 1).await;
        canaries += 1;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // (an order written before it took its iterator is not on its stream: only those after count)
    tokio::time::sleep(Duration::from_secs(2)).await;
    let canaries_published = env.drain_sink().await.len() as u64;

    // When DynamoDB's TTL deletes the 12 pending items for real (their ttl set in the past)
    let yesterday = chrono::Utc::now().timestamp() - 24 * 3600;
    assert_eq!(expire_pending_items(&env, &expiring, yesterday).await, 12);
    let delivered = env.wait_for_sink(12, Duration::from_secs(60)).await;

    // Then each was published from its REMOVE record's old image, once, with its event id
    let received: Vec<&str> = delivered.iter().map(|m| m.event_id()).collect();
    let mut sorted = received.clone();
    sorted.sort_unstable();
    let mut written: Vec<&str> = expiring.iter().map(String::as_str).collect();
    written.sort_unstable();
    assert_eq!(sorted, written, "delivered {received:?}");
    // And the items are gone (TTL deleted them), and the relay counts what it published
    assert!(
        env.outbox_items()
            .await
            .iter()
            .all(|item| !expiring.contains(&item.event_id)),
        "a TTL-expired item is still in the table"
    );
    let pid = child.id().expect("running").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let output = child.wait_with_output().await.expect("exits");
    let summary = summary_of(&output.stdout);
    assert_eq!(summary["published"], 12 + canaries_published, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
}

/// The reader's own parts, without the emulator (its crate has no test harness of its own: each
/// would link the whole AWS SDK once more).
mod parts {
    use aws_sdk_dynamodbstreams::types::{self as sdk, AttributeValue as Av, OperationType};
    use relay_stream_local::Summary;
    use relay_stream_local::records::to_event_record;
    use serde_dynamo::AttributeValue;

    #[test]
    fn a_run_marked_none_only_when_events_left_and_every_mark_failed() {
        let summary = |published, dead_lettered, not_marked| Summary {
            published,
            dead_lettered,
            not_marked,
            ..Summary::default()
        };
        assert!(summary(3, 1, 4).marked_none());
        assert!(!summary(3, 1, 3).marked_none(), "one was marked");
        assert!(!summary(0, 0, 0).marked_none(), "nothing to mark");
        assert!(!summary(100, 0, 0).marked_none());
    }

    #[test]
    fn converts_every_field_the_handler_reads() {
        let change = sdk::StreamRecord::builder()
            .approximate_creation_date_time(aws_smithy_types_dt(1_700_000_000_123))
            .keys("PK", Av::S("USER#u".into()))
            .new_image("EntityType", Av::S("OutboxEvent".into()))
            .new_image("Sequence", Av::N("3".into()))
            .sequence_number("000123")
            .size_bytes(42)
            .stream_view_type(sdk::StreamViewType::NewAndOldImages)
            .build();
        let record = sdk::Record::builder()
            .event_id("ev1")
            .event_name(OperationType::Insert)
            .aws_region("us-east-1")
            .user_identity(
                sdk::Identity::builder()
                    .r#type("Service")
                    .principal_id("dynamodb.amazonaws.com")
                    .build(),
            )
            .dynamodb(change)
            .build();
        let out = to_event_record(&record, "arn:stream");
        assert_eq!(out.event_name, "INSERT");
        assert_eq!(out.event_source_arn.as_deref(), Some("arn:stream"));
        assert_eq!(out.change.sequence_number.as_deref(), Some("000123"));
        assert_eq!(
            out.change.approximate_creation_date_time.timestamp_millis(),
            1_700_000_000_123
        );
        assert_eq!(
            out.change.new_image.get("Sequence"),
            Some(&AttributeValue::N("3".into()))
        );
        assert_eq!(
            out.user_identity.map(|u| u.principal_id).as_deref(),
            Some("dynamodb.amazonaws.com")
        );
        // The converted record serializes as Lambda's own JSON shape does.
        let json = serde_json::to_value(to_event_record(
            &sdk::Record::builder().build(),
            "arn:stream",
        ))
        .unwrap();
        assert!(json.get("dynamodb").is_some());
    }

    fn aws_smithy_types_dt(millis: i64) -> aws_sdk_dynamodbstreams::primitives::DateTime {
        aws_sdk_dynamodbstreams::primitives::DateTime::from_millis(millis)
    }
}
