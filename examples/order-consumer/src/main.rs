//! The example consumer Lambda: reserves stock for `OrderCreated` events, once per event.

use anyhow::Context as _;
use clap::Parser;
use lambda_runtime::{LambdaEvent, service_fn};
use order_consumer::{DynamoInventory, EventBridgeEvent, ExampleArgs, handle_event};
use outbox_consumer::{IdempotencyStore, OccTable};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    relay_runtime::telemetry::init_tracing();
    let args = ExampleArgs::parse();
    let (idempotency, occ) = args.configs().context("invalid configuration")?;
    let sdk_config = relay_runtime::load_aws_config().await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk_config);
    let store = IdempotencyStore::new(dynamodb.clone(), idempotency)?;
    let inventory = DynamoInventory::new(OccTable::new(dynamodb, occ)?);
    let (store, inventory) = (&store, &inventory);
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<EventBridgeEvent<serde_json::Value>>| async move {
            let deadline = i64::try_from(event.context.deadline)
                .ok()
                .and_then(chrono::DateTime::from_timestamp_millis);
            handle_event(&event.payload, deadline, store, inventory).await
        },
    ))
    .await
    .map_err(|e| anyhow::anyhow!(e))
}
