//! The helpers' own tables: the idempotency table's schema (attribute names and status values),
//! and table creation for local use and tests (deployments declare the tables in the template).
//!
//! These tables are the consumer's, not the outbox table: a consumer service owns and names them.

use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, TableStatus,
    TimeToLiveSpecification,
};

use crate::error::StoreError;

/// The idempotency table (its own table, not the outbox table): one record per key.
pub mod idempotency {
    /// Attribute names.
    pub mod attr {
        /// Partition key: the idempotency key (by default the envelope's `metadata.eventId`).
        pub const PK: &str = "pk";
        /// `IN_PROGRESS`, `COMPLETED` or `FAILED`.
        pub const STATUS: &str = "status";
        /// Epoch milliseconds until which the record holds its key; after it the key can be claimed.
        pub const EXPIRY: &str = "expiry";
        /// Epoch seconds after which DynamoDB TTL deletes the record (cleanup only).
        pub const TTL: &str = "ttl";
        /// Hex SHA-256 of the canonical JSON payload, to reject a reused key with another payload.
        pub const PAYLOAD_HASH: &str = "payload_hash";
        /// The business logic's serialized response, once completed.
        pub const RESPONSE: &str = "response";
        /// Per-claim token: the completion is conditioned on it, so only the holder completes.
        pub const CLAIM_TOKEN: &str = "claim_token";
        /// The last business error, when a failure is recorded rather than released.
        pub const ERROR: &str = "error";
        /// How many times the key's logic has failed (recorded failures only).
        pub const FAILURES: &str = "failures";
    }

    /// `status` values.
    pub mod status {
        pub const IN_PROGRESS: &str = "IN_PROGRESS";
        pub const COMPLETED: &str = "COMPLETED";
        pub const FAILED: &str = "FAILED";
    }
}

/// An aggregate's applied sequence (the batch processor's order option,
/// [`crate::sequencing`]): one record per aggregate, on the consumer's table (by default the
/// idempotency table: its partition key is a string named `pk` too, and no event id starts with
/// [`sequence::KEY_PREFIX`]).
pub mod sequence {
    /// Prefix of an aggregate's record key: `SEQUENCE#{aggregateType}#{aggregateId}`.
    pub const KEY_PREFIX: &str = "SEQUENCE#";

    /// Attribute names.
    pub mod attr {
        /// Partition key: [`super::KEY_PREFIX`], the aggregate's type and id.
        pub const PK: &str = "pk";
        /// The last sequence applied (0: none yet, the aggregate's next event is its first).
        pub const LAST_SEQUENCE: &str = "last_sequence";
        /// Epoch milliseconds since when an event after `last_sequence + 1` is waiting for its
        /// predecessor (absent: none is).
        pub const GAP_SINCE: &str = "gap_since";
        /// The lowest sequence seen waiting since `gap_since`.
        pub const LOWEST_WAITING: &str = "lowest_waiting";
        /// Epoch milliseconds of the last sequence's application.
        pub const APPLIED_AT: &str = "applied_at";
    }
}

/// How long to wait for a new table to become `ACTIVE` (the emulator is instant; AWS takes seconds).
const TABLE_ACTIVE_TIMEOUT: Duration = Duration::from_secs(60);
const TABLE_ACTIVE_POLL: Duration = Duration::from_millis(200);

/// Creates the idempotency table: partition key [`idempotency::attr::PK`], on-demand, TTL on
/// [`idempotency::attr::TTL`].
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
        .map_err(|e| StoreError::from_sdk("UpdateTimeToLive", table_name, e))?;
    Ok(())
}

/// Creates an on-demand table keyed by the string partition key `partition_key`, and waits
/// until it is `ACTIVE` (for a consumer's own tables, e.g. one an [`OccTable`](crate::OccTable)
/// updates).
///
/// # Errors
/// [`StoreError`] naming the call that failed, or [`StoreError::NotActive`].
pub async fn create_hash_key_table(
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
        .map_err(|e| StoreError::from_sdk("CreateTable", table_name, e))?;
    let deadline = tokio::time::Instant::now() + TABLE_ACTIVE_TIMEOUT;
    loop {
        let described = client
            .describe_table()
            .table_name(table_name)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("DescribeTable", table_name, e))?;
        let status = described.table().and_then(|t| t.table_status());
        if status == Some(&TableStatus::Active) {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(StoreError::NotActive {
                table: table_name.to_owned(),
                waited: TABLE_ACTIVE_TIMEOUT,
                status: status.map_or_else(|| "unknown".to_owned(), |s| s.as_str().to_owned()),
            });
        }
        tokio::time::sleep(TABLE_ACTIVE_POLL).await;
    }
}
