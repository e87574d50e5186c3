//! `relay-poller status`: the backlog per shard and partition, the oldest pending event, expiring
//! and dead-lettered items, the dead-letter queue's depth and, with a lease table, each shard's
//! owner ([`crate::status`] collects them).

use std::process::ExitCode;

use chrono::Utc;
use relay_runtime::SettingError;
use relay_runtime::probe::{Kind, Probe, Resource};

use crate::assignment::{DynamoLeaseStore, LeaseStore};
use crate::aws::AwsClients;
use crate::config::StatusArgs;
use crate::failover::{DynamoRegionStore, RegionStore};
use crate::index::DynamoPendingIndex;
use crate::probes::{lease_table_probe, load_and_probe, table_probe};
use crate::process::{print, say};
use crate::status;

/// Prints the status, a table or JSON.
///
/// # Errors
/// A setting out of range, what a probe found unusable, or a read that failed.
pub async fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let index_config = args.table.validate()?;
    let queue_url =
        relay_runtime::config::dead_letter_queue_url(args.dead_letter_queue_url.as_deref());
    let mut probes = vec![table_probe(&index_config, true)];
    probes.extend(queue_url.map(|url| {
        Probe::Queue(Resource::new(
            Kind::DeadLetterQueue,
            url,
            SettingError::name_of::<StatusArgs>("dead_letter_queue_url"),
        ))
    }));
    probes.extend(args.lease_table.name().map(lease_table_probe));
    let sdk = load_and_probe(&probes).await?;
    let partitions = index_config.partitions(sdk.region().map(|r| r.as_ref()))?;
    let clients = AwsClients::new(&sdk);
    let outbox = &index_config.outbox;
    let index = DynamoPendingIndex::new(
        clients.dynamodb.clone(),
        &outbox.table_name,
        &outbox.index_name,
    );
    let now = Utc::now();
    let mut report = status::collect(&index, &partitions, now).await?;
    if let Some(table) = args.lease_table.name() {
        let view = DynamoLeaseStore::new(clients.dynamodb.clone(), table)
            .read()
            .await?;
        report.leases = Some(status::LeaseReport::from_view(
            table,
            &view,
            &partitions.of_every_region(),
            now.timestamp_millis(),
        ));
        let regions = DynamoRegionStore::new(clients.dynamodb.clone(), table)
            .read()
            .await?;
        report.regions = status::RegionStatus::from_view(&regions, now.timestamp_millis());
    }
    let expiring_at = relay_runtime::status_store::ttl_after(now, args.ttl_refresh_margin);
    report.expiring_pending = Some(
        status::expiring_pending(
            &clients.dynamodb,
            &outbox.table_name,
            &outbox.index_name,
            expiring_at,
        )
        .await?,
    );
    report.dead_lettered_items =
        Some(status::dead_lettered_items(&clients.dynamodb, &outbox.table_name).await?);
    if let Some(url) = queue_url {
        report.dead_letter_queue_depth = Some(status::queue_depth(&clients.sqs, url).await?);
    }
    let text = if args.json {
        serde_json::to_string(&report)? + "\n"
    } else {
        report.to_table()
    };
    print(&text, "status")?;
    say(&format!(
        "status: {} events pending in the shards (the oldest {:.0} s old), {} under stray \
         partitions, {} holds",
        report.total_pending, report.oldest_pending_age_seconds, report.stray_pending, report.holds
    ));
    Ok(ExitCode::SUCCESS)
}
