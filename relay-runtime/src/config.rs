//! How both relays publish: one configuration, one set of flags and environment variables; and
//! the one error every relay's settings have.
//!
//! [`PublisherArgs`] is flattened into the command line of `relay-stream`, `relay-stream-local` and
//! `relay-poller`, so every publisher setting has the same flag and the same variable everywhere.
//! Settings are parsed by clap (their value parsers and `FromStr` types); a value out of range, or
//! settings that contradict each other, is a [`SettingError`] naming the flag and the variable as
//! clap declares them ([`SettingError::of`]): no name is written twice.

use std::fmt;
use std::num::NonZeroU32;
use std::time::Duration;

use outbox_shared::RetryPolicy;
use outbox_shared::envelope::{Encoding, EventFormat};
use outbox_shared::region::{GlobalTable, InvalidRegion, Region};

pub use crate::target::TargetKind;

/// Default calls to the target in flight per publish (a stream batch, a poller page).
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

/// Where, as whom and how events are published. The publisher stamps the target and the source
/// on every entry; nothing else stores them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublisherConfig {
    /// Which kind of target `target` is, and so which adapter publishes.
    pub target_kind: TargetKind,
    /// The target: a classic bus's name or ARN, a Custom Event Bus's ARN, a topic's ARN, a queue's
    /// URL or a stream's ARN.
    pub target: String,
    /// EventBridge `Source` of every event (one per service); the buses' only.
    pub source: String,
    /// Entries per call, 1 up to the target's most ([`TargetKind::max_entries_per_call`]).
    pub max_entries_per_call: usize,
    /// Size budget of one call, as the target counts its entries' sizes.
    pub max_request_bytes: usize,
    /// Size limit of one entry; larger events are rejected as poison before any call.
    pub max_entry_bytes: usize,
    /// Calls in flight at once, per publish.
    pub max_concurrency: usize,
    /// Retries of an entry that failed with a retryable code: the project's full-jitter backoff.
    pub retry: RetryPolicy,
    /// Ceiling of the publish rate, in entries per second (`None`: only the target's throttling
    /// limits it); see [`crate::publish_rate`].
    pub max_publish_rate: Option<NonZeroU32>,
    /// What each event is published as: the envelope, or a CloudEvent whose `source` is
    /// [`Self::source`].
    pub event_format: EventFormat,
    /// The payload bucket (`PAYLOAD_BUCKET`): an event whose entry is larger than
    /// [`Self::payload_threshold`] is published with its payload stored there and referenced
    /// (`dataref`) in place of its `data` ([`crate::claim_check`]). `None`: such an event is
    /// dead-lettered, its reason saying how to turn the claim check on.
    pub payload_bucket: Option<String>,
    /// The entry size above which the payload goes to the bucket (`PAYLOAD_THRESHOLD_BYTES`);
    /// `None`: [`Self::max_entry_bytes`], the target's entry budget.
    pub payload_threshold_bytes: Option<usize>,
}

impl PublisherConfig {
    /// Defaults: 10 entries and 256 KiB per call, 16 calls in flight, 5 attempts from 50 ms, no
    /// ceiling on the publish rate.
    pub fn new(target: impl Into<String>, source: impl Into<String>) -> Self {
        Self::of_kind(TargetKind::Classic, target, source)
    }

    /// Defaults for a target of `kind` ([`crate::target::TargetSpec`]): the classic bus's of
    /// [`new`](Self::new); the Custom Event Bus 100 entries and 256 KiB per call; SNS and SQS 10
    /// entries and 256 KiB; Kinesis 500 records, 1 MiB a record and 5 MiB a call.
    pub fn of_kind(kind: TargetKind, target: impl Into<String>, source: impl Into<String>) -> Self {
        let spec = kind.spec();
        Self {
            target_kind: kind,
            target: target.into(),
            source: source.into(),
            max_entries_per_call: spec.max_entries_per_call,
            max_request_bytes: spec.default_max_request_bytes,
            max_entry_bytes: spec.default_max_entry_bytes,
            max_concurrency: DEFAULT_PUBLISH_CONCURRENCY,
            retry: retry_policy(DEFAULT_PUBLISH_MAX_ATTEMPTS),
            max_publish_rate: None,
            event_format: EventFormat::Envelope,
            payload_bucket: None,
            payload_threshold_bytes: None,
        }
    }

