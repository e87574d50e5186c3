//! The pending-index port and its DynamoDB adapter: pages of pending events per shard of the
//! sparse, sharded `GSI1`, oldest first, and the backlog of a shard.

use std::collections::HashMap;
use std::future::Future;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::query::QueryError;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, Select};
use outbox_shared::error::{ErrorClass, classify_sdk_error};
use outbox_shared::schema::{self, attr};

/// A raw item as the index returns it (the index projects all attributes).
pub type RawItem = HashMap<String, AttributeValue>;

/// Where the next page starts (the index's `LastEvaluatedKey`).
pub type Cursor = HashMap<String, AttributeValue>;

/// One page of pending events of one shard, oldest first.
#[derive(Debug, Clone, Default)]
pub struct PendingPage {
    pub items: Vec<RawItem>,
    /// `None` when this was the last page.
    pub next: Option<Cursor>,
}

/// How many events wait in one shard, and since when.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ShardBacklog {
    pub shard: u16,
    pub pending: u64,
    /// `CreatedAt` of the oldest pending event, if any.
    pub oldest_created_at: Option<String>,
}

/// A query of the index that failed (after the SDK's own retries).
#[derive(Debug, thiserror::Error)]
#[error("query of shard {shard} failed: {message}")]
pub struct IndexError {
    pub shard: u16,
    pub class: ErrorClass,
    pub message: String,
}

/// Port: reads pending events from the sharded index.
pub trait PendingIndex: Send + Sync {
    /// Up to `limit` pending events of `shard` whose sort key is below `before` (the grace-period
    /// cutoff), oldest first, starting after `start`.
    fn query_page(
        &self,
        shard: u16,
        before: &str,
        limit: i32,
        start: Option<Cursor>,
    ) -> impl Future<Output = Result<PendingPage, IndexError>> + Send;

    /// Counts the pending events of `shard` and finds the oldest.
    fn backlog(&self, shard: u16) -> impl Future<Output = Result<ShardBacklog, IndexError>> + Send;
}

/// The DynamoDB adapter.
#[derive(Debug, Clone)]
pub struct DynamoPendingIndex {
    client: Client,
    table_name: String,
    index_name: String,
}

impl DynamoPendingIndex {
    pub fn new(
        client: Client,
        table_name: impl Into<String>,
        index_name: impl Into<String>,
    ) -> Self {
        Self {
            client,
            table_name: table_name.into(),
            index_name: index_name.into(),
        }
    }

    fn shard_query(&self, shard: u16) -> QueryFluentBuilder {
        self.client
            .query()
            .table_name(&self.table_name)
            .index_name(&self.index_name)
            .expression_attribute_names("#pk", attr::GSI1PK)
            .expression_attribute_values(":pk", AttributeValue::S(schema::pending_shard_pk(shard)))
            .scan_index_forward(true)
    }
}

fn index_error(shard: u16, err: &SdkError<QueryError>) -> IndexError {
    IndexError {
        shard,
        class: classify_sdk_error(err),
        message: aws_sdk_dynamodb::error::DisplayErrorContext(err).to_string(),
    }
}

impl PendingIndex for DynamoPendingIndex {
    async fn query_page(
        &self,
        shard: u16,
        before: &str,
        limit: i32,
        start: Option<Cursor>,
    ) -> Result<PendingPage, IndexError> {
        let output = self
            .shard_query(shard)
            .key_condition_expression("#pk = :pk AND #sk < :before")
            .expression_attribute_names("#sk", attr::GSI1SK)
            .expression_attribute_values(":before", AttributeValue::S(before.to_owned()))
            .limit(limit)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| index_error(shard, &e))?;
        Ok(PendingPage {
            next: output.last_evaluated_key().cloned(),
            items: output.items.unwrap_or_default(),
        })
    }

    async fn backlog(&self, shard: u16) -> Result<ShardBacklog, IndexError> {
        let oldest = self
            .shard_query(shard)
            .key_condition_expression("#pk = :pk")
            .limit(1)
            .send()
            .await
            .map_err(|e| index_error(shard, &e))?;
        let oldest_created_at = oldest
            .items()
            .first()
            .and_then(|item| item.get(attr::CREATED_AT))
            .and_then(|v| v.as_s().ok())
            .cloned();
        let mut pending = 0u64;
        let mut start = None;
        loop {
            let page = self
                .shard_query(shard)
                .key_condition_expression("#pk = :pk")
                .select(Select::Count)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| index_error(shard, &e))?;
            pending += u64::try_from(page.count()).unwrap_or_default();
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        Ok(ShardBacklog {
            shard,
            pending,
            oldest_created_at,
        })
    }
}
