//! The summary of a run: what was written, published, delivered, duplicated, out of order or
//! missing, and the live relay's latencies, printed as a table (and with `--json` as one line).

use relay_runtime::TargetKind;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::deliveries::Delivery;
use crate::orders::{LargeOrder, WrittenLarge};
use crate::payloads::PayloadChecks;
use crate::relays::RelaySummary;

/// What the demo observed; also printed as JSON with `--json`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Summary {
    /// What the relays published to: `classic`, `custom`, `sns`, `sqs` or `kinesis`
    /// (`--target`).
    pub(crate) target: TargetKind,
    /// Orders written (each an aggregate with its `OrderCreated` event).
    pub(crate) orders: u64,
    /// Events written: every order's `OrderCreated` and the follow-ups' `OrderStatusChanged`.
    pub(crate) written: u64,
    /// Events the stream relay reported published.
    pub(crate) published_by_stream: u64,
    /// Events `relay-poller drain` reported published.
    pub(crate) published_by_poller: u64,
    /// Messages on the sink queue (duplicates included).
    pub(crate) delivered: u64,
    /// Distinct `metadata.eventId`s delivered.
    pub(crate) unique_delivered: u64,
    /// Deliveries beyond the first of an event id.
    pub(crate) duplicates: u64,
    /// Events received before an earlier event of the same aggregate (a lower `sequence`, the
    /// aggregate's version the writer recorded), counting each event's first delivery: 0 when
    /// every aggregate's events arrived in the order they were written.
    pub(crate) out_of_order: u64,
    /// Entries the bus answered `DEDUPLICATED` (a repeat within the Custom Event Bus's 300 s
    /// window, not delivered again), as both relays reported them; 0 on the classic bus.
    pub(crate) deduplicated: u64,
    /// Written events never delivered: must be 0.
    pub(crate) missing: u64,
    /// Events sent to the dead-letter queue by either relay.
    pub(crate) dead_lettered: u64,
    /// Large orders written (`--large-order-percent`): about 300 KB of lines (over the target's
    /// entry) and about 1 MiB (over an item), counted in `orders` and `written` too.
    #[serde(default)]
    pub(crate) large_orders: u64,
    /// The payloads of the large orders over an item, which the writer stored in the payload
    /// bucket before their transactions.
    #[serde(default)]
    pub(crate) payloads_stored_by_writer: u64,
    /// Payloads both relays stored in the payload bucket when they published their events (those
    /// of the large orders over the target's entry).
    #[serde(default)]
    pub(crate) payloads_stored_by_relays: u64,
    /// Large orders whose event the consumer side received with its payload in S3 (`dataref`).
    #[serde(default)]
    pub(crate) large_delivered_in_s3: u64,
    /// Large orders whose event the consumer side received with its payload in it (it fit the
    /// target's entry: the orders over a bus's entry on Kinesis).
    #[serde(default)]
    pub(crate) large_delivered_inline: u64,
    /// Of the payloads in S3, those the demo read back with `outbox_consumer::PayloadResolver`
    /// (the size and SHA-256 the event names) holding the lines written.
    #[serde(default)]
    pub(crate) payloads_checked: u64,
    /// Of the payloads in S3, those gone, not the payload the event names, unreadable, or not
    /// the lines written: must be 0.
    #[serde(default)]
    pub(crate) payload_failures: u64,
    /// Orders per second written while the stream relay ran (`--rate`).
    pub(crate) rate: u64,
    /// Write to published (the target accepted it, the item marked): the relay's own latency, over
    /// the events written while the stream relay ran.
    pub relay_lag_p50_ms: u64,
    pub relay_lag_p99_ms: u64,
    /// Write to delivery on the sink queue (through the emulator's rule), over the same events.
    pub latency_p50_ms: u64,
    pub latency_p99_ms: u64,
    /// Calls to the target by both relays, retries included.
    #[serde(flatten)]
    pub(crate) calls: relay_runtime::publisher::PublishCalls,
    pub(crate) seconds: f64,
}

/// The events the demo wrote: all of them, those written while the stream relay ran (whose
/// latencies are the live relay's), the rate those were written at, and the large orders.
pub(crate) struct Written<'a> {
    pub(crate) target: TargetKind,
    pub(crate) orders: u64,
    pub(crate) all: &'a [String],
    pub(crate) live: &'a HashSet<String>,
    pub(crate) rate: u64,
    pub(crate) large: &'a [WrittenLarge],
}

/// What the consumer side received: every delivery, in the order received, and what became of
/// the large orders' payloads.
pub(crate) struct Delivered<'a> {
    pub(crate) deliveries: &'a [Delivery],
    pub(crate) payloads: &'a PayloadChecks,
}

