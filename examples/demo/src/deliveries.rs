//! What reached the far end: the events the target delivered to the sink queue (a bus's event
//! carries the envelope as its `detail`, an SNS or SQS message as its body), or a Kinesis
//! stream's records (read back with `GetRecords`), consumed as they arrive by the demo's
//! consumer ([`crate::consumer`]) as a Lambda's event source hands them to it, and, from the
//! outbox items, when each event was published. An event whose payload is in S3 (`dataref`, the claim check)
//! is kept as received, for its payload to be read back ([`crate::payloads`]).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_kinesis::types::ShardIteratorType;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, MessageSystemAttributeName, QueueAttributeName,
};
use outbox_consumer::batch::aws_lambda_events::kinesis::KinesisEvent;
use outbox_consumer::batch::aws_lambda_events::sqs::SqsEvent;
use outbox_shared::envelope::EventMetadata;
use outbox_shared::schema::{attr, entity};
use serde::Deserialize;
use tokio::sync::watch;

use crate::consumer::{Consumer, Resume, kinesis_record, sqs_message};
use crate::env::Env;

/// One delivery on the sink queue: the event id, its aggregate and place in it (the envelope's
/// `aggregateId` and `sequence`, the aggregate's version the writer recorded), the
/// write-to-delivery latency, and the event itself when its payload is in S3.
pub(crate) struct Delivery {
    pub(crate) event_id: String,
    pub(crate) aggregate_id: Option<String>,
    pub(crate) sequence: Option<u64>,
    pub(crate) latency_ms: Option<u64>,
    /// When it arrived (milliseconds since the epoch): the queue's `SentTimestamp`, the record's
    /// arrival timestamp.
    pub(crate) arrived_ms: Option<i64>,
    /// The event (the envelope) as received when it carries its payload's reference (`dataref`)
    /// in place of `data`: what `outbox_consumer::PayloadResolver` reads the payload from.
    pub(crate) stored: Option<serde_json::Value>,
}

impl Delivery {
    /// The delivery of `event`, an envelope as the relays publish it, which arrived at
    /// `arrived_ms` (milliseconds since the epoch).
    ///
    /// # Errors
    /// When `event` has no envelope's `metadata`.
    fn of(event: serde_json::Value, arrived_ms: Option<i64>) -> Result<Self> {
        /// What the demo reads of an envelope; `data`, inline, is skipped.
        #[derive(Deserialize)]
        struct Received {
            metadata: EventMetadata,
            #[serde(default)]
            dataref: Option<String>,
        }
        let received = Received::deserialize(&event).context("an envelope's metadata")?;
        let metadata = received.metadata;
        let occurred_ms = outbox_shared::time::parse_timestamp(&metadata.occurred_at)
            .ok()
            .map(|t| t.timestamp_millis());
        Ok(Self {
            event_id: metadata.event_id,
            aggregate_id: metadata.aggregate_id,
            sequence: metadata.sequence,
            latency_ms: arrived_ms
                .zip(occurred_ms)
                .and_then(|(arrived, occurred)| u64::try_from(arrived - occurred).ok()),
            arrived_ms,
            stored: received.dataref.is_some().then_some(event),
        })
    }
}

