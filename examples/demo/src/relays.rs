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
    let log_path = log.with_extension("log");
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
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
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
