//! The index, the table, the bus and the dead-letter queue in one, in memory: every port a pass
//! publishes through, the TTL refresh's, and the poller's side of the holds (kept in a
//! `relay_runtime::testing::FakeHoldStore`, pending as the table says).

use outbox_shared::schema::PendingPartition;
use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use outbox_shared::schema::attr;
use outbox_shared::{ItemKey, OutboundEvent, SdkFailure};
use relay_runtime::testing::FakeHoldStore;
use relay_runtime::{
    DeadLetter, DeadLetterError, DeadLetterSink, Deadline, Hold, HoldCursor, HoldPage, HoldRelease,
    MarkOutcome, PublishOutcome, Publisher, StatusError, StatusStore,
};

use crate::index::{
    Cursor, IndexCounts, IndexError, PendingCounts, PendingPage, PendingPages, RawItem,
    ShardBacklog,
};
use crate::poller::decode::string_attr;
use crate::poller::ttl::{PendingTtl, TtlOutcome};

/// The index and the table in one: partition (GSI1PK) -> GSI1SK -> item; marks remove from
/// the index.
#[derive(Debug, Default)]
pub(super) struct Table {
    pub(super) index: Mutex<BTreeMap<String, BTreeMap<String, RawItem>>>,
    /// `ttl` extensions by key.
    pub(super) extended: Mutex<Vec<ItemKey>>,
    pub(super) statuses: Mutex<HashMap<ItemKey, String>>,
    /// Events of these aggregates fail to publish.
    pub(super) failing_aggregates: Mutex<HashSet<String>>,
    /// Event ids EventBridge rejects as malformed.
    pub(super) rejected: Mutex<HashSet<String>>,
    /// Event ids the publisher does not send (its stalled limit, or a lease's poll deadline, came
    /// first).
    pub(super) not_sent: Mutex<HashSet<String>>,
    pub(super) published: Mutex<Vec<OutboundEvent>>,
    pub(super) dead_letters: Mutex<Vec<DeadLetter>>,
    /// Keys whose mark "another relay" wins: the item leaves the index without our mark.
    pub(super) stolen: Mutex<HashSet<ItemKey>>,
    /// Every mark fails: a status store that cannot mark (no PartiQL, no permission).
    pub(super) marks_fail: std::sync::atomic::AtomicBool,
    /// The index lags the table: a marked item stays in `index` (queries return it, a second
    /// mark finds it already marked) until [`Table::catch_up_index`].
    pub(super) lag_index: std::sync::atomic::AtomicBool,
    /// Marked items the lagging index still returns.
    pub(super) lagging: Mutex<HashSet<ItemKey>>,
    /// The aggregate holds the stream relay set.
    pub(super) holds: FakeHoldStore,
    /// Pages of holds read, per event partition.
    pub(super) hold_pages: Mutex<HashMap<String, u64>>,
    /// Pages of pending events read, per partition.
    pub(super) pages_read: Mutex<HashMap<String, u64>>,
    /// Last events of holds read from the table.
    pub(super) hold_reads: Mutex<Vec<ItemKey>>,
}

pub(super) fn key_of(raw: &RawItem) -> ItemKey {
    ItemKey {
        pk: string_attr(raw, attr::PK).unwrap(),
        sk: string_attr(raw, attr::SK).unwrap(),
    }
}

impl Table {
    pub(super) fn insert(&self, raw: RawItem) {
        let shard = string_attr(&raw, attr::GSI1PK).unwrap();
        let sk = string_attr(&raw, attr::GSI1SK).unwrap();
        self.statuses
            .lock()
            .unwrap()
            .insert(key_of(&raw), "PENDING".into());
        self.index
            .lock()
            .unwrap()
            .entry(shard)
            .or_default()
            .insert(sk, raw);
    }

    /// Items pending in the table (those the lagging index still returns not counted).
    pub(super) fn pending(&self) -> usize {
        let in_index: usize = self.index.lock().unwrap().values().map(BTreeMap::len).sum();
        in_index - self.lagging.lock().unwrap().len()
    }

