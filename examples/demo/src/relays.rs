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

/// The relays' `RUST_LOG`: the demo's (`warn` if unset), with the lines the demo reads at
/// `info`: the stream relay's runner (when it reads its shard, [`wait_until_reading`]) unless
/// the filter names `relay_stream_local`, and its handler (each batch's counts,
/// [`PublishedCount`]) unless it names `relay_stream::`. A filter that names them is the user's.
fn relay_log_filter(demo: Option<String>) -> String {
    let mut filter = demo.unwrap_or_else(|| "warn".into());
    if !filter.contains("relay_stream_local") {
        filter.push_str(",relay_stream_local::runner=info");
    }
    if !filter.contains("relay_stream::")
        && !filter.split(',').any(|d| d.starts_with("relay_stream="))
    {
        filter.push_str(",relay_stream::handler=info");
    }
    filter
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

/// The events the stream relay reports published, summed from its log's
/// [`relay_stream_local::BATCH_HANDLED`] lines as they are written: the demo's progress while the
/// relay's latency is measured, read without a call to the emulators. (It was the sink queue's
/// depth, ten looks a second: moto counts a queue's messages one by one, 0.2 s a look at 1,500, and
/// every `PutEvents` of the measured window waited behind those looks.)
pub(crate) struct PublishedCount {
    log: PathBuf,
    /// Bytes of the log read so far, up to the last whole line.
    read: u64,
    published: u64,
}

impl PublishedCount {
    /// The count over `log`, the stream relay's log file ([`relay_log`]).
    pub(crate) fn new(log: PathBuf) -> Self {
        Self {
            log,
            read: 0,
            published: 0,
        }
    }

    /// The events published so far, with the lines written since the last look.
    ///
    /// # Errors
    /// When the log cannot be read.
    pub(crate) async fn published(&mut self) -> Result<u64> {
        use tokio::io::{AsyncReadExt, AsyncSeekExt};

        let mut file = match tokio::fs::File::open(&self.log).await {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(self.published),
            Err(err) => {
                return Err(err).with_context(|| format!("reading {}", self.log.display()));
            }
        };
        file.seek(std::io::SeekFrom::Start(self.read)).await?;
        let mut new = Vec::new();
        file.read_to_end(&mut new)
            .await
            .with_context(|| format!("reading {}", self.log.display()))?;
        // Whole lines only: the relay may be writing the last one.
        let Some(end) = new.iter().rposition(|b| *b == b'\n') else {
            return Ok(self.published);
        };
        self.read += end as u64 + 1;
        for line in new[..end].split(|b| *b == b'\n') {
            self.published += batch_published(line);
        }
        Ok(self.published)
    }
}

/// The `published` count of a [`relay_stream_local::BATCH_HANDLED`] log line; 0 for any other.
fn batch_published(line: &[u8]) -> u64 {
    let Ok(line) = serde_json::from_slice::<serde_json::Value>(line) else {
        return 0;
    };
    let fields = &line["fields"];
    if fields["message"] != relay_stream_local::BATCH_HANDLED {
        return 0;
    }
    fields["published"].as_u64().unwrap_or(0)
}

/// Shows the stream relay's events published since `since` (a count of [`PublishedCount`])
/// until `expected` more were or `timeout` passed; an error if the relay exits first.
pub(crate) async fn watch_published(
    count: &mut PublishedCount,
    since: u64,
    expected: u64,
    timeout: Duration,
    bar: &indicatif::ProgressBar,
    relay: &mut Child,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let published = count.published().await?.saturating_sub(since);
        bar.set_position(published.min(expected));
        if published >= expected {
            return Ok(());
        }
        if let Some(status) = relay.try_wait()? {
            bail!("relay-stream-local exited early with {status}");
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("{published} of {expected} events published within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
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
    fn the_lines_the_demo_reads_are_logged_at_info_unless_the_filter_names_their_crate() {
        assert_eq!(
            relay_log_filter(None),
            "warn,relay_stream_local::runner=info,relay_stream::handler=info"
        );
        assert_eq!(
            relay_log_filter(Some("error".into())),
            "error,relay_stream_local::runner=info,relay_stream::handler=info"
        );
        // A filter that names the stream relay or its handler is the user's, left as it is.
        assert_eq!(
            relay_log_filter(Some("warn,relay_stream_local=debug".into())),
            "warn,relay_stream_local=debug,relay_stream::handler=info"
        );
        assert_eq!(
            relay_log_filter(Some("relay_stream=debug,relay_stream_local=trace".into())),
            "relay_stream=debug,relay_stream_local=trace"
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

    fn handled(published: u64) -> String {
        format!(
            "{{\"level\":\"INFO\",\"fields\":{{\"message\":\"{}\",\"records\":30,\"published\":{published}}}}}\n",
            relay_stream_local::BATCH_HANDLED
        )
    }

    #[tokio::test]
    async fn the_published_count_sums_the_batches_the_log_has_so_far_whole_lines_only() {
        let log = log_path();
        let mut count = PublishedCount::new(log.clone());
        // No log yet: nothing published.
        assert_eq!(count.published().await.unwrap(), 0);
        // Two batches and another line; then half a line, as the relay writes it.
        let other = "{\"fields\":{\"message\":\"reading shard\",\"published\":99}}\n";
        let third = handled(5);
        let (head, tail) = third.split_at(20);
        std::fs::write(&log, format!("{}{other}{}{head}", handled(7), handled(3))).unwrap();
        assert_eq!(count.published().await.unwrap(), 10);
        // The line finished, and a batch with nothing published.
        let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        std::io::Write::write_all(&mut file, format!("{tail}{}", handled(0)).as_bytes()).unwrap();
        assert_eq!(count.published().await.unwrap(), 15);
        assert_eq!(count.published().await.unwrap(), 15);
        std::fs::remove_file(&log).unwrap();
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
