//! What the relays publish to: one room per kind of target, and [`TargetKind::spec`], the one
//! place a kind is chosen.
//!
//! A target's room (its file, and its tests beside it) holds everything the relays know of it:
//! its [`TargetSpec`] (limits, how an entry is sized, what names a target of the kind, its
//! `Source` rule, the IAM actions of its publish call and of its describe call, its order and
//! de-duplication, its error codes as the Rust SDK reports them); its [`TargetCall`] (the entries
//! of one call, on a client built once by [`publish_client!`], and the answer read entry by
//! entry); and its describe call (`describe`, for start-up and `relay-poller check`). What is done
//! with the calls (turns, retries, halves, pace) is [`crate::publisher`]'s, the same for every
//! kind.
//!
//! The rooms: [`classic`] (the classic bus, `PutEvents`), [`custom`] (the Custom Event Bus,
//! EventsV2), [`sns`] (a topic, `PublishBatch`), [`sqs`] (a queue, `SendMessageBatch`) and
//! [`kinesis`] (a data stream, `PutRecords`); [`message`] is what SNS and SQS share (one message
//! entry, sized and read the same); [`call`] is the port each room's call answers.

// A describe call's `Unusable` is made at most once, at start-up (see `crate::preflight`).
#![allow(clippy::result_large_err)]

use std::fmt;

use aws_config::SdkConfig;
use futures::future::BoxFuture;
use outbox_shared::OutboundEvent;
use outbox_shared::error::ServiceCodes;

use crate::permissions::Call;
use crate::probe::{Kind, Probed, Resource, Unusable};

pub mod call;
pub mod classic;
pub mod custom;
pub mod kinesis;
pub mod message;
pub mod sns;
pub mod sqs;

pub use call::{CallAnswer, EntryResult, TargetCall};
pub use classic::ClassicBus;
pub use custom::CustomBus;
pub use kinesis::KinesisStream;
pub use sns::SnsTopic;
pub use sqs::SqsQueue;

/// What the relays publish to: `EVENT_TARGET_KIND` / `--target-kind` (for the two buses also
/// `EVENT_BUS_KIND` / `--event-bus-kind`, [`crate::config::PublisherArgs`]). Each kind is one room
/// of this module, chosen in [`TargetKind::spec`].
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
#[value(rename_all = "lowercase")]
pub enum TargetKind {
    /// The classic event bus (rules and targets), the target a name or an ARN (`event-bus/…`).
    /// The default.
    #[default]
    Classic,
    /// The Custom Event Bus (EventsV2: FIFO subscribers per event group, `DeduplicationId`), the
    /// target its whole ARN (`event-busv2/NAME/ID`).
    Custom,
    /// An SNS topic (`PublishBatch`), the target its ARN; a FIFO topic (`.fifo`) gets each
    /// aggregate as its message group and the event id as its de-duplication id.
    Sns,
    /// An SQS queue (`SendMessageBatch`), the target its URL; a FIFO queue (`.fifo`) gets each
    /// aggregate as its message group and the event id as its de-duplication id.
    Sqs,
    /// A Kinesis data stream (`PutRecords`), the target its ARN; each aggregate is its record's
    /// partition key.
    Kinesis,
}

