//! The writer's create path against the emulator: the documented items, atomic cancellation,
//! idempotent retries (also concurrent), limits rejected before writing, the item schema
//! shared with other clients, and the claim check (payloads too large for an item stored in S3
//! first, on moto).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{AttributeValue, Put};
use chrono::Utc;
use outbox_shared::limits::{PUT_EVENTS_ABSOLUTE_MAX_BYTES, TRANSACT_MAX_ACTIONS};
use outbox_shared::schema::{self, attr, entity};
use outbox_shared::{ItemError, NewOutboxEvent, OutboxItem, OutboxStatus, shard_for};
use outbox_tests::fault_proxy::{FaultProxy, FaultRates};
use outbox_tests::{TestEnv, emulator_endpoints, minimal_outbox_item};
use outbox_writer::{
    ConditionFailure, InputError, LimitError, NewOrder, OrderCreated, OrderLine, OrderStatus,
    OutboxTransaction, WriteError,
};

fn lines() -> Vec<OrderLine> {
    vec![
        OrderLine::new("sku-1", 2, 1_250),
        OrderLine::new("sku-2", 1, 500),
    ]
}

fn s(item: &HashMap<String, AttributeValue>, name: &str) -> String {
    item[name].as_s().expect("string attribute").clone()
}

fn n(item: &HashMap<String, AttributeValue>, name: &str) -> u64 {
    item[name]
        .as_n()
        .expect("number attribute")
        .parse()
        .unwrap()
}

async fn items_of_type(env: &TestEnv, entity_type: &str) -> Vec<HashMap<String, AttributeValue>> {
    env.scan_items()
        .await
        .into_iter()
        .filter(|i| i[attr::ENTITY_TYPE].as_s().is_ok_and(|t| t == entity_type))
        .collect()
}

#[tokio::test]
async fn a_created_order_and_its_event_are_in_the_table_as_documented() {
    // Given a writer on a fresh table
    let env = TestEnv::new().await;
    let writer = env.writer();

    // When an order is created
    let before = Utc::now().timestamp();
    let created = writer
        .create_order_with_outbox("u-1", NewOrder::new(lines()))
        .await
        .unwrap();

    // Then the order item carries the documented attributes
    assert!(!created.replayed);
    assert_eq!(
        uuid::Uuid::parse_str(&created.order_id)
            .unwrap()
            .get_version_num(),
        7
    );
    let orders = items_of_type(&env, entity::ORDER).await;
    assert_eq!(orders.len(), 1);
    let order = &orders[0];
    assert_eq!(s(order, attr::PK), "USER#u-1");
    assert_eq!(s(order, attr::SK), format!("ORDER#{}", created.order_id));
    assert_eq!(s(order, attr::ORDER_ID), created.order_id);
    assert_eq!(s(order, attr::USER_ID), "u-1");
    assert_eq!(n(order, attr::AMOUNT), 3_000);
    assert_eq!(s(order, attr::STATUS), "CREATED");
    assert_eq!(n(order, attr::VERSION), 1);
    let stored_lines: Vec<OrderLine> =
        serde_dynamo::from_attribute_value(order[attr::ITEMS].clone()).unwrap();
    assert_eq!(stored_lines, lines());

    // And the outbox item is pending on the aggregate's shard with a TTL about now + retention
    let events = env.outbox_items().await;
    assert_eq!(events.len(), 1);
    let event = &events[0];
    let shard = shard_for(&created.order_id, env.outbox_config().shard_count);
    assert_eq!(event.event_id, created.event_id);
    assert_eq!(event.pk, "USER#u-1");
    assert_eq!(event.sk, format!("OUTBOX#{}", created.event_id));
    assert_eq!(event.event_type, "OrderCreated");
    assert_eq!(event.status, OutboxStatus::Pending);
    assert_eq!(event.aggregate_type.as_deref(), Some("Order"));
    assert_eq!(
        event.aggregate_id.as_deref(),
        Some(created.order_id.as_str())
    );
    assert_eq!(event.sequence, Some(1));
    assert_eq!(event.created_at, s(order, attr::CREATED_AT));
    assert_eq!(event.gsi1pk, Some(format!("OUTBOX#PENDING#{shard}")));
    assert_eq!(
        event.gsi1sk,
        Some(format!("EVENT#{}#{}", event.created_at, event.event_id))
    );
    let retention = i64::try_from(env.outbox_config().ttl_retention.as_secs()).unwrap();
    let ttl = event.ttl.expect("ttl is set");
    assert!(
        (before + retention..=Utc::now().timestamp() + retention).contains(&ttl),
        "ttl {ttl}"
    );
    let payload: OrderCreated = serde_json::from_str(&event.payload).unwrap();
    assert_eq!(payload.order_id, created.order_id);
    assert_eq!(payload.user_id, "u-1");
    assert_eq!(payload.items, lines());
    assert_eq!(payload.amount_cents, 3_000);
    assert_eq!(payload.status, OrderStatus::Created);
    assert_eq!(payload.version, 1);
    assert_eq!(payload.created_at, event.created_at);

    // And a Query of GSI1 on that shard finds the event
    let found = env
        .dynamodb
        .query()
        .table_name(&env.table_name)
        .index_name(schema::DEFAULT_INDEX_NAME)
        .key_condition_expression("#pk = :shard")
        .expression_attribute_names("#pk", attr::GSI1PK)
        .expression_attribute_values(":shard", AttributeValue::S(schema::pending_shard_pk(shard)))
        .send()
        .await
        .unwrap();
    let ids: Vec<String> = found.items().iter().map(|i| s(i, attr::EVENT_ID)).collect();
    assert_eq!(ids, vec![created.event_id]);
}