    /// This configuration within `limit`, the target's own limit of one entry read at start-up
    /// ([`crate::target::TargetDescription::max_entry_bytes`]: an SQS queue's
    /// `MaximumMessageSize`, a Kinesis stream's maximum record size): the entry budget is the
    /// smaller of [`Self::max_entry_bytes`] and it, and so is the payload threshold, so an event
    /// between the two goes through the claim check (or, without a payload bucket, is
    /// dead-lettered before any call) instead of being refused by the target.
    #[must_use]
    pub fn within_target_limit(mut self, limit: Option<usize>) -> Self {
        let Some(limit) = limit.filter(|&limit| limit < self.max_entry_bytes) else {
            return self;
        };
        tracing::info!(
            target_limit = limit,
            max_entry_bytes = self.max_entry_bytes,
            "the target takes smaller entries than the entry setting: its limit is the entry budget"
        );
        self.max_entry_bytes = limit;
        self.payload_threshold_bytes = self
            .payload_threshold_bytes
            .map(|threshold| threshold.min(limit));
        self
    }

    /// The entry size above which an event's payload is stored in the payload bucket: the
    /// configured threshold, or the entry budget.
    pub fn payload_threshold(&self) -> usize {
        self.payload_threshold_bytes.unwrap_or(self.max_entry_bytes)
    }

    /// How each event's body is written: [`Self::event_format`], a CloudEvent's `source` being
    /// [`Self::source`].
    pub fn encoding(&self) -> Encoding {
        Encoding {
            format: self.event_format,
            source: self.source.clone(),
        }
    }

    /// Attempts per entry, the first included.
    pub fn max_attempts(&self) -> usize {
        usize::try_from(self.retry.max_retries).map_or(usize::MAX, |r| r.saturating_add(1))
    }

    /// # Errors
    /// [`SettingError`] naming the setting ([`PublisherArgs`]' flag and variable) that is empty,
    /// out of range, or not what the target of [`Self::target_kind`] takes.
    pub fn validate(&self) -> Result<(), SettingError> {
        let of = SettingError::of::<PublisherArgs>;
        let spec = self.target_kind.spec();
        SettingError::non_empty::<PublisherArgs>("target", &self.target)?;
        target_of_kind(self.target_kind, &self.target)?;
        SettingError::non_empty::<PublisherArgs>("source", &self.source)?;
        target_source(self.target_kind, &self.source)?;
        if self.event_format == EventFormat::CloudEvents {
            cloudevents_source(&self.source)?;
        }
        SettingError::in_range::<PublisherArgs, _>(
            "max_entries_per_call",
            self.max_entries_per_call,
            1,
            spec.max_entries_per_call,
        )?;
        SettingError::in_range::<PublisherArgs, _>(
            "max_entry_bytes",
            self.max_entry_bytes,
            1,
            spec.max_entry_bytes,
        )?;
        SettingError::in_range::<PublisherArgs, _>(
            "max_request_bytes",
            self.max_request_bytes,
            self.max_entry_bytes,
            spec.max_request_bytes,
        )?;
        SettingError::in_range::<PublisherArgs, _>(
            "publish_concurrency",
            self.max_concurrency,
            1,
            MAX_PUBLISH_CONCURRENCY,
        )?;
        SettingError::in_range::<PublisherArgs, _>(
            "publish_max_attempts",
            self.max_attempts(),
            1,
            MAX_PUBLISH_ATTEMPTS,
        )?;
        if let Some(bucket) = &self.payload_bucket {
            outbox_shared::claim_check::check_bucket_name(bucket)
                .map_err(|reason| of("payload_bucket", reason))?;
        }
        if let Some(threshold) = self.payload_threshold_bytes {
            if self.payload_bucket.is_none() {
                return Err(of(
                    "payload_threshold_bytes",
                    format!(
                        "is set but {} is not: a payload has nowhere to go",
                        SettingError::name_of::<PublisherArgs>("payload_bucket")
                    ),
                ));
            }
            SettingError::in_range::<PublisherArgs, _>(
                "payload_threshold_bytes",
                threshold,
                MIN_PAYLOAD_THRESHOLD_BYTES,
                self.max_entry_bytes,
            )?;
        }
        self.retry
            .validate("publish retry")
            .map_err(|e| of("publish_max_attempts", e.to_string()))
    }
}

