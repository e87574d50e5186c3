//! `relay-stream-local`: runs the stream relay locally against a table's DynamoDB Stream and prints
//! a one-line JSON summary on exit (idle timeout, SIGTERM or ctrl-c). It exits 1 when it published
//! (or dead-lettered) events and marked none of them ([`relay_stream_local::Summary::marked_none`]).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use relay_stream_local::{LocalArgs, RunnerError};
use tokio_util::sync::CancellationToken;

/// The relays' allocator (see [`relay_runtime::Allocator`]).
#[global_allocator]
static ALLOCATOR: relay_runtime::Allocator = relay_runtime::Allocator;

/// The program's name on its last line.
const PROGRAM: &str = "relay-stream-local";

#[tokio::main]
async fn main() -> ExitCode {
    let _telemetry = relay_runtime::telemetry::init_tracing();
    let args = LocalArgs::parse();
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    match relay(&args, &shutdown).await {
        Ok(code) => code,
        Err(err) => {
            let misconfigured = matches!(
                err.downcast_ref::<RunnerError>(),
                Some(RunnerError::Unusable(_) | RunnerError::Config(_))
            );
            tracing::error!(error = format!("{err:#}"), "{PROGRAM} failed");
            // The last line: a resource it cannot use says all in one line, as it is.
            let line = match err.downcast_ref::<RunnerError>() {
                Some(runner) => runner.to_string(),
                None => format!("{err:#}"),
            };
            eprintln!("{}", relay_runtime::telemetry::outcome_line(PROGRAM, &line));
            if misconfigured {
                ExitCode::from(relay_runtime::probe::EXIT_MISCONFIGURED)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

async fn relay(args: &LocalArgs, shutdown: &CancellationToken) -> anyhow::Result<ExitCode> {
    let summary = relay_stream_local::run(args, shutdown).await?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{}", serde_json::to_string(&summary)?).context("writing the summary")?;
    if summary.marked_none() {
        tracing::error!(
            published = summary.published,
            dead_lettered = summary.dead_lettered,
            not_marked = summary.not_marked,
            "no event was marked: every status update failed (does the endpoint serve PartiQL, does the policy allow dynamodb:PartiQLUpdate?); they stay pending and are published again"
        );
        relay_runtime::telemetry::outcome(
            PROGRAM,
            &format!(
                "published {} events and marked none of them: they stay pending (exit 1)",
                summary.published + summary.dead_lettered
            ),
        );
        return Ok(ExitCode::FAILURE);
    }
    relay_runtime::telemetry::outcome(PROGRAM, &summary.to_words());
    Ok(ExitCode::SUCCESS)
}

async fn cancel_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler installs");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("shutting down");
    shutdown.cancel();
}
