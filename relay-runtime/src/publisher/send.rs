//! [`TargetPublisher`]: what is done with the calls the request builder packed, whatever the
//! target: at most `max_concurrency` in flight per publish and no more than the
//! [`PublishConcurrency`] lets the whole process have, every entry's result checked
//! ([`super::attempt`]), the entries that failed with a retryable code sent again with backoff, a
//! call refused as a whole for what one entry can cause sent again in halves, at the
//! [`PublishRate`]'s pace. A throttle lowers the rate; a call that times out lowers the calls in
//! flight.
//!
//! The target is a [`TargetCall`] ([`crate::target`]): how one call of some entries is sent and
//! its answer read; the relays' is the one their configuration chose ([`TargetPublisher::new`]).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use futures::future::{BoxFuture, Shared, join_all};
use futures::{FutureExt, StreamExt};
use outbox_shared::OutboundEvent;
use outbox_shared::claim_check::{PayloadStore, Stored};
use tokio::sync::Semaphore;

use super::attempt::{Attempt, call_failed, read_results};
use super::request::{call_dependencies, pack_calls, previous_of_aggregate};
use super::{PublishOutcome, PublishStats, PublishStatsSnapshot, Publisher};
use crate::CallTasks;
use crate::claim_check::{ClaimCheck, PayloadError};
use crate::config::{PublisherArgs, PublisherConfig, SettingError};
use crate::deadline::Deadline;
use crate::publish_concurrency::{Permit, PublishConcurrency};
use crate::publish_rate::{PublishRate, Slot};
use crate::target::{CallAnswer, ENTRY_TOO_LARGE, TargetCall, TargetSpec};

/// The publisher of one target: sends the calls the request builder packs through the target's
/// call. The call is chosen at start from the configuration, so it is a trait object, shared by
/// the publisher's clones.
#[derive(Debug, Clone)]
pub struct TargetPublisher {
    pub(crate) target: Arc<dyn TargetCall>,
    /// What the target is: how it counts an entry's size, its codes.
    pub(crate) spec: &'static TargetSpec,
    pub(crate) config: PublisherConfig,
    pub(crate) stats: Arc<PublishStats>,
    pub(crate) rate: Arc<PublishRate>,
    pub(crate) concurrency: Arc<PublishConcurrency>,
    pub(crate) call_tasks: CallTasks,
    /// Where payloads too large for an entry go (`PAYLOAD_BUCKET`), if anywhere.
    pub(crate) claim_check: Option<ClaimCheck>,
}

impl TargetPublisher {
    /// The publisher of `config`'s target kind, its call on a client built from `sdk`.
    ///
    /// # Errors
    /// [`SettingError`] when the configuration is out of range.
    pub fn new(sdk: &aws_config::SdkConfig, config: PublisherConfig) -> Result<Self, SettingError> {
        let claim_check = config
            .payload_bucket
            .as_ref()
            .map(|bucket| PayloadStore::new(crate::clients::s3(sdk), bucket));
        let publisher = Self::with_target((config.target_kind.spec().call)(sdk), config)?;
        Ok(match claim_check {
            Some(store) => publisher.with_payload_store(store),
            None => publisher,
        })
    }

    /// The publisher of `config` over `target`, a call built elsewhere (tests inject faults
    /// through its client). Its claim check, when `config` names a payload bucket, is
    /// [`with_payload_store`](TargetPublisher::with_payload_store)'s.
    ///
    /// # Errors
    /// [`SettingError`] when the configuration is out of range or for another target kind.
    pub fn on(
        target: impl TargetCall + 'static,
        config: PublisherConfig,
    ) -> Result<Self, SettingError> {
        Self::with_target(Arc::new(target), config)
    }

