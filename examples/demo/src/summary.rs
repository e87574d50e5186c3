//! The summary of a run: what was written, published, delivered, duplicated, out of order or
//! missing, and the live relay's latencies, printed as a table (and with `--json` as one line).

use relay_runtime::TargetKind;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::consumer::{Applied, Consumed};
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
    /// Messages the target delivered to the consumer, each counted at its first delivery (its
    /// re-deliveries after the consumer reported it failed are not the target's).
    pub(crate) delivered: u64,
    /// Distinct `metadata.eventId`s delivered.
    pub(crate) unique_delivered: u64,
    /// Events the target delivered before an earlier event of the same aggregate (a lower
    /// `sequence`, the aggregate's version the writer recorded), counting each event's first
    /// delivery: 0 when every aggregate's events arrived in the order they were written.
    pub(crate) delivered_out_of_order: u64,
    /// Whether the consumer restores each aggregate's order (on the classic bus): an event
    /// delivered before its predecessor is reported failed and applied after it.
    pub(crate) order_restored: bool,
    /// Messages handed to the consumer (`outbox_consumer::BatchProcessor`), re-deliveries
    /// included.
    pub(crate) received: u64,
    /// Events the consumer's handler applied.
    pub(crate) applied: u64,
    /// Deliveries the consumer acknowledged without applying them again: the idempotency store
    /// answered with the stored result, or (order restored) the sequence was already applied.
    pub(crate) duplicates: u64,
    /// Deliveries the consumer reported failed because their predecessor was not applied yet
    /// (order restored), delivered again after the visibility timeout.
    pub(crate) held_for_order: u64,
    /// Deliveries the consumer reported failed otherwise, or held back behind a failure by their
    /// source's rule, delivered again.
    pub(crate) retried: u64,
    /// Events the consumer applied before an earlier event of their aggregate: must be 0 with
    /// order restored and on the targets that keep order.
    pub(crate) applied_out_of_order: u64,
    /// Events the consumer applied more than once: must be 0 (the idempotency store).
    pub(crate) applied_twice: u64,
    /// Events applied past a gap in their aggregate's sequence that outlived the bound.
    pub(crate) gaps_applied: u64,
    /// Entries the bus answered `DEDUPLICATED` (a repeat within the Custom Event Bus's 300 s
    /// window, not delivered again), as both relays reported them; 0 on the classic bus.
    pub(crate) deduplicated: u64,
    /// Written events never delivered: must be 0.
    pub(crate) missing: u64,
    /// Written events the consumer never applied (never delivered, or failed until the demo gave
    /// up on them): must be 0.
    pub(crate) not_applied: u64,
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
    /// The first orders, written at the rate and relayed before the measured window to warm the
    /// emulators (`--warm-up-percent`): in every count, in no latency.
    #[serde(default)]
    pub(crate) warm_up_orders: u64,
    /// Write to published (the target accepted it, the item marked): the relay's own latency, over
    /// the events written while the stream relay ran.
    pub relay_lag_p50_ms: u64,
    pub relay_lag_p99_ms: u64,
    /// Write to delivery on the sink queue (through the emulator's rule), over the same events.
    pub latency_p50_ms: u64,
    pub latency_p99_ms: u64,
    /// Write to published of the large orders' `OrderCreated` events, written after the measured
    /// ones and relayed by the stream relay apart from them.
    pub large_relay_lag_p50_ms: u64,
    pub large_relay_lag_p99_ms: u64,
    /// Calls to the target by both relays, retries included.
    #[serde(flatten)]
    pub(crate) calls: relay_runtime::publisher::PublishCalls,
    pub(crate) seconds: f64,
}

/// The events the demo wrote: all of them, those of the orders written at the rate while the
/// stream relay ran (the measured window, whose latencies are the live relay's), the large orders'
/// the stream relay relayed after them, the rate, and the large orders.
pub(crate) struct Written<'a> {
    pub(crate) target: TargetKind,
    pub(crate) orders: u64,
    pub(crate) all: &'a [String],
    pub(crate) live: &'a HashSet<String>,
    pub(crate) live_large: &'a HashSet<String>,
    pub(crate) rate: u64,
    pub(crate) warm_up_orders: u64,
    pub(crate) large: &'a [WrittenLarge],
}

