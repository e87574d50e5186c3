//! `PutEvents` calls EventBridge refuses as a whole (HTTP 400 `ValidationException`), which moto
//! accepts: `relay-poller drain` runs through [`outbox_tests::fault_proxy`], as strict as
//! EventBridge about an entry's `DetailType` and `TraceHeader` and a call's size. One entry at
//! fault must not strand the others of its call, nor the later events of their aggregates.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use outbox_shared::OutboxStatus;
use outbox_shared::schema::attr;
use outbox_shared::time::format_timestamp;
use outbox_tests::fault_proxy::{FaultProxy, FaultRates};
use outbox_tests::{TestEnv, emulator_endpoints, minimal_outbox_item};
use serde_json::Value;

/// The index shard every event of these tests is on, so that one page, and one call, holds them.
const SHARD: u16 = 0;

/// A drain that cannot finish gives up after this many passes that published nothing.
const STALLED_PASSES: &str = "3";

/// A pending event of `aggregate` (its item collection: another client writes no `AggregateId`),
/// written as another client would, unchecked, `minutes_ago`.
fn other_clients_event(
    aggregate: &str,
    event_id: &str,
    event_type: &str,
    payload: &str,
    minutes_ago: i64,
) -> HashMap<String, AttributeValue> {
    let created_at = format_timestamp(Utc::now() - chrono::Duration::minutes(minutes_ago));
    minimal_outbox_item(aggregate, event_id, event_type, payload, &created_at, SHARD)
}

/// What a drain through the proxy did: its exit, its summary, its log.
struct Drained {
    success: bool,
    summary: Value,
    stderr: String,
}

