//! The publisher port and its EventBridge adapter.
//!
//! [`EventBridgePublisher`] packs events into `PutEvents` calls of at most 10 entries that also fit
//! the configured request size, keeps a bounded number of calls in flight, checks every entry's
//! result (a `PutEvents` call answers HTTP 200 even when entries failed), and retries the entries
//! that failed with a retryable code, with exponential backoff and jitter. It returns one
//! [`PublishOutcome`] per event, so a caller never reports success for an unpublished event.
//!
//! Ordering: a call is not sent while an earlier call holding an event with the same
//! [`OutboundEvent::ordering_key`] (the aggregate) is still in flight or retrying, so one
//! aggregate's events leave in order on the happy path. A retried entry can still land after a
//! later event of its aggregate that was in the same call; `metadata.sequence` lets consumers order.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use backon::{BackoffBuilder, ExponentialBuilder};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared, join_all};
use tokio::sync::Semaphore;

use crate::config::{ConfigError, PublisherConfig};
use crate::envelope::OutboundEvent;
use crate::error::{ErrorClass, classify_code, classify_sdk_error, error_code};

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

/// Counters across every call of one publisher.
#[derive(Debug, Default)]
pub struct PublishStats {
    put_events_calls: AtomicU64,
    published: AtomicU64,
    retried: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
}

/// A point-in-time copy of [`PublishStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct PublishStatsSnapshot {
    /// `PutEvents` calls sent, retries included.
    pub put_events_calls: u64,
    pub published: u64,
    /// Entries sent again after a retryable failure (one per entry per retry).
    pub retried: u64,
    pub rejected: u64,
    pub failed: u64,
}

