//! Typed configuration of the relay, read once at start-up from flags or the environment.
//!
//! The Lambda reads the same variables as the local runner's flags, so one struct serves both.

use clap::builder::BoolishValueParser;
use relay_runtime::config::dead_letter_queue_url;
use relay_runtime::metrics::MetricsArgs;
use relay_runtime::{PublisherArgs, PublisherConfig, RegionArgs, RetentionArgs, SettingError};

use crate::handler::HandlerOptions;

pub use crate::handler::{DEFAULT_DEADLINE_MARGIN, DEFAULT_MARK_CONCURRENCY};

/// Most status updates in flight one batch may have.
pub const MAX_MARK_CONCURRENCY: usize = 10_000;

/// The Lambda's configuration, read from the environment only: each setting's variable, as
/// clap declares it (the function has no command line).
#[derive(Debug, Clone, clap::Parser)]
#[command(
    name = "relay-stream",
    about = "The stream relay, an AWS Lambda function on the table's DynamoDB Stream (packaged as \
             `bootstrap`): it publishes the new outbox items and marks them. It has no command \
             line: each setting is its environment variable."
)]
pub struct LambdaEnv {
    #[command(flatten)]
    pub relay: RelayArgs,
    #[command(flatten)]
    pub metrics: MetricsArgs,
}

/// Settings shared by the Lambda (environment only) and `relay-stream-local` (flags or environment).
#[derive(Debug, Clone, clap::Args)]
pub struct RelayArgs {
    /// The outbox table (items are marked published there).
    #[arg(long, env = "TABLE_NAME")]
    pub table_name: String,
    /// Where, as whom and how events are published: the same flags in every relay.
    #[command(flatten)]
    pub publisher: PublisherArgs,
    /// How long marked items stay: the same flag in every relay.
    #[command(flatten)]
    pub retention: RetentionArgs,
    /// The global table's regions: the same flag in every relay.
    #[command(flatten)]
    pub regions: RegionArgs,
    /// The poller fleet's lease table, needed on a global table (`--regions`): there the relay
    /// reads, once a batch, whether another region's pollers adopted its region
    /// (`ADOPTION#{region}`), and while they have, leaves its region's events to them
    /// (docs/global-tables.md, "Failover and hand-back"). Unused on a single-region table.
    #[arg(long, env = "OUTBOX_LEASE_TABLE")]
    pub lease_table: Option<String>,
    /// SQS queue for poison records: each goes there with its record and a reason, then is marked
    /// `DEAD_LETTERED`. A letter larger than the queue's `MaximumMessageSize` (read with
    /// `sqs:GetQueueAttributes`) goes without its record, which the item keeps. Without a queue,
    /// poison records are reported as batch item failures so the event source mapping's
    /// on-failure destination takes them.
    #[arg(long, env = "DEAD_LETTER_QUEUE_URL")]
    pub dead_letter_queue_url: Option<String>,
    /// Status-update calls in flight at once: each marks up to 25 published events (one
    /// `BatchExecuteStatement`) or one dead-lettered event.
    #[arg(long, env = "MARK_CONCURRENCY", default_value_t = DEFAULT_MARK_CONCURRENCY)]
    pub mark_concurrency: usize,
    /// Stop publishing a batch at the first event that could not be published, so nothing after it
    /// leaves before it (strict order, at the cost of throughput).
    #[arg(
        long,
        env = "STOP_AT_FIRST_FAILURE",
        default_value_t = false,
        value_parser = BoolishValueParser::new(),
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub stop_at_first_failure: bool,
    /// No publish starts later than this before the invocation's deadline (the Lambda's timeout):
    /// what was published is marked, the rest is reported for re-delivery. Keep it above the SDK's
    /// operation timeout (10 s) plus the time to mark a batch.
    #[arg(long, env = "DEADLINE_MARGIN", default_value = "12s", value_parser = humantime::parse_duration)]
    pub deadline_margin: std::time::Duration,
    /// Leave an aggregate whose event keeps failing to the poller instead of blocking the stream
    /// shard: its failed and later events stay pending and the poller publishes them in order
    /// after its grace period; the batch reports success for the rest. Needs a running poller (the
    /// template deploys one and turns this on).
    #[arg(
        long,
        env = "HOLD_FAILED_AGGREGATES",
        default_value_t = false,
        value_parser = BoolishValueParser::new(),
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub hold_failed_aggregates: bool,
}

impl RelayArgs {
    /// The dead-letter queue URL, if one is configured (an empty value means none, as
    /// CloudFormation passes an unset optional parameter).
    pub fn dead_letter_queue_url(&self) -> Option<&str> {
        dead_letter_queue_url(self.dead_letter_queue_url.as_deref())
    }

    /// The validated publisher configuration.
    ///
    /// # Errors
    /// [`SettingError`] naming the flag and variable whose value is empty or out of range.
    pub fn publisher_config(&self) -> Result<PublisherConfig, SettingError> {
        self.publisher.config()
    }

