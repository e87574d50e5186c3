//! The publisher port, and [`TargetPublisher`], its adapter for every kind of target.
//!
//! [`TargetPublisher`] packs events into calls of at most the target's entries per call that also
//! fit the configured request size, keeps a bounded number of calls in flight, checks every
//! entry's result (every target answers HTTP 200 even when entries failed), and retries the
//! entries that failed with a retryable code, with the project's full-jitter [`RetryPolicy`]. The
//! target's call ([`crate::target`]) stamps the configured target and `Source` on every entry; the
//! publisher returns one [`PublishOutcome`] per event, so a caller never reports success for an
//! unpublished event.
//!
//! [`RetryPolicy`]: outbox_shared::RetryPolicy
//!
//! Ordering: a call holds at most one event of an aggregate ([`OutboundEvent::ordering_key`]),
//! and is not sent before the call holding the aggregate's previous event has finished; once an
//! event is not published (failed after its retries, held back, or cut by the deadline), the later
//! events of its aggregate are not sent at all ([`PublishOutcome::HeldBack`]). So one aggregate's
//! events leave in order even under failure, and none overtakes an earlier one that failed.
//!
//! Refused calls: a call the target refuses as a whole with a code one entry can cause (one of
//! its poison codes, [`crate::target::TargetSpec::is_poison`]: a field over a model constraint
//! fails every entry of the call) is sent again in halves, each halved again if it is refused
//! too, until the entry at fault is alone: it is poison ([`PublishOutcome::Rejected`]), the others
//! are published. The halves go one after the other in the refused call's place, so ordering
//! holds as it does for any call. Other permanent call errors (access denied, no such target)
//! fail every entry however the call is cut, so such a call is not split.
//!
//! Rate: every call, retries included, leaves at the pace of the publisher's [`PublishRate`]
//! (no limit until the target throttles or a ceiling is set; see that module for the
//! adaptation), and only while the process has fewer calls in flight than its
//! [`PublishConcurrency`] allows (lowered when a call times out: a slow target; see that module).
//!
//! Deadline: [`Publisher::publish`] starts no call, and no retry, after its [`Deadline`]'s
//! publish-by time; the events not sent are [`PublishOutcome::NotSent`]. A call already sent is
//! bounded by the SDK client's operation timeout.
//!
//! The room: this module is the port and what every adapter answers with; [`request`] packs
//! events into calls (what goes together, what waits for what), apart from the calls themselves;
//! [`send`] is [`TargetPublisher`], which sends them and retries what may succeed, for any target;
//! [`attempt`] reads what one call did to its entries. The targets' own calls are
//! [`crate::target`]'s, one room per kind.
//!
//! [`Deadline`]: crate::deadline::Deadline

use std::borrow::Borrow;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use outbox_shared::OutboundEvent;

#[cfg(doc)]
use crate::{publish_concurrency::PublishConcurrency, publish_rate::PublishRate};

pub mod attempt;
pub mod request;
pub mod send;

pub use request::pack_calls;
pub use send::TargetPublisher;

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

/// The calls a publisher sent to the target, retries included, as the relays' summaries print
/// them (flattened): `publish_calls`, and the one place of its deprecated name `put_events_calls`
/// (the same value, for scripts that read the summaries; removed in release 0.2.0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PublishCalls {
    pub publish_calls: u64,
    #[serde(default)]
    put_events_calls: u64,
}

impl From<u64> for PublishCalls {
    fn from(calls: u64) -> Self {
        Self {
            publish_calls: calls,
            put_events_calls: calls,
        }
    }
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
    /// window): published, and a part of `published`; always 0 on every other target.
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
    /// Not sent because the deadline came first (or the target answered nothing; see
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

#[cfg(test)]
mod tests;
