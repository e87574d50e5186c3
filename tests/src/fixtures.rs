//! What the tests and benchmarks build their inputs from: outbox items, the stream records
//! Lambda would hand the relay for them, and the relays' flags at their defaults.

use chrono::{DateTime, Utc};
use outbox_shared::schema;
use outbox_shared::{NewOutboxEvent, OutboxConfig, OutboxItem};
use relay_runtime::{ClassicBus, PublisherArgs, PublisherConfig, TargetPublisher};
use relay_stream::aws_lambda_events::dynamodb::EventRecord;

/// `count` pending `OrderCreated` events for `table`, one per aggregate (`order-{i}`) over 100
/// users, the first created at `created` and each next one a millisecond later.
///
/// # Panics
/// Never for these events (they are valid by construction).
pub fn pending_items(table: &str, count: usize, created: DateTime<Utc>) -> Vec<OutboxItem> {
    let config = OutboxConfig::new(table);
    (0..count)
        .map(|i| {
            let order = format!("order-{i}");
            let event = NewOutboxEvent {
                partition_key: schema::user_pk(&format!("user-{}", i % 100)),
                event_type: "OrderCreated".into(),
                aggregate_type: "Order".into(),
                aggregate_id: order.clone(),
                sequence: Some(1),
                payload: serde_json::json!({"orderId": order, "amountCents": 2500}),
                trace_header: None,
                trace_context: None,
            };
            let at = created + chrono::Duration::milliseconds(i as i64);
            OutboxItem::pending(event, &config, at).expect("a valid event")
        })
        .collect()
}

/// The stream record of `item`'s insertion, at position `sequence` of its shard.
///
/// # Panics
/// Never for an [`OutboxItem`] (it always serializes).
pub fn insert_record(item: &OutboxItem, sequence: usize) -> EventRecord {
    let mut record = EventRecord::default();
    record.event_name = "INSERT".into();
    record.change.new_image = serde_dynamo::to_item(item).expect("an outbox item serializes");
    record.change.sequence_number = Some(format!("{sequence:020}"));
    record.change.approximate_creation_date_time = Utc::now();
    record
}

/// The classic bus's publisher of `config` through `eventbridge`, a client a test built (to inject
/// faults or count calls).
///
/// # Panics
/// When `config` is not a valid classic configuration.
pub fn classic_publisher(
    eventbridge: aws_sdk_eventbridge::Client,
    config: PublisherConfig,
) -> TargetPublisher {
    TargetPublisher::on(ClassicBus::new(eventbridge.config().to_builder()), config)
        .expect("a valid classic configuration")
}

/// The publisher's flags at their defaults (what both relays run with), for `bus` and the test
/// source ([`crate::TEST_SOURCE`]).
pub fn publisher_args(bus: &str) -> PublisherArgs {
    publisher_args_of(relay_runtime::TargetKind::Classic, bus)
}

/// The publisher's flags at their defaults for `bus`, a bus of `kind`, and the test source.
pub fn publisher_args_of(kind: relay_runtime::TargetKind, bus: &str) -> PublisherArgs {
    PublisherArgs::of_kind(kind, bus, crate::TEST_SOURCE)
}

/// The stream relay's flags at their defaults for `table`, publishing with `publisher`, with no
/// dead-letter queue and no aggregate holds (a failed record is re-delivered by Lambda).
pub fn stream_relay_args(table: &str, publisher: PublisherArgs) -> relay_stream::RelayArgs {
    relay_stream::RelayArgs {
        table_name: table.to_owned(),
        publisher,
        retention: relay_runtime::RetentionArgs::default(),
        regions: relay_runtime::RegionArgs::default(),
        lease_table: None,
        dead_letter_queue_url: None,
        mark_concurrency: relay_stream::config::DEFAULT_MARK_CONCURRENCY,
        stop_at_first_failure: false,
        deadline_margin: relay_stream::config::DEFAULT_DEADLINE_MARGIN,
        hold_failed_aggregates: false,
    }
}
