//! `relay-poller adopt-region <REGION>`: this process's region (`AWS_REGION`) publishes another
//! region's partitions, as an operator's adoption ([`crate::failover::operator`]).

use std::process::ExitCode;

use crate::assignment::{Clock, SystemClock};
use crate::config::RegionCommandArgs;
use crate::failover::DynamoRegionStore;
use crate::failover::operator::adopt_region;
use crate::probes::{lease_table_probe, load_and_probe};
use crate::process::{print, stdout_is_terminal};

/// Writes the adoption; prints one line.
///
/// # Errors
/// No lease table, no region in the SDK's config, the region is this one, or a call failed.
pub async fn run(args: RegionCommandArgs) -> anyhow::Result<ExitCode> {
    let table = args.lease_table()?;
    let sdk = load_and_probe(&[lease_table_probe(table)]).await?;
    let own = super::hand_back_region::own_region(&sdk)?;
    let store = DynamoRegionStore::new(aws_sdk_dynamodb::Client::new(&sdk), table);
    let outcome = adopt_region(&store, SystemClock.now(), &args.region, &own).await?;
    let text = if args.json || !stdout_is_terminal() {
        serde_json::to_string(&outcome)?
    } else {
        outcome.line("adopt-region")
    };
    print(&(text + "\n"), "summary")?;
    Ok(ExitCode::SUCCESS)
}
