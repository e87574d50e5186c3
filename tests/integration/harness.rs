//! The harness itself: a fresh environment routes bus events to the sink queue.

use outbox_tests::{TEST_SOURCE, TestEnv};

#[tokio::test]
async fn events_on_the_bus_reach_the_sink_queue() {
    // Given a fresh environment
    let env = TestEnv::new().await;

    // When an event is put on its bus
    let detail = r#"{"metadata":{"eventId":"e1","eventType":"Ping","occurredAt":"2026-11-22T10:00:00.000Z"},"data":{"n":1}}"#;
    let out = env
        .eventbridge
        .put_events()
        .entries(
            aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                .event_bus_name(&env.bus_name)
                .source(TEST_SOURCE)
                .detail_type("Ping")
                .detail(detail)
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(out.failed_entry_count(), 0);

    // Then exactly that event arrives on the sink queue
    let messages = env
        .wait_for_sink(1, std::time::Duration::from_secs(5))
        .await;
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].event_id(), "e1");
    assert_eq!(messages[0].detail_type(), "Ping");
    assert_eq!(messages[0].envelope.data, serde_json::json!({"n": 1}));
    assert!(env.outbox_items().await.is_empty());
}

#[tokio::test]
async fn each_environment_has_a_database_of_its_own() {
    // Given two environments
    let (one, other) = tokio::join!(TestEnv::new(), TestEnv::new());

    // Then each lists its own table and not the other's (DynamoDB Local's calls slow down with
    // every table a database holds, so a suite sharing one database slows test by test)
    let tables = |env: &TestEnv| {
        let client = env.dynamodb.clone();
        async move {
            let mut names = Vec::new();
            let mut start = None;
            loop {
                let page = client
                    .list_tables()
                    .set_exclusive_start_table_name(start)
                    .send()
                    .await
                    .expect("ListTables");
                names.extend(page.table_names().iter().cloned());
                start = page.last_evaluated_table_name().map(str::to_owned);
                if start.is_none() {
                    return names;
                }
            }
        }
    };
    assert_eq!(tables(&one).await, std::slice::from_ref(&one.table_name));
    assert_eq!(
        tables(&other).await,
        std::slice::from_ref(&other.table_name)
    );

    // And a relay process signs as its environment does
    let env: std::collections::HashMap<_, _> = one.relay_env().into_iter().collect();
    let theirs: std::collections::HashMap<_, _> = other.relay_env().into_iter().collect();
    assert_ne!(env["AWS_ACCESS_KEY_ID"], theirs["AWS_ACCESS_KEY_ID"]);
}

mod emulator_transactions {
    //! The emulator isolates transactions as DynamoDB does: the writer's atomicity tests rely on it.

    use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem, Update};
    use outbox_tests::TestEnv;

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.to_owned())
    }

    fn put(env: &TestEnv, pk: &str, condition: Option<&str>) -> TransactWriteItem {
        let put = Put::builder()
            .table_name(&env.table_name)
            .item("PK", s(pk))
            .item("SK", s("item"))
            .set_condition_expression(condition.map(str::to_owned))
            .build()
            .unwrap();
        TransactWriteItem::builder().put(put).build()
    }

    async fn stream_record_count(env: &TestEnv) -> usize {
        env.stream_records().await.len()
    }

    async fn get(
        env: &TestEnv,
        pk: &str,
    ) -> Option<std::collections::HashMap<String, AttributeValue>> {
        env.dynamodb
            .get_item()
            .table_name(&env.table_name)
            .key("PK", s(pk))
            .key("SK", s("item"))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
    }

    #[tokio::test]
    async fn a_cancelled_transaction_leaves_items_and_stream_untouched() {
        // Given an item A and the stream records so far
        let env = TestEnv::new().await;
        env.dynamodb
            .put_item()
            .table_name(&env.table_name)
            .item("PK", s("A"))
            .item("SK", s("item"))
            .item("v", s("old"))
            .send()
            .await
            .unwrap();
        let records_before = stream_record_count(&env).await;

        // When a transaction puts B and updates A before its third action's condition fails
        let update = Update::builder()
            .table_name(&env.table_name)
            .key("PK", s("A"))
            .key("SK", s("item"))
            .update_expression("SET v = :new")
            .expression_attribute_values(":new", s("new"))
            .build()
            .unwrap();
        let result = env
            .dynamodb
            .transact_write_items()
            .transact_items(put(&env, "B", None))
            .transact_items(TransactWriteItem::builder().update(update).build())
            .transact_items(put(&env, "C", Some("attribute_exists(PK)")))
            .send()
            .await;

        // Then it is cancelled, B is absent, A is unchanged, and no stream record was added
        assert!(result.is_err(), "the transaction is cancelled");
        assert!(get(&env, "B").await.is_none());
        assert_eq!(get(&env, "A").await.unwrap()["v"], s("old"));
        assert_eq!(stream_record_count(&env).await, records_before);
    }

    #[tokio::test]
    async fn cancelled_transactions_do_not_undo_concurrent_commits() {
        // Given 64 concurrent transactions, every other one cancelled by its condition
        let env = TestEnv::new().await;
        let results = futures::future::join_all((0..64).map(|i| {
            let env = env.clone();
            async move {
                let condition = (i % 2 == 1).then_some("attribute_exists(PK)");
                env.dynamodb
                    .transact_write_items()
                    .transact_items(put(&env, &format!("item-{i}"), condition))
                    .transact_items(put(&env, &format!("twin-{i}"), None))
                    .send()
                    .await
                    .is_ok()
            }
        }))
        .await;

        // Then exactly the uncancelled ones committed, and every one of their items is there
        let committed: Vec<usize> = (0..64).filter(|i| results[*i]).collect();
        assert_eq!(committed, (0..64).step_by(2).collect::<Vec<_>>());
        let items = env.scan_items().await;
        assert_eq!(items.len(), 64, "32 transactions of 2 items each");
    }
}
