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
//! Deadline: [`Publisher::publish_until`] starts no call, and no retry, after `stop_at`; the
//! events not sent are [`PublishOutcome::NotSent`]. A call already sent is bounded by the SDK
//! client's operation timeout.
//!
//! The room: this module is the port, what every adapter answers with, and [`BusPublisher`], the
//! publisher of the configured bus kind; [`request`] packs events into calls (what goes together,
//! what waits for what), apart from the calls themselves; [`send`] sends them and retries what may
//! succeed, for any bus; [`eventbridge`] is the classic bus's call, [`custom_bus`] the Custom
//! Event Bus's (EventsV2: up to 100 entries, each with its aggregate as `EventGroupId` and its
//! event id as `DeduplicationId`; `DEDUPLICATED` counts as published).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use outbox_shared::OutboundEvent;
use tokio::time::Instant;

#[cfg(doc)]
use crate::{publish_concurrency::PublishConcurrency, publish_rate::PublishRate};

pub mod custom_bus;
pub mod eventbridge;
pub mod request;
pub mod send;

pub use custom_bus::CustomBusPublisher;
pub use eventbridge::EventBridgePublisher;
pub use request::pack_calls;

use crate::CallTasks;
use crate::config::{BusKind, PublisherConfig, PublisherConfigError};

/// What happened to one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublishOutcome {
    /// EventBridge accepted it.
    Published,
    /// EventBridge can never accept it as it is (malformed, too large): poison, for the dead-letter
    /// queue.
    Rejected { code: String, message: String },
    /// Not published after every attempt (throttling, outage, access denied). It stays pending and
    /// a later attempt can succeed.
    Failed { code: String, message: String },
    /// Not sent: an earlier event of its aggregate was not published, and this one must not
    /// overtake it. It stays pending.
    HeldBack,
    /// Not sent: the deadline came first, or the bus answered nothing even one call at a time
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
];

/// Our code for an event larger than the configured entry size; it is never sent.
pub const ENTRY_TOO_LARGE: &str = "EntryTooLarge";

/// The code of a call or entry refused because the bus's `PutEvents` quota is exceeded.
pub const THROTTLED: &str = "ThrottlingException";

/// Counters across every call of one publisher.
#[derive(Debug, Default)]
pub struct PublishStats {
    pub(crate) put_events_calls: AtomicU64,
    published: AtomicU64,
    pub(crate) deduplicated: AtomicU64,
    pub(crate) retried: AtomicU64,
    pub(crate) throttled: AtomicU64,
    pub(crate) timed_out: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
    held_back: AtomicU64,
    not_sent: AtomicU64,
}

/// A point-in-time copy of [`PublishStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PublishStatsSnapshot {
    /// `PutEvents` calls sent, retries included.
    pub put_events_calls: u64,
    pub published: u64,
    /// Entries the Custom Event Bus answered `DEDUPLICATED` (accepted before, within its 300 s
    /// window): published, and a part of `published`; always 0 on the classic bus.
    pub deduplicated: u64,
    /// Entries sent again after a retryable failure (one per entry per retry).
    pub retried: u64,
    /// Entries refused with `ThrottlingException` (one per entry per attempt).
    pub throttled: u64,
    /// `PutEvents` calls that got no answer in time (the SDK's timeout).
    pub timed_out: u64,
    pub rejected: u64,
    pub failed: u64,
    /// Not sent because an earlier event of their aggregate was not published.
    pub held_back: u64,
    /// Not sent because the deadline came first (or the bus answered nothing; see
    /// [`PublishOutcome::NotSent`]).
    pub not_sent: u64,
}

