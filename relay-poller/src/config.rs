//! Command line and environment configuration, parsed by clap and validated once at start-up.
//!
//! Every flag can also be set through the environment variable named in its help. Validation
//! errors name the flag and the variable, so an operator knows which setting to fix. The
//! publisher's flags are `relay_runtime::PublisherArgs`, the same as the stream relay's.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::sync::OnceLock;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use outbox_shared::schema::DEFAULT_INDEX_NAME;
use outbox_shared::shard::DEFAULT_SHARD_COUNT;
use outbox_shared::{OutboxConfig, ShardCount};
use relay_runtime::{
    PublisherArgs, PublisherConfig, RegionArgs, RetentionArgs, SettingError, TtlPolicy,
};

use crate::assignment::{LeaseSettings, MIN_RENEWALS_PER_DURATION};
use crate::failover::FailoverSettings;
use crate::partitions::Partitions;

/// `Query` returns at most 1 MB per page whatever the limit; beyond this many items a page of
/// typical outbox events would hit that cap anyway.
pub const MAX_PAGE_SIZE: i32 = 1000;

/// Default items per `Query` page: ten full `PutEvents` calls.
pub const DEFAULT_PAGE_SIZE: i32 = 100;

/// Default status updates in flight per shard (16 shards at once make 512 in all).
pub const DEFAULT_MARK_CONCURRENCY: usize = 32;

/// Most shards, or status updates per shard, handled at once.
pub const MAX_CONCURRENCY: usize = 1024;

/// The fallback poller of the DynamoDB -> EventBridge outbox relay.
#[derive(Debug, Parser)]
#[command(name = "relay-poller", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// What the poller does.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Poll continuously: publish events older than the grace period, back off when idle, stop
    /// cleanly on SIGTERM or ctrl-c.
    Run(RunArgs),
    /// Backfill: publish everything pending (stray partitions included), print a one-line JSON
    /// summary, exit 0 when the index is empty and non-zero when events remain (interrupted
    /// included; the summary says how many).
    Drain(DrainArgs),
    /// Show the backlog per shard and the age of the oldest pending event.
    Status(StatusArgs),
    /// Put dead-lettered events back to be published (from the dead-letter queue, or with
    /// `--from-table` the `DEAD_LETTERED` items), then publish them. Safe to run again; `--dry-run`
    /// changes nothing.
    Redrive(RedriveArgs),
    /// What happened to events: status, shard, age, ttl, published or dead-lettered time and
    /// reason, whether they are in the pending index.
    Inspect(InspectArgs),
    /// Re-create, once, the TTL-deleted pending events of the stream batches the mapping
    /// discarded (read from its on-failure destination's bucket), and delete each batch handled;
    /// `run` does the same on an interval. The passes then publish them. Safe to run again;
    /// `--dry-run` changes nothing.
    RecoverDiscarded(RecoverDiscardedArgs),
    /// Check a deployment against what the relays rely on, with the same settings as `run`: the
    /// table's keys, the pending index's keys and projection, TTL, the stream's view, the target,
    /// the dead-letter queue, the lease table, the bucket, stray partitions, the caller's
    /// permissions, the shard count's write ceiling. One line per item, OK or what is wrong and
    /// how to fix it (`--json` for pipelines); exit 0 only when every item holds, 2 otherwise.
    Check(CheckArgs),
    /// On a global table: publish another region's partitions from this process's region
    /// (`AWS_REGION`), as an operator's adoption the pollers keep until `hand-back-region` (an
    /// evacuation); the region's own pollers stop publishing them at their next round once the
    /// adoption has replicated. One line (`--json`: one JSON object).
    AdoptRegion(RegionCommandArgs),
    /// On a global table: let a region publish its own partitions again (its adopter stops at its
    /// next round; the region starts one round after it reads the hand-back). One line (`--json`:
    /// one JSON object).
    HandBackRegion(RegionCommandArgs),
}

/// `relay-poller check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// The relays' settings: the same flags and variables as `run`.
    #[command(flatten)]
    pub relay: RelayArgs,
    #[command(flatten)]
    pub lease_table: LeaseTableArgs,
    #[command(flatten)]
    pub discarded: DiscardedBatchArgs,
    /// The principal whose policies are simulated for the poller's calls (a role or user ARN,
    /// such as the stack's poller task role); default: the caller.
    #[arg(long, env = "CHECK_PRINCIPAL_ARN")]
    pub principal: Option<String>,
    /// Print one JSON object instead of a line per item (the default when stdout is not a
    /// terminal is still the lines: a pipeline asks for JSON).
    #[arg(long)]
    pub json: bool,
}

