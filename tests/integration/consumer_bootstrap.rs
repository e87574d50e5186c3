//! The example consumer's `bootstrap` (`examples/order-consumer`'s `example-consumer`, the test
//! build's binary packaged as `cargo lambda build` packages it), behind cargo-lambda's runtime
//! API emulator (the helpers of [`crate::bootstrap`]), invoked with the events an SQS and a
//! Kinesis trigger hand it, recorded from the emulator ([`outbox_tests::lambda_events`]): its
//! `batchItemFailures` response follows each source's rule, a message it cannot decode being
//! that message's failure.

use std::process::Stdio;

use aws_smithy_types::Blob;
use chrono::Utc;
use order_consumer::DynamoInventory;
use order_consumer::stock::{self, create_stock_table, put_stock};
use outbox_consumer::OccTable;
use outbox_consumer::occ::OccConfig;
use outbox_consumer::tables::create_idempotency_table;
use outbox_shared::envelope::Encoding;
use outbox_shared::schema::user_pk;
use outbox_shared::{NewOutboxEvent, OutboundEvent, OutboxItem};
use outbox_tests::lambda_events::{kinesis_event, sqs_event};
use outbox_tests::{TestEnv, unique_name};
use outbox_writer::ORDER_CREATED;
use relay_runtime::{PublishOutcome, Publisher, TargetKind};
use serde_json::json;
use tokio::process::Child;

use crate::bootstrap::{function, invoke, package_bootstrap, runtime_api};

/// The SKU every order of these tests reserves one of.
pub(crate) const SKU: &str = "SKU-LAMBDA";

/// The example consumer's `bootstrap`, packaged once for the tests of this module.
async fn bootstrap() -> std::path::PathBuf {
    static BUILT: tokio::sync::OnceCell<std::path::PathBuf> = tokio::sync::OnceCell::const_new();
    BUILT
        .get_or_init(|| package_bootstrap("example-consumer"))
        .await
        .clone()
}

/// An `OrderCreated` of `order_id` (one of [`SKU`]) as the relays publish it, in aggregate
/// `aggregate`.
pub(crate) fn order_created(
    env: &TestEnv,
    aggregate: &str,
    order_id: &str,
    sequence: u64,
) -> OutboundEvent {
    let item = OutboxItem::pending(
        NewOutboxEvent {
            partition_key: user_pk("lambda-user"),
            event_type: ORDER_CREATED.to_owned(),
            aggregate_type: "Order".to_owned(),
            aggregate_id: aggregate.to_owned(),
            sequence: Some(sequence),
            payload: json!({
                "orderId": order_id,
                "userId": "lambda-user",
                "items": [{"sku": SKU, "quantity": 1, "unitPriceCents": 700}],
                "amountCents": 700,
                "status": "CREATED",
                "version": 1,
                "createdAt": outbox_shared::time::format_timestamp(Utc::now()),
            }),
            trace_header: None,
            trace_context: None,
        },
        &env.outbox_config(),
        Utc::now(),
    )
    .expect("a valid outbox event");
    OutboundEvent::from_item(&item, &Encoding::envelope()).expect("an envelope")
}

/// Publishes `event` through the relay's publisher to `env`'s target.
pub(crate) async fn publish(env: &TestEnv, event: &OutboundEvent) {
    let outcomes = env
        .publisher(env.publisher_config())
        .publish(std::slice::from_ref(event), relay_runtime::Deadline::NONE)
        .await;
    assert!(
        outcomes.iter().all(PublishOutcome::is_published),
        "{outcomes:?}"
    );
}

/// The consumer's tables: an idempotency table and a stock table holding ten of [`SKU`]; the
/// stock table's inventory, to read the stock back.
pub(crate) async fn consumer_tables(env: &TestEnv) -> (String, String, DynamoInventory) {
    let idempotency = unique_name("consumer");
    create_idempotency_table(&env.dynamodb, &idempotency)
        .await
        .expect("create the idempotency table");
    let stock_table = unique_name("stock");
    create_stock_table(&env.dynamodb, &stock_table)
        .await
        .expect("create the stock table");
    put_stock(&env.dynamodb, &stock_table, SKU, 10)
        .await
        .expect("seed the stock");
    let occ = OccTable::new(
        env.dynamodb.clone(),
        OccConfig::new(&stock_table, stock::attr::VERSION),
    )
    .expect("a valid OCC config");
    (idempotency, stock_table, DynamoInventory::new(occ))
}

