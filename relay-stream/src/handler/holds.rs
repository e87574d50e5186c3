//! Hold mode (`HOLD_FAILED_AGGREGATES`): a failing aggregate does not block the stream shard.
//! Before publishing, the events of aggregates already held are left to the poller; after it,
//! each aggregate with an event that failed is held, and its events are left to the poller too.
//! The holds themselves are the [`relay_runtime::holds`] port's.
//!
//! Only an event the poller can see is ever left to it ([`poller_can_see`]). A TTL deletion's
//! event exists only in its record: it is dead-lettered with the record instead (a redrive
//! re-creates the item in its place in its aggregate's order). An event another client wrote
//! outside the index is published even when its aggregate is held, and re-delivered (never held)
//! when its publish fails.

use std::collections::{HashMap, HashSet};

use aws_lambda_events::dynamodb::EventRecord;
use outbox_shared::schema::attr;
use relay_runtime::relay::{cut_by_deadline, within};
use relay_runtime::{
    DeadLetterSink, HoldStore, Poison, Publisher, ReadyEvents, Settled, StatusStore,
};
use tokio::time::Instant;

use super::StreamRelay;
use super::decode::{dead_letter_record, is_ttl_deletion, poller_can_see, string_attr};
use super::report::RecordOutcome;
use crate::metrics as m;

impl<P: Publisher, S: StatusStore, D: DeadLetterSink, H: HoldStore> StreamRelay<P, S, D, H> {
    /// Hold mode, before publishing: the events of aggregates already held stay pending for the
    /// poller, and a TTL deletion's event of a held aggregate joins `poison` (dead-lettered with
    /// its record). If the holds can't be read, nothing is published (the batch is re-delivered):
    /// an event must not overtake a held one.
    pub(super) async fn leave_held_aggregates(
        &self,
        records: &[EventRecord],
        ready: &mut ReadyEvents<usize>,
        poison: &mut Vec<Poison<usize>>,
        outcomes: &mut [Option<RecordOutcome>],
        finish_by: Option<Instant>,
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
        let held = within(finish_by, self.holds.held(&keys))
            .await
            .unwrap_or_else(|| Err(cut_by_deadline("BatchGetItem")));
        let candidates: Vec<_> = match held {
            Ok(held) if held.is_empty() => return,
            // An event outside the index stays: only this relay can publish it
            Ok(held) => ready.take_if(|e, &index| {
                held.contains(&e.ordering_key)
                    && (poller_can_see(&records[index]) || is_ttl_deletion(&records[index]))
            }),
            Err(err) => {
                tracing::warn!(error = %outbox_shared::error::describe(&err), "could not read the aggregate holds; the batch is re-delivered");
                for (_, event, index) in ready.take_if(|_, _| true) {
                    outcomes[index] = Some(RecordOutcome::NotSent {
                        event_id: event.event_id,
                    });
                }
                return;
            }
        };
        let recorded = self.record_left(records, &candidates, finish_by).await;
        let mut released = Vec::new();
        for (key, event, index) in candidates {
            match recorded.get(&event.ordering_key) {
                Some(Recorded::Left) => {}
                // Released since it was read: the poller published everything left under it,
                // so the aggregate's events are this relay's again.
                Some(Recorded::Released) | None => {
                    released.push((key, event, index));
                    continue;
                }
                Some(Recorded::Failed) => {
                    outcomes[index] = Some(RecordOutcome::NotSent {
                        event_id: event.event_id,
                    });
                    continue;
                }
            }
            if is_ttl_deletion(&records[index]) {
                poison.push(gone_from_the_table(
                    key,
                    event.event_id,
                    "its aggregate is held",
                    index,
                ));
                continue;
            }
            tracing::info!(event_id = %event.event_id, sequence = ?records[index].change.sequence_number, "aggregate held: left to the poller");
            outcomes[index] = Some(RecordOutcome::Held {
                event_id: event.event_id,
            });
        }
        if !released.is_empty() {
            // Back in the batch's order, which the publisher keeps per aggregate.
            let mut back = ready.take_if(|_, _| true);
            back.extend(released);
            back.sort_by_key(|&(_, _, index)| index);
            for (key, event, index) in back {
                ready.push(key, event, index);
            }
        }
    }

    /// Records on each held aggregate's hold the events among `candidates` the poller can see
    /// (the ones this relay leaves to it), one conditional write per aggregate: what each
    /// answered. A hold released since it was read takes nothing.
    async fn record_left(
        &self,
        records: &[EventRecord],
        candidates: &[(outbox_shared::ItemKey, outbox_shared::OutboundEvent, usize)],
        finish_by: Option<Instant>,
    ) -> HashMap<String, Recorded> {
        let mut left: HashMap<&str, Vec<outbox_shared::ItemKey>> = HashMap::new();
        for (key, event, index) in candidates {
            let keys = left.entry(event.ordering_key.as_str()).or_default();
            if poller_can_see(&records[*index]) {
                keys.push(key.clone());
            }
        }
        futures::future::join_all(left.into_iter().map(|(ordering_key, keys)| async move {
            let result = within(finish_by, self.holds.leave(ordering_key, &keys))
                .await
                .unwrap_or_else(|| Err(cut_by_deadline("UpdateItem")));
            let recorded = match result {
                Ok(true) => Recorded::Left,
                Ok(false) => Recorded::Released,
                Err(err) => {
                    tracing::warn!(ordering_key, error = %outbox_shared::error::describe(&err), "could not record the events left under an aggregate hold; they are re-delivered");
                    Recorded::Failed
                }
            };
            (ordering_key.to_owned(), recorded)
        }))
        .await
        .into_iter()
        .collect()
    }

