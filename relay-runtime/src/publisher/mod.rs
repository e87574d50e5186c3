//! The publisher port and its EventBridge adapter.
//!
//! [`EventBridgePublisher`] packs events into `PutEvents` calls of at most 10 entries that also fit
//! the configured request size, keeps a bounded number of calls in flight, checks every entry's
//! result (a `PutEvents` call answers HTTP 200 even when entries failed), and retries the entries
//! that failed with a retryable code, with the project's full-jitter [`RetryPolicy`]. It stamps
//! the configured bus and `Source` on every entry and returns one [`PublishOutcome`] per event, so
//! a caller never reports success for an unpublished event.
//!
//! [`RetryPolicy`]: outbox_shared::RetryPolicy
//!
//! Ordering: a call holds at most one event of an aggregate ([`OutboundEvent::ordering_key`]),
//! and is not sent before the call holding the aggregate's previous event has finished; once an
//! event is not published (failed after its retries, held back, or cut by the deadline), the later
//! events of its aggregate are not sent at all ([`PublishOutcome::HeldBack`]). So one aggregate's
//! events leave in order even under failure, and none overtakes an earlier one that failed.
//!
//! Refused calls: a call EventBridge refuses as a whole with a code one entry can cause (one of
//! [`POISON_ENTRY_CODES`]: a field over a model constraint fails every entry of the call) is sent
//! again in halves, each halved again if it is refused too, until the entry at fault is alone: it
//! is poison ([`PublishOutcome::Rejected`]), the others are published. The halves go one after
//! the other in the refused call's place, so ordering holds as it does for any call. Other
//! permanent call errors (access denied, no such bus) fail every entry however the call is cut,
//! so such a call is not split.
//!
//! Rate: every call, retries included, leaves at the pace of the publisher's [`PublishRate`]
//! (no limit until the bus throttles or a ceiling is set; see that module for the adaptation),
//! and only while the process has fewer calls in flight than its [`PublishConcurrency`] allows
//! (lowered when a call times out: a slow bus; see that module).
//!
//! Deadline: [`Publisher::publish`] starts no call, and no retry, after its [`Deadline`]'s
//! publish-by time; the events not sent are [`PublishOutcome::NotSent`]. A call already sent is
//! bounded by the SDK client's operation timeout.
//!
//! The room: this module is the port, what every adapter answers with, and [`TargetPublisher`], the
//! publisher of the configured bus kind; [`request`] packs events into calls (what goes together,
//! what waits for what), apart from the calls themselves; [`send`] sends them and retries what may
//! succeed, for any bus; [`eventbridge`] is the classic bus's call, [`custom_bus`] the Custom
//! Event Bus's (EventsV2: up to 100 entries, each with its aggregate as `EventGroupId` and its
//! event id as `DeduplicationId`; `DEDUPLICATED` counts as published). A bus kind is one
//! [`TargetCall`] in a file of its own, its [`TargetSpec`] beside it, and one variant of [`TargetKind`]:
//! [`TargetKind::spec`] is the one place a kind is chosen.
//!
//! [`Deadline`]: crate::deadline::Deadline

use std::borrow::Borrow;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use outbox_shared::OutboundEvent;

#[cfg(doc)]
use crate::{publish_concurrency::PublishConcurrency, publish_rate::PublishRate};

pub mod custom_bus;
pub mod eventbridge;
pub mod kinesis;
pub mod message;
pub mod request;
pub mod send;
pub mod sns;
pub mod sqs;

pub use custom_bus::{CustomBus, CustomBusPublisher};
pub use eventbridge::{ClassicBus, EventBridgePublisher};
pub use kinesis::KinesisStream;
pub use request::pack_calls;
pub use send::{TargetAdapter, TargetCall};
pub use sns::SnsTopic;
pub use sqs::SqsQueue;

use crate::config::TargetKind;
use crate::deadline::Deadline;

