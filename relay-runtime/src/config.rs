//! How both relays publish: one configuration, one set of flags and environment variables.
//!
//! [`PublisherArgs`] is flattened into the command line of `relay-stream`, `relay-stream-local` and
//! `relay-poller`, so every publisher setting has the same flag and the same variable everywhere.
//! A value out of range is a [`SettingError`] naming that exact flag and variable.

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use outbox_shared::RetryPolicy;
use outbox_shared::limits::{
    PUT_EVENTS_ABSOLUTE_MAX_BYTES, PUT_EVENTS_DEFAULT_MAX_BYTES, PUT_EVENTS_MAX_ENTRIES,
};

/// Default `PutEvents` calls in flight per publish (a stream batch, a poller page).
pub const DEFAULT_PUBLISH_CONCURRENCY: usize = 16;

/// Default attempts per entry, the first included.
pub const DEFAULT_PUBLISH_MAX_ATTEMPTS: usize = 5;

/// First retry delay cap of a failed entry; it doubles per attempt (full jitter) up to
/// [`PUBLISH_MAX_RETRY_DELAY`].
pub const PUBLISH_BASE_RETRY_DELAY: Duration = Duration::from_millis(50);

/// Longest delay between two attempts of an entry.
pub const PUBLISH_MAX_RETRY_DELAY: Duration = Duration::from_secs(2);

/// Most attempts an entry may be given; beyond this a failing event is better left pending.
pub const MAX_PUBLISH_ATTEMPTS: usize = 100;

/// Most calls in flight one publish may have.
pub const MAX_PUBLISH_CONCURRENCY: usize = 1024;

/// Where, as whom and how events are published to EventBridge. The publisher stamps the bus and
/// the source on every entry; nothing else stores them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherConfig {
    pub event_bus_name: String,
    /// EventBridge `Source` of every event (one per service).
    pub source: String,
    /// Entries per `PutEvents` call, 1..=10.
    pub max_entries_per_call: usize,
    /// Size budget of one `PutEvents` request, as EventBridge counts entry sizes.
    pub max_request_bytes: usize,
    /// Size limit of one entry; larger events are rejected as poison before any call.
    pub max_entry_bytes: usize,
    /// `PutEvents` calls in flight at once, per publish.
    pub max_concurrency: usize,
    /// Retries of an entry that failed with a retryable code: the project's full-jitter backoff.
    pub retry: RetryPolicy,
    /// Ceiling of the publish rate, in entries per second (`None`: only the bus's throttling
    /// limits it); see [`crate::publish_rate`].
    pub max_publish_rate: Option<NonZeroU32>,
}

impl PublisherConfig {
    /// Defaults: 10 entries and 256 KiB per call, 16 calls in flight, 5 attempts from 50 ms, no
    /// ceiling on the publish rate.
    pub fn new(event_bus_name: impl Into<String>, source: impl Into<String>) -> Self {
        Self {
            event_bus_name: event_bus_name.into(),
            source: source.into(),
            max_entries_per_call: PUT_EVENTS_MAX_ENTRIES,
            max_request_bytes: PUT_EVENTS_DEFAULT_MAX_BYTES,
            max_entry_bytes: PUT_EVENTS_DEFAULT_MAX_BYTES,
            max_concurrency: DEFAULT_PUBLISH_CONCURRENCY,
            retry: retry_policy(DEFAULT_PUBLISH_MAX_ATTEMPTS),
            max_publish_rate: None,
        }
    }

    /// Attempts per entry, the first included.
    pub fn max_attempts(&self) -> usize {
        usize::try_from(self.retry.max_retries).map_or(usize::MAX, |r| r.saturating_add(1))
    }

