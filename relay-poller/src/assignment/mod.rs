//! Which shards a pass polls: a fixed list (`--shards`), the leases a poller owns
//! ([`LeasedShards`]), or every shard no other poller owns ([`RespectLeases`],
//! `drain --respect-leases`).

mod leased;

use std::future::Future;

pub use leased::{LeasedShards, RespectLeases};

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
    /// Go on; no publish starts after `stop_at` (the lease's poll deadline).
    Go {
        stop_at: Option<tokio::time::Instant>,
    },
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
        PageStart::Go { stop_at: None }
    }

    fn end_page(&self, _shard: u16) {}

    fn shard_polled(&self, _shard: u16) {}
}
