//! Hold mode (`HOLD_FAILED_AGGREGATES`): a failing aggregate does not block the stream shard.
//! Before publishing, the events of aggregates already held are left to the poller; after it,
//! each aggregate with an event that failed is held, and its events are left to the poller too.
//! The holds themselves are the [`relay_runtime::holds`] port's.

use std::collections::{HashMap, HashSet};

use aws_lambda_events::dynamodb::EventRecord;
use outbox_shared::schema::attr;
use relay_runtime::{DeadLetterSink, HoldStore, Publisher, ReadyEvents, Settled, StatusStore};

use super::StreamRelay;
use super::decode::string_attr;
use super::report::RecordOutcome;
use crate::metrics as m;

impl<P: Publisher, S: StatusStore, D: DeadLetterSink, H: HoldStore> StreamRelay<P, S, D, H> {
    /// Hold mode, before publishing: the events of aggregates already held stay pending for the
    /// poller. If the holds can't be read, nothing is published (the batch is re-delivered): an
    /// event must not overtake a held one.
    pub(super) async fn leave_held_aggregates(
        &self,
        records: &[EventRecord],
        ready: &mut ReadyEvents<usize>,
        outcomes: &mut [Option<RecordOutcome>],
    ) {
        let mut keys: Vec<String> = ready
            .events()
            .iter()
            .map(|e| e.ordering_key.clone())
            .collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return;
        }
        let left: Vec<_> = match self.holds.held(&keys).await {
            Ok(held) if held.is_empty() => return,
            Ok(held) => ready.take_if(|e| held.contains(&e.ordering_key)),
            Err(err) => {
                tracing::warn!(error = %outbox_shared::error::describe(&err), "could not read the aggregate holds; the batch is re-delivered");
                for (_, event, index) in ready.take_if(|_| true) {
                    outcomes[index] = Some(RecordOutcome::NotSent {
                        event_id: event.event_id,
                    });
                }
                return;
            }
        };
        for (_, event, index) in left {
            tracing::info!(event_id = %event.event_id, sequence = ?records[index].change.sequence_number, "aggregate held: left to the poller");
            outcomes[index] = Some(RecordOutcome::Held {
                event_id: event.event_id,
            });
        }
    }

    /// Hold mode, after publishing: each aggregate with an event that failed (and the later ones
    /// held back behind it) is held, and those events are left to the poller. If the hold can't
    /// be written, they are failures as without the mode (the batch is re-delivered from them).
    pub(super) async fn hold_failed(
        &self,
        records: &[EventRecord],
        settled: Vec<Settled<usize>>,
        outcomes: &mut [Option<RecordOutcome>],
    ) -> Vec<Settled<usize>> {
        let mut partitions: HashMap<String, String> = HashMap::new();
        for result in &settled {
            if let Settled::Failed {
                ordering_key,
                source,
                ..
            }
            | Settled::HeldBack {
                ordering_key,
                source,
                ..
            } = result
            {
                let partition = string_attr(&records[*source].change.new_image, attr::GSI1PK)
                    .or_else(|| string_attr(&records[*source].change.old_image, attr::GSI1PK))
                    .unwrap_or_default();
                partitions
                    .entry(ordering_key.clone())
                    .or_insert_with(|| partition.to_owned());
            }
        }
        if partitions.is_empty() {
            return settled;
        }
        let holds = futures::future::join_all(partitions.iter().map(|(key, partition)| async move {
            let result = self.holds.hold(key, partition).await;
            if let Err(err) = &result {
                tracing::warn!(ordering_key = %key, error = %outbox_shared::error::describe(&err), "could not hold the aggregate; its events are re-delivered");
            }
            (key.clone(), result.is_ok())
        }))
        .await;
        let held: HashSet<String> = holds
            .into_iter()
            .filter_map(|(key, ok)| ok.then_some(key))
            .collect();
        m::aggregates_held(held.len() as u64);
        settled
            .into_iter()
            .filter_map(|result| match result {
                Settled::Failed {
                    ordering_key,
                    event_id,
                    source,
                    ..
                }
                | Settled::HeldBack {
                    ordering_key,
                    event_id,
                    source,
                    ..
                } if held.contains(&ordering_key) => {
                    outcomes[source] = Some(RecordOutcome::Held { event_id });
                    None
                }
                other => Some(other),
            })
            .collect()
    }
}
