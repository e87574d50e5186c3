//! What a command relies on being usable before it starts (each a [`Need`], named by the setting
//! that names it), and the probe of them all with the credentials ([`load_and_probe`]).

use aws_config::SdkConfig;
use relay_runtime::preflight::{Kind, Need, Resource};
use relay_runtime::{PublisherConfig, SettingError};

use crate::config::{
    DiscardedBatchArgs, IndexConfig, LeaseTableArgs, RelayArgs, RelayConfig, TableArgs,
};

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
pub fn relay_needs(config: &RelayConfig) -> Vec<Need> {
    let mut needs = vec![table_need(&config.index, true)];
    needs.extend(publish_needs(&config.publisher));
    needs.push(queue_need(&config.dead_letter_queue_url));
    needs
}

/// The SDK's configuration, once the credentials and each of `needs` were found usable.
///
/// # Errors
/// [`SettingError`] for a bad timeout variable, [`relay_runtime::preflight::Unusable`] for what a
/// probe found.
pub async fn load_and_probe(needs: &[Need]) -> anyhow::Result<SdkConfig> {
    let sdk = relay_runtime::load_aws_config().await?;
    relay_runtime::preflight::require(&sdk, needs).await?;
    Ok(sdk)
}
