//! `relay-poller hand-back-region <REGION>`: a region publishes its own partitions again
//! ([`crate::failover::operator`]).

use std::process::ExitCode;

use anyhow::Context;
use aws_config::SdkConfig;
use outbox_shared::Region;

use crate::assignment::{Clock, SystemClock};
use crate::config::RegionCommandArgs;
use crate::failover::DynamoRegionStore;
use crate::failover::operator::hand_back_region;
use crate::probes::{lease_table_probe, load_and_probe};
use crate::process::{print, stdout_is_terminal};

/// Writes the hand-back; prints one line.
///
/// # Errors
/// No lease table, or a call failed.
pub async fn run(args: RegionCommandArgs) -> anyhow::Result<ExitCode> {
    let table = args.lease_table()?;
    let sdk = load_and_probe(&[lease_table_probe(table)]).await?;
    let store = DynamoRegionStore::new(aws_sdk_dynamodb::Client::new(&sdk), table);
    let outcome = hand_back_region(&store, SystemClock.now(), &args.region).await?;
    let text = if args.json || !stdout_is_terminal() {
        serde_json::to_string(&outcome)?
    } else {
        outcome.line("hand-back-region")
    };
    print(&(text + "\n"), "summary")?;
    Ok(ExitCode::SUCCESS)
}

/// This process's region, from its SDK config (`AWS_REGION`).
///
/// # Errors
/// None is configured, or it is not a region name.
pub(crate) fn own_region(sdk: &SdkConfig) -> anyhow::Result<Region> {
    let name = sdk
        .region()
        .context("no region configured: set AWS_REGION to the region whose pollers adopt")?;
    Ok(Region::new(name.as_ref())?)
}
