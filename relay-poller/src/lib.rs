//! `relay-poller`: the fallback relay of the outbox. It polls the sparse, sharded `GSI1` index of
//! pending events, publishes them to EventBridge, and marks each published item out of the index
//! with a conditional update, through the per-event path it shares with the stream relay
//! (`relay_runtime::relay`).
//!
//! - [`app`]: the command line's dispatch, each subcommand to its command's `run`.
//! - [`command`]: the operator commands (`run`, `drain`, `status`, `inspect`, `redrive`,
//!   `recover-discarded`, `check`), one module and one `run` each.
//! - [`config`]: the command line, every flag also an env variable.
//! - [`aws`]: the adapters on AWS, wired from SDK clients built once; [`needs`]: what a command
//!   relies on being usable, probed before it starts; [`process`]: signals, the tasks a signal
//!   stops, exit codes, the outcome line. What the commands share: none imports a command.
//! - [`index`]: the pending index's ports (its pages, its counts) and their DynamoDB adapter.
//! - [`poller`]: one pass over the shards ([`Poller::pass`]) and the `run` / `drain` loops, and
//!   their components (the pages, the sweep, the TTL refresh, the hold release), over one
//!   parameter of ports ([`PollerPorts`]).
//! - [`legacy_holds`]: the holds an earlier release wrote, moved beside their events.
//! - [`assignment`]: which shards a pass polls: a fixed list, or shard leases in a lease table of
//!   their own, so a fleet of pollers shares the shards (fair share, takeover on expiry, graceful
//!   hand-over).
//! - [`failover`]: on a global table, which regions' partitions a region's pollers publish: region
//!   heartbeats and adoptions in the lease table, a dead region adopted by another, handed back
//!   when it returns.
//! - [`status`]: backlog per shard and partition, the oldest pending event, expiring and
//!   dead-lettered items, the dead-letter queue's depth.
//! - [`redrive`]: dead-lettered events back to pending, then published (its `letters` reads the
//!   dead-letter messages back).
//! - [`discarded`]: stream batches the mapping discarded, read back from its S3 on-failure
//!   destination: each TTL deletion of a pending event in them re-created ([`recreate`], the path
//!   `redrive` re-creates gone items with), the batch deleted once handled.
//! - [`inspect`]: what happened to one event.
//! - [`metrics`]: metric names and the CloudWatch EMF recorder.

pub mod app;
pub mod assignment;
pub mod aws;
pub mod command;
pub mod config;
pub mod discarded;
pub mod failover;
pub mod index;
pub mod inspect;
pub mod legacy_holds;
pub mod metrics;
pub mod partitions;
pub mod permissions;
pub mod poller;
pub mod probes;
pub mod process;
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
    PassOutcome, PassStats, Poller, PollerPorts, PollerSettings, Ports, cutoff,
};
pub use relay_runtime::SettingError;
/// Re-exported so callers can drive the loops without naming tokio-util.
pub use tokio_util::sync::CancellationToken;
