//! The poller's adapters on AWS, wired from SDK clients built once: the poller and its ports
//! ([`AwsPoller`]), the discarded stream batches, the shard leases, the move of an earlier
//! release's holds; and the start of a command that relays ([`start_relay`]).

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use aws_config::SdkConfig;
use relay_runtime::probe::Probe;
use relay_runtime::{
    CallTasks, DynamoHoldStore, DynamoStatusStore, SettingError, SqsDeadLetterSink, TargetPublisher,
};

use crate::assignment::{
    DynamoLeaseStore, LeaseError, LeaseManager, LeaseSettings, SystemClock, create_lease_table,
    discover_owner,
};
use crate::config::RelayConfig;
use crate::discarded::{DiscardedBatches, S3DiscardedBatches};
use crate::failover::{DynamoRegionStore, FailoverSettings, RegionManager};
use crate::index::DynamoPendingIndex;
use crate::legacy_holds::LegacyHolds;
use crate::partitions::Partitions;
use crate::poller::ttl::DynamoPendingTtl;
use crate::poller::{Poller, PollerSettings, Ports};
use crate::probes::{load_and_probe_found, relay_probes};
use crate::recreate::DynamoGoneItems;

/// How often metrics are flushed (CloudWatch EMF) during `run` and `drain`.
const METRICS_FLUSH_INTERVAL: Duration = Duration::from_secs(60);

/// The poller's ports on AWS: DynamoDB index, status store, TTL refresh and holds, the
/// configured target, SQS dead letters.
pub type AwsPorts = Ports<
    DynamoPendingIndex,
    TargetPublisher,
    DynamoStatusStore,
    SqsDeadLetterSink,
    DynamoPendingTtl,
    DynamoHoldStore,
>;

/// The poller on AWS.
pub type AwsPoller = Poller<AwsPorts>;

/// The DynamoDB and SQS clients the poller uses, built once (the publisher builds its target's).
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

/// Builds the poller and its clients from `sdk`.
///
/// # Errors
/// When the publisher configuration is out of range, or `--regions` leaves out the SDK config's
/// region.
pub fn aws_poller(sdk: &SdkConfig, config: &RelayConfig) -> Result<AwsPoller, SettingError> {
    let publisher = TargetPublisher::new(sdk, config.publisher.clone())?;
    aws_poller_with(AwsClients::new(sdk), publisher, config)
}

/// Builds the poller on caller-built clients and publisher (tests inject faults through them).
///
/// # Errors
/// When `--regions` does not describe a global table the clients' region is part of.
pub fn aws_poller_with(
    clients: AwsClients,
    publisher: TargetPublisher,
    config: &RelayConfig,
) -> Result<AwsPoller, SettingError> {
    // A letter too large for its queue keeps its record in the payload bucket, when there is one.
    let dead_letters = SqsDeadLetterSink::new(clients.sqs, &config.dead_letter_queue_url);
    let dead_letters = match publisher.payload_store() {
        Some(store) => dead_letters.with_record_bucket(store.clone()),
        None => dead_letters,
    };
    aws_poller_with_dead_letters(clients.dynamodb, publisher, dead_letters, config)
}

/// Builds the poller on a caller-built DynamoDB client, publisher and dead-letter sink (a sink
/// that keeps records in a payload bucket, or sends through a test's proxy). It serves the
/// partitions of the DynamoDB client's region ([`crate::config::IndexConfig::partitions`]).
///
/// # Errors
/// When `--regions` does not describe a global table the client's region is part of.
pub fn aws_poller_with_dead_letters(
    dynamodb: aws_sdk_dynamodb::Client,
    publisher: TargetPublisher,
    dead_letters: SqsDeadLetterSink,
    config: &RelayConfig,
) -> Result<AwsPoller, SettingError> {
    let partitions = config
        .index
        .partitions(dynamodb.config().region().map(|r| r.as_ref()))?;
    let outbox = &config.index.outbox;
    let index = DynamoPendingIndex::new(dynamodb.clone(), &outbox.table_name, &outbox.index_name);
    // The poller's shards run in one task: its calls run on their own tasks to use every core.
    let publisher = publisher.with_call_tasks(CallTasks::Spawned);
    let holds = hold_store(&dynamodb, config);
    let ttl = DynamoPendingTtl::new(dynamodb.clone(), &outbox.table_name, config.ttl.published);
    let store = DynamoStatusStore::new(dynamodb, &outbox.table_name, config.ttl)
        .with_call_tasks(CallTasks::Spawned);
    let settings = PollerSettings {
        partitions,
        page_size: config.page_size,
        shard_concurrency: config.shard_concurrency,
        mark_concurrency: config.mark_concurrency,
        idle_backoff_max: config.idle_backoff_max,
        ttl_refresh_margin: config.ttl_refresh_margin,
        sweep_interval: config.sweep_interval,
        index_lag: config.index_lag,
    };
    let outbound = relay_runtime::relay::Outbound::of(publisher.config());
    let payloads = publisher
        .payload_store()
        .map(|store| store.client().clone());
    let ports = Ports {
        index,
        publisher,
        store,
        dead_letters,
        ttl,
        holds,
    };
    let poller = Poller::new(ports, settings).with_outbound(outbound);
    Ok(match payloads {
        Some(client) => poller.with_payloads(client),
        None => poller,
    })
}