    /// The ids of the events published, in the order they were.
    pub(super) fn published_ids(&self) -> Vec<String> {
        self.published
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.event_id.clone())
            .collect()
    }

    /// The lagging index catches up with the table: the marked items leave it.
    pub(super) fn catch_up_index(&self) {
        let lagging = std::mem::take(&mut *self.lagging.lock().unwrap());
        let mut index = self.index.lock().unwrap();
        for shard in index.values_mut() {
            shard.retain(|_, raw| !lagging.contains(&key_of(raw)));
        }
    }

    pub(super) fn status(&self, key: &ItemKey) -> String {
        self.statuses.lock().unwrap()[key].clone()
    }

    fn mark(&self, key: &ItemKey, status: &str) -> Result<MarkOutcome, StatusError> {
        if self.marks_fail.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(StatusError {
                key: key.clone(),
                status: outbox_shared::OutboxStatus::Published,
                failure: Box::new(relay_runtime::testing::throttled_update()),
            });
        }
        Ok(self.mark_pending(key, status))
    }

    fn mark_pending(&self, key: &ItemKey, status: &str) -> MarkOutcome {
        if self.stolen.lock().unwrap().remove(key) {
            self.remove(key);
            return MarkOutcome::AlreadyMarked;
        }
        if self.remove(key) {
            self.statuses
                .lock()
                .unwrap()
                .insert(key.clone(), status.into());
            MarkOutcome::Marked
        } else {
            MarkOutcome::AlreadyMarked
        }
    }

    /// Takes `key` out of the table's pending set (and out of the index, unless it lags):
    /// whether it was pending.
    fn remove(&self, key: &ItemKey) -> bool {
        let mut lagging = self.lagging.lock().unwrap();
        if lagging.contains(key) {
            return false;
        }
        let mut index = self.index.lock().unwrap();
        for shard in index.values_mut() {
            let found = shard
                .iter()
                .find(|(_, raw)| &key_of(raw) == key)
                .map(|(sk, _)| sk.clone());
            if let Some(sk) = found {
                if self.lag_index.load(std::sync::atomic::Ordering::Relaxed) {
                    lagging.insert(key.clone());
                } else {
                    shard.remove(&sk);
                }
                return true;
            }
        }
        false
    }
}

impl PendingPages for &Table {
    async fn query_page(
        &self,
        shard: &str,
        before: &str,
        limit: i32,
        start: Option<Cursor>,
    ) -> Result<PendingPage, IndexError> {
        *self
            .pages_read
            .lock()
            .unwrap()
            .entry(shard.to_owned())
            .or_default() += 1;
        let index = self.index.lock().unwrap();
        let after = start.map(|c| c[attr::GSI1SK].as_s().unwrap().clone());
        let mut items: Vec<RawItem> = index
            .get(shard)
            .into_iter()
            .flatten()
            .filter(|(sk, _)| sk.as_str() < before && after.as_ref().is_none_or(|a| *sk > a))
            .map(|(_, raw)| raw.clone())
            .collect();
        let more = items.len() > limit as usize;
        items.truncate(limit as usize);
        let next = more.then(|| {
            let last = items.last().unwrap();
            HashMap::from([(attr::GSI1SK.to_owned(), last[attr::GSI1SK].clone())])
        });
        Ok(PendingPage { items, next })
    }
}

impl PendingCounts for &Table {
    async fn backlog(&self, shard: &PendingPartition) -> Result<ShardBacklog, IndexError> {
        let index = self.index.lock().unwrap();
        let items = index.get(&shard.gsi1pk());
        Ok(ShardBacklog {
            region: shard.origin.as_ref().map(ToString::to_string),
            shard: shard.shard,
            pending: items.map_or(0, |items| items.len() as u64),
            oldest_created_at: items
                .and_then(|items| items.values().next())
                .and_then(|raw| string_attr(raw, attr::CREATED_AT)),
        })
    }

