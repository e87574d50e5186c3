//! Typed configuration of the relay, read once at start-up from flags or the environment.
//!
//! The Lambda reads the same variables as the local runner's flags, so one struct serves both.

use clap::builder::BoolishValueParser;
use outbox_shared::PublisherConfig;
use outbox_shared::limits::{PUT_EVENTS_DEFAULT_MAX_BYTES, PUT_EVENTS_MAX_ENTRIES};

use crate::handler::HandlerOptions;

/// Default for `MARK_CONCURRENCY`: one status update per record of a default-sized (100) batch,
/// so marking a batch published costs one round trip.
pub const DEFAULT_MARK_CONCURRENCY: usize = 100;

/// Settings shared by the Lambda (environment only) and `relay-stream-local` (flags or environment).
#[derive(Debug, Clone, clap::Args)]
pub struct RelayArgs {
    /// The outbox table (items are marked published there).
    #[arg(long, env = "TABLE_NAME")]
    pub table_name: String,
    /// The EventBridge bus events are published to.
    #[arg(long, env = "EVENT_BUS_NAME")]
    pub event_bus_name: String,
    /// EventBridge `Source` of every event.
    #[arg(long = "source", env = "EVENT_SOURCE")]
    pub source: String,
    /// SQS queue for poison records. Without it, poison records are reported as batch item
    /// failures so the event source mapping's on-failure destination takes them.
    #[arg(long, env = "DEAD_LETTER_QUEUE_URL")]
    pub dead_letter_queue_url: Option<String>,
    /// Entries per `PutEvents` call (1..=10).
    #[arg(long, env = "MAX_ENTRIES_PER_CALL", default_value_t = PUT_EVENTS_MAX_ENTRIES)]
    pub max_entries_per_call: usize,
    /// Size budget of one `PutEvents` request, as EventBridge counts entry sizes.
    #[arg(long, env = "MAX_REQUEST_BYTES", default_value_t = PUT_EVENTS_DEFAULT_MAX_BYTES)]
    pub max_request_bytes: usize,
    /// Largest entry; larger events are dead-lettered without a call.
    #[arg(long, env = "MAX_ENTRY_BYTES", default_value_t = PUT_EVENTS_DEFAULT_MAX_BYTES)]
    pub max_entry_bytes: usize,
    /// `PutEvents` calls in flight at once.
    #[arg(long, env = "PUBLISH_CONCURRENCY", default_value_t = 16)]
    pub publish_concurrency: usize,
    /// Attempts per entry (first try included) for retryable failures.
    #[arg(long, env = "PUBLISH_MAX_ATTEMPTS", default_value_t = 5)]
    pub publish_max_attempts: usize,
    /// Status updates (mark published / dead-lettered) in flight at once.
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
}

/// A setting out of range, naming the flag and the environment variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid configuration: {message} (set --{flag} / {env})")]
pub struct RelayConfigError {
    pub flag: &'static str,
    pub env: &'static str,
    pub message: String,
}

impl RelayArgs {
    /// The dead-letter queue URL, if one is configured (an empty value means none, as
    /// CloudFormation passes an unset optional parameter).
    pub fn dead_letter_queue_url(&self) -> Option<&str> {
        self.dead_letter_queue_url
            .as_deref()
            .map(str::trim)
            .filter(|url| !url.is_empty())
    }

    /// The validated publisher configuration.
    ///
    /// # Errors
    /// [`RelayConfigError`] naming the flag whose value is empty or out of range.
    pub fn publisher_config(&self) -> Result<PublisherConfig, RelayConfigError> {
        let config = PublisherConfig {
            max_entries_per_call: self.max_entries_per_call,
            max_request_bytes: self.max_request_bytes,
            max_entry_bytes: self.max_entry_bytes,
            max_concurrency: self.publish_concurrency,
            max_attempts: self.publish_max_attempts,
            ..PublisherConfig::new(&self.event_bus_name, &self.source)
        };
        config.validate().map_err(|err| {
            let (flag, env) = match &err {
                outbox_shared::ConfigError::Empty { setting }
                | outbox_shared::ConfigError::OutOfRange { setting, .. } => flag_of(setting),
            };
            RelayConfigError {
                flag,
                env,
                message: err.to_string(),
            }
        })?;
        Ok(config)
    }

    /// The handler options.
    ///
    /// # Errors
    /// [`RelayConfigError`] when the table name is empty or the mark concurrency is zero.
    pub fn handler_options(&self) -> Result<HandlerOptions, RelayConfigError> {
        if self.table_name.trim().is_empty() {
            return Err(RelayConfigError {
                flag: "table-name",
                env: "TABLE_NAME",
                message: "table name must not be empty".into(),
            });
        }
        if self.mark_concurrency == 0 {
            return Err(RelayConfigError {
                flag: "mark-concurrency",
                env: "MARK_CONCURRENCY",
                message: "mark concurrency must be at least 1".into(),
            });
        }
        Ok(HandlerOptions {
            event_bus_name: self.event_bus_name.clone(),
            source: self.source.clone(),
            stop_at_first_failure: self.stop_at_first_failure,
            strict_chunk_size: self.max_entries_per_call.max(1),
            mark_concurrency: self.mark_concurrency,
        })
    }
}

fn flag_of(setting: &str) -> (&'static str, &'static str) {
    match setting {
        "event bus name" => ("event-bus-name", "EVENT_BUS_NAME"),
        "event source" => ("source", "EVENT_SOURCE"),
        "max entries per call" => ("max-entries-per-call", "MAX_ENTRIES_PER_CALL"),
        "max entry bytes" => ("max-entry-bytes", "MAX_ENTRY_BYTES"),
        "max request bytes" => ("max-request-bytes", "MAX_REQUEST_BYTES"),
        "max concurrency" => ("publish-concurrency", "PUBLISH_CONCURRENCY"),
        "max attempts" => ("publish-max-attempts", "PUBLISH_MAX_ATTEMPTS"),
        _ => ("publish-max-attempts", "PUBLISH_MAX_ATTEMPTS"),
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
            "--event-bus-name",
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
        assert_eq!(err.flag, "max-entries-per-call");
        assert!(err.to_string().contains("MAX_ENTRIES_PER_CALL"), "{err}");
        let err = parse(&["--mark-concurrency", "0"])
            .handler_options()
            .unwrap_err();
        assert_eq!(err.flag, "mark-concurrency");
    }

    #[test]
    fn strict_order_flag_and_empty_dead_letter_queue() {
        let args = parse(&["--stop-at-first-failure", "--dead-letter-queue-url", " "]);
        assert!(args.handler_options().unwrap().stop_at_first_failure);
        assert_eq!(args.dead_letter_queue_url(), None);
        let args = parse(&["--stop-at-first-failure", "false"]);
        assert!(!args.stop_at_first_failure);
    }
}
