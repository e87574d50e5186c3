//! `relay-poller`: the fallback relay of the outbox. It polls the sparse, sharded `GSI1` index of
//! pending events, publishes them to EventBridge, and marks each published item out of the index
//! with a conditional update, through the per-event path it shares with the stream relay
//! (`relay_runtime::relay`).
//!
//! - [`config`]: the command line (`run`, `drain`, `status`, `redrive`, `inspect`), every flag
//!   also an env variable.
//! - [`index`]: the pending index's ports (its pages, its counts) and their DynamoDB adapter.
//! - [`poller`]: one pass over the shards ([`Poller::pass`]) and the `run` / `drain` loops, and
//!   their components (the pages, the sweep, the TTL refresh, the hold release).
//! - [`assignment`]: which shards a pass polls: a fixed list, or shard leases in a lease table of
//!   their own, so a fleet of pollers shares the shards (fair share, takeover on expiry, graceful
//!   hand-over).
//! - [`status`]: backlog per shard and partition, the oldest pending event, expiring and
//!   dead-lettered items, the dead-letter queue's depth.
//! - [`redrive`]: dead-lettered events back to pending, then published (its `letters` reads the
//!   dead-letter messages back).
//! - [`discarded`]: stream batches the mapping discarded, read back from its S3 on-failure
//!   destination: each TTL deletion of a pending event in them re-created ([`recreate`], the path
//!   `redrive` re-creates gone items with), the batch deleted once handled.
//! - [`inspect`]: what happened to one event.
//! - [`check`]: a preflight of a deployment: what the relays rely on, item by item, with the fix.
//! - [`metrics`]: metric names and the CloudWatch EMF recorder.
//! - [`app`]: the binary's wiring (clients, signals, exit codes).

pub mod app;
pub mod assignment;
pub mod check;
pub mod config;
pub mod discarded;
pub mod index;
pub mod inspect;
pub mod metrics;
pub mod permissions;
pub mod poller;
pub mod recreate;
pub mod redrive;
pub mod status;
pub mod table;

pub use assignment::{PassShards, ShardAssignment, StaticShards};
pub use config::{Cli, Command, RelayConfig};
pub use index::{DynamoPendingIndex, PendingCounts, PendingPages};
pub use poller::ttl::{DynamoPendingTtl, PendingTtl, TtlOutcome};
pub use poller::{
    DEFAULT_INDEX_LAG, DEFAULT_SWEEP_INTERVAL, DEFAULT_TTL_REFRESH_MARGIN, DrainSummary,
    PassOutcome, PassStats, Poller, PollerSettings, cutoff,
};
pub use relay_runtime::SettingError;
/// Re-exported so callers can drive the loops without naming tokio-util.
pub use tokio_util::sync::CancellationToken;
