//! `relay-stream-local`: a local event source for the stream relay's handler, for the demo and the
//! tests (a crate of its own: the Lambda is the handler and its `main`).
//!
//! Reads the table's stream with `aws-sdk-dynamodbstreams` — every shard, parents before children,
//! from `trim-horizon` or `latest` — and delivers batches to the same [`StreamRelay`] the Lambda
//! runs, with the event source mapping's semantics: at most `batch_size` records per batch, a
//! reported batch item failure re-delivers from that sequence number, a bounded number of times,
//! after which the batch is given up: with `--discarded-batch-bucket`, written whole to that bucket
//! as the mapping's S3 on-failure destination writes it ([`on_failure`]).
//!
//! [`records`] converts `aws-sdk-dynamodbstreams` records to the Lambda event shape, so the reader
//! drives the very handler the Lambda runs.

pub mod on_failure;
pub mod records;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_lambda_events::dynamodb::EventRecord;
use aws_sdk_dynamodbstreams::Client as StreamsClient;
use aws_sdk_dynamodbstreams::error::ProvideErrorMetadata;
use aws_sdk_dynamodbstreams::types::ShardIteratorType;
use futures::future::join_all;
use relay_runtime::preflight::{Kind, Need, Resource, Unusable};
use relay_runtime::{
    AggregateHolds, DeadLetterSink, Deadline, Publisher, SettingError, StatusStore,
};
use relay_stream::{BatchCounts, RelayArgs, StreamRelay};
use tokio_util::sync::CancellationToken;

use crate::on_failure::S3OnFailureDestination;
use crate::records::to_event_record;

/// `GetRecords` returns at most 1,000 records per call.
pub const GET_RECORDS_MAX_LIMIT: usize = 1000;

/// Lambda's event source mapping accepts batch sizes of 1 to 10,000 records for streams.
pub const MAX_BATCH_SIZE: u32 = 10_000;

/// How often the shard list is refreshed to find children of split shards.
const SHARD_REFRESH_INTERVAL: Duration = Duration::from_secs(10);

/// Longest wait between re-deliveries of a failing batch.
const MAX_REDELIVERY_DELAY: Duration = Duration::from_secs(5);

/// Where reading starts in shards that exist when the runner starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StartingPosition {
    /// The oldest record still in the stream (24 h retention).
    TrimHorizon,
    /// Only records written after the runner started.
    Latest,
}

/// Flags of `relay-stream-local`; each also reads the environment variable the Lambda reads.
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "relay-stream-local",
    about = "Reads the outbox table's DynamoDB Stream and relays outbox inserts to EventBridge with Lambda's batch semantics",
    version
)]
pub struct LocalArgs {
    #[command(flatten)]
    pub relay: RelayArgs,
    /// Records per batch delivered to the handler (1..=10000).
    #[arg(long, env = "BATCH_SIZE", default_value_t = 100,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_BATCH_SIZE)))]
    pub batch_size: u32,
    /// Where to start reading shards that exist at start-up.
    #[arg(long = "from", env = "STARTING_POSITION", value_enum, default_value_t = StartingPosition::TrimHorizon)]
    pub from: StartingPosition,
    /// Exit after the stream has been idle this long (e.g. `2s`); without it, run until SIGTERM or
    /// ctrl-c.
    #[arg(long, env = "EXIT_WHEN_IDLE", value_parser = humantime::parse_duration)]
    pub exit_when_idle: Option<Duration>,
    /// Re-deliveries of a batch that reports a failure before it is given up.
    #[arg(long, env = "MAXIMUM_RETRY_ATTEMPTS", default_value_t = 3)]
    pub max_retries: u32,
    /// Wait between polls of an idle stream (Lambda polls each shard four times a second).
    #[arg(long, env = "POLL_INTERVAL", value_parser = humantime::parse_duration, default_value = "250ms")]
    pub poll_interval: Duration,
    /// The on-failure destination: a batch given up after its retries is written whole to this S3
    /// bucket, as the mapping's S3 destination writes it (the bucket the poller recovers from, its
    /// `DISCARDED_BATCH_BUCKET`). Unset: a given-up batch is only logged.
    #[arg(long, env = "DISCARDED_BATCH_BUCKET")]
    pub discarded_batch_bucket: Option<String>,
}

/// How the runner reads and delivers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunnerOptions {
    pub batch_size: usize,
    pub from: StartingPosition,
    pub exit_when_idle: Option<Duration>,
    pub max_retries: u32,
    pub poll_interval: Duration,
}

impl From<&LocalArgs> for RunnerOptions {
    fn from(args: &LocalArgs) -> Self {
        Self {
            batch_size: args.batch_size as usize,
            from: args.from,
            exit_when_idle: args.exit_when_idle,
            max_retries: args.max_retries,
            poll_interval: args.poll_interval,
        }
    }
}