/// Counts the delivered events against the written ones and takes the live relay's latencies.
pub(crate) fn summarize(
    written: &Written<'_>,
    delivered: &Delivered<'_>,
    relay_lags: &HashMap<String, u64>,
    stream: &RelaySummary,
    poller: &RelaySummary,
    dead_letters_on_queue: u64,
    elapsed: Duration,
) -> Summary {
    let Delivered {
        deliveries,
        payloads,
    } = *delivered;
    let mut first_latency: HashMap<&str, Option<u64>> = HashMap::new();
    for delivery in deliveries {
        first_latency
            .entry(delivery.event_id.as_str())
            .or_insert(delivery.latency_ms);
    }
    let written_set: HashSet<&str> = written.all.iter().map(String::as_str).collect();
    let missing = written_set
        .iter()
        .filter(|id| !first_latency.contains_key(*id))
        .count();
    let mut latencies: Vec<u64> = first_latency
        .iter()
        .filter(|(id, _)| written.live.contains(**id))
        .filter_map(|(_, l)| *l)
        .collect();
    latencies.sort_unstable();
    let mut lags: Vec<u64> = relay_lags
        .iter()
        .filter(|(id, _)| written.live.contains(*id))
        .map(|(_, lag)| *lag)
        .collect();
    lags.sort_unstable();
    let delivered = deliveries.len() as u64;
    let unique = first_latency.len() as u64;
    Summary {
        target: written.target,
        orders: written.orders,
        written: written.all.len() as u64,
        published_by_stream: stream.published,
        published_by_poller: poller.published,
        delivered,
        unique_delivered: unique,
        duplicates: delivered - unique,
        out_of_order: out_of_order(deliveries),
        deduplicated: stream.deduplicated + poller.deduplicated,
        missing: missing as u64,
        dead_lettered: (stream.dead_lettered + poller.dead_lettered).max(dead_letters_on_queue),
        large_orders: written.large.len() as u64,
        payloads_stored_by_writer: written
            .large
            .iter()
            .filter(|large| large.kind == LargeOrder::OverItem)
            .count() as u64,
        payloads_stored_by_relays: stream.payloads_stored + poller.payloads_stored,
        large_delivered_in_s3: payloads.in_s3,
        large_delivered_inline: payloads.inline,
        payloads_checked: payloads.checked,
        payload_failures: payloads.failures.len() as u64,
        rate: written.rate,
        relay_lag_p50_ms: percentile(&lags, 50),
        relay_lag_p99_ms: percentile(&lags, 99),
        latency_p50_ms: percentile(&latencies, 50),
        latency_p99_ms: percentile(&latencies, 99),
        calls: (stream.publish_calls + poller.publish_calls).into(),
        seconds: (elapsed.as_secs_f64() * 10.0).round() / 10.0,
    }
}

/// Events received before an earlier event of their aggregate: in each aggregate's first
/// deliveries, in the order received, those with a `sequence` above one received after them.
/// A repeated delivery is a duplicate, not counted here; events without an aggregate or a
/// `sequence` have no order to keep.
fn out_of_order(deliveries: &[Delivery]) -> u64 {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut by_aggregate: HashMap<&str, Vec<u64>> = HashMap::new();
    for delivery in deliveries {
        if !seen.insert(delivery.event_id.as_str()) {
            continue;
        }
        if let (Some(aggregate), Some(sequence)) = (&delivery.aggregate_id, delivery.sequence) {
            by_aggregate.entry(aggregate).or_default().push(sequence);
        }
    }
    by_aggregate
        .values()
        .map(|received| {
            // From the last received back: an event is early when a lower sequence follows it.
            let mut lowest_after = u64::MAX;
            let mut early = 0;
            for &sequence in received.iter().rev() {
                if sequence > lowest_after {
                    early += 1;
                }
                lowest_after = lowest_after.min(sequence);
            }
            early
        })
        .sum()
}

