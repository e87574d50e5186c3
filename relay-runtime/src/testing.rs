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
use crate::holds::{AggregateHolds, Hold, HoldCursor, HoldPage, LeftEvent, last_left};
use crate::publisher::{PublishOutcome, Publisher};
use crate::status_store::{MarkOutcome, StatusError, StatusStore};
use crate::target::ENTRY_TOO_LARGE;

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
        payload_ref: None,
        status: OutboxStatus::Pending,
        created_at: "2026-11-22T10:00:00.000Z".into(),
        gsi1pk: Some("OUTBOX#PENDING#1".into()),
        gsi1sk: Some(format!("EVENT#2026-11-22T10:00:00.000Z#{id}")),
        aggregate_type: Some("Order".into()),
        aggregate_id: Some(format!("o-{id}")),
        sequence: Some(1),
        ttl: None,
        trace_header: None,
        trace_parent: None,
        trace_state: None,
        origin_region: None,
    }
}

/// The envelope of event `id` of aggregate `aggregate` (`Order#{aggregate}`), as the relays build
/// it from a pending item.
///
/// # Panics
/// Never: the item is valid.
pub fn outbound(id: &str, aggregate: &str) -> OutboundEvent {
    let mut item = pending_item(id, r#"{"amount":1}"#);
    item.aggregate_id = Some(aggregate.to_owned());
    OutboundEvent::from_item(&item, &outbox_shared::envelope::Encoding::envelope())
        .expect("a valid item")
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

/// Records marks, and the gone items put back `DEAD_LETTERED`; fails every mark when built with
/// [`FakeStatusStore::failing`].
#[derive(Debug, Default)]
pub struct FakeStatusStore {
    fail: bool,
    marks: Mutex<Vec<(ItemKey, OutboxStatus)>>,
    recreated: Mutex<Vec<crate::recreate::Attributes>>,
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

    /// The items put back `DEAD_LETTERED` ([`StatusStore::recreate_dead_lettered`]), as the
    /// adapter would put them ([`crate::status_store::dead_lettered_image`]).
    pub fn recreated(&self) -> Vec<crate::recreate::Attributes> {
        self.recreated.lock().expect("not poisoned").clone()
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

    async fn recreate_dead_lettered(
        &self,
        key: &ItemKey,
        image: &crate::recreate::Attributes,
        reason: &str,
    ) -> Result<MarkOutcome, StatusError> {
        if self.fail {
            return Err(StatusError {
                key: key.clone(),
                status: OutboxStatus::DeadLettered,
                failure: Box::new(throttled_update()),
            });
        }
        let item = crate::status_store::dead_lettered_image(
            image,
            reason,
            chrono::Utc::now(),
            crate::TtlPolicy::default().dead_lettered,
        );
        self.recreated.lock().expect("not poisoned").push(item);
        Ok(MarkOutcome::Marked)
    }
}

/// The table key of the hold item of `ordering_key`, for a test that reads the item itself.
pub fn hold_item_key(
    ordering_key: &str,
) -> HashMap<String, aws_sdk_dynamodb::types::AttributeValue> {
    use outbox_shared::schema::{self, attr};
    HashMap::from([
        (
            attr::PK.to_owned(),
            aws_sdk_dynamodb::types::AttributeValue::S(schema::hold_pk(ordering_key)),
        ),
        (
            attr::SK.to_owned(),
            aws_sdk_dynamodb::types::AttributeValue::S(schema::HOLD_SK.to_owned()),
        ),
    ])
}

/// The event `id` of [`pending_item`]'s shape as left under a hold, in `partition`.
pub fn left_event(id: &str, partition: &str) -> LeftEvent {
    LeftEvent {
        key: ItemKey {
            pk: "USER#u".into(),
            sk: format!("OUTBOX#{id}"),
        },
        partition: partition.into(),
        sort_key: format!("EVENT#2026-11-22T10:00:00.000Z#{id}"),
    }
}

/// Keeps holds in memory, with the same conditions as the DynamoDB adapter; fails every write
/// when built with [`FakeHoldStore::failing`]. The stream relay's side is the
/// [`AggregateHolds`] port; the poller's side ([`crate::holds::HoldRelease`]) needs to know what
/// is pending, which a test's table knows: it implements that port with [`FakeHoldStore::page`],
/// [`FakeHoldStore::release`] and [`FakeHoldStore::extend`], and its own pending events.
#[derive(Debug, Default)]
pub struct FakeHoldStore {
    fail: bool,
    /// Held aggregates by ordering key.
    holds: Mutex<HashMap<String, FakeHold>>,
    /// Bumped by every hold created: each hold's `held_since`.
    sets: Mutex<u64>,
}

/// One hold as [`FakeHoldStore`] keeps it: what the adapter's item holds.
#[derive(Debug, Clone, Default)]
struct FakeHold {
    /// The `GSI1PK` of its last event left.
    partition: String,
    sort_key: String,
    last_left: Option<ItemKey>,
    left_count: u64,
    held_since: String,
    ttl: Option<i64>,
}

impl FakeHold {
    /// Records `left` as the adapter does: the hold follows the last of them if it sorts after
    /// the one it follows, and counts them all.
    fn record(&mut self, left: &[LeftEvent]) {
        if let Some(last) = last_left(left)
            && (self.last_left.is_none() || last.sort_key > self.sort_key)
        {
            self.partition.clone_from(&last.partition);
            self.sort_key.clone_from(&last.sort_key);
            self.last_left = Some(last.key.clone());
        }
        self.left_count += left.len() as u64;
    }
}

impl FakeHoldStore {
    /// A store whose every hold fails as throttled.
    pub fn failing() -> Self {
        Self {
            fail: true,
            ..Self::default()
        }
    }

    /// Held aggregates and the partition of their last event left.
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

    /// The last event left under the hold of `ordering_key`, and how many were left.
    pub fn left(&self, ordering_key: &str) -> Option<(ItemKey, u64)> {
        self.holds
            .lock()
            .expect("not poisoned")
            .get(ordering_key)
            .and_then(|h| Some((h.last_left.clone()?, h.left_count)))
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

    async fn leave(&self, ordering_key: &str, left: &[LeftEvent]) -> Result<bool, SdkFailure> {
        if self.fail {
            return Err(throttled_update());
        }
        let mut holds = self.holds.lock().expect("not poisoned");
        Ok(match holds.get_mut(ordering_key) {
            Some(hold) => {
                hold.record(left);
                true
            }
            None => false,
        })
    }

    async fn hold(&self, ordering_key: &str, left: &[LeftEvent]) -> Result<(), SdkFailure> {
        if self.fail {
            return Err(throttled_update());
        }
        let mut holds = self.holds.lock().expect("not poisoned");
        let hold = holds.entry(ordering_key.to_owned()).or_insert_with(|| {
            let mut sets = self.sets.lock().expect("not poisoned");
            *sets += 1;
            FakeHold {
                held_since: sets.to_string(),
                ..FakeHold::default()
            }
        });
        hold.record(left);
        Ok(())
    }
}

/// The poller's side, for a test's [`crate::holds::HoldRelease`].
impl FakeHoldStore {
    /// The holds whose last event is under `partition` and sorts below `before`, in order, up to
    /// `limit` after `start` (a cursor naming the last hold's `GSI1SK`).
    pub fn page(
        &self,
        partition: &str,
        before: &str,
        limit: i32,
        start: Option<HoldCursor>,
    ) -> HoldPage {
        let after = start
            .as_ref()
            .and_then(|c| c.get(outbox_shared::schema::attr::GSI1SK))
            .and_then(|v| v.as_s().ok())
            .cloned();
        let mut holds: Vec<Hold> = self
            .holds
            .lock()
            .expect("not poisoned")
            .iter()
            .filter(|(_, h)| h.partition == partition && h.sort_key.as_str() < before)
            .filter(|(_, h)| after.as_ref().is_none_or(|a| h.sort_key > *a))
            .map(|(ordering_key, h)| Hold {
                ordering_key: ordering_key.clone(),
                held_since: h.held_since.clone(),
                sort_key: h.sort_key.clone(),
                last_left: h.last_left.clone(),
                left_count: Some(h.left_count),
                ttl: h.ttl,
            })
            .collect();
        holds.sort_by(|a, b| a.sort_key.cmp(&b.sort_key));
        let limit = usize::try_from(limit).unwrap_or(1).max(1);
        let next = (holds.len() > limit).then(|| {
            holds.truncate(limit);
            HoldCursor::from([(
                outbox_shared::schema::attr::GSI1SK.to_owned(),
                aws_sdk_dynamodb::types::AttributeValue::S(holds[limit - 1].sort_key.clone()),
            )])
        });
        HoldPage { holds, next }
    }

    /// Deletes `hold` if it was not set again and nothing was left under it since it was read.
    pub fn release(&self, hold: &Hold) -> bool {
        let mut holds = self.holds.lock().expect("not poisoned");
        let unchanged = holds.get(&hold.ordering_key).is_some_and(|h| {
            h.held_since == hold.held_since && Some(h.left_count) == hold.left_count
        });
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

/// A region's adoption in memory: `None` (the region publishes its own) until
/// [`FakeAdoption::adopt`]; counts its reads; fails every read while [`FakeAdoption::fail`] is set.
#[derive(Debug, Default)]
pub struct FakeAdoption {
    adopter: Mutex<Option<outbox_shared::Region>>,
    failing: std::sync::atomic::AtomicBool,
    reads: std::sync::atomic::AtomicUsize,
}

impl FakeAdoption {
    /// `adopter` publishes the region's events from now on (`None`: handed back).
    pub fn adopt(&self, adopter: Option<&str>) {
        *self.adopter.lock().expect("not poisoned") =
            adopter.map(|a| outbox_shared::Region::new(a).expect("a region name"));
    }

    /// Every read fails (as throttled) while `failing`.
    pub fn fail(&self, failing: bool) {
        self.failing
            .store(failing, std::sync::atomic::Ordering::SeqCst);
    }

    /// Reads made so far.
    pub fn reads(&self) -> usize {
        self.reads.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl crate::adoption::RegionAdoption for FakeAdoption {
    async fn adopter_of(
        &self,
        region: &outbox_shared::Region,
    ) -> Result<Option<outbox_shared::Region>, crate::adoption::AdoptionError> {
        self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if self.failing.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(crate::adoption::AdoptionError::Call {
                key: outbox_shared::region::lease_item::adoption_key(region),
                failure: throttled_update(),
            });
        }
        Ok(self.adopter.lock().expect("not poisoned").clone())
    }
}
