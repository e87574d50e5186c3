//! The one logging set-up of every binary: structured logs on stderr, so stdout carries only
//! results (summaries, status tables) and, in the Lambda, CloudWatch EMF metrics.
//!
//! Every binary decides text or JSON the same way ([`LogFormat::detect`]): what Lambda's advanced
//! logging controls ask for (`AWS_LAMBDA_LOG_FORMAT`) when set, else text for a person at a
//! terminal and JSON for everything else (a file, a pipe, CloudWatch, ECS). Colour codes are
//! written only to a terminal.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line (CloudWatch Logs Insights, ECS, a redirected log file).
    Json,
    /// Human-readable text.
    Text,
}

impl LogFormat {
    /// `AWS_LAMBDA_LOG_FORMAT` (`JSON` or `Text`) when set; otherwise text when stderr is a
    /// terminal, JSON when it is not.
    pub fn detect() -> Self {
        Self::choose(
            std::env::var("AWS_LAMBDA_LOG_FORMAT").ok().as_deref(),
            std::io::stderr().is_terminal(),
        )
    }

    fn choose(lambda_log_format: Option<&str>, stderr_is_terminal: bool) -> Self {
        match lambda_log_format.map(str::trim) {
            Some(f) if f.eq_ignore_ascii_case("json") => Self::Json,
            Some(f) if f.eq_ignore_ascii_case("text") => Self::Text,
            _ if stderr_is_terminal => Self::Text,
            _ => Self::Json,
        }
    }
}

/// Installs the global subscriber in the [detected](LogFormat::detect) format. The level comes
/// from `RUST_LOG`, else `AWS_LAMBDA_LOG_LEVEL`, else `info`.
pub fn init_tracing() {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| {
            let level = std::env::var("AWS_LAMBDA_LOG_LEVEL").unwrap_or_else(|_| "info".into());
            EnvFilter::try_new(level.to_ascii_lowercase())
        })
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false);
    match LogFormat::detect() {
        LogFormat::Json => builder.json().with_current_span(false).init(),
        LogFormat::Text => builder.init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lambda_setting_wins_then_the_terminal_decides() {
        assert_eq!(LogFormat::choose(Some("JSON"), true), LogFormat::Json);
        assert_eq!(LogFormat::choose(Some("Text"), false), LogFormat::Text);
        assert_eq!(LogFormat::choose(None, true), LogFormat::Text);
        assert_eq!(LogFormat::choose(None, false), LogFormat::Json);
        assert_eq!(LogFormat::choose(Some("other"), false), LogFormat::Json);
    }
}