impl TargetKind {
    /// What a target of this kind is: the one place a kind is chosen.
    pub fn spec(self) -> &'static TargetSpec {
        match self {
            Self::Classic => &classic::SPEC,
            Self::Custom => &custom::SPEC,
            Self::Sns => &sns::SPEC,
            Self::Sqs => &sqs::SPEC,
            Self::Kinesis => &kinesis::SPEC,
        }
    }

    /// Every kind, in the order `--target-kind` lists them.
    pub fn all() -> &'static [Self] {
        <Self as clap::ValueEnum>::value_variants()
    }

    /// The accepted values, as written.
    pub fn names() -> Vec<String> {
        Self::all().iter().map(ToString::to_string).collect()
    }

    /// Whether this kind is one of the two EventBridge buses (what `EVENT_BUS_KIND` and
    /// `EVENT_BUS_NAME` may name).
    pub fn is_bus(self) -> bool {
        matches!(self, Self::Classic | Self::Custom)
    }

    /// Most entries one call to this target takes (10 classic, 100 custom, 10 SNS and SQS, 500
    /// Kinesis).
    pub fn max_entries_per_call(self) -> usize {
        self.spec().max_entries_per_call
    }

    /// The default size budget of one entry.
    pub fn default_max_bytes(self) -> usize {
        self.spec().default_max_entry_bytes
    }

    /// What order and de-duplication a target of this kind named `target` gives each aggregate,
    /// as a clause that follows its description (`, each aggregate in order, …`).
    pub fn order(self, target: &str) -> &'static str {
        (self.spec().order)(target)
    }
}

impl fmt::Display for TargetKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let value = clap::ValueEnum::to_possible_value(self).expect("no kind is skipped");
        f.write_str(value.get_name())
    }
}

impl std::str::FromStr for TargetKind {
    type Err = String;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        <Self as clap::ValueEnum>::from_str(value, false).map_err(|_| {
            format!(
                "{value:?} is not a target kind: accepted values are {}",
                Self::names().join(", ")
            )
        })
    }
}

/// A describe call of a target: the target `resource` names, as its service describes it.
pub type Describe = for<'a> fn(
    &'a SdkConfig,
    &'a Resource,
) -> BoxFuture<'a, Result<Probed<TargetDescription>, Unusable>>;

/// What a target kind is before it has a client: its limits, how it counts an entry's size, what
/// names a target of the kind, what `Source` it takes, how its call is built and described, what
/// IAM must allow for it, what order it keeps and what its error codes mean. Each kind's is in its
/// room.
#[derive(Debug)]
pub struct TargetSpec {
    /// Most entries one call takes.
    pub max_entries_per_call: usize,
    /// The default size budget of one entry, and the most it may be configured to.
    pub default_max_entry_bytes: usize,
    pub max_entry_bytes: usize,
    /// The default size budget of one call, and the most it may be configured to.
    pub default_max_request_bytes: usize,
    pub max_request_bytes: usize,
    /// An event's size as this target counts it against its entry and call limits, published
    /// with the configured `Source`.
    pub entry_size: fn(&OutboundEvent, &str) -> usize,
    /// What a target of this kind is named by, in words, for a setting naming a target of
    /// another kind.
    pub named_by: &'static str,
    /// Whether a name is one of this kind's, as far as telling kinds apart goes (a target of
    /// another kind configured by mistake).
    pub claims: fn(&str) -> bool,
    /// Checks that a name is a target of this kind, as the service accepts it: what it must be
    /// if not.
    pub check_name: fn(&str) -> Result<(), String>,
    /// Checks that a `Source` is one this kind takes: what is wrong with it if not.
    pub check_source: fn(&str) -> Result<(), String>,
    /// This kind's call, on a client built once from `sdk` ([`publish_client!`]).
    pub call: fn(&SdkConfig) -> std::sync::Arc<dyn TargetCall>,
    /// `messaging.system` of its publish spans: OpenTelemetry's messaging conventions' value
    /// where they have one (`aws.sns`, `aws_sqs`), else `aws_` and the service (`aws_eventbridge`
    /// for both buses, `aws_kinesis`).
    pub messaging_system: &'static str,
    /// What the publisher calls on a target of this kind, as IAM names it (the roles of both
    /// relays grant it on the configured target).
    pub calls: &'static [Call],
    /// What a target of this kind is, as a resource the start-up probe names.
    pub resource: Kind,
    /// Describes a target of this kind (start-up and `relay-poller check`).
    pub describe: Describe,
    /// What `describe` calls, as IAM names it.
    pub describe_calls: &'static [Call],
    /// What order and de-duplication a target of this kind named so gives each aggregate
    /// ([`TargetKind::order`]).
    pub order: fn(&str) -> &'static str,
    /// Entry or call error codes that mean the event itself can never be published: poison.
    /// Any other non-retryable code (say, access denied) is a configuration problem, not the
    /// event's. A whole call refused with one of them may be one entry's fault, and is split to
    /// find it. [`ENTRY_TOO_LARGE`] and [`COMMON_POISON_CODES`] are every kind's too.
    pub poison_codes: &'static [&'static str],
    /// Call error codes of a call refused for what its entries add up to (a batch over the
    /// call's size limit): split in halves and sent again; an entry refused so alone stays
    /// pending, since no entry was found at fault.
    pub split_codes: &'static [&'static str],
    /// The service's own throttling, missing-resource and access-denied codes, beside those every
    /// AWS service shares ([`outbox_shared::error`]).
    pub codes: ServiceCodes,
}

