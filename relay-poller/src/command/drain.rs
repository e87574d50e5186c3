//! `relay-poller drain`: the backfill. Publishes everything pending (stray partitions included),
//! prints a one-line JSON summary, and exits 0 only when the index is empty.
//!
//! Shutdown: SIGTERM or ctrl-c stops the drain after the page in hand, up to `--shutdown-timeout`,
//! after which it is abandoned (its events stay pending); the summary says how many remain.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context;

use crate::assignment::{DynamoLeaseStore, RespectLeases, SystemClock};
use crate::aws::{Relay, legacy_holds, start_relay};
use crate::config::DrainArgs;
use crate::poller::DrainSummary;
use crate::probes::lease_table_probe;
use crate::process::{EXIT_FAILURE, Work, flush_metrics, print, say, shutdown_signal};

/// Drains the index.
///
/// # Errors
/// A setting out of range, or what a probe found unusable.
pub async fn run(args: DrainArgs) -> anyhow::Result<ExitCode> {
    let config = args.relay.validate()?;
    let respected = args.respected_lease_table()?.map(str::to_owned);
    let shutdown = shutdown_signal()?;
    let more = respected.iter().map(|t| lease_table_probe(t)).collect();
    let Relay {
        poller,
        metrics,
        clients,
        ..
    } = start_relay(&config, more).await?;
    let respect = respected.map(|table| {
        Arc::new(RespectLeases::new(
            DynamoLeaseStore::new(clients.dynamodb.clone(), table),
            SystemClock,
            poller.partitions().all(),
        ))
    });
    let legacy_holds = legacy_holds(&clients.dynamodb, &config, args.grace_period);
    let started = Instant::now();
    let mut work = Work::new();
    let mut draining = work.spawn({
        let (poller, cancel) = (poller.clone(), work.token());
        let shards = poller.partitions().fixed();
        async move {
            // Moved first, so the passes release them with the events they publish.
            legacy_holds.migrate().await;
            match respect {
                Some(respect) => {
                    let mut summary = poller
                        .drain(
                            &*respect,
                            args.grace_period,
                            args.max_stalled_passes,
                            &cancel,
                        )
                        .await;
                    summary.skipped_shards = respect.skipped();
                    summary
                }
                None => {
                    poller
                        .drain(&shards, args.grace_period, args.max_stalled_passes, &cancel)
                        .await
                }
            }
        }
    });
    let summary: DrainSummary = tokio::select! {
        result = &mut draining => result.context("drain task")?,
        () = shutdown => {
            if work.stop(config.shutdown_timeout).await {
                draining.await.context("drain task")?
            } else {
                let remaining = tokio::time::timeout(config.shutdown_timeout, poller.count_remaining())
                    .await
                    .ok()
                    .flatten();
                DrainSummary { interrupted: true, remaining, ..poller.summary(started.elapsed()) }
            }
        }
    };
    let publish = poller.publisher().stats();
    let summary = DrainSummary {
        calls: publish.publish_calls.into(),
        deduplicated: publish.deduplicated,
        payloads_stored: publish.payloads_stored,
        payloads_already_stored: publish.payloads_already_stored,
        ..summary
    };
    flush_metrics(&metrics);
    let line = serde_json::to_string(&summary).context("serializing the summary")?;
    print(&(line + "\n"), "summary")?;
    tracing::info!(
        published = summary.published,
        already_marked = summary.already_marked,
        dead_lettered = summary.dead_lettered,
        deduplicated = summary.deduplicated,
        failed = summary.failed,
        not_marked = summary.not_marked,
        complete = summary.complete,
        interrupted = summary.interrupted,
        "drain finished"
    );
    say(&drain_words(&summary));
    // Only an empty index is success: a script that runs a drain and sees exit 0 may rely on
    // nothing being left, interrupted or not (the summary says how many remain).
    if summary.complete {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(EXIT_FAILURE))
    }
}

/// A drain's outcome in words.
pub fn drain_words(summary: &DrainSummary) -> String {
    let done = format!(
        "published {} events ({} already marked, {} dead-lettered) in {} passes, {:.1} s",
        summary.published,
        summary.already_marked,
        summary.dead_lettered,
        summary.passes,
        summary.seconds
    );
    if summary.complete {
        format!("drain: {done}; nothing left pending")
    } else {
        let left = summary
            .remaining
            .map_or_else(|| "an unknown number of".to_owned(), |n| n.to_string());
        let why = if summary.interrupted {
            "interrupted".to_owned()
        } else {
            format!(
                "gave up ({} failed, {} not marked)",
                summary.failed, summary.not_marked
            )
        };
        format!("drain: {why} with {left} events left pending; {done} (exit {EXIT_FAILURE})")
    }
}
