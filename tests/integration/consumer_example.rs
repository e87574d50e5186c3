//! The example consumer fed the EventBridge event the relay produces: a fixture captured from a
//! real relayed message (kept honest by a test that re-derives it from a live relay), delivered
//! several times; an event whose payload is in S3 (a claim check), handled as the same event
//! inline, and refused when its object is gone; and fed batches from the FIFO queue of the
//! Custom Event Bus's subscriber, in order, stopping at a failure.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use futures::future::join_all;
use order_consumer::stock::{self, create_stock_table, put_stock};
use order_consumer::{
    DynamoInventory, EventBridgeEvent, Handled, HandlerError, Reservation, handle_event,
};
use outbox_consumer::occ::OccConfig;
use outbox_consumer::tables::create_idempotency_table;
use outbox_consumer::{IdempotencyConfig, IdempotencyStore, OccTable, PayloadResolver};
use outbox_shared::claim_check::{PayloadStore, Stored};
use outbox_shared::schema::user_pk;
use outbox_shared::{Envelope, NewOutboxEvent, OutboundEvent, OutboxItem};
use outbox_tests::{TestEnv, unique_name, workspace_root};
use outbox_writer::{ORDER_CREATED, OrderCreated};
use relay_runtime::{ClassicBus, PublishOutcome, Publisher, TargetPublisher};
use serde_json::{Value, json};

/// Set to rewrite the fixture from the live relay instead of comparing with it.
const UPDATE_FIXTURE_VAR: &str = "UPDATE_CONSUMER_FIXTURE";

fn fixture_path() -> PathBuf {
    workspace_root().join("tests/fixtures/consumer/order_created_event.json")
}

fn fixture() -> EventBridgeEvent<Value> {
    let text = std::fs::read_to_string(fixture_path()).expect("read the fixture");
    serde_json::from_str(&text).expect("the fixture is an EventBridge event")
}

/// The JSON "shape" of a document: object keys with the shapes of their values, array element
/// shapes, and the type of every scalar. Ids, times and amounts differ between captures; the
/// shape is what a consumer depends on.
fn shape(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            Value::Object(map.iter().map(|(k, v)| (k.clone(), shape(v))).collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
        Value::String(_) => json!("string"),
        Value::Number(_) => json!("number"),
        Value::Bool(_) => json!("bool"),
        Value::Null => json!("null"),
    }
}

/// Publishes an `OrderCreated` outbox event through the relay's publisher and returns the
/// EventBridge event as delivered to the sink queue.
async fn relay_order_created(env: &TestEnv) -> Value {
    let data = json!({
        "orderId": "ord-fixture-1",
        "userId": "user-fixture-1",
        "items": [
            {"sku": "SKU-RED-MUG", "quantity": 2, "unitPriceCents": 1250},
            {"sku": "SKU-BLUE-PLATE", "quantity": 1, "unitPriceCents": 2000}
        ],
        "amountCents": 4500,
        "status": "CREATED",
        "version": 1,
        "createdAt": outbox_shared::time::format_timestamp(Utc::now()),
    });
    let item = OutboxItem::pending(
        NewOutboxEvent {
            partition_key: user_pk("user-fixture-1"),
            event_type: ORDER_CREATED.to_owned(),
            aggregate_type: "Order".to_owned(),
            aggregate_id: "ord-fixture-1".to_owned(),
            sequence: Some(1),
            payload: data,
            trace_header: None,
            trace_context: None,
        },
        &env.outbox_config(),
        Utc::now(),
    )
    .expect("valid outbox event");
    let publisher = TargetPublisher::on(
        ClassicBus::new(env.eventbridge.config().to_builder()),
        env.publisher_config(),
    )
    .expect("valid publisher config");
    let event = OutboundEvent::from_item(&item, &outbox_shared::envelope::Encoding::envelope())
        .expect("envelope");
    let outcomes = publisher
        .publish(&[event], relay_runtime::Deadline::NONE)
        .await;
    assert!(outcomes[0].is_published(), "{outcomes:?}");
    let delivered = env.wait_for_sink(1, Duration::from_secs(20)).await;
    assert_eq!(delivered.len(), 1);
    delivered[0].event.clone()
}

