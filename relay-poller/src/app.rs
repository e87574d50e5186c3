//! Wiring for the binary: SDK clients built once, the subcommands, signals and exit codes.

use std::future::Future;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use aws_config::SdkConfig;
use chrono::Utc;
use relay_runtime::preflight::{Kind, Need, Resource, Unusable};
use relay_runtime::{
    CallTasks, DynamoHoldStore, DynamoStatusStore, PublisherConfig, SettingError,
    SqsDeadLetterSink, TargetPublisher,
};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::assignment::RespectLeases;
use crate::assignment::{
    DynamoLeaseStore, LeaseError, LeaseManager, LeaseSettings, LeaseStore, SystemClock,
    create_lease_table, discover_owner,
};
use crate::config::{
    Cli, Command, DiscardedBatchArgs, DrainArgs, IndexConfig, InspectArgs, LeaseTableArgs,
    RecoverDiscardedArgs, RedriveArgs, RelayArgs, RelayConfig, RunArgs, StatusArgs, TableArgs,
};
use crate::discarded::{DiscardedBatches, S3DiscardedBatches};
use crate::index::DynamoPendingIndex;
use crate::inspect::Inspector;
use crate::poller::ttl::DynamoPendingTtl;
use crate::poller::{DrainSummary, Poller, PollerSettings};
use crate::recreate::DynamoGoneItems;
use crate::redrive::{Redrive, Selection, Source};
use crate::status;

/// Exit code when the settings, or what they name, are wrong: a setting out of range (clap uses
/// the same for bad flags), a missing resource, access denied, no credentials, an unknown region,
/// an endpoint that refuses connections ([`relay_runtime::preflight::EXIT_MISCONFIGURED`]).
pub const EXIT_CONFIG: u8 = relay_runtime::preflight::EXIT_MISCONFIGURED;
/// Exit code when a command gave up with work left (`drain` with events pending,
/// `recover-discarded` with batches left, `inspect` with an event not found, `check` with an item
/// that does not hold is [`EXIT_CONFIG`]), or failed at run time.
pub const EXIT_FAILURE: u8 = 1;

/// How often metrics are flushed (CloudWatch EMF) during `run` and `drain`.
const METRICS_FLUSH_INTERVAL: Duration = Duration::from_secs(60);

/// The poller on AWS: DynamoDB index, status store, TTL refresh and holds, the configured bus,
/// SQS dead letters.
pub type AwsPoller = Poller<
    DynamoPendingIndex,
    TargetPublisher,
    DynamoStatusStore,
    SqsDeadLetterSink,
    DynamoPendingTtl,
    DynamoHoldStore,
>;

/// The DynamoDB and SQS clients the poller uses, built once (the publisher builds its bus's).
#[derive(Debug, Clone)]
pub struct AwsClients {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
}

impl AwsClients {
    pub fn new(sdk: &SdkConfig) -> Self {
        Self {
            dynamodb: relay_runtime::clients::dynamodb(sdk),
            sqs: relay_runtime::clients::sqs(sdk),
        }
    }
}

/// The discarded stream batches on AWS: the bucket of the mapping's on-failure destination, and
/// the outbox table their TTL-deleted events are re-created in.
pub type AwsDiscardedBatches = DiscardedBatches<S3DiscardedBatches, DynamoGoneItems>;

/// The discarded stream batches in `bucket`, re-created in `outbox`'s table with `ttl`'s published
/// retention; the S3 client counts its failed calls as the others do.
pub fn aws_discarded_batches(
    sdk: &SdkConfig,
    dynamodb: aws_sdk_dynamodb::Client,
    bucket: &str,
    outbox: &outbox_shared::OutboxConfig,
    ttl: relay_runtime::TtlPolicy,
) -> AwsDiscardedBatches {
    DiscardedBatches::new(
        S3DiscardedBatches::new(s3_client(sdk), bucket),
        DynamoGoneItems::new(dynamodb, &outbox.table_name),
        outbox.shard_count,
        ttl.published,
    )
}