/// Where the pending events are.
#[derive(Debug, Clone, Args)]
pub struct TableArgs {
    /// The outbox table.
    #[arg(long, env = "TABLE_NAME")]
    pub table_name: String,
    /// The sparse, sharded index of pending events.
    #[arg(long, env = "OUTBOX_INDEX_NAME", default_value = DEFAULT_INDEX_NAME)]
    pub index_name: String,
    /// Number of index shards; must match the writer's.
    #[arg(long, env = "OUTBOX_SHARD_COUNT", default_value_t = ShardCount::new(DEFAULT_SHARD_COUNT).expect("default is valid"))]
    pub shard_count: ShardCount,
    /// The shards this process polls, e.g. `0-7` or `0-3,8-11` (default: all), so several tasks
    /// can split the work by hand (`run` with a lease table shares them by itself).
    #[arg(long, env = "OUTBOX_SHARDS")]
    pub shards: Option<ShardSelection>,
    /// The global table's regions: the same flag in every relay.
    #[command(flatten)]
    pub regions: RegionArgs,
}

/// The lease table a poller fleet shares.
#[derive(Debug, Clone, Default, Args)]
pub struct LeaseTableArgs {
    /// The lease table of the poller fleet (one lease per shard, a heartbeat per poller). With
    /// it, `run` holds leases on its fair share of the shards instead of polling `--shards`;
    /// `drain` ignores it unless `--respect-leases`; `status` shows each shard's owner
    /// (docs/operations.md, "The poller fleet").
    #[arg(long, env = "OUTBOX_LEASE_TABLE")]
    pub lease_table: Option<String>,
}

/// How `run` holds shard leases.
#[derive(Debug, Clone, Args)]
pub struct LeaseArgs {
    #[command(flatten)]
    pub table: LeaseTableArgs,
    /// How long a lease lasts after its holder last renewed it; a poller that stops renewing
    /// loses its shards to the others this long after its last renewal.
    #[arg(long, env = "OUTBOX_LEASE_DURATION", default_value = "30s", value_parser = humantime::parse_duration)]
    pub lease_duration: Duration,
    /// How often a poller renews its leases, takes free or expired ones and answers hand-over
    /// requests: at most a third of `--lease-duration`. A poller stops polling a shard this long
    /// before its lease expires, so it is also the clock skew between pollers the leases tolerate.
    #[arg(long, env = "OUTBOX_LEASE_RENEW_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration)]
    pub lease_renew_interval: Duration,
    /// On a global table: how long a region's heartbeat (written by its pollers every
    /// `--lease-renew-interval`) may go unrenewed before another region's pollers adopt its
    /// partitions and publish its pending events; an adopted region is handed back once its
    /// heartbeat has been fresh this long again (docs/global-tables.md, "Failover and hand-back").
    /// At least three renew intervals.
    #[arg(long, env = "OUTBOX_REGION_FAILOVER_AFTER", default_value = default_region_failover_after(), value_parser = humantime::parse_duration)]
    pub region_failover_after: Duration,
    /// Create the lease table (on-demand billing) when it does not exist: for local runs (the
    /// template creates it on AWS).
    #[arg(
        long,
        env = "OUTBOX_CREATE_LEASE_TABLE",
        default_value_t = false,
        value_parser = clap::builder::BoolishValueParser::new(),
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub create_lease_table: bool,
}