#[tokio::test]
async fn the_fixture_has_the_shape_of_a_live_relayed_order_created_event() {
    // Given an OrderCreated event relayed through EventBridge to the sink queue
    let env = TestEnv::new().await;
    let live = relay_order_created(&env).await;
    if std::env::var_os(UPDATE_FIXTURE_VAR).is_some() {
        let text = serde_json::to_string_pretty(&live).unwrap() + "\n";
        std::fs::write(fixture_path(), text).expect("write the fixture");
    }

    // When the committed fixture is read
    let text = std::fs::read_to_string(fixture_path()).expect("read the fixture");
    let committed: Value = serde_json::from_str(&text).unwrap();

    // Then it has the live event's shape, and both decode as the consumer's event type
    assert_eq!(
        shape(&committed),
        shape(&live),
        "the relayed event changed shape: rerun with {UPDATE_FIXTURE_VAR}=1 and review the diff"
    );
    for event in [committed, live] {
        let decoded: EventBridgeEvent<Envelope<OrderCreated>> =
            serde_json::from_value(event).unwrap();
        assert_eq!(decoded.detail_type, ORDER_CREATED);
        assert_eq!(decoded.detail.data.items.len(), 2);
    }
}

/// Tables for the example consumer with every SKU of the fixture stocked at `available`.
async fn consumer(
    env: &TestEnv,
    available: &BTreeMap<&str, u64>,
) -> (IdempotencyStore, Arc<DynamoInventory>) {
    let idempotency_table = unique_name("idempotency");
    create_idempotency_table(&env.dynamodb, &idempotency_table)
        .await
        .unwrap();
    let stock_table = unique_name("stock");
    create_stock_table(&env.dynamodb, &stock_table)
        .await
        .unwrap();
    for (sku, units) in available {
        put_stock(&env.dynamodb, &stock_table, sku, *units)
            .await
            .unwrap();
    }
    let store = IdempotencyStore::new(
        env.dynamodb.clone(),
        IdempotencyConfig::new(idempotency_table),
    )
    .unwrap();
    let occ = OccTable::new(
        env.dynamodb.clone(),
        OccConfig::new(stock_table, stock::attr::VERSION),
    )
    .unwrap();
    (store, Arc::new(DynamoInventory::new(occ)))
}

/// The example consumer's payload resolver, on the emulator's S3, reading from `bucket`.
fn resolver(env: &TestEnv, bucket: &str) -> PayloadResolver {
    PayloadResolver::new(env.s3.clone(), bucket)
}

async fn available(inventory: &DynamoInventory, sku: &str) -> u64 {
    inventory
        .stock_level(sku)
        .await
        .unwrap()
        .expect("stocked sku")
        .value
        .available
}

fn ordered(event: &EventBridgeEvent<Value>) -> BTreeMap<String, u64> {
    let order: OrderCreated = serde_json::from_value(event.detail["data"].clone()).unwrap();
    order
        .items
        .iter()
        .map(|l| (l.sku.clone(), u64::from(l.quantity)))
        .collect()
}