    /// # Errors
    /// [`SettingError`] when the configuration is out of range, or is for another kind of
    /// target than `target`.
    fn with_target(
        target: Arc<dyn TargetCall>,
        config: PublisherConfig,
    ) -> Result<Self, SettingError> {
        if config.target_kind != target.kind() {
            return Err(SettingError::of::<PublisherArgs>(
                "target_kind",
                format!(
                    "must be {} for a {} target's publisher",
                    target.kind(),
                    target.kind()
                ),
            ));
        }
        config.validate()?;
        Ok(Self {
            spec: config.target_kind.spec(),
            target,
            rate: Arc::new(PublishRate::new(config.max_publish_rate)),
            concurrency: Arc::new(PublishConcurrency::new(config.max_concurrency)),
            config,
            stats: Arc::default(),
            call_tasks: CallTasks::Inline,
            claim_check: None,
        })
    }

    /// The payload bucket it stores payloads too large for an entry in, if any: the relays keep
    /// the records of dead letters too large for their queue there too.
    pub fn payload_store(&self) -> Option<&PayloadStore> {
        self.claim_check.as_ref().map(ClaimCheck::store)
    }

    /// Stores the payloads of events too large for an entry in `store` (the claim check); tests
    /// inject S3 faults through its client.
    #[must_use]
    pub fn with_payload_store(mut self, store: PayloadStore) -> Self {
        self.claim_check = Some(ClaimCheck::new(store));
        self
    }

    /// Runs its calls as `call_tasks` says (default: in the caller's task).
    #[must_use]
    pub fn with_call_tasks(mut self, call_tasks: CallTasks) -> Self {
        self.call_tasks = call_tasks;
        self
    }

    pub fn config(&self) -> &PublisherConfig {
        &self.config
    }

    /// Counters since this publisher was built (shared by its clones).
    pub fn stats(&self) -> PublishStatsSnapshot {
        self.stats.snapshot()
    }

    /// The entries per second it lets out now (`None`: no limit), shared by its clones.
    pub fn publish_rate(&self) -> Option<f64> {
        self.rate.limit()
    }

    /// The calls it lets be in flight at once, all publishes together (each also
    /// keeps to `max_concurrency`), shared by its clones.
    pub fn publish_concurrency(&self) -> usize {
        self.concurrency.limit()
    }

    /// Sends one call's events, retrying retryable failures; an outcome for each index.
    /// `in_split`: the call is a half of a call refused as a whole ([`Self::send_halves`]).
    async fn send_call(
        &self,
        events: &[&OutboundEvent],
        indices: &[usize],
        deadline: Deadline,
        in_split: bool,
    ) -> Vec<(usize, PublishOutcome)> {
        let mut done = Vec::with_capacity(indices.len());
        let mut pending: Vec<usize> = indices.to_vec();
        // The last retryable error; `None` until a first attempt was made.
        let mut last_error: Option<(String, String)> = None;
        let mut backoff = self.config.retry.delays();
        loop {
            let Some((slot, in_flight)) = self.turn(pending.len(), deadline).await else {
                // Its turn would come after the deadline: it stays pending.
                done.extend(pending.iter().map(|&i| {
                    let outcome = match &last_error {
                        None => PublishOutcome::NotSent,
                        Some((code, message)) => PublishOutcome::Failed {
                            code: code.clone(),
                            message: message.clone(),
                        },
                    };
                    (i, outcome)
                }));
                break;
            };
            let attempt = self.attempt(events, &pending, in_flight).await;
            self.pace(slot, pending.len(), &attempt);
            done.extend(attempt.done);
            if !attempt.split.is_empty() {
                let mut halves = self.send_halves(events, attempt.split, deadline).await;
                if !in_split {
                    target_refused(events, &attempt.split_code, &mut halves);
                }
                done.extend(halves);
            }
            if attempt.retry.is_empty() {
                break;
            }
            let (code, message) = attempt.retry_error;
            // No retry that would start after the deadline: the entries stay pending.
            let Some(delay) = backoff
                .next()
                .filter(|delay| deadline.publish_allowed_after(*delay))
            else {
                tracing::warn!(
                    code = %code,
                    error = %message,
                    entries = attempt.retry.len(),
                    "publish retries exhausted"
                );
                done.extend(attempt.retry.into_iter().map(|i| {
                    (
                        i,
                        PublishOutcome::Failed {
                            code: code.clone(),
                            message: message.clone(),
                        },
                    )
                }));
                break;
            };
            tracing::debug!(code = %code, entries = attempt.retry.len(), delay_ms = delay.as_millis() as u64, "retrying entries");
            self.stats
                .retried
                .fetch_add(attempt.retry.len() as u64, Ordering::Relaxed);
            crate::metrics::count(crate::metrics::RETRIED, attempt.retry.len() as u64);
            last_error = Some((code, message));
            tokio::time::sleep(delay).await;
            pending = attempt.retry;
        }
        done
    }