    /// # Errors
    /// [`PublisherConfigError`] naming the setting that is empty or out of range.
    pub fn validate(&self) -> Result<(), PublisherConfigError> {
        use PublisherSetting as S;
        non_empty(S::EventBusName, &self.event_bus_name)?;
        bus_name_or_arn(&self.event_bus_name)?;
        non_empty(S::Source, &self.source)?;
        in_range(
            S::MaxEntriesPerCall,
            self.max_entries_per_call,
            1,
            PUT_EVENTS_MAX_ENTRIES,
        )?;
        in_range(
            S::MaxEntryBytes,
            self.max_entry_bytes,
            1,
            PUT_EVENTS_ABSOLUTE_MAX_BYTES,
        )?;
        in_range(
            S::MaxRequestBytes,
            self.max_request_bytes,
            self.max_entry_bytes,
            PUT_EVENTS_ABSOLUTE_MAX_BYTES,
        )?;
        in_range(
            S::PublishConcurrency,
            self.max_concurrency,
            1,
            MAX_PUBLISH_CONCURRENCY,
        )?;
        in_range(
            S::PublishMaxAttempts,
            self.max_attempts(),
            1,
            MAX_PUBLISH_ATTEMPTS,
        )?;
        self.retry
            .validate("publish retry")
            .map_err(|e| PublisherConfigError {
                setting: S::PublishMaxAttempts,
                detail: e.to_string(),
            })
    }
}

/// The publisher's retry policy for `max_attempts` attempts per entry.
fn retry_policy(max_attempts: usize) -> RetryPolicy {
    RetryPolicy {
        max_retries: u32::try_from(max_attempts.saturating_sub(1)).unwrap_or(u32::MAX),
        base_delay: PUBLISH_BASE_RETRY_DELAY,
        max_delay: PUBLISH_MAX_RETRY_DELAY,
    }
}

/// One publisher setting, with the flag and the environment variable that set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PublisherSetting {
    EventBusName,
    Source,
    MaxEntriesPerCall,
    MaxRequestBytes,
    MaxEntryBytes,
    PublishConcurrency,
    PublishMaxAttempts,
}

impl PublisherSetting {
    /// What the setting is, in words.
    pub fn name(self) -> &'static str {
        match self {
            Self::EventBusName => "event bus name",
            Self::Source => "event source",
            Self::MaxEntriesPerCall => "max entries per call",
            Self::MaxRequestBytes => "max request bytes",
            Self::MaxEntryBytes => "max entry bytes",
            Self::PublishConcurrency => "publish concurrency",
            Self::PublishMaxAttempts => "publish max attempts",
        }
    }

    /// The command-line flag.
    pub fn flag(self) -> &'static str {
        match self {
            Self::EventBusName => "--event-bus-name",
            Self::Source => "--source",
            Self::MaxEntriesPerCall => "--max-entries-per-call",
            Self::MaxRequestBytes => "--max-request-bytes",
            Self::MaxEntryBytes => "--max-entry-bytes",
            Self::PublishConcurrency => "--publish-concurrency",
            Self::PublishMaxAttempts => "--publish-max-attempts",
        }
    }

    /// The environment variable.
    pub fn env(self) -> &'static str {
        match self {
            Self::EventBusName => "EVENT_BUS_NAME",
            Self::Source => "EVENT_SOURCE",
            Self::MaxEntriesPerCall => "MAX_ENTRIES_PER_CALL",
            Self::MaxRequestBytes => "MAX_REQUEST_BYTES",
            Self::MaxEntryBytes => "MAX_ENTRY_BYTES",
            Self::PublishConcurrency => "PUBLISH_CONCURRENCY",
            Self::PublishMaxAttempts => "PUBLISH_MAX_ATTEMPTS",
        }
    }
}

/// A publisher setting that is empty or out of range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} {detail}", setting.name())]
pub struct PublisherConfigError {
    pub setting: PublisherSetting,
    pub detail: String,
}

impl From<PublisherConfigError> for SettingError {
    fn from(err: PublisherConfigError) -> Self {
        SettingError {
            flag: err.setting.flag(),
            env: err.setting.env(),
            message: err.to_string(),
        }
    }
}

fn non_empty(setting: PublisherSetting, value: &str) -> Result<(), PublisherConfigError> {
    if value.trim().is_empty() {
        return Err(PublisherConfigError {
            setting,
            detail: "must not be empty".into(),
        });
    }
    Ok(())
}

/// Longest `EventBusName` (a name or an ARN) EventBridge accepts on a `PutEvents` entry.
const EVENT_BUS_NAME_MAX_CHARS: usize = 1600;