/// What the consumer side received: every message's first delivery, in the order received, what
/// the consumer applied, in the order applied, and what became of its deliveries and of the
/// large orders' payloads.
pub(crate) struct Delivered<'a> {
    pub(crate) deliveries: &'a [Delivery],
    pub(crate) applied: &'a [Applied],
    pub(crate) consumed: &'a Consumed,
    pub(crate) order_restored: bool,
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
        applied,
        consumed,
        order_restored,
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
    let lags_of = |events: &HashSet<String>| {
        let mut lags: Vec<u64> = relay_lags
            .iter()
            .filter(|(id, _)| events.contains(*id))
            .map(|(_, lag)| *lag)
            .collect();
        lags.sort_unstable();
        lags
    };
    let lags = lags_of(written.live);
    let large_lags = lags_of(written.live_large);
    let delivered = deliveries.len() as u64;
    let unique = first_latency.len() as u64;
    let mut times_applied: HashMap<&str, u64> = HashMap::new();
    for event in applied {
        *times_applied.entry(event.event_id.as_str()).or_default() += 1;
    }
    let not_applied = written_set
        .iter()
        .filter(|id| !times_applied.contains_key(*id))
        .count();
    Summary {
        target: written.target,
        orders: written.orders,
        written: written.all.len() as u64,
        published_by_stream: stream.published,
        published_by_poller: poller.published,
        delivered,
        unique_delivered: unique,
        delivered_out_of_order: out_of_order(deliveries.iter().map(Delivery::place)),
        order_restored,
        received: consumed.received,
        applied: applied.len() as u64,
        duplicates: consumed.duplicates,
        held_for_order: consumed.held_for_order,
        retried: consumed.retried,
        applied_out_of_order: out_of_order(applied.iter().map(Applied::place)),
        applied_twice: times_applied.values().filter(|times| **times > 1).count() as u64,
        gaps_applied: consumed.gaps_applied,
        deduplicated: stream.deduplicated + poller.deduplicated,
        missing: missing as u64,
        not_applied: not_applied as u64,
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
        warm_up_orders: written.warm_up_orders,
        relay_lag_p50_ms: percentile(&lags, 50),
        relay_lag_p99_ms: percentile(&lags, 99),
        latency_p50_ms: percentile(&latencies, 50),
        latency_p99_ms: percentile(&latencies, 99),
        large_relay_lag_p50_ms: percentile(&large_lags, 50),
        large_relay_lag_p99_ms: percentile(&large_lags, 99),
        calls: (stream.publish_calls + poller.publish_calls).into(),
        seconds: (elapsed.as_secs_f64() * 10.0).round() / 10.0,
    }
}