/// The smallest `PAYLOAD_THRESHOLD_BYTES`: an entry with its payload in S3 is about 600 bytes (its
/// metadata and the reference), so a lower threshold would store payloads it cannot shrink.
pub const MIN_PAYLOAD_THRESHOLD_BYTES: usize = 1024;

/// The publisher's retry policy for `max_attempts` attempts per entry.
fn retry_policy(max_attempts: usize) -> RetryPolicy {
    RetryPolicy {
        max_retries: u32::try_from(max_attempts.saturating_sub(1)).unwrap_or(u32::MAX),
        base_delay: PUBLISH_BASE_RETRY_DELAY,
        max_delay: PUBLISH_MAX_RETRY_DELAY,
    }
}

/// Both buses reserve `Source`s starting with `aws.` for AWS's services.
const RESERVED_SOURCE_PREFIX: &str = "aws.";

/// Checks the `Source` against what the target of `kind` takes, so a relay refuses at start what
/// the bus would refuse for every event:
/// - for every kind, no `Source` starting with the reserved `aws.` (one configuration whatever the
///   kind: the classic bus answers each entry `NotAuthorizedForSourceException`, not retryable,
///   not the event's fault, so every event would stay pending; the Custom Event Bus refuses the
///   call as a whole with `InvalidInputException`, which the publisher would take for an entry's
///   fault and dead-letter every event alone in its call);
/// - what the kind itself limits ([`crate::target::TargetSpec::check_source`]).
fn target_source(kind: TargetKind, source: &str) -> Result<(), SettingError> {
    let refused = |detail: String| Err(SettingError::of::<PublisherArgs>("source", detail));
    if source.starts_with(RESERVED_SOURCE_PREFIX) {
        return refused(format!(
            "must not start with {RESERVED_SOURCE_PREFIX:?}, which EventBridge reserves for AWS's \
             services, got {source:?}"
        ));
    }
    (kind.spec().check_source)(source).or_else(refused)
}

/// A CloudEvent's `source` is a URI-reference (RFC 3986): the `Source` of every event, when
/// they are CloudEvents, must be one, or every consumer's CloudEvents SDK refuses the events.
fn cloudevents_source(source: &str) -> Result<(), SettingError> {
    let allowed = |c: char| c.is_ascii_graphic() && !"\"<>\\^`{|}".contains(c);
    if let Some(c) = source.chars().find(|&c| !allowed(c)) {
        return Err(SettingError::of::<PublisherArgs>(
            "source",
            format!(
                "must be a URI-reference with --event-format cloudevents (the CloudEvent's \
                 source), but holds {c:?}"
            ),
        ));
    }
    Ok(())
}

/// Checks `value` names a target of `kind` ([`crate::target::TargetSpec::check_name`]). A
/// target another kind claims (an SQS queue's URL with kind `sns`) is refused naming both settings
/// and the value: publishing to it would fail every call.
fn target_of_kind(kind: TargetKind, value: &str) -> Result<(), SettingError> {
    let Err(detail) = (kind.spec().check_name)(value) else {
        return Ok(());
    };
    let other = <TargetKind as clap::ValueEnum>::value_variants()
        .iter()
        .find(|other| **other != kind && (other.spec().claims)(value));
    let detail = match other {
        Some(other) => {
            let kind_setting = SettingError::of::<PublisherArgs>("target_kind", "");
            format!(
                "{value:?} is {}, not {}, but {} is {kind}: set {} to the target's kind ({other})",
                other.spec().named_by,
                kind.spec().named_by,
                kind_setting.setting(),
                kind_setting.env,
            )
        }
        None => format!("{detail}, got {value:?}"),
    };
    Err(SettingError::of::<PublisherArgs>("target", detail))
}

/// A setting of a relay binary that is missing, malformed or out of range, or that contradicts
/// another: the one configuration error. It names the flag and the environment variable as the
/// command line declares them (a Lambda has only the variable, an operator types the flag).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {}: {message}", self.setting())]
pub struct SettingError {
    /// The flag, with its dashes (`--page-size`); empty for a variable no flag sets.
    pub flag: String,
    pub env: String,
    pub message: String,
}

