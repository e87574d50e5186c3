//! The caller's trace context reaches the bus: an order written with a trace header carries it in
//! its outbox item, and the relay puts it on the `PutEvents` entry's `TraceHeader`.
//!
//! EventBridge does not copy `TraceHeader` into the delivered event (it is X-Ray context, not event
//! data), and neither does the emulator, so the sink cannot show it. The test reads it where it
//! travels: the stream record's image, and the `PutEvents` request of a real relay run, captured
//! by an SDK interceptor on the relay's EventBridge client (it only reads the request).

use relay_runtime::Deadline;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use outbox_shared::schema::attr;
use outbox_tests::{TestEnv, fixtures};
use outbox_writer::{NewOrder, OrderLine, TraceHeader};
use relay_runtime::PublisherArgs;
use relay_stream::RelayArgs;
use serde_json::Value;

const TRACE: &str = "Root=1-6740f3a2-5b1c0e0f6a3d4b2c1d0e9f8a;Parent=53995c3f42cd8ad8;Sampled=1";

/// Records every `PutEvents` entry the client sends.
#[derive(Debug, Clone, Default)]
struct EntryRecorder(Arc<Mutex<Vec<Value>>>);

impl Intercept for EntryRecorder {
    fn name(&self) -> &'static str {
        "PutEventsEntryRecorder"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(bytes) = context.request().body().bytes() {
            let body: Value = serde_json::from_slice(bytes)?;
            if let Some(entries) = body["Entries"].as_array() {
                self.0.lock().unwrap().extend(entries.iter().cloned());
            }
        }
        Ok(())
    }
}

#[tokio::test]
async fn an_orders_trace_header_travels_to_the_put_events_entry() {
    // Given an order written with the caller's trace header
    let env = TestEnv::new().await;
    let order = NewOrder::new(vec![OrderLine {
        sku: "sku-1".into(),
        quantity: 1,
        unit_price_cents: 100,
    }])
    .with_trace_header(TraceHeader::new(TRACE).unwrap());
    let created = env
        .writer()
        .create_order_with_outbox("traced-user", order)
        .await
        .unwrap();

    // Then its outbox item carries it
    let item = env
        .outbox_items()
        .await
        .into_iter()
        .find(|i| i.event_id == created.event_id)
        .expect("the outbox item");
    assert_eq!(item.trace_header.as_deref(), Some(TRACE));

    // When the stream relay publishes it through a recording EventBridge client
    let recorder = EntryRecorder::default();
    let eventbridge = aws_sdk_eventbridge::Client::from_conf(
        aws_sdk_eventbridge::config::Builder::from(&env.sdk_config)
            .interceptor(recorder.clone())
            .build(),
    );
    let args = RelayArgs {
        table_name: env.table_name.clone(),
        publisher: PublisherArgs {
            publish_concurrency: 4,
            publish_max_attempts: 4,
            ..fixtures::publisher_args(&env.bus_name)
        },
        retention: relay_runtime::RetentionArgs::default(),
        dead_letter_queue_url: Some(env.dead_letter_queue_url.clone()),
        mark_concurrency: 8,
        stop_at_first_failure: false,
        deadline_margin: relay_stream::config::DEFAULT_DEADLINE_MARGIN,
        hold_failed_aggregates: false,
    };
    let relay = relay_stream::build_relay_with(
        &args,
        outbox_tests::fixtures::classic_publisher(eventbridge, args.publisher_config().unwrap()),
        env.dynamodb.clone(),
        env.sqs.clone(),
    )
    .unwrap();
    let records = relay_stream_local::read_stream_records(&env.streams, &env.stream_arn)
        .await
        .unwrap();
    let image_trace =
        records
            .iter()
            .find_map(|r| match r.change.new_image.get(attr::TRACE_HEADER) {
                Some(serde_dynamo::AttributeValue::S(t)) => Some(t.clone()),
                _ => None,
            });
    assert_eq!(image_trace.as_deref(), Some(TRACE), "the stream record");
    let report = relay.handle(&records, Deadline::NONE).await;
    assert_eq!(report.counts().published, 1, "{report:?}");

    // Then the PutEvents entry carried the trace header, and the event reached the sink
    let entries = recorder.0.lock().unwrap().clone();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0]["TraceHeader"], TRACE);
    let delivered = env.wait_for_sink(1, Duration::from_secs(30)).await;
    assert_eq!(delivered[0].event_id(), created.event_id);
}