/// The stream could not be read at all.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    #[error("table {table}: {message}")]
    NoStream { table: String, message: String },
    #[error("could not list the shards of {stream_arn}: {message}")]
    DescribeStream { stream_arn: String, message: String },
    #[error(transparent)]
    Config(#[from] SettingError),
    /// What the runner relies on cannot be used (`relay_runtime::preflight`); boxed, as the
    /// rarest and largest.
    #[error(transparent)]
    Unusable(#[from] Box<Unusable>),
}

/// The one-line JSON summary `relay-stream-local` prints on exit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Summary {
    pub published: u64,
    pub ignored: u64,
    pub dead_lettered: u64,
    pub failed: u64,
    /// Left to the poller under their aggregate's hold (hold mode): still pending, the poller
    /// publishes them in order and then releases the hold.
    pub left_to_hold: u64,
    /// Published or dead-lettered, but the status update failed: the item stays pending and the
    /// poller publishes it again (a part of `published` and `dead_lettered`).
    pub not_marked: u64,
    /// Calls sent to the target, retries included (counted by the publisher, not derived).
    #[serde(flatten)]
    pub calls: relay_runtime::publisher::PublishCalls,
    /// Records delivered again after a batch item failure (each re-delivery counts the records
    /// from the reported one to the batch's end).
    pub redelivered: u64,
    /// Entries the Custom Event Bus answered `DEDUPLICATED` (published before within its 300 s
    /// window; a part of `published`); 0 on the classic bus.
    pub deduplicated: u64,
    /// Batches given up after their retries and written to the on-failure destination.
    pub discarded_batches: u64,
    /// Payloads the claim check wrote to the payload bucket (`PAYLOAD_BUCKET`): one per event too
    /// large for the target.
    pub payloads_stored: u64,
    /// Payloads found already in the bucket (stored by an earlier publish): nothing written.
    pub payloads_already_stored: u64,
}

impl Summary {
    /// The run's outcome in words, for the last line at a terminal.
    pub fn to_words(&self) -> String {
        let mut words = format!("published {} events", self.published);
        for (count, what) in [
            (self.dead_lettered, "dead-lettered"),
            (self.failed, "failed (pending: the poller publishes them)"),
            (self.left_to_hold, "left to the poller under holds"),
            (
                self.not_marked,
                "not marked (the poller publishes them again)",
            ),
            (self.discarded_batches, "batches discarded to the bucket"),
        ] {
            if count > 0 {
                words.push_str(&format!(", {count} {what}"));
            }
        }
        words.push_str(&format!(
            " in {} calls to the target",
            self.calls.publish_calls
        ));
        words
    }

    /// Whether events left the outbox (published or dead-lettered) and not one of them was
    /// marked: the status store cannot mark (an endpoint without PartiQL, a policy without
    /// `dynamodb:PartiQLUpdate`), so everything stays pending and is published again. The runner
    /// exits non-zero on it; a few marks that failed are the poller's to finish, not an error.
    pub fn marked_none(&self) -> bool {
        let settled = self.published + self.dead_lettered;
        settled > 0 && self.not_marked >= settled
    }
}

/// Builds the clients and the relay from `args`, then reads and relays until `shutdown` or idle.
///
/// # Errors
/// [`RunnerError`] when the configuration is invalid or the stream cannot be found or listed.
pub async fn run(args: &LocalArgs, shutdown: &CancellationToken) -> Result<Summary, RunnerError> {
    let sdk_config = relay_runtime::load_aws_config().await?;
    let mut needs = relay_stream::needs(&args.relay)?;
    let bucket = args
        .discarded_batch_bucket
        .as_deref()
        .filter(|bucket| !bucket.trim().is_empty());
    needs.extend(bucket.map(|bucket| {
        Need::Bucket(Resource::new(
            Kind::Bucket,
            bucket,
            SettingError::name_of::<LocalArgs>("discarded_batch_bucket"),
        ))
    }));
    relay_runtime::preflight::require(&sdk_config, &needs)
        .await
        .map_err(Box::new)?;
    let dynamodb = aws_sdk_dynamodb::Client::new(&sdk_config);
    let relay = relay_stream::build_relay(&args.relay, &sdk_config)?;
    let stream_arn = match stream_arn_of(&dynamodb, &args.relay.table_name).await {
        Err(RunnerError::NoStream { .. }) => {
            return Err(Box::new(no_stream(&sdk_config, &args.relay.table_name)).into());
        }
        found => found?,
    };
    tracing::info!(stream_arn = %stream_arn, batch_size = args.batch_size, from = ?args.from, "relaying stream");
    let on_failure = bucket.map(|bucket| {
        S3OnFailureDestination::new(aws_sdk_s3::Client::new(&sdk_config), bucket, &stream_arn)
    });
    let runner = LocalRunner::new(
        relay,
        aws_sdk_dynamodbstreams::Client::new(&sdk_config),
        stream_arn,
        RunnerOptions::from(args),
    )
    .with_on_failure(on_failure);
    let counts = runner.run(shutdown).await?;
    let publish = runner.relay().publisher().stats();
    Ok(Summary {
        published: counts.published,
        ignored: counts.ignored,
        dead_lettered: counts.dead_lettered,
        failed: counts.failed,
        left_to_hold: counts.left_to_hold,
        not_marked: counts.not_marked,
        calls: publish.publish_calls.into(),
        redelivered: runner.redelivered(),
        deduplicated: publish.deduplicated,
        discarded_batches: runner.discarded_batches(),
        payloads_stored: publish.payloads_stored,
        payloads_already_stored: publish.payloads_already_stored,
    })
}

