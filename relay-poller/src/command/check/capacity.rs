//! Capacity planning: the shard count's write ceiling on the index, against the index's peak
//! write rate over the last 24 h as CloudWatch has it.

use aws_config::SdkConfig;
use outbox_shared::SdkFailure;
use outbox_shared::ShardCount;
use outbox_shared::limits::{
    INDEX_WRITES_PER_EVENT, PARTITION_WRITES_PER_SECOND, index_events_per_second,
};

use super::item::Item;

impl Item {
    /// The shard count's write ceiling on the index, against the index's recent peak.
    pub fn capacity(shard_count: ShardCount, peak_writes_per_second: Option<f64>) -> Self {
        let shards = shard_count.get();
        let ceiling_writes = u64::from(shards) * PARTITION_WRITES_PER_SECOND;
        let ceiling_events = index_events_per_second(shards);
        let base = format!(
            "{shards} shards take about {} events/s ({INDEX_WRITES_PER_EVENT} index writes per \
             event, {PARTITION_WRITES_PER_SECOND} writes/s per partition: {} writes/s)",
            thousands(ceiling_events),
            thousands(ceiling_writes)
        );
        match peak_writes_per_second {
            None => Self::ok(
                "capacity",
                format!("{base}; CloudWatch has no write metric of the index for the last 24 h"),
            ),
            Some(peak) if peak < 0.8 * ceiling_writes as f64 => Self::ok(
                "capacity",
                format!(
                    "{base}; the index's peak over the last 24 h: {peak:.0} writes/s ({:.1} %)",
                    100.0 * peak / ceiling_writes as f64
                ),
            ),
            Some(peak) => Self::fail(
                "capacity",
                format!(
                    "{base}; the index's peak over the last 24 h: {peak:.0} writes/s ({:.1} % of \
                     the ceiling): a hot shard throttles the index, and with it the order \
                     service's writes",
                    100.0 * peak / ceiling_writes as f64
                ),
                "raise --shard-count (OUTBOX_SHARD_COUNT, the template's ShardCount) and the \
                 writer's together (docs/operations.md, Capacity and Reshard)",
            ),
        }
    }
}

/// `n` with a comma every three digits.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The shard count's ceiling, and the index's peak write rate over the last 24 h where
/// CloudWatch has it (`ConsumedWriteCapacityUnits` of the index, per minute).
pub(super) async fn item(
    sdk: &SdkConfig,
    table: &str,
    index: &str,
    shard_count: ShardCount,
) -> Item {
    use aws_sdk_cloudwatch::types::{Dimension, Statistic};
    let now = std::time::SystemTime::now();
    let day = std::time::Duration::from_secs(24 * 3600);
    let answer = aws_sdk_cloudwatch::Client::new(sdk)
        .get_metric_statistics()
        .namespace("AWS/DynamoDB")
        .metric_name("ConsumedWriteCapacityUnits")
        .dimensions(Dimension::builder().name("TableName").value(table).build())
        .dimensions(
            Dimension::builder()
                .name("GlobalSecondaryIndexName")
                .value(index)
                .build(),
        )
        .start_time((now - day).into())
        .end_time(now.into())
        .period(60)
        .statistics(Statistic::Sum)
        .send()
        .await;
    match answer {
        Ok(out) => {
            let peak = out
                .datapoints()
                .iter()
                .filter_map(|d| d.sum())
                .map(|sum| sum / 60.0)
                .fold(None, |max: Option<f64>, v| {
                    Some(max.map_or(v, |m| m.max(v)))
                });
            Item::capacity(shard_count, peak)
        }
        Err(err) => {
            let failure = SdkFailure::new("GetMetricStatistics", err);
            let mut item = Item::capacity(shard_count, None);
            item.detail = format!(
                "{}; CloudWatch could not be read ({})",
                item.detail.split("; ").next().unwrap_or_default(),
                failure.code.as_deref().unwrap_or("no answer")
            );
            item
        }
    }
}
