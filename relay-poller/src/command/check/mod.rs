//! `relay-poller check`: every start-up probe of a deployment, and more, with the same settings as the relays. It
//! reads what the relays rely on and says, one line per item, OK or what is wrong and how to fix
//! it: the table's keys, the pending index's keys and projection, TTL on `ttl`, the stream and
//! its view, the target (of the configured kind), the dead-letter queue and its
//! `MaximumMessageSize`, the lease table, the discarded-batch bucket, events under partitions
//! outside the shard count, what the caller may do (`iam:SimulatePrincipalPolicy`), and the shard
//! count's write ceiling against the index's recent peak (CloudWatch).
//!
//! What is wrong about each item is decided by [`Item`]'s pure functions ([`item`]) over what AWS
//! answered (tested without AWS); [`run`] reads the answers ([`resources`], [`simulation`],
//! [`capacity`]) and prints the [`Report`].

use crate::partitions::Partitions;
use std::process::ExitCode;

use aws_config::SdkConfig;
use relay_runtime::SettingError;
use relay_runtime::probe::{self, Kind, Probe, Probed, Resource};

use crate::aws::AwsClients;
use crate::config::{CheckArgs, DiscardedBatchArgs, RelayConfig, TableArgs};
use crate::index::{DynamoPendingIndex, PendingCounts};
use crate::process::{EXIT_CONFIG, print, say};

pub mod capacity;
pub mod item;
pub mod report;
pub mod resources;
pub mod simulation;

pub use item::{Item, Verdict};
pub use report::Report;

use simulation::Arns;

/// Runs the check: every item, one line each (or one JSON object), the outcome last; exit 0 only
/// when every item holds, [`EXIT_CONFIG`] otherwise.
///
/// # Errors
/// A setting out of range.
pub async fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let config = args.relay.validate()?;
    let discarded = args.discarded.settings()?;
    let sdk = relay_runtime::load_aws_config().await?;
    let partitions = config.index.partitions(sdk.region().map(|r| r.as_ref()))?;
    let items = collect(&sdk, &config, &partitions, &args, discarded.map(|(b, _)| b)).await;
    let report = Report::new(items);
    let text = if args.json {
        serde_json::to_string(&report)? + "\n"
    } else {
        report.to_text()
    };
    print(&text, "check")?;
    say(&report.outcome());
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_CONFIG)
    })
}

/// Every item, in order. Without credentials nothing else can be read: that one item alone.
async fn collect(
    sdk: &SdkConfig,
    config: &RelayConfig,
    partitions: &Partitions,
    args: &CheckArgs,
    bucket: Option<&str>,
) -> Vec<Item> {
    if let Err(unusable) = probe::credentials(sdk).await {
        return vec![Item::unusable("credentials", &unusable)];
    }
    let mut items = vec![Item::ok("credentials", "found")];
    let outbox = &config.index.outbox;
    let table_resource = Resource::new(
        Kind::Table,
        &outbox.table_name,
        SettingError::name_of::<TableArgs>("table_name"),
    );
    let mut arns = Arns::default();
    match probe::table(sdk, &table_resource).await {
        Err(unusable) => items.push(Item::unusable("table", &unusable)),
        Ok(Probed::Unknown(failure)) => items.push(Item::unknown("table", &failure)),
        Ok(Probed::Found(table)) => {
            arns.table = table.table_arn().map(str::to_owned);
            items.push(Item::table_keys(&table));
            items.push(Item::index(&table, &outbox.index_name));
            items.push(resources::ttl(sdk, &outbox.table_name).await);
            items.push(Item::stream(&table));
        }
    }
    items.push(resources::target(sdk, &config.publisher, &mut arns).await);
    items.push(resources::dead_letter_queue(sdk, &config.dead_letter_queue_url, &mut arns).await);
    items.push(match args.lease_table.name() {
        Some(lease_table) => resources::lease_table(sdk, lease_table, &mut arns).await,
        None => Item::skipped(
            "lease table",
            "none set (--lease-table, OUTBOX_LEASE_TABLE): run polls its --shards",
        ),
    });
    items.push(match bucket {
        Some(bucket) => {
            arns.bucket = Some(bucket.to_owned());
            resources::bucket(
                sdk,
                "bucket",
                &Resource::new(
                    Kind::Bucket,
                    bucket,
                    SettingError::name_of::<DiscardedBatchArgs>("discarded_batch_bucket"),
                ),
            )
            .await
        }
        None => Item::skipped(
            "bucket",
            "no discarded-batch bucket set (--discarded-batch-bucket, DISCARDED_BATCH_BUCKET)",
        ),
    });
    items.push(match probe::payload_bucket(&config.publisher) {
        Some(Probe::Bucket(resource)) => {
            arns.payload_bucket = Some(resource.name.clone());
            resources::bucket(sdk, "payload bucket", &resource).await
        }
        _ => Item::skipped(
            "payload bucket",
            format!(
                "none set ({}): an event too large for the target is dead-lettered",
                SettingError::name_of::<relay_runtime::PublisherArgs>("payload_bucket")
            ),
        ),
    });
    let clients = AwsClients::new(sdk);
    let index = DynamoPendingIndex::new(
        clients.dynamodb.clone(),
        &outbox.table_name,
        &outbox.index_name,
    );
    items.push(match index.partitions().await {
        Ok(counts) => Item::strays(&counts.pending, partitions),
        Err(err) => Item::skipped(
            "strays",
            format!("the index could not be read: {}", err.failure),
        ),
    });
    items.push(
        simulation::permissions(
            sdk,
            args.principal.as_deref(),
            config.publisher.target_kind,
            &arns,
            &outbox.index_name,
        )
        .await,
    );
    items.push(
        capacity::item(
            sdk,
            &outbox.table_name,
            &outbox.index_name,
            outbox.shard_count,
        )
        .await,
    );
    items
}

#[cfg(test)]
mod tests;
