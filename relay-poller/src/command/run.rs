//! `relay-poller run`: polls continuously until SIGTERM or ctrl-c, on a fixed list of shards or on
//! shard leases; beside the passes, the discarded stream batches and the holds of an earlier
//! release on their own intervals. On a global table with a lease table, region rounds beside the
//! lease rounds decide which regions' partitions it publishes (`crate::failover`).
//!
//! Shutdown: the signal (or the lease rounds ending on an error) stops the work: the passes finish
//! the page in hand, the recovery the batch in hand, up to `--shutdown-timeout`, after which what
//! still runs is abandoned (its events stay pending, a batch stays in its bucket). The lease rounds
//! go on until then, so the leases are still this poller's until it releases them.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::aws::{
    Relay, aws_discarded_batches, lease_manager, legacy_holds, region_manager, start_relay,
};
use crate::config::RunArgs;
use crate::probes::{bucket_probe, lease_table_probe};
use crate::process::{Work, flush_metrics, say, shutdown_signal};

/// Runs the poller until it is told to stop.
///
/// # Errors
/// A setting out of range, what a probe found unusable, or the lease rounds failing.
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let config = args.relay.validate()?;
    let leases = args.leases.settings(args.relay.table.shards.is_some())?;
    let discarded = args.discarded.settings()?;
    let shutdown = shutdown_signal()?;
    let mut more = Vec::new();
    if let Some(settings) = leases.as_ref().filter(|s| !s.create_table) {
        more.push(lease_table_probe(&settings.table_name));
    }
    if let Some((bucket, _)) = discarded {
        more.push(bucket_probe(bucket));
    }
    let Relay {
        poller,
        metrics,
        clients,
        sdk,
    } = start_relay(&config, more).await?;
    let manager = match &leases {
        Some(settings) => Some(Arc::new(
            lease_manager(&clients.dynamodb, poller.partitions(), settings).await?,
        )),
        None => None,
    };
    // On a global table, the region rounds decide which regions' partitions the leases and the
    // passes cover: the own region's while it is not adopted, and any it adopts.
    let regions = match (&manager, &leases, poller.partitions().global_table()) {
        // `--region-failover-after` is checked only where it applies: a global table.
        (Some(manager), Some(settings), Some(_)) => region_manager(
            &clients.dynamodb,
            poller.partitions(),
            &settings.table_name,
            manager.owner(),
            args.leases.failover()?,
        )
        .map(Arc::new),
        _ => None,
    };
    if let Some(regions) = &regions {
        tracing::info!(
            regions = ?poller.partitions().global_table().map(|t| t.regions().iter().map(ToString::to_string).collect::<Vec<_>>()),
            failover_after_ms = args.leases.region_failover_after.as_millis() as u64,
            owner = %manager.as_ref().map(|m| m.owner()).unwrap_or_default(),
            "region failover on: publishing this region's partitions, and a stopped region's"
        );
        // The first round before the first pass: this region's own partitions are published only
        // once it knows no other region adopted them.
        regions.round().await;
    }
    match (&manager, &leases) {
        (Some(manager), Some(settings)) => tracing::info!(
            table = %config.index.outbox.table_name,
            lease_table = %settings.table_name,
            owner = %manager.owner(),
            lease_duration_ms = settings.duration.as_millis() as u64,
            renew_interval_ms = settings.renew_interval.as_millis() as u64,
            grace_ms = args.grace_period.as_millis() as u64,
            "poller running on leases"
        ),
        _ => {
            tracing::info!(table = %config.index.outbox.table_name, partitions = ?poller.partitions().all().iter().map(ToString::to_string).collect::<Vec<_>>(), grace_ms = args.grace_period.as_millis() as u64, "poller running")
        }
    }
    let mut work = Work::new();
    let mut polling = work.spawn({
        let (poller, cancel, manager) = (poller.clone(), work.token(), manager.clone());
        let shards = poller.partitions().fixed();
        async move {
            match manager {
                Some(manager) => {
                    poller
                        .run(&manager.assignment(), args.grace_period, cancel)
                        .await;
                }
                None => poller.run(&shards, args.grace_period, cancel).await,
            }
        }
    });
    // The holds of an earlier release, moved beside their events once per sweep interval: the
    // passes then release them.
    work.spawn({
        let (holds, cancel) = (
            legacy_holds(&clients.dynamodb, &config, args.grace_period),
            work.token(),
        );
        let interval = config.sweep_interval;
        async move { holds.run(interval, &cancel).await }
    });
    // The discarded stream batches, swept on their own interval beside the passes: what they
    // re-create goes back to the index, where the passes publish it.
    if let Some((bucket, interval)) = discarded {
        tracing::info!(
            bucket,
            interval_ms = interval.as_millis() as u64,
            "recovering discarded stream batches"
        );
        let batches = aws_discarded_batches(
            &sdk,
            clients.dynamodb.clone(),
            bucket,
            &config.index.outbox,
            config.ttl,
        );
        let cancel = work.token();
        work.spawn(async move { batches.run(interval, &cancel).await });
    }
    // The lease rounds outlive the work, so the leases stay this poller's until released.
    let mut rounds = Work::new();
    let mut renewing = rounds.spawn({
        let (manager, stop) = (manager.clone(), rounds.token());
        async move {
            match manager {
                Some(manager) => manager.run(&stop).await,
                None => {
                    stop.cancelled().await;
                    Ok(())
                }
            }
        }
    });
    // The region rounds too: the region's heartbeat goes on while the work finishes.
    if let Some(regions) = regions {
        let stop = rounds.token();
        rounds.spawn(async move { regions.run(&stop).await });
    }
    let mut failure = None;
    tokio::select! {
        () = shutdown => {
            if let Some(manager) = &manager {
                manager.stop_taking();
            }
        }
        result = &mut renewing => failure = Some(result.context("lease task")?.err()),
        // Never on its own: the loop ends when told to, or on a panic.
        _ = &mut polling => {}
    }
    work.stop(config.shutdown_timeout).await;
    if failure.is_none() {
        rounds.token().cancel();
        failure = Some(renewing.await.context("lease task")?.err());
    }
    if let Some(manager) = &manager {
        manager.release_all().await;
    }
    flush_metrics(&metrics);
    tracing::info!("poller stopped");
    let totals = poller.summary(Duration::ZERO);
    say(&format!(
        "run: stopped; published {} events ({} dead-lettered, {} failed and left pending)",
        totals.published, totals.dead_lettered, totals.failed
    ));
    match failure.flatten() {
        Some(err) => Err(err).context("holding shard leases"),
        None => Ok(ExitCode::SUCCESS),
    }
}
