//! The operator's commands against the emulator: `relay-poller redrive` puts dead-lettered events
//! back and publishes them (from either relay's dead letters, re-creating a deleted item, leaving
//! foreign messages alone), `inspect` says what happened to an event and `status --json` reports
//! the backlog, the dead letters and the strays, each asserted field by field.
//!
//! The permanent rejection is real, not mocked: the relays run with `--max-entry-bytes 100`, so
//! every order event is too large for the entry budget and is dead-lettered as `EntryTooLarge`,
//! exactly as EventBridge's own size limit would make it; "removing the cause" is running without
//! that flag.

use std::collections::HashSet;
use std::process::Stdio;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use outbox_shared::OutboxStatus;
use outbox_shared::schema::attr;
use outbox_tests::TestEnv;
use serde_json::Value;

/// The entry budget no order event fits in: the injected permanent rejection.
const TOO_SMALL: &[&str] = &["--max-entry-bytes", "100", "--max-request-bytes", "100"];

/// Runs `relay-poller` with `args`; its exit code and stdout.
async fn poller(env: &TestEnv, args: &[&str]) -> (Option<i32>, String) {
    let output = env
        .relay_command("relay-poller")
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .output()
        .await
        .expect("relay-poller runs");
    (
        output.status.code(),
        String::from_utf8(output.stdout).expect("utf-8 stdout"),
    )
}