/// Nearest-rank percentile of sorted values (0 when empty).
fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// Prints the summary table on stdout, with what its latencies measure and where the logs are.
pub(crate) fn print_summary(s: &Summary, log_dir: &Path) {
    let rows: [(&str, String); 21] = [
        ("target", s.target.to_string()),
        ("orders written", s.orders.to_string()),
        ("events written", s.written.to_string()),
        (
            "published by stream relay",
            s.published_by_stream.to_string(),
        ),
        (
            "published by poller (backfill)",
            s.published_by_poller.to_string(),
        ),
        ("delivered to the consumer", s.delivered.to_string()),
        ("duplicates", s.duplicates.to_string()),
        ("out of order", s.out_of_order.to_string()),
        ("missing", s.missing.to_string()),
        ("dead-lettered", s.dead_lettered.to_string()),
        ("de-duplicated by the bus", s.deduplicated.to_string()),
        ("large orders written", s.large_orders.to_string()),
        (
            "  stored by writer / relays",
            format!(
                "{} / {}",
                s.payloads_stored_by_writer, s.payloads_stored_by_relays
            ),
        ),
        (
            "  delivered in S3 / inline",
            format!("{} / {}", s.large_delivered_in_s3, s.large_delivered_inline),
        ),
        (
            "  payloads read back, checked",
            s.payloads_checked.to_string(),
        ),
        (
            "  payloads failing their check",
            s.payload_failures.to_string(),
        ),
        ("live relay, written at", format!("{} orders/s", s.rate)),
        (
            "  relay lag p50 / p99",
            format!("{} / {} ms", s.relay_lag_p50_ms, s.relay_lag_p99_ms),
        ),
        (
            "  write-to-delivery p50 / p99",
            format!("{} / {} ms", s.latency_p50_ms, s.latency_p99_ms),
        ),
        ("publish calls", s.calls.publish_calls.to_string()),
        ("elapsed", format!("{:.1} s", s.seconds)),
    ];
    println!();
    println!("{:<32} {:>16}", "outbox demo summary", "");
    println!("{}", "-".repeat(49));
    for (label, value) in rows {
        println!("{label:<32} {value:>16}");
    }
    println!(
        "{}",
        if s.missing > 0 {
            "result: EVENTS MISSING"
        } else if s.payload_failures > 0 {
            "result: LARGE PAYLOADS FAILED THEIR CHECK"
        } else if s.large_delivered_in_s3 > 0 {
            "result: every written event was delivered, every payload in S3 read back intact"
        } else {
            "result: every written event was delivered"
        }
    );
    println!();
    println!("relay lag: an order's write to its event's publication (the target accepted it, the");
    println!(
        "  item marked PUBLISHED), the relay's own latency, over the orders written while the"
    );
    println!(
        "  stream relay ran; write-to-delivery: to the event's arrival on the consumer side through"
    );
    match s.target {
        TargetKind::Custom => println!(
            "  the local Custom Event Bus's FIFO subscriber (the double delivers after PutEvents)."
        ),
        TargetKind::Sns => println!(
            "  the FIFO topic's subscription into a FIFO queue (moto delivers inside PublishBatch)."
        ),
        TargetKind::Sqs => println!("  the FIFO queue itself (SendMessageBatch's own timestamp)."),
        TargetKind::Kinesis => {
            println!("  the stream, read back with GetRecords (the record's arrival timestamp).")
        }
        TargetKind::Classic => println!(
            "  the local emulator's EventBridge rule (moto delivers inside the PutEvents call)."
        ),
    }
    println!("out of order: events received before an earlier event (lower sequence) of the same");
    println!(
        "  order; de-duplicated: repeats the bus recognised by their event id and did not store."
    );
    println!(
        "large orders: about 300 KB of lines, over the target's 256 KiB entry (a relay stores the"
    );
    println!(
        "  payload in S3 when it publishes), and about 1 MiB, over DynamoDB's 400 KB item (the"
    );
    println!(
        "  writer stores it first); checked: read back with outbox_consumer::PayloadResolver, its"
    );
    println!("  size and SHA-256 as the event names them, and its lines those written.");
    println!("relay logs and metrics: {}", log_dir.display());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_is_nearest_rank() {
        let values: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&values, 50), 50);
        assert_eq!(percentile(&values, 99), 99);
        assert_eq!(percentile(&[7], 99), 7);
        assert_eq!(percentile(&[], 50), 0);
    }

    #[test]
    fn summary_counts_duplicates_and_missing() {
        let written = vec![
            "a".to_owned(),
            "b".to_owned(),
            "c".to_owned(),
            "d".to_owned(),
        ];
        let d = |id: &str, ms| Delivery {
            event_id: id.to_owned(),
            aggregate_id: Some(id.to_owned()),
            sequence: Some(1),
            latency_ms: Some(ms),
            stored: None,
        };
        let deliveries = vec![d("a", 10), d("a", 50), d("b", 20), d("c", 9000)];
        let live: HashSet<String> = ["a", "b"].map(str::to_owned).into();
        let lags: HashMap<String, u64> = [("a", 5), ("b", 7), ("c", 8000)]
            .map(|(id, lag)| (id.to_owned(), lag))
            .into();
        let s = summarize(
            &Written {
                target: TargetKind::Classic,
                orders: 4,
                all: &written,
                live: &live,
                rate: 50,
                large: &[],
            },
            &Delivered {
                deliveries: &deliveries,
                payloads: &PayloadChecks::default(),
            },
            &lags,
            &RelaySummary::default(),
            &RelaySummary::default(),
            0,
            Duration::from_secs(1),
        );
        assert_eq!(
            (s.delivered, s.unique_delivered, s.duplicates, s.missing),
            (4, 3, 1, 1)
        );
        // Latencies are the live relay's: the backfilled event "c" is not among them.
        assert_eq!((s.latency_p50_ms, s.latency_p99_ms), (10, 20));
        assert_eq!((s.relay_lag_p50_ms, s.relay_lag_p99_ms), (5, 7));
        assert_eq!(s.rate, 50);
        assert_eq!((s.orders, s.written, s.out_of_order), (4, 4, 0));
    }

    #[test]
    fn summary_counts_the_large_orders_and_where_their_payloads_went() {
        // Given three large orders: one over an entry, whose payload a relay stored, two over an
        // item, whose payloads the writer stored; one of the three failed its check
        let large = |id: &str, kind| WrittenLarge {
            event_id: id.to_owned(),
            kind,
            lines: 1,
            lines_sha256: String::new(),
        };
        let written_large = [
            large("a", LargeOrder::OverEntry),
            large("b", LargeOrder::OverItem),
            large("c", LargeOrder::OverItem),
        ];
        let all = ["a", "b", "c"].map(str::to_owned);

        // When the run is summarized
        let s = summarize(
            &Written {
                target: TargetKind::Classic,
                orders: 3,
                all: &all,
                live: &HashSet::new(),
                rate: 50,
                large: &written_large,
            },
            &Delivered {
                deliveries: &[],
                payloads: &PayloadChecks {
                    in_s3: 3,
                    inline: 0,
                    checked: 2,
                    failures: vec!["event c: gone".to_owned()],
                },
            },
            &HashMap::new(),
            &RelaySummary {
                payloads_stored: 1,
                ..RelaySummary::default()
            },
            &RelaySummary::default(),
            0,
            Duration::from_secs(1),
        );

        // Then it says so
        assert_eq!(
            (
                s.large_orders,
                s.payloads_stored_by_writer,
                s.payloads_stored_by_relays
            ),
            (3, 2, 1)
        );
        assert_eq!(
            (
                s.large_delivered_in_s3,
                s.large_delivered_inline,
                s.payloads_checked,
                s.payload_failures
            ),
            (3, 0, 2, 1)
        );
    }

    /// Deliveries `(event id, aggregate, sequence)` in the order received.
    fn received(events: &[(&str, &str, u64)]) -> Vec<Delivery> {
        events
            .iter()
            .map(|(id, aggregate, sequence)| Delivery {
                event_id: (*id).to_owned(),
                aggregate_id: Some((*aggregate).to_owned()),
                sequence: Some(*sequence),
                latency_ms: None,
                stored: None,
            })
            .collect()
    }

    #[test]
    fn out_of_order_counts_events_received_before_an_earlier_event_of_their_aggregate() {
        // In order per aggregate, aggregates interleaved: none
        let interleaved = received(&[
            ("a1", "a", 1),
            ("b1", "b", 1),
            ("a2", "a", 2),
            ("b2", "b", 2),
        ]);
        assert_eq!(out_of_order(&interleaved), 0);

        // a3 and a2 arrived before a1, and a3 before a2: two events early
        let reversed = received(&[("a3", "a", 3), ("a2", "a", 2), ("a1", "a", 1)]);
        assert_eq!(out_of_order(&reversed), 2);

        // a2 early (before a1); a3 after both is in order
        let one_swap = received(&[
            ("a2", "a", 2),
            ("a1", "a", 1),
            ("a3", "a", 3),
            ("b1", "b", 1),
        ]);
        assert_eq!(out_of_order(&one_swap), 1);
    }

    #[test]
    fn a_repeated_delivery_is_a_duplicate_not_out_of_order() {
        // a1 delivered again after a2: its first delivery was in order
        let repeated = received(&[("a1", "a", 1), ("a2", "a", 2), ("a1", "a", 1)]);

        assert_eq!(out_of_order(&repeated), 0);
        let s = summarize(
            &Written {
                target: TargetKind::Custom,
                orders: 1,
                all: &["a1".to_owned(), "a2".to_owned()],
                live: &HashSet::new(),
                rate: 50,
                large: &[],
            },
            &Delivered {
                deliveries: &repeated,
                payloads: &PayloadChecks::default(),
            },
            &HashMap::new(),
            &RelaySummary {
                deduplicated: 2,
                ..RelaySummary::default()
            },
            &RelaySummary {
                deduplicated: 1,
                ..RelaySummary::default()
            },
            0,
            Duration::from_secs(1),
        );
        assert_eq!((s.duplicates, s.out_of_order, s.deduplicated), (1, 0, 3));
    }
}
