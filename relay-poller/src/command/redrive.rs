//! `relay-poller redrive`: dead-lettered events back to pending ([`crate::redrive`]), then
//! published through the poller's path unless `--publish false`.

use std::process::ExitCode;

use crate::aws::{AwsClients, aws_poller, s3_client};
use crate::config::RedriveArgs;
use crate::probes::{load_and_probe, publish_probes, queue_probe, table_probe};
use crate::process::{print, say, stdout_is_terminal};
use crate::redrive::{Redrive, Selection, Source};

/// Redrives the selected events and prints what happened to each.
///
/// # Errors
/// A setting out of range, what a probe found unusable, or a call that failed.
pub async fn run(args: RedriveArgs) -> anyhow::Result<ExitCode> {
    let config = args.relay.validate()?;
    let mut probes = vec![
        table_probe(&config.index, false),
        queue_probe(&config.dead_letter_queue_url),
    ];
    if args.publish && !args.dry_run {
        probes.extend(publish_probes(&config.publisher));
    }
    let sdk = load_and_probe(&probes).await?;
    let clients = AwsClients::new(&sdk);
    let outbox = &config.index.outbox;
    let redrive = Redrive {
        dynamodb: clients.dynamodb.clone(),
        sqs: clients.sqs.clone(),
        s3: s3_client(&sdk),
        table_name: outbox.table_name.clone(),
        dead_letter_queue_url: config.dead_letter_queue_url.clone(),
        shard_count: outbox.shard_count,
        ttl: config.ttl,
    };
    let selection = Selection {
        event_ids: args.event_ids.iter().cloned().collect(),
        event_type: args.event_type.clone(),
        since: args.since,
        until: args.until,
        limit: args.limit,
    };
    let source = if args.from_table {
        Source::Table
    } else {
        Source::Queue
    };
    let (keys, mut summary) = redrive.run(source, &selection, args.dry_run).await?;
    if args.publish && !args.dry_run && !keys.is_empty() {
        let poller = aws_poller(&sdk, &config)?;
        let items = redrive.pending_items(&keys).await?;
        let stats = poller.publish_items(items).await;
        summary.published = stats.published + stats.already_marked;
        if stats.failed + stats.held_back + stats.not_marked > 0 {
            tracing::warn!(
                failed = stats.failed,
                held_back = stats.held_back,
                not_marked = stats.not_marked,
                "some redriven events were not published now; they are pending and the relays publish them"
            );
        }
    }
    let text = if args.json || !stdout_is_terminal() {
        serde_json::to_string(&summary)? + "\n"
    } else {
        summary.to_table()
    };
    print(&text, "summary")?;
    say(&format!(
        "redrive{}: {} redriven ({} re-created), {} published, {} skipped as done, {} left in \
         the queue",
        if summary.dry_run { " (dry run)" } else { "" },
        summary.redriven,
        summary.recreated,
        summary.published,
        summary.skipped,
        summary.left_in_queue
    ));
    Ok(ExitCode::SUCCESS)
}
