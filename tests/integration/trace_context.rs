//! The caller's trace context reaches the consumer.
//!
//! X-Ray's: an order written with a trace header carries it in its outbox item, and the relay puts
//! it on the `PutEvents` entry's `TraceHeader`. EventBridge does not copy `TraceHeader` into the
//! delivered event (it is X-Ray context, not event data), and neither does the emulator, so the
//! sink cannot show it. The test reads it where it travels: the stream record's image, and the
//! `PutEvents` request of a real relay run, captured by an SDK interceptor on the relay's
//! EventBridge client (it only reads the request).
//!
//! W3C Trace Context, on both buses: an order written in the order service's span carries its
//! `traceparent`; the real relay binaries, pointed at the OTLP receiver by the standard `OTEL_*`
//! variables, export spans linked to it; the example consumer continues the trace from the event.
//! What the receiver (OpenTelemetry's own protobuf classes) got is the evidence: one trace from
//! `create_order_with_outbox` to the consumer.
//!
//! CloudEvents, on both buses: what the sink received with `EVENT_FORMAT=cloudevents` is parsed by
//! the CloudEvents SDK for Python (`tools/cloudevents_check.py`), a client we did not write.

use relay_runtime::Deadline;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use outbox_shared::envelope::EventFormat;
use outbox_shared::schema::attr;
use outbox_tests::{TestEnv, fixtures};
use outbox_writer::{NewOrder, OrderLine, TraceContext, TraceHeader};
use relay_runtime::{PublisherArgs, TargetKind};
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
        regions: relay_runtime::RegionArgs::default(),
        lease_table: None,
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

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// An order of one line of `sku`.
fn order_of(sku: &str) -> NewOrder {
    NewOrder::new(vec![OrderLine {
        sku: sku.into(),
        quantity: 1,
        unit_price_cents: 100,
    }])
}

/// The example consumer's tables, with `sku` stocked.
async fn example_consumer(
    env: &TestEnv,
    sku: &str,
) -> (
    outbox_consumer::IdempotencyStore,
    order_consumer::DynamoInventory,
) {
    use outbox_consumer::{IdempotencyConfig, IdempotencyStore, OccTable, occ::OccConfig};
    let idempotency = outbox_tests::unique_name("idempotency");
    outbox_consumer::tables::create_idempotency_table(&env.dynamodb, &idempotency)
        .await
        .unwrap();
    let stock = outbox_tests::unique_name("stock");
    order_consumer::stock::create_stock_table(&env.dynamodb, &stock)
        .await
        .unwrap();
    order_consumer::stock::put_stock(&env.dynamodb, &stock, sku, 5)
        .await
        .unwrap();
    let store =
        IdempotencyStore::new(env.dynamodb.clone(), IdempotencyConfig::new(idempotency)).unwrap();
    let occ = OccTable::new(
        env.dynamodb.clone(),
        OccConfig::new(stock, order_consumer::stock::attr::VERSION),
    )
    .unwrap();
    (store, order_consumer::DynamoInventory::new(occ))
}

