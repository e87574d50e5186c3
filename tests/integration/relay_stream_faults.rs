//! The stream handler under injected `PutEvents` faults, against the emulator.
//!
//! An SDK interceptor on the real EventBridge client removes faulted entries from the request
//! before it is sent (so a faulted entry really is not delivered) and puts a failed result back in
//! their place in the response. Decisions are deterministic: a seeded hash of the event id picks
//! the ~30% of entries whose first attempt fails with `ThrottlingException`; an "outage" fails
//! every call holding a marked event with HTTP 500; a marked event is always rejected with
//! `MalformedDetail`.

use relay_runtime::Deadline;
use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_eventbridge::config::retry::RetryConfig;
use aws_sdk_eventbridge::operation::put_events::PutEventsOutput;
use aws_sdk_eventbridge::types::PutEventsResultEntry;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::{
    BeforeDeserializationInterceptorContextMut, BeforeTransmitInterceptorContextMut,
    FinalizerInterceptorContextMut,
};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::config_bag::{ConfigBag, Storable, StoreReplace};
use outbox_shared::OutboxStatus;
use outbox_tests::{TEST_SOURCE, TestEnv, fixtures};
use outbox_writer::{NewOrder, OrderLine, OrderStatus, OutboxWriter};
use relay_runtime::PublisherArgs;
use relay_stream::{RecordOutcome, RelayArgs};
use serde_json::{Value, json};

const SEED: u64 = 0x5eed_0b0c;
const RETRYABLE_PERCENT: u64 = 30;
const POISON_ORDER: &str = "poison-order";

/// What the faults did, for the test to check they happened.
#[derive(Debug, Default, Clone, Copy)]
struct Injected {
    retryable_entries: u64,
    outage_calls: u64,
    rejected_entries: u64,
}

#[derive(Debug, Default)]
struct FaultState {
    /// A call holding an event whose detail contains one of these fails entirely (HTTP 500).
    outage_markers: Mutex<Vec<String>>,
    /// Attempts seen per event id.
    attempts: Mutex<HashMap<String, u32>>,
    /// The first event (`Sequence` 1) of these orders fails with a retryable code this many more
    /// times.
    failing_first_events: Mutex<HashMap<String, u32>>,
    injected: Mutex<Injected>,
}

/// Per attempt: for each entry of the original request, the fault injected, if any.
#[derive(Debug, Clone)]
enum Plan {
    Outage,
    Entries(Vec<Option<(&'static str, &'static str)>>),
}

impl Storable for Plan {
    type Storer = StoreReplace<Self>;
}

#[derive(Debug, Clone, Default)]
struct FaultInjector(Arc<FaultState>);

fn json_body(bytes: Vec<u8>) -> SdkBody {
    SdkBody::from(bytes)
}

impl FaultInjector {
    /// Keyed by the order id (stable across runs, unlike the event id) so the same entries fail
    /// on every run.
    fn first_attempt_fails(order_id: &str) -> bool {
        let mut hasher = DefaultHasher::new();
        (SEED, order_id).hash(&mut hasher);
        hasher.finish() % 100 < RETRYABLE_PERCENT
    }

    fn plan(&self, entries: &[Value]) -> Plan {
        let details: Vec<&str> = entries
            .iter()
            .map(|e| e["Detail"].as_str().unwrap_or_default())
            .collect();
        let markers = self.0.outage_markers.lock().unwrap().clone();
        if details
            .iter()
            .any(|d| markers.iter().any(|m| d.contains(m.as_str())))
        {
            self.0.injected.lock().unwrap().outage_calls += 1;
            return Plan::Outage;
        }
        let mut injected = self.0.injected.lock().unwrap();
        let mut attempts = self.0.attempts.lock().unwrap();
        Plan::Entries(
            details
                .iter()
                .map(|detail| {
                    if detail.contains(POISON_ORDER) {
                        injected.rejected_entries += 1;
                        return Some(("MalformedDetail", "injected: detail rejected"));
                    }
                    let envelope: Value = serde_json::from_str(detail).unwrap_or_default();
                    let event_id = envelope["metadata"]["eventId"].as_str().unwrap_or_default();
                    let order_id = envelope["data"]["orderId"].as_str().unwrap_or_default();
                    if envelope["metadata"]["sequence"] == 1 {
                        let mut failing = self.0.failing_first_events.lock().unwrap();
                        if let Some(left) = failing.get_mut(order_id).filter(|n| **n > 0) {
                            *left -= 1;
                            injected.retryable_entries += 1;
                            return Some(("ThrottlingException", "injected: first event fails"));
                        }
                    }
                    let attempt = attempts.entry(event_id.to_owned()).or_default();
                    *attempt += 1;
                    if *attempt == 1 && Self::first_attempt_fails(order_id) {
                        injected.retryable_entries += 1;
                        return Some(("ThrottlingException", "injected: rate exceeded"));
                    }
                    None
                })
                .collect(),
        )
    }
}

impl Intercept for FaultInjector {
    fn name(&self) -> &'static str {
        "PutEventsFaultInjector"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let request = context.request_mut();
        let Some(bytes) = request.body().bytes() else {
            return Ok(());
        };
        let mut body: Value = serde_json::from_slice(bytes)?;
        let entries = body["Entries"].as_array().cloned().unwrap_or_default();
        let plan = self.plan(&entries);
        let kept: Vec<Value> = match &plan {
            Plan::Outage => Vec::new(),
            Plan::Entries(faults) => entries
                .into_iter()
                .zip(faults)
                .filter(|(_, f)| f.is_none())
                .map(|(e, _)| e)
                .collect(),
        };
        body["Entries"] = Value::Array(kept);
        let bytes = serde_json::to_vec(&body)?;
        request
            .headers_mut()
            .insert("content-length", bytes.len().to_string());
        *request.body_mut() = json_body(bytes);
        cfg.interceptor_state().store_put(plan);
        Ok(())
    }

    fn modify_before_deserialization(
        &self,
        context: &mut BeforeDeserializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let replacement = match cfg.load::<Plan>() {
            Some(Plan::Outage) => Some((
                500,
                json!({"__type": "InternalException", "message": "injected outage"}),
            )),
            // Nothing was left to send; moto's answer to an empty request is irrelevant.
            Some(Plan::Entries(faults)) if faults.iter().all(Option::is_some) => {
                Some((200, json!({"FailedEntryCount": 0, "Entries": []})))
            }
            _ => None,
        };
        if let Some((status, body)) = replacement {
            let response = context.response_mut();
            *response.status_mut() = StatusCode::try_from(status)?;
            let bytes = serde_json::to_vec(&body)?;
            response
                .headers_mut()
                .insert("content-length", bytes.len().to_string());
            *response.body_mut() = json_body(bytes);
        }
        Ok(())
    }

    fn modify_before_attempt_completion(
        &self,
        context: &mut FinalizerInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let Some(Plan::Entries(faults)) = cfg.load::<Plan>().cloned() else {
            return Ok(());
        };
        let Some(Ok(output)) = context.output_or_error_mut() else {
            return Ok(());
        };
        let Some(output) = output.downcast_mut::<PutEventsOutput>() else {
            return Ok(());
        };
        let mut delivered = output.entries.take().unwrap_or_default().into_iter();
        let merged: Vec<PutEventsResultEntry> = faults
            .iter()
            .map(|fault| match fault {
                Some((code, message)) => PutEventsResultEntry::builder()
                    .error_code(*code)
                    .error_message(*message)
                    .build(),
                None => delivered.next().unwrap_or_else(|| {
                    PutEventsResultEntry::builder()
                        .error_code("InternalFailure")
                        .build()
                }),
            })
            .collect();
        output.failed_entry_count =
            i32::try_from(merged.iter().filter(|e| e.error_code().is_some()).count())?;
        output.entries = Some(merged);
        Ok(())
    }
}

