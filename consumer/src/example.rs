//! The example consumer: an EventBridge-triggered Lambda that reserves stock for each
//! `OrderCreated` event exactly once, however often the relay delivers it.
//!
//! The idempotency store (keyed on the envelope's `metadata.eventId`) makes the whole reservation
//! happen once per event; the OCC helper makes each SKU's decrement safe against concurrent orders
//! for the same SKU. A reservation that cannot be met (unknown SKU, not enough stock) is a final
//! answer, stored like any other response; a store failure releases the claim so the retry runs.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

pub use aws_lambda_events::eventbridge::EventBridgeEvent;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use outbox_shared::Envelope;
use outbox_shared::schema::stock;
use serde::{Deserialize, Serialize};
use tracing::{error, info, warn};

use crate::clock::Clock;
use crate::idempotency::{
    EventIdKey, FailurePolicy, IdempotencyConfig, IdempotencyError, IdempotencyStore, Outcome,
};
use crate::occ::{Item, OccConfig, OccError, OccTable};

/// The `DetailType` (and `metadata.eventType`) this consumer acts on.
pub const ORDER_CREATED: &str = "OrderCreated";

/// One line of an order, as the writer puts it in `OrderCreated`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderLine {
    pub sku: String,
    pub quantity: u32,
    pub unit_price_cents: u64,
}

/// The `data` of an `OrderCreated` envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderCreated {
    pub order_id: String,
    pub user_id: String,
    pub items: Vec<OrderLine>,
    pub amount_cents: u64,
    pub status: String,
    pub version: u64,
    pub created_at: String,
}

/// A reserved line and the stock left after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReservedLine {
    pub sku: String,
    pub quantity: u64,
    pub remaining: u64,
}

/// The stored response for an order: what a duplicate delivery gets back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "result")]
pub enum Reservation {
    /// Every line is reserved.
    Reserved {
        order_id: String,
        lines: Vec<ReservedLine>,
    },
    /// Nothing is reserved (lines reserved before the refusal were given back).
    Rejected { order_id: String, reason: String },
}

/// An inventory that cannot answer right now (its store failed): retry the event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("inventory unavailable: {0}")]
pub struct InventoryError(pub String);

/// Port: reserves an order's lines, all or nothing.
pub trait Inventory: Send + Sync {
    /// # Errors
    /// [`InventoryError`] when the inventory could not decide; a refusal is an `Ok` answer.
    fn reserve(
        &self,
        order_id: &str,
        lines: &[OrderLine],
    ) -> impl Future<Output = Result<Reservation, InventoryError>> + Send;
}

/// One SKU's stock as stored (key and version are added by the OCC helper).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockLevel {
    // serde needs the name as a literal; `stock_level_uses_the_schema_names` ties it to the schema.
    #[serde(rename = "available")]
    pub available: u64,
}

#[derive(Debug, thiserror::Error)]
enum Refusal {
    #[error("unknown sku {0:?}")]
    UnknownSku(String),
    #[error("sku {sku:?}: {requested} requested, {available} available")]
    Insufficient {
        sku: String,
        requested: u64,
        available: u64,
    },
    #[error("sku {0:?}: stock would overflow")]
    Overflow(String),
}

/// The DynamoDB inventory: one item per SKU, decremented with optimistic concurrency.
#[derive(Debug, Clone)]
pub struct DynamoInventory {
    stock: OccTable,
}

impl DynamoInventory {
    pub fn new(stock: OccTable) -> Self {
        Self { stock }
    }

    /// A SKU's stock and version, if the SKU exists.
    ///
    /// # Errors
    /// [`OccError`] when the read fails or the item is not a stock level.
    pub async fn stock_level(
        &self,
        sku: &str,
    ) -> Result<Option<crate::occ::Versioned<StockLevel>>, OccError<std::convert::Infallible>> {
        self.stock.read(&Self::key(sku)).await
    }

    /// The stock table key of `sku`.
    pub fn key(sku: &str) -> Item {
        Item::from([(
            stock::attr::PK.to_owned(),
            AttributeValue::S(sku.to_owned()),
        )])
    }

    /// Adds `delta` (negative: takes) to a SKU's stock, refusing to go below zero.
    async fn adjust(&self, sku: &str, delta: i128) -> Result<u64, OccError<Refusal>> {
        let committed = self
            .stock
            .update(&Self::key(sku), |current: Option<StockLevel>| {
                let current = current.ok_or_else(|| Refusal::UnknownSku(sku.to_owned()))?;
                let next = i128::from(current.available) + delta;
                if next < 0 {
                    return Err(Refusal::Insufficient {
                        sku: sku.to_owned(),
                        requested: delta.unsigned_abs().try_into().unwrap_or(u64::MAX),
                        available: current.available,
                    });
                }
                let available =
                    u64::try_from(next).map_err(|_| Refusal::Overflow(sku.to_owned()))?;
                Ok(StockLevel { available })
            })
            .await?;
        Ok(committed.value.available)
    }