#[tokio::test]
async fn the_example_consumer_reserves_stock_once_when_the_event_is_delivered_three_times() {
    // Given the relayed OrderCreated event and 10 units of each of its SKUs
    let env = TestEnv::new().await;
    let event = fixture();
    let wanted = ordered(&event);
    let stocked: BTreeMap<&str, u64> = wanted.keys().map(|sku| (sku.as_str(), 10)).collect();
    let (store, inventory) = consumer(&env, &stocked).await;

    // When it is delivered three times
    let mut handled = Vec::new();
    for _ in 0..3 {
        handled.push(
            handle_event(
                &event,
                None,
                &resolver(&env, outbox_tests::NO_PAYLOAD_BUCKET),
                &store,
                inventory.as_ref(),
            )
            .await
            .unwrap(),
        );
    }

    // Then stock is reserved once, and the duplicates get the same stored reservation
    for (sku, quantity) in &wanted {
        assert_eq!(available(&inventory, sku).await, 10 - quantity, "{sku}");
    }
    let Handled::Processed {
        replayed: false,
        reservation,
    } = &handled[0]
    else {
        panic!("first delivery not processed: {:?}", handled[0]);
    };
    assert!(
        matches!(reservation, Reservation::Reserved { lines, .. } if lines.len() == wanted.len())
    );
    for duplicate in &handled[1..] {
        assert_eq!(
            duplicate,
            &Handled::Processed {
                replayed: true,
                reservation: reservation.clone()
            }
        );
    }
}

#[tokio::test]
async fn three_concurrent_deliveries_reserve_stock_once() {
    // Given the relayed OrderCreated event and 10 units of each of its SKUs
    let env = TestEnv::new().await;
    let event = fixture();
    let wanted = ordered(&event);
    let stocked: BTreeMap<&str, u64> = wanted.keys().map(|sku| (sku.as_str(), 10)).collect();
    let (store, inventory) = consumer(&env, &stocked).await;

    // When it is delivered three times at once, and the refused deliveries are retried
    let payloads = resolver(&env, outbox_tests::NO_PAYLOAD_BUCKET);
    let results =
        join_all((0..3).map(|_| handle_event(&event, None, &payloads, &store, inventory.as_ref())))
            .await;
    for result in &results {
        match result {
            Ok(Handled::Processed { .. }) => {}
            Err(e @ HandlerError::Retryable(_)) => assert!(e.is_retryable()),
            other => panic!("unexpected: {other:?}"),
        }
    }
    let retried = handle_event(
        &event,
        None,
        &resolver(&env, outbox_tests::NO_PAYLOAD_BUCKET),
        &store,
        inventory.as_ref(),
    )
    .await
    .unwrap();

    // Then stock is reserved once
    assert!(
        matches!(retried, Handled::Processed { replayed: true, .. }),
        "{retried:?}"
    );
    assert_eq!(
        results
            .iter()
            .filter(|r| matches!(
                r,
                Ok(Handled::Processed {
                    replayed: false,
                    ..
                })
            ))
            .count(),
        1
    );
    for (sku, quantity) in &wanted {
        assert_eq!(available(&inventory, sku).await, 10 - quantity, "{sku}");
    }
}

#[tokio::test]
async fn an_order_that_cannot_be_met_is_rejected_once_and_gives_back_what_it_took() {
    // Given the relayed OrderCreated event, with one of its SKUs out of stock
    let env = TestEnv::new().await;
    let event = fixture();
    let wanted = ordered(&event);
    let mut skus = wanted.keys();
    let (plenty, none) = (skus.next().unwrap().as_str(), skus.next().unwrap().as_str());
    let (store, inventory) = consumer(&env, &BTreeMap::from([(plenty, 10), (none, 0)])).await;

    // When it is delivered twice
    let first = handle_event(
        &event,
        None,
        &resolver(&env, outbox_tests::NO_PAYLOAD_BUCKET),
        &store,
        inventory.as_ref(),
    )
    .await
    .unwrap();
    let second = handle_event(
        &event,
        None,
        &resolver(&env, outbox_tests::NO_PAYLOAD_BUCKET),
        &store,
        inventory.as_ref(),
    )
    .await
    .unwrap();

    // Then it is rejected, nothing stays reserved, and the duplicate gets the stored rejection
    let Handled::Processed {
        replayed: false,
        reservation: Reservation::Rejected { reason, .. },
    } = &first
    else {
        panic!("expected a rejection: {first:?}");
    };
    assert!(reason.contains(none), "{reason}");
    assert!(matches!(
        second,
        Handled::Processed {
            replayed: true,
            reservation: Reservation::Rejected { .. }
        }
    ));
    assert_eq!(available(&inventory, plenty).await, 10);
    assert_eq!(available(&inventory, none).await, 0);
}