#[tokio::test]
async fn creating_an_order_whose_key_exists_writes_nothing() {
    // Given an order o-1 already created
    let env = TestEnv::new().await;
    let writer = env.writer();
    let first = writer
        .create_order_with_outbox("u-1", NewOrder::new(lines()).with_order_id("o-1"))
        .await
        .unwrap();
    let before = env.scan_items().await;

    // When the same order id is created again, with other content
    let err = writer
        .create_order_with_outbox(
            "u-1",
            NewOrder::new(vec![OrderLine::new("other", 1, 1)]).with_order_id("o-1"),
        )
        .await
        .unwrap_err();

    // Then the whole transaction is cancelled: no second order, no second event
    assert_eq!(
        err,
        WriteError::AlreadyExists {
            key: outbox_shared::ItemKey {
                pk: "USER#u-1".into(),
                sk: "ORDER#o-1".into()
            }
        }
    );
    assert!(!err.is_retryable());
    assert_eq!(env.scan_items().await, before);
    let events = env.outbox_items().await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_id, first.event_id);
}

#[tokio::test]
async fn the_same_idempotency_key_twice_gives_one_order_and_one_event() {
    // Given a create with an idempotency key
    let env = TestEnv::new().await;
    let writer = env.writer();
    let order = NewOrder::new(lines()).with_idempotency_key("checkout-42");
    let first = writer
        .create_order_with_outbox("u-1", order.clone())
        .await
        .unwrap();

    // When the caller retries it
    let second = writer
        .create_order_with_outbox("u-1", order.clone())
        .await
        .unwrap();

    // Then it learns it was a replay of the same order and event, and nothing new was written
    assert!(!first.replayed);
    assert!(second.replayed);
    assert_eq!(second.order_id, first.order_id);
    assert_eq!(second.event_id, first.event_id);
    assert_eq!(items_of_type(&env, entity::ORDER).await.len(), 1);
    let events = env.outbox_items().await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_id, first.event_id);

    // And the key scopes per user: another user's identical create is a new order
    let other = writer.create_order_with_outbox("u-2", order).await.unwrap();
    assert!(!other.replayed);
    assert_ne!(other.order_id, first.order_id);
}

