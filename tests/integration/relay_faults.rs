//! Both relays' binaries against a faulty AWS, through [`outbox_tests::fault_proxy`]: DynamoDB
//! `UpdateItem`, `BatchExecuteStatement`, `Query` and `Scan` calls fail at 20% (throttling and
//! 500s), `PutEvents` entries at 30%, and a tenth of the 500s and of the `PutEvents` calls lose
//! their reply after the call took effect. The marks (`BatchExecuteStatement`) are under those
//! faults too, and the first few of them lose their reply after taking effect whatever the dice
//! say. Nothing may go missing; duplicates are counted, and each carries its original `eventId`
//! (a written event's).

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::time::Duration;

use outbox_tests::fault_proxy::{BATCH_EXECUTE_STATEMENT, FaultCounts, FaultProxy, FaultRates};
use outbox_tests::{TestEnv, emulator_endpoints};
use serde_json::Value;

const RATES: FaultRates = FaultRates {
    dynamodb_calls: 20,
    put_events_entries: 30,
    lost_replies: 10,
};
const SEED: u64 = 0x0b0c_fa17;
const EVENTS: usize = 1000;
/// Marks whose reply is lost after they took effect, on top of the random ones: at 20 % of ~50
/// calls and a tenth of the 500s, a random lost reply of a mark is a matter of luck.
const LOST_MARK_REPLIES: u32 = 3;

/// A faulty AWS in front of the emulator, its first marks' replies lost.
async fn faulty_aws() -> FaultProxy {
    let proxy = FaultProxy::start(&emulator_endpoints(), RATES, SEED).await;
    proxy.lose_next_replies(BATCH_EXECUTE_STATEMENT, LOST_MARK_REPLIES);
    proxy
}

/// The marks really ran under faults: some failed (throttled or 500), some lost their reply.
fn assert_marks_faulted(proxy: &FaultProxy) -> FaultCounts {
    let marks = proxy.counts_for(BATCH_EXECUTE_STATEMENT);
    assert!(
        marks.throttled_calls + marks.failed_calls > 0 && marks.lost_replies >= 1,
        "BatchExecuteStatement: {marks:?}"
    );
    assert_eq!(
        marks.invalid_calls, 0,
        "a mark DynamoDB would refuse: {marks:?}"
    );
    marks
}

/// Runs a relay binary with `args`, its AWS calls through `proxy`; its JSON summary.
pub(crate) async fn run_through(
    env: &TestEnv,
    proxy: &FaultProxy,
    bin: &str,
    args: &[&str],
) -> Value {
    let output = env
        .relay_command(bin)
        .args(args)
        .envs(proxy.endpoint_env())
        .env("RUST_LOG", "error")
        .output()
        .await
        .unwrap_or_else(|e| panic!("{bin} runs: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{bin} exit {}: {stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{bin} summary {stdout:?}: {e}"))
}

/// Every event id on the sink with how often it arrived, once at least `expected` arrived.
pub(crate) async fn sink_counts(env: &TestEnv, expected: usize) -> HashMap<String, u64> {
    let mut counts = HashMap::new();
    for message in env
        .wait_for_sink(expected as u64, Duration::from_secs(60))
        .await
    {
        *counts.entry(message.event_id().to_owned()).or_default() += 1;
    }
    counts
}

/// Zero missing, nothing unknown; the duplicates.
pub(crate) fn assert_all_once_or_more(
    counts: &HashMap<String, u64>,
    written: &HashSet<String>,
) -> u64 {
    let received: HashSet<String> = counts.keys().cloned().collect();
    let missing: Vec<_> = written.difference(&received).collect();
    let unknown: Vec<_> = received.difference(written).collect();
    assert!(missing.is_empty(), "{} missing: {missing:?}", missing.len());
    assert!(
        unknown.is_empty(),
        "unknown event ids on the sink: {unknown:?}"
    );
    counts.values().map(|n| n - 1).sum()
}

#[tokio::test(flavor = "multi_thread")]
async fn drain_publishes_1000_events_through_faulty_aws_with_none_missing() {
    // Given 1,000 pending events (written directly) and a faulty AWS in front of the emulator
    let env = TestEnv::new().await;
    let written: HashSet<String> = env.create_orders(EVENTS, 32).await.into_iter().collect();
    let proxy = faulty_aws().await;

    // When `relay-poller drain` runs through it
    let summary = run_through(
        &env,
        &proxy,
        "relay-poller",
        &[
            "drain",
            "--max-stalled-passes",
            "30",
            "--idle-backoff-max",
            "200ms",
        ],
    )
    .await;

    // Then it completes, every event reached the sink, and the faults really happened
    assert_eq!(summary["complete"], true, "{summary}");
    let faults = proxy.counts();
    assert!(
        faults.throttled_calls > 0
            && faults.failed_calls > 0
            && faults.lost_replies > 0
            && faults.failed_entries > 0,
        "{faults:?}"
    );
    let marks = assert_marks_faulted(&proxy);
    let counts = sink_counts(&env, EVENTS).await;
    let duplicates = assert_all_once_or_more(&counts, &written);
    eprintln!(
        "relay-poller drain under faults: {duplicates} duplicates on the sink, each with its original eventId; injected {faults:?}, into the marks {marks:?}; summary {summary}"
    );
    assert_eq!(env.pending_in_index().await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn relay_stream_local_relays_1000_events_through_faulty_aws_with_none_missing() {
    // Given 1,000 orders on the stream and a faulty AWS in front of the emulator (the stream
    // reads themselves are not faulted)
    let env = TestEnv::new().await;
    let written: HashSet<String> = env.create_orders(EVENTS, 32).await.into_iter().collect();
    let proxy = faulty_aws().await;

    // When relay-stream-local relays them through it
    let summary = run_through(
        &env,
        &proxy,
        "relay-stream-local",
        &[
            "--from",
            "trim-horizon",
            "--exit-when-idle",
            "2s",
            "--batch-size",
            "100",
        ],
    )
    .await;
    let faults = proxy.counts();
    assert!(
        faults.failed_entries > 0 && faults.lost_replies > 0,
        "{faults:?}"
    );
    let marks = assert_marks_faulted(&proxy);
    assert!(summary["published"].as_u64().unwrap() > 0, "{summary}");

    // And the poller picks up what the stream relay left pending (a failed mark, a batch given
    // up after its retries), without faults
    let output = env
        .relay_command("relay-poller")
        .args(["drain"])
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .output()
        .await
        .unwrap();
    assert!(output.status.success(), "{output:?}");

    // Then every event reached the sink; duplicates carry their original eventId
    let counts = sink_counts(&env, EVENTS).await;
    let duplicates = assert_all_once_or_more(&counts, &written);
    eprintln!(
        "relay-stream-local under faults: {duplicates} duplicates on the sink, each with its original eventId; stream summary {summary}; injected {faults:?}, into the marks {marks:?}"
    );
    assert_eq!(env.pending_in_index().await, 0);
}
