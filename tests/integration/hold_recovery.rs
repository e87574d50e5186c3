//! Recovery from a bus outage in hold mode, on the local emulators: the stream relay holds every
//! aggregate while the bus fails, then a fleet of two `relay-poller run` processes publishes what
//! was left to it once the bus is back, and each releases the holds of the shards it owns.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::StreamExt;
use outbox_tests::fault_proxy::{FaultProxy, FaultRates};
use outbox_tests::{TestEnv, emulator_endpoints, metric_sum, unique_name};
use outbox_writer::{NewOrder, OrderLine, OrderStatus};
use tokio::io::AsyncReadExt;

/// Aggregates held by the outage, two events each: about 12 a shard, over 16 shards.
const AGGREGATES: usize = 200;
/// The pollers' page: each shard's 25 events and 12 holds take several pages, as 2,000
/// aggregates' do at the default page of 100 (a hold released on a later page than its events).
const PAGE_SIZE: &str = "10";
/// The stream relay's batch: 8 batches' worth of held records, as 2,000 aggregates' at 500.
const BATCH_SIZE: &str = "50";
/// Bound for the fleet to publish everything and release every hold; only reached when something
/// is broken.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(240);

#[tokio::test(flavor = "multi_thread")]
async fn aggregates_held_through_an_outage_are_released_by_a_fleet_with_nothing_missing_or_out_of_order()
 {
    // Given 200 orders, each created and then confirmed, while the bus fails every entry: the
    // stream relay (hold mode) holds every order and leaves its two events to the poller
    let env = TestEnv::new().await;
    let writer = env.writer();
    futures::stream::iter(0..AGGREGATES)
        .for_each_concurrent(16, |i| {
            let writer = writer.clone();
            async move {
                let (user, id) = (format!("user-{}", i % 17), format!("held-{i:04}"));
                let order =
                    NewOrder::new(vec![OrderLine::new("SKU-1", 1, 500)]).with_order_id(id.clone());
                writer
                    .create_order_with_outbox(&user, order)
                    .await
                    .expect("order created");
                writer
                    .update_order_status_with_outbox(&user, &id, OrderStatus::Confirmed)
                    .await
                    .expect("status changed");
            }
        })
        .await;
    let outage = FaultProxy::start(
        &emulator_endpoints(),
        FaultRates {
            put_events_entries: 100,
            ..FaultRates::NONE
        },
        5,
    )
    .await;
    let output = env
        .relay_command("relay-stream-local")
        .args(["--from", "trim-horizon", "--exit-when-idle", "2s"])
        .args(["--batch-size", BATCH_SIZE])
        .env("HOLD_FAILED_AGGREGATES", "true")
        .env("PUBLISH_MAX_ATTEMPTS", "2")
        .envs(outage.endpoint_env())
        .env("RUST_LOG", "error")
        .output()
        .await
        .expect("relay-stream-local runs");
    assert!(output.status.success(), "{output:?}");
    let summary: serde_json::Value = serde_json::from_slice(
        output
            .stdout
            .split(|b| *b == b'\n')
            .rfind(|line| line.starts_with(b"{\"published\""))
            .expect("the summary line"),
    )
    .unwrap();
    assert_eq!(summary["published"], 0, "{summary}");
    assert_eq!(summary["left_to_hold"], 2 * AGGREGATES, "{summary}");

    // When the bus is back and a fleet of two pollers runs
    let lease_table = unique_name("leases");
    let mut pollers: Vec<(tokio::process::Child, tokio::task::JoinHandle<String>)> = (0..2)
        .map(|_| {
            let mut child = env
                .relay_command("relay-poller")
                .arg("run")
                .args(["--lease-table", &lease_table, "--create-lease-table"])
                .args(["--lease-duration", "10s", "--lease-renew-interval", "2s"])
                .args(["--grace-period", "0s", "--idle-backoff-max", "1s"])
                .args(["--shard-concurrency", "4", "--mark-concurrency", "8"])
                .args(["--page-size", PAGE_SIZE])
                .args(["--shutdown-timeout", "5s"])
                .env("RUST_LOG", "warn")
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .expect("spawn relay-poller run");
            // Its log and metric lines, read as they come (a full pipe would stop it).
            let mut stderr = child.stderr.take().expect("piped");
            let lines = tokio::spawn(async move {
                let mut out = String::new();
                let _ = stderr.read_to_string(&mut out).await;
                out
            });
            (child, lines)
        })
        .collect();
    let started = Instant::now();
    let messages = env
        .wait_for_sink(2 * AGGREGATES as u64, RECOVERY_TIMEOUT)
        .await;
    while env.pending_in_index().await > 0 {
        assert!(
            started.elapsed() < RECOVERY_TIMEOUT,
            "{} items (events or holds) still in the index",
            env.pending_in_index().await
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let mut outputs = Vec::new();
    for (mut poller, lines) in pollers.drain(..) {
        terminate(&poller);
        assert!(poller.wait().await.unwrap().success());
        outputs.push(lines.await.unwrap());
    }

    // Then every event reached the sink, each order's in order, and no event and no hold is left
    let mut seen = HashSet::new();
    let mut by_order: HashMap<String, Vec<u64>> = HashMap::new();
    for m in &messages {
        if seen.insert(m.event_id().to_owned()) {
            let meta = &m.envelope.metadata;
            by_order
                .entry(meta.aggregate_id.clone().expect("aggregate id"))
                .or_default()
                .push(meta.sequence.expect("sequence"));
        }
    }
    assert_eq!(seen.len(), 2 * AGGREGATES, "none missing");
    assert_eq!(by_order.len(), AGGREGATES);
    let out_of_order: Vec<_> = by_order
        .iter()
        .filter(|(_, sequences)| !sequences.is_sorted())
        .collect();
    assert!(out_of_order.is_empty(), "out of order: {out_of_order:?}");

    // And both pollers released holds, those of the shards each owned, one per aggregate
    let released: Vec<u64> = outputs
        .iter()
        .map(|out| metric_sum(out, relay_runtime::metrics::HOLDS_RELEASED))
        .collect();
    assert_eq!(
        released.iter().sum::<u64>(),
        AGGREGATES as u64,
        "{released:?}"
    );
    assert!(released.iter().all(|&n| n > 0), "{released:?}");
}

/// Asks `child` to stop as ECS does (SIGTERM).
fn terminate(child: &tokio::process::Child) {
    let pid = child.id().expect("running");
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
}
