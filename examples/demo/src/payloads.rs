//! The large orders' payloads, read back as a consumer reads them: each large order's event that
//! arrived with its payload in S3 (`dataref`) is decoded with `outbox_consumer::PayloadResolver`,
//! which reads the object and checks its size and SHA-256 against the event's `datasize` and
//! `datasha256`, and its lines are compared with the lines the demo wrote. A payload gone, not
//! the one the event names, unreadable, or not the lines written is a failure the demo reports.

use std::collections::HashMap;
use std::future::Future;

use outbox_consumer::{DecodeError, PayloadResolver};
use outbox_shared::Envelope;
use outbox_writer::OrderCreated;
use serde::{Deserialize, Serialize};

use crate::deliveries::Delivery;
use crate::orders::{WrittenLarge, lines_digest};

/// What became of the large orders' events on the consumer side.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct PayloadChecks {
    /// Large orders' events delivered with their payload in S3 (`dataref`).
    pub(crate) in_s3: u64,
    /// Large orders' events delivered with their payload in them: it fit the target's entry
    /// (an order over a bus's entry on Kinesis, whose record takes 1 MiB).
    pub(crate) inline: u64,
    /// Of those in S3, the payloads read back with their size, SHA-256 and lines right.
    pub(crate) checked: u64,
    /// Of those in S3, why each of the others failed: gone, not the payload the event names,
    /// unreadable, or not the lines written.
    pub(crate) failures: Vec<String>,
}

/// Reads back, with `resolver`, the payload of each large order in `written` whose event was
/// delivered with its payload in S3, and checks it (its first delivery; an event never
/// delivered is counted missing in the summary, not here).
pub(crate) async fn check_payloads(
    resolver: &PayloadResolver,
    written: &[WrittenLarge],
    deliveries: &[Delivery],
) -> PayloadChecks {
    check_with(written, deliveries, |event| async move {
        resolver.decode::<OrderCreated>(&event).await
    })
    .await
}

