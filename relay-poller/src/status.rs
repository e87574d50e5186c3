//! `relay-poller status`: the backlog per shard, the age of the oldest pending event, and every
//! partition (`GSI1PK` value) of the index with its pending count, marking the stray ones (outside
//! the shard count: only the sweep publishes them); with a lease table, each shard's owner and
//! lease age and the live pollers.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use futures::{StreamExt, TryStreamExt, stream};
use serde::Serialize;

use std::collections::BTreeMap;

use outbox_shared::schema::PendingPartition;

use std::collections::BTreeSet;

use outbox_shared::Region;

use crate::assignment::{LeaseView, Millis, plan};
use crate::failover::RegionView;
use crate::index::{IndexError, PendingCounts, ShardBacklog};
use crate::metrics::oldest_age;
use crate::partitions::Partitions;

/// Shards counted at once.
const STATUS_CONCURRENCY: usize = 16;

/// The backlog of the configured shards.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatusReport {
    /// Each shard's backlog; on a global table each region's shards, by region.
    pub shards: Vec<ShardBacklog>,
    pub total_pending: u64,
    /// On a global table, the events pending in each region's shards (written there), by region;
    /// empty (and left out) on a single-region table.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub pending_per_region: BTreeMap<String, u64>,
    /// `CreatedAt` of the oldest pending event over all shards.
    pub oldest_created_at: Option<String>,
    /// Seconds since then (0 when nothing is pending).
    pub oldest_pending_age_seconds: f64,
    /// Every partition the index holds, by name.
    pub partitions: Vec<PartitionBacklog>,
    /// Pending events under stray partitions.
    pub stray_pending: u64,
    /// Aggregate holds in the index (the stream relay's hold mode): aggregates whose events the
    /// poller publishes until it releases them.
    pub holds: u64,
    /// Seconds since the oldest hold was set (0 without holds).
    pub oldest_hold_age_seconds: f64,
    /// Pending events whose `ttl` is past or within the refresh margin (a poller that reads them
    /// pushes it forward; if none does, TTL deletes them and the stream relay publishes them from
    /// the deletion record).
    pub expiring_pending: Option<u64>,
    /// Outbox items `DEAD_LETTERED` in the table.
    pub dead_lettered_items: Option<u64>,
    /// Messages in the dead-letter queue (visible and in flight); `None` without a queue URL.
    pub dead_letter_queue_depth: Option<u64>,
    /// The shard leases and live pollers; `None` without a lease table.
    pub leases: Option<LeaseReport>,
    /// On a global table, each region's heartbeat and the region publishing its partitions;
    /// `None` without a lease table or before any region wrote a heartbeat.
    pub regions: Option<Vec<RegionStatus>>,
}

/// One region of a global table, as this region's replica of the lease table holds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RegionStatus {
    pub region: String,
    /// Seconds since one of its pollers last wrote its heartbeat; `None` without one.
    pub heartbeat_age_seconds: Option<f64>,
    /// The region publishing its partitions: itself, or the region that adopted them.
    pub publisher: String,
    /// The adoption's epoch (bumped by each change); `None` when it was never adopted.
    pub adoption_epoch: Option<u64>,
    /// Adopted by an operator (`adopt-region`): handed back only by `hand-back-region`.
    pub adopted_by_operator: bool,
}

impl RegionStatus {
    /// Every region `view` names, at `now`; `None` when it names none (a single-region table).
    pub fn from_view(view: &RegionView, now: Millis) -> Option<Vec<Self>> {
        let regions: BTreeSet<&Region> = view
            .heartbeats
            .keys()
            .chain(view.adoptions.keys())
            .collect();
        if regions.is_empty() {
            return None;
        }
        Some(
            regions
                .into_iter()
                .map(|region| {
                    let adoption = view.adoptions.get(region);
                    Self {
                        region: region.to_string(),
                        heartbeat_age_seconds: view
                            .heartbeats
                            .get(region)
                            .map(|b| age_seconds(now, b.heartbeat_at)),
                        publisher: view.publisher_of(region).to_string(),
                        adoption_epoch: adoption.map(|a| a.epoch),
                        adopted_by_operator: adoption.is_some_and(|a| a.by_operator),
                    }
                })
                .collect(),
        )
    }
}

