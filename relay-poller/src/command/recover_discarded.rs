//! `relay-poller recover-discarded`: once, what `run` does on an interval: the TTL-deleted
//! pending events of the discarded stream batches re-created, each batch handled deleted
//! ([`crate::discarded`]).

use std::process::ExitCode;

use anyhow::Context;
use relay_runtime::SettingError;
use relay_runtime::probe::{Kind, Probe, Resource};
use tokio_util::sync::CancellationToken;

use crate::aws::aws_discarded_batches;
use crate::config::RecoverDiscardedArgs;
use crate::probes::{load_and_probe, table_probe};
use crate::process::{EXIT_FAILURE, print, say, stdout_is_terminal};

/// Recovers every batch in the bucket; exit [`EXIT_FAILURE`] when one is left.
///
/// # Errors
/// A setting out of range, what a probe found unusable, or the bucket not listed.
pub async fn run(args: RecoverDiscardedArgs) -> anyhow::Result<ExitCode> {
    let index = args.table.validate()?;
    let ttl = args.retention.ttl_policy()?;
    SettingError::non_empty::<RecoverDiscardedArgs>(
        "discarded_batch_bucket",
        &args.discarded_batch_bucket,
    )?;
    let sdk = load_and_probe(&[
        table_probe(&index, false),
        Probe::Bucket(Resource::new(
            Kind::Bucket,
            &args.discarded_batch_bucket,
            SettingError::name_of::<RecoverDiscardedArgs>("discarded_batch_bucket"),
        )),
    ])
    .await?;
    let batches = aws_discarded_batches(
        &sdk,
        relay_runtime::clients::dynamodb(&sdk),
        &args.discarded_batch_bucket,
        &index.outbox,
        ttl,
    );
    let recovery = batches
        .recover(args.dry_run, &CancellationToken::new())
        .await
        .context("listing the discarded stream batches")?;
    let text = if args.json || !stdout_is_terminal() {
        serde_json::to_string(&recovery)? + "\n"
    } else {
        recovery.to_text()
    };
    print(&text, "summary")?;
    let left = recovery.left_in_bucket + recovery.retry_later;
    say(&format!(
        "recover-discarded{}: {} of {} batches recovered ({} events re-created), {} left in the \
         bucket, {} to retry{}",
        if recovery.dry_run { " (dry run)" } else { "" },
        recovery.recovered,
        recovery.batches,
        recovery.recreated,
        recovery.left_in_bucket,
        recovery.retry_later,
        if left == 0 {
            String::new()
        } else {
            format!(" (exit {EXIT_FAILURE})")
        }
    ));
    // A batch left for a person, or for a later run, is not done: a script should see it.
    if left == 0 {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(EXIT_FAILURE))
    }
}
