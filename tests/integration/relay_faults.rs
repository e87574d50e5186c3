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

use outbox_tests::fault_proxy::{
    BATCH_EXECUTE_STATEMENT, FaultCounts, FaultProxy, FaultRates, PUBLISH_BATCH,
    PUT_EVENTS_CLASSIC, PUT_EVENTS_V2, PUT_RECORDS, SEND_MESSAGE_BATCH,
};
use outbox_tests::{TestEnv, emulator_endpoints};
use relay_runtime::TargetKind;
use serde_json::Value;

const RATES: FaultRates = FaultRates {
    dynamodb_calls: 20,
    put_events_entries: 30,
    lost_replies: 10,
};
const SEED: u64 = 0x0b0c_fa17;
/// Events per run of the fault scenarios: every fault class still happens (the assertions check
/// each), at under a third of the calls of the 1,000 they wrote before issue 40 cut the suite.
const EVENTS: usize = 300;
/// Events per target of the lost-replies scenario: its three first replies lost on purpose make
/// the duplicates (or their suppression), a tenth of the calls more at random (300 before issue
/// 40 halved the suite: the three lost on purpose are what the assertions rest on).
const LOST_REPLY_EVENTS: usize = 150;
/// Orders of the first-event-fails scenario, five events each (40 before issue 40 halved the
/// suite): each order's first event fails once, so every target's partial failure is answered
/// twenty times.
const FAILING_ORDERS: usize = 20;
/// Marks whose reply is lost after they took effect, then marks throttled, on top of the random
/// faults: a run of 300 events makes 13 to 18 marks, so at 20 % a random throttle or 500 of a
/// mark, let alone a lost reply (a tenth of the 500s), is a matter of luck (0 of 18 in one run of
/// the suite).
const LOST_MARK_REPLIES: u32 = 3;
const THROTTLED_MARKS: u32 = 2;