/// Checks the bus against EventBridge's model constraint on a `PutEvents` entry's
/// `EventBusName`: at most 1,600 characters, a name of `[/._A-Za-z0-9-]`, or the ARN of one
/// (`arn:aws…:events:REGION:ACCOUNT:event-bus/NAME`). EventBridge refuses every call that names
/// another bus as a whole with `ValidationException`, which the publisher would take for an
/// entry's fault and dead-letter every event alone in its call: so it is refused at start.
fn bus_name_or_arn(value: &str) -> Result<(), PublisherConfigError> {
    let name_chars = |name: &str| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
    };
    let word = |part: &str| {
        part.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c))
    };
    let valid = match value.split(':').collect::<Vec<_>>()[..] {
        [name] => name_chars(name),
        ["arn", partition, "events", region, account, resource] => {
            partition.strip_prefix("aws").is_some_and(word)
                && region.split('-').count() >= 3
                && region.split('-').all(|p| !p.is_empty() && word(p))
                && account.len() == 12
                && account.chars().all(|c| c.is_ascii_digit())
                && resource.strip_prefix("event-bus/").is_some_and(name_chars)
        }
        _ => false,
    };
    if !valid || value.chars().count() > EVENT_BUS_NAME_MAX_CHARS {
        return Err(PublisherConfigError {
            setting: PublisherSetting::EventBusName,
            detail: format!(
                "must be a bus name of letters, digits and /._- or an event bus ARN, at most \
                 {EVENT_BUS_NAME_MAX_CHARS} characters, as EventBridge accepts"
            ),
        });
    }
    Ok(())
}

fn in_range(
    setting: PublisherSetting,
    value: usize,
    min: usize,
    max: usize,
) -> Result<(), PublisherConfigError> {
    if !(min..=max).contains(&value) {
        return Err(PublisherConfigError {
            setting,
            detail: format!("must be between {min} and {max}, got {value}"),
        });
    }
    Ok(())
}

/// A setting of a relay binary that is missing or out of range, naming the flag and the
/// environment variable that set it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {flag} ({env}): {message}")]
pub struct SettingError {
    /// The flag, with its dashes (`--page-size`).
    pub flag: &'static str,
    pub env: &'static str,
    pub message: String,
}

impl SettingError {
    pub fn new(flag: &'static str, env: &'static str, message: impl Into<String>) -> Self {
        Self {
            flag,
            env,
            message: message.into(),
        }
    }

    /// Checks that `value` is not blank.
    ///
    /// # Errors
    /// [`SettingError`] naming `flag` and `env`.
    pub fn non_empty(flag: &'static str, env: &'static str, value: &str) -> Result<(), Self> {
        if value.trim().is_empty() {
            return Err(Self::new(flag, env, "must not be empty"));
        }
        Ok(())
    }

    /// Checks that `min <= value <= max`.
    ///
    /// # Errors
    /// [`SettingError`] naming `flag` and `env`.
    pub fn in_range<T: PartialOrd + fmt::Display>(
        flag: &'static str,
        env: &'static str,
        value: T,
        min: T,
        max: T,
    ) -> Result<(), Self> {
        if value < min || value > max {
            return Err(Self::new(
                flag,
                env,
                format!("must be between {min} and {max}, got {value}"),
            ));
        }
        Ok(())
    }
}

/// The publisher's flags, the same in every relay binary; each also reads its variable.
#[derive(Debug, Clone, clap::Args)]
pub struct PublisherArgs {
    /// The EventBridge bus events are published to.
    #[arg(long, env = "EVENT_BUS_NAME")]
    pub event_bus_name: String,
    /// EventBridge `Source` of every event.
    #[arg(long = "source", env = "EVENT_SOURCE")]
    pub source: String,
    /// Entries per `PutEvents` call (1..=10).
    #[arg(long, env = "MAX_ENTRIES_PER_CALL", default_value_t = PUT_EVENTS_MAX_ENTRIES)]
    pub max_entries_per_call: usize,
    /// Size budget of one `PutEvents` request, as EventBridge counts entry sizes.
    #[arg(long, env = "MAX_REQUEST_BYTES", default_value_t = PUT_EVENTS_DEFAULT_MAX_BYTES)]
    pub max_request_bytes: usize,
    /// Largest entry (up to 1 MiB on buses that accept it); larger events are dead-lettered
    /// without a call.
    #[arg(long, env = "MAX_ENTRY_BYTES", default_value_t = PUT_EVENTS_DEFAULT_MAX_BYTES)]
    pub max_entry_bytes: usize,
    /// `PutEvents` calls in flight at once, per publish (a stream batch, a poller page).
    #[arg(long, env = "PUBLISH_CONCURRENCY", default_value_t = DEFAULT_PUBLISH_CONCURRENCY)]
    pub publish_concurrency: usize,
    /// Attempts per entry (first try included) for retryable failures.
    #[arg(long, env = "PUBLISH_MAX_ATTEMPTS", default_value_t = DEFAULT_PUBLISH_MAX_ATTEMPTS)]
    pub publish_max_attempts: usize,
    /// Ceiling of the publish rate, in entries per second, for this process (default: none).
    /// Below it, the rate adapts to the bus's quota: lowered on `ThrottlingException`, probed
    /// back up while calls are accepted.
    #[arg(long, env = "MAX_PUBLISH_RATE")]
    pub max_publish_rate: Option<NonZeroU32>,
}

