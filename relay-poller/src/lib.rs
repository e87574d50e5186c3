//! `relay-poller`: the fallback relay of the outbox. It polls the sparse, sharded `GSI1` index of
//! pending events, publishes them to EventBridge through the shared publisher, and flips each
//! published item out of the index with a conditional update.
//!
//! - [`config`]: the command line (`run`, `drain`, `status`), every flag also an env variable.
//! - [`index`]: the pending-index port and its DynamoDB adapter.
//! - [`poller`]: the step function ([`Poller::poll_once`]) and the `run` / `drain` loops.
//! - [`status`]: backlog per shard and the oldest pending event.
//! - [`metrics`]: metric names and the CloudWatch EMF recorder.
//! - [`app`]: the binary's wiring (clients, signals, exit codes).

pub mod app;
pub mod config;
pub mod index;
pub mod metrics;
pub mod poller;
pub mod status;

pub use config::{Cli, Command, ConfigError, RelayConfig};
pub use index::{DynamoPendingIndex, PendingIndex};
pub use poller::{CycleOutcome, CycleStats, DrainSummary, Poller, PollerSettings};
/// Re-exported so callers can drive the loops without naming tokio-util.
pub use tokio_util::sync::CancellationToken;