impl SettingError {
    /// An error of the setting `A` declares as its field `id` (flattened settings included):
    /// its flag and variable are read from `A`'s clap definition, never written again.
    ///
    /// # Panics
    /// In debug builds, when `A` declares no setting `id` (a typo the tests catch).
    pub fn of<A: clap::Args>(id: &str, message: impl Into<String>) -> Self {
        let command = A::augment_args(clap::Command::new("relay"));
        let arg = command.get_arguments().find(|arg| arg.get_id() == id);
        debug_assert!(
            arg.is_some(),
            "no setting {id} in {}",
            std::any::type_name::<A>()
        );
        Self {
            flag: format!(
                "--{}",
                arg.and_then(clap::Arg::get_long)
                    .map_or_else(|| id.replace('_', "-"), str::to_owned)
            ),
            env: arg
                .and_then(clap::Arg::get_env)
                .map(|env| env.to_string_lossy().into_owned())
                .unwrap_or_default(),
            message: message.into(),
        }
    }

    /// An error of a setting that only an environment variable sets.
    pub fn env_only(env: &str, message: impl Into<String>) -> Self {
        Self {
            flag: String::new(),
            env: env.to_owned(),
            message: message.into(),
        }
    }

    /// The setting `A` declares as `id` as a person names it (`--flag (VARIABLE)`), for a
    /// message about another setting.
    pub fn name_of<A: clap::Args>(id: &str) -> String {
        Self::of::<A>(id, "").setting()
    }

    /// The setting as a person names it: `--flag (VARIABLE)`, or the variable alone.
    pub fn setting(&self) -> String {
        match (self.flag.is_empty(), self.env.is_empty()) {
            (true, _) => self.env.clone(),
            (false, true) => self.flag.clone(),
            (false, false) => format!("{} ({})", self.flag, self.env),
        }
    }

    /// Checks that `value`, the setting `A` declares as `id`, is not blank.
    ///
    /// # Errors
    /// [`SettingError`] naming the setting.
    pub fn non_empty<A: clap::Args>(id: &str, value: &str) -> Result<(), Self> {
        if value.trim().is_empty() {
            return Err(Self::of::<A>(id, "must not be empty"));
        }
        Ok(())
    }

    /// Checks that `min <= value <= max` for the setting `A` declares as `id`.
    ///
    /// # Errors
    /// [`SettingError`] naming the setting, the range and the value.
    pub fn in_range<A: clap::Args, T: PartialOrd + fmt::Display>(
        id: &str,
        value: T,
        min: T,
        max: T,
    ) -> Result<(), Self> {
        if value < min || value > max {
            return Err(Self::of::<A>(
                id,
                format!("must be between {min} and {max}, got {value}"),
            ));
        }
        Ok(())
    }
}