#[tokio::test]
async fn a_create_whose_reply_was_lost_is_replayed_by_its_client_request_token() {
    // Given a writer whose first TransactWriteItems takes effect but loses its reply
    let env = TestEnv::new().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 1).await;
    proxy.lose_next_replies("DynamoDB_20120810.TransactWriteItems", 1);
    let writer = env.writer_through(&proxy);

    // When an order is created with an idempotency key (so with a ClientRequestToken)
    let created = writer
        .create_order_with_outbox(
            "u-1",
            NewOrder::new(lines()).with_idempotency_key("lost-reply"),
        )
        .await
        .unwrap();

    // Then the retry with the same token is DynamoDB's idempotent replay of the committed
    // transaction (a fresh create, not a replay found through the idempotency record), and one
    // order and one event exist
    assert_eq!(proxy.counts().lost_replies, 1);
    assert!(!created.replayed, "{created:?}");
    assert_eq!(items_of_type(&env, entity::ORDER).await.len(), 1);
    let events = env.outbox_items().await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_id, created.event_id);
    assert_eq!(items_of_type(&env, entity::IDEMPOTENCY).await.len(), 1);
}

#[tokio::test]
async fn eight_concurrent_creates_with_one_key_give_one_order_and_one_event() {
    // Given 8 callers racing with the same idempotency key
    let env = TestEnv::new().await;
    let writer = env.writer();
    let order = NewOrder::new(lines()).with_idempotency_key("double-click");

    // When they all create at once
    let results = futures::future::join_all((0..8).map(|_| {
        let writer = writer.clone();
        let order = order.clone();
        tokio::spawn(async move { writer.create_order_with_outbox("u-1", order).await })
    }))
    .await;

    // Then all succeed with the same order and event, exactly one of them fresh
    let created: Vec<_> = results.into_iter().map(|r| r.unwrap().unwrap()).collect();
    assert_eq!(
        created.iter().filter(|c| !c.replayed).count(),
        1,
        "{created:?}"
    );
    assert!(created.iter().all(|c| c.order_id == created[0].order_id));
    assert!(created.iter().all(|c| c.event_id == created[0].event_id));
    assert_eq!(items_of_type(&env, entity::ORDER).await.len(), 1);
    assert_eq!(env.outbox_items().await.len(), 1);
    assert_eq!(items_of_type(&env, entity::IDEMPOTENCY).await.len(), 1);
}

#[tokio::test]
async fn a_reused_idempotency_key_with_other_content_is_rejected() {
    // Given a create with key k
    let env = TestEnv::new().await;
    let writer = env.writer();
    writer
        .create_order_with_outbox("u-1", NewOrder::new(lines()).with_idempotency_key("k"))
        .await
        .unwrap();
    let before = env.scan_items().await;

    // When k is used for a different order
    let err = writer
        .create_order_with_outbox(
            "u-1",
            NewOrder::new(vec![OrderLine::new("sku-9", 9, 9)]).with_idempotency_key("k"),
        )
        .await
        .unwrap_err();

    // Then the caller gets the typed error and nothing changed
    assert_eq!(
        err,
        WriteError::IdempotencyKeyReused {
            idempotency_key: "k".into()
        }
    );
    assert_eq!(env.scan_items().await, before);
}