    /// Gives back reserved lines after a later line failed. Best effort: if it fails the stock
    /// stays low, which an operator must reconcile.
    async fn give_back(&self, order_id: &str, reserved: &[ReservedLine]) {
        for line in reserved {
            if let Err(e) = self.adjust(&line.sku, i128::from(line.quantity)).await {
                error!(order_id, sku = %line.sku, quantity = line.quantity, error = %e,
                    "could not give back a reserved line; stock must be reconciled");
            }
        }
    }
}

impl Inventory for DynamoInventory {
    async fn reserve(
        &self,
        order_id: &str,
        lines: &[OrderLine],
    ) -> Result<Reservation, InventoryError> {
        // One decrement per SKU even if the order lists a SKU twice, in a stable order.
        let mut wanted: BTreeMap<&str, u64> = BTreeMap::new();
        for line in lines {
            *wanted.entry(line.sku.as_str()).or_default() += u64::from(line.quantity);
        }
        let mut reserved = Vec::with_capacity(wanted.len());
        for (sku, quantity) in wanted {
            match self.adjust(sku, -i128::from(quantity)).await {
                Ok(remaining) => reserved.push(ReservedLine {
                    sku: sku.to_owned(),
                    quantity,
                    remaining,
                }),
                Err(OccError::Rejected(refusal)) => {
                    self.give_back(order_id, &reserved).await;
                    return Ok(Reservation::Rejected {
                        order_id: order_id.to_owned(),
                        reason: refusal.to_string(),
                    });
                }
                Err(e) => {
                    self.give_back(order_id, &reserved).await;
                    return Err(InventoryError(e.to_string()));
                }
            }
        }
        Ok(Reservation::Reserved {
            order_id: order_id.to_owned(),
            lines: reserved,
        })
    }
}

/// What the handler did with one event (the Lambda's response).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "handled")]
pub enum Handled {
    /// Not an `OrderCreated` event: nothing to do.
    Ignored { detail_type: String },
    /// Reserved now (`replayed: false`) or answered from the stored response (`replayed: true`).
    Processed {
        replayed: bool,
        reservation: Reservation,
    },
}

/// Why an event was not handled. Returning it fails the invocation, so EventBridge's retry policy
/// (and then the function's on-failure destination) takes over.
#[derive(Debug, thiserror::Error)]
pub enum HandlerError {
    /// The `detail` is not an `OrderCreated` envelope: poison, retrying cannot help.
    #[error("malformed OrderCreated event: {0}")]
    Malformed(String),
    /// Another delivery of the same event is being processed, or the inventory or store failed.
    #[error("retryable: {0}")]
    Retryable(String),
    /// The event can never be processed (e.g. its id was used with another payload).
    #[error("not retryable: {0}")]
    Permanent(String),
}

impl HandlerError {
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Retryable(_))
    }
}

impl From<HandlerError> for lambda_runtime::Diagnostic {
    fn from(error: HandlerError) -> Self {
        let error_type = match error {
            HandlerError::Malformed(_) => "MalformedEvent",
            HandlerError::Retryable(_) => "Retryable",
            HandlerError::Permanent(_) => "Permanent",
        };
        Self {
            error_type: error_type.to_owned(),
            error_message: error.to_string(),
        }
    }
}

/// Handles one EventBridge event: reserves stock for an `OrderCreated` once per `eventId`.
///
/// `deadline` is the invocation's deadline; it bounds the idempotency lock.
///
/// # Errors
/// [`HandlerError`], saying whether a retry can help.
pub async fn handle_event<I: Inventory, C: Clock>(
    event: &EventBridgeEvent<serde_json::Value>,
    deadline: Option<DateTime<Utc>>,
    store: &IdempotencyStore<C>,
    inventory: &I,
) -> Result<Handled, HandlerError> {
    if event.detail_type != ORDER_CREATED {
        info!(detail_type = %event.detail_type, "ignoring event");
        return Ok(Handled::Ignored {
            detail_type: event.detail_type.clone(),
        });
    }
    let envelope: Envelope<OrderCreated> = serde_json::from_value(event.detail.clone())
        .map_err(|e| HandlerError::Malformed(e.to_string()))?;
    let event_id = envelope.metadata.event_id.clone();
    let order_id = envelope.data.order_id.clone();
    let outcome = store
        .run_event(&envelope, &EventIdKey, deadline, || {
            inventory.reserve(&envelope.data.order_id, &envelope.data.items)
        })
        .await;
    match outcome {
        Ok(outcome) => {
            let replayed = matches!(outcome, Outcome::AlreadyCompleted(_));
            info!(event_id = %event_id, order_id = %order_id, replayed, "OrderCreated handled");
            Ok(Handled::Processed {
                replayed,
                reservation: outcome.into_response(),
            })
        }
        Err(e) => {
            warn!(event_id = %event_id, order_id = %order_id, retryable = e.is_retryable(), error = %e,
                "OrderCreated not handled");
            Err(classify(&e))
        }
    }
}

