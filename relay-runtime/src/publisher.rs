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
//! Rate: every call, retries included, leaves at the pace of the publisher's [`PublishRate`]
//! (no limit until the bus throttles or a ceiling is set; see that module for the adaptation).
//!
//! Deadline: [`Publisher::publish_until`] starts no call, and no retry, after `stop_at`; the
//! events not sent are [`PublishOutcome::NotSent`]. A call already sent is bounded by the SDK
//! client's operation timeout.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use aws_sdk_eventbridge::types::PutEventsRequestEntry;
use futures::FutureExt;
use futures::future::{BoxFuture, Shared, join_all};
use outbox_shared::OutboundEvent;
use outbox_shared::error::{ErrorClass, SdkFailure, classify_code};
use tokio::sync::Semaphore;

use crate::CallTasks;
use crate::config::{PublisherConfig, PublisherConfigError};
use crate::publish_rate::{PublishRate, Slot};

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
    /// Not sent: the deadline came first. It stays pending.
    NotSent,
}

impl PublishOutcome {
    pub fn is_published(&self) -> bool {
        matches!(self, Self::Published)
    }
}

/// Entry error codes that mean the event itself can never be published: poison.
/// Any other non-retryable code (say, access denied) is a configuration problem, not the event's.
pub const POISON_ENTRY_CODES: &[&str] = &[
    "MalformedDetail",
    "InvalidArgument",
    "ValidationException",
    ENTRY_TOO_LARGE,
];

/// Our code for an event larger than the configured entry size; it is never sent.
pub const ENTRY_TOO_LARGE: &str = "EntryTooLarge";

/// The code of a call or entry refused because the bus's `PutEvents` quota is exceeded.
pub const THROTTLED: &str = "ThrottlingException";

/// Counters across every call of one publisher.
#[derive(Debug, Default)]
pub struct PublishStats {
    put_events_calls: AtomicU64,
    published: AtomicU64,
    retried: AtomicU64,
    throttled: AtomicU64,
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
    /// Entries sent again after a retryable failure (one per entry per retry).
    pub retried: u64,
    /// Entries refused with `ThrottlingException` (one per entry per attempt).
    pub throttled: u64,
    pub rejected: u64,
    pub failed: u64,
    /// Not sent because an earlier event of their aggregate was not published.
    pub held_back: u64,
    /// Not sent because the deadline came first.
    pub not_sent: u64,
}

impl PublishStats {
    pub fn snapshot(&self) -> PublishStatsSnapshot {
        PublishStatsSnapshot {
            put_events_calls: self.put_events_calls.load(Ordering::Relaxed),
            published: self.published.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            throttled: self.throttled.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            held_back: self.held_back.load(Ordering::Relaxed),
            not_sent: self.not_sent.load(Ordering::Relaxed),
        }
    }