/// Who polls which shard (`relay-poller status --lease-table`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeaseReport {
    pub lease_table: String,
    /// One entry per shard of the shard count, ascending.
    pub shards: Vec<ShardLease>,
    /// Pollers with a fresh heartbeat or an unexpired lease, by owner id.
    pub live_pollers: Vec<LivePoller>,
}

/// One shard's lease.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShardLease {
    /// The region of the shard's events, on a global table.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    pub shard: u16,
    /// The poller holding the lease; `None` when it is free, expired or was never taken.
    pub owner: Option<String>,
    /// Seconds since the lease was last written by its owner (taken, renewed or handed over);
    /// above the lease duration it has expired. `None` when it was never taken.
    pub lease_age_seconds: Option<f64>,
    /// The last owner, whose lease has expired (it stopped without releasing it).
    pub expired_owner: Option<String>,
    /// A poller that asked the owner to hand the lease over (fair share).
    pub handoff_to: Option<String>,
    /// Seconds since a pass over the shard last finished, as its owner last recorded it.
    pub last_pass_age_seconds: Option<f64>,
}

/// One live poller.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LivePoller {
    pub owner: String,
    /// The region whose partitions it leases, on a global table (from its heartbeat).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Leases it holds (unexpired).
    pub shards_owned: usize,
    /// Seconds since its last heartbeat; `None` when it has none (it holds leases only).
    pub heartbeat_age_seconds: Option<f64>,
}

#[allow(clippy::cast_precision_loss)] // ages in milliseconds are far below 2^52
fn age_seconds(now: Millis, at: Millis) -> f64 {
    (now - at).max(0) as f64 / 1000.0
}

impl LeaseReport {
    /// The leases of `partitions` and the live pollers in `view`, at `now` (epoch
    /// milliseconds).
    pub fn from_view(
        lease_table: &str,
        view: &LeaseView,
        partitions: &[PendingPartition],
        now: Millis,
    ) -> Self {
        let live = plan::live_at(view, now);
        let owned = plan::holdings(view, partitions, now);
        let shards = partitions
            .iter()
            .map(|partition| {
                let lease = view.leases.get(partition);
                let owner = lease.and_then(|l| l.holder_at(now)).map(str::to_owned);
                ShardLease {
                    region: partition.origin.as_ref().map(ToString::to_string),
                    shard: partition.shard,
                    expired_owner: lease
                        .filter(|l| l.holder_at(now).is_none())
                        .and_then(|l| l.owner.clone()),
                    lease_age_seconds: lease
                        .filter(|l| l.owner.is_some())
                        .map(|l| age_seconds(now, l.renewed_at)),
                    handoff_to: lease.and_then(|l| l.handoff_to.clone()),
                    last_pass_age_seconds: lease
                        .and_then(|l| l.last_pass_at)
                        .map(|at| age_seconds(now, at)),
                    owner,
                }
            })
            .collect();
        let live_pollers = live
            .into_iter()
            .map(|owner| LivePoller {
                region: view
                    .heartbeats
                    .get(&owner)
                    .and_then(|h| h.region.as_ref())
                    .map(ToString::to_string),
                shards_owned: owned.get(&owner).copied().unwrap_or_default(),
                heartbeat_age_seconds: view
                    .heartbeats
                    .get(&owner)
                    .map(|h| age_seconds(now, h.heartbeat_at)),
                owner,
            })
            .collect();
        Self {
            lease_table: lease_table.to_owned(),
            shards,
            live_pollers,
        }
    }
}

/// Pending events under one partition (`GSI1PK` value) of the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionBacklog {
    pub partition: String,
    pub pending: u64,
    /// Outside every region's shards ([`Partitions::is_indexed`]): no shard query reads it, only
    /// the sweep.
    pub stray: bool,
}

/// The calls of `status` besides the index's and the leases' (`crate::index::CALLS`,
/// `crate::assignment::store::VIEW_CALLS`): the scan that counts dead-lettered items (a count,
/// filtered on outbox attributes), the queue's depth.
pub const CALLS: &[relay_runtime::permissions::Call] = &[
    relay_runtime::permissions::Call::new(
        "dynamodb:Scan",
        relay_runtime::permissions::Target::OutboxAttributes,
    ),
    relay_runtime::permissions::Call::new(
        "sqs:GetQueueAttributes",
        relay_runtime::permissions::Target::DeadLetterQueue,
    ),
];

