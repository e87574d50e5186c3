//! The orders the demo writes through the outbox writer, paced like a running service's.

use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use indicatif::ProgressBar;
use outbox_writer::{NewOrder, OrderLine, OutboxWriter};

/// Writes the orders numbered `numbers`, starting `rate` per second when given (at most
/// `concurrency` in flight); returns each order's event id.
pub(crate) async fn write_orders(
    writer: &OutboxWriter,
    numbers: std::ops::Range<u64>,
    rate: Option<u64>,
    concurrency: u64,
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
    let results: Vec<Result<String>> = paced
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
            bar.inc(1);
            Ok(created.event_id)
        })
        .buffer_unordered(usize::try_from(concurrency).unwrap_or(16))
        .collect()
        .await;
    results.into_iter().collect()
}
