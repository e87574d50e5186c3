//! The consumer's batch processor fed what Lambda's event source mappings hand a function,
//! recorded from the emulator ([`outbox_tests::lambda_events`]) after the relay's publisher put
//! the events on each target: each source's partial-failure rule (an SQS FIFO batch failing
//! mid-group, an SQS standard batch with two failures, an SNS notification, a Kinesis batch
//! failing mid-shard), exactly-once effects through the idempotency store (a re-delivery and a
//! re-publish answered from it), and order restored per aggregate (events delivered out of
//! order through the classic bus applied in order; a gap past its bound applied with the
//! warning and the metric).

use std::collections::HashSet;
use std::io::Write;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::Utc;
use outbox_consumer::batch::aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use outbox_consumer::sequencing::SEQUENCE_GAPS;
use outbox_consumer::tables::create_idempotency_table;
use outbox_consumer::{
    BatchError, BatchProcessor, Envelope, FifoFailure, IdempotencyConfig, IdempotencyStore,
    Invocation, ItemStatus, ManualClock, Processed, SequenceStore, SequencingConfig,
};
use outbox_shared::envelope::Encoding;
use outbox_shared::schema::user_pk;
use outbox_shared::{NewOutboxEvent, OutboundEvent, OutboxItem};
use outbox_tests::lambda_events::{kinesis_event, sqs_event};
use outbox_tests::{TestEnv, unique_name};
use relay_runtime::{PublishOutcome, Publisher, PublisherConfig, TargetKind};
use serde_json::{Value, json};

/// An event of `aggregate` numbered `sequence`, as the relays publish it.
fn event(env: &TestEnv, aggregate: &str, sequence: u64) -> OutboundEvent {
    let item = OutboxItem::pending(
        NewOutboxEvent {
            partition_key: user_pk("user-1"),
            event_type: "OrderUpdated".to_owned(),
            aggregate_type: "Order".to_owned(),
            aggregate_id: aggregate.to_owned(),
            sequence: Some(sequence),
            payload: json!({"orderId": aggregate, "version": sequence}),
            trace_header: None,
            trace_context: None,
        },
        &env.outbox_config(),
        Utc::now(),
    )
    .expect("a valid outbox event");
    OutboundEvent::from_item(&item, &Encoding::envelope()).expect("an envelope")
}

/// Publishes `events` through the relay's publisher to `env`'s target, one call each, in order.
async fn publish(env: &TestEnv, config: PublisherConfig, events: &[&OutboundEvent]) {
    let publisher = env.publisher(config);
    for event in events {
        let outcomes = publisher
            .publish(std::slice::from_ref(*event), relay_runtime::Deadline::NONE)
            .await;
        assert!(
            outcomes.iter().all(PublishOutcome::is_published),
            "{outcomes:?}"
        );
    }
}

/// The aggregate and sequence a message carries.
fn label(message: &SqsMessage) -> (String, u64) {
    let body: Value = serde_json::from_str(message.body.as_deref().unwrap()).unwrap();
    let envelope: Envelope<Value> = outbox_consumer::decode(&body).unwrap();
    (
        envelope.metadata.aggregate_id.unwrap(),
        envelope.metadata.sequence.unwrap(),
    )
}

/// The caller's handler: records each event it applies (aggregate, sequence) in order, and
/// fails for the event ids it is told to.
#[derive(Debug, Clone, Default)]
struct Handler {
    applied: Arc<Mutex<Vec<(String, u64)>>>,
    failing: Arc<Mutex<HashSet<String>>>,
}

impl Handler {
    async fn handle(&self, envelope: Envelope<Value>) -> Result<Value, String> {
        let metadata = envelope.metadata;
        if lock(&self.failing).contains(&metadata.event_id) {
            return Err(format!("failing {}", metadata.event_id));
        }
        let sequence = metadata.sequence.unwrap();
        lock(&self.applied).push((metadata.aggregate_id.unwrap(), sequence));
        Ok(json!({"applied": sequence}))
    }