/// The publisher's flags, the same in every relay binary; each also reads its variable.
///
/// Deprecated aliases, the one place they are read (removed in release 0.2.0):
/// `--event-bus-kind` (`EVENT_BUS_KIND`) and `--event-bus-name` (`EVENT_BUS_NAME`), the two buses'
/// names of `--target-kind` and `--target`, which stacks deployed from an earlier template still
/// set. Either name may be set, both only to the same value.
#[derive(Debug, Clone, clap::Args)]
pub struct PublisherArgs {
    /// What `--target` is: `classic` (the default: an EventBridge bus with rules), `custom` (the
    /// Custom Event Bus: FIFO per aggregate, de-duplication on the event id), `sns` (a topic),
    /// `sqs` (a queue) or `kinesis` (a data stream).
    // The value's name is the variable's, so clap's own error for a mistaken kind names both.
    #[arg(long, env = "EVENT_TARGET_KIND", value_name = "EVENT_TARGET_KIND", value_parser = parse_target_kind)]
    pub target_kind: Option<TargetKind>,
    /// Deprecated alias of `--target-kind` for the two buses (`classic` or `custom`); removed in
    /// 0.2.0.
    #[arg(long, env = "EVENT_BUS_KIND", value_name = "EVENT_BUS_KIND", value_parser = parse_bus_kind)]
    pub event_bus_kind: Option<TargetKind>,
    /// Where events are published: for `classic` a bus name or ARN, for `custom` the Custom Event
    /// Bus's whole ARN (`…:event-busv2/NAME/ID`), for `sns` a topic ARN, for `sqs` a queue URL,
    /// for `kinesis` a stream ARN. A topic or queue whose name ends `.fifo` is a FIFO one: each
    /// aggregate its message group, each event id its de-duplication id. A target of another kind
    /// than `--target-kind` (a queue URL for `sns`) exits naming both settings.
    #[arg(long, env = "EVENT_TARGET")]
    pub target: Option<String>,
    /// Deprecated alias of `--target` for the two buses; removed in 0.2.0.
    #[arg(long, env = "EVENT_BUS_NAME")]
    pub event_bus_name: Option<String>,
    /// EventBridge `Source` of every event (the buses'; required on every target, so one
    /// configuration moves between kinds).
    #[arg(long = "source", env = "EVENT_SOURCE")]
    pub source: String,
    /// Entries per call: 1..=10 on the classic bus, SNS and SQS (default 10), 1..=100 on the
    /// Custom Event Bus (default 100), 1..=500 on Kinesis (default 500).
    #[arg(long, env = "MAX_ENTRIES_PER_CALL")]
    pub max_entries_per_call: Option<usize>,
    /// Size budget of one call, as the target counts its entries (SNS and SQS: the bodies and the
    /// message attributes; Kinesis: the data and the partition keys): default 256 KiB, Kinesis
    /// 5 MiB; at most 1 MiB, Kinesis 5 MiB.
    #[arg(long, env = "MAX_REQUEST_BYTES")]
    pub max_request_bytes: Option<usize>,
    /// Largest entry, as the target counts it (default 256 KiB, Kinesis 1 MiB; up to 1 MiB on
    /// targets that accept it: raise `--max-request-bytes` with it). A larger event goes with its
    /// payload in `--payload-bucket`, or is dead-lettered without a call when there is none. The
    /// relays read the target's own limit at start (an SQS queue's `MaximumMessageSize`, a Kinesis
    /// stream's maximum record size) and keep the entry budget at the smaller of the two
    /// (`relay-poller check` shows it). The Custom Event Bus documents no byte limit: its default is the classic bus's documented
    /// 256 KiB, which an SQS target also takes as one message; raise it only after checking what
    /// your region's bus accepts.
    #[arg(long, env = "MAX_ENTRY_BYTES")]
    pub max_entry_bytes: Option<usize>,
    /// Calls in flight at once, per publish (a stream batch, a poller page). The process's
    /// publishes together start at this many and grow while calls are answered; a call that times
    /// out (a slow target) halves that, and it grows back slowly
    /// (`relay_runtime::publish_concurrency`).
    #[arg(long, env = "PUBLISH_CONCURRENCY", default_value_t = DEFAULT_PUBLISH_CONCURRENCY)]
    pub publish_concurrency: usize,
    /// Attempts per entry (first try included) for retryable failures, with a full-jitter backoff
    /// from 50 ms, at most 2 s, between them.
    #[arg(long, env = "PUBLISH_MAX_ATTEMPTS", default_value_t = DEFAULT_PUBLISH_MAX_ATTEMPTS)]
    pub publish_max_attempts: usize,
    /// Ceiling of the publish rate, in entries per second, for this process (default: none).
    /// Below it, the rate adapts to the target's quota: lowered to 70 % when it throttles, grown
    /// back linearly while calls are accepted (`relay_runtime::publish_rate`). Set it to this
    /// process's share of the account's quota to avoid the first burst of throttles (the
    /// template's `MaxPublishRate`).
    #[arg(long, env = "MAX_PUBLISH_RATE")]
    pub max_publish_rate: Option<NonZeroU32>,
    /// What each event is published as: `envelope` (the default: `{"metadata", "data"}`) or
    /// `cloudevents` (a CloudEvents 1.0 JSON event in structured mode, its `source` the
    /// `--source`; on the Custom Event Bus a raw event, `PutRawEvents`).
    #[arg(long, env = "EVENT_FORMAT", default_value_t = EventFormat::Envelope, value_parser = parse_event_format)]
    pub event_format: EventFormat,
    /// The payload bucket: an event too large for the target (or above
    /// `--payload-threshold-bytes`) is published with its payload stored in S3 under
    /// `payloads/{event id}` and referenced (`dataref`) in place of `data` (docs/schema.md,
    /// "Events of any size"). Unset: such an event is dead-lettered. A relay probes it at start
    /// (`s3:ListBucket`); a letter too large for the dead-letter queue keeps its record there
    /// too, under `dead-letters/`.
    #[arg(long, env = "PAYLOAD_BUCKET")]
    pub payload_bucket: Option<String>,
    /// Entry size above which the payload goes to `--payload-bucket` (default: the entry budget,
    /// `--max-entry-bytes`); lower it for consumers that take less than the target (an SQS
    /// queue's 256 KiB behind a 1 MiB bus). At least 1024, at most `--max-entry-bytes`; only with
    /// `--payload-bucket`.
    #[arg(long, env = "PAYLOAD_THRESHOLD_BYTES")]
    pub payload_threshold_bytes: Option<usize>,
}

