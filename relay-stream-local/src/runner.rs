//! The runner: reads every shard of a stream, parents before children, and delivers batches to a
//! [`StreamRelay`] with the event source mapping's semantics (batch size, re-delivery from a
//! reported failure, a batch given up after its retries).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_lambda_events::dynamodb::EventRecord;
use aws_sdk_dynamodbstreams::Client as StreamsClient;
use aws_sdk_dynamodbstreams::error::ProvideErrorMetadata;
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use futures::future::join_all;
use relay_runtime::{
    AggregateHolds, DeadLetterSink, Deadline, Publisher, RegionAdoption, SingleRegion, StatusStore,
};
use relay_stream::{BatchCounts, StreamRelay};
use tokio_util::sync::CancellationToken;

use crate::args::{RunnerOptions, StartingPosition};
use crate::error::RunnerError;
use crate::on_failure::S3OnFailureDestination;
use crate::records::to_event_record;

/// `GetRecords` returns at most 1,000 records per call.
pub const GET_RECORDS_MAX_LIMIT: usize = 1000;

/// The message logged (at info) when a shard's reading starts: its iterator obtained, the next
/// call reads its records.
pub const READING_SHARD: &str = "reading shard";

/// How often the shard list is refreshed to find children of split shards.
const SHARD_REFRESH_INTERVAL: Duration = Duration::from_secs(10);

/// Longest wait between re-deliveries of a failing batch.
const MAX_REDELIVERY_DELAY: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, PartialEq, Eq)]
enum ShardState {
    /// Waiting for its parent to be read to the end.
    Waiting,
    Reading {
        iterator: String,
    },
    /// Read to the end (closed), or skipped.
    Done,
}

#[derive(Debug)]
struct Shard {
    id: String,
    parent: Option<String>,
    /// Set when the shard existed at start-up (the starting position applies to it).
    initial: bool,
    /// Whether the shard had an ending sequence number when listed.
    closed: bool,
    last_sequence: Option<String>,
    state: ShardState,
}

/// What one poll of one shard did.
#[derive(Debug, Default)]
struct PollResult {
    records: usize,
    counts: BatchCounts,
}

/// The runner: reads a stream and drives a [`StreamRelay`].
#[derive(Debug)]
pub struct LocalRunner<P, S, D, H, A = SingleRegion> {
    relay: StreamRelay<P, S, D, H, A>,
    streams: StreamsClient,
    stream_arn: String,
    options: RunnerOptions,
    /// Where a batch given up goes, as the mapping's on-failure destination.
    on_failure: Option<S3OnFailureDestination>,
    /// Records re-delivered so far.
    redelivered: std::sync::atomic::AtomicU64,
    /// Batches given up and written to the on-failure destination so far.
    discarded_batches: std::sync::atomic::AtomicU64,
}

