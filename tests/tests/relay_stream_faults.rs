//! The stream handler under injected `PutEvents` faults, against the emulator.
//!
//! An SDK interceptor on the real EventBridge client removes faulted entries from the request
//! before it is sent (so a faulted entry really is not delivered) and puts a failed result back in
//! their place in the response. Decisions are deterministic: a seeded hash of the event id picks
//! the ~30% of entries whose first attempt fails with `ThrottlingException`; an "outage" fails
//! every call holding a marked event with HTTP 500; a marked event is always rejected with
//! `MalformedDetail`.

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
use outbox_tests::{TEST_SOURCE, TestEnv};
use outbox_writer::{NewOrder, OrderLine, OutboxWriter, WriterConfig};
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
    let writer = OutboxWriter::new(
        env.dynamodb.clone(),
        WriterConfig::new(env.outbox_config(), TEST_SOURCE),
    )
    .unwrap();
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
    let args = RelayArgs {
        table_name: env.table_name.clone(),
        event_bus_name: env.bus_name.clone(),
        source: TEST_SOURCE.to_owned(),
        dead_letter_queue_url: Some(env.dead_letter_queue_url.clone()),
        max_entries_per_call: 10,
        max_request_bytes: 256 * 1024,
        max_entry_bytes: 256 * 1024,
        publish_concurrency: 4,
        publish_max_attempts: 4,
        mark_concurrency: 32,
        stop_at_first_failure: false,
    };
    let relay =
        relay_stream::build_relay_with(&args, eventbridge, env.dynamodb.clone(), env.sqs.clone())
            .unwrap();
    let records = relay_stream::local::read_stream_records(&env.streams, &env.stream_arn)
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
    let report = relay.handle(&records).await;
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
    let redelivered = relay.handle(&records[first_late..]).await;
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
