//! The packaged Lambda: zipped size, time from process start to its first request to the runtime
//! API (cold start of our own code), and peak RSS while handling a 1,000-record batch.
//!
//! Run: `scripts/emulator.sh run -- cargo bench -p outbox-tests --bench relay_stream_bootstrap`
//! (needs cargo-lambda, which `scripts/emulator.sh` puts on PATH, and the emulator for the batch).
//! It builds the release `bootstrap` with `cargo lambda build --release`, serves the runtime API
//! itself (a minimal HTTP/1.1 server), and prints the figures.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outbox_tests::{TEST_SOURCE, TestEnv, workspace_root};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::Command;
use tokio::sync::mpsc;

const COLD_STARTS: usize = 21;
const BATCH: usize = 1_000;

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("target"))
}

async fn cargo_lambda_build(lambda_dir: &Path, zip: bool) {
    let mut command = Command::new("cargo");
    command
        .current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", target_dir())
        .args(["lambda", "build", "--release", "--compiler", "cargo"])
        .args([
            "--package",
            "relay-stream",
            "--bin",
            "relay-stream",
            "--lambda-dir",
        ])
        .arg(lambda_dir);
    if zip {
        command.args(["--output-format", "zip"]);
    }
    let status = command.status().await.expect("cargo lambda runs");
    assert!(status.success(), "cargo lambda build failed");
}

/// What the runtime API saw.
#[derive(Debug)]
enum Seen {
    FirstRequest(Instant),
    Response(String),
}

/// A minimal runtime API: hands out `event` once on `/next`, reports what arrives.
async fn serve(
    listener: TcpListener,
    event: Option<Arc<String>>,
    seen: mpsc::UnboundedSender<Seen>,
) {
    let served = Arc::new(std::sync::atomic::AtomicBool::new(false));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(connection(
            stream,
            event.clone(),
            seen.clone(),
            served.clone(),
        ));
    }
}

async fn connection(
    stream: TcpStream,
    event: Option<Arc<String>>,
    seen: mpsc::UnboundedSender<Seen>,
    served: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).await.unwrap_or(0) == 0 {
            return;
        }
        let now = Instant::now();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            reader.read_line(&mut header).await.unwrap_or(0);
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':')
                && name.eq_ignore_ascii_case("content-length")
            {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).await.unwrap_or_default();
        if request_line.contains("/invocation/next") {
            let _ = seen.send(Seen::FirstRequest(now));
            let Some(event) = event
                .as_ref()
                .filter(|_| !served.swap(true, std::sync::atomic::Ordering::SeqCst))
            else {
                // Nothing (more) to hand out: keep the long poll open, as Lambda does.
                std::future::pending::<()>().await;
                return;
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 lambda-runtime-aws-request-id: bench-1\r\nlambda-runtime-deadline-ms: {}\r\n\
                 lambda-runtime-invoked-function-arn: arn:aws:lambda:us-east-1:000000000000:function:relay-stream\r\n\r\n",
                event.len(),
                chrono::Utc::now().timestamp_millis() + 300_000
            );
            let stream = reader.get_mut();
            stream.write_all(head.as_bytes()).await.unwrap_or_default();
            stream.write_all(event.as_bytes()).await.unwrap_or_default();
        } else {
            let _ = seen.send(Seen::Response(String::from_utf8_lossy(&body).into_owned()));
            reader
                .get_mut()
                .write_all(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap_or_default();
        }
    }
}

fn bootstrap_command(bootstrap: &Path, port: u16, env: &[(&'static str, String)]) -> Command {
    let mut command = Command::new(bootstrap);
    command
        .envs(env.iter().cloned())
        .env("AWS_LAMBDA_RUNTIME_API", format!("http://127.0.0.1:{port}"))
        .env("AWS_LAMBDA_FUNCTION_NAME", "relay-stream")
        .env("AWS_LAMBDA_FUNCTION_VERSION", "1")
        .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "128")
        .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    command
}

async fn listener() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    (listener, port)
}

