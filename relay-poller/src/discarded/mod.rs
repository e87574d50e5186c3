//! Discarded stream batches: a batch the stream mapping gave up on (`StreamMaxRetryAttempts`,
//! `StreamMaxRecordAgeSeconds`) goes whole to the mapping's S3 on-failure destination
//! (`relay_runtime::discarded_batch`, AWS's invocation record), and this puts back what only that
//! object still holds.
//!
//! In a discarded batch, an outbox `INSERT`'s item is still pending in the index: the poller's
//! passes publish it, nothing is done here. A TTL deletion's `REMOVE` of a pending outbox item is
//! different: DynamoDB's TTL deleted the item, and the record's old image is the event's only copy.
//! Each is re-created from it ([`crate::recreate`], the path `redrive` re-creates gone items with):
//! pending again under its aggregate's shard, with its own `GSI1SK`, its `ttl` ahead, by a
//! conditional put that writes nothing where an item with its key is. So a batch read twice (two
//! pollers, a crash before the delete) re-creates nothing twice, and an event re-created before
//! and published since is not re-created. The passes then publish them, in their aggregates' order.
//!
//! Progress is the object itself: it is deleted once every event in it is handled (re-created, or
//! found there), and only then. A poller that stops half-way leaves it for the next sweep, which
//! re-creates nothing twice. An object that cannot be handled (not an invocation record, or a
//! deletion whose image lacks the keys of the index) stays, and is counted
//! (`DiscardedBatchesLeft`, an ERROR log naming it) for a person; a call that fails leaves it for
//! the next sweep. With the bucket versioned, a deleted object stays a noncurrent version until the
//! bucket's lifecycle expires it: what was recovered can still be read.
//!
//! The room: the port of the bucket ([`DiscardedBatchStore`]), its S3 adapter ([`s3`]), and the
//! component ([`DiscardedBatches`]) that `relay-poller run` sweeps on an interval and
//! `relay-poller recover-discarded` once.

use std::future::Future;
use std::time::Duration;

use aws_lambda_events::dynamodb::EventRecord;
use chrono::Utc;
use outbox_shared::schema::{attr, entity};
use outbox_shared::{OutboxStatus, SdkFailure, ShardCount};
use relay_runtime::discarded_batch::DiscardedBatch;
use relay_runtime::stream_record::{INSERT, is_ttl_deletion};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::recreate::{GoneItems, Recreated, pending_image};
use crate::table::Attributes;

pub mod s3;
#[cfg(test)]
mod tests;

pub use s3::S3DiscardedBatches;

/// Default of `--discarded-batch-interval`: how often `run` reads the bucket.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// Port: the objects of the on-failure destination.
pub trait DiscardedBatchStore: Send + Sync {
    /// The keys of the discarded batches in the bucket, in key order (per mapping and shard, by
    /// the time of the failure).
    fn list(&self) -> impl Future<Output = Result<Vec<String>, SdkFailure>> + Send;
    /// The body of the object at `key`; `None` when it is gone (another poller handled it).
    fn read(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>, SdkFailure>> + Send;
    /// Deletes the object at `key`: every event in it is handled.
    fn remove(&self, key: &str) -> impl Future<Output = Result<(), SdkFailure>> + Send;
}

/// A borrowed store is one (a test keeps its fake to inspect it).
impl<T: DiscardedBatchStore> DiscardedBatchStore for &T {
    fn list(&self) -> impl Future<Output = Result<Vec<String>, SdkFailure>> + Send {
        (**self).list()
    }
    fn read(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>, SdkFailure>> + Send {
        (**self).read(key)
    }
    fn remove(&self, key: &str) -> impl Future<Output = Result<(), SdkFailure>> + Send {
        (**self).remove(key)
    }
}

/// What one sweep of the bucket did (the one-off command's summary, the sweep's log fields).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Recovery {
    /// Objects read.
    pub batches: u64,
    /// Objects whose every event was handled, then deleted (with `--dry-run`: would be).
    pub recovered: u64,
    /// TTL deletions of pending events put back pending (with `--dry-run`: the TTL deletions of
    /// pending events found, each of which is put back only if its item is gone).
    pub recreated: u64,
    /// TTL deletions whose item was there: re-created before (a batch read twice), pending or
    /// published since; nothing written.
    pub already_there: u64,
    /// Outbox `INSERT`s: their items are pending in the index, and the passes publish them.
    pub left_to_index: u64,
    /// Objects left in the bucket for a person: not an invocation record, or a deletion that
    /// cannot be re-created. Each has an ERROR log naming it.
    pub left_in_bucket: u64,
    /// Objects left for the next sweep because a call failed.
    pub retry_later: u64,
    pub dry_run: bool,
}

impl Recovery {
    /// The summary for people.
    pub fn to_text(&self) -> String {
        format!(
            "{}{} discarded batches read: {} recovered ({} events re-created, {} already there, {} inserts left to the index), {} left in the bucket, {} left for a later run\n",
            if self.dry_run { "dry run: " } else { "" },
            self.batches,
            self.recovered,
            self.recreated,
            self.already_there,
            self.left_to_index,
            self.left_in_bucket,
            self.retry_later,
        )
    }

