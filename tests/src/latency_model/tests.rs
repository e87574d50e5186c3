use super::*;
use aws_sdk_dynamodb::types::AttributeValue;
use outbox_shared::{NewOutboxEvent, OutboxConfig};
use std::time::Instant;

/// `n` pending items of one aggregate (they share a shard).
fn items(n: usize) -> Vec<OutboxItem> {
    items_of(n, |_| "same-aggregate".to_owned())
}

fn items_of(n: usize, aggregate_id: impl Fn(usize) -> String) -> Vec<OutboxItem> {
    let config = OutboxConfig::new("t");
    (0..n)
        .map(|i| {
            let event = NewOutboxEvent {
                partition_key: schema::user_pk(&i.to_string()),
                event_type: "OrderCreated".into(),
                aggregate_type: "Order".into(),
                aggregate_id: aggregate_id(i),
                sequence: Some(i as u64),
                payload: json!({"i": i}),
                trace_header: None,
                trace_context: None,
            };
            OutboxItem::pending(event, &config, chrono::Utc::now()).unwrap()
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_lagging_index_serves_a_marked_item_for_the_lag_while_the_table_has_it_marked() {
    // Given a model whose index lags the table by 2 s, and 3 pending items
    let model = LatencyModel::new(Duration::from_millis(10));
    model.lag_index(Duration::from_secs(2));
    let seeded = items(3);
    model.seed_pending(&seeded);
    let client = aws_sdk_dynamodb::Client::new(&model.sdk_config());
    let shard = seeded[0].gsi1pk.clone().unwrap();
    let query = || {
        client
            .query()
            .table_name("t")
            .index_name(schema::DEFAULT_INDEX_NAME)
            .key_condition_expression(format!("{} = :p", attr::GSI1PK))
            .expression_attribute_values(":p", AttributeValue::S(shard.clone()))
            .send()
    };
    let store = relay_runtime::DynamoStatusStore::new(
        client.clone(),
        "t",
        relay_runtime::TtlPolicy::default(),
    );
    use relay_runtime::StatusStore;

    // When the first is marked
    let key = seeded[0].key();
    assert_eq!(
        store
            .mark_published(std::slice::from_ref(&key))
            .await
            .remove(0)
            .unwrap(),
        relay_runtime::MarkOutcome::Marked
    );

    // Then the table has it marked at once (a second mark finds it already marked)...
    assert_eq!(
        store
            .mark_published(std::slice::from_ref(&key))
            .await
            .remove(0)
            .unwrap(),
        relay_runtime::MarkOutcome::AlreadyMarked
    );
    assert_eq!(model.pending(), 2);
    // ...while the index still serves it, until the lag is over
    assert_eq!(query().await.unwrap().items().len(), 3);
    tokio::time::sleep(Duration::from_millis(1900)).await;
    assert_eq!(query().await.unwrap().items().len(), 3);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(query().await.unwrap().items().len(), 2);
}

#[tokio::test]
async fn answers_after_the_delay_and_models_the_pending_index() {
    let model = LatencyModel::new(Duration::from_millis(10));
    let seeded = items(5);
    model.seed_pending(&seeded);
    let client = aws_sdk_dynamodb::Client::new(&model.sdk_config());
    let shard = seeded[0].gsi1pk.clone().unwrap();

    let started = Instant::now();
    let page = client
        .query()
        .table_name("t")
        .index_name(schema::DEFAULT_INDEX_NAME)
        .key_condition_expression(format!("{} = :p", attr::GSI1PK))
        .expression_attribute_values(":p", AttributeValue::S(shard.clone()))
        .limit(3)
        .send()
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(10));
    assert_eq!(page.items().len(), 3);
    let decoded: Vec<OutboxItem> = serde_dynamo::from_items(page.items().to_vec()).unwrap();
    assert_eq!(decoded, seeded[..3]);
    let next = client
        .query()
        .table_name("t")
        .index_name(schema::DEFAULT_INDEX_NAME)
        .key_condition_expression(format!("{} = :p", attr::GSI1PK))
        .expression_attribute_values(":p", AttributeValue::S(shard))
        .set_exclusive_start_key(page.last_evaluated_key().cloned())
        .send()
        .await
        .unwrap();
    assert_eq!(next.items().len(), 2);
    assert!(next.last_evaluated_key().is_none());

    let store = relay_runtime::DynamoStatusStore::new(
        client.clone(),
        "t",
        relay_runtime::TtlPolicy::default(),
    );
    use relay_runtime::StatusStore;
    let key = seeded[0].key();
    assert_eq!(
        store
            .mark_published(std::slice::from_ref(&key))
            .await
            .remove(0)
            .unwrap(),
        relay_runtime::MarkOutcome::Marked
    );
    assert_eq!(
        store
            .mark_published(std::slice::from_ref(&key))
            .await
            .remove(0)
            .unwrap(),
        relay_runtime::MarkOutcome::AlreadyMarked
    );
    assert_eq!(model.pending(), 4);
    assert_eq!(model.calls()["Query"], 2);
    assert_eq!(model.calls()["BatchExecuteStatement"], 2);

    // A TTL refresh applies to a pending item, which stays pending, and not to a marked one
    use relay_poller::PendingTtl;
    let ttl = relay_poller::DynamoPendingTtl::new(client.clone(), "t", Duration::from_secs(60));
    assert_eq!(
        ttl.extend_ttl(&seeded[1].key()).await.unwrap(),
        relay_poller::TtlOutcome::Extended
    );
    assert_eq!(
        ttl.extend_ttl(&key).await.unwrap(),
        relay_poller::TtlOutcome::NotPending
    );
    assert_eq!(model.pending(), 4);
    assert_eq!(model.calls()["UpdateItem"], 2);

    // A batch marks the pending ones and finds the one already marked done, in one call
    let keys: Vec<_> = seeded.iter().map(OutboxItem::key).collect();
    assert_eq!(
        store
            .mark_published(&keys)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect::<Vec<_>>(),
        [
            relay_runtime::MarkOutcome::AlreadyMarked,
            relay_runtime::MarkOutcome::Marked,
            relay_runtime::MarkOutcome::Marked,
            relay_runtime::MarkOutcome::Marked,
            relay_runtime::MarkOutcome::Marked,
        ]
    );
    assert_eq!(model.pending(), 0);
    assert_eq!(model.calls()["BatchExecuteStatement"], 3);
}

#[tokio::test]
async fn a_batch_of_more_than_25_statements_or_naming_an_item_twice_is_refused_whole() {
    // Given 26 pending items
    let model = LatencyModel::new(Duration::from_millis(1));
    let seeded = items(26);
    model.seed_pending(&seeded);
    let client = aws_sdk_dynamodb::Client::new(&model.sdk_config());
    let mark = |item: &OutboxItem| {
        aws_sdk_dynamodb::types::BatchStatementRequest::builder()
            .statement(r#"UPDATE "t" SET "Status" = ? WHERE "PK" = ? AND "SK" = ?"#)
            .parameters(AttributeValue::S("PUBLISHED".into()))
            .parameters(AttributeValue::S(item.pk.clone()))
            .parameters(AttributeValue::S(item.sk.clone()))
            .build()
            .unwrap()
    };
    let too_many: Vec<_> = seeded.iter().map(mark).collect();
    let repeated = vec![mark(&seeded[0]), mark(&seeded[1]), mark(&seeded[0])];

    for statements in [too_many, repeated] {
        // When one call marks them
        let err = client
            .batch_execute_statement()
            .set_statements(Some(statements))
            .send()
            .await
            .unwrap_err();

        // Then DynamoDB's ValidationException answers for the whole call, and nothing moved
        let err = err.into_service_error();
        assert_eq!(
            aws_sdk_dynamodb::error::ProvideErrorMetadata::code(&err),
            Some("ValidationException"),
            "{err:?}"
        );
        assert_eq!(model.pending(), 26);
    }
}

#[tokio::test]
async fn on_the_exact_clock_a_call_still_answers_no_sooner_than_the_delay() {
    let model = LatencyModel::new(Duration::from_millis(10)).with_clock(Clock::Exact);
    let client = aws_sdk_sqs::Client::new(&model.sdk_config());
    for _ in 0..5 {
        let started = Instant::now();
        client
            .send_message()
            .queue_url("http://latency-model.invalid/q")
            .message_body("m")
            .send()
            .await
            .unwrap();
        assert!(started.elapsed() >= Duration::from_millis(10));
    }
    assert_eq!(model.calls()["SendMessage"], 5);
}

#[tokio::test(start_paused = true)]
async fn a_bus_of_fixed_capacity_answers_each_call_after_the_calls_queued_ahead() {
    // Given a bus that serves 100 entries/s, one call at a time, with 10 ms of network
    let model = LatencyModel::new(Duration::from_millis(10));
    model.serve_put_events(100);
    let client = aws_sdk_eventbridge::Client::new(&model.sdk_config());
    let call = |entries: usize| {
        let client = client.clone();
        async move {
            let started = tokio::time::Instant::now();
            client
                .put_events()
                .set_entries(Some(
                    (0..entries)
                        .map(|_| {
                            aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                                .detail("{}")
                                .build()
                        })
                        .collect(),
                ))
                .send()
                .await
                .unwrap();
            started.elapsed()
        }
    };

    // When three calls of 10 entries arrive at once
    let latencies = futures::future::join_all([call(10), call(10), call(10)]).await;

    // Then each waits for the ones ahead of it: 100, 200 and 300 ms of service, plus the
    // network (tokio's timer rounds up to the millisecond)
    let millis: Vec<u128> = latencies.iter().map(Duration::as_millis).collect();
    assert_eq!(millis, [110, 210, 310]);
    // And a call after the queue has drained waits only for itself
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(call(5).await.as_millis(), 60);
    assert_eq!(model.put_events_entries(), (35, 0));
}

#[tokio::test]
async fn put_events_accepts_every_entry() {
    let model = LatencyModel::new(Duration::from_millis(1));
    let publisher = relay_runtime::TargetPublisher::on(
        relay_runtime::ClassicBus::new((&model.sdk_config()).into()),
        relay_runtime::PublisherConfig::new("bus", "src"),
    )
    .unwrap();
    // One event per aggregate: the publisher puts at most one event of an aggregate in a call.
    let events: Vec<_> = items_of(25, |i| format!("aggregate-{i}"))
        .iter()
        .map(|i| {
            outbox_shared::OutboundEvent::from_item(
                i,
                &outbox_shared::envelope::Encoding::envelope(),
            )
            .unwrap()
        })
        .collect();
    use relay_runtime::Publisher;
    let outcomes = publisher
        .publish(&events, relay_runtime::Deadline::NONE)
        .await;
    assert!(
        outcomes
            .iter()
            .all(relay_runtime::PublishOutcome::is_published)
    );
    assert_eq!(model.calls()["PutEvents"], 3);
    assert_eq!(publisher.stats().publish_calls, 3);
}

#[tokio::test]
async fn the_custom_bus_put_events_publishes_every_entry_in_cbor() {
    // Given the model as a Custom Event Bus
    let model = LatencyModel::new(Duration::from_millis(1));
    let publisher = relay_runtime::TargetPublisher::on(
        relay_runtime::CustomBus::new((&model.sdk_config()).into()),
        relay_runtime::PublisherConfig::of_kind(
            relay_runtime::TargetKind::Custom,
            "arn:aws:events:us-east-1:123456789012:event-busv2/bus/abcdefghij0123456789klmno",
            "src",
        ),
    )
    .unwrap();
    let events: Vec<_> = items_of(250, |i| format!("aggregate-{i}"))
        .iter()
        .map(|i| {
            outbox_shared::OutboundEvent::from_item(
                i,
                &outbox_shared::envelope::Encoding::envelope(),
            )
            .unwrap()
        })
        .collect();

    // When 250 events of as many aggregates are published
    use relay_runtime::Publisher;
    let outcomes = publisher
        .publish(&events, relay_runtime::Deadline::NONE)
        .await;

    // Then every one is published, in three calls of up to 100 entries, as the SDK read them
    assert!(
        outcomes
            .iter()
            .all(relay_runtime::PublishOutcome::is_published)
    );
    assert_eq!(model.calls()["PutEvents"], 3);
    assert_eq!(model.put_events_entries(), (250, 0));
    assert_eq!(publisher.stats().publish_calls, 3);
}

#[tokio::test]
async fn sns_sqs_and_kinesis_calls_publish_every_entry_in_each_services_wire_format() {
    for (kind, target, operation, calls) in [
        (
            relay_runtime::TargetKind::Sns,
            "arn:aws:sns:us-east-1:123456789012:model-topic.fifo",
            "PublishBatch",
            25,
        ),
        (
            relay_runtime::TargetKind::Sqs,
            "https://sqs.us-east-1.amazonaws.com/123456789012/model-queue.fifo",
            "SendMessageBatch",
            25,
        ),
        (
            relay_runtime::TargetKind::Kinesis,
            "arn:aws:kinesis:us-east-1:123456789012:stream/model-stream",
            "PutRecords",
            1,
        ),
    ] {
        // Given the model as an SNS topic, an SQS queue or a Kinesis stream
        let model = LatencyModel::new(Duration::from_millis(1));
        let publisher = relay_runtime::TargetPublisher::new(
            &model.sdk_config(),
            relay_runtime::PublisherConfig::of_kind(kind, target, "src"),
        )
        .unwrap();
        let events: Vec<_> = items_of(250, |i| format!("aggregate-{i}"))
            .iter()
            .map(|i| {
                outbox_shared::OutboundEvent::from_item(
                    i,
                    &outbox_shared::envelope::Encoding::envelope(),
                )
                .unwrap()
            })
            .collect();

        // When 250 events of as many aggregates are published
        use relay_runtime::Publisher;
        let outcomes = publisher
            .publish(&events, relay_runtime::Deadline::NONE)
            .await;

        // Then the SDK read every answer (SNS's in XML) as every entry published, in calls of
        // the target's size (10 messages, 500 records)
        assert!(
            outcomes
                .iter()
                .all(relay_runtime::PublishOutcome::is_published),
            "{kind}: {outcomes:?}"
        );
        assert_eq!(model.calls()[operation], calls, "{kind}");
        assert_eq!(model.put_events_entries(), (250, 0), "{kind}");
        assert_eq!(publisher.stats().publish_calls, calls, "{kind}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_refuses_records_beyond_its_shards_write_quota_and_the_relay_slows_to_it() {
    // Given the model as a Kinesis stream of one shard (1,000 records a second)
    let model = LatencyModel::new(Duration::from_millis(10));
    model.limit_stream_writes(1);
    let publisher = relay_runtime::TargetPublisher::new(
        &model.sdk_config(),
        relay_runtime::PublisherConfig::of_kind(
            relay_runtime::TargetKind::Kinesis,
            "arn:aws:kinesis:us-east-1:123456789012:stream/model-stream",
            "src",
        ),
    )
    .unwrap();
    let events: Vec<_> = items_of(3_000, |i| format!("aggregate-{i}"))
        .iter()
        .map(|i| {
            outbox_shared::OutboundEvent::from_item(
                i,
                &outbox_shared::envelope::Encoding::envelope(),
            )
            .unwrap()
        })
        .collect();

    // When 3,000 events of as many aggregates are published at once
    use relay_runtime::Publisher;
    let outcomes = publisher
        .publish(&events, relay_runtime::Deadline::NONE)
        .await;

    // Then the records beyond the quota were refused per record (HTTP 200, their
    // `ErrorCode`), read as throttles and sent again; every record the stream took is an event
    // published, and every event not published is one it refused on each attempt
    let (received, throttled) = model.put_events_entries();
    assert!(throttled > 0, "{received} received, {throttled} throttled");
    let published = outcomes.iter().filter(|o| o.is_published()).count() as u64;
    assert_eq!(published, received - throttled);
    assert!(
        published > 1_000,
        "{published}: the refused records were sent again"
    );
    assert_eq!(publisher.stats().throttled, throttled);
}