/// The stream relay's settings against `env` (4 calls in flight, 4 attempts per entry).
fn relay_args(env: &TestEnv) -> RelayArgs {
    RelayArgs {
        table_name: env.table_name.clone(),
        publisher: PublisherArgs {
            publish_concurrency: 4,
            publish_max_attempts: 4,
            ..fixtures::publisher_args(&env.bus_name)
        },
        retention: relay_runtime::RetentionArgs::default(),
        regions: relay_runtime::RegionArgs::default(),
        lease_table: None,
        dead_letter_queue_url: Some(env.dead_letter_queue_url.clone()),
        mark_concurrency: 32,
        stop_at_first_failure: false,
        deadline_margin: relay_stream::config::DEFAULT_DEADLINE_MARGIN,
        hold_failed_aggregates: false,
    }
}

async fn create_orders(writer: &OutboxWriter, ids: &[String]) -> Vec<String> {
    let mut event_ids = Vec::new();
    for id in ids {
        let order = NewOrder::new(vec![OrderLine::new("SKU-1", 1, 500)]).with_order_id(id.clone());
        event_ids.push(
            writer
                .create_order_with_outbox("fault-user", order)
                .await
                .expect("order created")
                .event_id,
        );
    }
    event_ids
}

#[tokio::test]
async fn no_event_is_lost_under_put_events_faults() {
    // Given 40 orders: the 8th is one EventBridge always rejects; orders 30.. will meet an outage
    let env = TestEnv::new().await;
    let writer = env.writer();
    let order_ids: Vec<String> = (0..40)
        .map(|i| match i {
            7 => POISON_ORDER.to_owned(),
            30.. => format!("late-order-{i:02}"),
            _ => format!("order-{i:02}"),
        })
        .collect();
    let event_ids = create_orders(&writer, &order_ids).await;
    let poison_event = event_ids[7].clone();

    // And the relay's EventBridge client goes through the fault injector (SDK retries off, so
    // the publisher's own per-entry retries are what is exercised)
    let faults = FaultInjector::default();
    let eventbridge = aws_sdk_eventbridge::Client::from_conf(
        aws_sdk_eventbridge::config::Builder::from(&env.sdk_config)
            .retry_config(RetryConfig::disabled())
            .interceptor(faults.clone())
            .build(),
    );
    let args = relay_args(&env);
    let relay = relay_stream::build_relay_with(
        &args,
        fixtures::classic_publisher(eventbridge, args.publisher_config().unwrap()),
        env.dynamodb.clone(),
        env.sqs.clone(),
    )
    .unwrap();
    let records = relay_stream_local::read_stream_records(&env.streams, &env.stream_arn)
        .await
        .unwrap();
    let outbox_index = |event_id: &str| {
        records
            .iter()
            .position(|r| {
                r.change.new_image.get("EventId")
                    == Some(&serde_dynamo::AttributeValue::S(event_id.to_owned()))
            })
            .expect("the event's record is in the stream")
    };

    // When the batch is delivered while 30% of entries fail once with a retryable code, the
    // calls holding orders 30.. fail entirely (outage), and the poison entry is rejected
    faults
        .0
        .outage_markers
        .lock()
        .unwrap()
        .push("late-order-".to_owned());
    let report = relay.handle(&records, Deadline::NONE).await;
    let response = report.response(&records);

    // Then the batch item failure names the first unpublished record: order 30's event
    let first_late = outbox_index(&event_ids[30]);
    assert_eq!(response.batch_item_failures.len(), 1);
    assert_eq!(
        response.batch_item_failures[0].item_identifier,
        records[first_late].change.sequence_number
    );
    assert_eq!(report.first_unpublished, Some(first_late));
    // And the poison event is dead-lettered while the events after it were published
    assert!(matches!(
        &report.outcomes[outbox_index(&poison_event)],
        RecordOutcome::DeadLettered { reason, .. } if reason.contains("MalformedDetail")
    ));
    for event_id in &event_ids[8..30] {
        assert!(matches!(
            report.outcomes[outbox_index(event_id)],
            RecordOutcome::Published { .. }
        ));
    }
    let injected = *faults.0.injected.lock().unwrap();
    assert!(injected.retryable_entries >= 3, "{injected:?}");
    // The outage call, tried `publish_max_attempts` times.
    assert_eq!(injected.outage_calls, 4, "{injected:?}");
    assert!(injected.rejected_entries >= 1, "{injected:?}");

    // When the outage ends and Lambda re-delivers from the reported record
    faults.0.outage_markers.lock().unwrap().clear();
    let redelivered = relay.handle(&records[first_late..], Deadline::NONE).await;
    assert_eq!(redelivered.first_unpublished, None);

    // Then no event is missing from the sink queue; duplicates, if any, carry the same eventId
    let expected: HashSet<&str> = event_ids
        .iter()
        .filter(|id| **id != poison_event)
        .map(String::as_str)
        .collect();
    let messages = env
        .wait_for_sink(expected.len() as u64, Duration::from_secs(30))
        .await;
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for message in &messages {
        *seen.entry(message.event_id()).or_default() += 1;
    }
    let received: HashSet<&str> = seen.keys().copied().collect();
    assert_eq!(received, expected);
    let duplicates: usize = seen.values().map(|n| n - 1).sum();
    eprintln!("duplicates on the sink queue: {duplicates} (same eventId each)");
    assert_eq!(messages.len(), expected.len() + duplicates);

    // And the poison event is on the dead-letter queue with its reason and full record
    let letters = env.drain_dead_letters().await;
    assert_eq!(letters.len(), 1);
    assert_eq!(letters[0].event_id.as_deref(), Some(poison_event.as_str()));
    assert!(
        letters[0].reason.contains("MalformedDetail"),
        "{}",
        letters[0].reason
    );
    assert_eq!(letters[0].origin, "relay-stream");
    assert_eq!(letters[0].record["eventName"], "INSERT");

    // And every item left the pending index: published, or dead-lettered for the poison
    for item in env.outbox_items().await {
        let want = if item.event_id == poison_event {
            OutboxStatus::DeadLettered
        } else {
            OutboxStatus::Published
        };
        assert_eq!(item.status, want, "{}", item.event_id);
        assert_eq!(item.gsi1pk, None);
    }
}