impl TargetSpec {
    /// Whether `code` says the event itself can never be published on this kind.
    pub fn is_poison(&self, code: &str) -> bool {
        code == ENTRY_TOO_LARGE
            || COMMON_POISON_CODES.contains(&code)
            || self.poison_codes.contains(&code)
    }

    /// Whether a whole call refused with `code` is sent again in halves: a code one entry can
    /// cause (poison), or one of the call's size ([`TargetSpec::split_codes`]).
    pub fn splits(&self, code: &str) -> bool {
        self.is_poison(code) || self.split_codes.contains(&code)
    }

    /// Every service code of this kind's own its classification names (not
    /// [`COMMON_POISON_CODES`], every kind's, nor [`ENTRY_TOO_LARGE`], the relay's own): each is
    /// one the kind's SDK can produce.
    pub fn named_codes(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.poison_codes
            .iter()
            .copied()
            .chain(self.split_codes.iter().copied())
            .chain(self.codes.throttling.iter().copied())
            .chain(self.codes.not_found.iter().copied())
            .chain(self.codes.access_denied.iter().copied())
    }
}

/// Our code for an event larger than the configured entry size; it is never sent.
pub const ENTRY_TOO_LARGE: &str = "EntryTooLarge";

/// Poison on every kind: the SDK's code for a request over a model constraint of a JSON service.
pub const COMMON_POISON_CODES: &[&str] = &["ValidationException"];

/// A target as its service describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetDescription {
    pub kind: TargetKind,
    /// Its ARN, as the service answered it.
    pub arn: String,
    /// Its state, where the kind has one (the Custom Event Bus: `ACTIVE`, `CREATING`, …).
    pub state: Option<String>,
    /// The most one entry may be, where the target sets it itself (an SQS queue's
    /// `MaximumMessageSize`; a Kinesis stream's `MaxRecordSizeInKiB`, where the service answers
    /// it): the relays' entry budget is at most this ([`crate::PublisherConfig::within_target_limit`]).
    /// `None`: the kind's documented limit ([`TargetSpec::max_entry_bytes`]).
    pub max_entry_bytes: Option<usize>,
}

/// The publish client of a target, built once from its SDK's configuration builder: it counts its
/// failed calls ([`crate::metrics::FailedCallCounter`]) and leaves a call that timed out to the
/// publisher ([`call::TimeoutsToThePublisher`]); everything else (timeouts, region, endpoint,
/// SDK retries) is the builder's.
macro_rules! publish_client {
    ($sdk:ident, $builder:expr) => {
        $sdk::Client::from_conf(
            $builder
                .interceptor($crate::metrics::FailedCallCounter)
                .retry_classifier($crate::target::call::TimeoutsToThePublisher)
                .build(),
        )
    };
}
pub(crate) use publish_client;

/// The service of an ARN (`arn:PARTITION:SERVICE:…`), if `name` is one.
pub(crate) fn arn_service(name: &str) -> Option<&str> {
    let mut parts = name.split(':');
    (parts.next() == Some("arn"))
        .then(|| parts.nth(1))
        .flatten()
}
