//! Wiring for the binary: SDK clients built once, the subcommands, signals and exit codes.

use std::future::Future;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use aws_config::SdkConfig;
use chrono::Utc;
use outbox_shared::{DynamoStatusStore, EventBridgePublisher, SqsDeadLetterSink};
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::{Cli, Command, ConfigError, DrainArgs, RelayConfig, RunArgs, StatusArgs};
use crate::index::DynamoPendingIndex;
use crate::poller::{DrainSummary, Poller, PollerSettings};
use crate::{metrics, status};

/// Exit code for configuration errors (clap uses the same for bad flags).
pub const EXIT_CONFIG: u8 = 2;
/// Exit code when `drain` leaves events unpublished, or the poller fails at run time.
pub const EXIT_FAILURE: u8 = 1;

/// How often metrics are flushed (CloudWatch EMF) during `run` and `drain`.
const METRICS_FLUSH_INTERVAL: Duration = Duration::from_secs(60);

/// The poller on AWS: DynamoDB index and status store, EventBridge, SQS dead letters.
pub type AwsPoller =
    Poller<DynamoPendingIndex, EventBridgePublisher, DynamoStatusStore, SqsDeadLetterSink>;

/// The SDK clients the poller uses, built once.
#[derive(Debug, Clone)]
pub struct AwsClients {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub eventbridge: aws_sdk_eventbridge::Client,
    pub sqs: aws_sdk_sqs::Client,
}

impl AwsClients {
    pub fn new(sdk: &SdkConfig) -> Self {
        Self {
            dynamodb: aws_sdk_dynamodb::Client::new(sdk),
            eventbridge: aws_sdk_eventbridge::Client::new(sdk),
            sqs: aws_sdk_sqs::Client::new(sdk),
        }
    }
}

/// Builds the poller on `clients`.
///
/// # Errors
/// When the publisher configuration is out of range.
pub fn aws_poller(
    clients: AwsClients,
    config: &RelayConfig,
) -> Result<AwsPoller, outbox_shared::ConfigError> {
    let outbox = &config.index.outbox;
    let index = DynamoPendingIndex::new(
        clients.dynamodb.clone(),
        &outbox.table_name,
        &outbox.index_name,
    );
    let publisher = EventBridgePublisher::new(clients.eventbridge, config.publisher.clone())?;
    let store = DynamoStatusStore::new(clients.dynamodb, &outbox.table_name);
    let dead_letters = SqsDeadLetterSink::new(clients.sqs, &config.dead_letter_queue_url);
    let settings = PollerSettings {
        shards: config.index.shards.clone(),
        page_size: config.page_size,
        shard_concurrency: config.shard_concurrency,
        flip_concurrency: config.flip_concurrency,
        event_bus_name: config.publisher.event_bus_name.clone(),
        source: config.publisher.source.clone(),
    };
    Ok(Poller::new(index, publisher, store, dead_letters, settings))
}

/// Runs one parsed command line to its exit code.
///
/// # Errors
/// Invalid configuration ([`ConfigError`], exit code [`EXIT_CONFIG`]) or a failure to set up.
pub async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => run_continuously(args).await,
        Command::Drain(args) => drain(args).await,
        Command::Status(args) => show_status(args).await,
    }
}

/// The exit code for an error returned by [`run`].
pub fn exit_code_for(err: &anyhow::Error) -> ExitCode {
    if err.downcast_ref::<ConfigError>().is_some() {
        ExitCode::from(EXIT_CONFIG)
    } else {
        ExitCode::from(EXIT_FAILURE)
    }
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
) -> anyhow::Result<(
    Arc<AwsPoller>,
    &'static metrics_cloudwatch_embedded::Collector,
)> {
    let collector = metrics::install_emf(METRICS_FLUSH_INTERVAL)
        .map_err(|e| anyhow::anyhow!("installing the metrics recorder: {e}"))?;
    let sdk = outbox_shared::load_aws_config().await;
    let poller = aws_poller(AwsClients::new(&sdk), config).map_err(|e| ConfigError {
        flag: "--event-bus-name/--source",
        reason: e.to_string(),
    })?;
    Ok((Arc::new(poller), collector))
}

async fn run_continuously(args: RunArgs) -> anyhow::Result<ExitCode> {
    let config = args.relay.validate()?;
    let shutdown = shutdown_signal()?;
    let (poller, collector) = start(&config).await?;
    tracing::info!(table = %config.index.outbox.table_name, shards = ?config.index.shards, grace_ms = args.grace_period.as_millis() as u64, "poller running");
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    tracker.spawn({
        let (poller, cancel) = (poller.clone(), cancel.clone());
        async move {
            poller
                .run(args.grace_period, args.idle_backoff_max, cancel)
                .await;
        }
    });
    tracker.close();
    tokio::select! {
        () = shutdown => cancel.cancel(),
        () = tracker.wait() => {}
    }
    if tokio::time::timeout(config.shutdown_timeout, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            timeout_ms = config.shutdown_timeout.as_millis() as u64,
            "in-flight work abandoned at the shutdown timeout; its events stay pending"
        );
    }
    let _ = collector.flush(std::io::stderr());
    tracing::info!("poller stopped");
    Ok(ExitCode::SUCCESS)
}

async fn drain(args: DrainArgs) -> anyhow::Result<ExitCode> {
    let config = args.relay.validate()?;
    let shutdown = shutdown_signal()?;
    let (poller, collector) = start(&config).await?;
    let started = Instant::now();
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    let mut handle = tracker.spawn({
        let (poller, cancel) = (poller.clone(), cancel.clone());
        async move {
            poller
                .drain(args.grace_period, args.max_stalled_passes, &cancel)
                .await
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
                    DrainSummary { interrupted: true, ..poller.summary(started.elapsed()) }
                }
            }
        }
    };
    let summary = DrainSummary {
        put_events_calls: poller.publisher().stats().put_events_calls,
        ..summary
    };
    let _ = collector.flush(std::io::stderr());
    let line = serde_json::to_string(&summary).context("serializing the summary")?;
    writeln!(std::io::stdout(), "{line}").context("writing the summary")?;
    tracing::info!(
        published = summary.published,
        already_published = summary.already_published,
        dead_lettered = summary.dead_lettered,
        failed = summary.failed,
        complete = summary.complete,
        interrupted = summary.interrupted,
        "drain finished"
    );
    // An interrupted drain is a clean stop, not a failure: a later drain carries on.
    if summary.complete || summary.interrupted {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(EXIT_FAILURE))
    }
}

async fn show_status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let index_config = args.table.validate()?;
    let sdk = outbox_shared::load_aws_config().await;
    let outbox = &index_config.outbox;
    let index = DynamoPendingIndex::new(
        aws_sdk_dynamodb::Client::new(&sdk),
        &outbox.table_name,
        &outbox.index_name,
    );
    let report = status::collect(&index, &index_config.shards, Utc::now()).await?;
    let text = if args.json {
        serde_json::to_string(&report)? + "\n"
    } else {
        report.to_table()
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing the status")?;
    Ok(ExitCode::SUCCESS)
}