#[tokio::test]
async fn over_limit_and_malformed_inputs_are_rejected_and_nothing_is_written() {
    // Given a writer on a fresh table, one that allows the largest EventBridge entries, and an
    // order whose items are about 300 KB (an item fits, a 256 KiB entry does not)
    let env = TestEnv::new().await;
    let writer = env.writer();
    let big_writer = env.writer_with(|c| c.max_event_entry_bytes = PUT_EVENTS_ABSOLUTE_MAX_BYTES);
    let bulky = |count: usize| {
        NewOrder::new(
            (0..count)
                .map(|i| OrderLine::new(format!("{i:0>1000}"), 1, 1))
                .collect(),
        )
    };
    let fat_put = |i: usize| {
        Put::builder()
            .table_name(&env.table_name)
            .item(attr::PK, AttributeValue::S("USER#u-1".into()))
            .item(attr::SK, AttributeValue::S(format!("BLOB#{i}")))
            .item("Blob", AttributeValue::S("x".repeat(390 * 1024)))
            .build()
            .unwrap()
    };
    let event = |n: usize| NewOutboxEvent {
        partition_key: schema::user_pk("u-1"),
        event_type: "Ping".into(),
        aggregate_type: "Test".into(),
        aggregate_id: format!("a-{n}"),
        sequence: None,
        payload: serde_json::json!({"n": n}),
        trace_header: None,
        trace_context: None,
    };

    // When each over-limit or malformed input is written
    let create = |user: &'static str, order: NewOrder| {
        let writer = writer.clone();
        async move {
            writer
                .create_order_with_outbox(user, order)
                .await
                .unwrap_err()
        }
    };
    let event_too_large = create("u-1", bulky(300)).await;
    let item_too_large = big_writer
        .create_order_with_outbox("u-1", bulky(450))
        .await
        .unwrap_err();
    let too_many_actions = writer
        .commit((0..TRANSACT_MAX_ACTIONS).fold(
            OutboxTransaction::new().put(fat_put(0), ConditionFailure::AlreadyExists),
            |tx, i| tx.event(event(i)),
        ))
        .await
        .unwrap_err();
    let transaction_too_large = writer
        .commit(
            (0..11).fold(OutboxTransaction::new().event(event(0)), |tx, i| {
                tx.put(fat_put(i), ConditionFailure::AlreadyExists)
            }),
        )
        .await
        .unwrap_err();
    let no_events = writer
        .commit(OutboxTransaction::new().put(fat_put(0), ConditionFailure::AlreadyExists))
        .await
        .unwrap_err();
    let empty_user = create("", NewOrder::new(lines())).await;
    let bad_order_id = create("u-1", NewOrder::new(lines()).with_order_id("o#1")).await;
    let bad_key = create("u-1", NewOrder::new(lines()).with_idempotency_key("k\n")).await;
    let no_items = create("u-1", NewOrder::new(vec![])).await;
    let zero_quantity = create("u-1", NewOrder::new(vec![OrderLine::new("a", 0, 1)])).await;
    let overflow = create(
        "u-1",
        NewOrder::new(vec![OrderLine::new("a", 3, u64::MAX / 2)]),
    )
    .await;

    // Then each returns its typed error
    assert!(
        matches!(&event_too_large, WriteError::LimitExceeded(LimitError::EventTooLarge { bytes, max: 262_144, .. }) if *bytes > 300_000),
        "{event_too_large}"
    );
    assert!(
        matches!(&item_too_large, WriteError::LimitExceeded(LimitError::ItemTooLarge { key, bytes, max: 409_600, payload_bucket_would_fit: false }) if key.sk.starts_with("ORDER#") && *bytes > 450_000),
        "{item_too_large}"
    );
    assert_eq!(
        too_many_actions,
        WriteError::LimitExceeded(LimitError::TooManyActions {
            actions: 101,
            max: 100
        })
    );
    assert!(
        matches!(&transaction_too_large, WriteError::LimitExceeded(LimitError::TransactionTooLarge { bytes, max: 4_194_304 }) if *bytes > 4_194_304),
        "{transaction_too_large}"
    );
    assert_eq!(no_events, WriteError::InvalidInput(InputError::NoEvents));
    assert_eq!(
        empty_user,
        WriteError::InvalidInput(InputError::Id(ItemError::Empty { field: "user id" }))
    );
    assert!(matches!(
        bad_order_id,
        WriteError::InvalidInput(InputError::Id(ItemError::KeySeparator {
            field: "order id",
            ..
        }))
    ));
    assert!(matches!(
        bad_key,
        WriteError::InvalidInput(InputError::Id(ItemError::ControlCharacter {
            field: "idempotency key",
            ..
        }))
    ));
    assert_eq!(no_items, WriteError::InvalidInput(InputError::NoItems));
    assert!(matches!(
        zero_quantity,
        WriteError::InvalidInput(InputError::ZeroQuantity { index: 0, .. })
    ));
    assert_eq!(
        overflow,
        WriteError::InvalidInput(InputError::AmountOverflow)
    );

    // And the table is unchanged: still empty
    assert_eq!(env.scan_items().await, vec![]);
}

