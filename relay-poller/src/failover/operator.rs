//! What an operator changes by hand (`relay-poller adopt-region`, `hand-back-region`): an adoption
//! written as the pollers write theirs (the epoch read, one higher), so the pollers of every region
//! follow it at their next round once it has replicated.
//!
//! - Adopting names the operator's region as the adopter, marked as an operator's: the pollers do
//!   not hand it back by themselves when the region's heartbeat is fresh (an evacuation stays), but
//!   the adopted region reclaims it if the adopter's relays stop.
//! - Handing back names no adopter: the region publishes its own from the round after it reads it.
//!   A region whose heartbeat is stale is adopted again by the pollers after
//!   `--region-failover-after`, as any dead region is.

use outbox_shared::Region;
use serde::Serialize;

use super::{AdoptionChange, RegionError, RegionStore};
use crate::assignment::Millis;

/// How many times a command re-reads and writes again when a poller changed the adoption between
/// its read and its write.
const ATTEMPTS: usize = 3;

/// What an operator's change left.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OperatorOutcome {
    pub region: String,
    /// The region publishing its partitions now (in this region's replica).
    pub publisher: String,
    pub epoch: u64,
    /// Whether this command changed the adoption (`false`: it was so already).
    pub changed: bool,
    /// Seconds since the region's last heartbeat, by this region's replica; `None` without one.
    pub heartbeat_age_seconds: Option<f64>,
}

/// An operator's change that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error(
        "{region} is this process's own region (AWS_REGION): another region adopts it; to let it \
         publish its own partitions again, run hand-back-region {region}"
    )]
    OwnRegion { region: Region },
    #[error(
        "the adoption of {region} kept changing while it was written ({ATTEMPTS} attempts): \
         the pollers are changing it; run the command again"
    )]
    Contended { region: Region },
    #[error(transparent)]
    Store(#[from] RegionError),
}

/// Makes `adopter` (this process's region) publish `region`'s partitions, as an operator's
/// adoption.
///
/// # Errors
/// [`OperatorError`]: `region` is `adopter`, the write kept losing, or a call failed.
pub async fn adopt_region<S: RegionStore>(
    store: &S,
    now: Millis,
    region: &Region,
    adopter: &Region,
) -> Result<OperatorOutcome, OperatorError> {
    if region == adopter {
        return Err(OperatorError::OwnRegion {
            region: region.clone(),
        });
    }
    change(store, now, region, Some(adopter), true).await
}

/// Lets `region` publish its own partitions again.
///
/// # Errors
/// [`OperatorError`]: the write kept losing, or a call failed.
pub async fn hand_back_region<S: RegionStore>(
    store: &S,
    now: Millis,
    region: &Region,
) -> Result<OperatorOutcome, OperatorError> {
    change(store, now, region, None, false).await
}

async fn change<S: RegionStore>(
    store: &S,
    now: Millis,
    region: &Region,
    adopter: Option<&Region>,
    by_operator: bool,
) -> Result<OperatorOutcome, OperatorError> {
    for _ in 0..ATTEMPTS {
        let view = store.read().await?;
        let age = view
            .heartbeats
            .get(region)
            .map(|b| (now - b.heartbeat_at) as f64 / 1000.0);
        let current = view.adoptions.get(region);
        let already = current.is_some_and(|a| {
            a.adopter.as_ref() == adopter && (a.by_operator == by_operator || adopter.is_none())
        }) || (current.is_none() && adopter.is_none());
        if already {
            return Ok(OperatorOutcome {
                region: region.to_string(),
                publisher: view.publisher_of(region).to_string(),
                epoch: current.map_or(0, |a| a.epoch),
                changed: false,
                heartbeat_age_seconds: age,
            });
        }
        let change = AdoptionChange {
            region: region.clone(),
            adopter: adopter.cloned(),
            expect: view.epoch_of(region),
            at: now,
            by_operator,
        };
        if store.change(&change).await? {
            return Ok(OperatorOutcome {
                region: region.to_string(),
                publisher: adopter.unwrap_or(region).to_string(),
                epoch: change.next_epoch(),
                changed: true,
                heartbeat_age_seconds: age,
            });
        }
    }
    Err(OperatorError::Contended {
        region: region.clone(),
    })
}

impl OperatorOutcome {
    /// The command's one line.
    pub fn line(&self, command: &str) -> String {
        let what = if self.changed { "now" } else { "already" };
        let age = match self.heartbeat_age_seconds {
            Some(age) => format!("its heartbeat is {age:.0} s old"),
            None => "it has no heartbeat".to_owned(),
        };
        format!(
            "{command}: {} is {what} published by {} (epoch {}); {age}",
            self.region, self.publisher, self.epoch
        )
    }
}