impl<P: Publisher, S: StatusStore, D: DeadLetterSink, H: AggregateHolds, A: RegionAdoption>
    LocalRunner<P, S, D, H, A>
{
    pub fn new(
        relay: StreamRelay<P, S, D, H, A>,
        streams: StreamsClient,
        stream_arn: impl Into<String>,
        options: RunnerOptions,
    ) -> Self {
        Self {
            relay,
            streams,
            stream_arn: stream_arn.into(),
            options,
            on_failure: None,
            redelivered: std::sync::atomic::AtomicU64::default(),
            discarded_batches: std::sync::atomic::AtomicU64::default(),
        }
    }

    /// Writes the batches given up after their retries to `destination` (none: only logged).
    #[must_use]
    pub fn with_on_failure(mut self, destination: Option<S3OnFailureDestination>) -> Self {
        self.on_failure = destination;
        self
    }

    /// Batches given up and written to the on-failure destination so far.
    pub fn discarded_batches(&self) -> u64 {
        self.discarded_batches
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records delivered again after a batch item failure so far.
    pub fn redelivered(&self) -> u64 {
        self.redelivered.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn relay(&self) -> &StreamRelay<P, S, D, H, A> {
        &self.relay
    }

    /// Reads and relays until `shutdown` is cancelled or the stream has been idle for
    /// `exit_when_idle`. A batch in flight is finished first.
    ///
    /// # Errors
    /// [`RunnerError::DescribeStream`] when the shard list cannot be read at start-up.
    pub async fn run(&self, shutdown: &CancellationToken) -> Result<BatchCounts, RunnerError> {
        let mut shards: BTreeMap<String, Shard> = BTreeMap::new();
        self.refresh_shards(&mut shards, true).await?;
        let mut last_refresh = Instant::now();
        let mut idle_since: Option<Instant> = None;
        let mut counts = BatchCounts::default();
        while !shutdown.is_cancelled() {
            let nothing_to_read = !shards
                .values()
                .any(|s| matches!(s.state, ShardState::Reading { .. }));
            if last_refresh.elapsed() >= SHARD_REFRESH_INTERVAL || nothing_to_read {
                if let Err(err) = self.refresh_shards(&mut shards, false).await {
                    tracing::warn!(error = %outbox_shared::error::describe(&err), "could not refresh the shard list");
                }
                last_refresh = Instant::now();
            }
            self.start_ready_shards(&mut shards).await;

            // Lambda polls each shard at a base rate (four times a second): the next read of an
            // idle shard is a poll interval after this one started, not after it ended.
            let round_started = Instant::now();
            let polls = shards
                .values_mut()
                .filter(|s| matches!(s.state, ShardState::Reading { .. }))
                .map(|shard| self.poll_shard(shard, shutdown));
            let results = join_all(polls).await;
            let records: usize = results.iter().map(|r| r.records).sum();
            for result in results {
                counts += result.counts;
            }
            if records > 0 {
                idle_since = None;
                continue;
            }
            let idle = *idle_since.get_or_insert_with(Instant::now);
            if let Some(limit) = self.options.exit_when_idle
                && idle.elapsed() >= limit
            {
                tracing::info!(idle_ms = limit.as_millis() as u64, "stream idle; exiting");
                break;
            }
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = tokio::time::sleep(self.options.poll_interval.saturating_sub(round_started.elapsed())) => {}
            }
        }
        Ok(counts)
    }

    async fn refresh_shards(
        &self,
        shards: &mut BTreeMap<String, Shard>,
        initial: bool,
    ) -> Result<(), RunnerError> {
        let mut start: Option<String> = None;
        loop {
            let page = self
                .streams
                .describe_stream()
                .stream_arn(&self.stream_arn)
                .set_exclusive_start_shard_id(start.take())
                .send()
                .await
                .map_err(|e| RunnerError::DescribeStream {
                    stream_arn: self.stream_arn.clone(),
                    message: outbox_shared::error::describe(&e),
                })?;
            let Some(description) = page.stream_description() else {
                return Ok(());
            };
            for listed in description.shards() {
                let Some(id) = listed.shard_id() else {
                    continue;
                };
                shards.entry(id.to_owned()).or_insert_with(|| {
                    tracing::debug!(
                        shard = id,
                        parent = listed.parent_shard_id().unwrap_or("none"),
                        "found shard"
                    );
                    Shard {
                        id: id.to_owned(),
                        parent: listed.parent_shard_id().map(str::to_owned),
                        initial,
                        closed: listed
                            .sequence_number_range()
                            .and_then(|r| r.ending_sequence_number())
                            .is_some(),
                        last_sequence: None,
                        state: ShardState::Waiting,
                    }
                });
            }
            match description.last_evaluated_shard_id() {
                Some(last) => start = Some(last.to_owned()),
                None => return Ok(()),
            }
        }
    }

    /// Starts reading every waiting shard whose parent is done or no longer listed (expired).
    async fn start_ready_shards(&self, shards: &mut BTreeMap<String, Shard>) {
        let ready: Vec<String> = shards
            .values()
            .filter(|s| s.state == ShardState::Waiting)
            .filter(|s| {
                s.parent
                    .as_ref()
                    .and_then(|p| shards.get(p))
                    .is_none_or(|parent| parent.state == ShardState::Done)
            })
            .map(|s| s.id.clone())
            .collect();
        for id in ready {
            let shard = shards.get_mut(&id).expect("listed above");
            let position = if shard.initial && self.options.from == StartingPosition::Latest {
                if shard.closed {
                    // Nothing new will ever be written to a closed shard.
                    shard.state = ShardState::Done;
                    continue;
                }
                ShardIteratorType::Latest
            } else {
                ShardIteratorType::TrimHorizon
            };
            match self.iterator(&shard.id, position.clone(), None).await {
                Ok(iterator) => {
                    // Once per shard: what the demo waits for before it writes its measured
                    // orders (the relay's start-up is not its lag).
                    tracing::info!(shard = %shard.id, from = ?position, "{READING_SHARD}");
                    shard.state = ShardState::Reading { iterator };
                }
                Err(message) => {
                    tracing::warn!(shard = %shard.id, error = %message, "could not start reading shard");
                }
            }
        }
    }

    async fn iterator(
        &self,
        shard_id: &str,
        position: ShardIteratorType,
        sequence: Option<&str>,
    ) -> Result<String, String> {
        self.streams
            .get_shard_iterator()
            .stream_arn(&self.stream_arn)
            .shard_id(shard_id)
            .shard_iterator_type(position)
            .set_sequence_number(sequence.map(str::to_owned))
            .send()
            .await
            .map_err(|e| outbox_shared::error::describe(&e))?
            .shard_iterator()
            .map(str::to_owned)
            .ok_or_else(|| "no shard iterator returned".to_owned())
    }

    /// Reads up to one batch from `shard` and delivers it.
    async fn poll_shard(&self, shard: &mut Shard, shutdown: &CancellationToken) -> PollResult {
        let ShardState::Reading { iterator } = &shard.state else {
            return PollResult::default();
        };
        let mut iterator = Some(iterator.clone());
        let mut batch: Vec<EventRecord> = Vec::new();
        let read_started = Instant::now();
        while let Some(current) = iterator.take() {
            let limit = (self.options.batch_size - batch.len()).min(GET_RECORDS_MAX_LIMIT);
            let page = match self
                .streams
                .get_records()
                .shard_iterator(&current)
                .limit(i32::try_from(limit).unwrap_or(i32::MAX))
                .send()
                .await
            {
                Ok(page) => page,
                Err(err) => {
                    iterator = self.recover_iterator(shard, &current, &err).await;
                    break;
                }
            };
            let records = page.records();
            batch.extend(records.iter().map(|r| to_event_record(r, &self.stream_arn)));
            iterator = page.next_shard_iterator().map(str::to_owned);
            if iterator.is_none() {
                tracing::info!(shard = %shard.id, "shard closed and read to the end");
            }
            if records.len() < limit || batch.len() >= self.options.batch_size {
                break;
            }
        }
        if let Some(last) = batch.last().and_then(|r| r.change.sequence_number.clone()) {
            shard.last_sequence = Some(last);
        }
        shard.state = match iterator {
            Some(iterator) => ShardState::Reading { iterator },
            None => ShardState::Done,
        };
        let records = batch.len();
        let read_ms = read_started.elapsed().as_millis() as u64;
        let counts = if batch.is_empty() {
            BatchCounts::default()
        } else {
            let delivered_started = Instant::now();
            let counts = self.deliver(&shard.id, &batch, shutdown).await;
            tracing::debug!(
                shard = %shard.id,
                records,
                read_ms,
                deliver_ms = delivered_started.elapsed().as_millis() as u64,
                "batch delivered"
            );
            counts
        };
        PollResult { records, counts }
    }

    /// A new iterator after a failed `GetRecords`, or the same one to try again later.
    async fn recover_iterator<E: ProvideErrorMetadata + std::error::Error + 'static>(
        &self,
        shard: &Shard,
        current: &str,
        err: &aws_sdk_dynamodbstreams::error::SdkError<
            E,
            aws_sdk_dynamodbstreams::config::http::HttpResponse,
        >,
    ) -> Option<String> {
        match err.code() {
            Some("ExpiredIteratorException" | "TrimmedDataAccessException") => {
                let (position, sequence) = match (&shard.last_sequence, err.code()) {
                    (Some(seq), Some("ExpiredIteratorException")) => {
                        (ShardIteratorType::AfterSequenceNumber, Some(seq.as_str()))
                    }
                    _ => (ShardIteratorType::TrimHorizon, None),
                };
                match self.iterator(&shard.id, position, sequence).await {
                    Ok(iterator) => Some(iterator),
                    Err(message) => {
                        tracing::warn!(shard = %shard.id, error = %message, "could not renew the shard iterator");
                        Some(current.to_owned())
                    }
                }
            }
            Some("ResourceNotFoundException") => {
                tracing::error!(shard = %shard.id, "stream or shard no longer exists; stopping reading it");
                None
            }
            _ => {
                tracing::warn!(shard = %shard.id, error = %outbox_shared::error::describe(err), "GetRecords failed; will retry");
                Some(current.to_owned())
            }
        }
    }

    /// Delivers one batch with Lambda's semantics: re-deliver from the reported record, at most
    /// `max_retries` times, then give the rest of the batch up.
    async fn deliver(
        &self,
        shard_id: &str,
        batch: &[EventRecord],
        shutdown: &CancellationToken,
    ) -> BatchCounts {
        let mut counts = BatchCounts::default();
        let mut start = 0;
        let mut retries = 0;
        loop {
            let report = self.relay.handle(&batch[start..], Deadline::NONE).await;
            let mut delivered = report.counts();
            let Some(failed_at) = report.first_unpublished else {
                counts += delivered;
                return counts;
            };
            // Records not published now (failed, or not sent) are counted only if they are given
            // up: as failed, since the reader leaves them to the poller.
            let failed = delivered.failed + delivered.not_sent;
            delivered.failed = 0;
            delivered.not_sent = 0;
            counts += delivered;
            let sequence = batch[start + failed_at].change.sequence_number.clone();
            if shutdown.is_cancelled() {
                tracing::warn!(
                    shard = shard_id,
                    sequence_number = sequence.as_deref().unwrap_or("(none)"),
                    failed,
                    "stopping with the rest of the batch unpublished; its pending events are the poller's"
                );
                counts.failed += failed;
                return counts;
            }
            if retries >= self.options.max_retries {
                // As the mapping discards the batch from its checkpoint (the reported record) on.
                self.discard(shard_id, &batch[start + failed_at..], retries + 1)
                    .await;
                tracing::error!(
                    shard = shard_id,
                    sequence_number = sequence.as_deref().unwrap_or("(none)"),
                    failed,
                    retries,
                    "giving up on the rest of the batch; its events stay pending for the poller"
                );
                counts.failed += failed;
                return counts;
            }
            retries += 1;
            self.redelivered.fetch_add(
                (batch.len() - start - failed_at) as u64,
                std::sync::atomic::Ordering::Relaxed,
            );
            let delay = self
                .options
                .poll_interval
                .saturating_mul(1 << retries.min(8))
                .min(MAX_REDELIVERY_DELAY);
            tracing::warn!(
                shard = shard_id,
                sequence_number = sequence.as_deref().unwrap_or("(none)"),
                retries,
                delay_ms = delay.as_millis() as u64,
                "re-delivering from the first unpublished record"
            );
            tokio::select! {
                () = shutdown.cancelled() => {
                    counts.failed += failed;
                    return counts;
                }
                () = tokio::time::sleep(delay) => {}
            }
            start += failed_at;
        }
    }
}

impl<P, S, D, H, A> LocalRunner<P, S, D, H, A> {
    /// Writes a given-up batch to the on-failure destination, if there is one.
    async fn discard(&self, shard_id: &str, records: &[EventRecord], invoke_count: u32) {
        let Some(destination) = &self.on_failure else {
            return;
        };
        match destination.discard(shard_id, records, invoke_count).await {
            Ok(key) => {
                self.discarded_batches
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::warn!(
                    shard = shard_id,
                    bucket = destination.bucket(),
                    key = %key,
                    records = records.len(),
                    "batch discarded to the on-failure destination"
                );
            }
            // What the mapping counts as DestinationDeliveryFailures: the records are lost there.
            Err(err) => tracing::error!(
                shard = shard_id,
                bucket = destination.bucket(),
                records = records.len(),
                error = %err,
                "could not write the discarded batch to the on-failure destination"
            ),
        }
    }
}