/// An S3 client of `sdk` that counts its failed calls as the others do.
pub fn s3_client(sdk: &SdkConfig) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(sdk)
            .interceptor(relay_runtime::metrics::FailedCallCounter)
            .build(),
    )
}

/// Builds the poller and its clients from `sdk`.
///
/// # Errors
/// When the publisher configuration is out of range.
pub fn aws_poller(sdk: &SdkConfig, config: &RelayConfig) -> Result<AwsPoller, SettingError> {
    let publisher = TargetPublisher::new(sdk, config.publisher.clone())?;
    Ok(aws_poller_with(AwsClients::new(sdk), publisher, config))
}

/// Builds the poller on caller-built clients and publisher (tests inject faults through them).
pub fn aws_poller_with(
    clients: AwsClients,
    publisher: TargetPublisher,
    config: &RelayConfig,
) -> AwsPoller {
    // A letter too large for its queue keeps its record in the payload bucket, when there is one.
    let dead_letters = SqsDeadLetterSink::new(clients.sqs, &config.dead_letter_queue_url);
    let dead_letters = match publisher.payload_store() {
        Some(store) => dead_letters.with_record_bucket(store.clone()),
        None => dead_letters,
    };
    aws_poller_with_dead_letters(clients.dynamodb, publisher, dead_letters, config)
}

/// Builds the poller on a caller-built DynamoDB client, publisher and dead-letter sink (a sink
/// that keeps records in a payload bucket, or sends through a test's proxy).
pub fn aws_poller_with_dead_letters(
    dynamodb: aws_sdk_dynamodb::Client,
    publisher: TargetPublisher,
    dead_letters: SqsDeadLetterSink,
    config: &RelayConfig,
) -> AwsPoller {
    let outbox = &config.index.outbox;
    let index = DynamoPendingIndex::new(dynamodb.clone(), &outbox.table_name, &outbox.index_name);
    // The poller's shards run in one task: its calls run on their own tasks to use every core.
    let publisher = publisher.with_call_tasks(CallTasks::Spawned);
    // A hold no poller ever released (none ran) lapses with the published retention.
    let holds = DynamoHoldStore::new(dynamodb.clone(), &outbox.table_name, config.ttl.published)
        .with_index_name(&outbox.index_name);
    let ttl = DynamoPendingTtl::new(dynamodb.clone(), &outbox.table_name, config.ttl.published);
    let store = DynamoStatusStore::new(dynamodb, &outbox.table_name, config.ttl)
        .with_call_tasks(CallTasks::Spawned);
    let settings = PollerSettings {
        shard_count: outbox.shard_count,
        page_size: config.page_size,
        shard_concurrency: config.shard_concurrency,
        mark_concurrency: config.mark_concurrency,
        idle_backoff_max: config.idle_backoff_max,
        ttl_refresh_margin: config.ttl_refresh_margin,
        sweep_interval: config.sweep_interval,
        index_lag: config.index_lag,
    };
    let outbound = relay_runtime::relay::Outbound::of(publisher.config());
    Poller::new(index, publisher, store, dead_letters, ttl, holds, settings).with_outbound(outbound)
}

/// Runs one parsed command line to its exit code.
///
/// # Errors
/// Invalid configuration ([`SettingError`], exit code [`EXIT_CONFIG`]) or a failure to set up.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => run_continuously(args).await,
        Command::Drain(args) => drain(args).await,
        Command::Status(args) => show_status(args).await,
        Command::Redrive(args) => redrive(args).await,
        Command::Inspect(args) => inspect(args).await,
        Command::RecoverDiscarded(args) => recover_discarded(args).await,
        Command::Check(args) => crate::check::run(args).await,
    }
}