impl PublisherArgs {
    /// The publisher's flags for a target of `kind`, everything else at its default.
    pub fn of_kind(kind: TargetKind, target: &str, source: &str) -> Self {
        Self {
            target_kind: Some(kind),
            event_bus_kind: None,
            target: Some(target.to_owned()),
            event_bus_name: None,
            source: source.to_owned(),
            max_entries_per_call: None,
            max_request_bytes: None,
            max_entry_bytes: None,
            publish_concurrency: DEFAULT_PUBLISH_CONCURRENCY,
            publish_max_attempts: DEFAULT_PUBLISH_MAX_ATTEMPTS,
            max_publish_rate: None,
            event_format: EventFormat::Envelope,
            payload_bucket: None,
            payload_threshold_bytes: None,
        }
    }

    /// The target's kind: `--target-kind`, or its alias, or `classic`.
    ///
    /// # Errors
    /// [`SettingError`] naming both settings when they are set to different kinds.
    pub fn kind(&self) -> Result<TargetKind, SettingError> {
        Ok(setting_or_alias(
            "target_kind",
            self.target_kind,
            "event_bus_kind",
            self.event_bus_kind,
        )?
        .unwrap_or_default())
    }

    /// The target: `--target`, or its alias.
    ///
    /// # Errors
    /// [`SettingError`] naming both settings when they are set to different targets, or when
    /// neither is set.
    pub fn target(&self) -> Result<String, SettingError> {
        setting_or_alias(
            "target",
            self.target.clone(),
            "event_bus_name",
            self.event_bus_name.clone(),
        )?
        .ok_or_else(|| {
            SettingError::of::<Self>(
                "target",
                format!(
                    "must be set (or its alias {}, for a bus)",
                    SettingError::name_of::<Self>("event_bus_name")
                ),
            )
        })
    }

    /// The validated publisher configuration.
    ///
    /// # Errors
    /// [`SettingError`] naming the flag and variable whose value is empty, out of range, or
    /// contradicts its alias.
    pub fn config(&self) -> Result<PublisherConfig, SettingError> {
        let defaults = PublisherConfig::of_kind(self.kind()?, self.target()?, &self.source);
        let config = PublisherConfig {
            max_entries_per_call: self
                .max_entries_per_call
                .unwrap_or(defaults.max_entries_per_call),
            max_request_bytes: self.max_request_bytes.unwrap_or(defaults.max_request_bytes),
            max_entry_bytes: self.max_entry_bytes.unwrap_or(defaults.max_entry_bytes),
            max_concurrency: self.publish_concurrency,
            retry: retry_policy(self.publish_max_attempts),
            max_publish_rate: self.max_publish_rate,
            event_format: self.event_format,
            payload_bucket: self.payload_bucket.clone(),
            payload_threshold_bytes: self.payload_threshold_bytes,
            ..defaults
        };
        // Attempts are checked before they become a retry count (0 attempts would wrap to 1).
        SettingError::in_range::<Self, _>(
            "publish_max_attempts",
            self.publish_max_attempts,
            1,
            MAX_PUBLISH_ATTEMPTS,
        )?;
        config.validate()?;
        Ok(config)
    }
}

