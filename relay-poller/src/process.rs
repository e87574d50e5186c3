//! The process's edges, the same for every command: the signals that stop it, the tasks a signal
//! stops ([`Work`]), its exit codes, the outcome line it ends with, and where its results go.

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use relay_runtime::SettingError;
use relay_runtime::probe::Unusable;
use tokio::signal::unix::{SignalKind, signal};
use tokio::task::{AbortHandle, JoinHandle};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// Exit code when the settings, or what they name, are wrong: a setting out of range (clap uses
/// the same for bad flags), a missing resource, access denied, no credentials, an unknown region,
/// an endpoint that refuses connections ([`relay_runtime::probe::EXIT_MISCONFIGURED`]).
pub const EXIT_CONFIG: u8 = relay_runtime::probe::EXIT_MISCONFIGURED;
/// Exit code when a command gave up with work left (`drain` with events pending,
/// `recover-discarded` with batches left, `inspect` with an event not found; `check` with an item
/// that does not hold is [`EXIT_CONFIG`]), or failed at run time.
pub const EXIT_FAILURE: u8 = 1;

/// The exit code for an error a command returned.
pub fn exit_code_for(err: &anyhow::Error) -> ExitCode {
    if err.downcast_ref::<SettingError>().is_some() || err.downcast_ref::<Unusable>().is_some() {
        ExitCode::from(EXIT_CONFIG)
    } else {
        ExitCode::from(EXIT_FAILURE)
    }
}

/// SIGTERM (ECS stopping the task) or SIGINT (ctrl-c). Registered before any work starts, so a
/// signal that arrives early is not lost.
///
/// # Errors
/// When a signal handler cannot be registered.
pub fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!(signal = "SIGTERM", "shutdown requested"),
            _ = interrupt.recv() => tracing::info!(signal = "SIGINT", "shutdown requested"),
        }
    })
}

/// Tasks that run until they are done or told to stop: spawned on one [`TaskTracker`], told to
/// stop through one [`CancellationToken`]. A task told to stop finishes what it has in hand (a
/// page, a batch); one still running at the shutdown timeout is abandoned, and what it had in
/// hand stays where it was (an event pending, a batch in its bucket) for a later pass.
#[derive(Debug, Default)]
pub struct Work {
    cancel: CancellationToken,
    tracker: TaskTracker,
    running: Vec<AbortHandle>,
}

impl Work {
    pub fn new() -> Self {
        Self::default()
    }

    /// The token the tasks watch.
    pub fn token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Runs `task` among this work's tasks.
    pub fn spawn<F>(&mut self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let handle = self.tracker.spawn(task);
        self.running.push(handle.abort_handle());
        handle
    }

    /// Tells every task to stop and waits up to `timeout` for them; aborts those still running
    /// then. Whether every task finished.
    pub async fn stop(&self, timeout: Duration) -> bool {
        self.cancel.cancel();
        self.tracker.close();
        if tokio::time::timeout(timeout, self.tracker.wait())
            .await
            .is_ok()
        {
            return true;
        }
        self.running.iter().for_each(AbortHandle::abort);
        tracing::warn!(
            timeout_ms = timeout.as_millis() as u64,
            "in-flight work abandoned at the shutdown timeout; its events stay pending"
        );
        false
    }
}

/// Writes what the metrics recorder holds (CloudWatch EMF), warning when it cannot.
pub fn flush_metrics(metrics: &relay_runtime::metrics::Emf) {
    if let Err(err) = metrics.flush() {
        tracing::warn!(error = %err, "could not write metrics");
    }
}

/// The command's outcome in words, its last line at a terminal
/// ([`relay_runtime::telemetry::outcome`]).
pub fn say(words: &str) {
    relay_runtime::telemetry::outcome("relay-poller", words);
}

/// Whether stdout is a person's terminal (tables) or a script's pipe (JSON).
pub fn stdout_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal()
}

/// Writes a command's result to stdout (`what` names it in the error).
///
/// # Errors
/// When stdout cannot be written.
pub fn print(text: &str, what: &str) -> anyhow::Result<()> {
    use std::io::Write;
    std::io::stdout()
        .write_all(text.as_bytes())
        .with_context(|| format!("writing the {what}"))
}
