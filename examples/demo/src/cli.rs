//! The demo's command line: how many orders, how fast, which binaries and which stack.

use std::path::PathBuf;

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser};
use outbox_shared::ShardCount;
use relay_runtime::TargetKind;

/// Runs the outbox relay end to end on the local emulator and prints what was delivered.
#[derive(Debug, Parser)]
#[command(name = "outbox-demo", version)]
pub(crate) struct Args {
    /// What the relays publish to, and where the demo reads what a consumer receives: the classic
    /// bus (a rule into a standard sink queue), the Custom Event Bus (the template's FIFO
    /// subscriber into a FIFO sink queue, on the local double), a FIFO SNS topic (delivering into
    /// a FIFO SQS queue), a FIFO SQS queue (read itself), or a Kinesis stream (read back with
    /// GetRecords). Named as the relays' `EVENT_TARGET_KIND` names them. `--bus` is a deprecated
    /// alias, removed in release 0.2.0.
    #[arg(long, alias = "bus", value_enum, default_value_t = TargetKind::Classic)]
    pub(crate) target: TargetKind,
    /// Regions: 1 (the phases above, on one table), or 2: the outbox table global in two regions
    /// on the local replicator, a writer, a stream relay and pollers in each, the second
    /// region's relays killed and the region cut off midway, then brought back; the summary per
    /// region and overall, with the failover's figures (docs/demo.md, "Two regions"). Its
    /// writers write at --region-rate for a fixed time (--orders, --rate and the large orders
    /// are the one-region run's); classic bus only. `make demo DEMO_ARGS="--regions 2"` starts
    /// the emulators with both regions.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=2))]
    pub(crate) regions: u8,
    /// With --regions 2: orders per second each region's writer writes. The local replicator (a
    /// Python process) applies about a hundred writes a second on the shared 2-core machine, and
    /// each order is two to six item writes and a mark, the pollers' leases more.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub(crate) region_rate: u64,
    /// Orders written while the stream relay runs.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) orders: u64,
    /// Orders written during the simulated stream outage (default: a fifth of --orders, at least 1).
    #[arg(long, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub(crate) outage_orders: Option<u64>,
    /// Percent of the orders that get follow-up events (two status changes, through the writer's
    /// optimistic-concurrency update), so their aggregates have three events to keep in order.
    #[arg(long, default_value_t = 25, value_parser = clap::value_parser!(u64).range(0..=100))]
    pub(crate) follow_up_percent: u64,
    /// Percent of the orders that are large, spread evenly, their payloads through the payload
    /// bucket (the claim check), every other one each way: about 300 KB of line items, over the
    /// target's 256 KiB entry (the relay that publishes it stores its payload in S3), and about
    /// 1 MiB, over DynamoDB's 400 KB item (the writer stores its payload in S3 first). 0 writes
    /// none.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=100))]
    pub(crate) large_order_percent: u64,
    /// Percent of the orders (the first ones, at --rate) written and relayed before the measured
    /// window, to warm the emulators: DynamoDB Local's JVM loads and compiles the paths of a
    /// write, a stream read and a mark on their first use, and the first batch's marks take 0.3 to
    /// 0.5 s, a backlog the next second of orders waits behind. Not measured; counted in every
    /// other figure. 0 measures from the first order.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=50))]
    pub(crate) warm_up_percent: u64,
    /// Shards of the pending-event index (writer and poller).
    #[arg(long, default_value = "16")]
    pub(crate) shard_count: ShardCount,
    /// Stream records per handler invocation of the stream relay.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub(crate) batch_size: u64,
    /// Orders written per second while the stream relay runs: a steady load, as a running service
    /// makes, so the latencies are the relay's and not a queue in front of the emulator.
    #[arg(long, default_value_t = DEFAULT_RATE, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub(crate) rate: u64,
    /// Orders written concurrently at most.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub(crate) concurrency: u64,
    /// How long to wait for the stream relay to publish the first phase's events.
    #[arg(long, default_value = "5m")]
    pub(crate) timeout: humantime::Duration,
    /// Directory holding `relay-stream-local` and `relay-poller` (default: beside this binary).
    #[arg(long)]
    pub(crate) bin_dir: Option<PathBuf>,
    /// Where the relays' logs and metrics are written (default: a new directory under the
    /// system's temporary directory).
    #[arg(long)]
    pub(crate) log_dir: Option<PathBuf>,
    /// Also print the summary as one JSON line on stdout.
    #[arg(long)]
    pub(crate) json: bool,
    /// Use an existing table instead of provisioning one (with --event-bus-name, --sink-queue-url and
    /// --dead-letter-queue-url, and --payload-bucket for large orders; for --target custom the
    /// bus's ARN and a queue of a FIFO subscriber; buses only).
    #[arg(long, requires_all = ["event_bus_name", "sink_queue_url", "dead_letter_queue_url"])]
    pub(crate) table_name: Option<String>,
    #[arg(long, requires = "table_name")]
    pub(crate) event_bus_name: Option<String>,
    /// A queue that receives every event on the bus.
    #[arg(long, requires = "table_name")]
    pub(crate) sink_queue_url: Option<String>,
    #[arg(long, requires = "table_name")]
    pub(crate) dead_letter_queue_url: Option<String>,
    /// The existing stack's payload bucket (its PayloadBucketName output): the writer's and the
    /// relays' (`PAYLOAD_BUCKET`); needed for large orders (--large-order-percent).
    #[arg(long, requires = "table_name")]
    pub(crate) payload_bucket: Option<String>,
}