/// [`check_payloads`], the payloads read by `read`.
async fn check_with<F, Fut>(
    written: &[WrittenLarge],
    deliveries: &[Delivery],
    read: F,
) -> PayloadChecks
where
    F: Fn(serde_json::Value) -> Fut,
    Fut: Future<Output = Result<Envelope<OrderCreated>, DecodeError>>,
{
    let mut first: HashMap<&str, &Delivery> = HashMap::new();
    for delivery in deliveries {
        first.entry(delivery.event_id.as_str()).or_insert(delivery);
    }
    let mut checks = PayloadChecks::default();
    for large in written {
        let Some(delivery) = first.get(large.event_id.as_str()) else {
            continue;
        };
        let Some(event) = &delivery.stored else {
            checks.inline += 1;
            continue;
        };
        checks.in_s3 += 1;
        match read(event.clone()).await {
            Ok(envelope) => {
                let digest = lines_digest(&envelope.data.items).unwrap_or_default();
                if digest == large.lines_sha256 {
                    checks.checked += 1;
                } else {
                    checks.failures.push(format!(
                        "event {}: the payload read from {} is not the order written: {} lines \
                         with SHA-256 {digest}, where {} lines with SHA-256 {} were written",
                        large.event_id,
                        event["dataref"].as_str().unwrap_or("S3"),
                        envelope.data.items.len(),
                        large.lines,
                        large.lines_sha256,
                    ));
                }
            }
            Err(error) => checks
                .failures
                .push(format!("event {}: {error}", large.event_id)),
        }
    }
    checks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::orders::{LargeOrder, lines_of_about};
    use outbox_shared::ResolveError;
    use outbox_shared::envelope::EventMetadata;
    use outbox_writer::{OrderLine, OrderStatus};
    use serde_json::json;

    fn written(event_id: &str, lines: &[OrderLine]) -> WrittenLarge {
        WrittenLarge {
            event_id: event_id.to_owned(),
            kind: LargeOrder::OverItem,
            lines: lines.len(),
            lines_sha256: lines_digest(lines).unwrap(),
        }
    }

    /// A delivery of `event_id`, with its payload in S3 or not.
    fn delivered(event_id: &str, in_s3: bool) -> Delivery {
        Delivery {
            event_id: event_id.to_owned(),
            aggregate_id: Some(format!("order-{event_id}")),
            sequence: Some(1),
            latency_ms: None,
            arrived_ms: None,
            stored: in_s3.then(|| {
                json!({"metadata": {"eventId": event_id},
                       "dataref": format!("s3://payloads/payloads/{event_id}"),
                       "datasize": 1, "datasha256": "x"})
            }),
        }
    }

    fn order_created(event_id: &str, items: Vec<OrderLine>) -> Envelope<OrderCreated> {
        Envelope {
            metadata: EventMetadata {
                event_id: event_id.to_owned(),
                event_type: "OrderCreated".to_owned(),
                aggregate_type: None,
                aggregate_id: None,
                sequence: Some(1),
                occurred_at: "2026-11-27T00:00:00.000Z".to_owned(),
                traceparent: None,
                tracestate: None,
            },
            data: OrderCreated {
                order_id: "o1".to_owned(),
                user_id: "u1".to_owned(),
                items,
                amount_cents: 1,
                status: OrderStatus::Created,
                version: 1,
                created_at: "2026-11-27T00:00:00.000Z".to_owned(),
            },
        }
    }

    #[tokio::test]
    async fn a_payload_read_back_with_the_lines_written_checks_and_one_inline_is_not_read() {
        // Given two large orders: one delivered with its payload in S3 (twice), one inline
        let lines = lines_of_about(2000);
        let large = [written("e1", &lines), written("e2", &lines)];
        let deliveries = [
            delivered("e1", true),
            delivered("e1", true),
            delivered("e2", false),
            delivered("small", false),
        ];

        // When their payloads are checked, S3 answering the lines written
        let reads = std::sync::atomic::AtomicU64::new(0);
        let checks = check_with(&large, &deliveries, |event| {
            reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let envelope = order_created(
                event["metadata"]["eventId"].as_str().unwrap(),
                lines.clone(),
            );
            async move { Ok(envelope) }
        })
        .await;

        // Then the one in S3 is read once and checks, the inline one is counted and not read
        assert_eq!(
            checks,
            PayloadChecks {
                in_s3: 1,
                inline: 1,
                checked: 1,
                failures: vec![]
            }
        );
        assert_eq!(reads.into_inner(), 1);
    }

    #[tokio::test]
    async fn a_payload_gone_or_not_the_lines_written_is_a_failure_naming_its_event() {
        // Given two large orders delivered with their payloads in S3, and one never delivered
        let lines = lines_of_about(2000);
        let large = [
            written("gone", &lines),
            written("other", &lines),
            written("missing", &lines),
        ];
        let deliveries = [delivered("gone", true), delivered("other", true)];

        // When S3 no longer has the first, and the second holds other lines
        let checks = check_with(&large, &deliveries, |event| {
            let id = event["metadata"]["eventId"].as_str().unwrap().to_owned();
            let fewer = lines[1..].to_vec();
            async move {
                if id == "gone" {
                    Err(DecodeError::from(ResolveError::Gone {
                        event_id: id,
                        uri: "s3://payloads/payloads/gone".to_owned(),
                    }))
                } else {
                    Ok(order_created(&id, fewer))
                }
            }
        })
        .await;

        // Then both are failures that name their event and what is wrong; the missing one is
        // the summary's `missing`, not a payload failure
        assert_eq!((checks.in_s3, checks.checked, checks.inline), (2, 0, 0));
        assert_eq!(checks.failures.len(), 2, "{:?}", checks.failures);
        assert!(
            checks.failures[0].starts_with("event gone: ")
                && checks.failures[0].contains("is gone from s3://payloads/payloads/gone"),
            "{:?}",
            checks.failures
        );
        let expected = format!(
            "event other: the payload read from s3://payloads/payloads/other is not the order \
             written: {} lines with SHA-256 {}, where {} lines with SHA-256 {} were written",
            lines.len() - 1,
            lines_digest(&lines[1..]).unwrap(),
            lines.len(),
            lines_digest(&lines).unwrap(),
        );
        assert_eq!(checks.failures[1], expected);
    }
}
