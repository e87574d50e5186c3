//! In-memory ports for unit tests, property tests and benchmarks (feature `testing`): a publisher
//! that records what it was given and answers with scripted outcomes, a status store, a hold
//! store and a dead-letter sink that record their calls. Nothing here talks to AWS.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::Mutex;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_sqs::operation::send_message::SendMessageError;
use aws_smithy_types::body::SdkBody;
use outbox_shared::{ItemKey, OutboundEvent, OutboxItem, OutboxStatus, SdkFailure};

use crate::dead_letter::{DeadLetter, DeadLetterError, DeadLetterSink};
use crate::deadline::Deadline;
use crate::holds::{AggregateHolds, Hold};
use crate::publisher::{ENTRY_TOO_LARGE, PublishOutcome, Publisher};
use crate::status_store::{MarkOutcome, StatusError, StatusStore};

/// The `Source` a fake publisher sizes entries with.
pub const FAKE_SOURCE: &str = "test.orders";

/// A pending outbox item of aggregate `o-{id}` with event id `id` and `payload`, in shard 1.
pub fn pending_item(id: &str, payload: &str) -> OutboxItem {
    OutboxItem {
        pk: "USER#u".into(),
        sk: format!("OUTBOX#{id}"),
        entity_type: "OutboxEvent".into(),
        event_id: id.into(),
        event_type: "OrderCreated".into(),
        payload: payload.into(),
        status: OutboxStatus::Pending,
        created_at: "2026-11-22T10:00:00.000Z".into(),
        gsi1pk: Some("OUTBOX#PENDING#1".into()),
        gsi1sk: Some(format!("EVENT#2026-11-22T10:00:00.000Z#{id}")),
        aggregate_type: Some("Order".into()),
        aggregate_id: Some(format!("o-{id}")),
        sequence: Some(1),
        ttl: None,
        trace_header: None,
    }
}

/// A throttled `UpdateItem`, as DynamoDB answers it.
pub fn throttled_update() -> SdkFailure {
    let err = UpdateItemError::generic(
        ErrorMetadata::builder()
            .code("ProvisionedThroughputExceededException")
            .message("throughput exceeded")
            .build(),
    );
    let raw = HttpResponse::new(400.try_into().expect("valid status"), SdkBody::empty());
    SdkFailure::new("UpdateItem", SdkError::service_error(err, raw))
}

/// A `SendMessage` that timed out.
pub fn timed_out_send() -> SdkFailure {
    SdkFailure::new(
        "SendMessage",
        SdkError::<SendMessageError, HttpResponse>::timeout_error("queue unavailable"),
    )
}

/// Publishes nothing and answers `Published` for every event, unless scripted otherwise by
/// event id.
#[derive(Debug, Default)]
pub struct FakePublisher {
    script: HashMap<String, PublishOutcome>,
    max_entry_bytes: Option<usize>,
    published: Mutex<Vec<OutboundEvent>>,
    calls: Mutex<usize>,
}

impl FakePublisher {
    /// Answers `outcome` for the event with `event_id`.
    pub fn with_outcome(mut self, event_id: &str, outcome: PublishOutcome) -> Self {
        self.script.insert(event_id.to_owned(), outcome);
        self
    }

    /// Rejects events larger than `max` bytes as EventBridge would (`EntryTooLarge`).
    pub fn with_max_entry_bytes(mut self, max: usize) -> Self {
        self.max_entry_bytes = Some(max);
        self
    }

    /// Events answered `Published`, in the order they were given.
    pub fn published(&self) -> Vec<OutboundEvent> {
        self.published.lock().expect("not poisoned").clone()
    }

    /// `publish` calls made.
    pub fn calls(&self) -> usize {
        *self.calls.lock().expect("not poisoned")
    }
}