/// Creates `count` orders, round-robin, each moved through three more statuses (sequences 1..=4);
/// returns the order ids.
async fn orders_with_history(writer: &OutboxWriter, count: usize) -> Vec<String> {
    let ids: Vec<String> = (0..count).map(|i| format!("ordered-{i:02}")).collect();
    for id in &ids {
        let order = NewOrder::new(vec![OrderLine::new("SKU-1", 1, 500)]).with_order_id(id.clone());
        writer
            .create_order_with_outbox("order-user", order)
            .await
            .expect("order created");
    }
    for status in [
        OrderStatus::Confirmed,
        OrderStatus::Paid,
        OrderStatus::Shipped,
    ] {
        for id in &ids {
            writer
                .update_order_status_with_outbox("order-user", id, status)
                .await
                .expect("status changed");
        }
    }
    ids
}

/// The relay's EventBridge client through `faults` (SDK retries off).
fn faulty_eventbridge(env: &TestEnv, faults: &FaultInjector) -> aws_sdk_eventbridge::Client {
    aws_sdk_eventbridge::Client::from_conf(
        aws_sdk_eventbridge::config::Builder::from(&env.sdk_config)
            .retry_config(RetryConfig::disabled())
            .interceptor(faults.clone())
            .build(),
    )
}

/// Each order's `Sequence` values in the order their first copy reached the sink.
async fn arrival_order(env: &TestEnv, expected: u64) -> HashMap<String, Vec<u64>> {
    let messages = env.wait_for_sink(expected, Duration::from_secs(30)).await;
    let mut seen = HashSet::new();
    let mut by_order: HashMap<String, Vec<u64>> = HashMap::new();
    for m in &messages {
        if !seen.insert(m.event_id().to_owned()) {
            continue;
        }
        let meta = &m.envelope.metadata;
        by_order
            .entry(meta.aggregate_id.clone().expect("aggregate id"))
            .or_default()
            .push(meta.sequence.expect("sequence"));
    }
    by_order
}

#[tokio::test]
async fn the_stream_relay_keeps_each_aggregates_order_when_its_first_event_fails() {
    // Given 12 orders with 4 events each, interleaved on the stream, and the first event of 4 of
    // them failing on every attempt of the first invocation (4 attempts)
    let env = TestEnv::new().await;
    let orders = orders_with_history(&env.writer(), 12).await;
    let faults = FaultInjector::default();
    for id in orders.iter().step_by(3) {
        faults
            .0
            .failing_first_events
            .lock()
            .unwrap()
            .insert(id.clone(), 4);
    }
    let mut args = relay_args(&env);
    args.publisher.publish_max_attempts = 4;
    let relay = relay_stream::build_relay_with(
        &args,
        fixtures::classic_publisher(
            faulty_eventbridge(&env, &faults),
            args.publisher_config().unwrap(),
        ),
        env.dynamodb.clone(),
        env.sqs.clone(),
    )
    .unwrap();
    let records = relay_stream_local::read_stream_records(&env.streams, &env.stream_arn)
        .await
        .unwrap();

    // When the batch is handled, and Lambda re-delivers from the reported record
    let first = relay.handle(&records, Deadline::NONE).await;
    let checkpoint = first.first_unpublished.expect("a record to re-deliver");
    let second = relay.handle(&records[checkpoint..], Deadline::NONE).await;
    assert_eq!(second.first_unpublished, None, "{:?}", second.outcomes);

    // Then every order's events reached the sink in Sequence order, none missing
    assert!(faults.0.injected.lock().unwrap().retryable_entries >= 16);
    let by_order = arrival_order(&env, 48).await;
    assert_eq!(by_order.len(), 12);
    for id in &orders {
        assert_eq!(by_order[id], [1, 2, 3, 4], "order {id}");
    }
}

#[tokio::test]
async fn the_poller_keeps_each_aggregates_order_when_its_first_event_fails() {
    // Given the same 12 orders pending, and the first event of 4 of them failing on every
    // attempt of the first pass
    let env = TestEnv::new().await;
    let orders = orders_with_history(&env.writer(), 12).await;
    let faults = FaultInjector::default();
    for id in orders.iter().step_by(3) {
        faults
            .0
            .failing_first_events
            .lock()
            .unwrap()
            .insert(id.clone(), 4);
    }
    let config = <relay_poller::Cli as clap::Parser>::try_parse_from([
        "relay-poller",
        "drain",
        "--table-name",
        &env.table_name,
        "--event-bus-name",
        &env.bus_name,
        "--source",
        TEST_SOURCE,
        "--dead-letter-queue-url",
        &env.dead_letter_queue_url,
        "--publish-max-attempts",
        "4",
        "--page-size",
        "5",
    ])
    .unwrap();
    let relay_poller::Command::Drain(drain) = config.command else {
        panic!("a drain")
    };
    let config = drain.relay.validate().unwrap();
    let clients = relay_poller::aws::AwsClients {
        dynamodb: env.dynamodb.clone(),
        sqs: env.sqs.clone(),
    };
    let publisher =
        fixtures::classic_publisher(faulty_eventbridge(&env, &faults), config.publisher.clone());
    let poller = relay_poller::aws::aws_poller_with(clients, publisher, &config).expect("poller");

    // When it drains
    let summary = poller
        .drain(
            &poller.partitions().fixed(),
            Duration::ZERO,
            3,
            &relay_poller::CancellationToken::new(),
        )
        .await;

    // Then every order's events reached the sink in Sequence order, none missing
    assert!(summary.complete, "{summary:?}");
    assert!(faults.0.injected.lock().unwrap().retryable_entries >= 16);
    let by_order = arrival_order(&env, 48).await;
    assert_eq!(by_order.len(), 12);
    for id in &orders {
        assert_eq!(by_order[id], [1, 2, 3, 4], "order {id}");
    }
}