/// How events are published and how hard the poller works.
#[derive(Debug, Clone, Args)]
pub struct RelayArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// Where, as whom and how events are published: the same flags as the stream relay's.
    #[command(flatten)]
    pub publisher: PublisherArgs,
    /// How long marked items stay: the same flag in every relay.
    #[command(flatten)]
    pub retention: RetentionArgs,
    /// Where the metrics go: the same flag in every relay.
    #[command(flatten)]
    pub metrics: relay_runtime::metrics::MetricsArgs,
    /// A pending item whose `ttl` is past or less than this away gets it pushed forward
    /// (`--ttl-retention` from now), so DynamoDB's TTL never deletes an unpublished event.
    #[arg(long, env = "OUTBOX_TTL_REFRESH_MARGIN", default_value = default_ttl_refresh_margin(), value_parser = humantime::parse_duration)]
    pub ttl_refresh_margin: Duration,
    /// How often `run` scans the whole index for events under partitions outside
    /// `--shard-count` (a reshard, another writer) and publishes them; `drain` sweeps on its first
    /// pass and before it calls the index empty.
    #[arg(long, env = "OUTBOX_SWEEP_INTERVAL", default_value = default_sweep_interval(), value_parser = humantime::parse_duration)]
    pub sweep_interval: Duration,
    /// How long the pending index (a GSI, eventually consistent) may still return an item after
    /// it was marked: what this poller marked within it is not published again when a pass reads
    /// it. Longer costs memory (the keys marked in that time, at most 100,000), shorter costs
    /// duplicates.
    #[arg(long, env = "OUTBOX_INDEX_LAG", default_value = default_index_lag(), value_parser = humantime::parse_duration)]
    pub index_lag: Duration,
    /// SQS queue that receives poison events with the item and the reason, then marked
    /// `DEAD_LETTERED` (a letter over the queue's `MaximumMessageSize` goes without the item).
    #[arg(long, env = "DEAD_LETTER_QUEUE_URL")]
    pub dead_letter_queue_url: String,
    /// Items per `Query` page.
    #[arg(long, env = "OUTBOX_PAGE_SIZE", default_value_t = DEFAULT_PAGE_SIZE)]
    pub page_size: i32,
    /// Shards polled at once.
    #[arg(long, env = "OUTBOX_SHARD_CONCURRENCY", default_value_t = 16)]
    pub shard_concurrency: usize,
    /// Status-update calls in flight at once, per shard: each marks up to 25 published events
    /// (one `BatchExecuteStatement`) or one dead-lettered event.
    #[arg(long, env = "MARK_CONCURRENCY", default_value_t = DEFAULT_MARK_CONCURRENCY)]
    pub mark_concurrency: usize,
    /// Longest pause between passes that find nothing to do, or only failures (the pause doubles
    /// from 100 ms up to it), in `run` and `drain` alike.
    #[arg(long, env = "OUTBOX_IDLE_BACKOFF_MAX", default_value = "5s", value_parser = humantime::parse_duration)]
    pub idle_backoff_max: Duration,
    /// After SIGTERM, how long in-flight work may take before it is abandoned (abandoned events
    /// stay pending and are published later).
    #[arg(long, env = "OUTBOX_SHUTDOWN_TIMEOUT", default_value = "8s", value_parser = humantime::parse_duration)]
    pub shutdown_timeout: Duration,
}

/// `relay-poller run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub relay: RelayArgs,
    /// Only events older than this are published, so the poller does not race the stream relay.
    #[arg(long, env = "OUTBOX_GRACE_PERIOD", default_value = "30s", value_parser = humantime::parse_duration)]
    pub grace_period: Duration,
    #[command(flatten)]
    pub leases: LeaseArgs,
    #[command(flatten)]
    pub discarded: DiscardedBatchArgs,
}

/// Where `run` finds the stream batches the mapping discarded, and how often it looks.
#[derive(Debug, Clone, Args)]
pub struct DiscardedBatchArgs {
    /// The bucket of the stream mapping's on-failure destination (the template's
    /// `DiscardedBatchBucket`): `run` re-creates the TTL-deleted pending events of each discarded
    /// batch in it, then deletes the batch (docs/operations.md, "Discarded stream batches").
    /// Unset (or empty): no bucket is read.
    #[arg(long, env = "DISCARDED_BATCH_BUCKET")]
    pub discarded_batch_bucket: Option<String>,
    /// How often `run` reads that bucket.
    #[arg(long, env = "DISCARDED_BATCH_INTERVAL", default_value = default_discarded_batch_interval(), value_parser = humantime::parse_duration)]
    pub discarded_batch_interval: Duration,
}

impl DiscardedBatchArgs {
    /// The bucket and the interval, `None` without a bucket.
    ///
    /// # Errors
    /// [`SettingError`] when the interval is zero.
    pub fn settings(&self) -> Result<Option<(&str, Duration)>, SettingError> {
        let Some(bucket) = self
            .discarded_batch_bucket
            .as_deref()
            .filter(|b| !b.trim().is_empty())
        else {
            return Ok(None);
        };
        if self.discarded_batch_interval.is_zero() {
            return Err(SettingError::of::<Self>(
                "discarded_batch_interval",
                "must be longer than zero",
            ));
        }
        Ok(Some((bucket, self.discarded_batch_interval)))
    }
}

