//! The inventory port and its DynamoDB adapter: one stock item per SKU, decremented with the
//! OCC helper, all lines of an order or none.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;

use aws_sdk_dynamodb::types::AttributeValue;
use outbox_consumer::occ::Item;
use outbox_consumer::{OccError, OccTable, Versioned};
use outbox_writer::OrderLine;
use serde::{Deserialize, Serialize};
use tracing::error;

use crate::stock;

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
    ) -> Result<Option<Versioned<StockLevel>>, OccError<Infallible>> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stock_level_uses_the_schema_names() {
        let item: Item = serde_dynamo::to_item(StockLevel { available: 3 }).unwrap();
        assert_eq!(item.keys().collect::<Vec<_>>(), [stock::attr::AVAILABLE]);
    }
}
