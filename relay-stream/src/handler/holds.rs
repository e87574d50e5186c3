//! Hold mode (`HOLD_FAILED_AGGREGATES`): a failing aggregate does not block the stream shard.
//! Before publishing, the events of aggregates already held are left to the poller; after it,
//! each aggregate with an event that *failed* is held, and its events are left to the poller too.
//! An event that was only not sent (the deadline came first) takes no hold: it and the later
//! events of its aggregate are re-delivered, in order. The holds themselves are the
//! [`AggregateHolds`] port's; this component holds nothing else.
//!
//! On a global table the same holds serve a region another region adopted
//! (`HoldMode::leave_adopted`, whatever `HOLD_FAILED_AGGREGATES` says): its events are left to
//! the adopter's pollers under their aggregates' holds, which the pollers release once they have
//! published them.
//!
//! Only an event the poller can see is ever left to it ([`poller_can_see`]). A TTL deletion's
//! event exists only in its record: it is dead-lettered with the record instead (a redrive
//! re-creates the item in its place in its aggregate's order), and only while its aggregate is
//! held or behind a failure. An event another client wrote outside the index is published even
//! when its aggregate is held, and re-delivered (never held) when its publish fails.

use std::collections::{HashMap, HashSet};
use std::future::Future;

use aws_lambda_events::dynamodb::EventRecord;
use futures::StreamExt;
use relay_runtime::{AggregateHolds, Behind, Deadline, Event, LeftEvent, State};

use super::decode::{is_ttl_deletion, left_event, poller_can_see};
use crate::metrics as m;

/// Hold mode: the stream relay's side of the aggregate holds.
#[derive(Debug, Clone)]
pub(super) struct HoldMode<H> {
    holds: H,
    /// Hold writes in flight at once (an outage fails every aggregate of a batch at once).
    concurrency: usize,
}

impl<H: AggregateHolds> HoldMode<H> {
    pub(super) fn new(holds: H, concurrency: usize) -> Self {
        Self {
            holds,
            concurrency: concurrency.max(1),
        }
    }

    /// `write` for each of `each`, `concurrency` at a time: their answers.
    async fn bounded<T, A, F>(
        &self,
        each: impl IntoIterator<Item = A>,
        write: impl Fn(A) -> F,
    ) -> Vec<T>
    where
        F: Future<Output = T>,
    {
        futures::stream::iter(each)
            .map(write)
            .buffer_unordered(self.concurrency)
            .collect()
            .await
    }

    /// Holds each aggregate of `leaving` with its events recorded, `concurrency` writes at a
    /// time: the aggregates held (one whose write failed is logged, and its events are
    /// re-delivered by the caller).
    async fn hold_each(
        &self,
        leaving: HashMap<&str, Vec<LeftEvent>>,
        deadline: Deadline,
    ) -> HashSet<String> {
        self.bounded(leaving, |(aggregate, left)| async move {
            let result = deadline
                .finish("UpdateItem", self.holds.hold(aggregate, &left), |cut| cut)
                .await;
            if let Err(err) = &result {
                tracing::warn!(ordering_key = %aggregate, error = %outbox_shared::error::describe(err), "could not hold the aggregate; its events are re-delivered");
            }
            result.is_ok().then(|| aggregate.to_owned())
        })
        .await
        .into_iter()
        .flatten()
        .collect()
    }

    /// Before publishing: the ready events of aggregates already held stay pending for the
    /// poller, recorded on their hold; a TTL deletion's event of a held aggregate becomes poison
    /// (dead-lettered with its record). A hold released since it was read takes nothing: the
    /// events are published. If the holds can't be read or the record written, the events are not
    /// sent (the batch is re-delivered): an event must not overtake a held one.
    pub(super) async fn leave_held(&self, events: &mut [Event<&EventRecord>], deadline: Deadline) {
        let mut aggregates: Vec<String> = events
            .iter()
            .filter(|e| e.is_ready())
            .filter_map(|e| e.aggregate.clone())
            .collect();
        aggregates.sort_unstable();
        aggregates.dedup();
        if aggregates.is_empty() {
            return;
        }
        let held = match deadline
            .finish("BatchGetItem", self.holds.held(&aggregates), |cut| cut)
            .await
        {
            Ok(held) if held.is_empty() => return,
            Ok(held) => held,
            Err(err) => {
                tracing::warn!(error = %outbox_shared::error::describe(&err), "could not read the aggregate holds; the batch is re-delivered");
                events.iter_mut().for_each(Event::leave_unsent);
                return;
            }
        };
        // The events of held aggregates the poller can see, or that only the dead-letter queue
        // can keep (TTL deletions). An event outside the index stays: only this relay can
        // publish it.
        let leaving: Vec<usize> = (0..events.len())
            .filter(|&i| {
                let event = &events[i];
                event.is_ready()
                    && event.aggregate.as_ref().is_some_and(|a| held.contains(a))
                    && (poller_can_see(event.source) || is_ttl_deletion(event.source))
            })
            .collect();
        let recorded = self.record_left(events, &leaving, deadline).await;
        for index in leaving {
            let event = &mut events[index];
            match event.aggregate.as_ref().and_then(|a| recorded.get(a)) {
                Some(Recorded::Left) if is_ttl_deletion(event.source) => {
                    event.state = gone_from_the_table("its aggregate is held");
                }
                Some(Recorded::Left) => {
                    tracing::info!(event_id = %event.id(), sequence = ?event.source.change.sequence_number, "aggregate held: left to the poller");
                    event.state = State::LeftToHold;
                }
                // Released since it was read: the poller published everything left under it,
                // so the aggregate's events are this relay's again.
                Some(Recorded::Released) | None => {}
                Some(Recorded::Failed) => event.leave_unsent(),
            }
        }
    }