#[tokio::test]
async fn other_events_are_ignored() {
    // Given an event that is not an OrderCreated
    let env = TestEnv::new().await;
    let mut event = fixture();
    event.detail_type = "OrderShipped".to_owned();
    let (store, inventory) = consumer(&env, &BTreeMap::new()).await;

    // When it is delivered
    let handled = handle_event(
        &event,
        None,
        &resolver(&env, outbox_tests::NO_PAYLOAD_BUCKET),
        &store,
        inventory.as_ref(),
    )
    .await
    .unwrap();

    // Then nothing is done
    assert_eq!(
        handled,
        Handled::Ignored {
            detail_type: "OrderShipped".to_owned()
        }
    );
}

/// An inventory that fails once for one order (an inventory outage), then reserves as `inner`.
struct FailsOnceFor {
    inner: Arc<DynamoInventory>,
    order_id: String,
    failed: std::sync::atomic::AtomicBool,
}

impl order_consumer::Inventory for FailsOnceFor {
    async fn reserve(
        &self,
        order_id: &str,
        lines: &[outbox_writer::OrderLine],
    ) -> Result<Reservation, order_consumer::InventoryError> {
        use std::sync::atomic::Ordering;
        if order_id == self.order_id && !self.failed.swap(true, Ordering::SeqCst) {
            return Err(order_consumer::InventoryError(
                "stock table unavailable".into(),
            ));
        }
        self.inner.reserve(order_id, lines).await
    }
}

/// An `OrderCreated` outbox item for `order_id`, `quantity` units of `sku`.
fn order_created_item(env: &TestEnv, order_id: &str, sku: &str, quantity: u32) -> OutboxItem {
    let data = json!({
        "orderId": order_id, "userId": "user-1",
        "items": [{"sku": sku, "quantity": quantity, "unitPriceCents": 1250}],
        "amountCents": 1250 * quantity, "status": "CREATED", "version": 1,
        "createdAt": outbox_shared::time::format_timestamp(Utc::now()),
    });
    OutboxItem::pending(
        NewOutboxEvent {
            partition_key: user_pk("user-1"),
            event_type: ORDER_CREATED.to_owned(),
            aggregate_type: "Order".to_owned(),
            aggregate_id: order_id.to_owned(),
            sequence: Some(1),
            payload: data,
            trace_header: None,
            trace_context: None,
        },
        &env.outbox_config(),
        Utc::now(),
    )
    .expect("valid outbox event")
}

/// The envelope of `item`, as the relays publish it.
fn event_of(item: &OutboxItem) -> OutboundEvent {
    OutboundEvent::from_item(item, &outbox_shared::envelope::Encoding::envelope())
        .expect("envelope")
}

/// An `OrderCreated` outbox event for `order_id`, one unit of `sku`.
fn order_created(env: &TestEnv, order_id: &str, sku: &str) -> OutboundEvent {
    event_of(&order_created_item(env, order_id, sku, 1))
}

/// A payload bucket as the template makes it, on the emulator's S3, and the claim check's store
/// in it.
async fn payload_bucket(env: &TestEnv) -> PayloadStore {
    PayloadStore::new(env.s3.clone(), env.create_payload_bucket().await)
}

/// `item` as the writer writes an event whose payload is too large for an item: the payload
/// stored in `payloads` first, the item holding its reference instead.
async fn claim_checked(payloads: &PayloadStore, item: &OutboxItem) -> OutboxItem {
    let (reference, stored) = payloads
        .put(&item.event_id, item.payload.as_bytes())
        .await
        .expect("store the payload");
    assert_eq!(stored, Stored::Written);
    let mut claim_checked = item.clone();
    claim_checked.payload = String::new();
    claim_checked.payload_ref = Some(reference);
    claim_checked
}

