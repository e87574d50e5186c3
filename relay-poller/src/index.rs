//! The pending index's two ports and their DynamoDB adapter: [`PendingPages`], pages of pending
//! events per partition (a `GSI1PK` value, one per shard) of the sparse, sharded `GSI1`, oldest
//! first, which a pass relays; and [`PendingCounts`], the backlog of a shard and the partitions of
//! the whole index, so events under a `GSI1PK` outside the configured shard count (a reshard,
//! another writer) are found (the sweep, `status`, a drain's remainder).

use outbox_shared::schema::PendingPartition;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::query::QueryError;
use aws_sdk_dynamodb::operation::query::builders::QueryFluentBuilder;
use aws_sdk_dynamodb::types::{AttributeValue, Select};
use outbox_shared::SdkFailure;
use outbox_shared::schema::{self, attr};

/// A raw item as the index returns it (the index projects all attributes).
pub type RawItem = HashMap<String, AttributeValue>;

/// Where the next page starts (the index's `LastEvaluatedKey`).
pub type Cursor = HashMap<String, AttributeValue>;

/// One page of pending events of one partition, oldest first.
#[derive(Debug, Clone, Default)]
pub struct PendingPage {
    pub items: Vec<RawItem>,
    /// `None` when this was the last page.
    pub next: Option<Cursor>,
}

/// How many events wait in one shard (of a region, on a global table), and since when.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ShardBacklog {
    /// The region whose events the shard holds, on a global table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    pub shard: u16,
    pub pending: u64,
    /// `CreatedAt` of the oldest pending event, if any.
    pub oldest_created_at: Option<String>,
}

/// A read of the index that failed (after the SDK's own retries).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{} of the pending index ({target}) failed", .failure.operation)]
pub struct IndexError {
    /// What was read: a partition (`GSI1PK` value) or `whole index`.
    pub target: String,
    #[source]
    pub failure: SdkFailure,
}

/// Pending events per partition (`GSI1PK` value) over the whole index.
pub type PartitionCounts = BTreeMap<String, u64>;

/// What the whole index holds: pending events per partition, and the aggregate holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexCounts {
    /// Pending events per partition.
    pub pending: PartitionCounts,
    /// Aggregate holds per partition of their last event (an earlier release's holds under
    /// [`schema::LEGACY_HOLD_PARTITION`] itself).
    pub holds: PartitionCounts,
    /// `HeldSince` of the oldest hold, if any.
    pub oldest_hold: Option<String>,
}

/// Port: pages of pending events, as a pass reads them.
pub trait PendingPages: Send + Sync {
    /// Up to `limit` pending events of `partition` (a `GSI1PK` value) whose sort key is below
    /// `before` (the grace-period cutoff), oldest first, starting after `start`.
    fn query_page(
        &self,
        partition: &str,
        before: &str,
        limit: i32,
        start: Option<Cursor>,
    ) -> impl Future<Output = Result<PendingPage, IndexError>> + Send;
}

/// Port: how many events are pending, and where.
pub trait PendingCounts: Send + Sync {
    /// Counts the pending events of `partition` and finds the oldest.
    fn backlog(
        &self,
        partition: &PendingPartition,
    ) -> impl Future<Output = Result<ShardBacklog, IndexError>> + Send;

    /// Counts the pending events of every partition the index holds, and the aggregate holds (a
    /// paginated `Scan`; the index is sparse, so it holds only pending events and holds, and is
    /// small when the relays keep up).
    fn partitions(&self) -> impl Future<Output = Result<IndexCounts, IndexError>> + Send;
}