/// A faulty AWS in front of the emulator, its first marks' replies lost and the next throttled.
async fn faulty_aws() -> FaultProxy {
    let proxy = FaultProxy::start(&emulator_endpoints(), RATES, SEED).await;
    proxy.lose_next_replies(BATCH_EXECUTE_STATEMENT, LOST_MARK_REPLIES);
    proxy.throttle_next(BATCH_EXECUTE_STATEMENT, THROTTLED_MARKS);
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

on_every_target!(drain_publishes_300_events_through_faulty_aws_with_none_missing);

async fn drain_publishes_300_events_through_faulty_aws_with_none_missing(kind: TargetKind) {
    // Given 300 pending events (written directly) and a faulty AWS in front of the emulator
    let env = TestEnv::with_target(kind).await;
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

/// The stream relay on one target: it reaches every target through the drain's publisher, whose
/// run on each target is the test above.
#[tokio::test(flavor = "multi_thread")]
async fn relay_stream_local_relays_300_events_through_faulty_aws_with_none_missing() {
    // Given 300 orders on the stream and a faulty AWS in front of the emulator (the stream
    // reads themselves are not faulted)
    let env = TestEnv::with_target(TargetKind::Classic).await;
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

/// The proxy's name for `kind`'s publish call.
fn put_events_of(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Classic => PUT_EVENTS_CLASSIC,
        TargetKind::Custom => PUT_EVENTS_V2,
        TargetKind::Sns => PUBLISH_BATCH,
        TargetKind::Sqs => SEND_MESSAGE_BATCH,
        TargetKind::Kinesis => PUT_RECORDS,
    }
}

/// Every target as the tests below run it: each kind, the topic and the queue FIFO and standard.
const TARGETS: [(TargetKind, bool); 7] = [
    (TargetKind::Classic, false),
    (TargetKind::Custom, true),
    (TargetKind::Sns, true),
    (TargetKind::Sns, false),
    (TargetKind::Sqs, true),
    (TargetKind::Sqs, false),
    (TargetKind::Kinesis, false),
];

/// A target's name in messages: its kind, and whether it is FIFO where a kind has both.
fn named(kind: TargetKind, fifo: bool) -> String {
    match kind {
        TargetKind::Sns | TargetKind::Sqs if fifo => format!("{kind} FIFO"),
        TargetKind::Sns | TargetKind::Sqs => format!("{kind} standard"),
        _ => kind.to_string(),
    }
}

/// Waits for the sink to hold `expected` events and then to stay still for a while (late
/// deliveries and duplicates included); every event id with how often it arrived, in arrival
/// order.
async fn settled_sink(env: &TestEnv, expected: usize) -> Vec<outbox_tests::SinkMessage> {
    let mut messages = env
        .wait_for_sink(expected as u64, Duration::from_secs(60))
        .await;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let more = env.drain_sink().await;
        if more.is_empty() {
            return messages;
        }
        messages.extend(more);
    }
}

/// Events a consumer received before an earlier event (by `Sequence`) of the same aggregate.
fn out_of_order(messages: &[outbox_tests::SinkMessage]) -> usize {
    let mut by_aggregate: HashMap<String, Vec<u64>> = HashMap::new();
    for m in messages {
        let meta = &m.envelope.metadata;
        by_aggregate
            .entry(meta.aggregate_id.clone().unwrap_or_default())
            .or_default()
            .push(meta.sequence.unwrap_or_default());
    }
    by_aggregate
        .values()
        .map(|sequences| {
            sequences
                .iter()
                .enumerate()
                .filter(|(i, s)| sequences[i + 1..].iter().any(|later| later < s))
                .count()
        })
        .sum()
}

/// Which relay a test publishes with: `relay-poller drain`, or `relay-stream-local` (the Lambda's
/// handler on the table's stream, from its start) followed by a drain without faults for what
/// it left pending (a batch given up after its retries).
#[derive(Clone, Copy, Debug)]
enum Relay {
    Drain,
    Stream,
}

impl Relay {
    /// Runs the relay through `proxy` until it is done with `env`'s events; its summary.
    async fn publish(self, env: &TestEnv, proxy: &FaultProxy) -> Value {
        match self {
            Relay::Drain => {
                let summary = run_through(env, proxy, "relay-poller", &["drain"]).await;
                assert_eq!(summary["complete"], true, "{summary}");
                summary
            }
            Relay::Stream => {
                let summary = run_through(
                    env,
                    proxy,
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
                assert!(summary["published"].as_u64().unwrap() > 0, "{summary}");
                let output = env
                    .relay_command("relay-poller")
                    .args(["drain"])
                    .env("RUST_LOG", "error")
                    .stdout(Stdio::piped())
                    .output()
                    .await
                    .unwrap();
                assert!(output.status.success(), "{output:?}");
                summary
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn lost_publish_replies_duplicate_events_on_targets_without_dedup_and_none_on_fifo_targets() {
    lost_publish_replies(Relay::Drain, &TARGETS).await;
}

/// The stream relay on one FIFO target: it resends through the drain's publisher, whose run on
/// every target is the test above.
#[tokio::test(flavor = "multi_thread")]
async fn lost_publish_replies_of_the_stream_relay_duplicate_no_event_on_fifo_targets() {
    lost_publish_replies(Relay::Stream, &[(TargetKind::Custom, true)]).await;
}

/// A FIFO target (the Custom Event Bus, a FIFO topic or queue) suppresses an entry sent again
/// within its window; the others deliver it twice.
fn deduplicates(kind: TargetKind, fifo: bool) -> bool {
    kind == TargetKind::Custom || fifo
}

async fn lost_publish_replies(relay: Relay, targets: &[(TargetKind, bool)]) {
    // (the targets side by side, each with its own table, sink and proxy)
    let duplicates: HashMap<String, (TargetKind, bool, u64)> = futures::future::join_all(
        targets
            .iter()
            .map(|&(kind, fifo)| lost_publish_replies_on(relay, kind, fifo)),
    )
    .await
    .into_iter()
    .collect();

    // And the targets without de-duplication delivered the events of the lost replies twice,
    // the FIFO ones never: the resent entries were suppressed in their window
    for (name, &(kind, fifo, duplicated)) in &duplicates {
        if deduplicates(kind, fifo) {
            assert_eq!(duplicated, 0, "{relay:?}, {name}: {duplicates:?}");
        } else {
            assert!(duplicated > 0, "{relay:?}, {name}: {duplicates:?}");
        }
    }
}

/// [`lost_publish_replies`] on one target: its name, and the duplicates its sink received.
async fn lost_publish_replies_on(
    relay: Relay,
    kind: TargetKind,
    fifo: bool,
) -> (String, (TargetKind, bool, u64)) {
    // Given 150 orders and an AWS whose only fault is that a tenth of the publish calls (and
    // the first three) take effect and lose their reply
    let rates = FaultRates {
        dynamodb_calls: 0,
        put_events_entries: 0,
        lost_replies: 10,
    };
    let name = named(kind, fifo);
    let env = TestEnv::with_target_of(kind, fifo).await;
    let written: HashSet<String> = env
        .create_orders(LOST_REPLY_EVENTS, 32)
        .await
        .into_iter()
        .collect();
    let proxy = FaultProxy::start(&emulator_endpoints(), rates, SEED).await;
    proxy.lose_next_replies(put_events_of(kind), 3);

    // When the relay publishes them through it
    let summary = relay.publish(&env, &proxy).await;

    // Then every event reached the sink, and the replies were really lost
    // (the calls' count under the key's earlier name too, deprecated, kept one release)
    assert_eq!(
        summary["put_events_calls"], summary["publish_calls"],
        "{summary}"
    );
    let lost = proxy.counts_for(put_events_of(kind)).lost_replies;
    assert!(lost >= 3, "{name}: {lost} lost replies");
    let mut counts = HashMap::new();
    for message in settled_sink(&env, LOST_REPLY_EVENTS).await {
        *counts.entry(message.event_id().to_owned()).or_default() += 1;
    }
    let duplicated = assert_all_once_or_more(&counts, &written);
    eprintln!(
        "lost publish replies, {relay:?}, {name}: {duplicated} duplicates on the sink of {LOST_REPLY_EVENTS} events, {lost} replies lost, {} publish calls, {} deduplicated by the bus",
        summary["publish_calls"], summary["deduplicated"]
    );
    (name, (kind, fifo, duplicated))
}

#[tokio::test(flavor = "multi_thread")]
async fn with_each_aggregates_first_event_failing_once_no_event_arrives_before_an_earlier_one() {
    first_events_failing_once(Relay::Drain, &TARGETS).await;
}

/// The stream relay on the classic bus, the target without FIFO order of its own: the relay's
/// holding back is all that keeps the order there. Its publisher is the drain's, whose run on
/// every target is the test above.
#[tokio::test(flavor = "multi_thread")]
async fn with_each_aggregates_first_event_failing_once_the_stream_relay_delivers_none_out_of_order()
{
    first_events_failing_once(Relay::Stream, &[(TargetKind::Classic, false)]).await;
}

/// A target that keeps the order the relay publishes in: a FIFO one, the Custom Event Bus (into
/// a FIFO subscriber), Kinesis (one shard per aggregate), and the classic bus (the sink reads
/// what the relay held back in order); a standard topic or queue may reorder.
fn keeps_order(kind: TargetKind, fifo: bool) -> bool {
    fifo || matches!(
        kind,
        TargetKind::Custom | TargetKind::Kinesis | TargetKind::Classic
    )
}

async fn first_events_failing_once(relay: Relay, targets: &[(TargetKind, bool)]) {
    // (the targets side by side, each with its own table, sink and proxy)
    let found: HashMap<String, (TargetKind, bool, usize)> = futures::future::join_all(
        targets
            .iter()
            .map(|&(kind, fifo)| first_events_failing_once_on(relay, kind, fifo)),
    )
    .await
    .into_iter()
    .collect();
    // The relay holds an aggregate's later events back until its failed event is accepted, on
    // every target; the FIFO ones and Kinesis (one shard per aggregate) keep that order after
    for (name, &(kind, fifo, late)) in &found {
        if keeps_order(kind, fifo) {
            assert_eq!(late, 0, "{relay:?}, {name}: {found:?}");
        }
    }
}

/// [`first_events_failing_once`] on one target: its name, and the events its sink received before
/// an earlier event of their order.
async fn first_events_failing_once_on(
    relay: Relay,
    kind: TargetKind,
    fifo: bool,
) -> (String, (TargetKind, bool, usize)) {
    let name = named(kind, fifo);
    // Given 20 orders of five events each (created, then four status changes), and an AWS
    // where each order's first event fails its first publish attempt
    let env = TestEnv::with_target_of(kind, fifo).await;
    let writer = env.writer();
    futures::future::join_all((0..FAILING_ORDERS).map(|i| {
        let writer = writer.clone();
        async move {
            let user = format!("user-{i}");
            let line = outbox_writer::OrderLine::new("SKU-1", 1, 100);
            let created = writer
                .create_order_with_outbox(&user, outbox_writer::NewOrder::new(vec![line]))
                .await
                .expect("create");
            for status in [
                outbox_writer::OrderStatus::Confirmed,
                outbox_writer::OrderStatus::Paid,
                outbox_writer::OrderStatus::Shipped,
                outbox_writer::OrderStatus::Delivered,
            ] {
                writer
                    .update_order_status_with_outbox(&user, &created.order_id, status)
                    .await
                    .expect("update");
            }
        }
    }))
    .await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, SEED).await;
    proxy.fail_first_events_once();

    // When the relay publishes them through it
    relay.publish(&env, &proxy).await;

    // Then all 100 arrive, none before an earlier event of its order
    let failed = proxy.counts_for(put_events_of(kind)).failed_entries;
    assert_eq!(
        failed, FAILING_ORDERS as u64,
        "{name}: each first event failed once"
    );
    let events = FAILING_ORDERS * 5;
    let messages = settled_sink(&env, events).await;
    assert_eq!(messages.len(), events, "{name}");
    let late = out_of_order(&messages);
    eprintln!(
        "first event of each of {FAILING_ORDERS} orders failing once, {relay:?}, {name}: out_of_order {late} of {events} on the sink"
    );
    (name, (kind, fifo, late))
}
