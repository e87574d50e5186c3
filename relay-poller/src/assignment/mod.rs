//! Which shards a pass polls, and until when each page may publish: a fixed list (`--shards`, or
//! all: [`StaticShards`]), the leases a poller owns in a fleet ([`LeasedShards`]), or every shard
//! no other poller owns ([`RespectLeases`], `drain --respect-leases`). A pass, `run` and `drain`
//! take any of them through the one port, [`ShardAssignment`].
//!
//! The leases, a file a concept:
//! - [`lease`]: what a lease is (one per shard, a heartbeat per poller, in a lease table of its
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

use std::future::Future;

use relay_runtime::Deadline;

pub use lease::{
    Clock, DEFAULT_LEASE_DURATION, DEFAULT_RENEW_INTERVAL, Expect, HEARTBEAT_RETENTION, Heartbeat,
    Lease, LeaseError, LeaseSettings, LeaseView, MIN_RENEWALS_PER_DURATION, Millis, SystemClock,
    Term, attr, parse_poller_key, parse_shard_key, poller_key, shard_key,
};
pub use leased::{LeasedShards, RespectLeases};
pub use manager::{LeaseManager, RoundReport};
pub use owner::{ECS_METADATA_ENV, discover_owner, fallback_owner};
pub use store::{DynamoLeaseStore, LeaseStore, create_lease_table};

/// The shards of one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassShards {
    /// Shards this pass polls.
    pub poll: Vec<u16>,
    /// Shards whose lease nobody has owned for a lease duration: the sweep publishes their events.
    pub orphaned: Vec<u16>,
    /// Reads that failed while deciding (the lease table): the pass saw only part of the index.
    pub read_errors: u64,
}

/// Whether a page may start, and until when its publishes may start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageStart {
    /// Go on; no publish starts after `deadline`'s publish-by time (the lease's poll deadline).
    Go { deadline: Deadline },
    /// The shard is no longer this poller's to poll (lost, handed over, past its deadline).
    Stop,
}

/// Port: decides the shards of each pass, and whether each page of a shard may start.
pub trait ShardAssignment: Send + Sync {
    /// The shards of the next pass.
    fn for_pass(&self) -> impl Future<Output = PassShards> + Send;

    /// Called before each page of `shard`; a page that starts is ended by [`Self::end_page`].
    fn begin_page(&self, shard: u16) -> PageStart;

    /// The page of `shard` begun last is done (published and marked, or failed).
    fn end_page(&self, shard: u16);

    /// A pass over every page of `shard` finished.
    fn shard_polled(&self, shard: u16);
}

/// A fixed list of shards (`--shards`, or all): every page may start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticShards(pub Vec<u16>);

impl ShardAssignment for StaticShards {
    async fn for_pass(&self) -> PassShards {
        PassShards {
            poll: self.0.clone(),
            ..PassShards::default()
        }
    }

    fn begin_page(&self, _shard: u16) -> PageStart {
        PageStart::Go {
            deadline: Deadline::NONE,
        }
    }

    fn end_page(&self, _shard: u16) {}

    fn shard_polled(&self, _shard: u16) {}
}