impl PublisherArgs {
    /// The validated publisher configuration.
    ///
    /// # Errors
    /// [`SettingError`] naming the flag and variable whose value is empty or out of range.
    pub fn config(&self) -> Result<PublisherConfig, SettingError> {
        let config = PublisherConfig {
            max_entries_per_call: self.max_entries_per_call,
            max_request_bytes: self.max_request_bytes,
            max_entry_bytes: self.max_entry_bytes,
            max_concurrency: self.publish_concurrency,
            retry: retry_policy(self.publish_max_attempts),
            max_publish_rate: self.max_publish_rate,
            ..PublisherConfig::new(&self.event_bus_name, &self.source)
        };
        // Attempts are checked before they become a retry count (0 attempts would wrap to 1).
        if self.publish_max_attempts == 0 {
            return Err(PublisherConfigError {
                setting: PublisherSetting::PublishMaxAttempts,
                detail: format!("must be between 1 and {MAX_PUBLISH_ATTEMPTS}, got 0"),
            }
            .into());
        }
        config.validate()?;
        Ok(config)
    }
}

/// The dead-letter queue URL, if one is set (an empty value means none, as CloudFormation passes
/// an unset optional parameter).
pub fn dead_letter_queue_url(value: Option<&str>) -> Option<&str> {
    value.map(str::trim).filter(|url| !url.is_empty())
}

/// How long marked items stay in the table: the `ttl` every relay's marks set, read the same way
/// by each relay.
#[derive(Debug, Clone, clap::Args)]
pub struct RetentionArgs {
    /// How long a published item stays before DynamoDB's TTL removes it, counted from when it was
    /// marked published (dead-lettered items stay at least the dead-letter queue's 14 days plus a
    /// day). The writer's `OutboxConfig::ttl_retention`; keep the two equal.
    #[arg(long, env = "OUTBOX_TTL_RETENTION", default_value = "7days", value_parser = humantime::parse_duration)]
    pub ttl_retention: Duration,
}

impl Default for RetentionArgs {
    fn default() -> Self {
        Self {
            ttl_retention: outbox_shared::config::DEFAULT_TTL_RETENTION,
        }
    }
}