impl Publisher for FakePublisher {
    async fn publish<E: Borrow<OutboundEvent> + Sync>(
        &self,
        events: &[E],
        deadline: Deadline,
    ) -> Vec<PublishOutcome> {
        let events: Vec<&OutboundEvent> = events.iter().map(Borrow::borrow).collect();
        if deadline.publish_passed() {
            return vec![PublishOutcome::NotSent; events.len()];
        }
        *self.calls.lock().expect("not poisoned") += 1;
        let outcomes: Vec<PublishOutcome> = events
            .iter()
            .map(|e| {
                if let Some(outcome) = self.script.get(&e.event_id) {
                    return outcome.clone();
                }
                match self.max_entry_bytes {
                    Some(max) if e.entry_size(FAKE_SOURCE) > max => PublishOutcome::Rejected {
                        code: ENTRY_TOO_LARGE.to_owned(),
                        message: format!("entry is {} bytes", e.entry_size(FAKE_SOURCE)),
                    },
                    _ => PublishOutcome::Published,
                }
            })
            .collect();
        // The publisher's ordering contract: once an event is not published (rejected poison
        // aside), the later events of its aggregate are held back.
        let mut blocked = std::collections::HashSet::new();
        let outcomes: Vec<PublishOutcome> = events
            .iter()
            .zip(outcomes)
            .map(|(e, outcome)| {
                if blocked.contains(&e.ordering_key) {
                    return PublishOutcome::HeldBack;
                }
                if !matches!(
                    outcome,
                    PublishOutcome::Published | PublishOutcome::Rejected { .. }
                ) {
                    blocked.insert(e.ordering_key.clone());
                }
                outcome
            })
            .collect();
        let mut published = self.published.lock().expect("not poisoned");
        published.extend(
            events
                .iter()
                .zip(&outcomes)
                .filter(|(_, o)| o.is_published())
                .map(|(e, _)| (*e).clone()),
        );
        outcomes
    }
}

/// Records marks; fails every mark when built with [`FakeStatusStore::failing`].
#[derive(Debug, Default)]
pub struct FakeStatusStore {
    fail: bool,
    marks: Mutex<Vec<(ItemKey, OutboxStatus)>>,
}

impl FakeStatusStore {
    /// A store whose every update fails as throttled.
    pub fn failing() -> Self {
        Self {
            fail: true,
            ..Self::default()
        }
    }

    pub fn marks(&self) -> Vec<(ItemKey, OutboxStatus)> {
        self.marks.lock().expect("not poisoned").clone()
    }

    fn mark(&self, key: &ItemKey, status: OutboxStatus) -> Result<MarkOutcome, StatusError> {
        if self.fail {
            return Err(StatusError {
                key: key.clone(),
                status,
                failure: Box::new(throttled_update()),
            });
        }
        self.marks
            .lock()
            .expect("not poisoned")
            .push((key.clone(), status));
        Ok(MarkOutcome::Marked)
    }
}

impl StatusStore for FakeStatusStore {
    async fn mark_published(&self, keys: &[ItemKey]) -> Vec<Result<MarkOutcome, StatusError>> {
        keys.iter()
            .map(|key| self.mark(key, OutboxStatus::Published))
            .collect()
    }

    async fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        _reason: &str,
    ) -> Result<MarkOutcome, StatusError> {
        self.mark(key, OutboxStatus::DeadLettered)
    }
}

/// Keeps holds in memory, with the same conditions as the DynamoDB adapter; fails every write
/// when built with [`FakeHoldStore::failing`]. The stream relay's side is the
/// [`AggregateHolds`] port; the poller's side ([`crate::holds::HoldRelease`]) needs to know what
/// is pending, which a test's table knows: it implements that port with [`FakeHoldStore::list`],
/// [`FakeHoldStore::release`] and [`FakeHoldStore::extend`], and its own pending events.
#[derive(Debug, Default)]
pub struct FakeHoldStore {
    fail: bool,
    /// Held aggregates by ordering key.
    holds: Mutex<HashMap<String, FakeHold>>,
    /// Bumped by every hold set: each hold's `held_since`.
    sets: Mutex<u64>,
}

/// One hold as [`FakeHoldStore`] keeps it.
#[derive(Debug, Clone, Default)]
struct FakeHold {
    partition: String,
    held_since: String,
    left: Vec<ItemKey>,
    ttl: Option<i64>,
}

impl FakeHoldStore {
    /// A store whose every hold fails as throttled.
    pub fn failing() -> Self {
        Self {
            fail: true,
            ..Self::default()
        }
    }

    /// Held aggregates and the partition of their held event.
    pub fn holds(&self) -> HashMap<String, String> {
        self.holds
            .lock()
            .expect("not poisoned")
            .iter()
            .map(|(k, h)| (k.clone(), h.partition.clone()))
            .collect()
    }

    /// Sets the `ttl` (epoch seconds) of the hold of `ordering_key`, if it exists.
    pub fn set_ttl(&self, ordering_key: &str, ttl: i64) {
        if let Some(hold) = self
            .holds
            .lock()
            .expect("not poisoned")
            .get_mut(ordering_key)
        {
            hold.ttl = Some(ttl);
        }
    }