/// Counts every shard of `partitions` in every region ([`Partitions::of_every_region`]).
///
/// # Errors
/// The first [`IndexError`] of a shard query.
pub async fn collect(
    index: &impl PendingCounts,
    partitions: &Partitions,
    now: DateTime<Utc>,
) -> Result<StatusReport, IndexError> {
    let shards = partitions.of_every_region();
    let mut per_shard: Vec<ShardBacklog> = stream::iter(shards.iter())
        .map(|shard| index.backlog(shard))
        .buffer_unordered(STATUS_CONCURRENCY)
        .try_collect()
        .await?;
    per_shard.sort_by(|a, b| (&a.region, a.shard).cmp(&(&b.region, b.shard)));
    let mut pending_per_region = BTreeMap::new();
    for backlog in &per_shard {
        if let Some(region) = &backlog.region {
            *pending_per_region.entry(region.clone()).or_insert(0) += backlog.pending;
        }
    }
    let oldest_created_at = per_shard
        .iter()
        .filter_map(|s| s.oldest_created_at.clone())
        .min();
    let counts = index.partitions().await?;
    let holds = counts.hold_count();
    let oldest_hold_age_seconds = oldest_age(counts.oldest_hold.as_deref(), now);
    let partitions: Vec<PartitionBacklog> = counts
        .pending
        .into_iter()
        .map(|(partition, pending)| PartitionBacklog {
            stray: !partitions.is_indexed(&partition),
            partition,
            pending,
        })
        .collect();
    Ok(StatusReport {
        leases: None,
        regions: None,
        expiring_pending: None,
        dead_lettered_items: None,
        dead_letter_queue_depth: None,
        stray_pending: partitions
            .iter()
            .filter(|p| p.stray)
            .map(|p| p.pending)
            .sum(),
        partitions,
        holds,
        oldest_hold_age_seconds,
        total_pending: per_shard.iter().map(|s| s.pending).sum(),
        pending_per_region,
        oldest_pending_age_seconds: oldest_age(oldest_created_at.as_deref(), now),
        oldest_created_at,
        shards: per_shard,
    })
}