/// Consumes the sink queue as Lambda's SQS event source would, until `stop` is set and the queue
/// holds nothing, visible or in flight: each `ReceiveMessage` answer becomes an SQS event handed
/// to `consumer`, only what it acknowledges is deleted, and the rest is delivered again after
/// the visibility timeout ([`Consumer::visibility_timeout_secs`]). [`POLLERS`] batches at a
/// time, as Lambda's event source runs concurrent invocations (a FIFO queue hands out a group's
/// next message only once the one before it is deleted). Answers each message's first delivery,
/// in the order received; on Kinesis, [`read_stream`].
pub(crate) async fn read_deliveries(
    env: Env,
    consumer: Arc<Consumer>,
    stop: watch::Receiver<bool>,
) -> Result<Vec<Delivery>> {
    if env.target == relay_runtime::TargetKind::Kinesis {
        return read_stream(env, consumer, stop).await;
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let pollers: Vec<_> = (0..POLLERS)
        .map(|_| {
            tokio::spawn(poll_queue(
                env.clone(),
                Arc::clone(&consumer),
                stop.clone(),
                Arc::clone(&seen),
            ))
        })
        .collect();
    for poller in pollers {
        poller.await.context("sink poller")??;
    }
    let mut seen = std::mem::take(&mut *seen.lock().unwrap_or_else(|p| p.into_inner()));
    // In the order the target put them on the queue, whichever poller received them.
    seen.deliveries.sort_by_key(|delivery| delivery.arrived_ms);
    Ok(seen.deliveries)
}

/// Batches consumed at a time from the sink queue.
const POLLERS: usize = 2;

/// The messages seen so far, and each one's first delivery in the order received.
#[derive(Default)]
struct Seen {
    messages: HashSet<String>,
    deliveries: Vec<Delivery>,
}

/// One of [`read_deliveries`]' pollers.
async fn poll_queue(
    env: Env,
    consumer: Arc<Consumer>,
    stop: watch::Receiver<bool>,
    seen: Arc<Mutex<Seen>>,
) -> Result<()> {
    let queue_url = &env.stack.sink_queue_url;
    let queue_arn = env
        .sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .context("reading the sink queue's ARN")?
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn))
        .cloned()
        .unwrap_or_default();
    let region = region(&env);
    loop {
        let received = env
            .sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .visibility_timeout(consumer.visibility_timeout_secs())
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .send()
            .await
            .context("receiving from the sink queue")?;
        let messages = received.messages();
        if messages.is_empty() {
            if *stop.borrow() && env.queue_depth(queue_url).await? == 0 {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        record_first_deliveries(&seen, messages)?;
        let mut batch = SqsEvent::default();
        batch.records = messages
            .iter()
            .map(|m| sqs_message(m, &queue_arn, &region))
            .collect();
        let acknowledged = consumer.process_sqs(&batch).await;
        // Ten at a time: every SQS call costs moto a scan of the queue.
        let entries: Vec<DeleteMessageBatchRequestEntry> = messages
            .iter()
            .zip(acknowledged)
            .enumerate()
            .filter(|(_, (_, acknowledged))| *acknowledged)
            .filter_map(|(i, (m, _))| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .set_receipt_handle(m.receipt_handle().map(str::to_owned))
                    .build()
                    .ok()
            })
            .collect();
        if !entries.is_empty() {
            env.sqs
                .delete_message_batch()
                .queue_url(queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .context("deleting from the sink queue")?;
        }
    }
}

/// Records the first delivery of each of `messages` not seen before.
fn record_first_deliveries(
    seen: &Mutex<Seen>,
    messages: &[aws_sdk_sqs::types::Message],
) -> Result<()> {
    let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
    for message in messages {
        if !seen
            .messages
            .insert(message.message_id().unwrap_or_default().to_owned())
        {
            continue;
        }
        seen.deliveries.push(Delivery::of_message(message)?);
    }
    Ok(())
}

impl Delivery {
    /// The delivery a sink queue's `message` is (received with its system attributes: it
    /// arrived at its `SentTimestamp`).
    ///
    /// # Errors
    /// When its body is not a bus's event, or an envelope, as the relays publish them.
    pub(crate) fn of_message(message: &aws_sdk_sqs::types::Message) -> Result<Self> {
        let body = message.body().unwrap_or_default();
        let event: serde_json::Value =
            serde_json::from_str(body).with_context(|| format!("sink message {body:?}"))?;
        // A bus's event holds the envelope as its detail; an SNS (raw) or SQS message is it.
        let detail = match event.get("detail") {
            Some(detail) => detail.clone(),
            None => event,
        };
        let sent_ms = message
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::SentTimestamp))
            .and_then(|t| t.parse::<i64>().ok());
        Self::of(detail, sent_ms).with_context(|| format!("sink message detail {body:?}"))
    }
}

/// The region the consumer's events name (`awsRegion`).
fn region(env: &Env) -> String {
    env.sqs
        .config()
        .region()
        .map_or_else(|| "us-east-1".to_owned(), ToString::to_string)
}

