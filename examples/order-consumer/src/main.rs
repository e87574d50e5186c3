//! The example consumer Lambda: reserves stock for `OrderCreated` events, once per event,
//! triggered by the classic bus (one EventBridge event), by an SQS queue (standard or FIFO: the
//! Custom Event Bus's FIFO subscriber's, an SNS subscription's, a rule's) or by a Kinesis stream
//! (a batch of `Records`, with `ReportBatchItemFailures`, through the batch processor).

use anyhow::Context as _;
use clap::Parser;
use lambda_runtime::{LambdaEvent, service_fn};
use order_consumer::{
    DynamoInventory, EventBridgeEvent, ExampleArgs, HandlerError, KinesisEvent, SqsEvent,
    handle_event, handle_kinesis_batch, handle_sqs_batch,
};
use outbox_consumer::{IdempotencyStore, OccTable, PayloadResolver};

/// `eventSource` of a Kinesis trigger's records (an SQS trigger's is `aws:sqs`).
const KINESIS_SOURCE: &str = "aws:kinesis";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let _telemetry = relay_runtime::telemetry::init_tracing();
    let args = ExampleArgs::parse();
    let (idempotency, occ) = args.configs().context("invalid configuration")?;
    let sdk_config = relay_runtime::load_aws_config().await?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk_config);
    // Events too large to travel with their payload reference it in S3 (the payload bucket).
    // Every read carries the bucket's owner (EXPECTED_BUCKET_OWNER, checked by load_aws_config).
    let s3 = outbox_shared::bucket_owner::client(
        aws_sdk_s3::Client::new(&sdk_config),
        relay_runtime::expected_bucket_owner()?.as_ref(),
    );
    let payloads = PayloadResolver::new(s3, args.payload_bucket.clone());
    let store = IdempotencyStore::new(dynamodb.clone(), idempotency)?;
    let inventory = DynamoInventory::new(OccTable::new(dynamodb, occ)?);
    let processor = order_consumer::processor(payloads.clone(), store.clone());
    let (payloads, store, inventory, processor) = (&payloads, &store, &inventory, &processor);
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<serde_json::Value>| async move {
            let deadline = i64::try_from(event.context.deadline)
                .ok()
                .and_then(chrono::DateTime::from_timestamp_millis);
            let malformed = |e: serde_json::Error| HandlerError::Malformed(e.to_string());
            // A queue's or a stream's trigger hands `{"Records": [...]}`; EventBridge one event.
            let response = match event.payload.pointer("/Records/0/eventSource") {
                Some(source) if source == KINESIS_SOURCE => {
                    let batch: KinesisEvent =
                        serde_json::from_value(event.payload).map_err(malformed)?;
                    let invocation = order_consumer::invocation(deadline);
                    // Boxed: the handlers' futures inline in one block overflow the layout query.
                    let report = Box::pin(handle_kinesis_batch(
                        &batch,
                        &invocation,
                        processor,
                        inventory,
                    ))
                    .await;
                    serde_json::to_value(report.kinesis_response()).map_err(malformed)
                }
                Some(_) => {
                    let batch: SqsEvent =
                        serde_json::from_value(event.payload).map_err(malformed)?;
                    let invocation = order_consumer::invocation(deadline);
                    let report =
                        Box::pin(handle_sqs_batch(&batch, &invocation, processor, inventory)).await;
                    serde_json::to_value(report.sqs_response()).map_err(malformed)
                }
                None => {
                    let event: EventBridgeEvent<serde_json::Value> =
                        serde_json::from_value(event.payload).map_err(malformed)?;
                    let handled =
                        Box::pin(handle_event(&event, deadline, payloads, store, inventory)).await;
                    handled.and_then(|h| serde_json::to_value(h).map_err(malformed))
                }
            };
            // A frozen execution environment runs no batch processor: the spans go now.
            relay_runtime::telemetry::flush();
            response
        },
    ))
    .await
    .map_err(|e| anyhow::anyhow!(e))
}
