//! Command line and environment configuration, parsed by clap and validated once at start-up.
//!
//! Every flag can also be set through the environment variable named in its help. Validation
//! errors name the flag, so an operator knows which setting to fix.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use outbox_shared::limits::PUT_EVENTS_MAX_ENTRIES;
use outbox_shared::schema::DEFAULT_INDEX_NAME;
use outbox_shared::shard::DEFAULT_SHARD_COUNT;
use outbox_shared::{OutboxConfig, PublisherConfig, ShardCount};

/// `Query` returns at most 1 MB per page whatever the limit; beyond this many items a page of
/// typical outbox events would hit that cap anyway.
pub const MAX_PAGE_SIZE: i32 = 1000;

/// Default items per `Query` page: ten full `PutEvents` calls.
pub const DEFAULT_PAGE_SIZE: i32 = 100;

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
    /// Backfill: publish everything pending, print a one-line JSON summary, exit 0 when the index
    /// is empty and non-zero when events remain unpublished.
    Drain(DrainArgs),
    /// Show the backlog per shard and the age of the oldest pending event.
    Status(StatusArgs),
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
    /// can split the work.
    #[arg(long, env = "OUTBOX_SHARDS")]
    pub shards: Option<ShardSelection>,
}

/// How events are published and how hard the poller works.
#[derive(Debug, Clone, Args)]
pub struct RelayArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// The EventBridge bus events are published to.
    #[arg(long, env = "EVENT_BUS_NAME")]
    pub event_bus_name: String,
    /// EventBridge `Source` of every event.
    #[arg(long, env = "EVENT_SOURCE")]
    pub source: String,
    /// SQS queue that receives poison events with the item and the reason.
    #[arg(long, env = "DEAD_LETTER_QUEUE_URL")]
    pub dead_letter_queue_url: String,
    /// Items per `Query` page.
    #[arg(long, env = "OUTBOX_PAGE_SIZE", default_value_t = DEFAULT_PAGE_SIZE)]
    pub page_size: i32,
    /// Shards polled at once.
    #[arg(long, env = "OUTBOX_SHARD_CONCURRENCY", default_value_t = 16)]
    pub shard_concurrency: usize,
    /// `PutEvents` calls in flight at once, per shard.
    #[arg(long, env = "OUTBOX_PUBLISH_CONCURRENCY", default_value_t = 10)]
    pub publish_concurrency: usize,
    /// Conditional status flips in flight at once, per shard.
    #[arg(long, env = "OUTBOX_FLIP_CONCURRENCY", default_value_t = 32)]
    pub flip_concurrency: usize,
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
    /// Longest pause between polls when the index is idle (the pause doubles from 100 ms up to it).
    #[arg(long, env = "OUTBOX_IDLE_BACKOFF_MAX", default_value = "5s", value_parser = humantime::parse_duration)]
    pub idle_backoff_max: Duration,
}

/// `relay-poller drain`.
#[derive(Debug, Clone, Args)]
pub struct DrainArgs {
    #[command(flatten)]
    pub relay: RelayArgs,
    /// Only events older than this are published (backfill takes everything by default).
    #[arg(long, env = "OUTBOX_GRACE_PERIOD", default_value = "0s", value_parser = humantime::parse_duration)]
    pub grace_period: Duration,
    /// Consecutive passes that publish nothing (only failures) before the drain gives up.
    #[arg(long, env = "OUTBOX_MAX_STALLED_PASSES", default_value_t = 3)]
    pub max_stalled_passes: u32,
}

/// `relay-poller status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub table: TableArgs,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
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

/// A setting that is missing or out of range, with the flag that sets it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {flag}: {reason}")]
pub struct ConfigError {
    pub flag: &'static str,
    pub reason: String,
}

impl ConfigError {
    fn new(flag: &'static str, reason: impl Into<String>) -> Self {
        Self {
            flag,
            reason: reason.into(),
        }
    }
}

/// Validated index settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexConfig {
    pub outbox: OutboxConfig,
    /// The shards this process polls, ascending.
    pub shards: Vec<u16>,
}

/// Validated settings of `run` and `drain`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayConfig {
    pub index: IndexConfig,
    pub publisher: PublisherConfig,
    pub dead_letter_queue_url: String,
    pub page_size: i32,
    pub shard_concurrency: usize,
    pub flip_concurrency: usize,
    pub shutdown_timeout: Duration,
}

fn non_empty(flag: &'static str, value: &str) -> Result<(), ConfigError> {
    if value.trim().is_empty() {
        return Err(ConfigError::new(flag, "must not be empty"));
    }
    Ok(())
}

fn at_least_one(flag: &'static str, value: usize, max: usize) -> Result<(), ConfigError> {
    if !(1..=max).contains(&value) {
        return Err(ConfigError::new(
            flag,
            format!("must be between 1 and {max}, got {value}"),
        ));
    }
    Ok(())
}