#[tokio::test]
async fn a_general_transaction_commits_business_items_and_several_events_atomically() {
    // Given a business item that already exists
    let env = TestEnv::new().await;
    let writer = env.writer();
    let put = |sk: &str| {
        Put::builder()
            .table_name(&env.table_name)
            .item(attr::PK, AttributeValue::S("TENANT#t-1".into()))
            .item(attr::SK, AttributeValue::S(sk.into()))
            .condition_expression("attribute_not_exists(#pk)")
            .expression_attribute_names("#pk", attr::PK)
            .build()
            .unwrap()
    };
    let event = |event_type: &str| NewOutboxEvent {
        partition_key: "TENANT#t-1".into(),
        event_type: event_type.into(),
        aggregate_type: "Tenant".into(),
        aggregate_id: "t-1".into(),
        sequence: None,
        payload: serde_json::json!({"tenant": "t-1"}),
        trace_header: Some("Root=1-5759e988-bd862e3fe1be46a994272793".into()),
        trace_context: None,
    };

    // When a transaction with two new items and two events commits
    let committed = writer
        .commit(
            OutboxTransaction::new()
                .put(put("PROFILE"), ConditionFailure::AlreadyExists)
                .put(put("SETTINGS"), ConditionFailure::AlreadyExists)
                .event(event("TenantCreated"))
                .event(event("TenantActivated")),
        )
        .await
        .unwrap();

    // Then both items and both events are there
    assert_eq!(committed.events.len(), 2);
    let mut stored: Vec<OutboxItem> = env.outbox_items().await;
    stored.sort_by(|a, b| a.event_id.cmp(&b.event_id));
    assert_eq!(stored, committed.events);
    assert!(stored.iter().all(|e| e.trace_header.is_some()));
    assert_eq!(env.scan_items().await.len(), 4);

    // When a second transaction collides on one item
    let err = writer
        .commit(
            OutboxTransaction::new()
                .put(put("BILLING"), ConditionFailure::AlreadyExists)
                .put(put("SETTINGS"), ConditionFailure::AlreadyExists)
                .event(event("TenantBilled")),
        )
        .await
        .unwrap_err();

    // Then the error names that item and nothing of the second transaction landed
    assert!(
        matches!(&err, WriteError::AlreadyExists { key } if key.sk == "SETTINGS"),
        "{err}"
    );
    assert_eq!(env.scan_items().await.len(), 4);
    assert_eq!(env.outbox_items().await.len(), 2);
}

#[tokio::test]
async fn items_of_other_clients_and_of_the_writer_read_through_the_shared_struct() {
    // Given an outbox item written by another client with only the required attributes, as
    // boto3 would put it
    let env = TestEnv::new().await;
    env.put_raw_item(minimal_outbox_item(
        "py",
        "e-py",
        "OrderCreated",
        r#"{"orderId": "o-py"}"#,
        "2026-11-22T10:00:00Z",
        3,
    ))
    .await;

    // And an order created by the writer
    let created = env
        .writer()
        .create_order_with_outbox("u-1", NewOrder::new(lines()))
        .await
        .unwrap();

    // When both are read back from the table
    let mut items = env.outbox_items().await;
    items.sort_by(|a, b| a.pk.cmp(&b.pk));

    // Then both decode through the shared struct
    assert_eq!(items.len(), 2);
    let (theirs, ours) = (&items[0], &items[1]);
    assert_eq!(theirs.event_id, "e-py");
    assert_eq!(theirs.status, OutboxStatus::Pending);
    assert_eq!(theirs.aggregate_id, None);
    assert_eq!(theirs.ttl, None);
    assert_eq!(ours.event_id, created.event_id);
    assert_eq!(ours.pk, "USER#u-1");
    assert!(ours.is_outbox_event());
    // And both are publishable envelopes
    for item in [ours, theirs] {
        let entry = outbox_shared::OutboundEvent::from_item(
            item,
            &outbox_shared::envelope::Encoding::envelope(),
        );
        assert!(entry.is_ok(), "{entry:?}");
    }
}

/// The SHA-256 of `bytes` in base64, as S3's `ChecksumSHA256` (computed here, apart from the
/// writer).
fn sha256_base64(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    aws_smithy_types::base64::encode(sha2::Sha256::digest(bytes))
}

