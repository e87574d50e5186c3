//! The stack the demo runs on (table, bus, sink queue, dead-letter queue), provisioned from the
//! template on the local emulators or given on the command line, and the clients it reads it with.

use anyhow::{Result, bail};
use outbox_infra::LocalStack;

use crate::cli::Args;
use crate::progress::phase;

/// The EventBridge `Source` the demo's writer and relays use.
pub(crate) const SOURCE: &str = "demo.orders";

/// The stack the demo runs on, and the clients it reads it with.
#[derive(Debug, Clone)]
pub(crate) struct Env {
    pub(crate) stack: LocalStack,
    pub(crate) dynamodb: aws_sdk_dynamodb::Client,
    pub(crate) sqs: aws_sdk_sqs::Client,
}

impl Env {
    pub(crate) async fn queue_depth(&self, queue_url: &str) -> Result<u64> {
        Ok(outbox_infra::queue_depth(&self.sqs, queue_url).await?)
    }
}

pub(crate) async fn provision(args: &Args) -> Result<Env> {
    // The demo creates and fills its own resources: never against an account by accident.
    for variable in ["AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"] {
        if std::env::var_os(variable).is_none() {
            bail!(
                "{variable} is not set: run the demo with `make demo`, which starts the local emulators"
            );
        }
    }
    let sdk = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk);
    let sqs = aws_sdk_sqs::Client::new(&sdk);
    let stack = match (
        &args.table_name,
        &args.event_bus_name,
        &args.sink_queue_url,
        &args.dead_letter_queue_url,
    ) {
        (Some(table), Some(bus), Some(sink), Some(dlq)) => {
            LocalStack::existing(&dynamodb, table, bus, sink, dlq).await?
        }
        _ => {
            phase(
                "provisioning the table, bus, sink queue and dead-letter queue from infra/template.yaml",
            );
            let suffix = uuid::Uuid::now_v7().simple().to_string();
            let eventbridge = aws_sdk_eventbridge::Client::new(&sdk);
            LocalStack::provision(&dynamodb, &eventbridge, &sqs, &suffix[suffix.len() - 10..])
                .await?
        }
    };
    Ok(Env {
        stack,
        dynamodb,
        sqs,
    })
}
