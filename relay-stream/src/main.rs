//! The Lambda: `relay-stream` (packaged by cargo-lambda as `bootstrap`).

use anyhow::Context;
use clap::Parser;
use relay_stream::LambdaEnv;
use relay_stream::lambda::{LambdaRelay, init_metrics};

/// The relays' allocator (see [`relay_runtime::Allocator`]).
#[global_allocator]
static ALLOCATOR: relay_runtime::Allocator = relay_runtime::Allocator;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), lambda_runtime::Error> {
    let _telemetry = relay_runtime::telemetry::init_tracing();
    let env = LambdaEnv::try_parse_from(["relay-stream"])
        .context("reading the configuration from the environment")?;
    let sdk_config = relay_runtime::load_aws_config().await?;
    // What the function relies on, once at init: a missing table or bus, a role without access,
    // is one ERROR line and a failed init (Lambda reports it and retries the init), not a
    // function that fails every batch.
    let probes = relay_stream::probes(&env.relay)?;
    let found = match relay_runtime::probe::each(&sdk_config, &probes).await {
        Ok(found) => found,
        Err(unusable) => {
            tracing::error!(
                resource = %unusable.resource.name,
                code = unusable.code.as_deref().unwrap_or_default(),
                "{unusable}"
            );
            std::process::exit(relay_runtime::probe::EXIT_MISCONFIGURED.into());
        }
    };
    let relay = relay_stream::build_relay_within(&env.relay, &sdk_config, &found)?;
    let metrics = init_metrics(&env.metrics.metrics_namespace)?;
    let function = LambdaRelay::new(relay, Some(metrics));
    let function = &function;
    lambda_runtime::run(lambda_runtime::service_fn(move |event| {
        function.handle(event)
    }))
    .await
}
