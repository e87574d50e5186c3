//! The orders the demo writes through the outbox writer, paced like a running service's; the
//! follow-up events of a share of them: status changes through the writer's optimistic-
//! concurrency update, so those orders (aggregates) have several events, in `Sequence` order;
//! and a share of large orders, whose payloads travel through the payload bucket (the claim
//! check), one way or the other ([`LargeOrder`]).

use std::collections::HashMap;
use std::time::Duration;

use anyhow::{Context, Result};
use aws_sdk_dynamodb::types::{AttributeValue, Put};
use futures::StreamExt;
use indicatif::ProgressBar;
use outbox_shared::claim_check::sha256_base64;
use outbox_shared::schema::{self, attr, entity};
use outbox_writer::{
    ConditionFailure, INITIAL_VERSION, NewOrder, NewOutboxEvent, ORDER_AGGREGATE, ORDER_CREATED,
    OrderCreated, OrderLine, OrderStatus, OutboxTransaction, OutboxWriter,
};

/// The status changes an order with follow-ups goes through after `CREATED`, one event each
/// (versions 2 and 3), written one after the other, each after the previous one committed.
pub(crate) const FOLLOW_UPS: [OrderStatus; 2] = [OrderStatus::Confirmed, OrderStatus::Paid];

/// Line items of an order that is over an entry ([`LargeOrder::OverEntry`]): about 300 KB of
/// JSON, over the 256 KiB entry of a bus, a topic or a queue (`MAX_ENTRY_BYTES`' default) and
/// under DynamoDB's 400 KB item, which holds them twice (the order item and the outbox item).
const OVER_ENTRY_LINE_BYTES: usize = 300 * 1000;

/// Line items of an order that is over an item ([`LargeOrder::OverItem`]): about 1 MiB of JSON,
/// over DynamoDB's 400 KB item.
const OVER_ITEM_LINE_BYTES: usize = 1024 * 1024;

/// Whether order `n` is among `percent` of the orders, spread evenly (order `n` when the running
/// share `n * percent / 100` steps up at `n`), so a short run has its share too.
pub(crate) fn in_share(n: u64, percent: u64) -> bool {
    (n + 1) * percent / 100 > n * percent / 100
}

/// Which orders get follow-up events: `percent` of them, spread evenly ([`in_share`]).
pub(crate) fn has_follow_ups(n: u64, percent: u64) -> bool {
    in_share(n, percent)
}

/// Events the orders numbered `numbers` write: one each, plus [`FOLLOW_UPS`] for those that
/// [`has_follow_ups`].
pub(crate) fn events_of(numbers: impl IntoIterator<Item = u64>, percent: u64) -> u64 {
    numbers
        .into_iter()
        .map(|n| {
            1 + if has_follow_ups(n, percent) {
                FOLLOW_UPS.len() as u64
            } else {
                0
            }
        })
        .sum()
}

/// A large order, and so which way its `OrderCreated` payload reaches the payload bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LargeOrder {
    /// About 300 KB of lines ([`OVER_ENTRY_LINE_BYTES`]), written with
    /// `create_order_with_outbox`: the order item and its outbox item fit DynamoDB's 400 KB, the
    /// event does not fit the target's 256 KiB entry, so the relay that publishes it stores its
    /// payload in S3 first (on a target whose entry takes it, Kinesis's 1 MiB record, it travels
    /// inline).
    OverEntry,
    /// About 1 MiB of lines ([`OVER_ITEM_LINE_BYTES`]): too large for an item, so the order is
    /// written through the writer's general transaction (a bulk order: its item holds the
    /// order's totals, its lines are only in its event), and the writer stores the payload in S3
    /// before the transaction; the relays publish the reference.
    OverItem,
}

impl LargeOrder {
    /// Which large order, if any, order `n` is: `percent` of the orders, spread evenly
    /// ([`in_share`]), every other one of them over an item, starting with one over an entry.
    pub(crate) fn of(n: u64, percent: u64) -> Option<Self> {
        if !in_share(n, percent) {
            return None;
        }
        // The large orders before `n`: `n` is the next one.
        Some(if (n * percent / 100).is_multiple_of(2) {
            Self::OverEntry
        } else {
            Self::OverItem
        })
    }