/// Publishes `events` through the relay's publisher to the classic bus and returns them as the
/// sink queue received them, in the order given (told apart by whether they carry a `dataref`
/// when they share an event id).
async fn deliver(env: &TestEnv, events: &[OutboundEvent]) -> Vec<EventBridgeEvent<Value>> {
    let publisher = TargetPublisher::on(
        ClassicBus::new(env.eventbridge.config().to_builder()),
        env.publisher_config(),
    )
    .expect("valid publisher config");
    let outcomes = publisher
        .publish(events, relay_runtime::Deadline::NONE)
        .await;
    assert!(
        outcomes.iter().all(PublishOutcome::is_published),
        "{outcomes:?}"
    );
    let delivered = env
        .wait_for_sink(events.len() as u64, Duration::from_secs(20))
        .await;
    assert_eq!(delivered.len(), events.len());
    events
        .iter()
        .map(|sent| {
            let sent: Value = serde_json::from_str(&sent.detail).unwrap();
            let received = delivered
                .iter()
                .find(|d| {
                    d.event_id() == sent["metadata"]["eventId"]
                        && d.event["detail"].get("dataref") == sent.get("dataref")
                })
                .expect("each event delivered");
            serde_json::from_value(received.event.clone()).expect("an EventBridge event")
        })
        .collect()
}

#[tokio::test]
async fn an_order_created_with_its_payload_in_s3_is_handled_as_the_same_event_inline() {
    // Given an OrderCreated whose payload the writer stored in the payload bucket (its outbox
    // item holding the reference), delivered through the bus as the relay publishes it, and the
    // same event with its payload inline
    let env = TestEnv::new().await;
    let bucket = payload_bucket(&env).await;
    let item = order_created_item(&env, "ord-large-1", "SKU-large", 2);
    let stored = claim_checked(&bucket, &item).await;
    let [inline, referenced] = deliver(&env, &[event_of(&item), event_of(&stored)])
        .await
        .try_into()
        .unwrap();
    let reference = stored.payload_ref.as_ref().unwrap();
    assert_eq!(referenced.detail["dataref"], reference.uri.as_str());
    assert!(referenced.detail.get("data").is_none(), "{referenced:?}");

    // And two consumers, each with 5 units of the SKU
    let stocked = BTreeMap::from([("SKU-large", 5)]);
    let (store, inventory) = consumer(&env, &stocked).await;
    let (other_store, other_inventory) = consumer(&env, &stocked).await;

    // When one handles the event with its payload in S3, and the other the event inline
    let from_s3 = handle_event(
        &referenced,
        None,
        &resolver(&env, bucket.bucket()),
        &store,
        inventory.as_ref(),
    )
    .await
    .unwrap();
    let from_event = handle_event(
        &inline,
        None,
        &resolver(&env, bucket.bucket()),
        &other_store,
        other_inventory.as_ref(),
    )
    .await
    .unwrap();

    // Then both reserve the order's 2 units with the same answer
    assert!(
        matches!(&from_s3, Handled::Processed { replayed: false, reservation: Reservation::Reserved { lines, .. } } if lines[0].quantity == 2),
        "{from_s3:?}"
    );
    assert_eq!(from_s3, from_event);
    assert_eq!(available(&inventory, "SKU-large").await, 3);
    assert_eq!(available(&other_inventory, "SKU-large").await, 3);

    // And the inline delivery of the same event to the first consumer is a duplicate answered
    // from its store (the same key and payload hash), not a key reused with another payload
    let duplicate = handle_event(
        &inline,
        None,
        &resolver(&env, bucket.bucket()),
        &store,
        inventory.as_ref(),
    )
    .await
    .unwrap();
    let Handled::Processed { reservation, .. } = from_s3 else {
        unreachable!()
    };
    assert_eq!(
        duplicate,
        Handled::Processed {
            replayed: true,
            reservation
        }
    );
    assert_eq!(available(&inventory, "SKU-large").await, 3);
}