    /// The handler options, for a single-region table: [`Self::handler_options_in`] adds the
    /// relay's region.
    ///
    /// # Errors
    /// [`SettingError`] when the table name is empty or the mark concurrency is out of range.
    pub fn handler_options(&self) -> Result<HandlerOptions, SettingError> {
        SettingError::non_empty::<Self>("table_name", &self.table_name)?;
        SettingError::in_range::<Self, _>(
            "mark_concurrency",
            self.mark_concurrency,
            1,
            MAX_MARK_CONCURRENCY,
        )?;
        let publisher = self.publisher.config()?;
        Ok(HandlerOptions {
            stop_at_first_failure: self.stop_at_first_failure,
            strict_chunk_size: publisher.max_entries_per_call.max(1),
            mark_concurrency: self.mark_concurrency,
            deadline_margin: self.deadline_margin,
            hold_failed_aggregates: self.hold_failed_aggregates,
            global_table: None,
        })
    }
}

impl RelayArgs {
    /// The handler options of a relay in region `own` (its SDK config's): with `--regions`, it
    /// publishes only that region's events.
    ///
    /// # Errors
    /// [`SettingError`] as [`Self::handler_options`], naming `--regions` when they do not
    /// describe a global table `own` is part of, or `--lease-table` when a global table's relay
    /// has none.
    pub fn handler_options_in(&self, own: Option<&str>) -> Result<HandlerOptions, SettingError> {
        let global_table = self.regions.global_table(own)?;
        if global_table.is_some() && self.adoption_table().is_none() {
            return Err(SettingError::of::<Self>(
                "lease_table",
                "is required on a global table (--regions): the relay reads there whether \
                 another region adopted its region's events (the poller fleet's lease table)",
            ));
        }
        Ok(HandlerOptions {
            global_table,
            ..self.handler_options()?
        })
    }

    /// The lease table the relay reads its region's adoption from: on a global table only.
    pub fn adoption_table(&self) -> Option<&str> {
        self.regions
            .regions
            .as_ref()
            .is_some_and(|r| !r.0.is_empty())
            .then_some(self.lease_table.as_deref())
            .flatten()
            .filter(|t| !t.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        relay: RelayArgs,
    }

    fn parse(args: &[&str]) -> RelayArgs {
        let base = [
            "relay",
            "--table-name",
            "t",
            "--target",
            "bus",
            "--source",
            "orders",
        ];
        Cli::try_parse_from(base.iter().chain(args)).unwrap().relay
    }

    #[test]
    fn defaults_are_valid() {
        let args = parse(&[]);
        let publisher = args.publisher_config().unwrap();
        assert_eq!(publisher.max_entries_per_call, 10);
        assert_eq!(publisher.source, "orders");
        assert!(!args.handler_options().unwrap().stop_at_first_failure);
        assert_eq!(args.dead_letter_queue_url(), None);
    }

    #[test]
    fn out_of_range_values_name_the_flag() {
        let err = parse(&["--max-entries-per-call", "11"])
            .publisher_config()
            .unwrap_err();
        assert_eq!(err.flag, "--max-entries-per-call");
        assert!(err.to_string().contains("MAX_ENTRIES_PER_CALL"), "{err}");
        let err = parse(&["--mark-concurrency", "0"])
            .handler_options()
            .unwrap_err();
        assert_eq!(err.flag, "--mark-concurrency");
    }

    #[test]
    fn strict_order_flag_and_empty_dead_letter_queue() {
        let args = parse(&["--stop-at-first-failure", "--dead-letter-queue-url", " "]);
        assert!(args.handler_options().unwrap().stop_at_first_failure);
        assert_eq!(args.dead_letter_queue_url(), None);
        let args = parse(&["--stop-at-first-failure", "false"]);
        assert!(!args.stop_at_first_failure);
    }

    #[test]
    fn a_global_tables_relay_needs_the_lease_table_it_reads_its_adoption_from() {
        let global = ["--regions", "us-east-1,eu-west-1"];
        let err = parse(&global)
            .handler_options_in(Some("eu-west-1"))
            .unwrap_err();
        assert_eq!(err.flag, "--lease-table");
        assert!(err.to_string().contains("OUTBOX_LEASE_TABLE"), "{err}");
        assert!(err.to_string().contains("global table"), "{err}");
        let args = parse(&[&global[..], &["--lease-table", "leases"]].concat());
        assert!(args.handler_options_in(Some("eu-west-1")).is_ok());
        assert_eq!(args.adoption_table(), Some("leases"));
        // A single-region relay reads no adoption, whatever the lease table.
        let args = parse(&["--lease-table", "leases"]);
        assert_eq!(args.adoption_table(), None);
        assert!(args.handler_options_in(Some("eu-west-1")).is_ok());
    }
}