    /// Hold mode, after publishing: each aggregate with an event that failed (and the later ones
    /// held back behind it) is held, and those events are left to the poller. If the hold can't
    /// be written, they are failures as without the mode (the batch is re-delivered from them).
    /// A TTL deletion's event among them is dead-lettered with its record instead, and an event
    /// outside the index is re-delivered: neither is left to a poller that can't see it.
    pub(super) async fn hold_failed(
        &self,
        records: &[EventRecord],
        settled: Vec<Settled<usize>>,
        outcomes: &mut [Option<RecordOutcome>],
        finish_by: Option<Instant>,
    ) -> Vec<Settled<usize>> {
        let (settled, gone) = self
            .dead_letter_ttl_deletions(records, settled, finish_by)
            .await;
        // Per aggregate: the partition of its first event left, and every event left.
        let mut partitions: HashMap<String, (String, Vec<outbox_shared::ItemKey>)> = HashMap::new();
        for result in &settled {
            if let Settled::Failed {
                ordering_key,
                key,
                source,
                ..
            }
            | Settled::HeldBack {
                ordering_key,
                key,
                source,
                ..
            } = result
                && poller_can_see(&records[*source])
            {
                let partition = string_attr(&records[*source].change.new_image, attr::GSI1PK)
                    .or_else(|| string_attr(&records[*source].change.old_image, attr::GSI1PK))
                    .unwrap_or_default();
                partitions
                    .entry(ordering_key.clone())
                    .or_insert_with(|| (partition.to_owned(), Vec::new()))
                    .1
                    .push(key.clone());
            }
        }
        if partitions.is_empty() {
            return settled.into_iter().chain(gone).collect();
        }
        let holds = futures::future::join_all(partitions.iter().map(|(key, (partition, left))| async move {
            let result = within(finish_by, self.holds.hold(key, partition, left))
                .await
                .unwrap_or_else(|| Err(cut_by_deadline("UpdateItem")));
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
                } if held.contains(&ordering_key) && poller_can_see(&records[source]) => {
                    outcomes[source] = Some(RecordOutcome::Held { event_id });
                    None
                }
                other => Some(other),
            })
            .chain(gone)
            .collect()
    }

    /// Dead-letters, with their records, the TTL deletions' events among `settled` that were not
    /// published (failed, or held back behind their aggregate's failure): the rest, and what the
    /// dead-lettering settled.
    async fn dead_letter_ttl_deletions(
        &self,
        records: &[EventRecord],
        settled: Vec<Settled<usize>>,
        finish_by: Option<Instant>,
    ) -> (Vec<Settled<usize>>, Vec<Settled<usize>>) {
        let mut rest = Vec::with_capacity(settled.len());
        let mut poison = Vec::new();
        for result in settled {
            match result {
                Settled::Failed {
                    key,
                    event_id,
                    source,
                    code,
                    ..
                } if is_ttl_deletion(&records[source]) => {
                    let why = format!("its publish failed ({code})");
                    poison.push(gone_from_the_table(key, event_id, &why, source));
                }
                Settled::HeldBack {
                    key,
                    event_id,
                    source,
                    ..
                } if is_ttl_deletion(&records[source]) => poison.push(gone_from_the_table(
                    key,
                    event_id,
                    "an earlier event of its aggregate failed",
                    source,
                )),
                other => rest.push(other),
            }
        }
        if poison.is_empty() {
            return (rest, Vec::new());
        }
        let gone = self
            .relay
            .settle_until(
                ReadyEvents::default(),
                Vec::new(),
                poison,
                |&index| dead_letter_record(&records[index]),
                finish_by,
            )
            .await;
        (rest, gone)
    }
}

/// The TTL deletion of a pending event that could not be published now, for the dead-letter queue:
/// its record is the only place the event exists, so it can't be left to the poller.
fn gone_from_the_table(
    key: outbox_shared::ItemKey,
    event_id: String,
    why: &str,
    source: usize,
) -> Poison<usize> {
    Poison {
        key: Some(key),
        event_id: Some(event_id),
        reason: format!(
            "not published: {why}; DynamoDB's TTL deleted the pending item, so only this record \
             holds the event and the poller can't publish it (redrive re-creates the item)"
        ),
        source,
    }
}

/// What recording the events left under a hold answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recorded {
    /// Recorded: the events are the poller's.
    Left,
    /// The hold was released since it was read: the events are this relay's to publish.
    Released,
    /// The write failed: the events are re-delivered.
    Failed,
}
