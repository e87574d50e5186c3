//! The demo's consumer, built as a user builds one: `outbox_consumer`'s [`BatchProcessor`] with
//! the payload resolver (the claim check) and the idempotency store, and with order restored
//! (`SequenceStore`, on the same table) on a target that does not keep an aggregate's order (the
//! classic bus, [`restores_order`]). The sink reader ([`crate::deliveries`]) hands it each batch
//! as Lambda's event source would: an SQS event built from the messages `ReceiveMessage`
//! answered, a Kinesis event from the records `GetRecords` answered; the consumer answers which
//! of them are acknowledged (deleted, or checkpointed past), and keeps what its handler applied,
//! in the order applied, and what became of every message it was handed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result};
use outbox_consumer::batch::aws_lambda_events::encodings::{Base64Data, SecondTimestamp};
use outbox_consumer::batch::aws_lambda_events::kinesis::{KinesisEvent, KinesisEventRecord};
use outbox_consumer::batch::aws_lambda_events::sqs::{SqsEvent, SqsMessage};
use outbox_consumer::batch::{BatchError, HandlerError};
use outbox_consumer::{
    BatchProcessor, BatchReport, Envelope, IdempotencyConfig, IdempotencyStore, Invocation,
    ItemStatus, PayloadResolver, Processed, SequenceStore, SequencingConfig,
};
use relay_runtime::TargetKind;

use crate::env::Env;

/// How long a message the consumer did not acknowledge stays invisible before the sink queue
/// delivers it again (`VisibilityTimeout` of each receive) where the consumer restores order:
/// short, so an event held for its predecessor is back within seconds. A message visible again
/// while its batch still runs is delivered twice there, which the idempotency store and the
/// sequence store answer.
pub(crate) const VISIBILITY_TIMEOUT_SECS: i32 = 8;

/// The same on a FIFO queue, where the queue keeps each group's order and the consumer holds
/// nothing back: longer than any batch takes, even a large order's on a loaded machine. A message
/// visible again while its batch runs is handed to another poller, and once either deletes it its
/// group's next message may be applied before the first batch applied it (seen under the whole
/// suite's load with 8 s: a batch of ten re-delivered, one event applied out of order). AWS advises
/// a visibility timeout of six times the function's timeout for the same reason.
pub(crate) const FIFO_VISIBILITY_TIMEOUT_SECS: i32 = 60;

/// Deliveries of one message the consumer fails before the demo stops retrying it and reports it
/// (as a redrive policy's `maxReceiveCount` would move it to a dead-letter queue).
const MAX_RECEIVES: u32 = 10;

/// How long an event waits for a missing predecessor before it is applied past the gap: well
/// beyond a predecessor's delay in another batch on a loaded machine (applied past its gap, the
/// predecessor would be a duplicate, never applied), and shorter than [`MAX_RECEIVES`]
/// deliveries [`VISIBILITY_TIMEOUT_SECS`] apart, so a gap is applied (and counted) rather than
/// given up on.
const GAP_BOUND: Duration = Duration::from_secs(60);

/// Whether the consumer restores each aggregate's order on `target`: on the classic bus, whose
/// rule into a standard queue does not keep it. The demo's other targets do: the Custom Event
/// Bus's FIFO subscriber, a FIFO topic into a FIFO queue, a FIFO queue, a stream's shard.
pub(crate) fn restores_order(target: TargetKind) -> bool {
    target == TargetKind::Classic
}

/// An event the consumer's handler applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Applied {
    pub(crate) event_id: String,
    pub(crate) aggregate_id: Option<String>,
    pub(crate) sequence: Option<u64>,
}

/// What became of the messages handed to the consumer, each delivery counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Consumed {
    /// Messages handed to the consumer, its re-deliveries included.
    pub(crate) received: u64,
    /// Deliveries acknowledged without applying them again: the idempotency store's stored
    /// result, or a sequence at or below its aggregate's last applied.
    pub(crate) duplicates: u64,
    /// Deliveries reported failed because their aggregate's predecessor was not applied yet
    /// (order restored): delivered again after the visibility timeout.
    pub(crate) held_for_order: u64,
    /// Deliveries reported failed otherwise (or held back behind a failure by their source's
    /// rule): delivered again.
    pub(crate) retried: u64,
    /// Events applied past a gap in their aggregate's sequence that outlived the bound.
    pub(crate) gaps_applied: u64,
    /// Messages failed [`MAX_RECEIVES`] times, no longer retried: why each failed last.
    pub(crate) given_up: Vec<String>,
}