/// The table `table_name` has no stream: one line, as any resource the runner cannot use.
fn no_stream(sdk: &aws_config::SdkConfig, table_name: &str) -> Unusable {
    let setting = SettingError::name_of::<relay_stream::RelayArgs>("table_name");
    Unusable {
        resource: Resource::new(Kind::Stream, format!("of table {table_name}"), setting),
        problem: outbox_shared::Misconfiguration::Missing,
        place: relay_runtime::preflight::Place::of(
            sdk,
            relay_runtime::preflight::Service::DYNAMODB,
            None,
        ),
        operation: "DescribeTable",
        code: None,
        fix: "enable the table's stream with the view NEW_AND_OLD_IMAGES, as               infra/template.yaml declares it"
            .to_owned(),
        failure: None,
    }
}

/// The stream ARN of `table_name`.
///
/// # Errors
/// [`RunnerError::NoStream`] when the table cannot be described or has no stream.
pub async fn stream_arn_of(
    dynamodb: &aws_sdk_dynamodb::Client,
    table_name: &str,
) -> Result<String, RunnerError> {
    let table = dynamodb
        .describe_table()
        .table_name(table_name)
        .send()
        .await
        .map_err(|e| RunnerError::NoStream {
            table: table_name.to_owned(),
            message: outbox_shared::error::describe(&e),
        })?;
    table
        .table()
        .and_then(|t| t.latest_stream_arn())
        .map(str::to_owned)
        .ok_or_else(|| RunnerError::NoStream {
            table: table_name.to_owned(),
            message: "has no stream enabled".into(),
        })
}

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
pub struct LocalRunner<P, S, D, H> {
    relay: StreamRelay<P, S, D, H>,
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

impl<P: Publisher, S: StatusStore, D: DeadLetterSink, H: AggregateHolds> LocalRunner<P, S, D, H> {
    pub fn new(
        relay: StreamRelay<P, S, D, H>,
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

    pub fn relay(&self) -> &StreamRelay<P, S, D, H> {
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
                () = tokio::time::sleep(self.options.poll_interval) => {}
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
            match self.iterator(&shard.id, position, None).await {
                Ok(iterator) => shard.state = ShardState::Reading { iterator },
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
        let counts = if batch.is_empty() {
            BatchCounts::default()
        } else {
            self.deliver(&shard.id, &batch, shutdown).await
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

impl<P, S, D, H> LocalRunner<P, S, D, H> {
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

/// Every record currently in the stream, all shards from the trim horizon, in shard order.
///
/// For tools and tests that need a real batch (the same shape the Lambda receives).
///
/// # Errors
/// [`RunnerError::DescribeStream`] when the stream cannot be listed or read.
pub async fn read_stream_records(
    streams: &StreamsClient,
    stream_arn: &str,
) -> Result<Vec<EventRecord>, RunnerError> {
    let fail = |message: String| RunnerError::DescribeStream {
        stream_arn: stream_arn.to_owned(),
        message,
    };
    let description = streams
        .describe_stream()
        .stream_arn(stream_arn)
        .send()
        .await
        .map_err(|e| fail(outbox_shared::error::describe(&e)))?;
    let mut records = Vec::new();
    for shard in description
        .stream_description()
        .map(|d| d.shards())
        .unwrap_or_default()
    {
        let mut iterator = streams
            .get_shard_iterator()
            .stream_arn(stream_arn)
            .shard_id(shard.shard_id().unwrap_or_default())
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .map_err(|e| fail(outbox_shared::error::describe(&e)))?
            .shard_iterator()
            .map(str::to_owned);
        while let Some(current) = iterator.take() {
            let page = streams
                .get_records()
                .shard_iterator(current)
                .send()
                .await
                .map_err(|e| fail(outbox_shared::error::describe(&e)))?;
            if page.records().is_empty() {
                break;
            }
            records.extend(
                page.records()
                    .iter()
                    .map(|r| to_event_record(r, stream_arn)),
            );
            iterator = page.next_shard_iterator().map(str::to_owned);
        }
    }
    Ok(records)
}
