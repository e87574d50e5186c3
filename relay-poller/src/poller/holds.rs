//! The release of aggregate holds: the stream relay holds an aggregate whose event failed and
//! leaves its events to the poller (`HOLD_FAILED_AGGREGATES`); once the poller has published
//! them, it releases the hold, and the stream relay publishes the aggregate's events again.

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
    /// new events again. A hold set again meanwhile stays.
    pub async fn release_holds(&self) {
        let holds = match self.holds.list().await {
            Ok(holds) => holds,
            Err(err) => {
                tracing::warn!(error = %outbox_shared::error::describe(&err), "could not read the aggregate holds");
                return;
            }
        };
        for hold in holds {
            match self.index.has_pending(&hold).await {
                Ok(false) => match self.holds.release(&hold).await {
                    Ok(true) => {
                        tracing::info!(ordering_key = %hold.ordering_key, "aggregate hold released");
                    }
                    Ok(false) => {}
                    Err(err) => {
                        tracing::warn!(error = %outbox_shared::error::describe(&err), "could not release an aggregate hold")
                    }
                },
                Ok(true) => {}
                Err(err) => {
                    tracing::warn!(error = %outbox_shared::error::describe(&err), "could not check an aggregate hold")
                }
            }
        }
    }
}
