//! The orders the demo writes through the outbox writer, paced like a running service's, and the
//! follow-up events of a share of them: status changes through the writer's optimistic-
//! concurrency update, so those orders (aggregates) have several events, in `Sequence` order.

use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use indicatif::ProgressBar;
use outbox_writer::{NewOrder, OrderLine, OrderStatus, OutboxWriter};

/// The status changes an order with follow-ups goes through after `CREATED`, one event each
/// (versions 2 and 3), written one after the other, each after the previous one committed.
pub(crate) const FOLLOW_UPS: [OrderStatus; 2] = [OrderStatus::Confirmed, OrderStatus::Paid];

/// Which orders get follow-up events: `percent` of them, spread evenly (order `n` when the
/// running share `n * percent / 100` steps up at `n`), so a short run has its share too.
pub(crate) fn has_follow_ups(n: u64, percent: u64) -> bool {
    (n + 1) * percent / 100 > n * percent / 100
}

/// Events the orders numbered `numbers` write: one each, plus [`FOLLOW_UPS`] for those that
/// [`has_follow_ups`].
pub(crate) fn events_of(numbers: std::ops::Range<u64>, percent: u64) -> u64 {
    numbers
        .map(|n| {
            1 + if has_follow_ups(n, percent) {
                FOLLOW_UPS.len() as u64
            } else {
                0
            }
        })
        .sum()
}

/// Writes the orders numbered `numbers`, starting `rate` per second when given (at most
/// `concurrency` in flight), and the follow-up events of `follow_up_percent` of them; returns
/// the id of every event written (each order's `OrderCreated`, then its follow-ups).
pub(crate) async fn write_orders(
    writer: &OutboxWriter,
    numbers: std::ops::Range<u64>,
    rate: Option<u64>,
    concurrency: u64,
    follow_up_percent: u64,
    bar: &ProgressBar,
) -> Result<Vec<String>> {
    let pace = rate.map(|rate| {
        // Precision loss is irrelevant for a period (rate is at most 100,000).
        #[allow(clippy::cast_precision_loss)]
        let mut interval = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
        // Behind schedule (a slow write held a slot), catch up at once: the rate is an average.
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        interval
    });
    let paced = futures::stream::unfold((numbers, pace), |(mut numbers, mut pace)| async move {
        let n = numbers.next()?;
        if let Some(interval) = pace.as_mut() {
            interval.tick().await;
        }
        Some((n, (numbers, pace)))
    });
    let results: Vec<Result<Vec<String>>> = paced
        .map(|n| async move {
            let user = format!("user-{}", n % 97);
            let order = NewOrder::new(vec![
                OrderLine::new(format!("sku-{}", n % 13), 1 + (n % 3) as u32, 1_250),
                OrderLine::new("sku-gift-wrap", 1, 300),
            ]);
            let created = writer
                .create_order_with_outbox(&user, order)
                .await
                .with_context(|| format!("order {n} for {user}"))?;
            let mut events = vec![created.event_id];
            if has_follow_ups(n, follow_up_percent) {
                for status in FOLLOW_UPS {
                    let updated = writer
                        .update_order_status_with_outbox(&user, &created.order_id, status)
                        .await
                        .with_context(|| format!("order {n} for {user} to {status}"))?;
                    events.push(updated.event_id);
                }
            }
            bar.inc(1);
            Ok(events)
        })
        .buffer_unordered(usize::try_from(concurrency).unwrap_or(16))
        .collect()
        .await;
    let mut events = Vec::new();
    for written in results {
        events.extend(written?);
    }
    Ok(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follow_ups_go_to_the_given_share_of_orders_spread_evenly() {
        let with = |percent| (0..100).filter(|n| has_follow_ups(*n, percent)).count();
        assert_eq!((with(0), with(25), with(100)), (0, 25, 100));
        let quarter: Vec<u64> = (0..12).filter(|n| has_follow_ups(*n, 25)).collect();
        assert_eq!(quarter, [3, 7, 11]);
        // 40 orders, 10 of them with two follow-ups
        assert_eq!(events_of(0..40, 25), 60);
        assert_eq!(events_of(0..40, 0), 40);
    }
}