    /// Sends the entries of a call the target refused as a whole as two calls, each split again if
    /// it is refused too ([`send_call`](Self::send_call)), until the entry at fault is alone.
    /// One half after the other, in the refused call's place among the calls in flight: a call
    /// holds one event per aggregate, so neither half waits for the other for order, and the
    /// calls that wait for this one wait for both. Boxed: it and `send_call` call each other.
    fn send_halves<'a>(
        &'a self,
        events: &'a [&'a OutboundEvent],
        entries: Vec<usize>,
        deadline: Deadline,
    ) -> BoxFuture<'a, Vec<(usize, PublishOutcome)>> {
        async move {
            if deadline.publish_passed() {
                return entries
                    .into_iter()
                    .map(|i| (i, PublishOutcome::NotSent))
                    .collect();
            }
            let (first, second) = entries.split_at(entries.len() / 2);
            let mut done = self.send_call(events, first, deadline, true).await;
            done.extend(self.send_call(events, second, deadline, true).await);
            done
        }
        .boxed()
    }

    /// The turn of a call of `entries` entries: its slot at the publish rate, then its place
    /// among the process's calls in flight; `None` when either would come at or after the
    /// deadline's publish-by time, or when the target answers nothing and the one place is taken.
    async fn turn(&self, entries: usize, deadline: Deadline) -> Option<(Slot, Permit<'_>)> {
        let stop_at = deadline.publish_until();
        let slot = self.rate.acquire(entries, stop_at).await?;
        let in_flight = self.concurrency.acquire(stop_at).await?;
        Some((slot, in_flight))
    }

    /// One call of the events at `pending`, in its place `in_flight`, and what it did
    /// to each.
    async fn attempt(
        &self,
        events: &[&OutboundEvent],
        pending: &[usize],
        in_flight: Permit<'_>,
    ) -> Attempt {
        self.stats.publish_calls.fetch_add(1, Ordering::Relaxed);
        let answer = self
            .target
            .put(&self.config, events, pending, self.call_tasks)
            .await;
        let timed_out = matches!(
            answer,
            CallAnswer::Failed {
                timed_out: true,
                ..
            }
        );
        self.in_flight_ended(in_flight, timed_out);
        let attempt = match answer {
            CallAnswer::Answered(results) => read_results(self.spec, pending, &results),
            CallAnswer::Failed { failure, .. } => call_failed(self.spec, pending, &failure),
        };
        if attempt.deduplicated > 0 {
            self.stats
                .deduplicated
                .fetch_add(attempt.deduplicated as u64, Ordering::Relaxed);
            crate::metrics::count(crate::metrics::DEDUPLICATED, attempt.deduplicated as u64);
        }
        Attempt {
            timed_out,
            ..attempt
        }
    }

    /// Adapts the calls in flight to a call that ended: answered in time, or `timed_out`.
    fn in_flight_ended(&self, permit: Permit<'_>, timed_out: bool) {
        if !timed_out {
            permit.answered();
            return;
        }
        self.stats.timed_out.fetch_add(1, Ordering::Relaxed);
        if let Some(limit) = permit.timed_out() {
            crate::metrics::observe(crate::metrics::PUBLISH_CONCURRENCY_LIMIT, limit as f64);
            tracing::info!(
                calls = limit,
                "publish call timed out: calls in flight lowered"
            );
        }
    }

    /// Adapts the publish rate to a call of `sent` entries in `slot`: `attempt.accepted` of them
    /// accepted, `attempt.throttled` refused for the quota.
    fn pace(&self, slot: Slot, sent: usize, attempt: &Attempt) {
        if attempt.timed_out {
            // No answer says nothing of the quota: the rate neither grows nor drops, and the calls
            // in flight, already lowered, pace a slow target. Lowered here too, the rate fell to
            // 1 entry/s against a target that answered nothing, and every later call waited its
            // 10 entries' turn: a drain of 200 events took 1,099 s to give up, not 78.
            return;
        }
        let (accepted, throttled) = (attempt.accepted, attempt.throttled);
        if throttled == 0 {
            self.rate.accepted(sent, accepted);
            return;
        }
        self.stats
            .throttled
            .fetch_add(throttled as u64, Ordering::Relaxed);
        crate::metrics::count(crate::metrics::THROTTLED, throttled as u64);
        if let Some(limit) = self.rate.throttled(slot, sent, accepted) {
            crate::metrics::observe(crate::metrics::PUBLISH_RATE_LIMIT, limit);
            tracing::info!(
                entries_per_second = limit.round() as u64,
                "publish throttled: publish rate lowered"
            );
        }
    }
}

