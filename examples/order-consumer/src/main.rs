//! The example consumer Lambda: reserves stock for `OrderCreated` events, once per event,
//! triggered by the classic bus (one EventBridge event) or by an SQS FIFO queue of the Custom
//! Event Bus's FIFO subscriber (a batch of `Records`, handled in order, with
//! `ReportBatchItemFailures`).

use anyhow::Context as _;
use clap::Parser;
use lambda_runtime::{LambdaEvent, service_fn};
use order_consumer::{
    DynamoInventory, EventBridgeEvent, ExampleArgs, HandlerError, SqsEvent, handle_event,
    handle_queue_batch,
};
use outbox_consumer::{IdempotencyStore, OccTable, PayloadResolver};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _telemetry = relay_runtime::telemetry::init_tracing();
    let args = ExampleArgs::parse();
    let (idempotency, occ) = args.configs().context("invalid configuration")?;
    let sdk_config = relay_runtime::load_aws_config().await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk_config);
    // Events too large to travel with their payload reference it in S3 (the payload bucket).
    let payloads = PayloadResolver::new(aws_sdk_s3::Client::new(&sdk_config));
    let store = IdempotencyStore::new(dynamodb.clone(), idempotency)?;
    let inventory = DynamoInventory::new(OccTable::new(dynamodb, occ)?);
    let (payloads, store, inventory) = (&payloads, &store, &inventory);
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<serde_json::Value>| async move {
            let deadline = i64::try_from(event.context.deadline)
                .ok()
                .and_then(chrono::DateTime::from_timestamp_millis);
            let malformed = |e: serde_json::Error| HandlerError::Malformed(e.to_string());
            // An SQS trigger's payload is `{"Records": [...]}`; EventBridge's is one event.
            if event.payload.get("Records").is_some() {
                let batch: SqsEvent = serde_json::from_value(event.payload).map_err(malformed)?;
                // Boxed: both handlers' futures inline in one block overflow the layout query.
                let outcome = Box::pin(handle_queue_batch(
                    &batch.records,
                    deadline,
                    payloads,
                    store,
                    inventory,
                ))
                .await;
                relay_runtime::telemetry::flush();
                serde_json::to_value(outcome.response).map_err(malformed)
            } else {
                let event: EventBridgeEvent<serde_json::Value> =
                    serde_json::from_value(event.payload).map_err(malformed)?;
                let handled =
                    Box::pin(handle_event(&event, deadline, payloads, store, inventory)).await;
                // A frozen execution environment runs no batch processor: the spans go now.
                relay_runtime::telemetry::flush();
                serde_json::to_value(handled?).map_err(malformed)
            }
        },
    ))
    .await
    .map_err(|e| anyhow::anyhow!(e))
}
