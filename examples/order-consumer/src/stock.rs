//! The stock table, this consumer's own: one item per SKU, updated with optimistic concurrency.

use aws_sdk_dynamodb::types::AttributeValue;
use outbox_consumer::StoreError;
use outbox_consumer::tables::create_hash_key_table;

/// Attribute names.
pub mod attr {
    /// Partition key: the SKU.
    pub const PK: &str = "pk";
    /// Units that can still be reserved.
    pub const AVAILABLE: &str = "available";
    /// Optimistic-concurrency version, incremented by every write.
    pub const VERSION: &str = "version";
}

/// Creates the stock table for local use and tests (deployments declare it in their template):
/// partition key [`attr::PK`] (the SKU), on-demand.
///
/// # Errors
/// [`StoreError`] naming the call that failed.
pub async fn create_stock_table(
    client: &aws_sdk_dynamodb::Client,
    table_name: &str,
) -> Result<(), StoreError> {
    create_hash_key_table(client, table_name, attr::PK).await
}

/// Sets a SKU's available stock, starting its version at 1 (seeding, not a reservation).
///
/// # Errors
/// [`StoreError`] when the write fails.
pub async fn put_stock(
    client: &aws_sdk_dynamodb::Client,
    table_name: &str,
    sku: &str,
    available: u64,
) -> Result<(), StoreError> {
    client
        .put_item()
        .table_name(table_name)
        .item(attr::PK, AttributeValue::S(sku.to_owned()))
        .item(attr::AVAILABLE, AttributeValue::N(available.to_string()))
        .item(attr::VERSION, AttributeValue::N("1".to_owned()))
        .send()
        .await
        .map_err(|e| StoreError::from_sdk("PutItem", table_name, e))?;
    Ok(())
}