impl Args {
    /// The command line, parsed and checked; on an error, exits as clap does (code 2, with the
    /// usage).
    pub(crate) fn parse_checked() -> Self {
        let args = Self::parse();
        if let Err(message) = args.check() {
            Self::command()
                .error(ErrorKind::MissingRequiredArgument, message)
                .exit();
        }
        args
    }

    /// What clap's attributes cannot say: large orders on an existing stack need its payload
    /// bucket (the demo provisions one with its own stack).
    fn check(&self) -> Result<(), String> {
        if self.table_name.is_some()
            && self.payload_bucket.is_none()
            && self.large_order_percent > 0
        {
            return Err(format!(
                "--large-order-percent {} writes large orders, whose payloads go through the \
                 payload bucket: with an existing stack, pass its bucket (its PayloadBucketName \
                 output) as --payload-bucket, or --large-order-percent 0",
                self.large_order_percent
            ));
        }
        Ok(())
    }
}

/// Default of `--rate`: orders per second the local emulators relay and deliver with room to
/// spare (measured in docs/benchmarks.md), so the figures show a steady state.
const DEFAULT_RATE: u64 = 50;

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        Args::try_parse_from(["outbox-demo"].iter().chain(extra)).unwrap()
    }

    const EXISTING: [&str; 8] = [
        "--table-name",
        "t",
        "--event-bus-name",
        "b",
        "--sink-queue-url",
        "s",
        "--dead-letter-queue-url",
        "d",
    ];

    #[test]
    fn large_orders_are_on_by_default_and_on_an_existing_stack_need_its_payload_bucket() {
        // The demo's own stack has its bucket: large orders by default
        assert_eq!(args(&[]).large_order_percent, 1);
        assert_eq!(args(&[]).check(), Ok(()));

        // An existing stack without its bucket: refused, naming both ways out
        let refused = args(&EXISTING).check().unwrap_err();
        for named in [
            "--large-order-percent 1",
            "--payload-bucket",
            "--large-order-percent 0",
        ] {
            assert!(refused.contains(named), "{named}: {refused}");
        }

        // With its bucket, or without large orders, it runs
        let with_bucket = [&EXISTING[..], &["--payload-bucket", "p"]].concat();
        assert_eq!(args(&with_bucket).check(), Ok(()));
        assert_eq!(args(&with_bucket).payload_bucket.as_deref(), Some("p"));
        let without_large = [&EXISTING[..], &["--large-order-percent", "0"]].concat();
        assert_eq!(args(&without_large).check(), Ok(()));

        // A bucket alone is not a stack, and a share is a percent
        assert!(Args::try_parse_from(["outbox-demo", "--payload-bucket", "p"]).is_err());
        assert!(Args::try_parse_from(["outbox-demo", "--large-order-percent", "101"]).is_err());
    }
}
