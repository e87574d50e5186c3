//! `relay-poller`: parse the command line, set up logging, run the command.

use std::process::ExitCode;

use clap::Parser;
use relay_poller::{Cli, app, process};

/// The relays' allocator (see [`relay_runtime::Allocator`]).
#[global_allocator]
static ALLOCATOR: relay_runtime::Allocator = relay_runtime::Allocator;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let _telemetry = relay_runtime::telemetry::init_tracing();
    match app::run(cli).await {
        Ok(code) => code,
        Err(err) => {
            // A resource that cannot be used is one line as it is: its SDK error is in the log.
            let line = match err.downcast_ref::<relay_runtime::probe::Unusable>() {
                Some(unusable) => unusable.to_string(),
                None => format!("{err:#}"),
            };
            tracing::error!(error = format!("{err:#}"), "relay-poller failed");
            eprintln!(
                "{}",
                relay_runtime::telemetry::outcome_line("relay-poller", &line)
            );
            process::exit_code_for(&err)
        }
    }
}
