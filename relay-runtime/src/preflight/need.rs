//! What a process relies on ([`Need`]), named by its settings, and [`require`], which probes each
//! once at start-up.

use aws_config::SdkConfig;

use super::probe::{bucket, credentials, queue, table, table_and_index, target};
use super::{Kind, Resource, Unusable};
use crate::target::TargetKind;

/// What a process relies on, to probe at start-up in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// The outbox table, and its pending index when the process reads it.
    Table {
        table: Resource,
        index: Option<Resource>,
    },
    /// The target events are published to.
    Target { kind: TargetKind, target: Resource },
    /// The dead-letter queue.
    Queue(Resource),
    /// The poller fleet's lease table.
    LeaseTable(Resource),
    /// A bucket.
    Bucket(Resource),
}

impl Need {
    /// The target `publisher` publishes to, named by its setting.
    pub fn target(publisher: &crate::PublisherConfig) -> Self {
        Self::Target {
            kind: publisher.target_kind,
            target: target_resource(publisher),
        }
    }
}

/// The payload bucket `publisher` stores large payloads in, named by its setting, if it has one.
pub fn payload_bucket(publisher: &crate::PublisherConfig) -> Option<Need> {
    publisher.payload_bucket.as_ref().map(|bucket| {
        Need::Bucket(Resource::new(
            Kind::Bucket,
            bucket,
            crate::SettingError::name_of::<crate::PublisherArgs>("payload_bucket"),
        ))
    })
}

/// The target `publisher` publishes to, as a resource named by `--target (EVENT_TARGET)`.
pub fn target_resource(publisher: &crate::PublisherConfig) -> Resource {
    Resource::new(
        publisher.target_kind.spec().resource,
        &publisher.target,
        crate::SettingError::name_of::<crate::PublisherArgs>("target"),
    )
}

/// Probes, in order, the credentials and then each of `needs`.
///
/// # Errors
/// The first [`Unusable`] found.
pub async fn require(sdk: &SdkConfig, needs: &[Need]) -> Result<(), Unusable> {
    credentials(sdk).await?;
    for need in needs {
        let unknown = match need {
            Need::Table { table: t, index: i } => {
                table_and_index(sdk, t, i.as_ref()).await?;
                None
            }
            Need::Target { kind, target: t } => target(sdk, *kind, t).await?.failure(),
            Need::Queue(q) => queue(sdk, q).await?.failure(),
            Need::LeaseTable(t) => table(sdk, t).await?.failure(),
            Need::Bucket(b) => bucket(sdk, b).await?.failure(),
        };
        if let Some(failure) = unknown {
            tracing::warn!(error = %failure, "could not check a resource at start-up; going on");
        }
    }
    Ok(())
}