fn record(i: usize) -> serde_json::Value {
    let event_id = format!("0194f7c2-8a4b-7d3e-9c1a-{i:012}");
    json!({
        "eventID": format!("ev{i}"), "eventName": "INSERT", "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": chrono::Utc::now().timestamp(),
            "Keys": {"PK": {"S": "USER#bench"}, "SK": {"S": format!("OUTBOX#{event_id}")}},
            "NewImage": {
                "PK": {"S": "USER#bench"}, "SK": {"S": format!("OUTBOX#{event_id}")},
                "EntityType": {"S": "OutboxEvent"}, "EventId": {"S": event_id},
                "EventType": {"S": "OrderCreated"}, "AggregateType": {"S": "Order"},
                "AggregateId": {"S": format!("o-{i}")}, "Sequence": {"N": "1"},
                "Payload": {"S": json!({"orderId": format!("o-{i}"), "amountCents": 1200, "status": "CREATED"}).to_string()},
                "Status": {"S": "PENDING"}, "CreatedAt": {"S": "2026-11-28T08:00:00.000Z"},
                "GSI1PK": {"S": "OUTBOX#PENDING#1"}, "GSI1SK": {"S": format!("EVENT#2026-11-28T08:00:00.000Z#{event_id}")}
            },
            "SequenceNumber": format!("{:021}", i), "SizeBytes": 600,
            "StreamViewType": "NEW_AND_OLD_IMAGES"
        }
    })
}

fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("/proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

fn main() {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let lambda_dir = target_dir().join("lambda");
        cargo_lambda_build(&lambda_dir, false).await;
        let zip_dir = target_dir().join("lambda-zip");
        cargo_lambda_build(&zip_dir, true).await;
        let bootstrap = lambda_dir.join("relay-stream").join("bootstrap");
        let zip = std::fs::metadata(zip_dir.join("relay-stream").join("bootstrap.zip"))
            .expect("bootstrap.zip")
            .len();
        let binary = std::fs::metadata(&bootstrap).expect("bootstrap").len();

        let env = TestEnv::new().await;
        let relay_env = env.relay_env();

        // Cold start: process start to the first `GET /next`.
        let mut starts = Vec::new();
        for _ in 0..COLD_STARTS {
            let (listener, port) = listener().await;
            let (tx, mut rx) = mpsc::unbounded_channel();
            let server = tokio::spawn(serve(listener, None, tx));
            let mut command = bootstrap_command(&bootstrap, port, &relay_env);
            let started = Instant::now();
            let mut child = command.spawn().expect("bootstrap starts");
            let Some(Seen::FirstRequest(at)) = rx.recv().await else {
                panic!("no request to the runtime API");
            };
            starts.push(at - started);
            child.kill().await.expect("kill");
            server.abort();
        }
        starts.sort();

        // Peak RSS for a 1,000-record batch against the emulator.
        let event = json!({"Records": (0..BATCH).map(record).collect::<Vec<_>>()}).to_string();
        let (listener, port) = listener().await;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let server = tokio::spawn(serve(listener, Some(Arc::new(event)), tx));
        let mut child = bootstrap_command(&bootstrap, port, &relay_env).spawn().expect("bootstrap starts");
        let started = Instant::now();
        let response = loop {
            match tokio::time::timeout(Duration::from_secs(120), rx.recv()).await {
                Ok(Some(Seen::Response(body))) => break body,
                Ok(Some(Seen::FirstRequest(_))) => {}
                other => panic!("no response from the bootstrap: {other:?}"),
            }
        };
        let batch_time = started.elapsed();
        let rss = peak_rss_kib(child.id().expect("running"));
        child.kill().await.expect("kill");
        server.abort();
        let response: serde_json::Value = serde_json::from_str(&response).expect("JSON response");
        assert_eq!(response["batchItemFailures"], json!([]), "{response}");
        let delivered = env.wait_for_sink(BATCH as u64, Duration::from_secs(60)).await.len();

        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let mut out = std::io::stdout().lock();
        writeln!(out, "bootstrap: {binary} bytes; bootstrap.zip: {zip} bytes ({:.2} MiB)", zip as f64 / 1048576.0).unwrap();
        writeln!(
            out,
            "start to first runtime API request over {COLD_STARTS} starts: median {:.2} ms, min {:.2} ms, max {:.2} ms",
            ms(starts[COLD_STARTS / 2]), ms(starts[0]), ms(starts[COLD_STARTS - 1])
        )
        .unwrap();
        writeln!(
            out,
            "1,000-record batch against the emulator: peak RSS {:.1} MiB ({rss} KiB), {:.0} ms, {delivered} events on the sink queue, source {TEST_SOURCE}",
            rss as f64 / 1024.0, ms(batch_time)
        )
        .unwrap();
    });
}
