//! Which partitions a pass polls, and until when each page may publish: a fixed list (`--shards`, or
//! all: [`StaticShards`]), the leases a poller owns in a fleet ([`LeasedShards`]), or every partition
//! no other poller owns ([`RespectLeases`], `drain --respect-leases`). A pass, `run` and `drain`
//! take any of them through the one port, [`ShardAssignment`].
//!
//! The leases, a file a concept:
//! - [`lease`]: what a lease is (one per partition, a heartbeat per poller, in a lease table of its
//!   own), its settings, the clock, the errors;
//! - [`plan`]: the decisions, pure functions (what to take, when to hand over);
//! - `store`: the [`LeaseStore`] port and its DynamoDB adapter (the conditional writes);
//! - `manager`: a poller's lease rounds ([`LeaseManager`]);
//! - `owned`: the leases a poller owns, where its manager and its poll loop both see them;
//! - `owner`: the poller's id (its ECS task);
//! - `leased`: the poll loop's side of them ([`LeasedShards`], [`RespectLeases`]).

pub mod lease;
mod leased;
mod manager;
pub(crate) mod owned;
mod owner;
pub mod plan;
pub mod store;

use outbox_shared::schema::PendingPartition;
use std::future::Future;

use relay_runtime::Deadline;

pub use lease::{
    Clock, DEFAULT_LEASE_DURATION, DEFAULT_RENEW_INTERVAL, Expect, HEARTBEAT_RETENTION, Heartbeat,
    Lease, LeaseError, LeaseSettings, LeaseView, MIN_RENEWALS_PER_DURATION, Millis, SystemClock,
    Term, attr, parse_partition_key, parse_poller_key, partition_key, poller_key,
};
pub use leased::{LeasedShards, RespectLeases};
pub use manager::{LeaseManager, RoundReport};
pub use owner::{ECS_METADATA_ENV, discover_owner, fallback_owner};
pub use store::{DynamoLeaseStore, LeaseStore, create_lease_table};

/// The partitions of one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassShards {
    /// Shards this pass polls.
    pub poll: Vec<PendingPartition>,
    /// Shards whose lease nobody has owned for a lease duration: the sweep publishes their events.
    pub orphaned: Vec<PendingPartition>,
    /// Reads that failed while deciding (the lease table): the pass saw only part of the index.
    pub read_errors: u64,
}

/// Whether a page may start, and until when its publishes may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageStart {
    /// Go on; no publish starts after `deadline`'s publish-by time (the lease's poll deadline).
    Go { deadline: Deadline },
    /// The partition is no longer this poller's to poll (lost, handed over, past its deadline).
    Stop,
}

/// Port: decides the partitions of each pass, and whether each page of a partition may start.
pub trait ShardAssignment: Send + Sync {
    /// The partitions of the next pass.
    fn for_pass(&self) -> impl Future<Output = PassShards> + Send;

    /// Called before each page of `partition`; a page that starts is ended by [`Self::end_page`].
    fn begin_page(&self, partition: &PendingPartition) -> PageStart;

    /// The page of `partition` begun last is done (published and marked, or failed).
    fn end_page(&self, partition: &PendingPartition);

    /// A pass over every page of `partition` finished.
    fn partition_polled(&self, partition: &PendingPartition);
}

/// A fixed list of partitions (`--shards`, or all): every page may start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticShards(pub Vec<PendingPartition>);

impl ShardAssignment for StaticShards {
    async fn for_pass(&self) -> PassShards {
        PassShards {
            poll: self.0.clone(),
            ..PassShards::default()
        }
    }

    fn begin_page(&self, _partition: &PendingPartition) -> PageStart {
        PageStart::Go {
            deadline: Deadline::NONE,
        }
    }

    fn end_page(&self, _partition: &PendingPartition) {}

    fn partition_polled(&self, _partition: &PendingPartition) {}
}