/// `relay-poller adopt-region` and `hand-back-region`.
#[derive(Debug, Clone, Args)]
pub struct RegionCommandArgs {
    /// The region whose partitions change hands (one of the global table's `--regions`).
    #[arg(value_name = "REGION")]
    pub region: outbox_shared::Region,
    /// The lease table the pollers of every region share (global, like the outbox table): the
    /// adoption is written in this process's region (`AWS_REGION`) and replicates to the others.
    #[command(flatten)]
    pub lease_table: LeaseTableArgs,
    /// Print the one-line JSON summary even on a terminal (it is the default elsewhere).
    #[arg(long)]
    pub json: bool,
}

impl RegionCommandArgs {
    /// The lease table.
    ///
    /// # Errors
    /// [`SettingError`] when none is set: the adoptions are kept there.
    pub fn lease_table(&self) -> Result<&str, SettingError> {
        self.lease_table.name().ok_or_else(|| {
            SettingError::of::<LeaseTableArgs>(
                "lease_table",
                "is needed: the regions' adoptions are kept in the lease table",
            )
        })
    }
}

/// `relay-poller recover-discarded`.
#[derive(Debug, Clone, Args)]
pub struct RecoverDiscardedArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// How far ahead a re-created item's `ttl` lies: the same flag in every relay.
    #[command(flatten)]
    pub retention: RetentionArgs,
    /// The bucket of the stream mapping's on-failure destination (the template's
    /// `DiscardedBatchBucket`).
    #[arg(long, env = "DISCARDED_BATCH_BUCKET")]
    pub discarded_batch_bucket: String,
    /// Count what would be re-created and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the one-line JSON summary even on a terminal (it is the default elsewhere).
    #[arg(long)]
    pub json: bool,
}

/// `relay-poller drain`.
#[derive(Debug, Clone, Args)]
pub struct DrainArgs {
    #[command(flatten)]
    pub relay: RelayArgs,
    /// Only events older than this are published (backfill takes everything by default). Where
    /// the variable is set (the ECS task), `drain` uses it too, so a backfill does not race the
    /// stream relay.
    #[arg(long, env = "OUTBOX_GRACE_PERIOD", default_value = "0s", value_parser = humantime::parse_duration)]
    pub grace_period: Duration,
    /// Consecutive passes that publish nothing (only failures) before the drain gives up.
    #[arg(long, env = "OUTBOX_MAX_STALLED_PASSES", default_value_t = 3)]
    pub max_stalled_passes: u32,
    #[command(flatten)]
    pub lease_table: LeaseTableArgs,
    /// Leave the shards a running poller holds a lease on to it (read from `--lease-table` before
    /// each pass) and drain the rest, listed in its summary's `skipped_shards`; without it a drain
    /// polls every shard, leases or not.
    #[arg(
        long,
        env = "OUTBOX_RESPECT_LEASES",
        default_value_t = false,
        value_parser = clap::builder::BoolishValueParser::new(),
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub respect_leases: bool,
}

/// `relay-poller status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// The dead-letter queue, for its depth (left out of the report when unset).
    #[arg(long, env = "DEAD_LETTER_QUEUE_URL")]
    pub dead_letter_queue_url: Option<String>,
    /// Pending items whose `ttl` is closer than this are counted as expiring.
    #[arg(long, env = "OUTBOX_TTL_REFRESH_MARGIN", default_value = default_ttl_refresh_margin(), value_parser = humantime::parse_duration)]
    pub ttl_refresh_margin: Duration,
    /// With a lease table: each shard's owner and lease age, and the live pollers.
    #[command(flatten)]
    pub lease_table: LeaseTableArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// `relay-poller redrive`.