    /// Of the orders numbered `numbers`, those that are large (`true`) or not (`false`) at
    /// `percent`, in their order.
    pub(crate) fn select(numbers: std::ops::Range<u64>, percent: u64, large: bool) -> Vec<u64> {
        numbers
            .filter(|&n| Self::of(n, percent).is_some() == large)
            .collect()
    }

    /// Bytes of line items (their JSON) an order of this kind carries, about.
    fn line_bytes(self) -> usize {
        match self {
            Self::OverEntry => OVER_ENTRY_LINE_BYTES,
            Self::OverItem => OVER_ITEM_LINE_BYTES,
        }
    }
}

/// Line items of a large order: distinct skus, as many as make about `bytes` bytes of JSON (at
/// least `bytes`).
pub(crate) fn lines_of_about(bytes: usize) -> Vec<OrderLine> {
    let mut lines = Vec::new();
    // The array's two brackets and a comma after each line but the last: 1 + (line + comma)s.
    let mut size = 1;
    while size < bytes {
        let i = lines.len();
        let line = OrderLine::new(format!("sku-{i:06}"), 1 + (i % 3) as u32, 1_250);
        size += serde_json::to_string(&line).map_or(0, |json| json.len()) + 1;
        lines.push(line);
    }
    lines
}

/// The digest the demo checks a large order's payload against: the SHA-256 (base64) of its
/// lines as JSON, as written and as read back.
pub(crate) fn lines_digest(lines: &[OrderLine]) -> Result<String> {
    Ok(sha256_base64(
        &serde_json::to_vec(lines).context("encoding order lines")?,
    ))
}

/// A large order the demo wrote: its `OrderCreated` event, and what its payload must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WrittenLarge {
    pub(crate) event_id: String,
    pub(crate) kind: LargeOrder,
    /// Lines written.
    pub(crate) lines: usize,
    /// [`lines_digest`] of the lines written.
    pub(crate) lines_sha256: String,
}

/// What the demo wrote: the id of every event (each order's `OrderCreated`, then its
/// follow-ups), and the large orders among them.
#[derive(Debug, Clone, Default)]
pub(crate) struct WrittenEvents {
    pub(crate) event_ids: Vec<String>,
    pub(crate) large: Vec<WrittenLarge>,
}

impl WrittenEvents {
    pub(crate) fn extend(&mut self, other: Self) {
        self.event_ids.extend(other.event_ids);
        self.large.extend(other.large);
    }
}

/// Which orders get follow-ups and which are large, each a percent of them spread evenly.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OrderMix {
    pub(crate) follow_up_percent: u64,
    pub(crate) large_order_percent: u64,
}

/// Writes the orders numbered `numbers`, starting `rate` per second when given (at most
/// `concurrency` in flight), with the follow-ups and large orders `mix` says; returns what was
/// written.
pub(crate) async fn write_orders(
    writer: &OutboxWriter,
    numbers: &[u64],
    rate: Option<u64>,
    concurrency: u64,
    mix: OrderMix,
    bar: &ProgressBar,
) -> Result<WrittenEvents> {
    let pace = rate.map(|rate| {
        // Precision loss is irrelevant for a period (rate is at most 100,000).
        #[allow(clippy::cast_precision_loss)]
        let mut interval = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
        // Behind schedule (a slow write held a slot), catch up at once: the rate is an average.
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        interval
    });
    let numbers = numbers.iter().copied();
    let paced = futures::stream::unfold((numbers, pace), |(mut numbers, mut pace)| async move {
        let n = numbers.next()?;
        if let Some(interval) = pace.as_mut() {
            interval.tick().await;
        }
        Some((n, (numbers, pace)))
    });
    let results: Vec<Result<WrittenEvents>> = paced
        .map(|n| async move {
            let written = write_order(writer, n, mix).await?;
            bar.inc(1);
            Ok(written)
        })
        .buffer_unordered(usize::try_from(concurrency).unwrap_or(16))
        .collect()
        .await;
    let mut events = WrittenEvents::default();
    for written in results {
        events.extend(written?);
    }
    Ok(events)
}

