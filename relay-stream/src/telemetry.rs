//! Tracing set-up for both binaries: JSON lines when `AWS_LAMBDA_LOG_FORMAT=JSON` (as Lambda's
//! advanced logging controls set it), plain text otherwise; on stderr, so stdout carries only
//! metrics (EMF) and the local runner's summary.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. The level comes from `RUST_LOG`, else `AWS_LAMBDA_LOG_LEVEL`,
/// else `info`.
pub fn init() {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| {
            let level = std::env::var("AWS_LAMBDA_LOG_LEVEL").unwrap_or_else(|_| "info".into());
            EnvFilter::try_new(level.to_ascii_lowercase())
        })
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let json = std::env::var("AWS_LAMBDA_LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("json"));
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