#[derive(Debug, Clone, Args)]
pub struct RedriveArgs {
    #[command(flatten)]
    pub relay: RelayArgs,
    /// Redrive the `DEAD_LETTERED` items of the table instead of the dead-letter queue's messages
    /// (their messages stay; a later queue redrive deletes them as already done).
    #[arg(long)]
    pub from_table: bool,
    /// Only this event (repeatable).
    #[arg(long = "event-id", value_name = "EVENT_ID")]
    pub event_ids: Vec<String>,
    /// Only events of this type.
    #[arg(long)]
    pub event_type: Option<String>,
    /// Only events created at or after this time (RFC 3339, e.g. 2026-11-22T10:00:00Z).
    #[arg(long, value_parser = parse_time)]
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only events created before this time (RFC 3339).
    #[arg(long, value_parser = parse_time)]
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// At most this many events.
    #[arg(long)]
    pub limit: Option<usize>,
    /// Publish the redriven events right away through the normal path (`--publish false`: leave
    /// them to the running relays).
    #[arg(
        long,
        default_value_t = true,
        value_parser = clap::builder::BoolishValueParser::new(),
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub publish: bool,
    /// List what would be redriven and change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the one-line JSON summary even on a terminal (it is the default elsewhere).
    #[arg(long)]
    pub json: bool,
}

/// `relay-poller inspect`.
#[derive(Debug, Clone, Args)]
pub struct InspectArgs {
    /// The outbox table.
    #[arg(long, env = "TABLE_NAME")]
    pub table_name: String,
    /// Event ids to look up.
    #[arg(value_name = "EVENT_ID", required_unless_present = "key")]
    pub event_ids: Vec<String>,
    /// Look up one item by its table key instead.
    #[arg(long, num_args = 2, value_names = ["PK", "SK"], conflicts_with = "event_ids")]
    pub key: Option<Vec<String>>,
    /// Print JSON (one array) instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `--ttl-refresh-margin`'s default as `--help` shows it and clap parses it back (`1day`): the
/// value is written once, as [`crate::poller::DEFAULT_TTL_REFRESH_MARGIN`].
fn default_ttl_refresh_margin() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    duration_text(&TEXT, crate::poller::DEFAULT_TTL_REFRESH_MARGIN)
}

/// `--sweep-interval`'s default as `--help` shows it and clap parses it back (`5m`): the value is
/// written once, as [`crate::poller::DEFAULT_SWEEP_INTERVAL`].
fn default_sweep_interval() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    duration_text(&TEXT, crate::poller::DEFAULT_SWEEP_INTERVAL)
}

/// `--discarded-batch-interval`'s default as `--help` shows it and clap parses it back (`1m`): the
/// value is written once, as [`crate::discarded::DEFAULT_INTERVAL`].
fn default_discarded_batch_interval() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    duration_text(&TEXT, crate::discarded::DEFAULT_INTERVAL)
}

/// `--region-failover-after`'s default as `--help` shows it and clap parses it back (`1m`): the
/// value is written once, as [`crate::failover::DEFAULT_FAILOVER_AFTER`].
fn default_region_failover_after() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    duration_text(&TEXT, crate::failover::DEFAULT_FAILOVER_AFTER)
}

/// `--index-lag`'s default as `--help` shows it and clap parses it back (`5s`): the value is
/// written once, as [`crate::poller::DEFAULT_INDEX_LAG`].
fn default_index_lag() -> &'static str {
    static TEXT: OnceLock<String> = OnceLock::new();
    duration_text(&TEXT, crate::poller::DEFAULT_INDEX_LAG)
}

/// A duration in the form `humantime::parse_duration` reads back. clap takes a default as a
/// `&'static str`: `cell` formats it once, however often the command is built.
fn duration_text(cell: &'static OnceLock<String>, duration: Duration) -> &'static str {
    cell.get_or_init(|| humantime::format_duration(duration).to_string())
}

fn parse_time(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| format!("{text:?} is not an RFC 3339 time such as 2026-11-22T10:00:00Z: {e}"))
}

/// A subset of shards: `3`, `0-7`, `0-3,8-11`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSelection(BTreeSet<u16>);

impl ShardSelection {
    /// Every shard of `count`.
    pub fn all(count: ShardCount) -> Self {
        Self(count.shards().collect())
    }

    /// The shards, ascending.
    pub fn shards(&self) -> Vec<u16> {
        self.0.iter().copied().collect()
    }
}