/// `relay-poller redrive` with `args`: its one-line JSON summary (stdout is not a terminal).
async fn redrive(env: &TestEnv, args: &[&str]) -> Value {
    let mut all = vec!["redrive"];
    all.extend_from_slice(args);
    let (code, stdout) = poller(env, &all).await;
    assert_eq!(code, Some(0), "redrive failed: {stdout}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "one summary line: {stdout:?}");
    serde_json::from_str(lines[0]).expect("the summary is JSON")
}

/// The summary's counters, in a fixed order: redriven, recreated, published, skipped,
/// left_in_queue.
fn counts(summary: &Value) -> [u64; 5] {
    [
        "redriven",
        "recreated",
        "published",
        "skipped",
        "left_in_queue",
    ]
    .map(|field| {
        summary[field]
            .as_u64()
            .unwrap_or_else(|| panic!("{field} in {summary}"))
    })
}

async fn status_json(env: &TestEnv) -> Value {
    let (code, stdout) = poller(env, &["status", "--json"]).await;
    assert_eq!(code, Some(0), "{stdout}");
    serde_json::from_str(&stdout).expect("status --json is JSON")
}

async fn inspect_json(env: &TestEnv, event_id: &str) -> Value {
    let (code, stdout) = poller(env, &["inspect", "--json", event_id]).await;
    assert_eq!(code, Some(0), "{stdout}");
    let found: Value = serde_json::from_str(&stdout).expect("inspect --json is JSON");
    found[0].clone()
}

async fn status_of(env: &TestEnv) -> Vec<(String, OutboxStatus)> {
    let mut statuses: Vec<_> = env
        .outbox_items()
        .await
        .into_iter()
        .map(|item| (item.event_id, item.status))
        .collect();
    statuses.sort_by(|a, b| a.0.cmp(&b.0));
    statuses
}

#[tokio::test(flavor = "multi_thread")]
async fn redrive_delivers_what_drain_dead_lettered_once_and_a_dry_run_changes_nothing() {
    // Given 5 orders whose events the poller dead-letters (too large for its entry budget)
    let env = TestEnv::new().await;
    let written: HashSet<String> = env.create_orders(5, 5).await.into_iter().collect();
    let mut drain = vec!["drain"];
    drain.extend_from_slice(TOO_SMALL);
    let (code, stdout) = poller(&env, &drain).await;
    assert_eq!(code, Some(0), "{stdout}");
    let summary: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(summary["dead_lettered"], 5, "{summary}");
    assert_eq!(env.queue_depth(&env.dead_letter_queue_url).await, 5);

    // Then status reports them field by field
    let status = status_json(&env).await;
    assert_eq!(status["total_pending"], 0, "{status}");
    assert_eq!(status["stray_pending"], 0, "{status}");
    assert_eq!(status["expiring_pending"], 0, "{status}");
    assert_eq!(status["dead_lettered_items"], 5, "{status}");
    assert_eq!(status["dead_letter_queue_depth"], 5, "{status}");
    assert_eq!(status["oldest_created_at"], Value::Null, "{status}");
    assert_eq!(status["oldest_pending_age_seconds"], 0.0, "{status}");
    assert_eq!(status["shards"].as_array().unwrap().len(), 16, "{status}");
    assert_eq!(status["partitions"], serde_json::json!([]), "{status}");

    // And inspect shows one of them, field by field
    let id = written.iter().next().unwrap().clone();
    let seen = inspect_json(&env, &id).await;
    assert_eq!(seen["query"], id.as_str());
    assert_eq!(seen["found"], true);
    assert_eq!(seen["event_id"], id.as_str());
    assert_eq!(seen["event_type"], "OrderCreated");
    assert_eq!(seen["status"], "DEAD_LETTERED");
    assert_eq!(seen["in_pending_index"], false);
    assert_eq!(seen["partition"], Value::Null);
    assert_eq!(seen["shard"], Value::Null);
    assert_eq!(seen["published_at"], Value::Null);
    assert!(seen["dead_lettered_at"].is_string(), "{seen}");
    let reason = seen["dead_letter_reason"].as_str().unwrap();
    assert!(reason.contains("EntryTooLarge"), "{reason}");
    let age = seen["age_seconds"].as_f64().unwrap();
    assert!((0.0..120.0).contains(&age), "{age}");
    let days_left = (seen["ttl"].as_i64().unwrap() - Utc::now().timestamp()) as f64 / 86_400.0;
    assert!(
        (14.9..=15.0).contains(&days_left),
        "a dead-lettered item outlives the queue's 14 days by a day: {days_left} {seen}"
    );
    assert!(seen["expires_at"].is_string(), "{seen}");

    // When a dry run lists what a redrive would do
    let dry = redrive(&env, &["--dry-run"]).await;

    // Then it would redrive all 5, and nothing changed
    assert_eq!(counts(&dry), [5, 0, 0, 0, 0], "{dry}");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(env.queue_depth(&env.dead_letter_queue_url).await, 5);
    assert!(
        status_of(&env)
            .await
            .iter()
            .all(|(_, s)| *s == OutboxStatus::DeadLettered)
    );
    assert_eq!(env.queue_depth(&env.sink_queue_url).await, 0);

    // When the cause is gone and the redrive runs
    let done = redrive(&env, &[]).await;

    // Then all 5 reach the sink with their original event ids, the queue and the index are empty,
    // and the items are published
    assert_eq!(counts(&done), [5, 0, 5, 0, 0], "{done}");
    let delivered: HashSet<String> = env
        .wait_for_sink(5, Duration::from_secs(30))
        .await
        .iter()
        .map(|m| m.event_id().to_owned())
        .collect();
    assert_eq!(delivered, written);
    assert_eq!(env.queue_depth(&env.dead_letter_queue_url).await, 0);
    assert_eq!(env.pending_in_index().await, 0);
    assert!(
        status_of(&env)
            .await
            .iter()
            .all(|(_, s)| *s == OutboxStatus::Published)
    );
    let seen = inspect_json(&env, &id).await;
    assert_eq!(seen["status"], "PUBLISHED");
    assert_eq!(seen["dead_letter_reason"], Value::Null);
    assert!(seen["published_at"].is_string(), "{seen}");

    // And a second redrive changes nothing
    let again = redrive(&env, &[]).await;
    assert_eq!(counts(&again), [0, 0, 0, 0, 0], "{again}");
    assert_eq!(env.queue_depth(&env.sink_queue_url).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn redrive_recovers_stream_dead_letters_recreates_deleted_items_and_leaves_foreign_messages()
{
    // Given 3 orders the stream relay dead-letters (with their full stream records)
    let env = TestEnv::new().await;
    let written: HashSet<String> = env.create_orders(3, 3).await.into_iter().collect();
    let mut args = vec!["--from", "trim-horizon", "--exit-when-idle", "1s"];
    args.extend_from_slice(TOO_SMALL);
    let output = env
        .relay_command("relay-stream-local")
        .args(&args)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("relay-stream-local runs");
    assert!(output.status.success(), "{output:?}");
    let letters = env.drain_dead_letters().await;
    assert_eq!(letters.len(), 3);
    assert!(letters.iter().all(|l| l.origin == "relay-stream"));
    // (drain_dead_letters consumed them: put them back as the relay sent them)
    for letter in &letters {
        env.sqs
            .send_message()
            .queue_url(&env.dead_letter_queue_url)
            .message_body(serde_json::to_string(letter).unwrap())
            .send()
            .await
            .unwrap();
    }

    // And one of the items is deleted meanwhile (expired), and someone else's message is on the
    // queue
    let gone = env
        .outbox_items()
        .await
        .into_iter()
        .next()
        .expect("an outbox item");
    env.dynamodb
        .delete_item()
        .table_name(&env.table_name)
        .key(attr::PK, AttributeValue::S(gone.pk.clone()))
        .key(attr::SK, AttributeValue::S(gone.sk.clone()))
        .send()
        .await
        .unwrap();
    env.sqs
        .send_message()
        .queue_url(&env.dead_letter_queue_url)
        .message_body("not a dead letter of ours")
        .send()
        .await
        .unwrap();

    // When the redrive runs
    let done = redrive(&env, &[]).await;

    // Then all 3 are delivered with their event ids (the deleted one re-created from its record),
    // the foreign message stays, and every item is published
    assert_eq!(counts(&done), [3, 1, 3, 0, 1], "{done}");
    let delivered: HashSet<String> = env
        .wait_for_sink(3, Duration::from_secs(30))
        .await
        .iter()
        .map(|m| m.event_id().to_owned())
        .collect();
    assert_eq!(delivered, written);
    assert_eq!(env.queue_depth(&env.dead_letter_queue_url).await, 1);
    let statuses = status_of(&env).await;
    assert_eq!(statuses.len(), 3, "{statuses:?}");
    assert!(statuses.iter().all(|(_, s)| *s == OutboxStatus::Published));
    let recreated = inspect_json(&env, &gone.event_id).await;
    assert_eq!(recreated["status"], "PUBLISHED", "{recreated}");

    // And a second redrive changes nothing and still leaves the foreign message
    let again = redrive(&env, &[]).await;
    assert_eq!(counts(&again), [0, 0, 0, 0, 1], "{again}");
    assert_eq!(env.queue_depth(&env.dead_letter_queue_url).await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn redrive_from_the_table_with_filters_takes_only_what_is_selected() {
    // Given 4 dead-lettered orders
    let env = TestEnv::new().await;
    let written: Vec<String> = env.create_orders(4, 4).await;
    let mut drain = vec!["drain"];
    drain.extend_from_slice(TOO_SMALL);
    let (code, _) = poller(&env, &drain).await;
    assert_eq!(code, Some(0));

    // When two are redriven from the table by id, without publishing
    let done = redrive(
        &env,
        &[
            "--from-table",
            "--event-id",
            &written[0],
            "--event-id",
            &written[1],
            "--publish",
            "false",
        ],
    )
    .await;

    // Then exactly those two are pending again, in the index, for the relays to publish
    assert_eq!(counts(&done), [2, 0, 0, 0, 0], "{done}");
    assert_eq!(env.pending_in_index().await, 2);
    let seen = inspect_json(&env, &written[0]).await;
    assert_eq!(seen["status"], "PENDING");
    assert_eq!(seen["in_pending_index"], true);
    assert!(seen["shard"].as_u64().is_some_and(|s| s < 16), "{seen}");
    assert_eq!(
        inspect_json(&env, &written[2]).await["status"],
        "DEAD_LETTERED"
    );
    // (their dead-letter messages are still queued; the queue redrive skips them as done)
    assert_eq!(env.queue_depth(&env.dead_letter_queue_url).await, 4);
    assert_eq!(env.queue_depth(&env.sink_queue_url).await, 0);
}
