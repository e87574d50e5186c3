//! The release of aggregate holds: the stream relay holds an aggregate whose event failed and
//! leaves its events to the poller (`HOLD_FAILED_AGGREGATES`); once the poller has published
//! them, it releases the hold, and the stream relay publishes the aggregate's events again.
//!
//! A hold is released only when none of what it covers is pending (the events recorded as left
//! under it, read from the table; and its partition in the index) and, by the release's
//! condition, nothing was left under it since it was read: an event the stream relay leaves at
//! the same moment keeps the hold. A hold kept gets its `ttl` pushed out before it lapses, so
//! DynamoDB's TTL never deletes a hold whose events the poller has not published yet (a poller
//! that keeps failing to publish them).

use std::time::Duration;

use relay_runtime::{Hold, HoldRelease};

/// The release of the aggregate holds: the poller's side of the holds, and nothing else.
#[derive(Debug)]
pub(super) struct HoldReleaser<H> {
    holds: H,
    /// A hold kept whose `ttl` is past or less than this away gets it pushed out.
    ttl_refresh_margin: Duration,
}

impl<H: HoldRelease> HoldReleaser<H> {
    pub(super) fn new(holds: H, ttl_refresh_margin: Duration) -> Self {
        Self {
            holds,
            ttl_refresh_margin,
        }
    }

    /// Releases the aggregate holds whose aggregate has no pending event left (the poller has
    /// published what the stream relay left to it), so the stream relay publishes the aggregate's
    /// new events again. A hold set again, or with an event left under it, meanwhile stays; a
    /// hold that stays and whose `ttl` is within the TTL refresh margin gets it pushed out.
    pub(super) async fn release(&self) {
        let holds = match self.holds.list().await {
            Ok(holds) => holds,
            Err(err) => {
                tracing::warn!(error = %outbox_shared::error::describe(&err), "could not read the aggregate holds");
                return;
            }
        };
        for hold in holds {
            let released = match self.holds.has_pending(&hold).await {
                Ok(false) => match self.holds.release(&hold).await {
                    Ok(true) => {
                        tracing::info!(ordering_key = %hold.ordering_key, "aggregate hold released");
                        true
                    }
                    Ok(false) => false,
                    Err(err) => {
                        tracing::warn!(error = %outbox_shared::error::describe(&err), "could not release an aggregate hold");
                        false
                    }
                },
                Ok(true) => false,
                Err(err) => {
                    tracing::warn!(error = %outbox_shared::error::describe(&err), "could not check an aggregate hold");
                    false
                }
            };
            if !released
                && self.expires_soon(&hold)
                && let Err(err) = self.holds.extend(&hold).await
            {
                tracing::warn!(error = %outbox_shared::error::describe(&err), "could not push out the ttl of an aggregate hold");
            }
        }
    }

    /// Whether `hold`'s `ttl` is past or within the TTL refresh margin.
    fn expires_soon(&self, hold: &Hold) -> bool {
        let margin = i64::try_from(self.ttl_refresh_margin.as_secs()).unwrap_or(i64::MAX);
        hold.ttl
            .is_some_and(|ttl| ttl <= chrono::Utc::now().timestamp().saturating_add(margin))
    }
}