    fn add(&mut self, other: &Self) {
        self.batches += other.batches;
        self.recovered += other.recovered;
        self.recreated += other.recreated;
        self.already_there += other.already_there;
        self.left_to_index += other.left_to_index;
        self.left_in_bucket += other.left_in_bucket;
        self.retry_later += other.retry_later;
    }
}

/// What one record of a discarded batch is to the recovery.
#[derive(Debug, Clone, PartialEq)]
enum Found {
    /// A TTL deletion of a pending outbox event: the item to put back.
    Deleted(Box<Attributes>),
    /// A TTL deletion of a pending outbox event whose image lacks what the index keys need.
    Unrecoverable,
    /// An outbox `INSERT`: pending in the index.
    Inserted,
    /// Anything else (orders, marks, a user's delete, a deletion of a published event).
    Other,
}

/// The component: reads the bucket, puts back what only it holds, deletes what it handled.
#[derive(Debug)]
pub struct DiscardedBatches<B, G> {
    batches: B,
    items: G,
    shard_count: ShardCount,
    /// How far ahead a re-created item's `ttl` lies (the published retention).
    retention: Duration,
}

impl<B: DiscardedBatchStore, G: GoneItems> DiscardedBatches<B, G> {
    pub fn new(batches: B, items: G, shard_count: ShardCount, retention: Duration) -> Self {
        Self {
            batches,
            items,
            shard_count,
            retention,
        }
    }

    /// Sweeps the bucket every `interval` until `cancel` fires (`relay-poller run`); a sweep whose
    /// listing fails is tried again at the next.
    pub async fn run(&self, interval: Duration, cancel: &CancellationToken) {
        while !cancel.is_cancelled() {
            if let Err(err) = self.recover(false, cancel).await {
                tracing::warn!(
                    error = %err,
                    "could not list the discarded stream batches; trying again at the next sweep"
                );
            }
            tokio::select! {
                () = cancel.cancelled() => break,
                () = tokio::time::sleep(interval) => {}
            }
        }
    }

    /// One sweep: every object of the bucket, each handled whole, deleted once it is (not with
    /// `dry_run`, which writes and deletes nothing). Once `cancel` fires it starts no other object.
    ///
    /// # Errors
    /// When the bucket cannot be listed. A failure on one object leaves that object for the next
    /// sweep and goes on with the others.
    pub async fn recover(
        &self,
        dry_run: bool,
        cancel: &CancellationToken,
    ) -> Result<Recovery, SdkFailure> {
        let mut recovery = Recovery {
            dry_run,
            ..Recovery::default()
        };
        for key in self.batches.list().await? {
            if cancel.is_cancelled() {
                break;
            }
            recovery.add(&self.batch(&key, dry_run).await);
        }
        if !recovery.dry_run {
            crate::metrics::discarded(
                recovery.recovered,
                recovery.recreated,
                recovery.left_in_bucket,
            );
        }
        if recovery.batches > 0 {
            tracing::info!(
                batches = recovery.batches,
                recovered = recovery.recovered,
                recreated = recovery.recreated,
                already_there = recovery.already_there,
                left_to_index = recovery.left_to_index,
                left_in_bucket = recovery.left_in_bucket,
                retry_later = recovery.retry_later,
                dry_run,
                "discarded stream batches swept"
            );
        }
        Ok(recovery)
    }