/// The calls of [`DynamoPendingIndex`]: a shard's pages and backlog (`Query`), the sweep's and
/// `status`'s partitions (`Scan`), on the index only.
pub const CALLS: &[relay_runtime::permissions::Call] = &[
    relay_runtime::permissions::Call::new(
        "dynamodb:Query",
        relay_runtime::permissions::Target::OutboxIndex,
    ),
    relay_runtime::permissions::Call::new(
        "dynamodb:Scan",
        relay_runtime::permissions::Target::OutboxIndex,
    ),
];

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

    fn partition_query(&self, partition: &str) -> QueryFluentBuilder {
        self.client
            .query()
            .table_name(&self.table_name)
            .index_name(&self.index_name)
            .expression_attribute_names("#pk", attr::GSI1PK)
            .expression_attribute_values(":pk", AttributeValue::S(partition.to_owned()))
            .scan_index_forward(true)
    }
}

fn index_error(partition: &str, err: SdkError<QueryError>) -> IndexError {
    IndexError {
        target: partition.to_owned(),
        failure: SdkFailure::new("Query", err),
    }
}

impl PendingPages for DynamoPendingIndex {
    async fn query_page(
        &self,
        partition: &str,
        before: &str,
        limit: i32,
        start: Option<Cursor>,
    ) -> Result<PendingPage, IndexError> {
        let output = self
            .partition_query(partition)
            .key_condition_expression("#pk = :pk AND #sk < :before")
            .expression_attribute_names("#sk", attr::GSI1SK)
            .expression_attribute_values(":before", AttributeValue::S(before.to_owned()))
            .limit(limit)
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| index_error(partition, e))?;
        Ok(PendingPage {
            next: output.last_evaluated_key().cloned(),
            items: output.items.unwrap_or_default(),
        })
    }
}

impl PendingCounts for DynamoPendingIndex {
    async fn backlog(&self, shard: &PendingPartition) -> Result<ShardBacklog, IndexError> {
        let partition = shard.gsi1pk();
        let oldest = self
            .partition_query(&partition)
            .key_condition_expression("#pk = :pk")
            .limit(1)
            .send()
            .await
            .map_err(|e| index_error(&partition, e))?;
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
                .partition_query(&partition)
                .key_condition_expression("#pk = :pk")
                .select(Select::Count)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| index_error(&partition, e))?;
            pending += u64::try_from(page.count()).unwrap_or_default();
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        Ok(ShardBacklog {
            region: shard.origin.as_ref().map(ToString::to_string),
            shard: shard.shard,
            pending,
            oldest_created_at,
        })
    }

    async fn partitions(&self) -> Result<IndexCounts, IndexError> {
        let mut counts = IndexCounts::default();
        let mut start = None;
        loop {
            let page = self
                .client
                .scan()
                .table_name(&self.table_name)
                .index_name(&self.index_name)
                .projection_expression("#pk, #since")
                .expression_attribute_names("#pk", attr::GSI1PK)
                .expression_attribute_names("#since", attr::HELD_SINCE)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| IndexError {
                    target: "whole index".to_owned(),
                    failure: SdkFailure::new("Scan", e),
                })?;
            for item in page.items() {
                if let Some(partition) = item.get(attr::GSI1PK).and_then(|v| v.as_s().ok()) {
                    counts.count(
                        partition,
                        item.get(attr::HELD_SINCE).and_then(|v| v.as_s().ok()),
                    );
                }
            }
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                break;
            }
        }
        Ok(counts)
    }
}

impl IndexCounts {
    /// Counts one index item under `gsi1pk`: a pending event, or a hold (`held_since` its
    /// `HeldSince`).
    pub fn count(&mut self, gsi1pk: &str, held_since: Option<&String>) {
        if schema::is_hold_partition(gsi1pk) {
            let partition = schema::parse_hold_partition(gsi1pk).unwrap_or(gsi1pk);
            *self.holds.entry(partition.to_owned()).or_default() += 1;
            if let Some(since) = held_since
                && self
                    .oldest_hold
                    .as_ref()
                    .is_none_or(|oldest| since < oldest)
            {
                self.oldest_hold = Some(since.clone());
            }
        } else {
            *self.pending.entry(gsi1pk.to_owned()).or_default() += 1;
        }
    }

    /// Aggregate holds in the whole index.
    pub fn hold_count(&self) -> u64 {
        self.holds.values().sum()
    }
}