impl FromStr for ShardSelection {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let mut shards = BTreeSet::new();
        for part in text.split(',').map(str::trim) {
            let number = |s: &str| {
                s.trim()
                    .parse::<u16>()
                    .map_err(|_| format!("{s:?} is not a shard number"))
            };
            let (first, last) = match part.split_once('-') {
                Some((a, b)) => (number(a)?, number(b)?),
                None => (number(part)?, number(part)?),
            };
            if first > last {
                return Err(format!("range {part:?} runs backwards"));
            }
            shards.extend(first..=last);
        }
        Ok(Self(shards))
    }
}

impl fmt::Display for ShardSelection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u16::to_string).collect();
        f.write_str(&parts.join(","))
    }
}

/// Validated index settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexConfig {
    pub outbox: OutboxConfig,
    /// The shards this process polls, ascending (in each region it serves, on a global table).
    pub shards: Vec<u16>,
    /// `--regions`: the global table's, checked against the relay's own region once its SDK
    /// config is loaded ([`Self::partitions`]).
    pub regions: RegionArgs,
}

impl IndexConfig {
    /// The partitions a poller in region `own` (its SDK config's) serves: its region's on a
    /// global table, else the table's.
    ///
    /// # Errors
    /// [`SettingError`] naming `--regions` when they do not describe a global table `own` is part
    /// of.
    pub fn partitions(&self, own: Option<&str>) -> Result<Partitions, SettingError> {
        Ok(Partitions::new(
            self.regions.global_table(own)?,
            self.outbox.shard_count,
            self.shards.clone(),
        ))
    }
}

/// Validated settings of `run` and `drain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    pub index: IndexConfig,
    pub publisher: PublisherConfig,
    pub dead_letter_queue_url: String,
    pub page_size: i32,
    pub shard_concurrency: usize,
    pub mark_concurrency: usize,
    pub idle_backoff_max: Duration,
    pub shutdown_timeout: Duration,
    pub ttl: TtlPolicy,
    pub metrics_namespace: String,
    pub ttl_refresh_margin: Duration,
    pub sweep_interval: Duration,
    pub index_lag: Duration,
}

impl LeaseTableArgs {
    /// The lease table's name, if one is set (an empty value means none, as CloudFormation
    /// passes an unset optional parameter).
    pub fn name(&self) -> Option<&str> {
        self.lease_table.as_deref().filter(|t| !t.trim().is_empty())
    }
}

impl LeaseArgs {
    /// The lease settings of `run`, `None` without a lease table. `shards_selected`: whether
    /// `--shards` is set too, which leases replace.
    ///
    /// # Errors
    /// [`SettingError`] naming the flag and variable out of range or in conflict.
    pub fn settings(&self, shards_selected: bool) -> Result<Option<LeaseSettings>, SettingError> {
        let Some(table) = self.table.name() else {
            return Ok(None);
        };
        if shards_selected {
            return Err(SettingError::of::<TableArgs>(
                "shards",
                format!(
                    "leave it unset with {}: the leases decide which shards each poller polls",
                    SettingError::name_of::<LeaseTableArgs>("lease_table")
                ),
            ));
        }
        if self.lease_renew_interval.is_zero() {
            return Err(SettingError::of::<Self>(
                "lease_renew_interval",
                "must be longer than zero",
            ));
        }
        if self.lease_renew_interval * MIN_RENEWALS_PER_DURATION > self.lease_duration {
            return Err(SettingError::of::<Self>(
                "lease_renew_interval",
                format!(
                    "must be at most a third of {} ({}), so a lease is renewed {MIN_RENEWALS_PER_DURATION} times before it expires",
                    SettingError::of::<Self>("lease_duration", "").flag,
                    humantime::format_duration(self.lease_duration)
                ),
            ));
        }
        Ok(Some(LeaseSettings {
            table_name: table.to_owned(),
            duration: self.lease_duration,
            renew_interval: self.lease_renew_interval,
            create_table: self.create_lease_table,
        }))
    }
}

impl LeaseArgs {
    /// How regions fail over on a global table: a region round every renew interval, failover
    /// and hand-back after `--region-failover-after`.
    ///
    /// # Errors
    /// [`SettingError`] when `--region-failover-after` is shorter than three renew intervals (one
    /// lost heartbeat write would fail a region over).
    pub fn failover(&self) -> Result<FailoverSettings, SettingError> {
        if self.lease_renew_interval * MIN_RENEWALS_PER_DURATION > self.region_failover_after {
            return Err(SettingError::of::<Self>(
                "region_failover_after",
                format!(
                    "must be at least {MIN_RENEWALS_PER_DURATION} times {} ({}): each region \
                     heartbeat is written once a renew interval, and one lost write must not fail \
                     a region over",
                    SettingError::of::<Self>("lease_renew_interval", "").flag,
                    humantime::format_duration(self.lease_renew_interval)
                ),
            ));
        }
        Ok(FailoverSettings::new(
            self.region_failover_after,
            self.lease_renew_interval,
        ))
    }
}

