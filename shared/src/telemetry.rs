//! Tracing set-up for every binary: structured logs on stderr, so stdout carries only results
//! (summaries, status tables) and, in the Lambdas, CloudWatch EMF metrics.

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line (CloudWatch Logs Insights, ECS).
    Json,
    /// Human-readable text.
    Text,
    /// JSON when Lambda's advanced logging controls ask for it (`AWS_LAMBDA_LOG_FORMAT=JSON`), text
    /// otherwise.
    FromLambdaEnvironment,
}

/// Installs the global subscriber. The level comes from `RUST_LOG`, else `AWS_LAMBDA_LOG_LEVEL`,
/// else `info`.
pub fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| {
            let level = std::env::var("AWS_LAMBDA_LOG_LEVEL").unwrap_or_else(|_| "info".into());
            EnvFilter::try_new(level.to_ascii_lowercase())
        })
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let json = match format {
        LogFormat::Json => true,
        LogFormat::Text => false,
        LogFormat::FromLambdaEnvironment => {
            std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"))
        }
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    if json {
        builder.json().with_current_span(false).init();
    } else {
        builder.init();
    }
}
