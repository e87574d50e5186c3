//! `relay-poller redrive`: puts dead-lettered events back to be published, then publishes them.
//!
//! For each selected event, the item goes back to `PENDING` in the pending index under its own
//! shard and `GSI1SK` (so it keeps its place in its aggregate's order), with the condition that it
//! is still `DEAD_LETTERED`; an item that is gone (expired) is re-created from the record the
//! dead-letter message carries, with the condition that it does not exist ([`crate::recreate`], the
//! path the poller re-creates TTL deletions of discarded stream batches with). A message is deleted
//! only after that succeeded, or when its item is already pending or published (it has nothing
//! left to do). A message that is not one of ours stays in the queue and is counted. Safe to run
//! again: a second run finds nothing to do.
//!
//! A letter whose record the relay kept in the payload bucket (too large for the queue) is read
//! with its record from there (`GetObject`, checked against the size and SHA-256 the letter
//! names), and restored as a letter carrying its record is. When the object cannot be read (gone
//! past the bucket's lifecycle, not the record named, or S3 failing), the letter is read as one
//! without its record.
//!
//! A letter the relay sent without its record is read with its item from the table, which holds
//! the record. If that item is gone too, nothing can re-create the event: the message stays in the
//! queue, as the event's only trace, with a line (and an ERROR log) saying why; it is never
//! deleted.
//!
//! With `--dry-run` nothing changes: received messages are made visible again at once.
//!
//! [`letters`] reads the relays' dead-letter messages back (the counterpart of the relays'
//! dead-letter sink, `relay_runtime::dead_letter`).

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use outbox_shared::claim_check::{self, ResolveError};
use outbox_shared::schema::{attr, entity};
use outbox_shared::{ItemKey, OutboxStatus, SdkFailure, ShardCount};
use relay_runtime::TtlPolicy;
use relay_runtime::status_store::{ttl_after, update_applied};

pub mod letters;
pub mod selection;
pub mod summary;

use self::letters::{Letter, OutboxLetter};
pub use self::selection::{Selection, Source};
pub use self::summary::{Line, Summary};
use crate::recreate::{DynamoGoneItems, GoneItems, Recreated, index_keys, pending_image};
use crate::table::{Attributes, get_item};

/// Why a letter whose item is gone stays in the queue, when the letter carries no image.
const UNRECOVERABLE_WITHOUT_IMAGE: &str = "the item is gone and the message carries no image";
/// Why a letter without its record stays in the queue when its item is gone.
const UNRECOVERABLE_WITHOUT_RECORD: &str = "the item is gone (expired or deleted) and the letter \
     came without its record (too large for the queue), so the event cannot be re-created; the \
     message is its only trace";

/// Messages received per `ReceiveMessage` call (SQS's maximum).
const RECEIVE_BATCH: i32 = 10;
/// How long received messages stay invisible to other readers while a redrive works on them.
const VISIBILITY_TIMEOUT_SECONDS: i32 = 300;