impl PublishStats {
    pub fn snapshot(&self) -> PublishStatsSnapshot {
        PublishStatsSnapshot {
            put_events_calls: self.put_events_calls.load(Ordering::Relaxed),
            published: self.published.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }

    fn record(&self, outcome: &PublishOutcome) {
        let counter = match outcome {
            PublishOutcome::Published => &self.published,
            PublishOutcome::Rejected { .. } => &self.rejected,
            PublishOutcome::Failed { .. } => &self.failed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Port: publishes events, one outcome per event, in input order.
pub trait Publisher: Send + Sync {
    fn publish(&self, events: &[OutboundEvent])
    -> impl Future<Output = Vec<PublishOutcome>> + Send;
}

/// The EventBridge adapter.
#[derive(Debug, Clone)]
pub struct EventBridgePublisher {
    client: aws_sdk_eventbridge::Client,
    config: PublisherConfig,
    stats: Arc<PublishStats>,
}

impl EventBridgePublisher {
    /// # Errors
    /// [`ConfigError`] when the configuration is out of range.
    pub fn new(
        client: aws_sdk_eventbridge::Client,
        config: PublisherConfig,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            client,
            config,
            stats: Arc::default(),
        })
    }

    pub fn config(&self) -> &PublisherConfig {
        &self.config
    }

    /// Counters since this publisher was built (shared by its clones).
    pub fn stats(&self) -> PublishStatsSnapshot {
        self.stats.snapshot()
    }

    fn backoff(&self) -> impl Iterator<Item = std::time::Duration> + use<> {
        ExponentialBuilder::default()
            .with_min_delay(self.config.base_retry_delay)
            .with_max_delay(self.config.max_retry_delay)
            .with_max_times(self.config.max_attempts.saturating_sub(1))
            .with_jitter()
            .build()
    }

    /// Sends one call's events, retrying retryable failures; an outcome for each index.
    async fn send_call(
        &self,
        events: &[OutboundEvent],
        indices: &[usize],
    ) -> Vec<(usize, PublishOutcome)> {
        let mut done = Vec::with_capacity(indices.len());
        let mut pending: Vec<usize> = indices.to_vec();
        let mut last_error = (String::new(), String::new());
        let mut backoff = self.backoff();
        loop {
            let entries = pending.iter().map(|&i| events[i].to_entry()).collect();
            self.stats.put_events_calls.fetch_add(1, Ordering::Relaxed);
            let sent = self
                .client
                .put_events()
                .set_entries(Some(entries))
                .send()
                .await;
            let mut retry = Vec::new();
            match sent {
                Ok(output) if output.entries().len() == pending.len() => {
                    for (&index, result) in pending.iter().zip(output.entries()) {
                        let Some(code) = result.error_code() else {
                            done.push((index, PublishOutcome::Published));
                            continue;
                        };
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
                    let code = error_code(&err).unwrap_or("RequestFailed").to_owned();
                    let message = aws_sdk_eventbridge::error::DisplayErrorContext(&err).to_string();
                    match classify_sdk_error(&err) {
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
            if retry.is_empty() {
                break;
            }
            let Some(delay) = backoff.next() else {
                let (code, message) = last_error;
                tracing::warn!(code = %code, entries = retry.len(), "PutEvents retries exhausted");
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
            tokio::time::sleep(delay).await;
            pending = retry;
        }
        done
    }
}

fn permanent_outcome(code: String, message: String) -> PublishOutcome {
    if POISON_ENTRY_CODES.contains(&code.as_str()) {
        PublishOutcome::Rejected { code, message }
    } else {
        PublishOutcome::Failed { code, message }
    }
}

/// Packs `indices` in order into calls of at most `max_entries` entries and `max_bytes` bytes.
pub fn pack_calls(
    events: &[OutboundEvent],
    indices: impl IntoIterator<Item = usize>,
    max_entries: usize,
    max_bytes: usize,
) -> Vec<Vec<usize>> {
    let mut calls: Vec<Vec<usize>> = Vec::new();
    let mut current: Vec<usize> = Vec::new();
    let mut current_bytes = 0;
    for index in indices {
        let size = events[index].entry_size();
        if !current.is_empty() && (current.len() == max_entries || current_bytes + size > max_bytes)
        {
            calls.push(std::mem::take(&mut current));
            current_bytes = 0;
        }
        current.push(index);
        current_bytes += size;
    }
    if !current.is_empty() {
        calls.push(current);
    }
    calls
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

impl Publisher for EventBridgePublisher {
    async fn publish(&self, events: &[OutboundEvent]) -> Vec<PublishOutcome> {
        let mut outcomes: Vec<Option<PublishOutcome>> = vec![None; events.len()];
        let mut sendable = Vec::with_capacity(events.len());
        for (index, event) in events.iter().enumerate() {
            let size = event.entry_size();
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
            self.config.max_entries_per_call,
            self.config.max_request_bytes,
        );
        let deps = call_dependencies(events, &calls);
        let in_flight = Semaphore::new(self.config.max_concurrency);
        let mut handles: Vec<Shared<BoxFuture<'_, CallResult>>> = Vec::with_capacity(calls.len());
        for (call, indices) in calls.iter().enumerate() {
            let waits: Vec<_> = deps[call].iter().map(|&d| handles[d].clone()).collect();
            let in_flight = &in_flight;
            let handle = async move {
                join_all(waits).await;
                let _permit = in_flight
                    .acquire()
                    .await
                    .expect("semaphore is never closed");
                Arc::new(self.send_call(events, indices).await)
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

    fn event(key: &str, detail_len: usize) -> OutboundEvent {
        OutboundEvent {
            event_id: format!("e-{key}"),
            ordering_key: key.to_owned(),
            source: "s".into(),
            detail_type: "t".into(),
            detail: "x".repeat(detail_len),
            event_bus_name: "bus".into(),
            time: None,
            trace_header: None,
        }
    }

    #[test]
    fn packs_at_most_ten_entries_per_call() {
        let events: Vec<_> = (0..25).map(|i| event(&i.to_string(), 10)).collect();
        let calls = pack_calls(&events, 0..25, 10, 256 * 1024);
        assert_eq!(calls.iter().map(Vec::len).collect::<Vec<_>>(), [10, 10, 5]);
        assert_eq!(calls.concat(), (0..25).collect::<Vec<_>>());
    }

    #[test]
    fn packs_by_request_size() {
        // Each entry is 2 + 98 = 100 bytes; a 250-byte budget fits two.
        let events: Vec<_> = (0..5).map(|i| event(&i.to_string(), 98)).collect();
        let calls = pack_calls(&events, 0..5, 10, 250);
        assert_eq!(calls, vec![vec![0, 1], vec![2, 3], vec![4]]);
    }

    #[test]
    fn calls_sharing_an_aggregate_wait_for_each_other() {
        let events: Vec<_> = ["a", "b", "a", "c", "b", "d"]
            .iter()
            .map(|k| event(k, 1))
            .collect();
        let calls = pack_calls(&events, 0..6, 2, 1024);
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