/// The exit code for an error returned by [`run`].
pub fn exit_code_for(err: &anyhow::Error) -> ExitCode {
    if err.downcast_ref::<SettingError>().is_some() || err.downcast_ref::<Unusable>().is_some() {
        ExitCode::from(EXIT_CONFIG)
    } else {
        ExitCode::from(EXIT_FAILURE)
    }
}

/// The outbox table a command's settings name, and its pending index when the command reads it.
pub fn table_need(index: &IndexConfig, with_index: bool) -> Need {
    let outbox = &index.outbox;
    Need::Table {
        table: Resource::new(
            Kind::Table,
            &outbox.table_name,
            SettingError::name_of::<TableArgs>("table_name"),
        ),
        index: with_index.then(|| {
            Resource::new(
                Kind::Index,
                &outbox.index_name,
                SettingError::name_of::<TableArgs>("index_name"),
            )
        }),
    }
}

/// What a command that publishes relies on: the target, and the payload bucket when one is set.
pub fn publish_needs(publisher: &PublisherConfig) -> Vec<Need> {
    std::iter::once(Need::target(publisher))
        .chain(relay_runtime::preflight::payload_bucket(publisher))
        .collect()
}

/// The dead-letter queue of `run`, `drain` and `redrive`.
pub fn queue_need(url: &str) -> Need {
    Need::Queue(Resource::new(
        Kind::DeadLetterQueue,
        url,
        SettingError::name_of::<RelayArgs>("dead_letter_queue_url"),
    ))
}

/// The lease table `--lease-table` names.
pub fn lease_table_need(table: &str) -> Need {
    Need::LeaseTable(Resource::new(
        Kind::LeaseTable,
        table,
        SettingError::name_of::<LeaseTableArgs>("lease_table"),
    ))
}

/// The discarded-batch bucket `--discarded-batch-bucket` names.
pub fn bucket_need(bucket: &str) -> Need {
    Need::Bucket(Resource::new(
        Kind::Bucket,
        bucket,
        SettingError::name_of::<DiscardedBatchArgs>("discarded_batch_bucket"),
    ))
}

/// What `run` and `drain` rely on: the table and its index, the target (and the payload
/// bucket), the dead-letter queue.
fn relay_needs(config: &RelayConfig) -> Vec<Need> {
    let mut needs = vec![table_need(&config.index, true)];
    needs.extend(publish_needs(&config.publisher));
    needs.push(queue_need(&config.dead_letter_queue_url));
    needs
}

/// The SDK's configuration, once the credentials and each of `needs` were found usable.
///
/// # Errors
/// [`SettingError`] for a bad timeout variable, [`Unusable`] for what a probe found.
pub async fn load_and_probe(needs: &[Need]) -> anyhow::Result<SdkConfig> {
    let sdk = relay_runtime::load_aws_config().await?;
    relay_runtime::preflight::require(&sdk, needs).await?;
    Ok(sdk)
}

/// SIGTERM (ECS stopping the task) or SIGINT (ctrl-c). Registered before any work starts, so a
/// signal that arrives early is not lost.
fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!(signal = "SIGTERM", "shutdown requested"),
            _ = interrupt.recv() => tracing::info!(signal = "SIGINT", "shutdown requested"),
        }
    })
}

async fn start(
    config: &RelayConfig,
    more: Vec<Need>,
) -> anyhow::Result<(
    Arc<AwsPoller>,
    relay_runtime::metrics::Emf,
    AwsClients,
    SdkConfig,
)> {
    // Flushed to stderr, through the logs' own writer: stdout carries the commands' results, and
    // CloudWatch Logs extracts EMF documents from either stream.
    let metrics = relay_runtime::metrics::install_emf(
        &config.metrics_namespace,
        crate::poller::ORIGIN,
        Some(METRICS_FLUSH_INTERVAL),
    )
    .context("installing the metrics recorder")?;
    let mut needs = relay_needs(config);
    needs.extend(more);
    let sdk = load_and_probe(&needs).await?;
    let poller = aws_poller(&sdk, config)?;
    let clients = AwsClients::new(&sdk);
    Ok((Arc::new(poller), metrics, clients, sdk))
}