/// A redrive failed part-way (the summary so far is logged; running it again carries on).
#[derive(Debug, thiserror::Error)]
#[error("redrive stopped: {0}")]
pub struct RedriveError(#[source] pub SdkFailure);

/// One event to redrive: its item's key, what the message or the table says about it.
#[derive(Debug, Clone)]
struct Candidate {
    key: ItemKey,
    event_id: Option<String>,
    /// The item as the message (or the table) carries it, to re-create a gone item.
    item: Option<Attributes>,
    /// The message to delete once done (`None` from the table).
    receipt: Option<String>,
    /// Why the message's record cannot re-create a gone item, when it is a letter without its
    /// record (left out, or kept in the payload bucket and unreadable): only the item in the table
    /// holds it.
    record_unavailable: Option<String>,
}

impl Candidate {
    fn attribute(&self, name: &str) -> Option<&str> {
        self.item
            .as_ref()?
            .get(name)
            .and_then(|v| v.as_s().ok())
            .map(String::as_str)
    }

    fn line(&self, action: impl Into<String>) -> Line {
        Line {
            event_id: self
                .event_id
                .clone()
                .or_else(|| self.attribute(attr::EVENT_ID).map(str::to_owned)),
            event_type: self.attribute(attr::EVENT_TYPE).map(str::to_owned),
            created_at: self.attribute(attr::CREATED_AT).map(str::to_owned),
            action: action.into(),
        }
    }
}

/// The calls of [`Redrive`] itself (its publish is the poller's, and its re-create
/// [`crate::recreate`]'s, [`crate::permissions::operator`]): dead letters received, released and
/// deleted; items read and scanned (`--from-table`), an outbox item's attributes only
/// ([`crate::table`]), put back to pending (a status update).
pub const CALLS: &[relay_runtime::permissions::Call] = &[
    // The record of a letter that was too large for the queue, kept in the payload bucket.
    relay_runtime::permissions::Call::new(
        "s3:GetObject",
        relay_runtime::permissions::Target::DeadLetterRecords,
    ),
    relay_runtime::permissions::Call::new(
        "sqs:ReceiveMessage",
        relay_runtime::permissions::Target::DeadLetterQueue,
    ),
    relay_runtime::permissions::Call::new(
        "sqs:ChangeMessageVisibility",
        relay_runtime::permissions::Target::DeadLetterQueue,
    ),
    relay_runtime::permissions::Call::new(
        "sqs:DeleteMessage",
        relay_runtime::permissions::Target::DeadLetterQueue,
    ),
    relay_runtime::permissions::Call::new(
        "dynamodb:GetItem",
        relay_runtime::permissions::Target::OutboxAttributes,
    ),
    relay_runtime::permissions::Call::new(
        "dynamodb:Scan",
        relay_runtime::permissions::Target::OutboxAttributes,
    ),
    relay_runtime::permissions::Call::new(
        "dynamodb:UpdateItem",
        relay_runtime::permissions::Target::OutboxStatus,
    ),
];

/// The redrive, on the AWS clients.
#[derive(Debug, Clone)]
pub struct Redrive {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub sqs: aws_sdk_sqs::Client,
    /// Reads the records the relays kept in the payload bucket (the bucket a letter names).
    pub s3: aws_sdk_s3::Client,
    pub table_name: String,
    pub dead_letter_queue_url: String,
    pub shard_count: ShardCount,
    pub ttl: TtlPolicy,
}

/// What putting one item back did.
enum PutBack {
    Redriven,
    Recreated,
    /// Already pending or published, or not an outbox item: nothing to do.
    Skipped(String),
    /// Gone, and the message carries no item to re-create it from.
    Unrecoverable,
}

impl Redrive {
    /// Redrives the selected events from `source`; returns the keys put back (in `CreatedAt`
    /// order, for publishing) and the summary.
    ///
    /// # Errors
    /// [`RedriveError`] when a read or write fails; what was done so far stays done.
    pub async fn run(
        &self,
        source: Source,
        selection: &Selection,
        dry_run: bool,
    ) -> Result<(Vec<ItemKey>, Summary), RedriveError> {
        let mut summary = Summary {
            dry_run,
            ..Summary::default()
        };
        let (candidates, release) = match source {
            Source::Queue => self.read_queue(selection, &mut summary).await?,
            Source::Table => (self.read_table(selection).await?, Vec::new()),
        };
        let mut put_back = Vec::new();
        let mut handled = 0usize;
        for candidate in candidates {
            if selection.limit.is_some_and(|limit| handled >= limit) {
                if let Some(receipt) = &candidate.receipt {
                    self.release(receipt).await?;
                }
                continue;
            }
            handled += 1;
            let outcome = self.put_back(&candidate, dry_run).await?;
            let action = match outcome {
                PutBack::Redriven => {
                    summary.redriven += 1;
                    put_back.push(candidate.key.clone());
                    if dry_run { "would redrive" } else { "redriven" }.to_owned()
                }
                PutBack::Recreated => {
                    summary.redriven += 1;
                    summary.recreated += 1;
                    put_back.push(candidate.key.clone());
                    if dry_run {
                        "would re-create"
                    } else {
                        "re-created"
                    }
                    .to_owned()
                }
                PutBack::Skipped(why) => {
                    summary.skipped += 1;
                    format!("skipped: {why}")
                }
                PutBack::Unrecoverable => {
                    summary.left_in_queue += 1;
                    if let Some(receipt) = &candidate.receipt {
                        self.release(receipt).await?;
                    }
                    let why = candidate
                        .record_unavailable
                        .as_deref()
                        .unwrap_or(UNRECOVERABLE_WITHOUT_IMAGE);
                    let line = candidate.line(format!("left in queue: {why}"));
                    // The event can no longer be published: an operator decides. (No `PK` in
                    // logs: it may name a user.)
                    tracing::error!(
                        event_id = line.event_id.as_deref().unwrap_or("(no id)"),
                        sk = %candidate.key.sk,
                        why,
                        "dead letter left in the queue"
                    );
                    summary.lines.push(line);
                    continue;
                }
            };
            if let Some(receipt) = &candidate.receipt {
                if dry_run {
                    self.release(receipt).await?;
                } else {
                    self.delete(receipt).await?;
                }
            }
            summary.lines.push(candidate.line(action));
        }
        for receipt in release {
            self.release(&receipt).await?;
        }
        Ok((put_back, summary))
    }

    /// Every message of the queue: ours become candidates (in `CreatedAt` order); foreign ones and
    /// those the selection does not admit are returned for release.
    async fn read_queue(
        &self,
        selection: &Selection,
        summary: &mut Summary,
    ) -> Result<(Vec<Candidate>, Vec<String>), RedriveError> {
        let mut candidates = Vec::new();
        let mut release = Vec::new();
        loop {
            let received = self
                .sqs
                .receive_message()
                .queue_url(&self.dead_letter_queue_url)
                .max_number_of_messages(RECEIVE_BATCH)
                .visibility_timeout(VISIBILITY_TIMEOUT_SECONDS)
                .wait_time_seconds(1)
                .send()
                .await
                .map_err(|e| RedriveError(SdkFailure::new("ReceiveMessage", e)))?;
            let messages = received.messages.unwrap_or_default();
            if messages.is_empty() {
                break;
            }
            for message in messages {
                let Some(receipt) = message.receipt_handle else {
                    continue;
                };
                match letters::parse(message.body.as_deref().unwrap_or_default()) {
                    Letter::Foreign(why) => {
                        summary.left_in_queue += 1;
                        summary.lines.push(Line {
                            event_id: None,
                            event_type: None,
                            created_at: None,
                            action: format!(
                                "left in queue: message {}: {why}",
                                message.message_id.as_deref().unwrap_or("?")
                            ),
                        });
                        release.push(receipt);
                    }
                    Letter::Outbox(letter) => {
                        let candidate = self.candidate(*letter, receipt).await?;
                        if selection.admits(
                            candidate.event_id.as_deref(),
                            candidate.attribute(attr::EVENT_TYPE),
                            candidate.attribute(attr::CREATED_AT),
                        ) {
                            candidates.push(candidate);
                        } else {
                            release.push(candidate.receipt.expect("set above"));
                        }
                    }
                }
            }
        }
        candidates.sort_by(|a, b| {
            a.attribute(attr::CREATED_AT)
                .cmp(&b.attribute(attr::CREATED_AT))
                .then_with(|| a.key.sk.cmp(&b.key.sk))
        });
        Ok((candidates, release))
    }

    /// The candidate of one of the relays' letters: with the record it carries, or the one it
    /// names in the payload bucket; without either, with the item in the table, which holds it
    /// (its type and time too, for the selection and the order).
    ///
    /// # Errors
    /// [`RedriveError`] when the table cannot be read.
    async fn candidate(
        &self,
        letter: OutboxLetter,
        receipt: String,
    ) -> Result<Candidate, RedriveError> {
        let mut record_unavailable = letter
            .record_left_out
            .then(|| UNRECOVERABLE_WITHOUT_RECORD.to_owned());
        let mut item = letter.item;
        if let Some(reference) = &letter.record_ref {
            match self
                .read_record(
                    &letter.origin,
                    letter.event_id.as_deref(),
                    &letter.key,
                    reference,
                )
                .await
            {
                Ok(record) => item = Some(record),
                Err(why) => {
                    tracing::warn!(
                        event_id = letter.event_id.as_deref().unwrap_or("(no id)"),
                        sk = %letter.key.sk,
                        uri = %reference.uri,
                        error = %why,
                        "the dead letter's record cannot be read from the payload bucket; the item in the table is used"
                    );
                    record_unavailable = Some(format!(
                        "the item is gone (expired or deleted) and the letter's record, kept \
                         in the payload bucket, cannot be read: {why}; the message is the \
                         event's only trace"
                    ));
                }
            }
        }
        if item.is_none() && record_unavailable.is_some() {
            item = get_item(&self.dynamodb, &self.table_name, &letter.key)
                .await
                .map_err(RedriveError)?;
        }
        Ok(Candidate {
            key: letter.key,
            event_id: letter.event_id,
            item,
            receipt: Some(receipt),
            record_unavailable,
        })
    }

    /// The item in the record a letter names in the payload bucket, read with
    /// [`claim_check::get`] (checked against its size and SHA-256).
    ///
    /// # Errors
    /// Why it cannot be read, for the operator: the object gone, not the record named, S3 failing,
    /// or no item in it.
    async fn read_record(
        &self,
        origin: &str,
        event_id: Option<&str>,
        key: &ItemKey,
        reference: &claim_check::PayloadRef,
    ) -> Result<Attributes, String> {
        let about = event_id.unwrap_or(&key.sk);
        let bytes = claim_check::get(&self.s3, about, reference).await.map_err(
            |err| match err {
                ResolveError::Gone { uri, .. } => format!(
                    "its object {uri} is gone (expired under the payload bucket's lifecycle rule \
                     for {}, or deleted)",
                    relay_runtime::dead_letter::RECORD_PREFIX
                ),
                ResolveError::Mismatch {
                    uri,
                    size,
                    sha256,
                    found_size,
                    found_sha256,
                    ..
                } => format!(
                    "its object {uri} is {found_size} bytes with SHA-256 {found_sha256}, not the \
                     {size} bytes with SHA-256 {sha256} the letter names"
                ),
                ResolveError::Reference(err) => err.to_string(),
                ResolveError::Read { uri, source, .. } => format!(
                    "reading its object {uri} failed ({}){}",
                    outbox_shared::error::describe(&source),
                    if source.is_retryable() {
                        "; running redrive again may read it"
                    } else {
                        ""
                    }
                ),
            },
        )?;
        let record: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("the record at {} is not JSON: {e}", reference.uri))?;
        letters::record_item(origin, &record)
            .ok_or_else(|| format!("the record at {} holds no item", reference.uri))
    }

    /// `DEAD_LETTERED` outbox items of the table (a paginated `Scan`), in `CreatedAt` order.
    async fn read_table(&self, selection: &Selection) -> Result<Vec<Candidate>, RedriveError> {
        let mut candidates = Vec::new();
        let projection = crate::table::outbox_projection();
        let mut start = None;
        loop {
            let mut scan = self
                .dynamodb
                .scan()
                .table_name(&self.table_name)
                .projection_expression(&projection.expression)
                .filter_expression("#status = :dead AND #entity = :outbox")
                .expression_attribute_names("#status", attr::STATUS)
                .expression_attribute_names("#entity", attr::ENTITY_TYPE)
                .expression_attribute_values(
                    ":dead",
                    AttributeValue::S(OutboxStatus::DeadLettered.as_str().to_owned()),
                )
                .expression_attribute_values(
                    ":outbox",
                    AttributeValue::S(entity::OUTBOX_EVENT.to_owned()),
                )
                .set_exclusive_start_key(start);
            for (placeholder, name) in &projection.names {
                scan = scan.expression_attribute_names(placeholder, name);
            }
            let page = scan
                .send()
                .await
                .map_err(|e| RedriveError(SdkFailure::new("Scan", e)))?;
            for item in page.items.unwrap_or_default() {
                let string = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
                let (Some(pk), Some(sk)) = (string(attr::PK), string(attr::SK)) else {
                    continue;
                };
                let candidate = Candidate {
                    key: ItemKey { pk, sk },
                    event_id: string(attr::EVENT_ID),
                    item: Some(item),
                    receipt: None,
                    record_unavailable: None,
                };
                if selection.admits(
                    candidate.event_id.as_deref(),
                    candidate.attribute(attr::EVENT_TYPE),
                    candidate.attribute(attr::CREATED_AT),
                ) {
                    candidates.push(candidate);
                }
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                break;
            }
        }
        candidates.sort_by(|a, b| {
            a.attribute(attr::CREATED_AT)
                .cmp(&b.attribute(attr::CREATED_AT))
        });
        Ok(candidates)
    }

    /// Puts the candidate's item back to pending (or says what would happen, on a dry run).
    async fn put_back(
        &self,
        candidate: &Candidate,
        dry_run: bool,
    ) -> Result<PutBack, RedriveError> {
        let current = get_item(&self.dynamodb, &self.table_name, &candidate.key)
            .await
            .map_err(RedriveError)?;
        match current {
            Some(item) => {
                let status = item
                    .get(attr::STATUS)
                    .and_then(|v| v.as_s().ok())
                    .map(String::as_str);
                if status != Some(OutboxStatus::DeadLettered.as_str()) {
                    return Ok(PutBack::Skipped(format!(
                        "the item is {}",
                        status.unwrap_or("without a status")
                    )));
                }
                let Some((partition, sort_key)) = index_keys(&item, self.shard_count) else {
                    return Ok(PutBack::Skipped(
                        "the item has no CreatedAt or EventId".to_owned(),
                    ));
                };
                if dry_run {
                    return Ok(PutBack::Redriven);
                }
                self.reopen(&candidate.key, partition, sort_key).await
            }
            None => {
                let Some(item) = candidate.item.clone().and_then(|item| {
                    pending_image(item, self.shard_count, self.ttl.published, Utc::now())
                }) else {
                    return Ok(PutBack::Unrecoverable);
                };
                if dry_run {
                    return Ok(PutBack::Recreated);
                }
                let gone_items = DynamoGoneItems::new(self.dynamodb.clone(), &self.table_name);
                match gone_items.recreate(item).await.map_err(RedriveError)? {
                    Recreated::Recreated => Ok(PutBack::Recreated),
                    Recreated::AlreadyThere => Ok(PutBack::Skipped(
                        "the item was re-created meanwhile".to_owned(),
                    )),
                }
            }
        }
    }

    async fn reopen(
        &self,
        key: &ItemKey,
        partition: String,
        sort_key: String,
    ) -> Result<PutBack, RedriveError> {
        let result = self
            .dynamodb
            .update_item()
            .table_name(&self.table_name)
            .key(attr::PK, AttributeValue::S(key.pk.clone()))
            .key(attr::SK, AttributeValue::S(key.sk.clone()))
            .condition_expression("#status = :dead")
            .update_expression(
                "SET #status = :pending, #gsi1pk = :pk, #gsi1sk = :sk, #ttl = :ttl REMOVE #at, #reason",
            )
            .expression_attribute_names("#status", attr::STATUS)
            .expression_attribute_names("#gsi1pk", attr::GSI1PK)
            .expression_attribute_names("#gsi1sk", attr::GSI1SK)
            .expression_attribute_names("#ttl", attr::TTL)
            .expression_attribute_names("#at", attr::DEAD_LETTERED_AT)
            .expression_attribute_names("#reason", attr::DEAD_LETTER_REASON)
            .expression_attribute_values(":dead", AttributeValue::S(OutboxStatus::DeadLettered.as_str().to_owned()))
            .expression_attribute_values(":pending", AttributeValue::S(OutboxStatus::Pending.as_str().to_owned()))
            .expression_attribute_values(":pk", AttributeValue::S(partition))
            .expression_attribute_values(":sk", AttributeValue::S(sort_key))
            .expression_attribute_values(
                ":ttl",
                AttributeValue::N(ttl_after(Utc::now(), self.ttl.published).to_string()),
            )
            .send()
            .await;
        match update_applied(result) {
            Ok(true) => Ok(PutBack::Redriven),
            Ok(false) => Ok(PutBack::Skipped("the item changed meanwhile".to_owned())),
            Err(failure) => Err(RedriveError(failure)),
        }
    }

    /// The items at `keys` that are pending now (consistent reads), in the given order.
    ///
    /// # Errors
    /// [`RedriveError`] when a read fails.
    pub async fn pending_items(&self, keys: &[ItemKey]) -> Result<Vec<Attributes>, RedriveError> {
        let mut items = Vec::with_capacity(keys.len());
        for key in keys {
            let item = get_item(&self.dynamodb, &self.table_name, key)
                .await
                .map_err(RedriveError)?;
            if let Some(item) = item.filter(|i| i.contains_key(attr::GSI1PK)) {
                items.push(item);
            }
        }
        Ok(items)
    }

    async fn delete(&self, receipt: &str) -> Result<(), RedriveError> {
        self.sqs
            .delete_message()
            .queue_url(&self.dead_letter_queue_url)
            .receipt_handle(receipt)
            .send()
            .await
            .map_err(|e| RedriveError(SdkFailure::new("DeleteMessage", e)))?;
        Ok(())
    }

    /// Makes a received message visible again at once: it stays in the queue as it was.
    async fn release(&self, receipt: &str) -> Result<(), RedriveError> {
        self.sqs
            .change_message_visibility()
            .queue_url(&self.dead_letter_queue_url)
            .receipt_handle(receipt)
            .visibility_timeout(0)
            .send()
            .await
            .map_err(|e| RedriveError(SdkFailure::new("ChangeMessageVisibility", e)))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;