#[tokio::test]
async fn with_hold_mode_a_failing_aggregate_goes_to_the_poller_and_the_stream_moves_on() {
    // Given 6 orders with 4 events each on the stream, the first event of one of them failing on
    // every attempt while the stream relay runs (HOLD_FAILED_AGGREGATES on)
    let env = TestEnv::new().await;
    let orders = orders_with_history(&env.writer(), 6).await;
    let failing = orders[2].clone();
    let faults = FaultInjector::default();
    faults
        .0
        .failing_first_events
        .lock()
        .unwrap()
        .insert(failing.clone(), u32::MAX);
    let mut args = relay_args(&env);
    args.hold_failed_aggregates = true;
    let relay = relay_stream::build_relay_with(
        &args,
        fixtures::classic_publisher(
            faulty_eventbridge(&env, &faults),
            args.publisher_config().unwrap(),
        ),
        env.dynamodb.clone(),
        env.sqs.clone(),
    )
    .unwrap();
    let records = relay_stream_local::read_stream_records(&env.streams, &env.stream_arn)
        .await
        .unwrap();

    // When the stream arrives in two batches
    let (first, second) = records.split_at(records.len() / 2);
    let first_report = relay.handle(first, Deadline::NONE).await;
    let second_report = relay.handle(second, Deadline::NONE).await;

    // Then neither batch asks for re-delivery, and every other order's events are on the sink
    // at once, in order
    assert_eq!(
        first_report.first_unpublished, None,
        "{:?}",
        first_report.outcomes
    );
    assert_eq!(
        second_report.first_unpublished, None,
        "{:?}",
        second_report.outcomes
    );
    let held = first_report.counts().left_to_hold + second_report.counts().left_to_hold;
    assert_eq!(
        held, 4,
        "the failing order's 4 events are left to the poller"
    );
    let by_order = arrival_order(&env, 20).await;
    assert_eq!(by_order.len(), 5, "{by_order:?}");
    for id in orders.iter().filter(|id| **id != failing) {
        assert_eq!(by_order[id], [1, 2, 3, 4], "order {id}");
    }
    assert!(!by_order.contains_key(&failing));

    // When EventBridge recovers and the poller runs after its grace period
    faults.0.failing_first_events.lock().unwrap().clear();
    let summary = drain(&env, |config| {
        fixtures::classic_publisher(faulty_eventbridge(&env, &faults), config.publisher.clone())
    })
    .await;

    // Then it publishes the held order's 4 events in order, none missing, and releases the hold
    assert!(summary.complete, "{summary:?}");
    assert_eq!(summary.published, 4, "{summary:?}");
    let by_order = arrival_order(&env, 4).await;
    assert_eq!(by_order[&failing], [1, 2, 3, 4]);
    assert_eq!(
        env.pending_in_index().await,
        0,
        "no event and no hold is left"
    );
}

/// A drain of `env` (the settings of [`poller_config`], no grace period, 3 stalled passes at
/// most) publishing through the publisher `publisher` builds for its configuration.
async fn drain(
    env: &TestEnv,
    publisher: impl FnOnce(&relay_poller::RelayConfig) -> relay_runtime::TargetPublisher,
) -> relay_poller::poller::DrainSummary {
    let config = poller_config(env);
    let poller = relay_poller::aws::aws_poller_with(
        relay_poller::aws::AwsClients {
            dynamodb: env.dynamodb.clone(),
            sqs: env.sqs.clone(),
        },
        publisher(&config),
        &config,
    )
    .expect("poller");
    poller
        .drain(
            &poller.partitions().fixed(),
            Duration::ZERO,
            3,
            &relay_poller::CancellationToken::new(),
        )
        .await
}

/// The poller's settings against `env`, as `relay-poller drain` parses them.
fn poller_config(env: &TestEnv) -> relay_poller::RelayConfig {
    let cli = <relay_poller::Cli as clap::Parser>::try_parse_from([
        "relay-poller",
        "drain",
        "--table-name",
        &env.table_name,
        "--event-bus-name",
        &env.bus_name,
        "--source",
        TEST_SOURCE,
        "--dead-letter-queue-url",
        &env.dead_letter_queue_url,
        "--publish-max-attempts",
        "4",
        "--page-size",
        "5",
    ])
    .unwrap();
    let relay_poller::Command::Drain(drain) = cli.command else {
        panic!("a drain")
    };
    drain.relay.validate().unwrap()
}

/// The table, its index lagging behind it, and the bus in one, in memory: the stream relay and the
/// poller interleaved around a hold's release, step by step. (The same ports as the emulator's,
/// faked, because the interleaving is a matter of milliseconds there.)
mod hold_release {
    use std::collections::HashSet;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use std::borrow::Borrow;

    use chrono::Utc;
    use outbox_shared::{
        ItemKey, NewOutboxEvent, OutboundEvent, OutboxConfig, OutboxItem, SdkFailure,
    };
    use outbox_tests::fixtures;
    use relay_poller::assignment::StaticShards;
    use relay_poller::index::{
        Cursor, IndexCounts, IndexError, PendingCounts, PendingPage, PendingPages, RawItem,
        ShardBacklog,
    };
    use relay_poller::poller::{Poller, PollerSettings, Ports};
    use relay_poller::{PendingTtl, TtlOutcome};
    use relay_runtime::testing::{FakeDeadLetters, FakeHoldStore};
    use relay_runtime::{
        Deadline, Hold, HoldCursor, HoldPage, HoldRelease, MarkOutcome, PublishOutcome, Publisher,
        StatusError, StatusStore,
    };
    use relay_stream::{HandlerOptions, StreamRelay};
    use tokio::sync::Notify;

    const ORDER: &str = "order-7";

    #[derive(Debug, Default)]
    struct World {
        /// Pending items, each with whether the index shows it yet.
        pending: Mutex<Vec<(OutboxItem, bool)>>,
        /// Event ids in the order the bus accepted them.
        published: Mutex<Vec<String>>,
        /// Event ids whose next publish fails.
        fail_once: Mutex<HashSet<String>>,
        /// The next read of a page of holds waits, once it has said it is asking, for `answer`.
        interleave: AtomicBool,
        asking: Notify,
        answer: Notify,
        /// The aggregate holds the stream relay sets and the poller releases.
        holds: FakeHoldStore,
    }

