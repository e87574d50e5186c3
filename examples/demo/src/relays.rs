//! The relays as child processes: `relay-stream-local` and `relay-poller` started beside the demo,
//! stopped (or waited for), and their one-line JSON summaries read back. They have the payload
//! bucket (`PAYLOAD_BUCKET`) whenever the demo has one.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use tokio::process::{Child, Command};

use crate::cli::Args;
use crate::env::{Env, SOURCE};
use crate::progress::phase;

/// The one-line JSON summary the relays print on exit (fields the demo reads).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RelaySummary {
    #[serde(default)]
    pub(crate) published: u64,
    #[serde(default)]
    pub(crate) dead_lettered: u64,
    #[serde(default)]
    pub(crate) failed: u64,
    #[serde(default)]
    pub(crate) publish_calls: u64,
    /// Entries the Custom Event Bus answered `DEDUPLICATED` (a repeat within its 300 s window:
    /// published, not stored again); absent on the classic bus.
    #[serde(default)]
    pub(crate) deduplicated: u64,
    /// Payloads the relay stored in the payload bucket when it published their events (the
    /// claim check at publish: one per event too large for the target's entry).
    #[serde(default)]
    pub(crate) payloads_stored: u64,
}

/// The relay binary `name` in `dir`, or an error that says how to build it.
pub(crate) fn relay_binary(dir: &Path, name: &str) -> Result<PathBuf> {
    let path = dir.join(name);
    if !path.is_file() {
        bail!(
            "{} not found: build the relays first (`make demo` does: cargo build --workspace --bins), or pass --bin-dir",
            path.display()
        );
    }
    Ok(path)
}

/// The relays' `RUST_LOG`: the demo's (`warn` if unset), with the stream relay's runner at
/// `info` unless it names `relay_stream_local` itself, so its log says when it reads its shard
/// ([`wait_until_reading`]).
fn relay_log_filter(demo: Option<String>) -> String {
    let filter = demo.unwrap_or_else(|| "warn".into());
    if filter.contains("relay_stream_local") {
        filter
    } else {
        format!("{filter},relay_stream_local::runner=info")
    }
}

/// The log file of the relay `name` (`relay-stream-local`) in `log_dir`, as [`spawn_relay`]
/// names it.
pub(crate) fn relay_log(log_dir: &Path, name: &str) -> PathBuf {
    log_file(&log_dir.join(name))
}

/// The file a relay started with log `log` writes its stderr to ([`spawn_relay_as`]).
fn log_file(log: &Path) -> PathBuf {
    log.with_extension("log")
}

