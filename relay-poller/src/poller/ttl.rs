//! The TTL refresh: a pending item whose `ttl` is past or within the refresh margin gets its `ttl`
//! pushed forward, only while it is still pending, so DynamoDB's TTL never deletes an unpublished
//! event the poller can read. A pass refreshes a page's expiring items before it publishes them.

use futures::StreamExt;
use futures::stream;
use outbox_shared::ItemKey;
use relay_runtime::{DeadLetterSink, HoldStore, Publisher, StatusStore, TtlOutcome};

use super::Poller;
use super::stats::PassStats;
use crate::index::PendingIndex;
use crate::metrics;

impl<I, P, S, D, H> Poller<I, P, S, D, H>
where
    I: PendingIndex,
    P: Publisher,
    S: StatusStore,
    D: DeadLetterSink,
    H: HoldStore,
{
    /// Pushes the `ttl` of pending items forward, concurrently; a failure is retried the next
    /// time the item is read.
    pub(super) async fn extend_ttls(&self, items: Vec<(ItemKey, String)>, stats: &mut PassStats) {
        let results: Vec<_> = stream::iter(items)
            .map(|(key, event_id)| async move {
                let result = self.relay.status().extend_ttl(&key).await;
                (event_id, result)
            })
            .buffer_unordered(self.settings.mark_concurrency)
            .collect()
            .await;
        let mut extended = 0;
        for (event_id, result) in results {
            match result {
                Ok(TtlOutcome::Extended) => extended += 1,
                Ok(TtlOutcome::NotPending) => {}
                Err(err) => {
                    tracing::warn!(event_id = %event_id, error = %err.failure, "could not extend the ttl of a pending event");
                    stats.ttl_errors += 1;
                }
            }
        }
        stats.ttl_extended += extended;
        metrics::ttl_extended(extended);
    }
}