    impl World {
        fn write(&self, item: &OutboxItem, in_index: bool) {
            self.pending.lock().unwrap().push((item.clone(), in_index));
        }

        fn index_catches_up(&self) {
            for (_, in_index) in self.pending.lock().unwrap().iter_mut() {
                *in_index = true;
            }
        }

        /// What the bus got, each event named by its `Sequence` (`E1`, ...).
        fn published(&self, items: &[&OutboxItem]) -> Vec<String> {
            self.published
                .lock()
                .unwrap()
                .iter()
                .map(|id| match items.iter().find(|item| item.event_id == *id) {
                    Some(item) => format!("E{}", item.sequence.unwrap()),
                    None => id.clone(),
                })
                .collect()
        }

        fn mark(&self, key: &ItemKey) -> MarkOutcome {
            let mut pending = self.pending.lock().unwrap();
            let before = pending.len();
            pending.retain(|(item, _)| item.key() != *key);
            if pending.len() < before {
                MarkOutcome::Marked
            } else {
                MarkOutcome::AlreadyMarked
            }
        }
    }

    impl Publisher for &World {
        async fn publish<E: Borrow<OutboundEvent> + Sync>(
            &self,
            events: &[E],
            _deadline: Deadline,
        ) -> Vec<PublishOutcome> {
            events
                .iter()
                .map(Borrow::borrow)
                .map(|e: &OutboundEvent| {
                    if self.fail_once.lock().unwrap().remove(&e.event_id) {
                        PublishOutcome::Failed {
                            code: "ThrottlingException".into(),
                            message: "slow down".into(),
                        }
                    } else {
                        self.published.lock().unwrap().push(e.event_id.clone());
                        PublishOutcome::Published
                    }
                })
                .collect()
        }
    }

    impl StatusStore for &World {
        async fn mark_published(&self, keys: &[ItemKey]) -> Vec<Result<MarkOutcome, StatusError>> {
            keys.iter().map(|key| Ok(self.mark(key))).collect()
        }

        async fn mark_dead_lettered(
            &self,
            key: &ItemKey,
            _reason: &str,
        ) -> Result<MarkOutcome, StatusError> {
            Ok(self.mark(key))
        }

        /// The world keeps pending items only: one put back dead-lettered is not among them.
        async fn recreate_dead_lettered(
            &self,
            _key: &ItemKey,
            _image: &relay_runtime::recreate::Attributes,
            _reason: &str,
        ) -> Result<MarkOutcome, StatusError> {
            Ok(MarkOutcome::Marked)
        }
    }

    impl PendingTtl for &World {
        async fn extend_ttl(&self, key: &ItemKey) -> Result<TtlOutcome, StatusError> {
            let pending = self.pending.lock().unwrap();
            Ok(if pending.iter().any(|(item, _)| item.key() == *key) {
                TtlOutcome::Extended
            } else {
                TtlOutcome::NotPending
            })
        }
    }

    impl PendingPages for &World {
        async fn query_page(
            &self,
            partition: &str,
            before: &str,
            limit: i32,
            _start: Option<Cursor>,
        ) -> Result<PendingPage, IndexError> {
            let mut items: Vec<&OutboxItem> = Vec::new();
            let pending = self.pending.lock().unwrap();
            for (item, in_index) in pending.iter() {
                if *in_index
                    && item.gsi1pk.as_deref() == Some(partition)
                    && item.gsi1sk.as_deref().is_some_and(|sk| sk < before)
                {
                    items.push(item);
                }
            }
            items.sort_by_key(|item| item.gsi1sk.clone());
            items.truncate(usize::try_from(limit).unwrap());
            Ok(PendingPage {
                items: items
                    .into_iter()
                    .map(|item| serde_dynamo::to_item::<_, RawItem>(item).unwrap())
                    .collect(),
                next: None,
            })
        }
    }

    impl PendingCounts for &World {
        async fn backlog(
            &self,
            shard: &outbox_shared::schema::PendingPartition,
        ) -> Result<ShardBacklog, IndexError> {
            let partition = shard.gsi1pk();
            let pending = self.pending.lock().unwrap();
            let mut in_shard: Vec<&OutboxItem> = pending
                .iter()
                .filter(|(item, in_index)| *in_index && item.gsi1pk.as_deref() == Some(&partition))
                .map(|(item, _)| item)
                .collect();
            in_shard.sort_by_key(|item| item.gsi1sk.clone());
            Ok(ShardBacklog {
                region: None,
                shard: shard.shard,
                pending: in_shard.len() as u64,
                oldest_created_at: in_shard.first().map(|item| item.created_at.clone()),
            })
        }

        async fn partitions(&self) -> Result<IndexCounts, IndexError> {
            let mut counts = IndexCounts::default();
            for (item, in_index) in self.pending.lock().unwrap().iter() {
                if let (true, Some(partition)) = (*in_index, &item.gsi1pk) {
                    counts.count(partition, None);
                }
            }
            Ok(counts)
        }
    }

    impl HoldRelease for &World {
        /// The holds as they are when asked; with `interleave` set, answered only after the
        /// stream relay has had its turn (the poller read the holds before it).
        async fn page(
            &self,
            partition: &str,
            before: &str,
            limit: i32,
            start: Option<HoldCursor>,
        ) -> Result<HoldPage, SdkFailure> {
            let page = self.holds.page(partition, before, limit, start);
            if !page.holds.is_empty() && self.interleave.swap(false, Ordering::SeqCst) {
                self.asking.notify_one();
                self.answer.notified().await;
            }
            Ok(page)
        }

        async fn still_pending(&self, keys: &[ItemKey]) -> Result<HashSet<ItemKey>, SdkFailure> {
            let pending = self.pending.lock().unwrap();
            Ok(keys
                .iter()
                .filter(|key| pending.iter().any(|(item, _)| item.key() == **key))
                .cloned()
                .collect())
        }

        async fn release(&self, hold: &Hold) -> Result<bool, SdkFailure> {
            Ok(self.holds.release(hold))
        }

        async fn extend(&self, hold: &Hold) -> Result<bool, SdkFailure> {
            Ok(self.holds.extend(hold))
        }
    }

    /// Event `sequence` of [`ORDER`], written ten minutes ago (past any grace period).
    fn event(config: &OutboxConfig, sequence: u64) -> OutboxItem {
        let event = NewOutboxEvent {
            partition_key: outbox_shared::schema::user_pk("user-7"),
            event_type: "OrderUpdated".into(),
            aggregate_type: "Order".into(),
            aggregate_id: ORDER.into(),
            sequence: Some(sequence),
            payload: serde_json::json!({"orderId": ORDER, "version": sequence}),
            trace_header: None,
            trace_context: None,
        };
        let at = Utc::now() - chrono::Duration::minutes(10)
            + chrono::Duration::milliseconds(i64::try_from(sequence).unwrap());
        OutboxItem::pending(event, config, at).unwrap()
    }