/// Writes order `n` (large or not, as `mix` says) and its follow-ups.
pub(crate) async fn write_order(
    writer: &OutboxWriter,
    n: u64,
    mix: OrderMix,
) -> Result<WrittenEvents> {
    let user = format!("user-{}", n % 97);
    let mut written = WrittenEvents::default();
    let (order_id, event_id) = match LargeOrder::of(n, mix.large_order_percent) {
        None => {
            let order = NewOrder::new(vec![
                OrderLine::new(format!("sku-{}", n % 13), 1 + (n % 3) as u32, 1_250),
                OrderLine::new("sku-gift-wrap", 1, 300),
            ]);
            let created = writer
                .create_order_with_outbox(&user, order)
                .await
                .with_context(|| format!("order {n} for {user}"))?;
            (created.order_id, created.event_id)
        }
        Some(kind) => {
            let lines = lines_of_about(kind.line_bytes());
            let large = |event_id: &str| -> Result<WrittenLarge> {
                Ok(WrittenLarge {
                    event_id: event_id.to_owned(),
                    kind,
                    lines: lines.len(),
                    lines_sha256: lines_digest(&lines)?,
                })
            };
            let (order_id, event_id) = match kind {
                LargeOrder::OverEntry => {
                    let created = writer
                        .create_order_with_outbox(&user, NewOrder::new(lines.clone()))
                        .await
                        .with_context(|| {
                            format!("large order {n} for {user} ({} lines)", lines.len())
                        })?;
                    (created.order_id, created.event_id)
                }
                LargeOrder::OverItem => create_bulk_order(writer, &user, &lines)
                    .await
                    .with_context(|| {
                        format!("bulk order {n} for {user} ({} lines)", lines.len())
                    })?,
            };
            written.large.push(large(&event_id)?);
            (order_id, event_id)
        }
    };
    written.event_ids.push(event_id);
    if has_follow_ups(n, mix.follow_up_percent) {
        for status in FOLLOW_UPS {
            let updated = writer
                .update_order_status_with_outbox(&user, &order_id, status)
                .await
                .with_context(|| format!("order {n} for {user} to {status}"))?;
            written.event_ids.push(updated.event_id);
        }
    }
    Ok(written)
}