/// Where a Kinesis shard is read next after a batch, as Lambda's checkpoint would have it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Resume {
    /// Every record acknowledged: the shard's next records.
    Next,
    /// At this sequence number: the first record not acknowledged, retried with those after it
    /// (a record given up on is passed over).
    At(String),
}

/// The demo's consumer: see the module documentation.
pub(crate) struct Consumer {
    processor: BatchProcessor,
    restores_order: bool,
    applied: Mutex<Vec<Applied>>,
    consumed: Mutex<Consumed>,
    /// Failed deliveries of each message (SQS message id, Kinesis sequence number).
    failures: Mutex<HashMap<String, u32>>,
}

impl Consumer {
    /// Creates the consumer's table (its idempotency records and, with order restored, each
    /// aggregate's last applied sequence) on the emulator, and the consumer for `env`'s target.
    pub(crate) async fn provision(env: &Env) -> Result<Self> {
        let suffix = uuid::Uuid::now_v7().simple().to_string();
        let table = format!("consumer-{}", &suffix[suffix.len() - 10..]);
        outbox_consumer::tables::create_idempotency_table(&env.dynamodb, &table)
            .await
            .with_context(|| format!("creating the consumer's table {table}"))?;
        let store = IdempotencyStore::new(env.dynamodb.clone(), IdempotencyConfig::new(&table))
            .context("the consumer's idempotency store")?;
        let mut processor = BatchProcessor::new();
        if let Some(bucket) = &env.payload_bucket {
            processor = processor.with_payloads(PayloadResolver::new(env.s3.clone(), bucket));
        }
        let processor = processor.with_idempotency(store);
        let restores_order = restores_order(env.target);
        let processor = if restores_order {
            let config = SequencingConfig {
                gap_bound: GAP_BOUND,
                ..SequencingConfig::new(&table)
            };
            processor.with_sequencing(
                SequenceStore::new(env.dynamodb.clone(), config)
                    .context("the consumer's sequence store")?,
            )
        } else {
            processor
        };
        Ok(Self {
            processor,
            restores_order,
            applied: Mutex::new(Vec::new()),
            consumed: Mutex::new(Consumed::default()),
            failures: Mutex::new(HashMap::new()),
        })
    }

    pub(crate) fn restores_order(&self) -> bool {
        self.restores_order
    }

    /// The visibility timeout of each receive from the sink queue: [`VISIBILITY_TIMEOUT_SECS`]
    /// where order is restored, [`FIFO_VISIBILITY_TIMEOUT_SECS`] on a FIFO queue.
    pub(crate) fn visibility_timeout_secs(&self) -> i32 {
        if self.restores_order {
            VISIBILITY_TIMEOUT_SECS
        } else {
            FIFO_VISIBILITY_TIMEOUT_SECS
        }
    }

    /// Processes an SQS trigger's batch; answers, for each message in its order, whether to
    /// delete it (acknowledged, or given up on): the others stay for re-delivery.
    pub(crate) async fn process_sqs(&self, event: &SqsEvent) -> Vec<bool> {
        let report = self
            .processor
            .process_sqs(event, &Invocation::default(), |e| self.apply(e))
            .await;
        self.record("", &report)
    }

    /// Processes a Kinesis trigger's batch (`shard_id`'s records); answers where to read the
    /// shard next.
    pub(crate) async fn process_kinesis(&self, shard_id: &str, event: &KinesisEvent) -> Resume {
        let report = self
            .processor
            .process_kinesis(event, &Invocation::default(), |e| self.apply(e))
            .await;
        let done = self.record(shard_id, &report);
        match done.iter().position(|done| !done) {
            Some(failed) => Resume::At(report.items[failed].id.clone()),
            None => Resume::Next,
        }
    }

    /// What the handler applied, in the order applied, and what became of every delivery.
    pub(crate) fn into_parts(self) -> (Vec<Applied>, Consumed) {
        (
            self.applied.into_inner().unwrap_or_else(|p| p.into_inner()),
            self.consumed
                .into_inner()
                .unwrap_or_else(|p| p.into_inner()),
        )
    }