    #[tokio::test]
    async fn a_hold_released_while_the_stream_relay_leaves_an_event_lets_no_later_event_overtake_it()
     {
        // Given order-7's first event E1 failed in the stream relay (hold mode): the order is held
        // and E1 left to the poller, which has published it since
        let config = OutboxConfig::new("orders");
        let (e1, e2, e3) = (event(&config, 1), event(&config, 2), event(&config, 3));
        let world = World::default();
        let (holds, dead_letters) = (&world.holds, FakeDeadLetters::default());
        let stream = StreamRelay::new(
            &world,
            &world,
            holds,
            Some(&dead_letters),
            HandlerOptions {
                hold_failed_aggregates: true,
                ..HandlerOptions::default()
            },
        );
        let poller = Poller::new(
            Ports {
                index: &world,
                publisher: &world,
                store: &world,
                dead_letters: &dead_letters,
                ttl: &world,
                holds: &world,
            },
            PollerSettings {
                partitions: relay_poller::partitions::Partitions::single_region(config.shard_count),
                page_size: 25,
                shard_concurrency: 4,
                mark_concurrency: 4,
                idle_backoff_max: Duration::from_millis(100),
                ttl_refresh_margin: Duration::from_secs(24 * 60 * 60),
                sweep_interval: Duration::from_secs(300),
                index_lag: relay_poller::DEFAULT_INDEX_LAG,
            },
        );
        let cancel = relay_poller::CancellationToken::new();
        let shards = StaticShards(
            config
                .shard_count
                .shards()
                .map(outbox_shared::schema::PendingPartition::from)
                .collect(),
        );
        world.write(&e1, true);
        world.fail_once.lock().unwrap().insert(e1.event_id.clone());
        stream
            .handle(&[fixtures::insert_record(&e1, 1)], Deadline::NONE)
            .await;
        assert!(holds.holds().contains_key(ORDER), "E1 failed: order held");
        let all = [&e1, &e2, &e3];

        // When E2 is written (the index does not show it yet), and the poller's pass publishes E1
        // and reads the order's hold, while the stream relay sees the hold and leaves E2 to the
        // poller before the poller releases what it read
        world.write(&e2, false);
        world.interleave.store(true, Ordering::SeqCst);
        let (_, e2_report) = tokio::join!(poller.pass(&shards, Utc::now(), &cancel), async {
            world.asking.notified().await;
            let report = stream
                .handle(&[fixtures::insert_record(&e2, 2)], Deadline::NONE)
                .await;
            world.answer.notify_one();
            report
        });
        assert_eq!(world.published(&all), ["E1"]);
        assert_eq!(e2_report.counts().left_to_hold, 1, "E2 left to the poller");
        assert!(holds.holds().contains_key(ORDER), "E2 keeps the order held");

        // And E3 comes through the stream, and the poller runs its next passes
        world.index_catches_up();
        world.write(&e3, true);
        stream
            .handle(&[fixtures::insert_record(&e3, 3)], Deadline::NONE)
            .await;
        for _ in 0..3 {
            poller.pass(&shards, Utc::now(), &cancel).await;
        }

        // Then the bus got order-7's events in order, and the hold is released once they are out
        assert_eq!(world.published(&all), ["E1", "E2", "E3"]);
        assert!(holds.holds().is_empty(), "{:?}", holds.holds());
    }
}

/// `item` as the stream relay leaves it under its aggregate's hold.
fn left(item: &outbox_shared::OutboxItem) -> relay_runtime::LeftEvent {
    relay_runtime::LeftEvent {
        key: item.key(),
        partition: item.gsi1pk.clone().unwrap(),
        sort_key: item.gsi1sk.clone().unwrap(),
    }
}

/// Every hold whose last event is under `partition`, as the poller reads them.
async fn holds_of(
    holds: &relay_runtime::DynamoHoldStore,
    partition: &str,
) -> Vec<relay_runtime::Hold> {
    use relay_runtime::HoldRelease;
    // `~` sorts after every `EVENT#…` sort key.
    holds.page(partition, "~", 100, None).await.unwrap().holds
}

#[tokio::test]
async fn a_hold_is_released_only_when_nothing_was_left_under_it_since_it_was_read_and_its_last_event_is_out()
 {
    use relay_runtime::{AggregateHolds, DynamoHoldStore, HoldRelease, StatusStore};

    // Given order-7's E1 held under shard partition P, and E2 pending under another partition (a
    // reshard) whose insertion the stream relay left under the hold after the poller read it
    let env = TestEnv::new().await;
    let mut items = fixtures::pending_items(&env.table_name, 2, chrono::Utc::now());
    for (i, item) in items.iter_mut().enumerate() {
        item.aggregate_id = Some("order-7".into());
        item.sequence = Some(i as u64 + 1);
    }
    items[1].gsi1pk = Some(outbox_shared::schema::pending_shard_pk(63));
    for item in &items {
        env.put_raw_item(serde_dynamo::to_item(item).unwrap()).await;
    }
    let (e1, e2) = (&items[0], &items[1]);
    let holds = DynamoHoldStore::new(
        env.dynamodb.clone(),
        &env.table_name,
        Duration::from_secs(7 * 24 * 3600),
    );
    let partition = e1.gsi1pk.clone().unwrap();
    holds.hold("order-7", &[left(e1)]).await.unwrap();
    let read = holds_of(&holds, &partition).await;
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].last_left, Some(e1.key()));
    assert_eq!(read[0].left_count, Some(1));
    assert!(read[0].ttl.is_some());
    assert!(holds.leave("order-7", &[left(e2)]).await.unwrap());
    let status = relay_runtime::DynamoStatusStore::new(
        env.dynamodb.clone(),
        &env.table_name,
        relay_runtime::TtlPolicy::new(Duration::from_secs(3600)),
    );
    status.mark_published(&[e1.key()]).await.remove(0).unwrap();

    // When the poller releases the hold as it read it
    let released = holds.release(&read[0]).await.unwrap();

    // Then the hold stays: E2 was left under it since, and the hold now follows E2, under the
    // hold partition of E2's partition, where the poller of that partition meets it
    assert!(!released);
    assert!(holds_of(&holds, &partition).await.is_empty());
    let hold = holds_of(&holds, e2.gsi1pk.as_deref().unwrap())
        .await
        .remove(0);
    assert_eq!(hold.last_left, Some(e2.key()));
    assert_eq!(hold.sort_key, e2.gsi1sk.clone().unwrap());
    assert_eq!(hold.left_count, Some(2));

    // And the hold store finds E2 pending
    assert_eq!(
        holds.still_pending(&[e1.key(), e2.key()]).await.unwrap(),
        HashSet::from([e2.key()])
    );

    // When E2 is published too
    status.mark_published(&[e2.key()]).await.remove(0).unwrap();

    // Then its last event is not pending, its release goes through, and the stream relay's next
    // leave finds it gone (the events are the stream relay's to publish again)
    assert!(holds.still_pending(&[e2.key()]).await.unwrap().is_empty());
    assert!(holds.release(&hold).await.unwrap());
    assert!(
        holds_of(&holds, e2.gsi1pk.as_deref().unwrap())
            .await
            .is_empty()
    );
    assert!(!holds.leave("order-7", &[left(e2)]).await.unwrap());
    // (with nothing to record too: a TTL deletion's event is left under no hold that is gone)
    assert!(!holds.leave("order-7", &[]).await.unwrap());
    assert!(!holds.extend(&hold).await.unwrap());
}