impl DrainArgs {
    /// The lease table a drain leaves owned shards to, `None` without `--respect-leases`.
    ///
    /// # Errors
    /// [`SettingError`] when `--respect-leases` is set without a lease table.
    pub fn respected_lease_table(&self) -> Result<Option<&str>, SettingError> {
        match (self.respect_leases, self.lease_table.name()) {
            (false, _) => Ok(None),
            (true, Some(table)) => Ok(Some(table)),
            (true, None) => Err(SettingError::of::<Self>(
                "respect_leases",
                format!(
                    "needs {}",
                    SettingError::name_of::<LeaseTableArgs>("lease_table")
                ),
            )),
        }
    }
}

impl TableArgs {
    /// # Errors
    /// [`SettingError`] naming the flag and variable that is empty or out of range.
    pub fn validate(&self) -> Result<IndexConfig, SettingError> {
        SettingError::non_empty::<Self>("table_name", &self.table_name)?;
        SettingError::non_empty::<Self>("index_name", &self.index_name)?;
        let selection = self
            .shards
            .clone()
            .unwrap_or_else(|| ShardSelection::all(self.shard_count));
        if let Some(&beyond) = selection.0.iter().find(|&&s| s >= self.shard_count.get()) {
            return Err(SettingError::of::<Self>(
                "shards",
                format!(
                    "shard {beyond} does not exist with {} {} (shards are 0-{})",
                    SettingError::of::<Self>("shard_count", "").flag,
                    self.shard_count,
                    self.shard_count.get() - 1
                ),
            ));
        }
        let outbox = OutboxConfig {
            index_name: self.index_name.clone(),
            shard_count: self.shard_count,
            ..OutboxConfig::new(&self.table_name)
        };
        Ok(IndexConfig {
            outbox,
            shards: selection.shards(),
            regions: self.regions.clone(),
        })
    }
}

impl RelayArgs {
    /// # Errors
    /// [`SettingError`] naming the flag and variable that is empty or out of range.
    pub fn validate(&self) -> Result<RelayConfig, SettingError> {
        let index = self.table.validate()?;
        let publisher = self.publisher.config()?;
        let ttl = self.retention.ttl_policy()?;
        if self.ttl_refresh_margin >= ttl.published {
            return Err(SettingError::of::<Self>(
                "ttl_refresh_margin",
                format!(
                    "must be shorter than {} ({}), or every read would extend every ttl",
                    SettingError::of::<Self>("ttl_retention", "").flag,
                    humantime::format_duration(ttl.published)
                ),
            ));
        }
        if self.sweep_interval.is_zero() {
            return Err(SettingError::of::<Self>(
                "sweep_interval",
                "must be longer than zero",
            ));
        }
        SettingError::non_empty::<Self>("dead_letter_queue_url", &self.dead_letter_queue_url)?;
        SettingError::in_range::<Self, _>("page_size", self.page_size, 1, MAX_PAGE_SIZE)?;
        SettingError::in_range::<Self, _>(
            "shard_concurrency",
            self.shard_concurrency,
            1,
            MAX_CONCURRENCY,
        )?;
        SettingError::in_range::<Self, _>(
            "mark_concurrency",
            self.mark_concurrency,
            1,
            MAX_CONCURRENCY,
        )?;
        Ok(RelayConfig {
            index,
            publisher,
            dead_letter_queue_url: self.dead_letter_queue_url.clone(),
            page_size: self.page_size,
            shard_concurrency: self.shard_concurrency,
            mark_concurrency: self.mark_concurrency,
            idle_backoff_max: self.idle_backoff_max,
            shutdown_timeout: self.shutdown_timeout,
            ttl,
            metrics_namespace: self.metrics.metrics_namespace.clone(),
            ttl_refresh_margin: self.ttl_refresh_margin,
            sweep_interval: self.sweep_interval,
            index_lag: self.index_lag,
        })
    }
}

#[cfg(test)]
mod tests;
