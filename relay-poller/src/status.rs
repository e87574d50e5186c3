//! `relay-poller status`: the backlog per shard and the age of the oldest pending event.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use serde::Serialize;

use crate::index::{IndexError, PendingIndex, ShardBacklog};
use crate::metrics::oldest_age;

/// Shards counted at once.
const STATUS_CONCURRENCY: usize = 16;

/// The backlog of the configured shards.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusReport {
    pub shards: Vec<ShardBacklog>,
    pub total_pending: u64,
    /// `CreatedAt` of the oldest pending event over all shards.
    pub oldest_created_at: Option<String>,
    /// Seconds since then (0 when nothing is pending).
    pub oldest_pending_age_seconds: f64,
}

/// Counts every shard in `shards`.
///
/// # Errors
/// The first [`IndexError`] of a shard query.
pub async fn collect(
    index: &impl PendingIndex,
    shards: &[u16],
    now: DateTime<Utc>,
) -> Result<StatusReport, IndexError> {
    let mut per_shard: Vec<ShardBacklog> = stream::iter(shards.iter().copied())
        .map(|shard| index.backlog(shard))
        .buffer_unordered(STATUS_CONCURRENCY)
        .try_collect()
        .await?;
    per_shard.sort_by_key(|s| s.shard);
    let oldest_created_at = per_shard
        .iter()
        .filter_map(|s| s.oldest_created_at.clone())
        .min();
    Ok(StatusReport {
        total_pending: per_shard.iter().map(|s| s.pending).sum(),
        oldest_pending_age_seconds: oldest_age(oldest_created_at.as_deref(), now),
        oldest_created_at,
        shards: per_shard,
    })
}

impl StatusReport {
    /// A fixed-width table for people.
    pub fn to_table(&self) -> String {
        let mut out = String::from("shard  pending  oldest pending event\n");
        for s in &self.shards {
            let _ = writeln!(
                out,
                "{:>5}  {:>7}  {}",
                s.shard,
                s.pending,
                s.oldest_created_at.as_deref().unwrap_or("-")
            );
        }
        let _ = writeln!(
            out,
            "total  {:>7}  oldest age {:.1} s",
            self.total_pending, self.oldest_pending_age_seconds
        );
        out
    }
}
