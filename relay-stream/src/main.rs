//! The Lambda: `relay-stream` (packaged by cargo-lambda as `bootstrap`).

use anyhow::Context;
use clap::Parser;
use relay_stream::RelayArgs;
use relay_stream::lambda::{DEFAULT_METRICS_NAMESPACE, LambdaRelay, init_metrics};

/// The Lambda's configuration, from the environment only.
#[derive(Debug, Parser)]
#[command(name = "relay-stream")]
struct Env {
    #[command(flatten)]
    relay: RelayArgs,
    /// CloudWatch namespace of the metrics.
    #[arg(long, env = "METRICS_NAMESPACE", default_value = DEFAULT_METRICS_NAMESPACE)]
    metrics_namespace: String,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    outbox_shared::telemetry::init_tracing(
        outbox_shared::telemetry::LogFormat::FromLambdaEnvironment,
    );
    let env = Env::try_parse_from(["relay-stream"])
        .context("reading the configuration from the environment")?;
    let sdk_config = outbox_shared::load_aws_config().await;
    let relay = relay_stream::build_relay(&env.relay, &sdk_config)?;
    let metrics = init_metrics(&env.metrics_namespace).map_err(|e| anyhow::anyhow!(e))?;
    let function = LambdaRelay::new(relay, Some(metrics));
    let function = &function;
    lambda_runtime::run(lambda_runtime::service_fn(move |event| {
        function.handle(event)
    }))
    .await
}