    fn fail(&self, event: &OutboundEvent) {
        lock(&self.failing).insert(event.event_id.clone());
    }

    fn heal(&self) {
        lock(&self.failing).clear();
    }

    fn applied(&self) -> Vec<(String, u64)> {
        lock(&self.applied).clone()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn ids(messages: &[&SqsMessage]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m.message_id.clone().unwrap())
        .collect()
}

fn reported(
    response: &outbox_consumer::batch::aws_lambda_events::sqs::SqsBatchResponse,
) -> Vec<String> {
    response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect()
}

/// A fresh table for the idempotency store and the sequence records.
async fn consumer_table(env: &TestEnv) -> String {
    let name = unique_name("consumer");
    create_idempotency_table(&env.dynamodb, &name)
        .await
        .expect("create the consumer's table");
    name
}

#[tokio::test]
async fn an_sqs_fifo_batch_with_a_failure_mid_group_holds_back_that_groups_later_messages() {
    // Given two aggregates' events on a FIFO queue (group = aggregate), as Lambda hands them
    let env = TestEnv::with_target_of(TargetKind::Sqs, true).await;
    let events = [
        ("order-a", 1),
        ("order-b", 1),
        ("order-a", 2),
        ("order-b", 2),
        ("order-a", 3),
    ]
    .map(|(aggregate, sequence)| event(&env, aggregate, sequence));
    publish(
        &env,
        env.publisher_config(),
        &events.iter().collect::<Vec<_>>(),
    )
    .await;
    let batch = sqs_event(&env, &env.sink_queue_url, events.len()).await;
    assert_eq!(batch.records.len(), events.len());
    assert!(
        batch
            .records
            .iter()
            .all(|m| m.attributes.contains_key("MessageGroupId")),
        "{batch:?}"
    );
    let labels: Vec<(String, u64)> = batch.records.iter().map(label).collect();
    let failed_at = labels
        .iter()
        .position(|l| *l == ("order-a".to_owned(), 2))
        .unwrap();

    // And a handler that fails on order-a's second event
    let handler = Handler::default();
    handler.fail(&events[2]);

    // When the batch is processed holding back only the failed group (skip_group_on_error)
    let processor = BatchProcessor::new().with_fifo_failure(FifoFailure::Group);
    let report = processor
        .process_sqs(&batch, &Invocation::default(), |e| handler.handle(e))
        .await;

    // Then order-a's later message is reported without being handled, order-b is handled whole
    let of = |wanted: &[(&str, u64)]| -> Vec<&SqsMessage> {
        batch
            .records
            .iter()
            .zip(&labels)
            .filter(|(_, l)| wanted.iter().any(|(a, s)| l.0 == *a && l.1 == *s))
            .map(|(m, _)| m)
            .collect()
    };
    assert_eq!(
        reported(&report.sqs_response()),
        ids(&of(&[("order-a", 2), ("order-a", 3)]))
    );
    let applied: Vec<(String, u64)> = labels
        .iter()
        .filter(|(a, s)| !(a == "order-a" && *s >= 2))
        .cloned()
        .collect();
    assert_eq!(handler.applied(), applied);
    let a3 = labels
        .iter()
        .position(|l| *l == ("order-a".to_owned(), 3))
        .unwrap();
    assert!(matches!(report.items[a3].status, ItemStatus::HeldBack));
    assert!(matches!(
        report.items[failed_at].error(),
        Some(BatchError::Handler { .. })
    ));

    // When the same batch is processed under AWS's rule (the rest of the batch)
    let handler_aws = Handler::default();
    handler_aws.fail(&events[2]);
    let report = BatchProcessor::new()
        .process_sqs(&batch, &Invocation::default(), |e| handler_aws.handle(e))
        .await;

    // Then the failed message and every later one are reported, none of them handled
    let rest: Vec<&SqsMessage> = batch.records[failed_at..].iter().collect();
    assert_eq!(reported(&report.sqs_response()), ids(&rest));
    assert_eq!(handler_aws.applied(), labels[..failed_at].to_vec());
}

#[tokio::test]
async fn an_sqs_standard_batch_with_two_failures_reports_those_two_and_acknowledges_the_rest() {
    // Given four events on a standard queue, and a message that is not an outbox event
    let env = TestEnv::with_target_of(TargetKind::Sqs, false).await;
    let events: Vec<OutboundEvent> = (1..=4)
        .map(|i| event(&env, &format!("order-{i}"), 1))
        .collect();
    publish(
        &env,
        env.publisher_config(),
        &events.iter().collect::<Vec<_>>(),
    )
    .await;
    env.sqs
        .send_message()
        .queue_url(&env.sink_queue_url)
        .message_body(r#"{"hello": "not an event"}"#)
        .send()
        .await
        .unwrap();
    let batch = sqs_event(&env, &env.sink_queue_url, 5).await;
    assert_eq!(batch.records.len(), 5);

    // And a handler that fails on the second event
    let handler = Handler::default();
    handler.fail(&events[1]);

    // When the batch is processed
    let report = BatchProcessor::new()
        .process_sqs(&batch, &Invocation::default(), |e| handler.handle(e))
        .await;

    // Then exactly the failed event and the undecodable message are reported, each as its own
    // failure, and the other three are handled
    let failed: Vec<&SqsMessage> = batch
        .records
        .iter()
        .filter(|m| {
            let body = m.body.as_deref().unwrap();
            body.contains("not an event") || body.contains(&events[1].event_id)
        })
        .collect();
    assert_eq!(reported(&report.sqs_response()), ids(&failed));
    let errors: Vec<&BatchError> = report.items.iter().filter_map(|i| i.error()).collect();
    assert!(
        matches!(
            errors.as_slice(),
            [BatchError::Handler { .. }, BatchError::Decode { .. }]
                | [BatchError::Decode { .. }, BatchError::Handler { .. }]
        ),
        "{errors:?}"
    );
    let mut applied = handler.applied();
    applied.sort();
    assert_eq!(
        applied,
        [
            ("order-1".to_owned(), 1),
            ("order-3".to_owned(), 1),
            ("order-4".to_owned(), 1)
        ]
    );
}

#[tokio::test]
async fn behind_an_sns_subscription_without_raw_delivery_the_notifications_message_is_the_event() {
    // Given a standard topic whose queue subscribes without raw delivery
    let env = TestEnv::new().await;
    let topic = env
        .sns
        .create_topic()
        .name(unique_name("topic"))
        .send()
        .await
        .unwrap()
        .topic_arn()
        .unwrap()
        .to_owned();
    let queue = env.create_queue(&unique_name("subscriber")).await;
    env.sns
        .subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(env.queue_arn(&queue).await)
        .send()
        .await
        .unwrap();
    let events = [event(&env, "order-sns", 1), event(&env, "order-sns", 2)];
    let config = PublisherConfig::of_kind(TargetKind::Sns, &topic, outbox_tests::TEST_SOURCE);
    publish(&env, config, &events.iter().collect::<Vec<_>>()).await;
    let batch = sqs_event(&env, &queue, 2).await;
    let body: Value = serde_json::from_str(batch.records[0].body.as_deref().unwrap()).unwrap();
    assert_eq!(body["Type"], "Notification", "{body}");

    // When the batch is processed
    let handler = Handler::default();
    let report = BatchProcessor::new()
        .process_sqs(&batch, &Invocation::default(), |e| handler.handle(e))
        .await;

    // Then both events are read out of the notifications and handled
    assert!(
        report.sqs_response().batch_item_failures.is_empty(),
        "{report:?}"
    );
    let mut applied = handler.applied();
    applied.sort();
    assert_eq!(
        applied,
        [("order-sns".to_owned(), 1), ("order-sns".to_owned(), 2)]
    );
}

#[tokio::test]
async fn a_kinesis_batch_with_a_failure_reports_its_sequence_number_and_handles_nothing_after_it() {
    // Given one aggregate's five events on a Kinesis stream (one shard: partition key = the
    // aggregate), as Lambda hands them
    let env = TestEnv::with_target(TargetKind::Kinesis).await;
    let events: Vec<OutboundEvent> = (1..=5).map(|s| event(&env, "order-k", s)).collect();
    publish(
        &env,
        env.publisher_config(),
        &events.iter().collect::<Vec<_>>(),
    )
    .await;
    let batch = kinesis_event(&env, &env.bus_name).await;
    assert_eq!(batch.records.len(), 5);

    // And a handler that fails on the third
    let handler = Handler::default();
    handler.fail(&events[2]);

    // When the batch is processed
    let report = BatchProcessor::new()
        .process_kinesis(&batch, &Invocation::default(), |e| handler.handle(e))
        .await;

    // Then the third record's sequence number is the one failure reported (Lambda retries from
    // it), and the fourth and fifth were not handled
    let response = report.kinesis_response();
    let reported: Vec<Option<String>> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    assert_eq!(
        reported,
        [Some(batch.records[2].kinesis.sequence_number.clone())]
    );
    assert_eq!(
        handler.applied(),
        [("order-k".to_owned(), 1), ("order-k".to_owned(), 2)]
    );
    assert!(matches!(report.items[3].status, ItemStatus::HeldBack));
    assert!(matches!(report.items[4].status, ItemStatus::HeldBack));
}

#[tokio::test]
async fn a_redelivered_message_and_a_republished_event_are_answered_from_the_store() {
    // Given two events on a standard queue, and a processor with the idempotency store
    let env = TestEnv::with_target_of(TargetKind::Sqs, false).await;
    let table = consumer_table(&env).await;
    let store =
        IdempotencyStore::new(env.dynamodb.clone(), IdempotencyConfig::new(&table)).unwrap();
    let processor = BatchProcessor::new().with_idempotency(store);
    let events = [event(&env, "order-i", 1), event(&env, "order-j", 1)];
    publish(
        &env,
        env.publisher_config(),
        &events.iter().collect::<Vec<_>>(),
    )
    .await;
    let batch = sqs_event(&env, &env.sink_queue_url, 2).await;
    let handler = Handler::default();
    handler.fail(&events[0]);

    // When the batch is processed, the handler failing on the first event
    let first = processor
        .process_sqs(&batch, &Invocation::default(), |e| handler.handle(e))
        .await;
    assert_eq!(first.sqs_response().batch_item_failures.len(), 1);

    // And the queue delivers both messages again, the handler healthy
    handler.heal();
    let again = processor
        .process_sqs(&batch, &Invocation::default(), |e| handler.handle(e))
        .await;

    // Then the failed event runs now (its key was released), and the other is answered with its
    // stored response, not handled twice
    assert!(
        again.sqs_response().batch_item_failures.is_empty(),
        "{again:?}"
    );
    let outcome = |report: &outbox_consumer::BatchReport<Value>, event: &OutboundEvent| {
        let item = report
            .items
            .iter()
            .find(|i| i.event_id.as_deref() == Some(event.event_id.as_str()))
            .unwrap();
        match &item.status {
            ItemStatus::Done(processed) => processed.clone(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(
        outcome(&again, &events[0]),
        Processed::Handled(json!({"applied": 1}))
    );
    assert_eq!(
        outcome(&again, &events[1]),
        Processed::Replayed(json!({"applied": 1}))
    );

    // And a relay's re-publish of an event (a new message, the same event id) is answered too
    publish(&env, env.publisher_config(), &[&events[1]]).await;
    let republished = sqs_event(&env, &env.sink_queue_url, 1).await;
    assert_ne!(
        republished.records[0].message_id,
        batch.records[1].message_id
    );
    let third = processor
        .process_sqs(&republished, &Invocation::default(), |e| handler.handle(e))
        .await;
    assert_eq!(
        outcome(&third, &events[1]),
        Processed::Replayed(json!({"applied": 1}))
    );
    let mut applied = handler.applied();
    applied.sort();
    assert_eq!(
        applied,
        [("order-i".to_owned(), 1), ("order-j".to_owned(), 1)]
    );
}

#[tokio::test]
async fn an_aggregates_events_delivered_out_of_order_on_the_classic_bus_are_applied_in_order() {
    // Given an aggregate's four events published last first to the classic bus, whose rule
    // delivers them to a standard queue, and a processor restoring order (and idempotent)
    let env = TestEnv::with_bus(TargetKind::Classic).await;
    let table = consumer_table(&env).await;
    let processor = BatchProcessor::new()
        .with_idempotency(
            IdempotencyStore::new(env.dynamodb.clone(), IdempotencyConfig::new(&table)).unwrap(),
        )
        .with_sequencing(
            SequenceStore::new(env.dynamodb.clone(), SequencingConfig::new(&table)).unwrap(),
        );
    let events: Vec<OutboundEvent> = (1..=4).map(|s| event(&env, "order-x", s)).collect();
    publish(
        &env,
        env.publisher_config(),
        &events.iter().rev().collect::<Vec<_>>(),
    )
    .await;
    let delivered = sqs_event(&env, &env.sink_queue_url, 4).await;
    let arrival: Vec<u64> = delivered.records.iter().map(|m| label(m).1).collect();
    assert_eq!(arrival, [4, 3, 2, 1], "the bus delivered them out of order");
    let handler = Handler::default();

    // When each message is its own invocation, and what is reported is delivered again, until
    // nothing is
    let mut pending: Vec<SqsMessage> = delivered.records.clone();
    let mut invocations = 0;
    while !pending.is_empty() && invocations < 20 {
        let mut reported_again = Vec::new();
        for message in pending {
            invocations += 1;
            let mut batch = SqsEvent::default();
            batch.records = vec![message.clone()];
            let report = processor
                .process_sqs(&batch, &Invocation::default(), |e| handler.handle(e))
                .await;
            if let Some(error) = report.items[0].error() {
                assert!(matches!(error, BatchError::Early { .. }), "{error}");
                reported_again.push(message);
            }
        }
        pending = reported_again;
    }

    // Then the events were applied in their order, each once, the early ones delayed
    let x = |s: u64| ("order-x".to_owned(), s);
    assert_eq!(handler.applied(), [x(1), x(2), x(3), x(4)]);
    assert!(pending.is_empty());
    assert!(invocations > 4, "{invocations}");

    // When another aggregate's events arrive out of order in one batch
    let events: Vec<OutboundEvent> = (1..=3).map(|s| event(&env, "order-y", s)).collect();
    publish(
        &env,
        env.publisher_config(),
        &[&events[2], &events[0], &events[1]],
    )
    .await;
    let batch = sqs_event(&env, &env.sink_queue_url, 3).await;
    let report = processor
        .process_sqs(&batch, &Invocation::default(), |e| handler.handle(e))
        .await;

    // Then they are applied in order within that invocation, nothing reported
    assert!(
        report.sqs_response().batch_item_failures.is_empty(),
        "{report:?}"
    );
    let y = |s: u64| ("order-y".to_owned(), s);
    assert_eq!(handler.applied()[4..], [y(1), y(2), y(3)]);

    // And a repeat of an applied sequence is a duplicate, not handled
    let again = processor
        .process_sqs(&batch, &Invocation::default(), |e| handler.handle(e))
        .await;
    assert!(
        again
            .items
            .iter()
            .all(|i| matches!(i.status, ItemStatus::Done(Processed::AlreadyApplied)))
    );
    assert_eq!(handler.applied().len(), 7);
}

/// A writer the test reads back: what the `tracing` subscriber logged.
#[derive(Debug, Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        lock(&self.0).extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_gap_past_its_bound_is_applied_with_the_warning_and_the_metric() {
    // Given a processor restoring order with a 60 s bound on a clock the test moves, and an
    // aggregate's events 1 and 3 on a standard queue (2 lost on the way)
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _metrics = metrics::set_default_local_recorder(&recorder);
    let env = TestEnv::with_target_of(TargetKind::Sqs, false).await;
    let table = consumer_table(&env).await;
    let clock = ManualClock::new(Utc::now());
    let config = SequencingConfig {
        gap_bound: Duration::from_secs(60),
        ..SequencingConfig::new(&table)
    };
    let processor = BatchProcessor::new().with_sequencing(
        SequenceStore::with_clock(env.dynamodb.clone(), config, clock.clone()).unwrap(),
    );
    let events: Vec<OutboundEvent> = (1..=3).map(|s| event(&env, "order-g", s)).collect();
    publish(&env, env.publisher_config(), &[&events[0], &events[2]]).await;
    let batch = sqs_event(&env, &env.sink_queue_url, 2).await;
    let handler = Handler::default();

    // When the batch is processed, and event 3 delivered again within the bound
    let first = processor
        .process_sqs(&batch, &Invocation::default(), |e| handler.handle(e))
        .await;
    let three = batch
        .records
        .iter()
        .find(|m| label(m).1 == 3)
        .unwrap()
        .clone();
    let mut redelivery = SqsEvent::default();
    redelivery.records = vec![three.clone()];
    clock.advance(Duration::from_secs(59));
    let within = processor
        .process_sqs(&redelivery, &Invocation::default(), |e| handler.handle(e))
        .await;

    // Then 1 is applied and 3 waits for 2, reported each time
    let g = |s: u64| ("order-g".to_owned(), s);
    assert_eq!(handler.applied(), [g(1)]);
    assert_eq!(
        reported(&first.sqs_response()),
        [three.message_id.clone().unwrap()]
    );
    assert_eq!(
        reported(&within.sqs_response()),
        [three.message_id.clone().unwrap()]
    );

    // When it is delivered again after the gap outlived its bound
    clock.advance(Duration::from_secs(2));
    let past = processor
        .process_sqs(&redelivery, &Invocation::default(), |e| handler.handle(e))
        .await;

    // Then it is applied past the gap, with a warning naming it and the gap counted
    assert!(
        past.sqs_response().batch_item_failures.is_empty(),
        "{past:?}"
    );
    assert_eq!(past.items[0].gap, Some(1));
    assert_eq!(handler.applied(), [g(1), g(3)]);
    let logged = String::from_utf8(lock(&logs.0).clone()).unwrap();
    let warning = logged
        .lines()
        .find(|l| l.contains("applied past a gap"))
        .unwrap_or_else(|| panic!("no warning in {logged}"));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(warning.contains("missing=1"), "{warning}");
    let gaps: u64 = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.key().name() == SEQUENCE_GAPS)
        .map(|(.., value)| match value {
            metrics_util::debugging::DebugValue::Counter(n) => n,
            other => panic!("{SEQUENCE_GAPS} is {other:?}"),
        })
        .sum();
    assert_eq!(gaps, 1);

    // And the lost event arriving late is a duplicate of what was applied, not handled
    publish(&env, env.publisher_config(), &[&events[1]]).await;
    let late = sqs_event(&env, &env.sink_queue_url, 1).await;
    let report = processor
        .process_sqs(&late, &Invocation::default(), |e| handler.handle(e))
        .await;
    assert!(matches!(
        report.items[0].status,
        ItemStatus::Done(Processed::AlreadyApplied)
    ));
    assert_eq!(handler.applied(), [g(1), g(3)]);
}

/// DynamoDB calls per message of a processor, through the fault proxy (counting only), and
/// messages per second, on a standard queue's batch of `count` events in order.
async fn calls_per_message(
    proxy: &outbox_tests::fault_proxy::FaultProxy,
    processor: &BatchProcessor,
    batch: &SqsEvent,
) -> (std::collections::BTreeMap<String, u64>, f64) {
    let before = proxy.counts_by_target();
    let handler = Handler::default();
    let started = std::time::Instant::now();
    let report = processor
        .process_sqs(batch, &Invocation::default(), |e| handler.handle(e))
        .await;
    let elapsed = started.elapsed().as_secs_f64();
    assert!(
        report.sqs_response().batch_item_failures.is_empty(),
        "{report:?}"
    );
    let calls = proxy
        .counts_by_target()
        .into_iter()
        .map(|(target, counts)| {
            let earlier = before.get(&target).map_or(0, |c| c.passed_calls);
            (target, counts.passed_calls - earlier)
        })
        .filter(|(_, calls)| *calls > 0)
        .collect();
    (calls, batch.records.len() as f64 / elapsed)
}

#[tokio::test]
async fn dynamodb_calls_per_message_with_and_without_the_store_and_the_order_option() {
    // Given ten events of ten aggregates on a standard queue, and the consumer's DynamoDB
    // reached through the counting proxy
    use outbox_tests::fault_proxy::{FaultProxy, FaultRates};
    let env = TestEnv::with_target_of(TargetKind::Sqs, false).await;
    let table = consumer_table(&env).await;
    let proxy = FaultProxy::start(&outbox_tests::emulator_endpoints(), FaultRates::NONE, 43).await;
    let dynamodb = env.dynamodb_through(&proxy);
    let events: Vec<OutboundEvent> = (0..10)
        .map(|i| event(&env, &format!("order-{i}"), 1))
        .collect();
    publish(
        &env,
        env.publisher_config(),
        &events.iter().collect::<Vec<_>>(),
    )
    .await;
    let batch = sqs_event(&env, &env.sink_queue_url, 10).await;
    assert_eq!(batch.records.len(), 10);
    let idempotent =
        || IdempotencyStore::new(dynamodb.clone(), IdempotencyConfig::new(&table)).unwrap();

    // When the batch is processed with no option, with the idempotency store, and with both
    let (none, plain_rate) = calls_per_message(&proxy, &BatchProcessor::new(), &batch).await;
    let (store, store_rate) = calls_per_message(
        &proxy,
        &BatchProcessor::new().with_idempotency(idempotent()),
        &batch,
    )
    .await;
    let ordered_table = consumer_table(&env).await;
    let (ordered, ordered_rate) = calls_per_message(
        &proxy,
        &BatchProcessor::new()
            .with_idempotency(
                IdempotencyStore::new(dynamodb.clone(), IdempotencyConfig::new(&ordered_table))
                    .unwrap(),
            )
            .with_sequencing(
                SequenceStore::new(dynamodb.clone(), SequencingConfig::new(&ordered_table))
                    .unwrap(),
            ),
        &batch,
    )
    .await;

    // Then none costs no call, the store two per message (the claim, the completion), and the
    // order option two more (the read, the advance): docs/benchmarks.md
    let per_message = |calls: &std::collections::BTreeMap<String, u64>| -> Vec<(String, u64)> {
        calls
            .iter()
            .map(|(target, n)| (target.rsplit('.').next().unwrap().to_owned(), n / 10))
            .collect()
    };
    assert_eq!(per_message(&none), []);
    assert_eq!(per_message(&store), [("UpdateItem".to_owned(), 2)]);
    assert_eq!(
        per_message(&ordered),
        [("GetItem".to_owned(), 1), ("UpdateItem".to_owned(), 3)]
    );
    eprintln!(
        "messages per second on the emulator: none {plain_rate:.0}, idempotency store \
         {store_rate:.0}, store and order {ordered_rate:.0}"
    );
}