    /// One object, whole: what it did.
    async fn batch(&self, key: &str, dry_run: bool) -> Recovery {
        let mut done = Recovery::default();
        let body = match self.batches.read(key).await {
            Ok(Some(body)) => body,
            // Another poller handled it since the listing.
            Ok(None) => return done,
            Err(err) => {
                tracing::warn!(key, error = %err, "could not read a discarded stream batch; trying again at the next sweep");
                done.retry_later = 1;
                return done;
            }
        };
        done.batches = 1;
        let batch = match DiscardedBatch::from_json(&body) {
            Ok(batch) => batch,
            Err(err) => {
                tracing::error!(key, error = %err, "left in the bucket: not the invocation record of a discarded stream batch");
                done.left_in_bucket = 1;
                return done;
            }
        };
        let info = &batch.batch_info;
        for record in batch.records() {
            match self.found(record) {
                Found::Other => {}
                Found::Inserted => done.left_to_index += 1,
                Found::Unrecoverable => {
                    tracing::error!(
                        key,
                        shard = %info.shard_id,
                        sequence_number = record.change.sequence_number.as_deref().unwrap_or("(none)"),
                        "left in the bucket: a TTL deletion of a pending event whose old image has no CreatedAt or EventId, so it cannot go back to the index"
                    );
                    done.left_in_bucket = 1;
                    return done;
                }
                Found::Deleted(_) if dry_run => done.recreated += 1,
                Found::Deleted(item) => {
                    let event_id = string(&item, attr::EVENT_ID).unwrap_or_default().to_owned();
                    match self.items.recreate(*item).await {
                        Ok(Recreated::Recreated) => {
                            tracing::info!(key, event_id = %event_id, "re-created a TTL-deleted pending event from its discarded stream record");
                            done.recreated += 1;
                        }
                        Ok(Recreated::AlreadyThere) => done.already_there += 1,
                        Err(err) => {
                            tracing::warn!(key, event_id = %event_id, error = %err, "could not re-create an event of a discarded stream batch; trying again at the next sweep");
                            done.retry_later = 1;
                            return done;
                        }
                    }
                }
            }
        }
        if !dry_run && let Err(err) = self.batches.remove(key).await {
            // Handled all the same: the next sweep re-creates nothing twice and deletes it.
            tracing::warn!(key, error = %err, "could not delete a handled discarded stream batch; the next sweep deletes it");
            done.retry_later = 1;
            return done;
        }
        tracing::info!(
            key,
            shard = %info.shard_id,
            start_sequence_number = %info.start_sequence_number,
            end_sequence_number = %info.end_sequence_number,
            condition = %batch.request_context.condition,
            recreated = done.recreated,
            already_there = done.already_there,
            left_to_index = done.left_to_index,
            dry_run,
            "discarded stream batch recovered"
        );
        done.recovered = 1;
        done
    }

    /// What `record` is to the recovery; a TTL deletion's item ready to put back.
    fn found(&self, record: &EventRecord) -> Found {
        let outbox = |image: &serde_dynamo::Item| matches!(image.get(attr::ENTITY_TYPE), Some(serde_dynamo::AttributeValue::S(t)) if t == entity::OUTBOX_EVENT);
        if record.event_name == INSERT {
            return if outbox(&record.change.new_image) {
                Found::Inserted
            } else {
                Found::Other
            };
        }
        let image = &record.change.old_image;
        let pending = matches!(image.get(attr::STATUS), Some(serde_dynamo::AttributeValue::S(s)) if s == OutboxStatus::Pending.as_str());
        if !is_ttl_deletion(record) || !outbox(image) || !pending {
            return Found::Other;
        }
        let item: Attributes = image.clone().into();
        match pending_image(item, self.shard_count, self.retention, Utc::now()) {
            Some(item) => Found::Deleted(Box::new(item)),
            None => Found::Unrecoverable,
        }
    }
}

fn string<'a>(item: &'a Attributes, name: &str) -> Option<&'a str> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
}