impl StatusReport {
    /// A fixed-width table for people.
    pub fn to_table(&self) -> String {
        let mut out = String::from("shard  pending  oldest pending event    ");
        if self.leases.is_some() {
            out.push_str("  lease age  owner");
        }
        out = out.trim_end().to_owned() + "\n";
        for s in &self.shards {
            let shard = match &s.region {
                Some(region) => format!("{region}#{}", s.shard),
                None => s.shard.to_string(),
            };
            let mut line = format!(
                "{shard:>5}  {:>7}  {:<24}",
                s.pending,
                s.oldest_created_at.as_deref().unwrap_or("-")
            );
            if let Some(lease) = self.leases.as_ref().and_then(|l| {
                l.shards
                    .iter()
                    .find(|l| l.shard == s.shard && l.region == s.region)
            }) {
                let age = lease
                    .lease_age_seconds
                    .map_or_else(|| "-".to_owned(), |a| format!("{a:.1} s"));
                let owner = match (&lease.owner, &lease.expired_owner) {
                    (Some(owner), _) => owner.clone(),
                    (None, Some(expired)) => format!("none (expired: {expired})"),
                    (None, None) => "none".to_owned(),
                };
                let _ = write!(line, "  {age:>9}  {owner}");
                if let Some(to) = &lease.handoff_to {
                    let _ = write!(line, " (handing over to {to})");
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "total  {:>7}  oldest age {:.1} s",
            self.total_pending, self.oldest_pending_age_seconds
        );
        for (region, pending) in &self.pending_per_region {
            let _ = writeln!(out, "pending written in {region}: {pending}");
        }
        let count = |n: Option<u64>| n.map_or_else(|| "-".to_owned(), |n| n.to_string());
        let _ = writeln!(
            out,
            "pending with ttl near or past: {}\ndead-lettered items: {}\ndead-letter queue depth: {}",
            count(self.expiring_pending),
            count(self.dead_lettered_items),
            count(self.dead_letter_queue_depth)
        );
        let _ = writeln!(
            out,
            "aggregate holds: {} (oldest {:.1} s)",
            self.holds, self.oldest_hold_age_seconds
        );
        let strays: Vec<&PartitionBacklog> = self.partitions.iter().filter(|p| p.stray).collect();
        if strays.is_empty() {
            out.push_str("\nno pending events outside the shard count\n");
        } else {
            let _ = writeln!(
                out,
                "\n{} pending events under partitions outside the shard count (the sweep publishes them):",
                self.stray_pending
            );
            for p in strays {
                let _ = writeln!(out, "  {:<12} {:>7}", p.partition, p.pending);
            }
        }
        if let Some(leases) = &self.leases {
            let _ = writeln!(
                out,
                "\nlive pollers ({}), lease table {}:",
                leases.live_pollers.len(),
                leases.lease_table
            );
            for p in &leases.live_pollers {
                let heartbeat = p
                    .heartbeat_age_seconds
                    .map_or_else(|| "none".to_owned(), |a| format!("{a:.1} s ago"));
                let _ = writeln!(
                    out,
                    "  {}  {} shards, heartbeat {heartbeat}",
                    p.owner, p.shards_owned
                );
            }
        }
        if let Some(regions) = &self.regions {
            out.push_str("\nregions (heartbeat, publisher):\n");
            for r in regions {
                let heartbeat = r
                    .heartbeat_age_seconds
                    .map_or_else(|| "none".to_owned(), |a| format!("{a:.1} s ago"));
                let by = if r.region == r.publisher {
                    "itself".to_owned()
                } else if r.adopted_by_operator {
                    format!("{} (adopted by an operator)", r.publisher)
                } else {
                    format!("{} (adopted)", r.publisher)
                };
                let _ = writeln!(
                    out,
                    "  {}  heartbeat {heartbeat}, published by {by}",
                    r.region
                );
            }
        }
        out
    }
}

/// Counts what a `Scan` with `filter` over `table` (or its `index`) matches.
async fn scan_count(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    index: Option<&str>,
    filter: &str,
    names: &[(&str, &str)],
    values: &[(&str, aws_sdk_dynamodb::types::AttributeValue)],
) -> Result<u64, outbox_shared::SdkFailure> {
    let mut count = 0u64;
    let mut start = None;
    loop {
        let mut scan = client
            .scan()
            .table_name(table)
            .set_index_name(index.map(str::to_owned))
            .select(aws_sdk_dynamodb::types::Select::Count)
            .filter_expression(filter)
            .set_exclusive_start_key(start);
        for (placeholder, name) in names {
            scan = scan.expression_attribute_names(*placeholder, *name);
        }
        for (placeholder, value) in values {
            scan = scan.expression_attribute_values(*placeholder, value.clone());
        }
        let page = scan
            .send()
            .await
            .map_err(|e| outbox_shared::SdkFailure::new("Scan", e))?;
        count += u64::try_from(page.count()).unwrap_or_default();
        start = page.last_evaluated_key;
        if start.is_none() {
            return Ok(count);
        }
    }
}

/// Pending items (in the index) whose `ttl` is at or below `ttl_at_most`.
///
/// # Errors
/// When the scan fails.
pub async fn expiring_pending(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
    index: &str,
    ttl_at_most: i64,
) -> Result<u64, outbox_shared::SdkFailure> {
    use aws_sdk_dynamodb::types::AttributeValue;
    use outbox_shared::schema::attr;
    scan_count(
        client,
        table,
        Some(index),
        "#ttl <= :at",
        &[("#ttl", attr::TTL)],
        &[(":at", AttributeValue::N(ttl_at_most.to_string()))],
    )
    .await
}

/// Outbox items marked `DEAD_LETTERED` (a `Scan` of the whole table).
///
/// # Errors
/// When the scan fails.
pub async fn dead_lettered_items(
    client: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Result<u64, outbox_shared::SdkFailure> {
    use aws_sdk_dynamodb::types::AttributeValue;
    use outbox_shared::OutboxStatus;
    use outbox_shared::schema::{attr, entity};
    scan_count(
        client,
        table,
        None,
        "#status = :dead AND #entity = :outbox",
        &[("#status", attr::STATUS), ("#entity", attr::ENTITY_TYPE)],
        &[
            (
                ":dead",
                AttributeValue::S(OutboxStatus::DeadLettered.as_str().to_owned()),
            ),
            (
                ":outbox",
                AttributeValue::S(entity::OUTBOX_EVENT.to_owned()),
            ),
        ],
    )
    .await
}

/// Messages in `queue_url`, visible and in flight.
///
/// # Errors
/// When the call fails.
pub async fn queue_depth(
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
) -> Result<u64, outbox_shared::SdkFailure> {
    use aws_sdk_sqs::types::QueueAttributeName;
    let output = client
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .map_err(|e| outbox_shared::SdkFailure::new("GetQueueAttributes", e))?;
    let attributes = output.attributes.unwrap_or_default();
    Ok([
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
    ]
    .iter()
    .filter_map(|name| attributes.get(name)?.parse::<u64>().ok())
    .sum())
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::index::{IndexCounts, PartitionCounts};
    use outbox_shared::ShardCount;
    use outbox_shared::schema;

    /// An index with a fixed backlog per shard and fixed partition counts.
    struct Fixed {
        partitions: PartitionCounts,
    }

    impl PendingCounts for Fixed {
        async fn backlog(&self, shard: &PendingPartition) -> Result<ShardBacklog, IndexError> {
            let partition = shard.gsi1pk();
            Ok(ShardBacklog {
                region: shard.origin.as_ref().map(ToString::to_string),
                shard: shard.shard,
                pending: self.partitions.get(&partition).copied().unwrap_or_default(),
                oldest_created_at: (shard.shard == 1)
                    .then(|| "2026-11-22T10:00:00.000Z".to_owned()),
            })
        }

        async fn partitions(&self) -> Result<IndexCounts, IndexError> {
            Ok(IndexCounts {
                pending: self.partitions.clone(),
                ..IndexCounts::default()
            })
        }
    }

    #[tokio::test]
    async fn shows_stray_partitions_beside_the_shards() {
        // Given an index with events under shards 1 and 3 of 4, and under 20 and 31 of 32
        let counts = [(1, 5), (3, 2), (20, 7), (31, 1)];
        let index = Fixed {
            partitions: counts
                .iter()
                .map(|&(shard, n)| (schema::pending_shard_pk(shard), n))
                .collect(),
        };
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 10, 1, 0).unwrap();

        // When the status of a 4-shard poller is collected
        let partitions = Partitions::single_region(ShardCount::new(4).unwrap());
        let report = collect(&index, &partitions, now).await.unwrap();

        // Then the shards hold 7, the strays 8, and each partition is marked
        assert_eq!(report.total_pending, 7);
        assert_eq!(report.stray_pending, 8);
        assert_eq!(report.oldest_pending_age_seconds, 60.0);
        let marked: Vec<(String, u64, bool)> = report
            .partitions
            .iter()
            .map(|p| (p.partition.clone(), p.pending, p.stray))
            .collect();
        let expected: Vec<(String, u64, bool)> =
            [(1, 5, false), (20, 7, true), (3, 2, false), (31, 1, true)]
                .iter()
                .map(|&(shard, n, stray)| (schema::pending_shard_pk(shard), n, stray))
                .collect();
        let mut expected = expected;
        expected.sort();
        assert_eq!(marked, expected);
        let table = report.to_table();
        assert!(
            table.contains("8 pending events under partitions outside the shard count"),
            "{table}"
        );
        assert!(table.contains(&schema::pending_shard_pk(20)), "{table}");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["stray_pending"], 8);
        assert_eq!(json["partitions"][1]["stray"], true);
        assert_eq!(json["leases"], serde_json::Value::Null);
    }

    #[test]
    fn leases_show_owner_age_and_live_pollers() {
        use crate::assignment::{Heartbeat, Lease};
        // Given shard 0 owned by a (renewed 2 s ago), shard 1 expired under b, shard 2 never taken
        let now: Millis = 1_800_000_000_000;
        let lease = |shard: u16, owner: &str, renewed_at, expires_at| Lease {
            partition: shard.into(),
            owner: Some(owner.to_owned()),
            expires_at,
            renewed_at,
            taken_at: renewed_at,
            counter: 3,
            handoff_to: None,
            last_pass_at: Some(now - 500),
        };
        let mut view = LeaseView::default();
        view.leases
            .insert(0.into(), lease(0, "a", now - 2_000, now + 28_000));
        view.leases
            .insert(1.into(), lease(1, "b", now - 40_000, now - 10_000));
        view.heartbeats.insert(
            "a".into(),
            Heartbeat {
                owner: "a".into(),
                heartbeat_at: now - 1_000,
                expires_at: now + 29_000,
                started_at: now - 60_000,
                region: None,
            },
        );

        // When the report is built
        let leases = LeaseReport::from_view(
            "leases-t",
            &view,
            &[0, 1, 2].map(PendingPartition::from),
            now,
        );

        // Then each shard says who holds it and since when, and a alone is live
        assert_eq!(leases.shards[0].owner.as_deref(), Some("a"));
        assert_eq!(leases.shards[0].lease_age_seconds, Some(2.0));
        assert_eq!(leases.shards[0].last_pass_age_seconds, Some(0.5));
        assert_eq!(leases.shards[1].owner, None);
        assert_eq!(leases.shards[1].expired_owner.as_deref(), Some("b"));
        assert_eq!(leases.shards[2].lease_age_seconds, None);
        assert_eq!(
            leases.live_pollers,
            [LivePoller {
                owner: "a".into(),
                region: None,
                shards_owned: 1,
                heartbeat_age_seconds: Some(1.0)
            }]
        );
        let report = StatusReport {
            shards: (0..3)
                .map(|shard| ShardBacklog {
                    region: None,
                    shard,
                    pending: 0,
                    oldest_created_at: None,
                })
                .collect(),
            total_pending: 0,
            pending_per_region: BTreeMap::new(),
            oldest_created_at: None,
            oldest_pending_age_seconds: 0.0,
            partitions: Vec::new(),
            stray_pending: 0,
            holds: 0,
            oldest_hold_age_seconds: 0.0,
            expiring_pending: None,
            dead_lettered_items: None,
            dead_letter_queue_depth: None,
            leases: Some(leases),
            regions: None,
        };
        let table = report.to_table();
        assert!(table.contains("2.0 s  a"), "{table}");
        assert!(table.contains("none (expired: b)"), "{table}");
        assert!(
            table.contains("live pollers (1), lease table leases-t"),
            "{table}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["leases"]["shards"][0]["owner"], "a");
        assert_eq!(json["leases"]["live_pollers"][0]["shards_owned"], 1);
    }

    #[test]
    fn regions_show_their_heartbeat_age_and_who_publishes_them() {
        use crate::failover::{Adoption, RegionHeartbeat};
        let region = |n: &str| Region::new(n).unwrap();
        let mut view = RegionView::default();
        assert_eq!(RegionStatus::from_view(&view, 10_000), None);
        for (name, at) in [("us-east-1", 9_000), ("eu-west-1", 1_000)] {
            view.heartbeats.insert(
                region(name),
                RegionHeartbeat {
                    region: region(name),
                    heartbeat_at: at,
                    owner: "p".into(),
                },
            );
        }
        view.adoptions.insert(
            region("eu-west-1"),
            Adoption {
                region: region("eu-west-1"),
                adopter: Some(region("us-east-1")),
                epoch: 2,
                changed_at: 5_000,
                by_operator: false,
            },
        );

        let regions = RegionStatus::from_view(&view, 10_000).unwrap();

        assert_eq!(
            regions[0],
            RegionStatus {
                region: "eu-west-1".into(),
                heartbeat_age_seconds: Some(9.0),
                publisher: "us-east-1".into(),
                adoption_epoch: Some(2),
                adopted_by_operator: false,
            }
        );
        assert_eq!(regions[1].publisher, "us-east-1");
        assert_eq!(regions[1].adoption_epoch, None);
        let report = StatusReport {
            shards: Vec::new(),
            total_pending: 0,
            oldest_created_at: None,
            oldest_pending_age_seconds: 0.0,
            partitions: Vec::new(),
            stray_pending: 0,
            holds: 0,
            oldest_hold_age_seconds: 0.0,
            expiring_pending: None,
            dead_lettered_items: None,
            dead_letter_queue_depth: None,
            leases: None,
            regions: Some(regions),
            pending_per_region: BTreeMap::new(),
        };
        let table = report.to_table();
        assert!(
            table.contains("eu-west-1  heartbeat 9.0 s ago, published by us-east-1 (adopted)"),
            "{table}"
        );
        assert!(
            table.contains("us-east-1  heartbeat 1.0 s ago, published by itself"),
            "{table}"
        );
    }
}