#[tokio::test]
async fn an_order_created_whose_payload_is_gone_is_refused_clearly_and_not_marked_processed() {
    // Given an OrderCreated delivered with its payload in S3, and its object then gone (past
    // the payload bucket's lifecycle)
    let env = TestEnv::new().await;
    let bucket = payload_bucket(&env).await;
    let item = order_created_item(&env, "ord-expired-1", "SKU-expired", 1);
    let stored = claim_checked(&bucket, &item).await;
    let [referenced] = deliver(&env, &[event_of(&stored)])
        .await
        .try_into()
        .unwrap();
    let reference = stored.payload_ref.clone().unwrap();
    let (bucket_name, key) = reference.location().unwrap();
    env.s3
        .delete_object()
        .bucket(bucket_name)
        .key(key)
        .send()
        .await
        .expect("expire the object");
    let (store, inventory) = consumer(&env, &BTreeMap::from([("SKU-expired", 5)])).await;

    // When it is handled
    let err = handle_event(
        &referenced,
        None,
        &resolver(&env, bucket.bucket()),
        &store,
        inventory.as_ref(),
    )
    .await
    .unwrap_err();

    // Then it is refused as final, saying the payload is gone from where and why
    assert!(matches!(err, HandlerError::Permanent(_)), "{err:?}");
    assert!(!err.is_retryable());
    let message = err.to_string();
    for said in [
        item.event_id.as_str(),
        reference.uri.as_str(),
        "is gone",
        "lifecycle",
    ] {
        assert!(message.contains(said), "{said:?} not in {message}");
    }
    assert_eq!(available(&inventory, "SKU-expired").await, 5);

    // And it was not marked processed: once the payload is there again, the event runs
    bucket
        .put(&item.event_id, item.payload.as_bytes())
        .await
        .expect("restore the payload");
    let handled = handle_event(
        &referenced,
        None,
        &resolver(&env, bucket.bucket()),
        &store,
        inventory.as_ref(),
    )
    .await
    .unwrap();
    assert!(
        matches!(
            handled,
            Handled::Processed {
                replayed: false,
                ..
            }
        ),
        "{handled:?}"
    );
    assert_eq!(available(&inventory, "SKU-expired").await, 4);
}