/// Creates a bulk order, one too large for an item with its lines, through the writer's general
/// transaction: the order item (`CREATED`, version 1, so its status changes like any order's)
/// holds its totals, and its `OrderCreated` event, the same `data` as any order's, its lines; the
/// writer stores that payload in the payload bucket before the transaction. Returns the order's
/// and the event's ids.
async fn create_bulk_order(
    writer: &OutboxWriter,
    user_id: &str,
    lines: &[OrderLine],
) -> Result<(String, String)> {
    let order_id = uuid::Uuid::now_v7().to_string();
    let created_at = outbox_shared::time::format_timestamp(chrono::Utc::now());
    let amount_cents: u64 = lines
        .iter()
        .map(|line| line.unit_price_cents * u64::from(line.quantity))
        .sum();
    let s = |value: &str| AttributeValue::S(value.to_owned());
    let item = HashMap::from([
        (attr::PK.to_owned(), s(&schema::user_pk(user_id))),
        (attr::SK.to_owned(), s(&schema::order_sk(&order_id))),
        (attr::ENTITY_TYPE.to_owned(), s(entity::ORDER)),
        (attr::ORDER_ID.to_owned(), s(&order_id)),
        (attr::USER_ID.to_owned(), s(user_id)),
        (
            attr::AMOUNT.to_owned(),
            AttributeValue::N(amount_cents.to_string()),
        ),
        (attr::STATUS.to_owned(), s(OrderStatus::Created.as_str())),
        (
            attr::VERSION.to_owned(),
            AttributeValue::N(INITIAL_VERSION.to_string()),
        ),
        (attr::CREATED_AT.to_owned(), s(&created_at)),
    ]);
    let put = Put::builder()
        .table_name(&writer.config().outbox.table_name)
        .set_item(Some(item))
        .condition_expression("attribute_not_exists(#pk)")
        .expression_attribute_names("#pk", attr::PK)
        .build()
        .context("the bulk order's Put")?;
    let payload = OrderCreated {
        order_id: order_id.clone(),
        user_id: user_id.to_owned(),
        items: lines.to_vec(),
        amount_cents,
        status: OrderStatus::Created,
        version: INITIAL_VERSION,
        created_at,
    };
    let event = NewOutboxEvent {
        partition_key: schema::user_pk(user_id),
        event_type: ORDER_CREATED.to_owned(),
        aggregate_type: ORDER_AGGREGATE.to_owned(),
        aggregate_id: order_id.clone(),
        sequence: Some(INITIAL_VERSION),
        payload: serde_json::to_value(&payload).context("encoding OrderCreated")?,
        trace_header: None,
        trace_context: None,
    };
    let committed = writer
        .commit(
            OutboxTransaction::new()
                .put(put, ConditionFailure::AlreadyExists)
                .event(event),
        )
        .await?;
    let event_id = committed
        .event_ids()
        .first()
        .map(|id| (*id).to_owned())
        .context("the commit wrote no event")?;
    Ok((order_id, event_id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_shared::limits::{ITEM_MAX_BYTES, PUT_EVENTS_DEFAULT_MAX_BYTES};

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

    #[test]
    fn large_orders_are_the_given_share_spread_evenly_alternating_over_an_entry_and_an_item() {
        let large = |numbers: std::ops::Range<u64>, percent| -> Vec<(u64, LargeOrder)> {
            numbers
                .filter_map(|n| LargeOrder::of(n, percent).map(|kind| (n, kind)))
                .collect()
        };
        // 2 % of 1,000 orders: 20, one in every 50, half of each kind
        let default = large(0..1000, 2);
        assert_eq!(default.len(), 20);
        assert_eq!(
            default.iter().map(|(n, _)| *n).take(3).collect::<Vec<_>>(),
            [49, 99, 149]
        );
        let over_item = default
            .iter()
            .filter(|(_, kind)| *kind == LargeOrder::OverItem)
            .count();
        assert_eq!(over_item, 10);
        // A short run has its share, the first one over an entry
        use LargeOrder::{OverEntry, OverItem};
        assert_eq!(
            large(0..52, 10),
            [
                (9, OverEntry),
                (19, OverItem),
                (29, OverEntry),
                (39, OverItem),
                (49, OverEntry)
            ]
        );
        // 0 turns them off; 100 makes every order large
        assert!(large(0..1000, 0).is_empty());
        assert_eq!(large(0..10, 100).len(), 10);
        // The large and the others of a range, apart: together every order once
        assert_eq!(LargeOrder::select(0..52, 10, true), [9, 19, 29, 39, 49]);
        let others = LargeOrder::select(0..52, 10, false);
        assert_eq!(others.len(), 47);
        assert!(others.iter().all(|n| LargeOrder::of(*n, 10).is_none()));
    }

    #[test]
    fn an_order_over_an_entry_fits_an_item_and_one_over_an_item_does_not() {
        let json = |bytes| serde_json::to_vec(&lines_of_about(bytes)).unwrap().len();

        // Over the 256 KiB entry, with room for the envelope; under the 400 KB item
        let over_entry = json(OVER_ENTRY_LINE_BYTES);
        assert!(over_entry > PUT_EVENTS_DEFAULT_MAX_BYTES, "{over_entry}");
        assert!(over_entry < ITEM_MAX_BYTES * 3 / 4, "{over_entry}");
        // Over the 400 KB item, about 1 MiB
        let over_item = json(OVER_ITEM_LINE_BYTES);
        assert!(
            (OVER_ITEM_LINE_BYTES..OVER_ITEM_LINE_BYTES + 100).contains(&over_item),
            "{over_item}"
        );
        assert!(over_item > ITEM_MAX_BYTES);
    }

    #[test]
    fn the_lines_digest_is_the_same_for_the_same_lines_only() {
        let lines = lines_of_about(1000);
        let mut other = lines.clone();
        other[3].quantity += 1;
        assert_eq!(
            lines_digest(&lines).unwrap(),
            lines_digest(&lines.clone()).unwrap()
        );
        assert_ne!(lines_digest(&lines).unwrap(), lines_digest(&other).unwrap());
    }
}