type CallResult = Arc<Vec<(usize, PublishOutcome)>>;

impl Publisher for TargetPublisher {
    async fn publish<E: Borrow<OutboundEvent> + Sync>(
        &self,
        events: &[E],
        deadline: Deadline,
    ) -> Vec<PublishOutcome> {
        let originals: Vec<&OutboundEvent> = events.iter().map(Borrow::borrow).collect();
        let mut outcomes: Vec<Option<PublishOutcome>> = vec![None; originals.len()];
        let mut sendable = Vec::with_capacity(originals.len());
        let mut to_store = Vec::new();
        let threshold = self.config.payload_threshold();
        for (index, event) in originals.iter().enumerate() {
            let size = (self.spec.entry_size)(event, &self.config.source);
            // A payload too large goes to the bucket; one already there (the writer's) is checked.
            let claim_checked = size > threshold || event.data().is_none();
            if claim_checked && self.claim_check.is_some() {
                to_store.push(index);
            } else if size > self.config.max_entry_bytes {
                outcomes[index] = Some(self.too_large(size));
            } else {
                sendable.push(index);
            }
        }
        // The payloads of the events too large go to the bucket first; each of them is then sent
        // as its reference, or not at all when S3 failed.
        let mut referenced: HashMap<usize, OutboundEvent> = HashMap::new();
        let mut not_stored: HashMap<&str, usize> = HashMap::new();
        for (index, stored) in self.store_payloads(&originals, &to_store, deadline).await {
            match stored {
                Ok(stored) => {
                    // An event whose payload is already a reference is sent as it is.
                    let event = stored.as_ref().unwrap_or(originals[index]);
                    let size = (self.spec.entry_size)(event, &self.config.source);
                    if size > self.config.max_entry_bytes {
                        outcomes[index] = Some(self.too_large(size));
                    } else {
                        referenced.extend(stored.map(|event| (index, event)));
                        sendable.push(index);
                    }
                }
                Err(outcome) => {
                    // A poison event (its object gone) does not hold its aggregate back, as in a call.
                    if !matches!(outcome, PublishOutcome::Rejected { .. }) {
                        let key = originals[index].ordering_key.as_str();
                        let first = not_stored.entry(key).or_insert(index);
                        *first = (*first).min(index);
                    }
                    outcomes[index] = Some(outcome);
                }
            }
        }
        // No event overtakes an earlier one of its aggregate whose payload was not stored.
        sendable.retain(|&index| {
            let held = not_stored
                .get(originals[index].ordering_key.as_str())
                .is_some_and(|&first| first < index);
            if held {
                outcomes[index] = Some(PublishOutcome::HeldBack);
            }
            !held
        });
        sendable.sort_unstable();
        let events: Vec<&OutboundEvent> = originals
            .iter()
            .enumerate()
            .map(|(index, event)| referenced.get(&index).unwrap_or(event))
            .collect();
        let events = events.as_slice();
        let calls = pack_calls(
            events,
            sendable,
            |event| (self.spec.entry_size)(event, &self.config.source),
            self.config.max_entries_per_call,
            self.config.max_request_bytes,
        );
        let deps = call_dependencies(events, &calls);
        let previous = previous_of_aggregate(events, &calls);
        // Outcomes of the events sent so far, for the calls that depend on them.
        let settled: Mutex<HashMap<usize, bool>> = Mutex::new(HashMap::new());
        let in_flight = Semaphore::new(self.config.max_concurrency);
        let mut handles: Vec<Shared<BoxFuture<'_, CallResult>>> = Vec::with_capacity(calls.len());
        for (call, indices) in calls.iter().enumerate() {
            let waits: Vec<_> = deps[call].iter().map(|&d| handles[d].clone()).collect();
            let (in_flight, settled, previous) = (&in_flight, &settled, &previous);
            let handle = async move {
                join_all(waits).await;
                let mut results = Vec::with_capacity(indices.len());
                let mut send = Vec::with_capacity(indices.len());
                {
                    let settled = settled.lock().expect("not poisoned");
                    for &index in indices {
                        let earlier_unpublished = previous
                            .get(&index)
                            .is_some_and(|p| !settled.get(p).copied().unwrap_or(false));
                        if earlier_unpublished {
                            results.push((index, PublishOutcome::HeldBack));
                        } else {
                            send.push(index);
                        }
                    }
                }
                let _permit = in_flight
                    .acquire()
                    .await
                    .expect("semaphore is never closed");
                if deadline.publish_passed() {
                    results.extend(send.iter().map(|&i| (i, PublishOutcome::NotSent)));
                } else if !send.is_empty() {
                    results.extend(self.send_call(events, &send, deadline, false).await);
                }
                let mut settled = settled.lock().expect("not poisoned");
                // A rejected (poison) event goes to the dead-letter queue and does not hold its
                // aggregate back; anything else not published does.
                for (index, outcome) in &results {
                    let leaves = matches!(
                        outcome,
                        PublishOutcome::Published | PublishOutcome::Rejected { .. }
                    );
                    settled.insert(*index, leaves);
                }
                Arc::new(results)
            }
            .boxed()
            .shared();
            handles.push(handle);
        }
        for result in join_all(handles).await {
            for (index, outcome) in result.iter() {
                outcomes[*index] = Some(outcome.clone());
            }
        }
        outcomes
            .into_iter()
            .map(|o| o.expect("every event gets an outcome"))
            .inspect(|o| self.stats.record(o))
            .collect()
    }
}

