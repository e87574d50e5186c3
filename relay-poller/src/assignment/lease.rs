//! Shard leases: several `relay-poller run` tasks share the partitions of the pending index through a
//! small lease table of their own, as the Kinesis Client Library's workers share a stream.
//!
//! - One lease per partition (`LeaseKey = SHARD#{n}`): its owner, when it expires, a counter bumped by
//!   every write that changes hands or renews (the version every conditional write checks), a
//!   pending hand-over request, and when its owner last finished a pass over the partition.
//! - One heartbeat per poller (`LeaseKey = POLLER#{owner}`): a poller is *live* while its
//!   heartbeat is fresh; the fair share is the partition count divided by the live pollers.
//! - Every renew interval a poller runs one *round* ([`LeaseManager::round`]): heartbeat, renew
//!   what it holds (conditional writes), read the table, hand over a lease another poller asked
//!   for, take free or expired leases up to its fair share, and when it is still below its share
//!   and nothing is free, ask the poller holding the most for one lease (at most one per round).
//! - A hand-over is graceful: the holder stops taking pages of the partition, waits for the page in
//!   flight, and only then writes the lease over to the poller that asked, so two pollers never
//!   poll a partition at once while their clocks agree. A hand-over not confirmed (the call failed,
//!   or answered "not mine", as a retried write that was applied the first time does) leaves the
//!   partition stopped until the holder's next renewal says whether the lease is still its own.
//! - A poller stops taking pages of a partition at its *poll deadline*, one renew interval before the
//!   lease it last renewed expires; another poller takes the lease only after that expiry by its
//!   own clock. Pollers' clocks may therefore differ by up to one renew interval (less the
//!   longest page in flight) without two of them polling a partition at once.
//! - Leases decide who polls, never what is correct: the conditional status mark stays the guard,
//!   so a poller that lost its lease without knowing causes duplicates at most, never a loss; and
//!   a partition whose lease nobody has owned for a lease duration is published by the sweep.
//!
//! Why not a crate: `dynamodb-lease` 0.22 (the maintained one, on `aws-sdk-dynamodb` 1.x) is a
//! single-key mutex: one lease per `acquire`, no owner id, no listing of leases or holders, no
//! heartbeats (so no count of live pollers, no fair share, no taking from the poller holding the
//! most), no word to its holder when a renewal fails (its background task just stops; `is_healthy`
//! must be polled, and expiry is whole seconds on DynamoDB's TTL attribute), release on drop as a
//! detached task, `anyhow` errors, and a default feature that adds the SDK's legacy HTTP client
//! (hyper 0.14, rustls 0.21) the workspace keeps out. `leasy` 0.2 counts only owners of unexpired
//! leases as workers (a new worker is invisible until it holds one), steals only expired leases,
//! has no release or hand-over, and no source repository. So the leases are written here.
//!
//! This file is what a lease is (the table's items, their keys and attributes, the settings, the
//! clock and the errors). The decisions are pure functions ([`super::plan`]); the
//! [`super::LeaseStore`] port holds the conditional writes, with a DynamoDB adapter
//! ([`super::DynamoLeaseStore`]); the [`Clock`] is a port too, so tests drive rounds of several
//! pollers with a fake clock and an in-memory store. The leases a poller owns are kept where its
//! manager ([`super::LeaseManager`]) and its poll loop both see them (`owned`); the poll loop sees
//! them as a [`super::LeasedShards`].

use outbox_shared::region::Region;
use outbox_shared::schema::PendingPartition;
use std::collections::BTreeMap;
use std::time::Duration;

/// Wall-clock time as epoch milliseconds: what the lease table stores and compares.
pub type Millis = i64;

/// Attribute names of the lease table.
pub mod attr {
    /// The table's partition key: [`super::partition_key`] or [`super::poller_key`].
    pub const LEASE_KEY: &str = outbox_shared::region::lease_item::LEASE_KEY;
    /// The poller holding a lease (absent when the lease is free); a heartbeat's poller.
    pub const OWNER: &str = "Owner";
    /// Epoch milliseconds by the writer's clock after which a lease is free to take, or a
    /// heartbeat no longer counts its poller as live.
    pub const EXPIRES_AT: &str = "ExpiresAt";
    /// When the lease was last taken, renewed, handed over or released (epoch milliseconds).
    pub const RENEWED_AT: &str = "RenewedAt";
    /// When the current owner got the lease (epoch milliseconds).
    pub const TAKEN_AT: &str = "TakenAt";
    /// Bumped by every write that renews a lease or changes its owner; conditions check it.
    pub const COUNTER: &str = "Counter";
    /// A live poller that asked the holder to hand the lease over (fair share).
    pub const HANDOFF_TO: &str = "HandoffTo";
    /// When the holder last finished a pass over the partition (epoch milliseconds).
    pub const LAST_PASS_AT: &str = "LastPassAt";
    /// When a poller last wrote its heartbeat (epoch milliseconds).
    pub const HEARTBEAT_AT: &str = "HeartbeatAt";
    /// When a poller started (epoch milliseconds).
    pub const STARTED_AT: &str = "StartedAt";
    /// The region whose partitions a heartbeat's poller leases (a global table's).
    pub const REGION: &str = "Region";
    /// DynamoDB TTL of heartbeats (epoch seconds): the items of pollers that died are deleted a
    /// day later. The same attribute name as the outbox table's.
    pub const TTL: &str = outbox_shared::schema::attr::TTL;
}