/// Consumes the Kinesis target as Lambda's Kinesis event source would, until `stop` is set and a
/// read finds nothing new: each shard's `GetRecords` answer becomes a Kinesis event handed to
/// `consumer`, and the shard is read again from the first record it did not acknowledge (Lambda's
/// checkpoint), else from where the read ended. Answers each record's first delivery, in each
/// shard's order (an aggregate is on one shard, so its order is the stream's).
async fn read_stream(
    env: Env,
    consumer: Arc<Consumer>,
    stop: watch::Receiver<bool>,
) -> Result<Vec<Delivery>> {
    let stream = env.stack.bus_name.clone();
    let region = region(&env);
    let mut iterators = shard_iterators(&env, &stream).await?;
    let mut seen: HashSet<String> = HashSet::new();
    let mut deliveries = Vec::new();
    loop {
        let stopping = *stop.borrow();
        let mut read = 0;
        for (shard_id, iterator) in iterators.iter_mut() {
            let Some(current) = iterator.clone() else {
                continue;
            };
            let answer = get_records(&env, &stream, current).await?;
            let records = answer.records();
            for record in records {
                // A sequence number is unique within its shard only.
                if !seen.insert(format!("{shard_id}:{}", record.sequence_number())) {
                    continue;
                }
                let event: serde_json::Value = serde_json::from_slice(record.data().as_ref())
                    .context("a record's data is the envelope")?;
                let arrived_ms = record
                    .approximate_arrival_timestamp()
                    .and_then(|t| t.to_millis().ok());
                deliveries.push(
                    Delivery::of(event, arrived_ms).context("a record's data is the envelope")?,
                );
            }
            read += records.len();
            let resume = if records.is_empty() {
                Resume::Next
            } else {
                let mut batch = KinesisEvent::default();
                batch.records = records
                    .iter()
                    .map(|r| kinesis_record(r, &stream, shard_id, &region))
                    .collect();
                consumer.process_kinesis(shard_id, &batch).await
            };
            *iterator = match resume {
                Resume::Next => answer.next_shard_iterator().map(str::to_owned),
                Resume::At(sequence) => {
                    shard_iterator(&env, &stream, shard_id, Some(&sequence)).await?
                }
            };
        }
        if read == 0 {
            if stopping {
                return Ok(deliveries);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Each shard of `stream` with an iterator from its start.
async fn shard_iterators(env: &Env, stream: &str) -> Result<Vec<(String, Option<String>)>> {
    let shards = env
        .kinesis
        .list_shards()
        .stream_arn(stream)
        .send()
        .await
        .context("listing the stream's shards")?;
    let mut iterators = Vec::new();
    for shard in shards.shards() {
        let iterator = shard_iterator(env, stream, shard.shard_id(), None).await?;
        iterators.push((shard.shard_id().to_owned(), iterator));
    }
    Ok(iterators)
}

/// Up to 1,000 records of `stream` from `iterator`, and the iterator after them.
async fn get_records(
    env: &Env,
    stream: &str,
    iterator: String,
) -> Result<aws_sdk_kinesis::operation::get_records::GetRecordsOutput> {
    env.kinesis
        .get_records()
        .stream_arn(stream)
        .shard_iterator(iterator)
        .limit(1000)
        .send()
        .await
        .context("reading the stream")
}

/// An iterator of `shard_id` from its start, or at `sequence`.
async fn shard_iterator(
    env: &Env,
    stream: &str,
    shard_id: &str,
    sequence: Option<&str>,
) -> Result<Option<String>> {
    let kind = match sequence {
        None => ShardIteratorType::TrimHorizon,
        Some(_) => ShardIteratorType::AtSequenceNumber,
    };
    Ok(env
        .kinesis
        .get_shard_iterator()
        .stream_arn(stream)
        .shard_id(shard_id)
        .shard_iterator_type(kind)
        .set_starting_sequence_number(sequence.map(str::to_owned))
        .send()
        .await
        .context("a shard iterator")?
        .shard_iterator()
        .map(str::to_owned))
}

/// Write to published (`PublishedAt` minus `CreatedAt`) of every published outbox item.
pub(crate) async fn relay_lags(env: &Env) -> Result<HashMap<String, u64>> {
    let mut lags = HashMap::new();
    let mut pages = env
        .dynamodb
        .scan()
        .table_name(&env.stack.table_name)
        .consistent_read(true)
        .filter_expression("#entity = :outbox AND attribute_exists(#published)")
        .projection_expression("#id, #created, #published")
        .expression_attribute_names("#entity", attr::ENTITY_TYPE)
        .expression_attribute_names("#id", attr::EVENT_ID)
        .expression_attribute_names("#created", attr::CREATED_AT)
        .expression_attribute_names("#published", attr::PUBLISHED_AT)
        .expression_attribute_values(
            ":outbox",
            AttributeValue::S(entity::OUTBOX_EVENT.to_owned()),
        )
        .into_paginator()
        .items()
        .send();
    while let Some(item) = pages.next().await {
        let item = item.context("reading the outbox items")?;
        let text = |name: &str| item.get(name).and_then(|v| v.as_s().ok());
        let (Some(id), Some(created), Some(published)) = (
            text(attr::EVENT_ID),
            text(attr::CREATED_AT),
            text(attr::PUBLISHED_AT),
        ) else {
            continue;
        };
        let lag = outbox_shared::time::parse_timestamp(published)
            .ok()
            .zip(outbox_shared::time::parse_timestamp(created).ok())
            .and_then(|(published, created)| {
                u64::try_from((published - created).num_milliseconds()).ok()
            });
        if let Some(lag) = lag {
            lags.insert(id.clone(), lag);
        }
    }
    Ok(lags)
}
