//! The aggregate holds an earlier release wrote, moved beside their events
//! (`DynamoHoldStore::migrate_legacy`; `relay_runtime::holds` says what moves and why): `run`
//! moves them once per sweep interval, `drain` before its first pass, and the passes then release
//! each in step with the events they publish. A step of the DynamoDB adapter, not a port of the
//! poller: only holds stored in DynamoDB by that release need it.

use std::time::Duration;

use chrono::Utc;
use outbox_shared::schema;
use outbox_shared::time::format_timestamp;
use relay_runtime::DynamoHoldStore;
use tokio_util::sync::CancellationToken;

use crate::poller::cutoff;

/// The move of an earlier release's holds.
#[derive(Debug, Clone)]
pub struct LegacyHolds {
    store: DynamoHoldStore,
    /// The passes' grace period: a hold moved now sorts at the cutoff of a pass starting now.
    grace: Duration,
}

impl LegacyHolds {
    pub fn new(store: DynamoHoldStore, grace: Duration) -> Self {
        Self { store, grace }
    }

    /// Moves them, each sorted at the cutoff of a pass starting now: a pass releases it once it
    /// has published everything pending before that. Logged; what fails is moved next time.
    pub async fn migrate(&self) {
        let up_to = schema::pending_sort_key(&format_timestamp(cutoff(Utc::now(), self.grace)), "");
        match self.store.migrate_legacy(&up_to).await {
            Ok(0) => {}
            Ok(moved) => {
                tracing::info!(
                    moved,
                    "aggregate holds of an earlier release moved beside their events"
                );
            }
            Err(err) => {
                tracing::warn!(error = %outbox_shared::error::describe(&err), "could not move the aggregate holds of an earlier release; trying again at the next move");
            }
        }
    }

    /// Moves them every `interval` until `cancel` fires.
    pub async fn run(&self, interval: Duration, cancel: &CancellationToken) {
        while !cancel.is_cancelled() {
            self.migrate().await;
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(interval) => {}
            }
        }
    }
}