/// The example consumer's `bootstrap`, started as Lambda starts it on its tables, waiting on
/// the runtime API: the port to invoke, and the processes (killed when dropped).
async fn started_consumer(
    env: &TestEnv,
    idempotency: &str,
    stock_table: &str,
) -> (u16, Child, Child) {
    let bootstrap = bootstrap().await;
    let (port, watch) = runtime_api().await;
    let consumer = function(&bootstrap, env, port)
        .env("IDEMPOTENCY_TABLE_NAME", idempotency)
        .env("STOCK_TABLE_NAME", stock_table)
        .env("PAYLOAD_BUCKET", outbox_tests::NO_PAYLOAD_BUCKET)
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("bootstrap starts");
    (port, watch, consumer)
}

async fn available(inventory: &DynamoInventory) -> u64 {
    inventory
        .stock_level(SKU)
        .await
        .expect("read the stock")
        .expect("the SKU exists")
        .value
        .available
}

#[tokio::test]
async fn example_consumer_reports_an_undecodable_sqs_message_and_reserves_for_the_rest() {
    // Given two orders' OrderCreated on a standard queue, published by the relay's publisher,
    // a message between them that is not an outbox event, and the batch an SQS trigger hands
    // the function
    let env = TestEnv::with_target_of(TargetKind::Sqs, false).await;
    let (idempotency, stock_table, inventory) = consumer_tables(&env).await;
    publish(&env, &order_created(&env, "order-q1", "order-q1", 1)).await;
    env.sqs
        .send_message()
        .queue_url(&env.sink_queue_url)
        .message_body(r#"{"hello": "not an event"}"#)
        .send()
        .await
        .unwrap();
    publish(&env, &order_created(&env, "order-q2", "order-q2", 1)).await;
    let batch = sqs_event(&env, &env.sink_queue_url, 3).await;
    assert_eq!(batch.records.len(), 3);
    let undecodable = batch
        .records
        .iter()
        .find(|m| {
            m.body
                .as_deref()
                .unwrap_or_default()
                .contains("not an event")
        })
        .and_then(|m| m.message_id.clone())
        .expect("the message that is not an event");

    // And the example consumer's bootstrap waiting on the runtime API
    let (port, _watch, _consumer) = started_consumer(&env, &idempotency, &stock_table).await;

    // When the batch is invoked through the runtime API
    let response = invoke(port, &serde_json::to_value(&batch).unwrap()).await;

    // Then the undecodable message alone is reported (a standard queue's rule), and both orders
    // reserved their unit
    assert_eq!(
        response,
        json!({"batchItemFailures": [{"itemIdentifier": undecodable}]}),
    );
    assert_eq!(available(&inventory).await, 8);
}

#[tokio::test]
async fn example_consumer_reports_an_undecodable_kinesis_record_and_handles_nothing_after_it() {
    // Given an order's OrderCreated on a Kinesis stream, a record that is not an outbox event
    // in the same shard (its partition key the aggregate's), another OrderCreated after it,
    // and the batch a Kinesis trigger hands the function
    let env = TestEnv::with_target(TargetKind::Kinesis).await;
    let (idempotency, stock_table, inventory) = consumer_tables(&env).await;
    let first = order_created(&env, "order-k", "order-k1", 1);
    publish(&env, &first).await;
    env.kinesis
        .put_record()
        .stream_arn(&env.bus_name)
        .partition_key(&first.event_group)
        .data(Blob::new(&b"not an event"[..]))
        .send()
        .await
        .unwrap();
    publish(&env, &order_created(&env, "order-k", "order-k2", 2)).await;
    let batch = kinesis_event(&env, &env.bus_name).await;
    assert_eq!(batch.records.len(), 3);

    // And the example consumer's bootstrap waiting on the runtime API
    let (port, _watch, _consumer) = started_consumer(&env, &idempotency, &stock_table).await;

    // When the batch is invoked through the runtime API
    let response = invoke(port, &serde_json::to_value(&batch).unwrap()).await;

    // Then the undecodable record's sequence number is the one failure (Lambda retries from it),
    // and only the first order reserved its unit: the record after it was not handled
    assert_eq!(
        response,
        json!({"batchItemFailures": [
            {"itemIdentifier": batch.records[1].kinesis.sequence_number}
        ]}),
    );
    assert_eq!(available(&inventory).await, 9);
}