async fn drain_through(env: &TestEnv, proxy: &FaultProxy, extra: &[&str]) -> Drained {
    let output = env
        .relay_command("relay-poller")
        .args(["drain", "--max-stalled-passes", STALLED_PASSES])
        .args(["--idle-backoff-max", "200ms"])
        .args(extra)
        .envs(proxy.endpoint_env())
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("relay-poller runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    Drained {
        success: output.status.success(),
        summary: serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("drain summary {stdout:?}: {e}")),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

async fn statuses(env: &TestEnv) -> HashMap<String, OutboxStatus> {
    env.outbox_items()
        .await
        .into_iter()
        .map(|item| (item.event_id, item.status))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_entry_eventbridge_refuses_strands_none_of_its_neighbours() {
    // Given ten aggregates with two pending events each, written by another client: the first
    // events, oldest, share a page and a PutEvents call; one of them has an EventType of 200
    // characters (DetailType: EventBridge accepts 128) and another a TraceHeader of 600
    // characters (EventBridge accepts 500), either of which makes EventBridge refuse the call
    let env = TestEnv::new().await;
    let long_type = "OrderCreatedWithAVeryLongTypeName".repeat(7)[..200].to_owned();
    let long_trace = format!("Root=1-{}", "0".repeat(593));
    let mut later = HashSet::new();
    let mut expected = HashSet::new();
    for n in 0..10 {
        let aggregate = format!("agg-{n}");
        let (first, second) = (format!("{aggregate}-1"), format!("{aggregate}-2"));
        let event_type = if n == 0 { &long_type } else { "OrderCreated" };
        let mut item = other_clients_event(&aggregate, &first, event_type, "{}", 10);
        if n == 1 {
            item.insert(
                attr::TRACE_HEADER.to_owned(),
                AttributeValue::S(long_trace.clone()),
            );
        }
        env.put_raw_item(item).await;
        env.put_raw_item(other_clients_event(
            &aggregate,
            &second,
            "OrderShipped",
            "{}",
            9,
        ))
        .await;
        if n != 0 {
            expected.insert(first);
        }
        expected.insert(second.clone());
        later.insert(second);
    }
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 1).await;

    // When `relay-poller drain` runs through an AWS as strict as EventBridge
    let drained = drain_through(&env, &proxy, &[]).await;

    // Then it exits 0 with nothing left pending
    let summary = &drained.summary;
    assert!(
        drained.success,
        "drain failed: {summary}\nstderr:\n{}",
        drained.stderr
    );
    assert_eq!(summary["complete"], true, "{summary}");
    assert_eq!(env.pending_in_index().await, 0);

    // And the neighbours, the later events of every aggregate and the event with the long trace
    // header (published without it) reached the bus
    let delivered: HashSet<String> = env
        .wait_for_sink(19, Duration::from_secs(30))
        .await
        .iter()
        .map(|m| m.event_id().to_owned())
        .collect();
    assert_eq!(delivered, expected);
    assert!(later.is_subset(&delivered));
    assert_eq!(
        (
            summary["published"].as_u64(),
            summary["dead_lettered"].as_u64()
        ),
        (Some(19), Some(1)),
        "{summary}"
    );
    // And the relay sent no call EventBridge would refuse
    assert_eq!(proxy.counts().refused_calls, 0, "{:?}", proxy.counts());

    // And the event with the long type went to the dead-letter queue with its record, the
    // reason naming the attribute and the limit, not the value
    let letters = env.drain_dead_letters().await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    let letter = &letters[0];
    assert_eq!(letter.event_id.as_deref(), Some("agg-0-1"));
    assert!(
        letter.reason.contains("EventType is 200 characters")
            && letter.reason.contains("DetailType of 1 to 128"),
        "{}",
        letter.reason
    );
    assert!(!letter.reason.contains(&long_type), "{}", letter.reason);
    assert_eq!(letter.record[attr::EVENT_TYPE], long_type.as_str());
    let statuses = statuses(&env).await;
    assert_eq!(statuses["agg-0-1"], OutboxStatus::DeadLettered);
    assert_eq!(statuses["agg-1-1"], OutboxStatus::Published);

    // And the operator is told the trace header was left off, without its value
    let warning = drained
        .stderr
        .lines()
        .find(|l| l.contains("agg-1-1") && l.contains("TraceHeader"))
        .unwrap_or_else(|| panic!("no warning about the trace header:\n{}", drained.stderr));
    assert!(warning.contains("600 characters"), "{warning}");
    assert!(!warning.contains(&long_trace), "{warning}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_over_the_buss_request_size_is_split_until_each_part_fits() {
    // Given seven pending events of about 60 KiB each on one shard, and a relay configured for
    // 1 MiB requests in front of a bus that takes 256 KiB: EventBridge refuses the call of all
    // seven (about 420 KiB) as a whole
    let env = TestEnv::new().await;
    let payload = serde_json::json!({ "blob": "b".repeat(60 * 1024) }).to_string();
    let written: HashSet<String> = (0..7).map(|n| format!("big-{n}")).collect();
    for id in &written {
        env.put_raw_item(other_clients_event(id, id, "BlobStored", &payload, 10))
            .await;
    }
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 1).await;

    // When `relay-poller drain` runs through it
    let drained = drain_through(&env, &proxy, &["--max-request-bytes", "1048576"]).await;

    // Then the call was refused once and split into halves that fit, every event reached the
    // bus once, none was dead-lettered, and the drain exits 0 with nothing pending
    let summary = &drained.summary;
    assert!(
        drained.success,
        "drain failed: {summary}\nstderr:\n{}",
        drained.stderr
    );
    assert_eq!(proxy.counts().refused_calls, 1, "{:?}", proxy.counts());
    let messages = env.wait_for_sink(7, Duration::from_secs(30)).await;
    let delivered: HashSet<String> = messages.iter().map(|m| m.event_id().to_owned()).collect();
    assert_eq!(delivered, written);
    assert_eq!(messages.len(), 7);
    assert_eq!(
        (
            summary["published"].as_u64(),
            summary["dead_lettered"].as_u64()
        ),
        (Some(7), Some(0)),
        "{summary}"
    );
    assert_eq!(env.pending_in_index().await, 0);
}