#[tokio::test]
async fn a_holds_item_stays_the_same_size_however_many_events_are_left_under_it() {
    use relay_runtime::{AggregateHolds, DynamoHoldStore};

    // Given an aggregate held through a long outage: 5,000 events left under its hold, 100 to a
    // batch (an item is at most 400 KB; a record of every event would pass it after about 4,000)
    let env = TestEnv::new().await;
    let holds = DynamoHoldStore::new(
        env.dynamodb.clone(),
        &env.table_name,
        Duration::from_secs(7 * 24 * 3600),
    );
    let items = fixtures::pending_items(&env.table_name, 5_000, chrono::Utc::now());
    let key = relay_runtime::testing::hold_item_key("order-hot");

    // When the stream relay holds it and leaves the rest, a batch at a time
    let mut sizes = Vec::new();
    for (i, batch) in items.chunks(100).enumerate() {
        let batch: Vec<_> = batch.iter().map(left).collect();
        if i == 0 {
            holds.hold("order-hot", &batch).await.unwrap();
        } else {
            assert!(holds.leave("order-hot", &batch).await.unwrap(), "batch {i}");
        }
        let item = env
            .dynamodb
            .get_item()
            .table_name(&env.table_name)
            .set_key(Some(key.clone()))
            .consistent_read(true)
            .send()
            .await
            .unwrap()
            .item
            .unwrap();
        sizes.push(outbox_tests::dynamodb_rules::item_size(&item));
    }

    // Then every write succeeded and the item never grew past its first size by more than the
    // digits of its count: the cost of a write does not grow with the events left
    let (first, largest) = (sizes[0], *sizes.iter().max().unwrap());
    assert!(largest <= first + 3, "sizes {sizes:?}");
    assert!(largest < 1024, "largest {largest} bytes");
}

/// The partition of the event the held aggregate of [`ReleasedAfterTheRead`] left last.
const HELD_PARTITION: &str = "OUTBOX#PENDING#5";

/// The table's holds (the DynamoDB adapter), whose every hold (under [`HELD_PARTITION`]) the
/// poller releases right after this relay read it, before this relay records what it leaves
/// under it.
struct ReleasedAfterTheRead(relay_runtime::DynamoHoldStore);

impl relay_runtime::AggregateHolds for ReleasedAfterTheRead {
    async fn held(
        &self,
        ordering_keys: &[String],
    ) -> Result<HashSet<String>, outbox_shared::SdkFailure> {
        use relay_runtime::HoldRelease;
        let held = self.0.held(ordering_keys).await?;
        for hold in holds_of(&self.0, HELD_PARTITION).await {
            assert!(self.0.release(&hold).await?, "the poller releases the hold");
        }
        Ok(held)
    }

    async fn leave(
        &self,
        ordering_key: &str,
        left: &[relay_runtime::LeftEvent],
    ) -> Result<bool, outbox_shared::SdkFailure> {
        self.0.leave(ordering_key, left).await
    }

    async fn hold(
        &self,
        ordering_key: &str,
        left: &[relay_runtime::LeftEvent],
    ) -> Result<(), outbox_shared::SdkFailure> {
        self.0.hold(ordering_key, left).await
    }
}

#[tokio::test]
async fn in_hold_mode_a_ttl_deletion_just_after_its_holds_release_is_published_not_dead_lettered() {
    use relay_runtime::AggregateHolds;

    // Given aggregate o-91 held on the table, and the recorded TTL deletion of its pending event,
    // whose hold the poller releases just after the stream relay read it
    let env = TestEnv::new().await;
    let holds = relay_runtime::DynamoHoldStore::new(
        env.dynamodb.clone(),
        &env.table_name,
        Duration::from_secs(7 * 24 * 3600),
    );
    holds
        .hold(
            "o-91",
            &[relay_runtime::testing::left_event(
                "earlier",
                HELD_PARTITION,
            )],
        )
        .await
        .unwrap();
    let relay = relay_stream::StreamRelay::new(
        env.publisher(env.publisher_config()),
        relay_runtime::DynamoStatusStore::new(
            env.dynamodb.clone(),
            &env.table_name,
            relay_runtime::TtlPolicy::default(),
        ),
        ReleasedAfterTheRead(holds.clone()),
        Some(relay_runtime::SqsDeadLetterSink::new(
            env.sqs.clone(),
            &env.dead_letter_queue_url,
        )),
        relay_stream::HandlerOptions {
            hold_failed_aggregates: true,
            ..relay_stream::HandlerOptions::default()
        },
    );
    let mut records = serde_json::from_str::<relay_stream::aws_lambda_events::dynamodb::Event>(
        include_str!("../fixtures/stream/removals-of-pending-events.json"),
    )
    .unwrap()
    .records;
    records.truncate(1);

    // When the batch is handled in hold mode
    let report = relay.handle(&records, Deadline::NONE).await;

    // Then the event is published (its aggregate is not held any more), nothing is dead-lettered
    // and no hold is written
    assert!(
        matches!(&report.outcomes[0], RecordOutcome::Published { .. }),
        "{report:?}"
    );
    let delivered = env.wait_for_sink(1, Duration::from_secs(10)).await;
    assert_eq!(delivered.len(), 1);
    assert_eq!(
        delivered[0].event_id(),
        "0194b001-0000-7000-8000-000000000001"
    );
    assert!(env.drain_dead_letters().await.is_empty());
    assert!(holds_of(&holds, HELD_PARTITION).await.is_empty());
}

