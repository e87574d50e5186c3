//! Handler CPU cost per event: a 1,000-record batch of outbox INSERTs through the handler with a
//! no-op publisher and status store (no I/O), so what is measured is filtering, decoding the image
//! (`outbox_shared::image::from_image`), validating the payload, building the envelope and
//! bookkeeping.
//!
//! Run: `cargo bench -p relay-stream --bench handler` (criterion; the report's time per element is
//! the cost per event).

use aws_lambda_events::dynamodb::{Event, EventRecord};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use std::borrow::Borrow;
use std::hint::black_box;

use outbox_shared::{ItemKey, OutboundEvent};
use relay_runtime::testing::FakeHoldStore;
use relay_runtime::{
    DeadLetter, DeadLetterError, DeadLetterSink, Deadline, MarkOutcome, PublishOutcome, Publisher,
    StatusError, StatusStore,
};
use relay_stream::{HandlerOptions, StreamRelay};
use serde_json::json;

const BATCH: usize = 1_000;

struct NoopPublisher;

impl Publisher for NoopPublisher {
    async fn publish<E: Borrow<OutboundEvent> + Sync>(
        &self,
        events: &[E],
        _deadline: Deadline,
    ) -> Vec<PublishOutcome> {
        vec![PublishOutcome::Published; events.len()]
    }
}

struct NoopStatus;

impl StatusStore for NoopStatus {
    async fn mark_published(&self, keys: &[ItemKey]) -> Vec<Result<MarkOutcome, StatusError>> {
        vec![Ok(MarkOutcome::Marked); keys.len()]
    }

    async fn mark_dead_lettered(
        &self,
        _key: &ItemKey,
        _reason: &str,
    ) -> Result<MarkOutcome, StatusError> {
        Ok(MarkOutcome::Marked)
    }

    async fn recreate_dead_lettered(
        &self,
        _key: &ItemKey,
        _image: &relay_runtime::recreate::Attributes,
        _reason: &str,
    ) -> Result<MarkOutcome, StatusError> {
        Ok(MarkOutcome::Marked)
    }
}

struct NoDeadLetters;

impl DeadLetterSink for NoDeadLetters {
    async fn send(&self, _letter: &DeadLetter) -> Result<(), DeadLetterError> {
        Ok(())
    }
}

/// A writer-shaped `OrderCreated` outbox INSERT, as Lambda delivers it.
fn record(i: usize) -> serde_json::Value {
    let event_id = format!("0194f7c2-8a4b-7d3e-9c1a-{i:012}");
    let order_id = format!("o-{i}");
    let payload = json!({
        "orderId": order_id, "userId": format!("u-{}", i % 97),
        "items": [{"sku": "SKU-1", "quantity": 2, "unitPriceCents": 1299},
                  {"sku": "SKU-2", "quantity": 1, "unitPriceCents": 450}],
        "amountCents": 3048, "status": "CREATED", "version": 1,
        "createdAt": "2026-11-28T08:00:00.000Z"
    });
    json!({
        "eventID": format!("ev{i}"), "eventName": "INSERT", "eventVersion": "1.1",
        "eventSource": "aws:dynamodb", "awsRegion": "eu-west-1",
        "eventSourceARN": "arn:aws:dynamodb:eu-west-1:111122223333:table/orders/stream/2026-11-01T00:00:00.000",
        "dynamodb": {
            "ApproximateCreationDateTime": 1795860000,
            "Keys": {"PK": {"S": format!("USER#u-{}", i % 97)}, "SK": {"S": format!("OUTBOX#{event_id}")}},
            "NewImage": {
                "PK": {"S": format!("USER#u-{}", i % 97)}, "SK": {"S": format!("OUTBOX#{event_id}")},
                "EntityType": {"S": "OutboxEvent"}, "EventId": {"S": event_id},
                "EventType": {"S": "OrderCreated"}, "AggregateType": {"S": "Order"},
                "AggregateId": {"S": order_id}, "Sequence": {"N": "1"},
                "Payload": {"S": payload.to_string()}, "Status": {"S": "PENDING"},
                "CreatedAt": {"S": "2026-11-28T08:00:00.000Z"},
                "GSI1PK": {"S": format!("OUTBOX#PENDING#{}", i % 16)},
                "GSI1SK": {"S": format!("EVENT#2026-11-28T08:00:00.000Z#{event_id}")},
                "ttl": {"N": "1796464800"}
            },
            "SequenceNumber": format!("{:028}", 4_421_584_500_000_000_000u64 + i as u64),
            "SizeBytes": 700, "StreamViewType": "NEW_AND_OLD_IMAGES"
        }
    })
}

fn bench_handler(c: &mut Criterion) {
    let body = json!({ "Records": (0..BATCH).map(record).collect::<Vec<_>>() }).to_string();
    let event: Event = serde_json::from_str(&body).expect("valid event");
    let records: Vec<EventRecord> = event.records;
    let relay = StreamRelay::new(
        NoopPublisher,
        NoopStatus,
        FakeHoldStore::default(),
        Some(NoDeadLetters),
        HandlerOptions::default(),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");

    let mut group = c.benchmark_group("handler");
    group.throughput(Throughput::Elements(BATCH as u64));
    group.bench_function("1000_records_noop_publisher", |b| {
        b.iter(|| {
            let report = runtime.block_on(relay.handle(black_box(&records), Deadline::NONE));
            assert_eq!(report.counts().published, BATCH as u64);
        });
    });
    // What the runtime adds before the handler: parsing the invocation's JSON.
    group.bench_function("1000_records_parse_and_handle", |b| {
        b.iter(|| {
            let event: Event = serde_json::from_str(black_box(&body)).expect("valid event");
            let report = runtime.block_on(relay.handle(&event.records, Deadline::NONE));
            assert_eq!(report.counts().published, BATCH as u64);
        });
    });
    group.finish();
}

criterion_group!(benches, bench_handler);
criterion_main!(benches);