impl PublishStats {
    pub fn snapshot(&self) -> PublishStatsSnapshot {
        PublishStatsSnapshot {
            put_events_calls: self.put_events_calls.load(Ordering::Relaxed),
            published: self.published.load(Ordering::Relaxed),
            deduplicated: self.deduplicated.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            throttled: self.throttled.load(Ordering::Relaxed),
            timed_out: self.timed_out.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            held_back: self.held_back.load(Ordering::Relaxed),
            not_sent: self.not_sent.load(Ordering::Relaxed),
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
    /// Publishes `events`, starting nothing after `stop_at` (events not sent by then are
    /// [`PublishOutcome::NotSent`]).
    fn publish_until(
        &self,
        events: &[OutboundEvent],
        stop_at: Option<Instant>,
    ) -> impl Future<Output = Vec<PublishOutcome>> + Send;

    /// Publishes `events` with no deadline.
    fn publish(
        &self,
        events: &[OutboundEvent],
    ) -> impl Future<Output = Vec<PublishOutcome>> + Send {
        self.publish_until(events, None)
    }
}

/// A borrowed publisher is a publisher (a test keeps its fake to inspect it after the relay ran).
impl<P: Publisher> Publisher for &P {
    fn publish_until(
        &self,
        events: &[OutboundEvent],
        stop_at: Option<Instant>,
    ) -> impl Future<Output = Vec<PublishOutcome>> + Send {
        (**self).publish_until(events, stop_at)
    }

    fn publish(
        &self,
        events: &[OutboundEvent],
    ) -> impl Future<Output = Vec<PublishOutcome>> + Send {
        (**self).publish(events)
    }
}

/// The SDK clients of both bus kinds; a [`BusPublisher`] uses the one its configuration names.
/// Both are built from one SDK configuration (no call is made by building one), each reached
/// through its own standard endpoint setting (`AWS_ENDPOINT_URL_EVENTBRIDGE`,
/// `AWS_ENDPOINT_URL_EVENTBRIDGEV2`), so no code branch differs for a local emulator.
#[derive(Debug, Clone)]
pub struct BusClients {
    pub classic: aws_sdk_eventbridge::Client,
    pub custom: aws_sdk_eventbridgev2::Client,
}

impl BusClients {
    /// Both clients from `sdk`, counting their failed calls ([`crate::clients`]).
    pub fn new(sdk: &aws_config::SdkConfig) -> Self {
        Self {
            classic: crate::clients::eventbridge(sdk),
            custom: crate::clients::eventbridgev2(sdk),
        }
    }

    /// These clients with `classic` for the classic bus (tests inject faults through it).
    #[must_use]
    pub fn with_classic(self, classic: aws_sdk_eventbridge::Client) -> Self {
        Self { classic, ..self }
    }

    /// These clients with `custom` for the Custom Event Bus (tests inject faults through it).
    #[must_use]
    pub fn with_custom(self, custom: aws_sdk_eventbridgev2::Client) -> Self {
        Self { custom, ..self }
    }
}

/// The publisher of the configured bus kind ([`PublisherConfig::bus_kind`]): what both relays
/// run. An enum, not a trait object: the port's futures are not object-safe, and two variants
/// cost one match per publish.
#[derive(Debug, Clone)]
pub enum BusPublisher {
    Classic(EventBridgePublisher),
    Custom(CustomBusPublisher),
}

impl BusPublisher {
    /// The publisher `config.bus_kind` names, on its client of `clients`.
    ///
    /// # Errors
    /// [`PublisherConfigError`] when the configuration is out of range.
    pub fn new(clients: BusClients, config: PublisherConfig) -> Result<Self, PublisherConfigError> {
        Ok(match config.bus_kind {
            BusKind::Classic => Self::Classic(EventBridgePublisher::new(clients.classic, config)?),
            BusKind::Custom => Self::Custom(CustomBusPublisher::new(clients.custom, config)?),
        })
    }

    /// Runs its `PutEvents` calls as `call_tasks` says (default: in the caller's task).
    #[must_use]
    pub fn with_call_tasks(self, call_tasks: CallTasks) -> Self {
        match self {
            Self::Classic(p) => Self::Classic(p.with_call_tasks(call_tasks)),
            Self::Custom(p) => Self::Custom(p.with_call_tasks(call_tasks)),
        }
    }

    pub fn config(&self) -> &PublisherConfig {
        match self {
            Self::Classic(p) => p.config(),
            Self::Custom(p) => p.config(),
        }
    }

    /// Counters since this publisher was built (shared by its clones).
    pub fn stats(&self) -> PublishStatsSnapshot {
        match self {
            Self::Classic(p) => p.stats(),
            Self::Custom(p) => p.stats(),
        }
    }

    /// The entries per second it lets out now (`None`: no limit), shared by its clones.
    pub fn publish_rate(&self) -> Option<f64> {
        match self {
            Self::Classic(p) => p.publish_rate(),
            Self::Custom(p) => p.publish_rate(),
        }
    }

    /// The `PutEvents` calls it lets be in flight at once, all publishes together.
    pub fn publish_concurrency(&self) -> usize {
        match self {
            Self::Classic(p) => p.publish_concurrency(),
            Self::Custom(p) => p.publish_concurrency(),
        }
    }
}

impl Publisher for BusPublisher {
    async fn publish_until(
        &self,
        events: &[OutboundEvent],
        stop_at: Option<Instant>,
    ) -> Vec<PublishOutcome> {
        match self {
            Self::Classic(p) => p.publish_until(events, stop_at).await,
            Self::Custom(p) => p.publish_until(events, stop_at).await,
        }
    }
}

/// Whether `stop_at` has come.
pub(crate) fn past(stop_at: Option<Instant>) -> bool {
    stop_at.is_some_and(|at| Instant::now() >= at)
}

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