    /// The handler: applies one event (the demo records it).
    async fn apply(&self, envelope: Envelope<serde_json::Value>) -> Result<(), HandlerError> {
        let metadata = envelope.metadata;
        self.applied
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Applied {
                event_id: metadata.event_id,
                aggregate_id: metadata.aggregate_id,
                sequence: metadata.sequence,
            });
        Ok(())
    }

    /// Counts `report`'s outcomes; answers, for each message, whether it is acknowledged or
    /// given up on. `scope` is where its ids are unique (a shard's sequence numbers).
    fn record(&self, scope: &str, report: &BatchReport<()>) -> Vec<bool> {
        let mut consumed = self.consumed.lock().unwrap_or_else(|p| p.into_inner());
        let mut failures = self.failures.lock().unwrap_or_else(|p| p.into_inner());
        let reported: Vec<&str> = report.failures();
        report
            .items
            .iter()
            .map(|item| {
                consumed.received += 1;
                if item.gap.is_some() {
                    consumed.gaps_applied += 1;
                }
                let error = match &item.status {
                    ItemStatus::Done(Processed::Handled(())) => return true,
                    ItemStatus::Done(Processed::Replayed(()) | Processed::AlreadyApplied) => {
                        consumed.duplicates += 1;
                        return true;
                    }
                    ItemStatus::Failed(error @ BatchError::Early { .. }) => {
                        consumed.held_for_order += 1;
                        error.to_string()
                    }
                    ItemStatus::Failed(error) => {
                        consumed.retried += 1;
                        error.to_string()
                    }
                    ItemStatus::HeldBack => {
                        consumed.retried += 1;
                        return false;
                    }
                };
                // Only a reported failure is delivered again (on a stream, the first one).
                if !reported.contains(&item.id.as_str()) {
                    return false;
                }
                let count = failures.entry(format!("{scope}:{}", item.id)).or_default();
                *count += 1;
                if *count < MAX_RECEIVES {
                    return false;
                }
                consumed
                    .given_up
                    .push(format!("message {} failed {count} times: {error}", item.id));
                true
            })
            .collect()
    }
}

/// The message `ReceiveMessage` answered as Lambda's SQS event source hands it to a function:
/// its id, receipt handle, body and attributes (`MessageGroupId` on a FIFO queue), and the
/// queue's ARN.
pub(crate) fn sqs_message(
    message: &aws_sdk_sqs::types::Message,
    queue_arn: &str,
    region: &str,
) -> SqsMessage {
    let mut record = SqsMessage::default();
    record.message_id = message.message_id().map(str::to_owned);
    record.receipt_handle = message.receipt_handle().map(str::to_owned);
    record.body = message.body().map(str::to_owned);
    record.md5_of_body = message.md5_of_body().map(str::to_owned);
    if let Some(attributes) = message.attributes() {
        for (name, value) in attributes {
            record
                .attributes
                .insert(name.as_str().to_owned(), value.clone());
        }
    }
    record.event_source = Some("aws:sqs".to_owned());
    record.event_source_arn = Some(queue_arn.to_owned());
    record.aws_region = Some(region.to_owned());
    record
}

/// The record `GetRecords` answered as Lambda's Kinesis event source hands it to a function: its
/// data, partition key, sequence number and arrival, and the stream's ARN.
pub(crate) fn kinesis_record(
    record: &aws_sdk_kinesis::types::Record,
    stream_arn: &str,
    shard_id: &str,
    region: &str,
) -> KinesisEventRecord {
    let mut event = KinesisEventRecord::default();
    let mut data = Base64Data::default();
    data.0 = record.data().as_ref().to_vec();
    event.kinesis.data = data;
    event.kinesis.partition_key = record.partition_key().unwrap_or_default().to_owned();
    event.kinesis.sequence_number = record.sequence_number().to_owned();
    if let Some(arrival) = record
        .approximate_arrival_timestamp()
        .and_then(|t| t.to_millis().ok())
        .and_then(chrono::DateTime::from_timestamp_millis)
    {
        event.kinesis.approximate_arrival_timestamp = SecondTimestamp(arrival);
    }
    event.kinesis.kinesis_schema_version = Some("1.0".to_owned());
    event.event_id = Some(format!("{shard_id}:{}", record.sequence_number()));
    event.event_name = Some("aws:kinesis:record".to_owned());
    event.event_source = Some("aws:kinesis".to_owned());
    event.event_source_arn = Some(stream_arn.to_owned());
    event.event_version = Some("1.0".to_owned());
    event.aws_region = Some(region.to_owned());
    event
}