/// Waits until the stream relay's log (`log`) says it reads its shard
/// ([`relay_stream_local::READING_SHARD`]): its start-up (configuration, the probes of what it
/// uses, the stream's shard list) is over, and what is written from now on waits only for the
/// relay. An error if it exits first, or after `timeout`.
pub(crate) async fn wait_until_reading(
    relay: &mut Child,
    log: &Path,
    timeout: Duration,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let text = tokio::fs::read_to_string(log).await.unwrap_or_default();
        if text.contains(relay_stream_local::READING_SHARD) {
            return Ok(());
        }
        if let Some(status) = relay.try_wait()? {
            bail!(
                "relay-stream-local exited with {status} before it read the stream (its log: {})",
                log.display()
            );
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "relay-stream-local did not start reading the stream within {timeout:?} (its log: {})",
                log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts a relay; its stderr (logs, and the poller's metrics) goes to a file in `log_dir`, its
/// stdout (the summary line) to the demo.
pub(crate) fn spawn_relay(
    binary: &Path,
    extra: &[&str],
    env: &Env,
    args: &Args,
    log_dir: &Path,
) -> Result<Child> {
    let name = binary.file_name().unwrap_or_default().to_string_lossy();
    let log_name = format!(
        "{name}{}",
        extra
            .first()
            .map(|sub| format!("-{sub}"))
            .filter(|_| name == "relay-poller")
            .unwrap_or_default()
    );
    spawn_relay_as(binary, extra, env, args, &[], &log_dir.join(log_name))
}

/// Starts a relay as [`spawn_relay`] does, with `more_env` set over the stack's variables (a
/// region's: `AWS_REGION` and its DynamoDB endpoints), its stderr into `log` (`.log` added).
pub(crate) fn spawn_relay_as(
    binary: &Path,
    extra: &[&str],
    env: &Env,
    args: &Args,
    more_env: &[(&str, String)],
    log: &Path,
) -> Result<Child> {
    let name = binary.file_name().unwrap_or_default().to_string_lossy();
    let log_path = log_file(log);
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let mut command = Command::new(binary);
    command
        .args(extra)
        .envs(env.stack.relay_env(SOURCE))
        .envs(
            env.payload_bucket
                .as_ref()
                .map(|bucket| ("PAYLOAD_BUCKET", bucket)),
        )
        .env("EVENT_TARGET_KIND", args.target.to_string())
        .env("OUTBOX_SHARD_COUNT", args.shard_count.to_string())
        .env("RUST_LOG", relay_log_filter(std::env::var("RUST_LOG").ok()))
        .envs(more_env.iter().map(|(key, value)| (*key, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .kill_on_drop(true);
    let child = command
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    if let Some(pid) = child.id() {
        phase(&format!(
            "started {name}{} (pid {pid})",
            more_env
                .iter()
                .find(|(key, _)| *key == "AWS_REGION")
                .map(|(_, region)| format!(" in {region}"))
                .unwrap_or_default()
        ));
    }
    Ok(child)
}

/// Stops a long-running relay with SIGTERM and reads its summary line.
pub(crate) async fn stop_relay(mut child: Child, name: &str) -> Result<RelaySummary> {
    terminate(&mut child, name).await?;
    read_summary(child, name).await
}

/// Stops a long-running relay with SIGTERM and waits for it to exit (at most 30 s, then kills
/// it), its summary line left unread.
pub(crate) async fn terminate(child: &mut Child, name: &str) -> Result<()> {
    if let Some(pid) = child.id() {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .context("sending SIGTERM")?;
        if !status.success() {
            bail!("could not send SIGTERM to {name} (pid {pid})");
        }
    }
    let finished = tokio::time::timeout(Duration::from_secs(30), child.wait()).await;
    if finished.is_err() {
        child.kill().await.ok();
        bail!("{name} did not stop within 30 s of SIGTERM");
    }
    Ok(())
}

/// Waits for a relay that exits by itself and reads its summary line.
pub(crate) async fn stop_relay_when_done(mut child: Child, name: &str) -> Result<RelaySummary> {
    let status = child.wait().await?;
    let summary = read_summary(child, name).await?;
    if !status.success() {
        bail!("{name} exited with {status} (summary: {summary:?})");
    }
    Ok(summary)
}

/// Reads the summary line (the last JSON line on stdout) of a relay that has exited.
async fn read_summary(mut child: Child, name: &str) -> Result<RelaySummary> {
    use tokio::io::AsyncReadExt;
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        stdout.read_to_string(&mut out).await?;
    }
    let line = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .with_context(|| format!("{name} printed no JSON summary line (stdout: {out:?})"))?;
    let summary: RelaySummary =
        serde_json::from_str(line).with_context(|| format!("{name} summary {line:?}"))?;
    if summary.failed > 0 {
        phase(&format!("{name} reported {} failed events", summary.failed));
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_relays_runner_logs_at_info_unless_the_filter_names_the_relay() {
        assert_eq!(
            relay_log_filter(None),
            "warn,relay_stream_local::runner=info"
        );
        assert_eq!(
            relay_log_filter(Some("error".into())),
            "error,relay_stream_local::runner=info"
        );
        // A filter that names the stream relay is the user's, left as it is.
        assert_eq!(
            relay_log_filter(Some("warn,relay_stream_local=debug".into())),
            "warn,relay_stream_local=debug"
        );
    }

    fn log_path() -> PathBuf {
        std::env::temp_dir().join(format!("demo-relay-{}.log", uuid::Uuid::now_v7().simple()))
    }

    fn sh(script: &str) -> Child {
        Command::new("sh")
            .args(["-c", script])
            .kill_on_drop(true)
            .spawn()
            .expect("sh starts")
    }

    #[tokio::test]
    async fn the_measured_writes_wait_until_the_relay_reads_its_shard() {
        let log = log_path();
        std::fs::write(&log, "{\"message\":\"relaying stream\"}\n").unwrap();
        let mut relay = sh(&format!(
            "sleep 0.3; echo '{{\"message\":\"{}\"}}' >> {}; sleep 30",
            relay_stream_local::READING_SHARD,
            log.display()
        ));
        let started = std::time::Instant::now();
        wait_until_reading(&mut relay, &log, Duration::from_secs(20))
            .await
            .unwrap();
        // Not before the line (0.3 s), and long before the relay exits (30 s).
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(300),
            "returned after {waited:?}"
        );
        assert!(
            waited < Duration::from_secs(20),
            "returned after {waited:?}"
        );
        std::fs::remove_file(&log).ok();
    }

    #[tokio::test]
    async fn a_relay_that_exits_before_it_reads_is_an_error_naming_its_log() {
        let log = log_path();
        let mut relay = sh("exit 3");
        let err = wait_until_reading(&mut relay, &log, Duration::from_secs(20))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("exited"), "{err}");
        assert!(err.contains(&log.display().to_string()), "{err}");
    }

    #[tokio::test]
    async fn a_relay_that_never_reads_is_an_error_after_the_timeout() {
        let log = log_path();
        let mut relay = sh("sleep 30");
        let err = wait_until_reading(&mut relay, &log, Duration::from_millis(200))
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("did not start reading"), "{err}");
    }
}