fn classify(error: &IdempotencyError<InventoryError>) -> HandlerError {
    if error.is_retryable() {
        HandlerError::Retryable(error.to_string())
    } else {
        HandlerError::Permanent(error.to_string())
    }
}

/// The example consumer's configuration, from flags or the Lambda's environment.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "example-consumer",
    about = "Reserves stock for OrderCreated events, once per event"
)]
pub struct ExampleArgs {
    /// The idempotency table.
    #[arg(long, env = "IDEMPOTENCY_TABLE_NAME")]
    pub idempotency_table: String,
    /// The stock table.
    #[arg(long, env = "STOCK_TABLE_NAME")]
    pub stock_table: String,
    /// How long a claim keeps duplicate deliveries out (further bounded by the invocation deadline).
    #[arg(long, env = "IDEMPOTENCY_LOCK_EXPIRY", default_value = "60s", value_parser = humantime::parse_duration)]
    pub lock_expiry: Duration,
    /// How long a completed event answers duplicates with its stored response.
    #[arg(long, env = "IDEMPOTENCY_RETENTION", default_value = "7days", value_parser = humantime::parse_duration)]
    pub retention: Duration,
    /// Completed event ids remembered in memory across warm invocations (0: off).
    #[arg(long, env = "IDEMPOTENCY_CACHE_CAPACITY", default_value_t = 1024)]
    pub cache_capacity: usize,
    /// Retries of a stock update that lost a race with another order.
    #[arg(long, env = "STOCK_MAX_RETRIES", default_value_t = 10)]
    pub stock_max_retries: u32,
}

impl ExampleArgs {
    /// The validated configurations.
    ///
    /// # Errors
    /// [`outbox_shared::ConfigError`] naming the setting that is out of range.
    pub fn configs(&self) -> Result<(IdempotencyConfig, OccConfig), outbox_shared::ConfigError> {
        let idempotency = IdempotencyConfig {
            lock_expiry: self.lock_expiry,
            completed_retention: self.retention,
            on_failure: FailurePolicy::Release,
            cache_capacity: self.cache_capacity,
            ..IdempotencyConfig::new(&self.idempotency_table)
        };
        idempotency.validate()?;
        let mut occ = OccConfig::new(&self.stock_table, stock::attr::VERSION);
        occ.retry.max_retries = self.stock_max_retries;
        occ.validate()?;
        Ok((idempotency, occ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn stock_level_uses_the_schema_names() {
        let item: Item = serde_dynamo::to_item(StockLevel { available: 3 }).unwrap();
        assert_eq!(item.keys().collect::<Vec<_>>(), [stock::attr::AVAILABLE]);
    }

    #[test]
    fn order_created_matches_the_writer_contract() {
        let data = serde_json::json!({
            "orderId": "o-1", "userId": "u-1",
            "items": [{"sku": "SKU-1", "quantity": 2, "unitPriceCents": 150}],
            "amountCents": 300, "status": "CREATED", "version": 1,
            "createdAt": "2026-11-22T10:00:00.000Z"
        });
        let order: OrderCreated = serde_json::from_value(data.clone()).unwrap();
        assert_eq!(order.items[0].quantity, 2);
        assert_eq!(serde_json::to_value(&order).unwrap(), data);
    }

    #[test]
    fn args_come_from_flags_and_bad_values_name_the_flag() {
        let args = ExampleArgs::try_parse_from([
            "example-consumer",
            "--idempotency-table",
            "idem",
            "--stock-table",
            "stock",
            "--lock-expiry",
            "30s",
        ])
        .unwrap();
        let (idempotency, occ) = args.configs().unwrap();
        assert_eq!(idempotency.lock_expiry, Duration::from_secs(30));
        assert_eq!(occ.version_attribute, stock::attr::VERSION);
        let err = ExampleArgs::try_parse_from([
            "example-consumer",
            "--idempotency-table",
            "idem",
            "--stock-table",
            "stock",
            "--lock-expiry",
            "soon",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("--lock-expiry"), "{err}");
    }
}
