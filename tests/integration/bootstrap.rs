//! The Lambda's `bootstrap` behind cargo-lambda's runtime API emulator: a batch read from the
//! emulator's stream is invoked through the runtime API and its events arrive on the sink queue; a
//! function whose table is missing logs one ERROR at init and exits before it asks the runtime API
//! for an invocation (issue 34).
//!
//! The `bootstrap` is the workspace's `relay-stream` binary of the test build, packaged as
//! `cargo lambda build` packages it (the binary, named `bootstrap`, in its function's directory),
//! so the suite builds the binary once. The deployable package (`make lambda-zip`, release,
//! arm64) is built and measured (size, start-up, memory) by
//! `cargo bench -p outbox-tests --bench relay_stream_bootstrap`.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use outbox_shared::OutboxStatus;
use outbox_tests::{TestEnv, unused_port, workspace_binary, workspace_root};
use outbox_writer::{NewOrder, OrderLine};
use serde_json::{Value, json};
use tokio::process::{Child, Command};

/// The relay's `bootstrap`, packaged once for the tests of this module.
async fn bootstrap() -> PathBuf {
    static BUILT: tokio::sync::OnceCell<PathBuf> = tokio::sync::OnceCell::const_new();
    BUILT
        .get_or_init(|| package_bootstrap("relay-stream"))
        .await
        .clone()
}

/// The workspace binary `bin` (of the running test's build) packaged as Lambda runs it: a file
/// named `bootstrap` in `<profile>/lambda/<bin>/`, as `cargo lambda build` lays it out; its path.
pub(crate) async fn package_bootstrap(bin: &str) -> PathBuf {
    let bin = bin.to_owned();
    tokio::task::spawn_blocking(move || {
        let binary = workspace_binary(&bin);
        let function_dir = binary
            .parent()
            .expect("a binary sits in its profile directory")
            .join("lambda")
            .join(&bin);
        std::fs::create_dir_all(&function_dir)
            .unwrap_or_else(|e| panic!("create {}: {e}", function_dir.display()));
        let bootstrap = function_dir.join("bootstrap");
        std::fs::copy(&binary, &bootstrap).unwrap_or_else(|e| {
            panic!("copy {} to {}: {e}", binary.display(), bootstrap.display())
        });
        bootstrap
    })
    .await
    .expect("packaging the bootstrap")
}

