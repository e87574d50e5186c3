//! Creates the consumer's tables for local use and tests (deployments declare them in the
//! template): the idempotency table (`pk`, TTL on `ttl`) and the example's stock table (`pk`).

use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, TableStatus, TimeToLiveSpecification,
};
use outbox_shared::schema::{idempotency, stock};

use crate::error::StoreError;

/// How long to wait for a new table to become `ACTIVE` (the emulator is instant; AWS takes seconds).
const TABLE_ACTIVE_TIMEOUT: Duration = Duration::from_secs(60);
const TABLE_ACTIVE_POLL: Duration = Duration::from_millis(200);

/// Creates the idempotency table: partition key `pk`, on-demand, TTL on `ttl`.
///
/// # Errors
/// [`StoreError`] naming the call that failed.
pub async fn create_idempotency_table(
    client: &aws_sdk_dynamodb::Client,
    table_name: &str,
) -> Result<(), StoreError> {
    create_hash_key_table(client, table_name, idempotency::attr::PK).await?;
    client
        .update_time_to_live()
        .table_name(table_name)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(idempotency::attr::TTL)
                .build()
                .expect("enabled and attribute are set"),
        )
        .send()
        .await
        .map_err(|e| StoreError::from_sdk("UpdateTimeToLive", table_name, &e))?;
    Ok(())
}

/// Creates the example consumer's stock table: partition key `pk` (the SKU), on-demand.
///
/// # Errors
/// [`StoreError`] naming the call that failed.
pub async fn create_stock_table(
    client: &aws_sdk_dynamodb::Client,
    table_name: &str,
) -> Result<(), StoreError> {
    create_hash_key_table(client, table_name, stock::attr::PK).await
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
        .item(stock::attr::PK, AttributeValue::S(sku.to_owned()))
        .item(
            stock::attr::AVAILABLE,
            AttributeValue::N(available.to_string()),
        )
        .item(stock::attr::VERSION, AttributeValue::N("1".to_owned()))
        .send()
        .await
        .map_err(|e| StoreError::from_sdk("PutItem", table_name, &e))?;
    Ok(())
}

async fn create_hash_key_table(
    client: &aws_sdk_dynamodb::Client,
    table_name: &str,
    partition_key: &str,
) -> Result<(), StoreError> {
    client
        .create_table()
        .table_name(table_name)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name(partition_key)
                .attribute_type(ScalarAttributeType::S)
                .build()
                .expect("name and type are set"),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name(partition_key)
                .key_type(KeyType::Hash)
                .build()
                .expect("name and key type are set"),
        )
        .send()
        .await
        .map_err(|e| StoreError::from_sdk("CreateTable", table_name, &e))?;
    let deadline = tokio::time::Instant::now() + TABLE_ACTIVE_TIMEOUT;
    loop {
        let described = client
            .describe_table()
            .table_name(table_name)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("DescribeTable", table_name, &e))?;
        let status = described.table().and_then(|t| t.table_status());
        if status == Some(&TableStatus::Active) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(StoreError {
                operation: "DescribeTable",
                table: table_name.to_owned(),
                message: format!("not ACTIVE after {TABLE_ACTIVE_TIMEOUT:?} (status {status:?})"),
                retryable: true,
            });
        }
        tokio::time::sleep(TABLE_ACTIVE_POLL).await;
    }
}
