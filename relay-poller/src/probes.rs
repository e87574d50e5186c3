//! What a command relies on being usable before it starts (each a [`Probe`], named by the setting
//! that names it), and the probe of them all with the credentials ([`load_and_probe`]).

use aws_config::SdkConfig;
use relay_runtime::probe::{Found, Kind, Probe, Resource};
use relay_runtime::{PublisherConfig, SettingError};

use crate::config::{
    DiscardedBatchArgs, IndexConfig, LeaseTableArgs, RelayArgs, RelayConfig, TableArgs,
};

/// The outbox table a command's settings name, and its pending index when the command reads it.
pub fn table_probe(index: &IndexConfig, with_index: bool) -> Probe {
    let outbox = &index.outbox;
    Probe::Table {
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
pub fn publish_probes(publisher: &PublisherConfig) -> Vec<Probe> {
    std::iter::once(Probe::target(publisher))
        .chain(relay_runtime::probe::payload_bucket(publisher))
        .collect()
}

/// The dead-letter queue of `run`, `drain` and `redrive`.
pub fn queue_probe(url: &str) -> Probe {
    Probe::Queue(Resource::new(
        Kind::DeadLetterQueue,
        url,
        SettingError::name_of::<RelayArgs>("dead_letter_queue_url"),
    ))
}

/// The lease table `--lease-table` names.
pub fn lease_table_probe(table: &str) -> Probe {
    Probe::LeaseTable(Resource::new(
        Kind::LeaseTable,
        table,
        SettingError::name_of::<LeaseTableArgs>("lease_table"),
    ))
}

/// The discarded-batch bucket `--discarded-batch-bucket` names.
pub fn bucket_probe(bucket: &str) -> Probe {
    Probe::Bucket(Resource::new(
        Kind::Bucket,
        bucket,
        SettingError::name_of::<DiscardedBatchArgs>("discarded_batch_bucket"),
    ))
}

/// What `run` and `drain` rely on: the table and its index, the target (and the payload
/// bucket), the dead-letter queue.
pub fn relay_probes(config: &RelayConfig) -> Vec<Probe> {
    let mut probes = vec![table_probe(&config.index, true)];
    probes.extend(publish_probes(&config.publisher));
    probes.push(queue_probe(&config.dead_letter_queue_url));
    probes
}

/// The SDK's configuration, once the credentials and each of `probes` were found usable.
///
/// # Errors
/// [`SettingError`] for a bad timeout variable, [`relay_runtime::probe::Unusable`] for what a
/// probe found.
pub async fn load_and_probe(probes: &[Probe]) -> anyhow::Result<SdkConfig> {
    Ok(load_and_probe_found(probes).await?.0)
}

/// Like [`load_and_probe`], with what the probes found ([`Found`]: the target's entry limit).
///
/// # Errors
/// As [`load_and_probe`].
pub async fn load_and_probe_found(probes: &[Probe]) -> anyhow::Result<(SdkConfig, Found)> {
    let sdk = relay_runtime::load_aws_config().await?;
    let found = relay_runtime::probe::each(&sdk, probes).await?;
    Ok((sdk, found))
}