/// Events before an earlier event of their aggregate: of `events` (event id, aggregate,
/// sequence) in the order delivered or applied, counting each event id's first, those with a
/// `sequence` above one that comes after them. A repeat is a duplicate, not counted here; events
/// without an aggregate or a `sequence` have no order to keep.
pub(crate) fn out_of_order<'a>(events: impl Iterator<Item = Place<'a>>) -> u64 {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut by_aggregate: HashMap<&str, Vec<u64>> = HashMap::new();
    for (event_id, aggregate, sequence) in events {
        if !seen.insert(event_id) {
            continue;
        }
        if let (Some(aggregate), Some(sequence)) = (aggregate, sequence) {
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

/// An event's place in its aggregate: its id, aggregate and sequence.
pub(crate) type Place<'a> = (&'a str, Option<&'a str>, Option<u64>);

impl Delivery {
    pub(crate) fn place(&self) -> Place<'_> {
        (&self.event_id, self.aggregate_id.as_deref(), self.sequence)
    }
}

impl Applied {
    fn place(&self) -> Place<'_> {
        (&self.event_id, self.aggregate_id.as_deref(), self.sequence)
    }
}

/// Nearest-rank percentile of sorted values (0 when empty).
fn percentile(sorted: &[u64], p: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (p * sorted.len()).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// Prints the summary table on stdout, with what its figures count and where the logs are.
pub(crate) fn print_summary(s: &Summary, log_dir: &Path) {
    let count = |n: u64| n.to_string();
    let consumer = if s.order_restored {
        "idempotency store, order restored"
    } else {
        "idempotency store"
    };
    let rows: Vec<(&str, String)> = vec![
        ("target", s.target.to_string()),
        ("orders written", count(s.orders)),
        ("events written", count(s.written)),
        ("published by stream relay", count(s.published_by_stream)),
        (
            "published by poller (backfill)",
            count(s.published_by_poller),
        ),
        ("de-duplicated by the bus", count(s.deduplicated)),
        ("dead-lettered", count(s.dead_lettered)),
        ("delivered to the consumer", count(s.delivered)),
        ("  delivered out of order", count(s.delivered_out_of_order)),
        ("  missing", count(s.missing)),
        ("consumer (BatchProcessor)", consumer.to_owned()),
        ("  received (re-deliveries too)", count(s.received)),
        ("  applied", count(s.applied)),
        ("  duplicates, not applied again", count(s.duplicates)),
        ("  held for order, re-delivered", count(s.held_for_order)),
        ("  failed, re-delivered", count(s.retried)),
        ("  applied out of order", count(s.applied_out_of_order)),
        ("  applied twice", count(s.applied_twice)),
        ("  written, never applied", count(s.not_applied)),
        ("large orders written", count(s.large_orders)),
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
        ("  payloads read back, checked", count(s.payloads_checked)),
        ("  payloads failing their check", count(s.payload_failures)),
        (
            "  relay lag p50 / p99",
            format!(
                "{} / {} ms",
                s.large_relay_lag_p50_ms, s.large_relay_lag_p99_ms
            ),
        ),
        ("live relay, written at", format!("{} orders/s", s.rate)),
        ("  warm-up orders, not measured", count(s.warm_up_orders)),
        (
            "  relay lag p50 / p99",
            format!("{} / {} ms", s.relay_lag_p50_ms, s.relay_lag_p99_ms),
        ),
        (
            "  write-to-delivery p50 / p99",
            format!("{} / {} ms", s.latency_p50_ms, s.latency_p99_ms),
        ),
        ("publish calls", count(s.calls.publish_calls)),
        ("elapsed", format!("{:.1} s", s.seconds)),
    ];
    println!();
    println!("{:<32} {:>33}", "outbox demo summary", "");
    println!("{}", "-".repeat(66));
    for (label, value) in rows {
        println!("{label:<32} {value:>33}");
    }
    println!("{}", result(s));
    println!();
    println!("live relay: the orders written at the rate while the stream relay ran, after the");
    println!(
        "  first few, which warm the emulators (DynamoDB Local's JVM is slow on a path's first"
    );
    println!("  use), and large ones apart (written after them, their figures above under large");
    println!("  orders). Relay lag: an order's write to its event's publication (the target");
    println!(
        "  accepted it, the item marked PUBLISHED), the relay's own latency; write-to-delivery:"
    );
    println!("  to the event's arrival on the");
    match s.target {
        TargetKind::Custom => println!(
            "  consumer side through the local Custom Event Bus's FIFO subscriber (the double \
             delivers after PutEvents)."
        ),
        TargetKind::Sns => println!(
            "  consumer side through the FIFO topic's subscription into a FIFO queue (moto \
             delivers inside PublishBatch)."
        ),
        TargetKind::Sqs => {
            println!("  consumer side: the FIFO queue itself (SendMessageBatch's own timestamp).")
        }
        TargetKind::Kinesis => println!(
            "  consumer side: the stream, read back with GetRecords (the record's arrival \
             timestamp)."
        ),
        TargetKind::Classic => println!(
            "  consumer side through the local emulator's EventBridge rule (moto delivers inside \
             the PutEvents call)."
        ),
    }
    println!(
        "consumer: outbox_consumer::BatchProcessor, handed each batch as a Lambda's event source"
    );
    println!(
        "  hands it, with the idempotency store{}; what it does not acknowledge is",
        if s.order_restored {
            " and each order's events applied in sequence (the classic bus does not keep order)"
        } else {
            ""
        }
    );
    println!("  delivered again. Out of order: events delivered (or applied) before an earlier");
    println!("  event (lower sequence) of the same order; duplicates: deliveries of an event the");
    println!(
        "  consumer had applied; de-duplicated: repeats the bus recognised by their event id."
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

/// The summary's last line: whether the run kept every promise.
fn result(s: &Summary) -> &'static str {
    if s.missing > 0 {
        "result: EVENTS MISSING"
    } else if s.not_applied > 0 {
        "result: EVENTS NOT APPLIED BY THE CONSUMER"
    } else if s.applied_twice > 0 || s.applied_out_of_order > 0 {
        "result: THE CONSUMER APPLIED EVENTS TWICE OR OUT OF ORDER"
    } else if s.payload_failures > 0 {
        "result: LARGE PAYLOADS FAILED THEIR CHECK"
    } else if s.large_delivered_in_s3 > 0 {
        "result: every written event delivered and applied once, in order; every payload in S3 \
         read back intact"
    } else {
        "result: every written event delivered and applied once, in order"
    }
}

/// Whether the run kept every promise: nothing missing or left unapplied, nothing applied twice
/// or out of order, every large payload intact.
pub(crate) fn succeeded(s: &Summary) -> bool {
    s.missing == 0
        && s.not_applied == 0
        && s.applied_twice == 0
        && s.applied_out_of_order == 0
        && s.payload_failures == 0
}

#[cfg(test)]
mod tests;