    /// The `ttl` of the hold of `ordering_key`.
    pub fn ttl(&self, ordering_key: &str) -> Option<i64> {
        self.holds
            .lock()
            .expect("not poisoned")
            .get(ordering_key)
            .and_then(|h| h.ttl)
    }

    /// The events recorded as left under the hold of `ordering_key`.
    pub fn left(&self, ordering_key: &str) -> Vec<ItemKey> {
        self.holds
            .lock()
            .expect("not poisoned")
            .get(ordering_key)
            .map(|h| h.left.clone())
            .unwrap_or_default()
    }
}

fn add_left(record: &mut Vec<ItemKey>, left: &[ItemKey]) {
    for key in left {
        if !record.contains(key) {
            record.push(key.clone());
        }
    }
}

impl AggregateHolds for FakeHoldStore {
    async fn held(
        &self,
        ordering_keys: &[String],
    ) -> Result<std::collections::HashSet<String>, SdkFailure> {
        let holds = self.holds.lock().expect("not poisoned");
        Ok(ordering_keys
            .iter()
            .filter(|k| holds.contains_key(*k))
            .cloned()
            .collect())
    }

    async fn leave(&self, ordering_key: &str, left: &[ItemKey]) -> Result<bool, SdkFailure> {
        if self.fail {
            return Err(throttled_update());
        }
        let mut holds = self.holds.lock().expect("not poisoned");
        Ok(match holds.get_mut(ordering_key) {
            Some(hold) => {
                add_left(&mut hold.left, left);
                true
            }
            None => false,
        })
    }

    async fn hold(
        &self,
        ordering_key: &str,
        partition: &str,
        left: &[ItemKey],
    ) -> Result<(), SdkFailure> {
        if self.fail {
            return Err(throttled_update());
        }
        let since = {
            let mut sets = self.sets.lock().expect("not poisoned");
            *sets += 1;
            sets.to_string()
        };
        let mut holds = self.holds.lock().expect("not poisoned");
        let hold = holds.entry(ordering_key.to_owned()).or_default();
        hold.partition = partition.to_owned();
        hold.held_since = since;
        add_left(&mut hold.left, left);
        Ok(())
    }
}

/// The poller's side, for a test's [`crate::holds::HoldRelease`].
impl FakeHoldStore {
    /// Every hold.
    pub fn list(&self) -> Vec<Hold> {
        self.holds
            .lock()
            .expect("not poisoned")
            .iter()
            .map(|(ordering_key, hold)| Hold {
                ordering_key: ordering_key.clone(),
                partition: hold.partition.clone(),
                held_since: hold.held_since.clone(),
                left: hold.left.clone(),
                ttl: hold.ttl,
            })
            .collect()
    }

    /// Deletes `hold` if it was not set again and nothing was left under it since it was read.
    pub fn release(&self, hold: &Hold) -> bool {
        let mut holds = self.holds.lock().expect("not poisoned");
        let unchanged = holds
            .get(&hold.ordering_key)
            .is_some_and(|h| h.held_since == hold.held_since && h.left.len() == hold.left.len());
        if unchanged {
            holds.remove(&hold.ordering_key);
        }
        unchanged
    }

    /// Pushes the `ttl` out a week from now, as the adapter's retention does, if the hold exists.
    pub fn extend(&self, hold: &Hold) -> bool {
        let week = chrono::Duration::days(7);
        match self
            .holds
            .lock()
            .expect("not poisoned")
            .get_mut(&hold.ordering_key)
        {
            Some(held) => {
                held.ttl = Some((chrono::Utc::now() + week).timestamp());
                true
            }
            None => false,
        }
    }
}

/// Records dead letters; refuses them when built with [`FakeDeadLetters::unavailable`].
#[derive(Debug, Default)]
pub struct FakeDeadLetters {
    unavailable: bool,
    letters: Mutex<Vec<DeadLetter>>,
}

impl FakeDeadLetters {
    pub fn unavailable() -> Self {
        Self {
            unavailable: true,
            ..Self::default()
        }
    }

    pub fn letters(&self) -> Vec<DeadLetter> {
        self.letters.lock().expect("not poisoned").clone()
    }
}

impl DeadLetterSink for FakeDeadLetters {
    async fn send(&self, letter: &DeadLetter) -> Result<(), DeadLetterError> {
        if self.unavailable {
            return Err(DeadLetterError::Send {
                event_id: letter.event_id.clone(),
                failure: timed_out_send(),
            });
        }
        self.letters
            .lock()
            .expect("not poisoned")
            .push(letter.clone());
        Ok(())
    }
}