/// The verdict on a call refused as a whole with `code` and split to find the entry at fault
/// (`outcomes`, of every entry of the call): when each entry was then refused alone with the same
/// code, and they are of more than one aggregate, no entry is at fault but the target (an SNS
/// topic of another region answers `InvalidParameter` to every call, a single entry's too). A
/// poison verdict needs evidence against the entry, so they stay pending (`Failed`), counted as
/// [`crate::metrics::TARGET_REFUSED`], with one WARN line; any entry accepted, or refused
/// otherwise, is that evidence, and the verdicts stand.
fn target_refused(events: &[&OutboundEvent], code: &str, outcomes: &mut [(usize, PublishOutcome)]) {
    let refused_alike = outcomes.iter().all(
        |(_, outcome)| matches!(outcome, PublishOutcome::Rejected { code: c, .. } if c == code),
    );
    let aggregates: std::collections::HashSet<&str> = outcomes
        .iter()
        .map(|(index, _)| events[*index].ordering_key.as_str())
        .collect();
    if !refused_alike || aggregates.len() < 2 {
        return;
    }
    let (entries, aggregates) = (outcomes.len(), aggregates.len());
    tracing::warn!(
        code = %code,
        entries,
        aggregates,
        "the target refused every entry of a call alone with the same code: the target is \
         failing, not the events; they stay pending"
    );
    crate::metrics::count(crate::metrics::TARGET_REFUSED, entries as u64);
    for (_, outcome) in outcomes.iter_mut() {
        if let PublishOutcome::Rejected { code, message } = outcome {
            *outcome = PublishOutcome::Failed {
                code: std::mem::take(code),
                message: format!(
                    "the target refused each of the {entries} events of {aggregates} aggregates \
                     alone with this code: the target is failing, not this event ({message})"
                ),
            };
        }
    }
}