/// The sink's messages as Lambda's SQS event source hands them to a function (id, body, the
/// system attributes such as `AWSTraceHeader`), `count` of them, read and deleted.
async fn sink_messages(env: &TestEnv, count: usize) -> Vec<order_consumer::SqsMessage> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut messages = Vec::new();
    while messages.len() < count && std::time::Instant::now() < deadline {
        for message in env.drain_queue(&env.sink_queue_url).await {
            let mut record = order_consumer::SqsMessage::default();
            record.message_id = message.message_id().map(str::to_owned);
            record.body = message.body().map(str::to_owned);
            for (name, value) in message.attributes().into_iter().flatten() {
                record
                    .attributes
                    .insert(name.as_str().to_owned(), value.clone());
            }
            messages.push(record);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    messages
}

on_both_buses!(one_trace_runs_from_the_order_through_the_relays_to_the_example_consumer);
async fn one_trace_runs_from_the_order_through_the_relays_to_the_example_consumer(
    kind: TargetKind,
) {
    use outbox_tests::otlp::{self, AppTracing};
    use tracing::Instrument as _;
    use tracing::instrument::WithSubscriber as _;

    // Given an order service and a consumer that export their spans to the OTLP receiver
    let env = TestEnv::with_bus(kind).await;
    let service = AppTracing::new("order-service");
    let consumer = AppTracing::new("order-consumer");
    let sku = format!("sku-{}", outbox_tests::unique_name("traced"));

    // When the service creates an order in its span
    let placing =
        tracing::dispatcher::with_default(&service.dispatch, || tracing::info_span!("place order"));
    let created = env
        .writer()
        .create_order_with_outbox("traced-user", order_of(&sku))
        .instrument(placing)
        .with_subscriber(service.dispatch.clone())
        .await
        .unwrap();
    service.flush().await;

    // Then the outbox item carries that span's W3C context
    let item = env
        .outbox_items()
        .await
        .into_iter()
        .find(|i| i.event_id == created.event_id)
        .expect("the outbox item");
    let writer = item
        .trace_context()
        .0
        .expect("the writer stored a traceparent");
    let (trace_id, writer_span) = (writer.trace_id().to_owned(), writer.parent_id().to_owned());

    // When the stream relay (the real binary, exporting by the standard variables) publishes it
    let output = env
        .relay_command("relay-stream-local")
        .args(["--from", "trim-horizon", "--exit-when-idle", "2s"])
        .envs(otlp::relay_otel_env("relay-stream-local"))
        .output()
        .await
        .expect("relay-stream-local runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // And the example consumer handles what its queue received, continuing the event's trace
    let messages = sink_messages(&env, 1).await;
    assert_eq!(messages.len(), 1, "{messages:?}");
    let (store, inventory) = example_consumer(&env, &sku).await;
    let processor = order_consumer::processor(
        outbox_consumer::PayloadResolver::new(env.s3.clone(), outbox_tests::NO_PAYLOAD_BUCKET),
        store,
    );
    let mut event = order_consumer::SqsEvent::default();
    event.records = messages;
    let batch = order_consumer::handle_sqs_batch(
        &event,
        &outbox_consumer::Invocation::default(),
        &processor,
        &inventory,
    )
    .with_subscriber(consumer.dispatch.clone())
    .await;
    assert!(
        batch.sqs_response().batch_item_failures.is_empty(),
        "{batch:?}"
    );
    assert!(
        matches!(
            batch.items[0].status,
            outbox_consumer::ItemStatus::Done(outbox_consumer::Processed::Handled(Some(_)))
        ),
        "{batch:?}"
    );
    consumer.flush().await;

    // Then the receiver holds one trace from the order service's span to the consumer's
    // `process` span, its child, linked to it as its creation context
    let trace = otlp::wait_for(
        Duration::from_secs(20),
        || otlp::spans_of_trace(&trace_id),
        |spans| otlp::named(spans, "order-consumer", "process").is_some(),
    )
    .await;
    let placed = otlp::named(&trace, "order-service", "place order").expect("the service's span");
    assert_eq!(placed["span_id"], writer_span.as_str());
    let process = otlp::named(&trace, "order-consumer", "process").expect("the consumer's span");
    assert_eq!(process["parent_span_id"], writer_span.as_str(), "{process}");
    assert_eq!(process["kind"], "SPAN_KIND_CONSUMER");
    assert_eq!(process["attributes"]["messaging.operation.type"], "process");
    assert_eq!(
        process["attributes"]["messaging.message.id"],
        created.event_id.as_str()
    );
    assert_eq!(process["links"][0]["span_id"], writer_span.as_str());

    // And the relay's spans, each in a trace of its own, link to the writer's span as the
    // messaging conventions say for a batch: the publish to the bus, then the mark
    let linked = otlp::wait_for(
        Duration::from_secs(20),
        || otlp::spans_linked_to(&trace_id),
        |spans| otlp::named(spans, "relay-stream-local", "mark").is_some(),
    )
    .await;
    let publish_name = format!("publish {}", env.bus_name);
    let publish =
        otlp::named(&linked, "relay-stream-local", &publish_name).expect("the publish span");
    assert_eq!(publish["kind"], "SPAN_KIND_CLIENT");
    let attributes = &publish["attributes"];
    assert_eq!(attributes["messaging.system"], "aws_eventbridge");
    assert_eq!(attributes["messaging.operation.type"], "send");
    assert_eq!(
        attributes["messaging.destination.name"],
        env.bus_name.as_str()
    );
    assert_eq!(attributes["messaging.batch.message_count"], 1);
    assert_eq!(attributes["outbox.relay"], "relay-stream");
    let link = &publish["links"][0];
    assert_eq!(
        (link["trace_id"].as_str(), link["span_id"].as_str()),
        (Some(trace_id.as_str()), Some(writer_span.as_str()))
    );
    assert_eq!(
        link["attributes"]["messaging.message.id"],
        created.event_id.as_str()
    );
    assert_eq!(link["attributes"]["outbox.outcome"], "published");
    assert_ne!(publish["trace_id"], trace_id.as_str());
    let mark = otlp::named(&linked, "relay-stream-local", "mark").expect("the mark span");
    assert_eq!(mark["attributes"]["messaging.operation.type"], "settle");
    assert_eq!(mark["links"][0]["attributes"]["outbox.outcome"], "marked");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_poller_exports_its_publish_linked_to_the_writers_span_and_nothing_without_the_variables()
 {
    use outbox_tests::otlp;

    // Given two orders written with the same caller's trace context, no stream relay running
    let env = TestEnv::new().await;
    let context = TraceContext::new(TRACEPARENT, Some("rojo=00f067aa0ba902b7")).unwrap();
    for n in 0..2 {
        env.writer()
            .create_order_with_outbox(
                &format!("poller-user-{n}"),
                order_of("sku-1").with_trace_context(context.clone()),
            )
            .await
            .unwrap();
    }
    let before = otlp::spans_linked_to(context.trace_id()).await.len();

    // When a drain without the OTEL variables publishes the first, and one with them the second
    let drain = |otel: bool| {
        let mut command = env.relay_command("relay-poller");
        command.args(["drain", "--grace-period", "0s"]);
        if otel {
            command.envs(otlp::relay_otel_env("relay-poller"));
        }
        command.output()
    };
    let quiet = drain(false).await.expect("relay-poller runs");
    assert!(
        quiet.status.success(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
    let spans_after_quiet = otlp::spans_linked_to(context.trace_id()).await.len();
    env.writer()
        .create_order_with_outbox(
            "poller-user-2",
            order_of("sku-1").with_trace_context(context.clone()),
        )
        .await
        .unwrap();
    let exported = drain(true).await.expect("relay-poller runs");
    assert!(
        exported.status.success(),
        "{}",
        String::from_utf8_lossy(&exported.stderr)
    );

    // Then nothing was exported without them, and with them the poller's publish span links to
    // the writer's span with its trace state
    assert_eq!(spans_after_quiet, before);
    let linked = otlp::wait_for(
        Duration::from_secs(20),
        || otlp::spans_linked_to(context.trace_id()),
        |spans| otlp::named(spans, "relay-poller", "mark").is_some(),
    )
    .await;
    let publish = otlp::named(
        &linked,
        "relay-poller",
        &format!("publish {}", env.bus_name),
    )
    .expect("the poller's publish span");
    assert_eq!(publish["attributes"]["outbox.relay"], "relay-poller");
    assert_eq!(publish["links"][0]["span_id"], context.parent_id());
    // And the delivered envelope carries the trace context as the writer was given it
    let delivered = env.wait_for_sink(3, Duration::from_secs(30)).await;
    for message in &delivered {
        let metadata = &message.envelope.metadata;
        assert_eq!(metadata.traceparent.as_deref(), Some(TRACEPARENT));
        assert_eq!(
            metadata.tracestate.as_deref(),
            Some("rojo=00f067aa0ba902b7")
        );
    }
}

#[tokio::test]
async fn an_invalid_traceparent_another_client_wrote_is_dropped_and_the_event_published() {
    // Given an outbox item another client wrote with a traceparent the W3C specification refuses
    let env = TestEnv::new().await;
    let mut item = outbox_tests::minimal_outbox_item(
        "other-client",
        "other-event-1",
        "OrderCreated",
        "{}",
        &outbox_shared::time::format_timestamp(chrono::Utc::now()),
        0,
    );
    item.insert(
        attr::TRACE_PARENT.to_owned(),
        aws_sdk_dynamodb::types::AttributeValue::S("00-ABC-not-a-trace".into()),
    );
    env.put_raw_item(item).await;

    // When the stream relay publishes it
    let args = fixtures::stream_relay_args(&env.table_name, env.publisher_args());
    let relay = relay_stream::build_relay(&args, &env.sdk_config).unwrap();
    let records = relay_stream_local::read_stream_records(&env.streams, &env.stream_arn)
        .await
        .unwrap();
    let report = relay.handle(&records, Deadline::NONE).await;

    // Then it is published (not poison), without a trace context
    assert_eq!(report.counts().published, 1, "{report:?}");
    let delivered = env.wait_for_sink(1, Duration::from_secs(30)).await;
    assert_eq!(delivered[0].envelope.metadata.traceparent, None);
}

/// Parses `bodies` with the CloudEvents SDK for Python (`tools/cloudevents_check.py`): what it
/// read of each.
async fn parsed_by_the_cloudevents_sdk(bodies: &[String]) -> Vec<Value> {
    let python = outbox_tests::workspace_root().join(".venv/bin/python");
    let mut child = tokio::process::Command::new(&python)
        .arg(outbox_tests::workspace_root().join("tools/cloudevents_check.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (scripts/emulator.sh install puts it there)",
                python.display()
            )
        });
    let input = serde_json::to_vec(bodies).unwrap();
    {
        use tokio::io::AsyncWriteExt as _;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(&input).await.unwrap();
    }
    let output = child.wait_with_output().await.unwrap();
    assert!(
        output.status.success(),
        "the CloudEvents SDK refused them: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

on_every_target!(cloudevents_the_relays_publish_are_read_by_the_cloudevents_sdk);
async fn cloudevents_the_relays_publish_are_read_by_the_cloudevents_sdk(kind: TargetKind) {
    // Given an order written in a caller's trace, and the stream relay publishing CloudEvents
    let env = TestEnv::with_target(kind).await;
    let context = TraceContext::new(TRACEPARENT, Some("rojo=1")).unwrap();
    let created = env
        .writer()
        .create_order_with_outbox("ce-user", order_of("sku-ce").with_trace_context(context))
        .await
        .unwrap();
    let args = fixtures::stream_relay_args(
        &env.table_name,
        PublisherArgs {
            event_format: EventFormat::CloudEvents,
            ..env.publisher_args()
        },
    );
    let relay = relay_stream::build_relay(&args, &env.sdk_config).unwrap();
    let records = relay_stream_local::read_stream_records(&env.streams, &env.stream_arn)
        .await
        .unwrap();
    assert_eq!(
        relay
            .handle(&records, Deadline::NONE)
            .await
            .counts()
            .published,
        1
    );

    // When what the sink received is parsed by the CloudEvents SDK
    let delivered = env.wait_for_sink(1, Duration::from_secs(30)).await;
    assert_eq!(delivered.len(), 1);
    let event = &delivered[0].event;
    let cloudevent = match kind {
        // The Custom Event Bus: a raw event, delivered as it was published
        TargetKind::Custom => {
            assert!(event.get("detail").is_none(), "not a raw event: {event}");
            event.clone()
        }
        // The classic bus: the CloudEvent is the EventBridge event's detail; SNS and SQS: the
        // message's body, Kinesis: the record's data (read by the sink as a detail)
        _ => event["detail"].clone(),
    };
    let [parsed]: [Value; 1] = parsed_by_the_cloudevents_sdk(&[cloudevent.to_string()])
        .await
        .try_into()
        .unwrap();

    // Then it is a CloudEvents 1.0 event with the outbox's attributes and extensions
    let attributes = &parsed["attributes"];
    assert_eq!(attributes["specversion"], "1.0");
    assert_eq!(attributes["id"], created.event_id.as_str());
    assert_eq!(attributes["source"], outbox_tests::TEST_SOURCE);
    assert_eq!(attributes["type"], "OrderCreated");
    assert_eq!(attributes["subject"], created.order_id.as_str());
    assert_eq!(attributes["datacontenttype"], "application/json");
    assert_eq!(attributes["sequence"], "00000000000000000001");
    assert_eq!(attributes["partitionkey"], created.order_id.as_str());
    assert_eq!(attributes["traceparent"], TRACEPARENT);
    assert_eq!(attributes["tracestate"], "rojo=1");
    let item = env
        .outbox_items()
        .await
        .into_iter()
        .find(|i| i.event_id == created.event_id)
        .unwrap();
    let written = chrono::DateTime::parse_from_rfc3339(&item.created_at).unwrap();
    let read = chrono::DateTime::parse_from_rfc3339(attributes["time"].as_str().unwrap()).unwrap();
    assert_eq!(read, written);
    assert_eq!(parsed["data"]["orderId"], created.order_id.as_str());
    assert_eq!(parsed["data"]["items"][0]["sku"], "sku-ce");

    // And the consumer crate reads it as the envelope the default format carries
    let envelope = &delivered[0].envelope;
    assert_eq!(envelope.metadata.event_id, created.event_id);
    assert_eq!(envelope.metadata.sequence, Some(1));
    assert_eq!(envelope.metadata.aggregate_type.as_deref(), Some("Order"));
    assert_eq!(envelope.metadata.traceparent.as_deref(), Some(TRACEPARENT));
    assert_eq!(envelope.data, parsed["data"]);
}