/// What happened to one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// The target accepted it.
    Published,
    /// The target can never accept it as it is (malformed, too large): poison, for the dead-letter
    /// queue.
    Rejected { code: String, message: String },
    /// Not published after every attempt (throttling, outage, access denied). It stays pending and
    /// a later attempt can succeed.
    Failed { code: String, message: String },
    /// Not sent: an earlier event of its aggregate was not published, and this one must not
    /// overtake it. It stays pending.
    HeldBack,
    /// Not sent: the deadline came first, or the target answered nothing even one call at a time
    /// and the one call it was let have was out. It stays pending.
    NotSent,
}

impl PublishOutcome {
    pub fn is_published(&self) -> bool {
        matches!(self, Self::Published)
    }
}

/// Entry error codes that mean the event itself can never be published: poison.
/// Any other non-retryable code (say, access denied) is a configuration problem, not the event's.
/// A whole call refused with one of them may be one entry's fault, and is split to find it.
pub const POISON_ENTRY_CODES: &[&str] = &[
    "MalformedDetail",
    "InvalidArgument",
    "ValidationException",
    ENTRY_TOO_LARGE,
    // The Custom Event Bus's code for a parameter over a model constraint.
    "InvalidInputException",
    // SNS and SQS: a message (or a batch) the service refuses for what it holds or its size.
    "InvalidParameter",
    "InvalidParameterValue",
    "InvalidMessageContents",
    "BatchRequestTooLong",
    // Kinesis: a record (or a call) the service refuses for what it holds or its size.
    "InvalidArgumentException",
];

/// Our code for an event larger than the configured entry size; it is never sent.
pub const ENTRY_TOO_LARGE: &str = "EntryTooLarge";

/// EventBridge's code of a call or entry refused because the bus's `PutEvents` quota is exceeded.
pub const THROTTLED: &str = "ThrottlingException";

/// Whether `code` refuses a call or an entry for the target's quota (EventBridge's
/// `ThrottlingException`, SNS's `Throttled`, Kinesis's `ProvisionedThroughputExceededException`,
/// …): the publish rate drops.
pub(crate) fn is_throttled(code: &str) -> bool {
    outbox_shared::error::is_throttling_code(code)
}

/// Counters across every call of one publisher.
#[derive(Debug, Default)]
pub struct PublishStats {
    pub(crate) publish_calls: AtomicU64,
    published: AtomicU64,
    pub(crate) deduplicated: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) throttled: AtomicU64,
    pub(crate) timed_out: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
    held_back: AtomicU64,
    not_sent: AtomicU64,
    pub(crate) payloads_stored: AtomicU64,
    pub(crate) payloads_already_stored: AtomicU64,
}

/// A point-in-time copy of [`PublishStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PublishStatsSnapshot {
    /// Calls sent to the target (`PutEvents`, `PublishBatch`, `SendMessageBatch`, `PutRecords`),
    /// retries included.
    pub publish_calls: u64,
    pub published: u64,
    /// Entries the Custom Event Bus answered `DEDUPLICATED` (accepted before, within its 300 s
    /// window): published, and a part of `published`; always 0 on the classic bus.
    pub deduplicated: u64,
    /// Entries sent again after a retryable failure (one per entry per retry).
    pub retried: u64,
    /// Entries refused for the target's quota (one per entry per attempt).
    pub throttled: u64,
    /// Calls that got no answer in time (the SDK's timeout).
    pub timed_out: u64,
    pub rejected: u64,
    pub failed: u64,
    /// Not sent because an earlier event of their aggregate was not published.
    pub held_back: u64,
    /// Not sent because the deadline came first (or the bus answered nothing; see
    /// [`PublishOutcome::NotSent`]).
    pub not_sent: u64,
    /// Payloads written to the payload bucket (the claim check: events too large for the target).
    pub payloads_stored: u64,
    /// Payloads found already in the payload bucket (an earlier publish stored them): nothing
    /// written, the entry sent with its reference.
    pub payloads_already_stored: u64,
}