    /// Records on each held aggregate's hold the events among `leaving` the poller can see (the
    /// ones this relay leaves to it), one conditional write per aggregate, which also says
    /// whether the hold still exists: what each answered.
    async fn record_left(
        &self,
        events: &[Event<&EventRecord>],
        leaving: &[usize],
        deadline: Deadline,
    ) -> HashMap<String, Recorded> {
        let mut left: HashMap<&str, Vec<LeftEvent>> = HashMap::new();
        for &index in leaving {
            let event = &events[index];
            let Some(aggregate) = &event.aggregate else {
                continue;
            };
            let events_left = left.entry(aggregate.as_str()).or_default();
            events_left.extend(left_event(event));
        }
        self.bounded(left, |(aggregate, events_left)| async move {
            let result = deadline
                .finish("UpdateItem", self.holds.leave(aggregate, &events_left), |cut| cut)
                .await;
            let recorded = match result {
                Ok(true) => Recorded::Left,
                Ok(false) => Recorded::Released,
                Err(err) => {
                    tracing::warn!(ordering_key = aggregate, error = %outbox_shared::error::describe(&err), "could not record the events left under an aggregate hold; they are re-delivered");
                    Recorded::Failed
                }
            };
            (aggregate.to_owned(), recorded)
        })
        .await
        .into_iter()
        .collect()
    }

    /// While another region publishes this region's events (it adopted the region, `adopter`):
    /// every ready event its pollers can see is left to them, and its aggregate held with the
    /// events recorded on the hold, one write per aggregate. So the pollers publish them, and
    /// once the region is handed back the aggregate's later events wait for its own pollers to
    /// publish past them ([`Self::leave_held`]) instead of overtaking them. An aggregate whose
    /// hold can't be written has its events not sent (the batch is re-delivered from them). What
    /// the pollers can't see stays ready: an event outside the index is published (only this
    /// relay can), a TTL deletion's event is dead-lettered if its aggregate is held, or published.
    /// The events left.
    pub(super) async fn leave_adopted(
        &self,
        events: &mut [Event<&EventRecord>],
        adopter: &outbox_shared::Region,
        deadline: Deadline,
    ) -> usize {
        // The ready events the pollers can see, and per aggregate what each leaves them.
        let mut visible = Vec::new();
        let mut leaving: HashMap<&str, Vec<LeftEvent>> = HashMap::new();
        for (index, event) in events.iter().enumerate() {
            if !event.is_ready() {
                continue;
            }
            if let Some(left) = left_event(event) {
                visible.push(index);
                if let Some(aggregate) = &event.aggregate {
                    leaving.entry(aggregate.as_str()).or_default().push(left);
                }
            }
        }
        if visible.is_empty() {
            return 0;
        }
        let held = self.hold_each(leaving, deadline).await;
        let mut left = 0;
        for index in visible {
            let event = &mut events[index];
            // Never published while another region publishes it: held and left, or re-delivered.
            if event.aggregate.as_ref().is_some_and(|a| held.contains(a)) {
                tracing::debug!(event_id = %event.id(), %adopter, "region adopted: left to the adopter's pollers");
                event.state = State::LeftToHold;
                left += 1;
            } else {
                event.leave_unsent();
            }
        }
        left
    }

    /// After publishing, before settling: each aggregate whose event failed (and so the later
    /// ones held back behind it) is held, and those events are left to the poller. If the hold
    /// can't be written, they stay failed as without the mode (the batch is re-delivered from
    /// them). A TTL deletion's event among them becomes poison (dead-lettered with its record when
    /// the batch is settled), and an event outside the index is re-delivered: neither is left to
    /// a poller that can't see it. An aggregate whose events were only not sent is not held.
    pub(super) async fn hold_failed(&self, events: &mut [Event<&EventRecord>], deadline: Deadline) {
        for event in events.iter_mut() {
            if !is_ttl_deletion(event.source) {
                continue;
            }
            let why = match &event.state {
                State::Failed { code, .. } => format!("its publish failed ({code})"),
                State::HeldBack {
                    behind: Behind::Failure,
                } => "an earlier event of its aggregate failed".to_owned(),
                _ => continue,
            };
            event.state = gone_from_the_table(&why);
        }
        // Per aggregate behind a failure: every event left.
        let mut failing: HashMap<&str, Vec<LeftEvent>> = HashMap::new();
        for event in events.iter() {
            let Some(aggregate) = &event.aggregate else {
                continue;
            };
            if event.blocks() == Some(Behind::Failure)
                && let Some(left) = left_event(event)
            {
                failing.entry(aggregate.as_str()).or_default().push(left);
            }
        }
        if failing.is_empty() {
            return;
        }
        let held = self.hold_each(failing, deadline).await;
        m::aggregates_held(held.len() as u64);
        for event in events.iter_mut() {
            let is_held = event.aggregate.as_ref().is_some_and(|a| held.contains(a));
            if is_held && event.blocks() == Some(Behind::Failure) && poller_can_see(event.source) {
                event.state = State::LeftToHold;
            }
        }
    }
}

/// The TTL deletion of a pending event that could not be published now, for the dead-letter queue:
/// its record is the only place the event exists, so it can't be left to the poller.
fn gone_from_the_table(why: &str) -> State {
    State::Poison {
        reason: format!(
            "not published: {why}; DynamoDB's TTL deleted the pending item, so only this record \
             holds the event and the poller can't publish it (redrive re-creates the item)"
        ),
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