/// The last flush before the process exits.
fn flush_metrics(metrics: &relay_runtime::metrics::Emf) {
    if let Err(err) = metrics.flush() {
        tracing::warn!(error = %err, "could not write metrics");
    }
}

/// The poller's leases on AWS.
pub type AwsLeaseManager = LeaseManager<DynamoLeaseStore, SystemClock>;

/// This process's lease manager over every shard of the shard count, after creating the lease
/// table when asked to.
///
/// # Errors
/// When the table cannot be created.
pub async fn lease_manager(
    dynamodb: &aws_sdk_dynamodb::Client,
    config: &RelayConfig,
    settings: &LeaseSettings,
) -> Result<AwsLeaseManager, LeaseError> {
    if settings.create_table {
        create_lease_table(dynamodb, &settings.table_name).await?;
    }
    let store = DynamoLeaseStore::new(dynamodb.clone(), &settings.table_name);
    let owner = discover_owner().await;
    let shards = config.index.outbox.shard_count.shards().collect();
    Ok(LeaseManager::new(
        store,
        SystemClock,
        owner,
        shards,
        settings.clone(),
    ))
}

async fn run_continuously(args: RunArgs) -> anyhow::Result<ExitCode> {
    let config = args.relay.validate()?;
    let leases = args.leases.settings(args.relay.table.shards.is_some())?;
    let discarded = args.discarded.settings()?;
    let shutdown = shutdown_signal()?;
    let mut more = Vec::new();
    if let Some(settings) = leases.as_ref().filter(|s| !s.create_table) {
        more.push(lease_table_need(&settings.table_name));
    }
    if let Some((bucket, _)) = discarded {
        more.push(bucket_need(bucket));
    }
    let (poller, metrics, clients, sdk) = start(&config, more).await?;
    let manager = match &leases {
        Some(settings) => Some(Arc::new(
            lease_manager(&clients.dynamodb, &config, settings).await?,
        )),
        None => None,
    };
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
            tracing::info!(table = %config.index.outbox.table_name, shards = ?config.index.shards, grace_ms = args.grace_period.as_millis() as u64, "poller running")
        }
    }
    let cancel = CancellationToken::new();
    let mut polling = tokio::spawn({
        let (poller, cancel, manager) = (poller.clone(), cancel.clone(), manager.clone());
        let shards = config.fixed_shards();
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
    // The discarded stream batches, swept on their own interval beside the passes: what they
    // re-create goes back to the index, where the passes publish it.
    let mut recovering = tokio::spawn({
        let cancel = cancel.clone();
        let recovery = discarded.map(|(bucket, interval)| {
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
            (batches, interval)
        });
        async move {
            if let Some((batches, interval)) = recovery {
                batches.run(interval, &cancel).await;
            }
        }
    });
    // The lease rounds go on while in-flight work finishes, so the leases are still this
    // poller's until it releases them.
    let stop_rounds = CancellationToken::new();
    let mut rounds = tokio::spawn({
        let (manager, stop_rounds) = (manager.clone(), stop_rounds.clone());
        async move {
            match manager {
                Some(manager) => manager.run(&stop_rounds).await,
                None => {
                    stop_rounds.cancelled().await;
                    Ok(())
                }
            }
        }
    });
    let (mut failure, mut stopped) = (None, false);
    tokio::select! {
        () = shutdown => {
            cancel.cancel();
            if let Some(manager) = &manager {
                manager.stop_taking();
            }
        }
        _ = &mut polling => stopped = true,
        result = &mut rounds => {
            cancel.cancel();
            failure = Some(result.context("lease task")?.err());
        }
    }
    // Stopped by the signal, by the lease rounds, or (never on its own) by the loop itself.
    cancel.cancel();
    if !stopped
        && tokio::time::timeout(config.shutdown_timeout, &mut polling)
            .await
            .is_err()
    {
        polling.abort();
        tracing::warn!(
            timeout_ms = config.shutdown_timeout.as_millis() as u64,
            "in-flight work abandoned at the shutdown timeout; its events stay pending"
        );
    }
    if tokio::time::timeout(config.shutdown_timeout, &mut recovering)
        .await
        .is_err()
    {
        // A batch not finished stays in the bucket: the next poller re-creates nothing twice.
        recovering.abort();
    }
    stop_rounds.cancel();
    if failure.is_none() {
        failure = Some(rounds.await.context("lease task")?.err());
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

async fn drain(args: DrainArgs) -> anyhow::Result<ExitCode> {
    let config = args.relay.validate()?;
    let respected = args.respected_lease_table()?.map(str::to_owned);
    let shutdown = shutdown_signal()?;
    let more = respected.iter().map(|t| lease_table_need(t)).collect();
    let (poller, metrics, clients, _) = start(&config, more).await?;
    let respect = respected.map(|table| {
        Arc::new(RespectLeases::new(
            DynamoLeaseStore::new(clients.dynamodb.clone(), table),
            SystemClock,
            config.index.shards.clone(),
        ))
    });
    let started = Instant::now();
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    let mut handle = tracker.spawn({
        let (poller, cancel, respect) = (poller.clone(), cancel.clone(), respect.clone());
        let shards = config.fixed_shards();
        async move {
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
    tracker.close();
    let summary: DrainSummary = tokio::select! {
        result = &mut handle => result.context("drain task")?,
        () = shutdown => {
            cancel.cancel();
            match tokio::time::timeout(config.shutdown_timeout, &mut handle).await {
                Ok(result) => result.context("drain task")?,
                Err(_) => {
                    tracing::warn!(timeout_ms = config.shutdown_timeout.as_millis() as u64, "in-flight work abandoned at the shutdown timeout; its events stay pending");
                    handle.abort();
                    let remaining = tokio::time::timeout(config.shutdown_timeout, poller.count_remaining())
                        .await
                        .ok()
                        .flatten();
                    DrainSummary { interrupted: true, remaining, ..poller.summary(started.elapsed()) }
                }
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
    writeln!(std::io::stdout(), "{line}").context("writing the summary")?;
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

async fn show_status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let index_config = args.table.validate()?;
    let queue_url =
        relay_runtime::config::dead_letter_queue_url(args.dead_letter_queue_url.as_deref());
    let mut needs = vec![table_need(&index_config, true)];
    needs.extend(queue_url.map(|url| {
        Need::Queue(Resource::new(
            Kind::DeadLetterQueue,
            url,
            SettingError::name_of::<StatusArgs>("dead_letter_queue_url"),
        ))
    }));
    needs.extend(args.lease_table.name().map(lease_table_need));
    let sdk = load_and_probe(&needs).await?;
    let clients = AwsClients::new(&sdk);
    let outbox = &index_config.outbox;
    let index = DynamoPendingIndex::new(
        clients.dynamodb.clone(),
        &outbox.table_name,
        &outbox.index_name,
    );
    let now = Utc::now();
    let mut report = status::collect(&index, &index_config.shards, outbox.shard_count, now).await?;
    if let Some(table) = args.lease_table.name() {
        let view = DynamoLeaseStore::new(clients.dynamodb.clone(), table)
            .read()
            .await?;
        report.leases = Some(status::LeaseReport::from_view(
            table,
            &view,
            &index_config.shards,
            now.timestamp_millis(),
        ));
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
    if let Some(url) =
        relay_runtime::config::dead_letter_queue_url(args.dead_letter_queue_url.as_deref())
    {
        report.dead_letter_queue_depth = Some(status::queue_depth(&clients.sqs, url).await?);
    }
    let text = if args.json {
        serde_json::to_string(&report)? + "\n"
    } else {
        report.to_table()
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing the status")?;
    say(&format!(
        "status: {} events pending in the shards (the oldest {:.0} s old), {} under stray \
         partitions, {} holds",
        report.total_pending, report.oldest_pending_age_seconds, report.stray_pending, report.holds
    ));
    Ok(ExitCode::SUCCESS)
}

/// The command's outcome in words, its last line at a terminal
/// ([`relay_runtime::telemetry::outcome`]).
fn say(words: &str) {
    relay_runtime::telemetry::outcome("relay-poller", words);
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

/// Whether stdout is a person's terminal (tables) or a script's pipe (JSON).
fn stdout_is_terminal() -> bool {
    use std::io::IsTerminal;
    std::io::stdout().is_terminal()
}

async fn redrive(args: RedriveArgs) -> anyhow::Result<ExitCode> {
    let config = args.relay.validate()?;
    let mut needs = vec![
        table_need(&config.index, false),
        queue_need(&config.dead_letter_queue_url),
    ];
    if args.publish && !args.dry_run {
        needs.extend(publish_needs(&config.publisher));
    }
    let sdk = load_and_probe(&needs).await?;
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
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing the summary")?;
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

async fn recover_discarded(args: RecoverDiscardedArgs) -> anyhow::Result<ExitCode> {
    let index = args.table.validate()?;
    let ttl = args.retention.ttl_policy()?;
    SettingError::non_empty::<RecoverDiscardedArgs>(
        "discarded_batch_bucket",
        &args.discarded_batch_bucket,
    )?;
    let sdk = load_and_probe(&[
        table_need(&index, false),
        Need::Bucket(Resource::new(
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
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing the summary")?;
    say(&format!(
        "recover-discarded{}: {} of {} batches recovered ({} events re-created), {} left in the \
         bucket, {} to retry{}",
        if recovery.dry_run { " (dry run)" } else { "" },
        recovery.recovered,
        recovery.batches,
        recovery.recreated,
        recovery.left_in_bucket,
        recovery.retry_later,
        if recovery.left_in_bucket + recovery.retry_later == 0 {
            String::new()
        } else {
            format!(" (exit {EXIT_FAILURE})")
        }
    ));
    // A batch left for a person, or for a later run, is not done: a script should see it.
    if recovery.left_in_bucket + recovery.retry_later == 0 {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(EXIT_FAILURE))
    }
}

async fn inspect(args: InspectArgs) -> anyhow::Result<ExitCode> {
    SettingError::non_empty::<InspectArgs>("table_name", &args.table_name)?;
    let sdk = load_and_probe(&[Need::Table {
        table: Resource::new(
            Kind::Table,
            &args.table_name,
            SettingError::name_of::<InspectArgs>("table_name"),
        ),
        index: None,
    }])
    .await?;
    let inspector = Inspector {
        dynamodb: aws_sdk_dynamodb::Client::new(&sdk),
        table_name: args.table_name.clone(),
    };
    let now = Utc::now();
    let found = match &args.key {
        Some(key) => {
            let key = outbox_shared::ItemKey {
                pk: key[0].clone(),
                sk: key[1].clone(),
            };
            vec![inspector.by_key(&key, now).await?]
        }
        None => inspector.by_event_ids(&args.event_ids, now).await?,
    };
    let text = if args.json {
        serde_json::to_string(&found)? + "\n"
    } else {
        found
            .iter()
            .map(crate::inspect::Inspection::to_text)
            .collect::<Vec<_>>()
            .join("\n")
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing the inspection")?;
    let missing = found.iter().filter(|i| !i.found).count();
    say(&format!(
        "inspect: {} of {} found{}",
        found.len() - missing,
        found.len(),
        if missing > 0 {
            format!(" (exit {EXIT_FAILURE})")
        } else {
            String::new()
        }
    ));
    // Not finding an event is an answer, but a script should see it.
    if found.iter().all(|i| i.found) {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(EXIT_FAILURE))
    }
}