impl TargetPublisher {
    /// The outcome of an event of `size` bytes, more than an entry may be and not stored in S3:
    /// poison, its reason saying how to publish it through the payload bucket when none is set.
    fn too_large(&self, size: usize) -> PublishOutcome {
        let hint = if self.claim_check.is_none() {
            format!(
                "; set {} to publish it with its payload in S3",
                SettingError::name_of::<PublisherArgs>("payload_bucket")
            )
        } else {
            String::new()
        };
        PublishOutcome::Rejected {
            code: ENTRY_TOO_LARGE.to_owned(),
            message: format!(
                "entry is {size} bytes, more than the {} allowed{hint}",
                self.config.max_entry_bytes
            ),
        }
    }

    /// Stores the payloads of the events at `indices` in the payload bucket, at most
    /// `max_concurrency` at once and none once the deadline's publish-by time has passed: each
    /// event as its reference (`None`: its payload already is one, its object checked), or the
    /// outcome it ends with (S3 failed: `Failed`, the event stays pending; its object gone or
    /// holding another payload: `Rejected`, dead-lettered; the deadline came: `NotSent`).
    async fn store_payloads(
        &self,
        events: &[&OutboundEvent],
        indices: &[usize],
        deadline: Deadline,
    ) -> Vec<(usize, Result<Option<OutboundEvent>, PublishOutcome>)> {
        let Some(claim_check) = &self.claim_check else {
            return Vec::new();
        };
        futures::stream::iter(indices.iter().copied())
            .map(|index| async move {
                if deadline.publish_passed() {
                    return (index, Err(PublishOutcome::NotSent));
                }
                let stored = match claim_check.stored(events[index]).await {
                    Ok(Some((event, stored))) => {
                        let counter = match stored {
                            Stored::Written => &self.stats.payloads_stored,
                            Stored::AlreadyThere => &self.stats.payloads_already_stored,
                        };
                        counter.fetch_add(1, Ordering::Relaxed);
                        Ok(Some(event))
                    }
                    Ok(None) => Ok(None),
                    Err(PayloadError::Failed(failure)) => Err(PublishOutcome::Failed {
                        code: failure
                            .code
                            .clone()
                            .unwrap_or_else(|| "PayloadNotStored".to_owned()),
                        message: format!(
                            "its payload could not be stored or checked in {}: {failure}",
                            claim_check.bucket()
                        ),
                    }),
                    Err(PayloadError::Unpublishable { code, reason }) => {
                        Err(PublishOutcome::Rejected {
                            code: code.to_owned(),
                            message: reason,
                        })
                    }
                };
                (index, stored)
            })
            .buffered(self.config.max_concurrency)
            .collect()
            .await
    }
}