    fn record(&self, outcome: &PublishOutcome) {
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

/// Whether `stop_at` has come.
fn past(stop_at: Option<Instant>) -> bool {
    stop_at.is_some_and(|at| Instant::now() >= at)
}

/// The EventBridge adapter.
#[derive(Debug, Clone)]
pub struct EventBridgePublisher {
    client: aws_sdk_eventbridge::Client,
    config: PublisherConfig,
    stats: Arc<PublishStats>,
    rate: Arc<PublishRate>,
    call_tasks: CallTasks,
}

impl EventBridgePublisher {
    /// # Errors
    /// [`PublisherConfigError`] when the configuration is out of range.
    pub fn new(
        client: aws_sdk_eventbridge::Client,
        config: PublisherConfig,
    ) -> Result<Self, PublisherConfigError> {
        config.validate()?;
        Ok(Self {
            client,
            rate: Arc::new(PublishRate::new(config.max_publish_rate)),
            config,
            stats: Arc::default(),
            call_tasks: CallTasks::Inline,
        })
    }

    /// Runs its `PutEvents` calls as `call_tasks` says (default: in the caller's task).
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

    /// The `PutEvents` entry of `event`, on the configured bus with the configured source.
    fn entry(&self, event: &OutboundEvent) -> PutEventsRequestEntry {
        PutEventsRequestEntry::builder()
            .event_bus_name(&self.config.event_bus_name)
            .source(&self.config.source)
            .detail_type(&event.detail_type)
            .detail(&event.detail)
            .set_time(event.time)
            .set_trace_header(event.trace_header.clone())
            .build()
    }

    /// Sends one call's events, retrying retryable failures; an outcome for each index.
    async fn send_call(
        &self,
        events: &[OutboundEvent],
        indices: &[usize],
        stop_at: Option<Instant>,
    ) -> Vec<(usize, PublishOutcome)> {
        let mut done = Vec::with_capacity(indices.len());
        let mut pending: Vec<usize> = indices.to_vec();
        let mut last_error = (String::new(), String::new());
        let mut backoff = self.config.retry.delays();
        let mut first_attempt = true;
        loop {
            let Some(slot) = self.rate.acquire(pending.len(), stop_at).await else {
                // The publish rate would send it after the deadline: it stays pending.
                done.extend(pending.iter().map(|&i| {
                    let outcome = if first_attempt {
                        PublishOutcome::NotSent
                    } else {
                        PublishOutcome::Failed {
                            code: last_error.0.clone(),
                            message: last_error.1.clone(),
                        }
                    };
                    (i, outcome)
                }));
                break;
            };
            first_attempt = false;
            let entries = pending.iter().map(|&i| self.entry(&events[i])).collect();
            self.stats.put_events_calls.fetch_add(1, Ordering::Relaxed);
            let call = self.client.put_events().set_entries(Some(entries)).send();
            let sent = self.call_tasks.run(call).await;
            let mut retry = Vec::new();
            let (mut accepted, mut throttled) = (0, 0);
            match sent {
                Ok(output) if output.entries().len() == pending.len() => {
                    for (&index, result) in pending.iter().zip(output.entries()) {
                        let Some(code) = result.error_code() else {
                            done.push((index, PublishOutcome::Published));
                            accepted += 1;
                            continue;
                        };
                        throttled += usize::from(code == THROTTLED);
                        let message = result.error_message().unwrap_or_default().to_owned();
                        match classify_code(code) {
                            ErrorClass::Retryable => {
                                last_error = (code.to_owned(), message);
                                retry.push(index);
                            }
                            ErrorClass::Permanent => {
                                let code = code.to_owned();
                                done.push((index, permanent_outcome(code, message)));
                            }
                        }
                    }
                }
                Ok(output) => {
                    // Results are matched to entries by position; a count mismatch makes that
                    // impossible, so nothing in this call can be called published.
                    last_error = (
                        "ResponseMismatch".to_owned(),
                        format!(
                            "PutEvents answered {} results for {} entries",
                            output.entries().len(),
                            pending.len()
                        ),
                    );
                    retry = pending.clone();
                }
                Err(err) => {
                    let failure = SdkFailure::new("PutEvents", err);
                    let code = failure
                        .code
                        .clone()
                        .unwrap_or_else(|| "RequestFailed".into());
                    if code == THROTTLED {
                        throttled = pending.len();
                    }
                    let message = failure.to_string();
                    match failure.class {
                        ErrorClass::Retryable => {
                            last_error = (code, message);
                            retry = pending.clone();
                        }
                        ErrorClass::Permanent => {
                            tracing::warn!(code = %code, entries = pending.len(), "PutEvents call rejected");
                            done.extend(pending.iter().map(|&i| {
                                (
                                    i,
                                    PublishOutcome::Failed {
                                        code: code.clone(),
                                        message: message.clone(),
                                    },
                                )
                            }));
                        }
                    }
                }
            }
            self.pace(slot, pending.len(), accepted, throttled);
            if retry.is_empty() {
                break;
            }
            // No retry that would start after the deadline: the entries stay pending.
            let Some(delay) = backoff
                .next()
                .filter(|delay| stop_at.is_none_or(|at| Instant::now() + *delay < at))
            else {
                let (code, message) = last_error;
                tracing::warn!(
                    code = %code,
                    error = %message,
                    entries = retry.len(),
                    "PutEvents retries exhausted"
                );
                done.extend(retry.into_iter().map(|i| {
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
            tracing::debug!(code = %last_error.0, entries = retry.len(), delay_ms = delay.as_millis() as u64, "retrying PutEvents entries");
            self.stats
                .retried
                .fetch_add(retry.len() as u64, Ordering::Relaxed);
            crate::metrics::count(crate::metrics::RETRIED, retry.len() as u64);
            tokio::time::sleep(delay).await;
            pending = retry;
        }
        done
    }

    /// Adapts the publish rate to a call of `sent` entries in `slot`: `accepted` of them
    /// accepted, `throttled` refused for the quota.
    fn pace(&self, slot: Slot, sent: usize, accepted: usize, throttled: usize) {
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
                "PutEvents throttled: publish rate lowered"
            );
        }
    }
}

fn permanent_outcome(code: String, message: String) -> PublishOutcome {
    if POISON_ENTRY_CODES.contains(&code.as_str()) {
        PublishOutcome::Rejected { code, message }
    } else {
        PublishOutcome::Failed { code, message }
    }
}

/// Packs `indices` into calls of at most `max_entries` entries and `max_bytes` bytes (entries
/// sized as published with `source`), at most one event of an aggregate per call, each event in
/// a later call than its aggregate's previous one; within a call, events keep their input order.
pub fn pack_calls(
    events: &[OutboundEvent],
    indices: impl IntoIterator<Item = usize>,
    source: &str,
    max_entries: usize,
    max_bytes: usize,
) -> Vec<Vec<usize>> {
    let mut calls: Vec<(Vec<usize>, usize)> = Vec::new();
    let mut last_call_of: HashMap<&str, usize> = HashMap::new();
    // Calls before this one are full.
    let mut first_open = 0;
    for index in indices {
        let size = events[index].entry_size(source);
        let key = events[index].ordering_key.as_str();
        let earliest = last_call_of
            .get(key)
            .map_or(first_open, |&c| (c + 1).max(first_open));
        let fits = |(entries, bytes): &(Vec<usize>, usize)| {
            entries.is_empty() || (entries.len() < max_entries && bytes + size <= max_bytes)
        };
        let call = match (earliest..calls.len()).find(|&c| fits(&calls[c])) {
            Some(call) => call,
            None => {
                calls.push((Vec::new(), 0));
                calls.len() - 1
            }
        };
        calls[call].0.push(index);
        calls[call].1 += size;
        last_call_of.insert(key, call);
        while first_open < calls.len() && calls[first_open].0.len() >= max_entries {
            first_open += 1;
        }
    }
    calls.into_iter().map(|(entries, _)| entries).collect()
}

/// For each call, the earlier calls it must wait for: the latest earlier call sharing an
/// ordering key with it.
fn call_dependencies(events: &[OutboundEvent], calls: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let mut last_call_of: HashMap<&str, usize> = HashMap::new();
    calls
        .iter()
        .enumerate()
        .map(|(call, indices)| {
            let mut deps: Vec<usize> = indices
                .iter()
                .filter_map(|&i| last_call_of.insert(events[i].ordering_key.as_str(), call))
                .filter(|&earlier| earlier != call)
                .collect();
            deps.sort_unstable();
            deps.dedup();
            deps
        })
        .collect()
}

type CallResult = Arc<Vec<(usize, PublishOutcome)>>;

/// For each packed event, the previous event of its aggregate (if any).
fn previous_of_aggregate(events: &[OutboundEvent], calls: &[Vec<usize>]) -> HashMap<usize, usize> {
    let mut in_order: Vec<usize> = calls.concat();
    in_order.sort_unstable();
    let mut last: HashMap<&str, usize> = HashMap::new();
    in_order
        .into_iter()
        .filter_map(|index| {
            last.insert(events[index].ordering_key.as_str(), index)
                .map(|previous| (index, previous))
        })
        .collect()
}

impl Publisher for EventBridgePublisher {
    async fn publish_until(
        &self,
        events: &[OutboundEvent],
        stop_at: Option<Instant>,
    ) -> Vec<PublishOutcome> {
        let mut outcomes: Vec<Option<PublishOutcome>> = vec![None; events.len()];
        let mut sendable = Vec::with_capacity(events.len());
        for (index, event) in events.iter().enumerate() {
            let size = event.entry_size(&self.config.source);
            if size > self.config.max_entry_bytes {
                outcomes[index] = Some(PublishOutcome::Rejected {
                    code: ENTRY_TOO_LARGE.to_owned(),
                    message: format!(
                        "entry is {size} bytes, more than the {} allowed",
                        self.config.max_entry_bytes
                    ),
                });
            } else {
                sendable.push(index);
            }
        }
        let calls = pack_calls(
            events,
            sendable,
            &self.config.source,
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
                if past(stop_at) {
                    results.extend(send.iter().map(|&i| (i, PublishOutcome::NotSent)));
                } else if !send.is_empty() {
                    results.extend(self.send_call(events, &send, stop_at).await);
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

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_eventbridge::Client;
    use aws_sdk_eventbridge::config::retry::RetryConfig;
    use aws_sdk_eventbridge::config::{BehaviorVersion, Credentials, Region};
    use aws_sdk_eventbridge::operation::put_events::PutEventsOutput;
    use aws_sdk_eventbridge::types::PutEventsResultEntry;
    use aws_smithy_mocks::{
        MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock,
    };
    use outbox_shared::RetryPolicy;
    use std::time::Duration;

    /// An EventBridge client answered by `rules` (SDK retries off: the publisher's own count).
    fn mock_eventbridge(rules: &[&Rule]) -> Client {
        let interceptor = rules.iter().fold(
            MockResponseInterceptor::new().rule_mode(RuleMode::Sequential),
            |i, rule| i.with_rule(rule),
        );
        let config = aws_sdk_eventbridge::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("test", "test", None, None, "test"))
            .http_client(create_mock_http_client())
            .interceptor(interceptor)
            .retry_config(RetryConfig::disabled())
            .build();
        Client::from_conf(config)
    }

    fn quick_config() -> PublisherConfig {
        PublisherConfig {
            retry: RetryPolicy {
                max_retries: 2,
                base_delay: Duration::from_millis(1),
                max_delay: Duration::from_millis(2),
            },
            ..PublisherConfig::new("bus", "test.orders")
        }
    }

    fn accepted(count: usize) -> PutEventsOutput {
        PutEventsOutput::builder()
            .set_entries(Some(
                (0..count)
                    .map(|i| {
                        PutEventsResultEntry::builder()
                            .event_id(format!("eb-{i}"))
                            .build()
                    })
                    .collect(),
            ))
            .failed_entry_count(0)
            .build()
    }

    #[tokio::test]
    async fn the_publisher_stamps_its_bus_and_source_on_every_entry() {
        // Given EventBridge that accepts only entries for bus "bus" from source "test.orders"
        let put = mock!(Client::put_events)
            .match_requests(|req| {
                req.entries().iter().all(|e| {
                    e.event_bus_name() == Some("bus")
                        && e.source() == Some("test.orders")
                        && e.detail_type() == Some("t")
                })
            })
            .then_output(|| accepted(3));
        let publisher =
            EventBridgePublisher::new(mock_eventbridge(&[&put]), quick_config()).unwrap();
        let events: Vec<_> = ["a", "b", "c"].iter().map(|k| event(k, 5)).collect();

        // When three events are published
        let outcomes = publisher.publish(&events).await;

        // Then all three are published in one call
        assert!(
            outcomes.iter().all(PublishOutcome::is_published),
            "{outcomes:?}"
        );
        assert_eq!(put.num_calls(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_entry_is_retried_until_it_is_published() {
        // Given a first answer that throttles the second entry, then acceptance
        let throttled = mock!(Client::put_events).then_output(|| {
            PutEventsOutput::builder()
                .entries(PutEventsResultEntry::builder().event_id("eb-0").build())
                .entries(
                    PutEventsResultEntry::builder()
                        .error_code("ThrottlingException")
                        .error_message("slow down")
                        .build(),
                )
                .failed_entry_count(1)
                .build()
        });
        let retried = mock!(Client::put_events)
            .match_requests(|req| req.entries().len() == 1)
            .then_output(|| accepted(1));
        let publisher =
            EventBridgePublisher::new(mock_eventbridge(&[&throttled, &retried]), quick_config())
                .unwrap();
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _local = metrics::set_default_local_recorder(&recorder);

        // When two events are published
        let started = Instant::now();
        let outcomes = publisher.publish(&[event("a", 5), event("b", 5)]).await;

        // Then both are published, the second after one retry
        assert_eq!(outcomes, vec![PublishOutcome::Published; 2]);
        let stats = publisher.stats();
        assert_eq!((stats.put_events_calls, stats.retried), (2, 1));
        // And the publisher lowered its rate to 70 % of the one entry accepted in the last second
        // (no lower than 1 entry/s), counting the throttled entry; the retry left once the
        // throttled call's 2 entries had passed at that rate (2 s), and being accepted raised
        // the rate by 10 entries/s for each of those seconds
        assert_eq!(stats.throttled, 1);
        let waited = started.elapsed();
        assert!(
            (Duration::from_secs(2)..Duration::from_millis(2100)).contains(&waited),
            "{waited:?}"
        );
        let rate = publisher.publish_rate().expect("a limit after throttling");
        assert!((21.0..22.0).contains(&rate), "{rate}");
        // And an operator sees it: one entry throttled, one retried, the lowered limit recorded
        let recorded: std::collections::HashMap<String, metrics_util::debugging::DebugValue> =
            snapshotter
                .snapshot()
                .into_vec()
                .into_iter()
                .map(|(key, _, _, value)| (key.key().name().to_owned(), value))
                .collect();
        use metrics_util::debugging::DebugValue;
        assert_eq!(
            recorded.get(crate::metrics::THROTTLED),
            Some(&DebugValue::Counter(1))
        );
        assert_eq!(
            recorded.get(crate::metrics::RETRIED),
            Some(&DebugValue::Counter(1))
        );
        let Some(DebugValue::Histogram(limits)) = recorded.get(crate::metrics::PUBLISH_RATE_LIMIT)
        else {
            panic!("no publish rate limit recorded: {recorded:?}");
        };
        assert_eq!(limits.len(), 1);
        // 70 % of the one entry accepted, held at the floor of 1 entry/s
        assert!((limits[0].into_inner() - 1.0).abs() < 1e-9, "{limits:?}");
    }

    #[tokio::test]
    async fn a_publisher_with_no_ceiling_and_no_throttling_has_no_publish_rate_limit() {
        let put = mock!(Client::put_events).then_output(|| accepted(1));
        let publisher =
            EventBridgePublisher::new(mock_eventbridge(&[&put]), quick_config()).unwrap();
        let outcomes = publisher.publish(&[event("a", 5)]).await;
        assert_eq!(outcomes, vec![PublishOutcome::Published]);
        assert_eq!(publisher.publish_rate(), None);
        assert_eq!(publisher.stats().throttled, 0);
    }

    /// Event `n` of aggregate `aggregate`.
    fn event_of(aggregate: &str, n: u32) -> OutboundEvent {
        OutboundEvent {
            event_id: format!("{aggregate}{n}"),
            ..event(aggregate, 5)
        }
    }

    fn one_result(code: Option<&str>) -> PutEventsResultEntry {
        match code {
            None => PutEventsResultEntry::builder().event_id("eb").build(),
            Some(code) => PutEventsResultEntry::builder()
                .error_code(code)
                .error_message("injected")
                .build(),
        }
    }

    #[tokio::test]
    async fn once_an_event_fails_the_later_events_of_its_aggregate_are_held_back() {
        // Given aggregate a's first event failing on every attempt (a retryable code), and
        // aggregates b and c healthy
        let first = mock!(Client::put_events)
            .match_requests(|req| req.entries().len() == 3)
            .then_output(|| {
                PutEventsOutput::builder()
                    .entries(one_result(Some("InternalFailure")))
                    .entries(one_result(None))
                    .entries(one_result(None))
                    .failed_entry_count(1)
                    .build()
            });
        let retries: Vec<Rule> = (0..2)
            .map(|_| {
                mock!(Client::put_events)
                    .match_requests(|req| req.entries().len() == 1)
                    .then_output(|| {
                        PutEventsOutput::builder()
                            .entries(one_result(Some("InternalFailure")))
                            .failed_entry_count(1)
                            .build()
                    })
            })
            .collect();
        let publisher = EventBridgePublisher::new(
            mock_eventbridge(&[&first, &retries[0], &retries[1]]),
            quick_config(),
        )
        .unwrap();
        let events = [
            event_of("a", 1),
            event_of("b", 1),
            event_of("a", 2),
            event_of("c", 1),
            event_of("a", 3),
        ];

        // When they are published
        let outcomes = publisher.publish(&events).await;

        // Then a1 failed, a2 and a3 were never sent (they must not overtake a1), b1 and c1 left
        assert!(
            matches!(outcomes[0], PublishOutcome::Failed { .. }),
            "{outcomes:?}"
        );
        assert_eq!(
            outcomes[1..],
            [
                PublishOutcome::Published,
                PublishOutcome::HeldBack,
                PublishOutcome::Published,
                PublishOutcome::HeldBack
            ]
        );
        let stats = publisher.stats();
        assert_eq!((stats.put_events_calls, stats.held_back), (3, 2));
    }

    #[tokio::test]
    async fn nothing_is_sent_after_the_deadline() {
        // Given a deadline that has passed
        let put = mock!(Client::put_events).then_output(|| accepted(2));
        let publisher =
            EventBridgePublisher::new(mock_eventbridge(&[&put]), quick_config()).unwrap();

        // When two events are published
        let outcomes = publisher
            .publish_until(&[event("a", 5), event("b", 5)], Some(Instant::now()))
            .await;

        // Then neither was sent
        assert_eq!(outcomes, vec![PublishOutcome::NotSent; 2]);
        assert_eq!(put.num_calls(), 0);
    }

    #[test]
    fn packs_one_event_of_an_aggregate_per_call_each_after_the_previous() {
        let events: Vec<_> = ["a", "a", "b", "a", "c"]
            .iter()
            .map(|k| event(k, 1))
            .collect();
        let calls = pack_calls(&events, 0..5, "s", 10, 1024);
        assert_eq!(calls, vec![vec![0, 2, 4], vec![1], vec![3]]);
        assert_eq!(
            call_dependencies(&events, &calls),
            vec![vec![], vec![0], vec![1]]
        );
    }

    fn event(key: &str, detail_len: usize) -> OutboundEvent {
        OutboundEvent {
            event_id: format!("e-{key}"),
            ordering_key: key.to_owned(),
            detail_type: "t".into(),
            detail: "x".repeat(detail_len),
            time: None,
            trace_header: None,
        }
    }

    #[test]
    fn packs_at_most_ten_entries_per_call() {
        let events: Vec<_> = (0..25).map(|i| event(&i.to_string(), 10)).collect();
        let calls = pack_calls(&events, 0..25, "s", 10, 256 * 1024);
        assert_eq!(calls.iter().map(Vec::len).collect::<Vec<_>>(), [10, 10, 5]);
        assert_eq!(calls.concat(), (0..25).collect::<Vec<_>>());
    }

    #[test]
    fn packs_by_request_size() {
        // Each entry is 2 + 98 = 100 bytes; a 250-byte budget fits two.
        let events: Vec<_> = (0..5).map(|i| event(&i.to_string(), 98)).collect();
        let calls = pack_calls(&events, 0..5, "s", 10, 250);
        assert_eq!(calls, vec![vec![0, 1], vec![2, 3], vec![4]]);
    }

    #[test]
    fn calls_sharing_an_aggregate_wait_for_each_other() {
        let events: Vec<_> = ["a", "b", "a", "c", "b", "d"]
            .iter()
            .map(|k| event(k, 1))
            .collect();
        let calls = pack_calls(&events, 0..6, "s", 2, 1024);
        // calls: [a b] [a c] [b d]
        assert_eq!(
            call_dependencies(&events, &calls),
            vec![vec![], vec![0], vec![0]]
        );
    }

    #[test]
    fn poison_codes_are_rejected_others_failed() {
        assert!(matches!(
            permanent_outcome("MalformedDetail".into(), String::new()),
            PublishOutcome::Rejected { .. }
        ));
        assert!(matches!(
            permanent_outcome("AccessDeniedException".into(), String::new()),
            PublishOutcome::Failed { .. }
        ));
    }
}