/// `cargo lambda watch`'s runtime API on `port`, once it answers where `invoke` sends (`::1`);
/// `None` when it exits instead (the port taken after all). Panics after a minute.
async fn start_runtime_api(port: u16) -> Option<Child> {
    let mut watch = Command::new("cargo")
        .current_dir(workspace_root().join("relay-stream"))
        .args(["lambda", "watch", "--only-lambda-apis", "--invoke-port"])
        .arg(port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("cargo lambda watch starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if watch.try_wait().expect("child status").is_some() {
            return None;
        }
        if tokio::net::TcpStream::connect(("::1", port)).await.is_ok() {
            // Still running once it answers: the listener is its own (one that cannot bind exits
            // within a fraction of a second).
            tokio::time::sleep(Duration::from_millis(200)).await;
            return watch
                .try_wait()
                .expect("child status")
                .is_none()
                .then_some(watch);
        }
        assert!(Instant::now() < deadline, "runtime API did not start");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// cargo-lambda's runtime API emulator on a free port: the port, and the process (killed when
/// dropped). A port another server took between its check and watch's bind (a port from the kernel's
/// ephemeral range did, in a fresh-clone run) makes watch exit; another port is then tried.
pub(crate) async fn runtime_api() -> (u16, Child) {
    for _ in 0..5 {
        let port = unused_port();
        if let Some(watch) = start_runtime_api(port).await {
            return (port, watch);
        }
    }
    panic!("cargo lambda watch exited at once on five free ports");
}

#[tokio::test]
async fn a_runtime_api_whose_port_another_server_holds_is_not_handed_out() {
    // Given another server on a free port's IPv4 address (as another test's server may get it)
    let port = unused_port();
    let _other = TcpListener::bind(("127.0.0.1", port)).expect("bind the port");
    // When cargo lambda watch is started on it, it is not taken for the runtime API: it cannot
    // bind, and exits
    assert!(start_runtime_api(port).await.is_none());
}

/// The `bootstrap` as Lambda starts it: the relay's environment for `env` (its endpoints and
/// credentials), the runtime API on `port`, the function's variables, JSON logs.
pub(crate) fn function(bootstrap: &Path, env: &TestEnv, port: u16) -> Command {
    let mut function = Command::new(bootstrap);
    function
        .envs(env.relay_env())
        .env(
            "AWS_LAMBDA_RUNTIME_API",
            format!("http://127.0.0.1:{port}/.rt"),
        )
        .env("AWS_LAMBDA_FUNCTION_NAME", "_")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env("AWS_LAMBDA_LOG_FORMAT", "JSON");
    function
}

/// Invokes the function waiting on the runtime API at `port` with `event`, through
/// `cargo lambda invoke`; returns its response.
pub(crate) async fn invoke(port: u16, event: &Value) -> Value {
    let scratch = tempfile::tempdir().unwrap();
    let event_file = scratch.path().join("event.json");
    std::fs::write(&event_file, event.to_string()).unwrap();
    let invoked = Command::new("cargo")
        .current_dir(workspace_root().join("relay-stream"))
        .args(["lambda", "invoke", "--invoke-port"])
        .arg(port.to_string())
        .arg("--data-file")
        .arg(&event_file)
        .output()
        .await
        .expect("cargo lambda invoke runs");
    assert!(
        invoked.status.success(),
        "invoke failed: {}",
        String::from_utf8_lossy(&invoked.stderr)
    );
    serde_json::from_slice(&invoked.stdout).unwrap_or_else(|e| {
        panic!(
            "response {:?}: {e}",
            String::from_utf8_lossy(&invoked.stdout)
        )
    })
}

#[tokio::test]
async fn bootstrap_relays_a_stream_batch_through_the_runtime_api() {
    // Given orders written with the writer, and the batch they made on the emulator's stream
    let env = TestEnv::new().await;
    let writer = env.writer();
    let mut event_ids = Vec::new();
    for i in 0..8 {
        let order = NewOrder::new(vec![OrderLine::new("SKU-L", 1, 700 + i)]);
        event_ids.push(
            writer
                .create_order_with_outbox("lambda-user", order)
                .await
                .unwrap()
                .event_id,
        );
    }
    let records = relay_stream_local::read_stream_records(&env.streams, &env.stream_arn)
        .await
        .unwrap();
    assert_eq!(records.len(), 16);

    // And the bootstrap running against cargo-lambda's runtime API emulator
    let bootstrap = bootstrap().await;
    let (port, watch) = runtime_api().await;
    let mut function = function(&bootstrap, &env, port)
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("bootstrap starts");

    // When the batch is invoked through the runtime API
    let response = invoke(port, &json!({ "Records": records })).await;

    // Then the function reports no batch item failures
    assert_eq!(response["batchItemFailures"], json!([]), "{response}");

    // And the eight events arrive on the sink queue and are marked published
    let messages = env.wait_for_sink(8, Duration::from_secs(20)).await;
    let mut received: Vec<String> = messages.iter().map(|m| m.event_id().to_owned()).collect();
    received.sort();
    event_ids.sort();
    assert_eq!(received, event_ids);
    assert!(
        env.outbox_items()
            .await
            .iter()
            .all(|i| i.status == OutboxStatus::Published && i.gsi1pk.is_none())
    );

    // And it wrote its metrics in CloudWatch Embedded Metric Format on stderr, between its log
    // lines and never inside one: every line is one JSON object, and the document is valid EMF
    function.start_kill().unwrap();
    let output = function.wait_with_output().await.unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not one JSON line ({e}): {l}")))
        .collect();
    let emf = lines
        .iter()
        .find(|v| relay_runtime::metrics::spec::is_emf(v))
        .unwrap_or_else(|| panic!("no EMF document on stderr: {stderr}"));
    assert_eq!(
        relay_runtime::metrics::spec::violations(&emf.to_string()),
        Vec::<String>::new()
    );
    assert_eq!(emf["Published"], 8, "{emf}");
    drop(watch);
}

#[tokio::test]
async fn bootstrap_logs_one_error_at_init_and_exits_when_its_table_is_missing() {
    // Given the bootstrap, the runtime API it would ask for invocations, and a table name that
    // does not exist
    let env = TestEnv::new().await;
    let bootstrap = bootstrap().await;
    let (port, watch) = runtime_api().await;
    let mut function = function(&bootstrap, &env, port);
    function
        .env("TABLE_NAME", "NoSuchTable")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);

    // When Lambda starts it (a function that got past init would wait on the runtime API for an
    // invocation, and never exit)
    let started = Instant::now();
    let output = tokio::time::timeout(Duration::from_secs(60), function.output())
        .await
        .expect("the function's init fails instead of waiting for an invocation")
        .expect("the bootstrap runs");
    let elapsed = started.elapsed();

    // Then it exits at init within seconds with the misconfiguration's code (Lambda reports
    // Runtime.ExitError and the init's log) ...
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!(
        "bootstrap init: exit {:?} after {:.2} s; stderr: {stderr}",
        output.status.code(),
        elapsed.as_secs_f64()
    );
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(elapsed < Duration::from_secs(30), "took {elapsed:?}");

    // ... and its last log line is one JSON ERROR naming the table, its variable, the code and
    // the fix
    let last: Value = serde_json::from_str(stderr.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the last line is one JSON object ({e}): {stderr}"));
    assert_eq!(last["level"], "ERROR", "{last}");
    assert_eq!(last["fields"]["resource"], "NoSuchTable", "{last}");
    assert_eq!(
        last["fields"]["code"], "ResourceNotFoundException",
        "{last}"
    );
    let message = last["fields"]["message"].as_str().unwrap_or_default();
    for name in [
        "table NoSuchTable does not exist",
        "TABLE_NAME",
        "region us-east-1",
        "DescribeTable: ResourceNotFoundException",
        "the stack's TableName output",
    ] {
        assert!(message.contains(name), "no {name:?} in {message}");
    }
    drop(watch);
}

#[tokio::test]
async fn bootstrap_publishes_an_event_too_large_for_the_bus_with_its_payload_in_the_payload_bucket()
{
    // Given a 300 KB payload another client wrote (over the bus's 256 KiB entry), its stream
    // record, and a payload bucket
    let env = TestEnv::new().await;
    let bucket = env.create_payload_bucket().await;
    let payload = json!({"orderId": "o-large", "lines": "l".repeat(300 * 1000)}).to_string();
    env.put_raw_item(outbox_tests::minimal_outbox_item(
        "lambda-user",
        "e-lambda-large",
        "OrderCreated",
        &payload,
        "2026-11-27T00:00:00.000Z",
        0,
    ))
    .await;
    let records = relay_stream_local::read_stream_records(&env.streams, &env.stream_arn)
        .await
        .unwrap();
    assert_eq!(records.len(), 1);

    // And the bootstrap running with PAYLOAD_BUCKET, as the template configures the function
    let bootstrap = bootstrap().await;
    let (port, watch) = runtime_api().await;
    let _function = function(&bootstrap, &env, port)
        .env("PAYLOAD_BUCKET", &bucket)
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("bootstrap starts");

    // When the batch is invoked through the runtime API
    let response = invoke(port, &json!({ "Records": records })).await;
    assert_eq!(response["batchItemFailures"], json!([]), "{response}");

    // Then the event arrives with its payload in the bucket, which reads back as written
    let messages = env.wait_for_sink(1, Duration::from_secs(20)).await;
    let reference = messages[0]
        .payload_ref
        .as_ref()
        .unwrap_or_else(|| panic!("no reference: {}", messages[0].event));
    assert_eq!(
        reference.uri,
        format!("s3://{bucket}/payloads/e-lambda-large")
    );
    assert_eq!(
        env.payload_of(&messages[0]).await,
        serde_json::from_str::<Value>(&payload).unwrap()
    );
    assert_eq!(env.outbox_items().await[0].status, OutboxStatus::Published);
    drop(watch);
}
