//! The glue between `lambda_runtime` and the handler: one invocation is one batch; the response
//! carries `batchItemFailures`; metrics are flushed in CloudWatch Embedded Metric Format after
//! every invocation, to stderr through the logs' own writer (`relay_runtime::telemetry::Lines`).

use aws_lambda_events::dynamodb::Event;
use aws_lambda_events::streams::DynamoDbEventResponse;
use lambda_runtime::LambdaEvent;
use relay_runtime::metrics::{Emf, RecorderInstalled};

use crate::AwsStreamRelay;

/// Installs the EMF recorder (once per process) with the relays' shared names and the
/// `Relay = relay-stream` dimension; the Lambda flushes it after every invocation.
///
/// # Errors
/// When a global metrics recorder is already installed.
pub fn init_metrics(namespace: &str) -> Result<Emf, RecorderInstalled> {
    relay_runtime::metrics::install_emf(namespace, crate::handler::ORIGIN, None)
}

/// The invocation's deadline (`Lambda-Runtime-Deadline-Ms`, wall-clock milliseconds since the
/// epoch) as an instant of the monotonic clock the handler schedules by, or `None` when the
/// deadline had already passed when the invocation arrived.
///
/// Lambda hands an invocation out with its whole timeout ahead of it, so a deadline in the past
/// carries no budget to plan by (a runtime API emulator may send a constant: cargo-lambda's sends
/// `600000`, ten minutes after the epoch). The handler then runs without a deadline of its own,
/// as it would with no deadline at all, and Lambda's timeout still bounds the invocation.
pub fn invocation_deadline(deadline_ms: u64, now_ms: u64) -> Option<tokio::time::Instant> {
    let left = deadline_ms.checked_sub(now_ms).filter(|&left| left > 0)?;
    Some(tokio::time::Instant::now() + std::time::Duration::from_millis(left))
}

fn now_ms() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or_default()
}

/// The Lambda function: the relay plus its metrics collector.
pub struct LambdaRelay {
    relay: AwsStreamRelay,
    metrics: Option<Emf>,
}

impl std::fmt::Debug for LambdaRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LambdaRelay")
            .field("relay", &self.relay)
            .field("metrics", &self.metrics.is_some())
            .finish_non_exhaustive()
    }
}

impl LambdaRelay {
    pub fn new(relay: AwsStreamRelay, metrics: Option<Emf>) -> Self {
        Self { relay, metrics }
    }

    /// Handles one invocation. Never fails: every problem is a batch item failure or a dead letter.
    ///
    /// # Errors
    /// None today; the signature is what `lambda_runtime` expects.
    pub async fn handle(
        &self,
        event: LambdaEvent<Event>,
    ) -> Result<DynamoDbEventResponse, lambda_runtime::Error> {
        let records = &event.payload.records;
        let deadline = invocation_deadline(event.context.deadline, now_ms());
        if deadline.is_none() {
            tracing::warn!(
                deadline_ms = event.context.deadline,
                "the invocation's deadline had passed when it arrived; handling the batch without one"
            );
        }
        // One invocation at a time per instance: the counter's rise is this batch's.
        let deduplicated_before = self.relay.publisher().stats().deduplicated;
        let deadline = deadline.map_or(relay_runtime::Deadline::NONE, |at| {
            self.relay.deadline_of(at)
        });
        let report = self.relay.handle(records, deadline).await;
        let deduplicated = self.relay.publisher().stats().deduplicated - deduplicated_before;
        if deduplicated > 0 {
            tracing::info!(
                deduplicated,
                "entries the Custom Event Bus had accepted before (DEDUPLICATED): published, stored once"
            );
        }
        // A frozen execution environment runs no batch processor: the invocation's spans go now.
        relay_runtime::telemetry::flush();
        if let Some(metrics) = &self.metrics {
            let flushed = metrics
                .set_property("requestId", event.context.request_id.clone())
                .flush();
            if let Err(err) = flushed {
                tracing::warn!(error = %err, "could not write metrics");
            }
        }
        Ok(report.response(records))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_deadline_ahead_is_the_time_left_on_the_monotonic_clock() {
        let before = tokio::time::Instant::now();

        let deadline = invocation_deadline(1_795_000_060_000, 1_795_000_000_000).unwrap();

        let left = deadline.duration_since(before);
        assert!(
            (Duration::from_secs(60)..Duration::from_secs(61)).contains(&left),
            "{left:?}"
        );
    }

    #[test]
    fn a_deadline_already_past_on_arrival_is_no_deadline() {
        // cargo-lambda's runtime API emulator sends a constant 600000 (1970-01-01T00:10:00Z).
        assert_eq!(invocation_deadline(600_000, 1_795_000_000_000), None);
        assert_eq!(
            invocation_deadline(1_795_000_000_000, 1_795_000_000_000),
            None
        );
    }
}
