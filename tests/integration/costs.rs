//! The calls behind docs/costs.md, counted on real runs: the writer, `relay-stream-local` (the
//! Lambda's handler with Lambda's batch semantics) and `relay-poller` talk to the emulator
//! through the fault proxy with no faults, which counts every call per operation. A measurement,
//! not a check: ignored by default; docs/costs.md names the command and quotes its output.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use futures::StreamExt;
use outbox_tests::fault_proxy::{FaultCounts, FaultProxy, FaultRates};
use outbox_tests::{TestEnv, emulator_endpoints};
use outbox_writer::{NewOrder, OrderLine, OutboxWriter};

/// Orders per path: each path's calls are printed per this many orders.
const ORDERS: usize = 1000;
/// How long the idle lease fleet is watched; its calls are scaled to an hour.
const LEASE_WATCH: Duration = Duration::from_secs(60);

/// Calls per operation the proxy passed on.
/// (`PutEvents` calls are not among them: the proxy counts their entries' faults, and the
/// binaries' summaries count the calls.)
fn calls(proxy: &FaultProxy) -> BTreeMap<String, u64> {
    proxy
        .counts_by_target()
        .into_iter()
        .map(|(target, counts): (String, FaultCounts)| (target, counts.passed_calls))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// An item's size as DynamoDB bills it, near enough: each attribute's name and value bytes (a
/// number's digits; a map's or list's members plus 3 bytes each).
fn item_bytes(item: &std::collections::HashMap<String, AttributeValue>) -> usize {
    fn value(v: &AttributeValue) -> usize {
        match v {
            AttributeValue::S(s) | AttributeValue::N(s) => s.len(),
            AttributeValue::M(m) => {
                3 + m.iter().map(|(k, v)| k.len() + value(v) + 3).sum::<usize>()
            }
            AttributeValue::L(l) => 3 + l.iter().map(|v| value(v) + 3).sum::<usize>(),
            AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
            _ => 0,
        }
    }
    item.iter().map(|(k, v)| k.len() + value(v)).sum()
}

/// One measured line, `COSTS <path>: <calls per operation> <what the binary summarized>`: the
/// measurement's output is what docs/costs.md quotes.
#[allow(clippy::print_stdout)]
fn print(path: &str, calls: &impl std::fmt::Debug, extra: &str) {
    println!("COSTS {path}: {calls:?} {extra}");
}

async fn write_orders(writer: &OutboxWriter, count: usize) {
    futures::stream::iter(0..count)
        .map(|i| {
            let writer = writer.clone();
            async move {
                writer
                    .create_order_with_outbox(
                        &format!("user-{i}"),
                        NewOrder::new(vec![OrderLine {
                            sku: "sku-1".into(),
                            quantity: 2,
                            unit_price_cents: 1250,
                        }]),
                    )
                    .await
                    .expect("order created");
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<()>>()
        .await;
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "a measurement for docs/costs.md: run with --ignored --nocapture"]
async fn calls_per_path_for_docs_costs() {
    // The writer: 1,000 orders through the proxy
    let env = TestEnv::new().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 9).await;
    let writer = env.writer_through(&proxy);
    write_orders(&writer, ORDERS).await;
    print("writer", &calls(&proxy), &format!("orders={ORDERS}"));
    let scanned = env
        .dynamodb
        .scan()
        .table_name(&env.table_name)
        .limit(20)
        .send()
        .await
        .expect("scan");
    let sizes: Vec<(String, usize)> = scanned
        .items()
        .iter()
        .map(|item| {
            let kind = match item.get("EntityType") {
                Some(AttributeValue::S(kind)) => kind.clone(),
                _ => "?".to_owned(),
            };
            (kind, item_bytes(item))
        })
        .collect();
    print("item sizes (pending, bytes)", &sizes, "");

    // The stream relay: relay-stream-local over the same table's stream, batches of 100
    let stream_proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 9).await;
    let output = env
        .relay_command("relay-stream-local")
        .args([
            "--batch-size",
            "100",
            "--from",
            "trim-horizon",
            "--exit-when-idle",
            "2s",
        ])
        .envs(stream_proxy.endpoint_env())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .await
        .expect("relay-stream-local runs");
    let summary = String::from_utf8_lossy(&output.stdout);
    print("stream relay", &calls(&stream_proxy), summary.trim());

    // The poller's backfill: a drain of 1,000 pending orders on a fresh table
    let backfill = TestEnv::new().await;
    write_orders(&backfill.writer(), ORDERS).await;
    let drain_proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 9).await;
    let output = backfill
        .relay_command("relay-poller")
        .arg("drain")
        .envs(drain_proxy.endpoint_env())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .await
        .expect("relay-poller drain runs");
    let summary = String::from_utf8_lossy(&output.stdout);
    print("poller drain", &calls(&drain_proxy), summary.trim());

    // A fleet's idle traffic: two `run` pollers with a lease table (default lease settings) on
    // an empty table, watched for a minute
    let idle = TestEnv::new().await;
    let lease_proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 9).await;
    let lease_table = format!("{}-leases", idle.table_name);
    let spawn = || {
        idle.relay_command("relay-poller")
            .args(["run", "--lease-table", &lease_table, "--create-lease-table"])
            .envs(lease_proxy.endpoint_env())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("relay-poller run")
    };
    let mut first = spawn();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut second = spawn();
    // Settled (table created, shards shared) before counting
    tokio::time::sleep(Duration::from_secs(20)).await;
    let before = calls(&lease_proxy);
    tokio::time::sleep(LEASE_WATCH).await;
    let after = calls(&lease_proxy);
    let per_minute: BTreeMap<String, u64> = after
        .iter()
        .map(|(target, n)| (target.clone(), n - before.get(target).copied().unwrap_or(0)))
        .collect();
    print(
        "idle fleet of 2 pollers, per minute",
        &per_minute,
        &format!("watched={}s", LEASE_WATCH.as_secs()),
    );
    let _ = first.kill().await;
    let _ = second.kill().await;
}
