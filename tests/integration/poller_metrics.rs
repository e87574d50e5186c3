//! What `relay-poller` writes on stderr is for CloudWatch Logs: every line a JSON log line or an
//! Embedded Metric Format document CloudWatch accepts (`relay_runtime::metrics::spec`), never the
//! two mixed, and a busy poller's per-pass metrics keep every pass.

use std::process::Stdio;
use std::time::Duration;

use outbox_tests::fault_proxy::{FaultProxy, FaultRates};
use outbox_tests::{TestEnv, emulator_endpoints};
use relay_runtime::metrics::{BACKLOG, OLDEST_PENDING_AGE, spec};
use serde_json::Value;

/// Passes the poller makes before it is stopped: more than a document's 100 values per metric.
const PASSES: u64 = 250;
/// The index's shards in a test environment: an idle pass reads each once.
const SHARDS: u64 = 16;
/// The poller's index reads.
const QUERY: &str = "DynamoDB_20120810.Query";

#[tokio::test(flavor = "multi_thread")]
async fn a_busy_poller_writes_only_documents_cloudwatch_accepts_and_keeps_every_pass() {
    // Given an empty outbox, read through a proxy that counts the poller's index reads (an idle
    // pass reads each of the 16 shards once)
    let env = TestEnv::new().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 23).await;

    // When a `run` poller without grace period or idle pause makes 250 passes, then stops on
    // SIGTERM (its metrics are flushed every minute and at the end: hundreds of passes in one
    // flush)
    let child = env
        .relay_command("relay-poller")
        .args(["run", "--grace-period", "0s", "--idle-backoff-max", "1ms"])
        .envs(proxy.endpoint_env())
        // Each pass's own line ("pass done", debug) says whether its reads all succeeded
        .env("RUST_LOG", "info,relay_poller::poller=debug")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn relay-poller");
    // (on a loaded machine it may get fewer in the time allowed: more than 100 are enough)
    let _ = tokio::time::timeout(Duration::from_secs(90), async {
        while proxy.counts_for(QUERY).passed_calls < PASSES * SHARDS {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    let pid = child.id().expect("pid");
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill -TERM");
    assert!(status.success());
    let output = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("exits after SIGTERM")
        .expect("output");
    assert!(output.status.success(), "{:?}", output.status);
    let reads = proxy.counts_for(QUERY).passed_calls;
    assert!(
        reads / SHARDS > 100,
        "{reads} index reads: not more than one document's values in passes"
    );

    // Then every line on stderr is one JSON object, and every metric document among them is one
    // CloudWatch accepts
    let stderr = String::from_utf8(output.stderr).expect("utf-8 stderr");
    let (mut documents, mut passes) = (Vec::new(), 0);
    for line in stderr.lines() {
        let parsed: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON line ({e}): {line}"));
        if spec::is_emf(&parsed) {
            let violations = spec::violations(line);
            assert!(violations.is_empty(), "{violations:?} in {line}");
            documents.push(parsed);
        } else if parsed["fields"]["message"] == "pass done" && parsed["fields"]["read_errors"] == 0
        {
            passes += 1;
        }
    }
    assert!(!documents.is_empty(), "no metric document on stderr");

    // And Backlog and OldestPendingAgeSeconds have one value per pass whose reads all succeeded
    // (a pass whose reads failed reports none, by design), each 0
    for name in [BACKLOG, OLDEST_PENDING_AGE] {
        let values: Vec<f64> = documents
            .iter()
            .flat_map(|d| spec::values_of(d, name))
            .collect();
        assert_eq!(
            values.len(),
            passes,
            "{name} has {} values for {passes} passes",
            values.len()
        );
        assert!(values.iter().all(|&v| v == 0.0), "{values:?}");
    }

    // And nothing was logged at ERROR (nothing was lost)
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(r#""level":"ERROR""#))
        .collect();
    assert!(
        errors.is_empty(),
        "{} ERROR lines, first: {:?}",
        errors.len(),
        errors.first()
    );
}