/// The item's `PayloadRef` map: its `Uri`, `Size` and `Sha256`.
fn payload_ref(item: &HashMap<String, AttributeValue>) -> (String, u64, String) {
    let reference = item[attr::PAYLOAD_REF].as_m().expect("PayloadRef is a map");
    (
        s(reference, "Uri"),
        n(reference, "Size"),
        s(reference, "Sha256"),
    )
}

/// A plain `Put` of a small order item, only if it is new.
fn order_put(env: &TestEnv, user: &str, order: &str) -> Put {
    Put::builder()
        .table_name(&env.table_name)
        .item(attr::PK, AttributeValue::S(schema::user_pk(user)))
        .item(attr::SK, AttributeValue::S(schema::order_sk(order)))
        .item(attr::ENTITY_TYPE, AttributeValue::S(entity::ORDER.into()))
        .condition_expression("attribute_not_exists(PK)")
        .build()
        .unwrap()
}

/// An `OrderImported` event of `order` whose payload is `lines` order lines (about 48 bytes of
/// JSON each).
fn imported(user: &str, order: &str, lines: usize) -> NewOutboxEvent {
    NewOutboxEvent {
        partition_key: schema::user_pk(user),
        event_type: "OrderImported".into(),
        aggregate_type: "Order".into(),
        aggregate_id: order.into(),
        sequence: Some(1),
        payload: serde_json::json!({
            "orderId": order,
            "items": (0..lines)
                .map(|i| OrderLine::new(format!("SKU-{i:07}"), 1, 1_250))
                .collect::<Vec<_>>(),
        }),
        trace_header: None,
        trace_context: None,
    }
}

#[tokio::test]
async fn a_5_mib_payload_is_stored_in_s3_and_its_outbox_item_refers_to_it() {
    // Given a writer with a payload bucket, and an order whose event's payload is 5 MiB
    let env = TestEnv::new().await;
    let bucket = env.create_payload_bucket().await;
    let writer = env.writer_with(|c| c.payload_bucket = Some(bucket.clone()));
    let event = imported("u-1", "o-1", 100_000);
    let payload = serde_json::to_string(&event.payload).unwrap();
    assert!(payload.len() >= 5 * 1024 * 1024, "{}", payload.len());

    // When the order and its event are committed
    let committed = writer
        .commit(
            OutboxTransaction::new()
                .put(
                    order_put(&env, "u-1", "o-1"),
                    ConditionFailure::AlreadyExists,
                )
                .event(event),
        )
        .await
        .unwrap();

    // Then the payload is the one object in the bucket, under payloads/{event id}, byte for byte
    let event_id = committed.event_ids()[0].to_owned();
    let key = format!("payloads/{event_id}");
    assert_eq!(env.object_keys(&bucket).await, std::slice::from_ref(&key));
    assert!(env.object(&bucket, &key).await == payload.as_bytes());

    // And the order is written, and the outbox item has a PayloadRef naming the object, the
    // payload's size and SHA-256, and no Payload
    assert_eq!(items_of_type(&env, entity::ORDER).await.len(), 1);
    let events = items_of_type(&env, entity::OUTBOX_EVENT).await;
    let [item] = events.as_slice() else {
        panic!("one outbox item: {events:?}");
    };
    assert_eq!(s(item, attr::EVENT_ID), event_id);
    assert!(!item.contains_key(attr::PAYLOAD), "{item:?}");
    assert_eq!(
        payload_ref(item),
        (
            format!("s3://{bucket}/{key}"),
            payload.len() as u64,
            sha256_base64(payload.as_bytes())
        )
    );
    // And it is pending like any other event
    assert_eq!(s(item, attr::STATUS), "PENDING");
    assert!(item.contains_key(attr::GSI1PK));
}