#[tokio::test]
async fn in_hold_mode_a_throttling_burst_on_the_holds_read_is_outlasted_not_re_delivered() {
    use outbox_tests::emulator_endpoints;
    use outbox_tests::fault_proxy::{BATCH_GET_ITEM, FaultProxy, FaultRates};

    // Given 3 orders on the stream, and a stream relay in hold mode whose DynamoDB calls meet a
    // throttling burst: the next 5 BatchGetItem calls leave every key unprocessed
    let env = TestEnv::new().await;
    let ids: Vec<String> = (0..3).map(|i| format!("burst-{i}")).collect();
    let event_ids = create_orders(&env.writer(), &ids).await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 11).await;
    proxy.leave_keys_unprocessed(5);
    let mut args = relay_args(&env);
    args.hold_failed_aggregates = true;
    let relay = relay_stream::build_relay_with(
        &args,
        env.publisher(args.publisher_config().unwrap()),
        env.dynamodb_through(&proxy),
        env.sqs.clone(),
    )
    .unwrap();
    let records = relay_stream_local::read_stream_records(&env.streams, &env.stream_arn)
        .await
        .unwrap();

    // When the batch is handled
    let report = relay.handle(&records, Deadline::NONE).await;

    // Then the relay read the holds after the burst and published every event: nothing is
    // re-delivered
    assert_eq!(report.first_unpublished, None, "{:?}", report.outcomes);
    assert_eq!(report.counts().published, 3, "{:?}", report.outcomes);
    assert_eq!(proxy.counts_for(BATCH_GET_ITEM).throttled_calls, 5);
    let delivered = env.wait_for_sink(3, Duration::from_secs(10)).await;
    let mut delivered: Vec<String> = delivered.iter().map(|d| d.event_id().to_owned()).collect();
    delivered.sort();
    let mut expected = event_ids;
    expected.sort();
    assert_eq!(delivered, expected);
}

#[tokio::test]
async fn a_hold_of_the_earlier_layout_is_moved_beside_its_events_and_released_by_a_drain() {
    // Given order-9's event pending and held under a hold as the earlier release wrote it: in
    // the one partition of every hold, with every event left in a set
    let env = TestEnv::new().await;
    let mut items = fixtures::pending_items(&env.table_name, 1, chrono::Utc::now());
    items[0].aggregate_id = Some("order-9".into());
    let event = items[0].clone();
    env.put_raw_item(serde_dynamo::to_item(&event).unwrap())
        .await;
    let s = |v: &str| aws_sdk_dynamodb::types::AttributeValue::S(v.to_owned());
    let mut legacy = relay_runtime::testing::hold_item_key("order-9");
    legacy.extend([
        ("EntityType".to_owned(), s("AggregateHold")),
        ("OrderingKey".to_owned(), s("order-9")),
        (
            "HeldPartition".to_owned(),
            s(event.gsi1pk.as_deref().unwrap()),
        ),
        ("HeldSince".to_owned(), s("2026-11-20T10:00:00.000Z")),
        ("GSI1PK".to_owned(), s("OUTBOX#HOLD")),
        ("GSI1SK".to_owned(), s("HOLD#order-9")),
        (
            "LeftEvents".to_owned(),
            aws_sdk_dynamodb::types::AttributeValue::Ss(vec![relay_runtime::holds::left_element(
                &event.key(),
            )]),
        ),
    ]);
    env.put_raw_item(legacy).await;

    // When the poller drains, the hold first moved beside its events as `drain` moves it
    relay_poller::aws::legacy_holds(&env.dynamodb, &poller_config(&env), Duration::ZERO)
        .migrate()
        .await;
    let summary = drain(&env, |config| env.publisher(config.publisher.clone())).await;

    // Then the event is published, and the hold moved beside it and released: nothing is left
    // in the index, the old partition included
    assert!(summary.complete, "{summary:?}");
    assert_eq!(summary.published, 1, "{summary:?}");
    assert_eq!(summary.holds_released, 1, "{summary:?}");
    assert_eq!(
        env.pending_in_index().await,
        0,
        "no event and no hold is left"
    );
}

#[tokio::test]
async fn the_stream_relay_moves_a_hold_of_the_earlier_layout_when_it_leaves_an_event_under_it() {
    use relay_runtime::{AggregateHolds, DynamoHoldStore};

    // Given order-8 held as the earlier release wrote it
    let env = TestEnv::new().await;
    let items = fixtures::pending_items(&env.table_name, 1, chrono::Utc::now());
    let s = |v: &str| aws_sdk_dynamodb::types::AttributeValue::S(v.to_owned());
    let mut legacy = relay_runtime::testing::hold_item_key("order-8");
    legacy.extend([
        ("EntityType".to_owned(), s("AggregateHold")),
        ("OrderingKey".to_owned(), s("order-8")),
        ("HeldPartition".to_owned(), s("OUTBOX#PENDING#3")),
        ("HeldSince".to_owned(), s("2026-11-20T10:00:00.000Z")),
        ("GSI1PK".to_owned(), s("OUTBOX#HOLD")),
        ("GSI1SK".to_owned(), s("HOLD#order-8")),
        (
            "LeftEvents".to_owned(),
            aws_sdk_dynamodb::types::AttributeValue::Ss(vec!["[\"USER#u\",\"OUTBOX#old\"]".into()]),
        ),
    ]);
    env.put_raw_item(legacy).await;
    let holds = DynamoHoldStore::new(
        env.dynamodb.clone(),
        &env.table_name,
        Duration::from_secs(7 * 24 * 3600),
    );

    // When the stream relay leaves an event under it
    assert!(holds.leave("order-8", &[left(&items[0])]).await.unwrap());

    // Then the hold follows that event, without its set of every event, and keeps its age
    let hold = holds_of(&holds, items[0].gsi1pk.as_deref().unwrap())
        .await
        .remove(0);
    assert_eq!(hold.last_left, Some(items[0].key()));
    assert_eq!(hold.held_since, "2026-11-20T10:00:00.000Z");
    let item = env
        .dynamodb
        .get_item()
        .table_name(&env.table_name)
        .set_key(Some(relay_runtime::testing::hold_item_key("order-8")))
        .send()
        .await
        .unwrap()
        .item
        .unwrap();
    assert!(!item.contains_key("LeftEvents"), "{item:?}");
    assert!(!item.contains_key("HeldPartition"), "{item:?}");
}
