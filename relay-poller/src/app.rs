//! The command line's dispatch: each subcommand to its command's `run` ([`crate::command`]).

use std::process::ExitCode;

use crate::command;
use crate::config::{Cli, Command};

/// Runs one parsed command line to its exit code.
///
/// # Errors
/// Invalid configuration ([`relay_runtime::SettingError`], exit code
/// [`crate::process::EXIT_CONFIG`]) or a failure to set up ([`crate::process::exit_code_for`]).
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => command::run::run(args).await,
        Command::Drain(args) => command::drain::run(args).await,
        Command::Status(args) => command::status::run(args).await,
        Command::Redrive(args) => command::redrive::run(args).await,
        Command::Inspect(args) => command::inspect::run(args).await,
        Command::RecoverDiscarded(args) => command::recover_discarded::run(args).await,
        Command::Check(args) => command::check::run(args).await,
        Command::AdoptRegion(args) => command::adopt_region::run(args).await,
        Command::HandBackRegion(args) => command::hand_back_region::run(args).await,
    }
}