#[tokio::test]
async fn a_create_that_fails_after_storing_its_payload_leaves_no_outbox_item() {
    // Given a writer with a payload bucket, and an order o-1 already created (a small one)
    let env = TestEnv::new().await;
    let bucket = env.create_payload_bucket().await;
    let writer = env.writer_with(|c| c.payload_bucket = Some(bucket.clone()));
    let first = writer
        .create_order_with_outbox("u-1", NewOrder::new(lines()).with_order_id("o-1"))
        .await
        .unwrap();
    assert!(
        env.object_keys(&bucket).await.is_empty(),
        "a small event stores nothing"
    );
    // And an order of 9,000 lines: its item fits in 400 KB, its OrderCreated payload (the
    // lines with their field names in JSON, about 450 KB) does not
    let large = || {
        NewOrder::new(
            (0..9_000)
                .map(|i| OrderLine::new(format!("{i:05}"), 1, 100))
                .collect(),
        )
    };

    // When the large order is created as o-1 again
    let err = writer
        .create_order_with_outbox("u-1", large().with_order_id("o-1"))
        .await
        .unwrap_err();

    // Then the create fails as any create of an existing order does
    assert_eq!(
        err,
        WriteError::AlreadyExists {
            key: outbox_shared::ItemKey {
                pk: "USER#u-1".into(),
                sk: "ORDER#o-1".into()
            }
        }
    );
    // And the table holds only the first order's event; the payload stored before the
    // transaction is an orphan no item refers to (the bucket's lifecycle rule expires it)
    let events = env.outbox_items().await;
    assert_eq!(
        events
            .iter()
            .map(|e| e.event_id.as_str())
            .collect::<Vec<_>>(),
        [first.event_id.as_str()]
    );
    assert!(events[0].payload_ref.is_none());
    let orphans = env.object_keys(&bucket).await;
    assert_eq!(orphans.len(), 1, "{orphans:?}");
    assert!(orphans[0].starts_with("payloads/"), "{orphans:?}");

    // And the same large order as a new order o-2 is created, its event referring to its
    // payload in S3
    let created = writer
        .create_order_with_outbox("u-1", large().with_order_id("o-2"))
        .await
        .unwrap();
    let events = env.outbox_items().await;
    let event = events
        .iter()
        .find(|e| e.event_id == created.event_id)
        .expect("o-2's event");
    let reference = event.payload_ref.as_ref().expect("a PayloadRef");
    let key = format!("payloads/{}", created.event_id);
    assert_eq!(reference.uri, format!("s3://{bucket}/{key}"));
    let stored = env.object(&bucket, &key).await;
    let payload: OrderCreated = serde_json::from_slice(&stored).unwrap();
    assert_eq!(payload.order_id, "o-2");
    assert_eq!(payload.items.len(), 9_000);
}

#[tokio::test]
async fn a_300_kb_payload_is_written_inline_with_a_payload_bucket() {
    // Given a writer with a payload bucket, and an event of about 300 KB: its item fits, its
    // 256 KiB EventBridge entry would not (a relay stores it when it publishes it)
    let env = TestEnv::new().await;
    let bucket = env.create_payload_bucket().await;
    let writer = env.writer_with(|c| c.payload_bucket = Some(bucket.clone()));
    let event = imported("u-1", "o-1", 5_300);
    let payload = serde_json::to_string(&event.payload).unwrap();
    assert!(
        (300_000..310_000).contains(&payload.len()),
        "{}",
        payload.len()
    );

    // When it is committed
    writer
        .commit(OutboxTransaction::new().event(event))
        .await
        .unwrap();

    // Then the item holds the payload, and S3 holds nothing
    let events = items_of_type(&env, entity::OUTBOX_EVENT).await;
    let [item] = events.as_slice() else {
        panic!("one outbox item: {events:?}");
    };
    assert_eq!(s(item, attr::PAYLOAD), payload);
    assert!(!item.contains_key(attr::PAYLOAD_REF), "{item:?}");
    assert!(env.object_keys(&bucket).await.is_empty());

    // And without a bucket the same event is refused, saying how to accept it
    let err = env
        .writer()
        .commit(OutboxTransaction::new().event(imported("u-1", "o-2", 5_300)))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            WriteError::LimitExceeded(LimitError::EventTooLarge { .. })
        ),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .contains("configure the payload bucket (WriterConfig::payload_bucket)"),
        "{err}"
    );
}