/// `--event-format`'s parser: the message names the value and the accepted values.
fn parse_event_format(value: &str) -> Result<EventFormat, String> {
    value.parse()
}

/// The value of the setting `id` or of its alias `alias_id`, whichever is set; an error naming
/// both when both are set to different values.
fn setting_or_alias<T: PartialEq + fmt::Debug>(
    id: &str,
    value: Option<T>,
    alias_id: &str,
    alias: Option<T>,
) -> Result<Option<T>, SettingError> {
    match (value, alias) {
        (Some(value), Some(alias)) if value != alias => Err(SettingError::of::<PublisherArgs>(
            id,
            format!(
                "is {value:?} but its alias {} is {alias:?}: set one of them, or both to the same \
                 value",
                SettingError::name_of::<PublisherArgs>(alias_id)
            ),
        )),
        (value, alias) => Ok(value.or(alias)),
    }
}

/// `--target-kind`'s parser: the message names the value and the accepted values (clap adds the
/// flag and the variable).
fn parse_target_kind(value: &str) -> Result<TargetKind, String> {
    value.parse()
}

/// `--event-bus-kind`'s parser: a bus kind only (the alias stands for the two buses).
fn parse_bus_kind(value: &str) -> Result<TargetKind, String> {
    let kind: TargetKind = value.parse()?;
    if !kind.is_bus() {
        return Err(format!(
            "{value:?} is not a bus kind (classic, custom): set {} to publish to {kind}",
            SettingError::name_of::<PublisherArgs>("target_kind")
        ));
    }
    Ok(kind)
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
            return Err(SettingError::of::<Self>(
                "ttl_retention",
                "must be longer than zero (items would expire as they are marked)",
            ));
        }
        Ok(crate::status_store::TtlPolicy::new(self.ttl_retention))
    }
}

/// The regions of a global table (`--regions`), the same flag in every relay. Unset: a
/// single-region table.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct RegionArgs {
    /// The regions of the outbox table when it is a DynamoDB global table, comma-separated
    /// (`us-east-1,eu-west-1`), this relay's own among them (its SDK config's region,
    /// `AWS_REGION`). Each region's relays then publish only the events written in their region
    /// (`OriginRegion`), so each event is published once; events no writer stamped with a region
    /// are published by the first region listed (docs/global-tables.md). Unset or empty: a
    /// single-region table.
    #[arg(long, env = "OUTBOX_REGIONS", value_name = "REGIONS", value_parser = parse_regions)]
    pub regions: Option<RegionList>,
}

/// Regions as `--regions` lists them: comma-separated, in order; empty for none (CloudFormation
/// passes an unset parameter as an empty variable).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RegionList(pub Vec<Region>);

impl RegionArgs {
    /// `--regions` set to `regions`.
    pub fn of(regions: &[&str]) -> Result<Self, InvalidRegion> {
        let regions = regions
            .iter()
            .map(|r| Region::new(*r))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            regions: Some(RegionList(regions)),
        })
    }

    /// The global table this relay, in region `own` (its SDK config's), is part of; `None`
    /// without `--regions`.
    ///
    /// # Errors
    /// [`SettingError`] naming `--regions` when the relay has no region, or the regions are too
    /// few, repeat one, or leave out the relay's own.
    pub fn global_table(&self, own: Option<&str>) -> Result<Option<GlobalTable>, SettingError> {
        let regions = self.regions.as_ref().map_or(&[][..], |r| r.0.as_slice());
        if regions.is_empty() {
            return Ok(None);
        }
        let of = |message: String| SettingError::of::<Self>("regions", message);
        let own = own.ok_or_else(|| {
            of("is set but this relay has no region of its own: set AWS_REGION".to_owned())
        })?;
        let own = Region::new(own).map_err(|e| of(format!("this relay's own region: {e}")))?;
        GlobalTable::new(own, regions.to_vec())
            .map(Some)
            .map_err(|e| of(e.to_string()))
    }
}

/// `--regions`' parser: region names separated by commas, or nothing (clap names the flag and
/// the variable).
fn parse_regions(value: &str) -> Result<RegionList, String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| Region::new(r).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()
        .map(RegionList)
}

#[cfg(test)]
mod tests;