/// The hold items of the outbox table, read through its pending index.
fn hold_store(dynamodb: &aws_sdk_dynamodb::Client, config: &RelayConfig) -> DynamoHoldStore {
    let outbox = &config.index.outbox;
    // A hold no poller ever released (none ran) lapses with the published retention.
    DynamoHoldStore::new(dynamodb.clone(), &outbox.table_name, config.ttl.published)
        .with_index_name(&outbox.index_name)
}

/// The move of an earlier release's holds in the outbox table, for passes with `grace`.
pub fn legacy_holds(
    dynamodb: &aws_sdk_dynamodb::Client,
    config: &RelayConfig,
    grace: Duration,
) -> LegacyHolds {
    LegacyHolds::new(hold_store(dynamodb, config), grace)
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

/// An S3 client of `sdk` that counts its failed calls as the others do, every call carrying the
/// buckets' owner when one is set (`relay_runtime::expected_bucket_owner`).
pub fn s3_client(sdk: &SdkConfig) -> aws_sdk_s3::Client {
    relay_runtime::clients::s3(sdk)
}

/// The poller's leases on AWS.
pub type AwsLeaseManager = LeaseManager<DynamoLeaseStore, SystemClock>;

/// The region rounds `run` holds on a global table.
pub type AwsRegionManager = RegionManager<DynamoRegionStore, SystemClock>;

/// This process's lease manager over every shard of the shard count in the regions `partitions`
/// serves, after creating the lease table when asked to.
///
/// # Errors
/// When the table cannot be created.
pub async fn lease_manager(
    dynamodb: &aws_sdk_dynamodb::Client,
    partitions: &Partitions,
    settings: &LeaseSettings,
) -> Result<AwsLeaseManager, LeaseError> {
    if settings.create_table {
        create_lease_table(dynamodb, &settings.table_name).await?;
    }
    let store = DynamoLeaseStore::new(dynamodb.clone(), &settings.table_name);
    let owner = discover_owner().await;
    let manager = LeaseManager::new(
        store,
        SystemClock,
        owner,
        partitions.every_shard_of_every_region(),
        settings.clone(),
    );
    // On a global table the region rounds decide which regions' partitions are leased.
    Ok(match partitions.global_table() {
        Some(_) => manager.serving(partitions.served().clone()),
        None => manager,
    })
}

/// The region rounds of a poller of a global table (`--regions` with a lease table), on the lease
/// table, for poller `owner` (its lease manager's), setting the regions `partitions` serves.
pub fn region_manager(
    dynamodb: &aws_sdk_dynamodb::Client,
    partitions: &Partitions,
    lease_table: &str,
    owner: &str,
    settings: FailoverSettings,
) -> Option<AwsRegionManager> {
    let table = partitions.global_table()?.clone();
    Some(
        RegionManager::new(
            DynamoRegionStore::new(dynamodb.clone(), lease_table),
            SystemClock,
            table,
            owner,
            settings,
        )
        .serving(partitions.served().clone()),
    )
}

/// A command that relays (`run`, `drain`), started.
#[derive(Debug)]
pub struct Relay {
    pub poller: Arc<AwsPoller>,
    /// The metrics recorder, flushed on an interval and once more at the end.
    pub metrics: relay_runtime::metrics::Emf,
    pub clients: AwsClients,
    pub sdk: SdkConfig,
}

/// Starts a command that relays: the metrics recorder installed, what it relies on (the relay's
/// probes and `more`) probed, the poller built within the target's own entry limit.
///
/// # Errors
/// A setting out of range, or what a probe found unusable.
pub async fn start_relay(config: &RelayConfig, more: Vec<Probe>) -> anyhow::Result<Relay> {
    // Flushed to stderr, through the logs' own writer: stdout carries the commands' results, and
    // CloudWatch Logs extracts EMF documents from either stream.
    let metrics = relay_runtime::metrics::install_emf(
        &config.metrics_namespace,
        crate::poller::ORIGIN,
        Some(METRICS_FLUSH_INTERVAL),
    )
    .context("installing the metrics recorder")?;
    let mut probes = relay_probes(config);
    probes.extend(more);
    let (sdk, found) = load_and_probe_found(&probes).await?;
    let clients = AwsClients::new(&sdk);
    let publisher = TargetPublisher::new(
        &sdk,
        config
            .publisher
            .clone()
            .within_target_limit(found.target_entry_limit()),
    )?;
    let poller = Arc::new(aws_poller_with(clients.clone(), publisher, config)?);
    Ok(Relay {
        poller,
        metrics,
        clients,
        sdk,
    })
}