impl RetentionArgs {
    /// The `ttl` policy of the marks.
    ///
    /// # Errors
    /// [`SettingError`] naming `--ttl-retention` when it is zero.
    pub fn ttl_policy(&self) -> Result<crate::status_store::TtlPolicy, SettingError> {
        if self.ttl_retention.is_zero() {
            return Err(SettingError::new(
                "--ttl-retention",
                "OUTBOX_TTL_RETENTION",
                "must be longer than zero (items would expire as they are marked)",
            ));
        }
        Ok(crate::status_store::TtlPolicy::new(self.ttl_retention))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    #[command(args_override_self = true)]
    struct Cli {
        #[command(flatten)]
        publisher: PublisherArgs,
    }

    fn parse(args: &[&str]) -> PublisherArgs {
        let base = ["relay", "--event-bus-name", "bus", "--source", "orders"];
        Cli::try_parse_from(base.iter().chain(args))
            .unwrap()
            .publisher
    }

    #[test]
    fn defaults_are_valid() {
        PublisherConfig::new("bus", "orders").validate().unwrap();
        let config = parse(&[]).config().unwrap();
        assert_eq!(config, PublisherConfig::new("bus", "orders"));
        assert_eq!(config.max_attempts(), 5);
    }

    #[test]
    fn errors_name_the_setting() {
        let mut p = PublisherConfig::new("bus", "orders");
        p.max_entries_per_call = 11;
        let err = p.validate().unwrap_err().to_string();
        assert_eq!(err, "max entries per call must be between 1 and 10, got 11");
        let err = PublisherConfig::new("", "orders").validate().unwrap_err();
        assert_eq!(err.to_string(), "event bus name must not be empty");
        let mut p = PublisherConfig::new("bus", "orders");
        p.max_request_bytes = 1000;
        assert!(
            p.validate()
                .unwrap_err()
                .to_string()
                .starts_with("max request bytes")
        );
    }

    #[test]
    fn a_bus_eventbridge_would_refuse_on_every_entry_is_refused_at_start() {
        for accepted in [
            "orders-bus",
            "default",
            "aws.partner/example.com/123/orders",
            "arn:aws:events:eu-west-1:123456789012:event-bus/orders-bus",
            "arn:aws-cn:events:cn-north-1:123456789012:event-bus/orders",
        ] {
            let config = PublisherConfig::new(accepted, "orders");
            assert_eq!(config.validate(), Ok(()), "{accepted}");
        }
        for refused in [
            "orders bus",
            "orders:bus",
            "arn:aws:events:eu-west-1:1234:event-bus/orders",
            "arn:aws:sqs:eu-west-1:123456789012:event-bus/orders",
            "arn:aws:events:eu-west-1:123456789012:rule/orders",
            &"b".repeat(1601),
        ] {
            let err = PublisherConfig::new(refused, "orders")
                .validate()
                .unwrap_err();
            assert_eq!(err.setting, PublisherSetting::EventBusName, "{refused}");
            assert!(
                err.to_string().starts_with("event bus name must be"),
                "{err}"
            );
        }
    }

    #[test]
    fn every_out_of_range_flag_is_named_with_its_variable() {
        for (args, flag, env) in [
            (
                &["--max-entries-per-call", "11"][..],
                "--max-entries-per-call",
                "MAX_ENTRIES_PER_CALL",
            ),
            (
                &["--max-entry-bytes", "2000000"][..],
                "--max-entry-bytes",
                "MAX_ENTRY_BYTES",
            ),
            (
                &["--max-request-bytes", "100"][..],
                "--max-request-bytes",
                "MAX_REQUEST_BYTES",
            ),
            (
                &["--publish-concurrency", "0"][..],
                "--publish-concurrency",
                "PUBLISH_CONCURRENCY",
            ),
            (
                &["--publish-max-attempts", "0"][..],
                "--publish-max-attempts",
                "PUBLISH_MAX_ATTEMPTS",
            ),
            (
                &["--publish-max-attempts", "101"][..],
                "--publish-max-attempts",
                "PUBLISH_MAX_ATTEMPTS",
            ),
            (&["--source", " "][..], "--source", "EVENT_SOURCE"),
            (
                &["--event-bus-name", ""][..],
                "--event-bus-name",
                "EVENT_BUS_NAME",
            ),
        ] {
            let err = parse(args).config().unwrap_err();
            assert_eq!((err.flag, err.env), (flag, env), "{args:?}: {err}");
            assert!(err.to_string().contains(env), "{err}");
        }
    }

    #[test]
    fn the_publish_rate_ceiling_is_a_positive_number_of_entries_per_second() {
        assert_eq!(parse(&[]).config().unwrap().max_publish_rate, None);
        let config = parse(&["--max-publish-rate", "500"]).config().unwrap();
        assert_eq!(config.max_publish_rate, NonZeroU32::new(500));
        let base = ["relay", "--event-bus-name", "bus", "--source", "orders"];
        for bad in ["0", "-5", "fast"] {
            let flag = format!("--max-publish-rate={bad}");
            let err = Cli::try_parse_from(base.iter().copied().chain([flag.as_str()]))
                .unwrap_err()
                .to_string();
            assert!(err.contains("--max-publish-rate"), "{bad}: {err}");
        }
    }

    #[test]
    fn one_mebibyte_entries_are_accepted() {
        let config = parse(&[
            "--max-entry-bytes",
            "1048576",
            "--max-request-bytes",
            "1048576",
        ])
        .config()
        .unwrap();
        assert_eq!(config.max_entry_bytes, 1024 * 1024);
    }

    #[test]
    fn blank_dead_letter_queue_urls_mean_none() {
        assert_eq!(dead_letter_queue_url(Some(" ")), None);
        assert_eq!(dead_letter_queue_url(None), None);
        assert_eq!(dead_letter_queue_url(Some("http://q")), Some("http://q"));
    }
}
