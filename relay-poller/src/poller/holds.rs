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

use relay_runtime::{DeadLetterSink, HoldStore, Publisher, StatusStore};

use super::Poller;
use crate::index::PendingIndex;

impl<I, P, S, D, H> Poller<I, P, S, D, H>
where
    I: PendingIndex,
    P: Publisher,
    S: StatusStore,
    D: DeadLetterSink,
    H: HoldStore,
{
    /// Releases the aggregate holds whose aggregate has no pending event left (the poller has
    /// published what the stream relay left to it), so the stream relay publishes the aggregate's
    /// new events again. A hold set again, or with an event left under it, meanwhile stays; a
    /// hold that stays and whose `ttl` is within the TTL refresh margin gets it pushed out.
    pub async fn release_holds(&self) {
        let holds = match self.holds.list().await {
            Ok(holds) => holds,
            Err(err) => {
                tracing::warn!(error = %outbox_shared::error::describe(&err), "could not read the aggregate holds");
                return;
            }
        };
        for hold in holds {
            let released = match self.index.has_pending(&hold).await {
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
                && self.hold_expires_soon(&hold)
                && let Err(err) = self.holds.extend(&hold).await
            {
                tracing::warn!(error = %outbox_shared::error::describe(&err), "could not push out the ttl of an aggregate hold");
            }
        }
    }

    /// Whether `hold`'s `ttl` is past or within the TTL refresh margin.
    fn hold_expires_soon(&self, hold: &relay_runtime::Hold) -> bool {
        let margin = i64::try_from(self.settings.ttl_refresh_margin.as_secs()).unwrap_or(i64::MAX);
        hold.ttl
            .is_some_and(|ttl| ttl <= chrono::Utc::now().timestamp().saturating_add(margin))
    }
}
