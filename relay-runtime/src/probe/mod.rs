//! What a process relies on, probed once at start-up: its credentials and region, then each
//! resource its settings name (the table and its pending index, the target, the dead-letter queue,
//! the lease table, a bucket), by a describe call each. A failure no retry can fix
//! ([`outbox_shared::Misconfiguration`]: a missing resource, access denied, no or refused
//! credentials, an unknown region, an endpoint that refuses connections) is an [`Unusable`]: one
//! line naming the resource, the setting that named it (flag and variable), the region and the
//! endpoint, the AWS error code and what to do. Every binary stops on it (exit code
//! [`EXIT_MISCONFIGURED`]); the Lambda logs it as an ERROR at init. After start-up the relays
//! keep to their loops: a resource that goes missing later is retried and alarmed on, as any
//! other failed call.
//!
//! Any other failure no retry fixes (a code that is not throttling, a 5xx or a timeout: an SNS
//! topic of another region answers `InvalidParameter`) is an [`Unusable`] too
//! ([`outbox_shared::Misconfiguration::Refused`]). A failure of a probe that a retry may fix
//! (throttling, a 5xx, a timeout) is not: the probe lets it pass ([`Probed::Unknown`]) and the
//! relay starts with a warning; its loops retry what fails.
//!
//! What the probes found that the relays go by is [`Found`]: the target's own limit of one entry
//! (an SQS queue's `MaximumMessageSize`, a Kinesis stream's maximum record size), read once at
//! start, bounds the entry budget ([`crate::PublisherConfig::within_target_limit`]).
//!
//! `relay-poller check` reads the same descriptions and goes further (keys, projection, stream
//! view, TTL, sizes); the target is described by its room's describe call
//! ([`crate::target::TargetSpec::describe`], through [`target`]).
//!
//! The room: [`unusable`] tells a person what is wrong (what, where, which setting, what to do);
//! [`describe`] makes the describe calls; a [`Probe`] names one thing a process relies on, and
//! [`each`] probes them.

// An `Unusable` is made at most once, at start-up, and ends the process: its size (the resource,
// where the call went, the fix, the SDK error) costs nothing, and boxing it would hide it from
// `anyhow`'s downcasts, which choose the exit code.
#![allow(clippy::result_large_err)]

use std::time::Duration;

use aws_config::SdkConfig;

use crate::permissions::{Call, Target};
use crate::target::{TargetDescription, TargetKind};

mod describe;
mod unusable;

pub use describe::{
    Probed, QueueDescription, SeenEndpoint, bucket, credentials, index, queue, table,
    table_and_index, target,
};
pub(crate) use describe::{probe_client, probed};
pub use unusable::{Kind, Place, Resource, Service, Unusable, credential_sources};

/// Exit code of a process whose settings, or what they name, are wrong: a setting out of range
/// (clap's own code for a bad flag too), a missing resource, access denied, no credentials, an
/// unknown region, an endpoint that refuses connections.
pub const EXIT_MISCONFIGURED: u8 = 2;

/// How long the credential chain may look (environment, profile, web identity, the container's
/// and the instance's endpoints) before the process says it found none.
pub const CREDENTIALS_TIMEOUT: Duration = Duration::from_secs(10);

/// The probe of every relay's table (the target's is its room's
/// [`describe_calls`](crate::target::TargetSpec::describe_calls); the dead-letter queue's
/// `sqs:GetQueueAttributes` is the dead-letter sink's own call).
pub const CALLS: &[Call] = &[Call::new("dynamodb:DescribeTable", Target::OutboxTable)];

/// The probe of the payload bucket (`PAYLOAD_BUCKET`), when one is configured: [`bucket`]'s
/// `ListObjectsV2` of one key, which IAM authorizes as `s3:ListBucket`.
pub const PAYLOAD_BUCKET_CALLS: &[Call] = &[Call::new("s3:ListBucket", Target::PayloadBucket)];

/// The probe of the poller fleet's lease table.
pub const LEASE_TABLE_CALLS: &[Call] = &[Call::new("dynamodb:DescribeTable", Target::LeaseTable)];

/// What a process relies on, to probe at start-up in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
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

impl Probe {
    /// The target `publisher` publishes to, named by its setting.
    pub fn target(publisher: &crate::PublisherConfig) -> Self {
        Self::Target {
            kind: publisher.target_kind,
            target: target_resource(publisher),
        }
    }
}

/// The payload bucket `publisher` stores large payloads in, named by its setting, if it has one.
pub fn payload_bucket(publisher: &crate::PublisherConfig) -> Option<Probe> {
    publisher.payload_bucket.as_ref().map(|bucket| {
        Probe::Bucket(Resource::new(
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

/// What the probes found that the process goes by.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// The target, as its service described it (`None`: not probed, or a failure a retry may fix).
    pub target: Option<TargetDescription>,
}

impl Found {
    /// The target's own limit of one entry, if it has one and it was read
    /// ([`TargetDescription::max_entry_bytes`]).
    pub fn target_entry_limit(&self) -> Option<usize> {
        self.target.as_ref().and_then(|t| t.max_entry_bytes)
    }
}

/// Probes, in order, the credentials and then each of `probes`.
///
/// # Errors
/// The first [`Unusable`] found.
pub async fn each(sdk: &SdkConfig, probes: &[Probe]) -> Result<Found, Unusable> {
    credentials(sdk).await?;
    let mut found = Found::default();
    for probe in probes {
        let unknown = match probe {
            Probe::Table { table: t, index: i } => {
                table_and_index(sdk, t, i.as_ref()).await?;
                None
            }
            Probe::Target { kind, target: t } => match target(sdk, *kind, t).await? {
                Probed::Found(described) => {
                    found.target = Some(described);
                    None
                }
                Probed::Unknown(failure) => Some(failure),
            },
            Probe::Queue(q) => queue(sdk, q).await?.failure(),
            Probe::LeaseTable(t) => table(sdk, t).await?.failure(),
            Probe::Bucket(b) => bucket(sdk, b).await?.failure(),
        };
        if let Some(failure) = unknown {
            tracing::warn!(error = %failure, "could not check a resource at start-up; going on");
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests;