impl PublishStats {
    pub fn snapshot(&self) -> PublishStatsSnapshot {
        PublishStatsSnapshot {
            publish_calls: self.publish_calls.load(Ordering::Relaxed),
            published: self.published.load(Ordering::Relaxed),
            deduplicated: self.deduplicated.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            throttled: self.throttled.load(Ordering::Relaxed),
            timed_out: self.timed_out.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            held_back: self.held_back.load(Ordering::Relaxed),
            not_sent: self.not_sent.load(Ordering::Relaxed),
            payloads_stored: self.payloads_stored.load(Ordering::Relaxed),
            payloads_already_stored: self.payloads_already_stored.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn record(&self, outcome: &PublishOutcome) {
        let counter = match outcome {
            PublishOutcome::Published => &self.published,
            PublishOutcome::Rejected { .. } => &self.rejected,
            PublishOutcome::Failed { .. } => &self.failed,
            PublishOutcome::HeldBack => &self.held_back,
            PublishOutcome::NotSent => &self.not_sent,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Port: publishes events, one outcome per event, in input order.
pub trait Publisher: Send + Sync {
    /// Publishes `events` (owned or borrowed), starting no call after `deadline`'s publish-by
    /// time (events not sent by then are [`PublishOutcome::NotSent`]).
    fn publish<E: Borrow<OutboundEvent> + Sync>(
        &self,
        events: &[E],
        deadline: Deadline,
    ) -> impl Future<Output = Vec<PublishOutcome>> + Send;
}

/// A borrowed publisher is a publisher (a test keeps its fake to inspect it after the relay ran).
impl<P: Publisher> Publisher for &P {
    fn publish<E: Borrow<OutboundEvent> + Sync>(
        &self,
        events: &[E],
        deadline: Deadline,
    ) -> impl Future<Output = Vec<PublishOutcome>> + Send {
        (**self).publish(events, deadline)
    }
}

/// What a target kind is before it has a client: its limits, how it counts an entry's size, what
/// names a target of the kind, what `Source` it takes, how its call is built and what IAM must
/// allow for it. Each kind's is beside its [`TargetCall`].
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
    /// This kind's call, on a client built from `sdk` (counting its failed calls).
    pub call: fn(&aws_config::SdkConfig) -> std::sync::Arc<dyn TargetCall>,
    /// What the publisher calls on a target of this kind, as IAM names it (the roles of both
    /// relays grant it on the configured target).
    /// `messaging.system` of its publish spans: OpenTelemetry's messaging conventions' value
    /// where they have one (`aws.sns`, `aws_sqs`), else `aws_` and the service (`aws_eventbridge`
    /// for both buses, `aws_kinesis`).
    pub messaging_system: &'static str,
    pub calls: &'static [crate::permissions::Call],
}

impl TargetKind {
    /// What a target of this kind is: the one place a kind is chosen.
    pub fn spec(self) -> &'static TargetSpec {
        match self {
            Self::Classic => &eventbridge::SPEC,
            Self::Custom => &custom_bus::SPEC,
            Self::Sns => &sns::SPEC,
            Self::Sqs => &sqs::SPEC,
            Self::Kinesis => &kinesis::SPEC,
        }
    }
}

/// The publisher of the configured target kind ([`crate::config::PublisherConfig::target_kind`]):
/// what both relays run. The target's call is chosen at start from the configuration, so it is a
/// trait object (shared by the publisher's clones); what is done with the calls is the same
/// [`TargetAdapter`] for every kind.
pub type TargetPublisher = TargetAdapter<std::sync::Arc<dyn TargetCall>>;

/// The outcome of an entry refused with the non-retryable `code`: poison when the event itself
/// can never be accepted, a failure (it stays pending) otherwise.
pub(crate) fn permanent_outcome(code: String, message: String) -> PublishOutcome {
    if is_poison_code(&code) {
        PublishOutcome::Rejected { code, message }
    } else {
        PublishOutcome::Failed { code, message }
    }
}

/// Whether `code` says the event itself can never be published ([`POISON_ENTRY_CODES`]).
pub(crate) fn is_poison_code(code: &str) -> bool {
    POISON_ENTRY_CODES.contains(&code)
}

#[cfg(test)]
mod tests;