impl TableArgs {
    /// # Errors
    /// [`ConfigError`] naming the flag that is empty or out of range.
    pub fn validate(&self) -> Result<IndexConfig, ConfigError> {
        non_empty("--table-name", &self.table_name)?;
        non_empty("--index-name", &self.index_name)?;
        let selection = self
            .shards
            .clone()
            .unwrap_or_else(|| ShardSelection::all(self.shard_count));
        if let Some(&beyond) = selection.0.iter().find(|&&s| s >= self.shard_count.get()) {
            return Err(ConfigError::new(
                "--shards",
                format!(
                    "shard {beyond} does not exist with --shard-count {} (shards are 0-{})",
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
        })
    }
}

impl RelayArgs {
    /// # Errors
    /// [`ConfigError`] naming the flag that is empty or out of range.
    pub fn validate(&self) -> Result<RelayConfig, ConfigError> {
        let index = self.table.validate()?;
        non_empty("--event-bus-name", &self.event_bus_name)?;
        non_empty("--source", &self.source)?;
        non_empty("--dead-letter-queue-url", &self.dead_letter_queue_url)?;
        if !(1..=MAX_PAGE_SIZE).contains(&self.page_size) {
            return Err(ConfigError::new(
                "--page-size",
                format!(
                    "must be between 1 and {MAX_PAGE_SIZE}, got {}",
                    self.page_size
                ),
            ));
        }
        at_least_one("--shard-concurrency", self.shard_concurrency, 1024)?;
        at_least_one("--publish-concurrency", self.publish_concurrency, 1024)?;
        at_least_one("--flip-concurrency", self.flip_concurrency, 1024)?;
        let publisher = PublisherConfig {
            max_entries_per_call: PUT_EVENTS_MAX_ENTRIES,
            max_concurrency: self.publish_concurrency,
            ..PublisherConfig::new(&self.event_bus_name, &self.source)
        };
        publisher
            .validate()
            .map_err(|e| ConfigError::new("--event-bus-name/--source", e.to_string()))?;
        Ok(RelayConfig {
            index,
            publisher,
            dead_letter_queue_url: self.dead_letter_queue_url.clone(),
            page_size: self.page_size,
            shard_concurrency: self.shard_concurrency,
            flip_concurrency: self.flip_concurrency,
            shutdown_timeout: self.shutdown_timeout,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("relay-poller").chain(args.iter().copied()))
    }

    const RELAY: &[&str] = &[
        "--table-name",
        "t",
        "--event-bus-name",
        "bus",
        "--source",
        "orders",
        "--dead-letter-queue-url",
        "http://q",
    ];

    fn drain_with(extra: &[&str]) -> Result<RelayConfig, ConfigError> {
        let args: Vec<&str> = ["drain"]
            .iter()
            .chain(RELAY)
            .chain(extra)
            .copied()
            .collect();
        match parse(&args).unwrap().command {
            Command::Drain(d) => d.relay.validate(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parses_shard_selections() {
        let s: ShardSelection = "0-3,8,10-11".parse().unwrap();
        assert_eq!(s.shards(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert_eq!("5".parse::<ShardSelection>().unwrap().shards(), vec![5]);
        assert!("7-3".parse::<ShardSelection>().is_err());
        assert!("a-b".parse::<ShardSelection>().is_err());
        assert!("".parse::<ShardSelection>().is_err());
    }

    #[test]
    fn defaults_poll_every_shard_of_gsi1() {
        let config = drain_with(&[]).unwrap();
        assert_eq!(config.index.shards, (0..16).collect::<Vec<_>>());
        assert_eq!(config.index.outbox.index_name, "GSI1");
        assert_eq!(config.publisher.max_entries_per_call, 10);
        assert_eq!(config.page_size, DEFAULT_PAGE_SIZE);
    }

    #[test]
    fn shard_subset_must_exist() {
        let config = drain_with(&["--shard-count", "8", "--shards", "4-7"]).unwrap();
        assert_eq!(config.index.shards, vec![4, 5, 6, 7]);
        let err = drain_with(&["--shard-count", "8", "--shards", "4-8"]).unwrap_err();
        assert_eq!(err.flag, "--shards");
    }

    #[test]
    fn errors_name_the_flag() {
        assert_eq!(
            drain_with(&["--page-size", "0"]).unwrap_err().flag,
            "--page-size"
        );
        assert_eq!(
            drain_with(&["--flip-concurrency", "0"]).unwrap_err().flag,
            "--flip-concurrency"
        );
        let args: Vec<&str> = ["drain", "--table-name", " "]
            .iter()
            .chain(&RELAY[2..])
            .copied()
            .collect();
        let Command::Drain(d) = parse(&args).unwrap().command else {
            panic!()
        };
        assert_eq!(d.relay.validate().unwrap_err().flag, "--table-name");
    }

    #[test]
    fn missing_and_malformed_flags_are_rejected_by_name() {
        let err = parse(&["drain", "--table-name", "t"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--event-bus-name"), "{err}");
        let err = parse(&["status", "--table-name", "t", "--shard-count", "0"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--shard-count"), "{err}");
        let err = parse(&["run", "--grace-period", "soon"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("--grace-period"), "{err}");
    }

    #[test]
    fn grace_period_defaults_differ_by_mode() {
        let args: Vec<&str> = ["run"].iter().chain(RELAY).copied().collect();
        let Command::Run(run) = parse(&args).unwrap().command else {
            panic!()
        };
        assert_eq!(run.grace_period, Duration::from_secs(30));
        let args: Vec<&str> = ["drain"].iter().chain(RELAY).copied().collect();
        let Command::Drain(drain) = parse(&args).unwrap().command else {
            panic!()
        };
        assert_eq!(drain.grace_period, Duration::ZERO);
    }
}