/// `count` messages from a FIFO queue, as Lambda's SQS event source hands them to the function
/// (id, receipt handle, body, the message group), in the order received; left on the queue.
async fn fifo_batch(
    env: &TestEnv,
    queue_url: &str,
    count: usize,
) -> Vec<order_consumer::SqsMessage> {
    use aws_sdk_sqs::types::MessageSystemAttributeName;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let mut batch = Vec::new();
    while batch.len() < count && std::time::Instant::now() < deadline {
        let received = env
            .sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(300)
            .message_system_attribute_names(MessageSystemAttributeName::MessageGroupId)
            .send()
            .await
            .unwrap();
        for message in received.messages() {
            let mut record = order_consumer::SqsMessage::default();
            record.message_id = message.message_id().map(str::to_owned);
            record.receipt_handle = message.receipt_handle().map(str::to_owned);
            record.body = message.body().map(str::to_owned);
            if let Some(attributes) = message.attributes() {
                for (name, value) in attributes {
                    record
                        .attributes
                        .insert(name.as_str().to_owned(), value.clone());
                }
            }
            batch.push(record);
        }
        if received.messages().is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    batch
}

#[tokio::test]
async fn on_the_fifo_queue_the_consumer_stops_at_a_failure_and_leaves_the_rest_for_their_turn() {
    // Given a Custom Event Bus with the template's FIFO subscriber, and three orders' OrderCreated
    // events published to it through the relay's publisher
    use relay_runtime::{PublisherConfig, TargetKind};
    let env = TestEnv::new().await;
    let bus_arn = outbox_infra::create_custom_event_bus(&env.eventbridgev2, &unique_name("bus"))
        .await
        .unwrap();
    let subscriber = outbox_infra::create_fifo_subscriber(
        &env.eventbridgev2,
        &env.sqs,
        &bus_arn,
        &unique_name("orders"),
    )
    .await
    .unwrap();
    let publisher = env.publisher(PublisherConfig::of_kind(
        TargetKind::Custom,
        &bus_arn,
        outbox_tests::TEST_SOURCE,
    ));
    let events =
        ["ord-a", "ord-b", "ord-c"].map(|id| order_created(&env, id, &format!("SKU-{id}")));
    let outcomes = publisher
        .publish(&events, relay_runtime::Deadline::NONE)
        .await;
    assert!(
        outcomes.iter().all(PublishOutcome::is_published),
        "{outcomes:?}"
    );
    let batch = fifo_batch(&env, &subscriber.queue_url, 3).await;
    assert_eq!(batch.len(), 3);
    let order_of = |m: &order_consumer::SqsMessage| -> String {
        let event: Value = serde_json::from_str(m.body.as_deref().unwrap()).unwrap();
        event["detail"]["data"]["orderId"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let orders: Vec<String> = batch.iter().map(order_of).collect();

    // And a consumer whose inventory fails once for the batch's second order
    let stocked: BTreeMap<&str, u64> =
        [("SKU-ord-a", 5), ("SKU-ord-b", 5), ("SKU-ord-c", 5)].into();
    let (store, inventory) = consumer(&env, &stocked).await;
    let flaky = FailsOnceFor {
        inner: Arc::clone(&inventory),
        order_id: orders[1].clone(),
        failed: false.into(),
    };

    // When the batch is handled
    let processor = order_consumer::processor(
        resolver(&env, outbox_tests::NO_PAYLOAD_BUCKET),
        store.clone(),
    );
    let invocation = outbox_consumer::Invocation::default();
    let mut event = order_consumer::SqsEvent::default();
    event.records.clone_from(&batch);
    let first = order_consumer::handle_sqs_batch(&event, &invocation, &processor, &flaky).await;

    // Then the first message is handled, and the failed one and the one after it are reported
    // (left on the queue for their turn), the third not run ahead of the second
    let id = |m: &order_consumer::SqsMessage| m.message_id.clone().unwrap();
    let done: Vec<&str> = first
        .items
        .iter()
        .filter(|i| i.is_done())
        .map(|i| i.id.as_str())
        .collect();
    assert_eq!(done, [id(&batch[0])], "{first:?}");
    let response = first.sqs_response();
    let reported: Vec<&str> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect();
    assert_eq!(reported, [id(&batch[1]), id(&batch[2])]);
    let sku = |order: &str| format!("SKU-{order}");
    assert_eq!(available(&inventory, &sku(&orders[0])).await, 4);
    assert_eq!(available(&inventory, &sku(&orders[1])).await, 5);
    assert_eq!(available(&inventory, &sku(&orders[2])).await, 5);

    // When the queue hands out the reported messages again, and the first once more (a
    // duplicate delivery)
    let mut again = order_consumer::SqsEvent::default();
    again.records = [&batch[1], &batch[2], &batch[0]]
        .into_iter()
        .cloned()
        .collect();
    let second = order_consumer::handle_sqs_batch(&again, &invocation, &processor, &flaky).await;

    // Then both are handled in order, the duplicate answered from the store: each order's
    // stock reserved once
    assert!(
        second.sqs_response().batch_item_failures.is_empty(),
        "{second:?}"
    );
    assert!(second.items.iter().all(|i| i.is_done()), "{second:?}");
    let replayed: Vec<bool> = second
        .items
        .iter()
        .map(|i| {
            matches!(
                i.status,
                outbox_consumer::ItemStatus::Done(outbox_consumer::Processed::Replayed(Some(_)))
            )
        })
        .collect();
    assert_eq!(replayed, [false, false, true]);
    for order in &orders {
        assert_eq!(available(&inventory, &sku(order)).await, 4, "{order}");
    }
}
