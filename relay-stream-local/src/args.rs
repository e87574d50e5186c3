//! The runner's flags and options.

use std::time::Duration;

use relay_stream::RelayArgs;

/// Lambda's event source mapping accepts batch sizes of 1 to 10,000 records for streams.
pub const MAX_BATCH_SIZE: u32 = 10_000;

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
    about = "The stream relay run locally, for the demo and the tests: reads the outbox table's \
             DynamoDB Stream with Lambda's batch semantics and drives the Lambda's handler. The \
             Lambda's settings, as flags too, and those of the reading.",
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
    /// How often an idle shard is read, from the start of one read to the start of the next
    /// (Lambda polls each shard at a base rate of four times a second); a shard that returned
    /// records is read again at once.
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