/// `LeaseKey` of a partition's lease: `SHARD#{shard}` on a single-region table,
/// `SHARD#{region}#{shard}` for a region's partition of a global table, whose lease table is
/// global too: each region's pollers lease their own region's partitions, apart from the others'.
pub fn partition_key(partition: &PendingPartition) -> String {
    format!("SHARD#{partition}")
}

/// `LeaseKey` of a poller's heartbeat.
pub fn poller_key(owner: &str) -> String {
    format!("POLLER#{owner}")
}

/// The partition of a lease key, if it is one.
pub fn parse_partition_key(key: &str) -> Option<PendingPartition> {
    key.strip_prefix("SHARD#")?.parse().ok()
}

/// The owner of a heartbeat key, if it is one.
pub fn parse_poller_key(key: &str) -> Option<&str> {
    key.strip_prefix("POLLER#")
}

/// How long heartbeat items stay after their last write before DynamoDB's TTL removes them.
pub const HEARTBEAT_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// Default of `--lease-duration`.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(30);
/// Default of `--lease-renew-interval`.
pub const DEFAULT_RENEW_INTERVAL: Duration = Duration::from_secs(10);
/// A lease is renewed at least this many times per duration, so one lost renewal does not cost
/// it.
pub const MIN_RENEWALS_PER_DURATION: u32 = 3;

/// How leases are kept: their table, how long they last, how often they are renewed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    /// The lease table.
    pub table_name: String,
    /// How long a lease (and a heartbeat) lasts after it is written.
    pub duration: Duration,
    /// How often a poller runs a round (renews, takes, hands over).
    pub renew_interval: Duration,
    /// Create the table (on-demand) when it does not exist.
    pub create_table: bool,
}

impl LeaseSettings {
    /// After a renewal, how long the holder may start pages of the partition: one renew interval
    /// less than the lease lasts. That interval is the clock skew between pollers the leases
    /// tolerate.
    pub fn poll_window(&self) -> Duration {
        self.duration.saturating_sub(self.renew_interval)
    }

    pub(crate) fn duration_ms(&self) -> Millis {
        millis(self.duration)
    }

    pub(crate) fn poll_window_ms(&self) -> Millis {
        millis(self.poll_window())
    }
}

pub(crate) fn millis(duration: Duration) -> Millis {
    Millis::try_from(duration.as_millis()).unwrap_or(Millis::MAX)
}

/// One partition's lease, as the table holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub partition: PendingPartition,
    /// `None` when the lease is free (released).
    pub owner: Option<String>,
    pub expires_at: Millis,
    pub renewed_at: Millis,
    pub taken_at: Millis,
    pub counter: u64,
    pub handoff_to: Option<String>,
    pub last_pass_at: Option<Millis>,
}

impl Lease {
    /// The poller holding it at `now`: an owner whose lease has not expired.
    pub fn holder_at(&self, now: Millis) -> Option<&str> {
        self.owner.as_deref().filter(|_| self.expires_at > now)
    }

    /// Whether another poller may take it at `now` (free, or expired).
    pub fn is_takeable_at(&self, now: Millis) -> bool {
        self.holder_at(now).is_none()
    }
}

/// One poller's heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heartbeat {
    pub owner: String,
    /// The region whose partitions the poller leases, on a global table (whose lease table is
    /// global too, so every region's pollers beat in it): a poller shares its partitions only
    /// with the pollers of its region. `None` on a single-region table.
    pub region: Option<Region>,
    pub heartbeat_at: Millis,
    pub expires_at: Millis,
    pub started_at: Millis,
}

impl Heartbeat {
    pub fn is_live_at(&self, now: Millis) -> bool {
        self.expires_at > now
    }
}

/// The whole lease table: leases by partition, heartbeats by owner.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaseView {
    pub leases: BTreeMap<PendingPartition, Lease>,
    pub heartbeats: BTreeMap<String, Heartbeat>,
}

impl LeaseView {
    /// The fleet of `region` (`None`: a single-region table's) as it shares `partitions`: their
    /// leases, and the heartbeats of that region's pollers. A global lease table holds every
    /// region's; another region's pollers neither hold these leases nor share in their fair
    /// share.
    #[must_use]
    pub fn fleet(mut self, region: Option<&Region>, partitions: &[PendingPartition]) -> Self {
        self.leases
            .retain(|partition, _| partitions.contains(partition));
        self.heartbeats.retain(|_, h| h.region.as_ref() == region);
        self
    }
}

/// When a lease write is made (by the writer's clock) and until when the lease it writes holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Term {
    pub at: Millis,
    pub expires_at: Millis,
}

/// What a conditional write expects of the lease it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Expect {
    /// No lease item yet.
    Missing,
    /// The lease unchanged since it was read with this counter.
    Counter(u64),
}

/// The time source of the leases (a port, so tests can move time by hand).
pub trait Clock: Send + Sync {
    /// Now, as epoch milliseconds.
    fn now(&self) -> Millis;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        chrono::Utc::now().timestamp_millis()
    }
}

/// A lease-table call that failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LeaseError {
    /// The table does not exist.
    #[error(
        "lease table {table} does not exist: create it with --create-lease-table (local runs) or deploy the template (AWS)"
    )]
    TableMissing {
        table: String,
        #[source]
        failure: outbox_shared::SdkFailure,
    },
    /// Any other failure of a call (after the SDK's retries).
    #[error("{} on lease table {table} failed", .failure.operation)]
    Call {
        table: String,
        #[source]
        failure: outbox_shared::SdkFailure,
    },
    /// An item the relay did not write, or wrote with another version of it.
    #[error("lease table {table}: item {key} is malformed: {reason}")]
    Malformed {
        table: String,
        key: String,
        reason: String,
    },
}