    async fn partitions(&self) -> Result<IndexCounts, IndexError> {
        let mut counts = IndexCounts {
            pending: self
                .index
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, items)| !items.is_empty())
                .map(|(partition, items)| (partition.clone(), items.len() as u64))
                .collect(),
            ..IndexCounts::default()
        };
        for partition in self.holds.holds().into_values() {
            *counts.holds.entry(partition).or_default() += 1;
        }
        Ok(counts)
    }
}

impl HoldRelease for &Table {
    async fn page(
        &self,
        partition: &str,
        before: &str,
        limit: i32,
        start: Option<HoldCursor>,
    ) -> Result<HoldPage, SdkFailure> {
        *self
            .hold_pages
            .lock()
            .unwrap()
            .entry(partition.to_owned())
            .or_default() += 1;
        Ok(self.holds.page(partition, before, limit, start))
    }

    async fn still_pending(&self, keys: &[ItemKey]) -> Result<HashSet<ItemKey>, SdkFailure> {
        self.hold_reads.lock().unwrap().extend(keys.iter().cloned());
        let statuses = self.statuses.lock().unwrap();
        Ok(keys
            .iter()
            .filter(|key| statuses.get(*key).is_some_and(|s| s == "PENDING"))
            .cloned()
            .collect())
    }

    async fn release(&self, hold: &Hold) -> Result<bool, SdkFailure> {
        Ok(self.holds.release(hold))
    }

    async fn extend(&self, hold: &Hold) -> Result<bool, SdkFailure> {
        Ok(self.holds.extend(hold))
    }
}

impl Publisher for Table {
    async fn publish<E: Borrow<OutboundEvent> + Sync>(
        &self,
        events: &[E],
        _deadline: Deadline,
    ) -> Vec<PublishOutcome> {
        let failing = self.failing_aggregates.lock().unwrap().clone();
        let rejected = self.rejected.lock().unwrap().clone();
        let not_sent = self.not_sent.lock().unwrap().clone();
        events
            .iter()
            .map(Borrow::borrow)
            .map(|e: &OutboundEvent| {
                if not_sent.contains(&e.event_id) {
                    PublishOutcome::NotSent
                } else if failing.contains(&e.ordering_key) {
                    PublishOutcome::Failed {
                        code: "ThrottlingException".into(),
                        message: "slow down".into(),
                    }
                } else if rejected.contains(&e.event_id) {
                    PublishOutcome::Rejected {
                        code: "MalformedDetail".into(),
                        message: "bad".into(),
                    }
                } else {
                    self.published.lock().unwrap().push(e.clone());
                    PublishOutcome::Published
                }
            })
            .collect()
    }
}

impl StatusStore for Table {
    async fn mark_published(&self, keys: &[ItemKey]) -> Vec<Result<MarkOutcome, StatusError>> {
        keys.iter().map(|key| self.mark(key, "PUBLISHED")).collect()
    }

    async fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        _reason: &str,
    ) -> Result<MarkOutcome, StatusError> {
        self.mark(key, "DEAD_LETTERED")
    }

    /// As the adapter's conditional put: the gone item comes back dead-lettered, unless an item
    /// has its key.
    async fn recreate_dead_lettered(
        &self,
        key: &ItemKey,
        _image: &relay_runtime::recreate::Attributes,
        _reason: &str,
    ) -> Result<MarkOutcome, StatusError> {
        let mut statuses = self.statuses.lock().unwrap();
        if statuses.contains_key(key) {
            return Ok(MarkOutcome::AlreadyMarked);
        }
        statuses.insert(key.clone(), "DEAD_LETTERED".into());
        Ok(MarkOutcome::Marked)
    }
}

impl PendingTtl for Table {
    async fn extend_ttl(&self, key: &ItemKey) -> Result<TtlOutcome, StatusError> {
        self.extended.lock().unwrap().push(key.clone());
        Ok(TtlOutcome::Extended)
    }
}

impl DeadLetterSink for Table {
    async fn send(&self, letter: &DeadLetter) -> Result<(), DeadLetterError> {
        self.dead_letters.lock().unwrap().push(letter.clone());
        Ok(())
    }
}
