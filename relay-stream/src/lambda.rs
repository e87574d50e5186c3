//! The glue between `lambda_runtime` and the handler: one invocation is one batch; the response
//! carries `batchItemFailures`; metrics are flushed in CloudWatch Embedded Metric Format after
//! every invocation.

use aws_lambda_events::dynamodb::Event;
use aws_lambda_events::streams::DynamoDbEventResponse;
use lambda_runtime::LambdaEvent;
use metrics_cloudwatch_embedded::Collector;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::AwsStreamRelay;

/// Default CloudWatch namespace of the relay's metrics (`METRICS_NAMESPACE` overrides it).
pub const DEFAULT_METRICS_NAMESPACE: &str = "OutboxRelay";

/// Installs the EMF recorder (once per process) and describes the metrics' units.
///
/// # Errors
/// When a global metrics recorder is already installed.
pub fn init_metrics(
    namespace: &str,
) -> Result<&'static Collector, metrics_cloudwatch_embedded::Error> {
    let collector = metrics_cloudwatch_embedded::Builder::new()
        .cloudwatch_namespace(namespace.to_owned())
        .with_dimension(
            "function",
            std::env::var("AWS_LAMBDA_FUNCTION_NAME").unwrap_or_else(|_| "relay-stream".into()),
        )
        .init()?;
    metrics::describe_histogram!(
        crate::metrics::LAG,
        metrics::Unit::Milliseconds,
        "publish time minus the oldest record's creation time"
    );
    for name in [
        crate::metrics::PUBLISHED,
        crate::metrics::RETRIED,
        crate::metrics::DEAD_LETTERED,
        crate::metrics::FAILED,
        crate::metrics::IGNORED,
        crate::metrics::MARK_FAILED,
    ] {
        metrics::describe_counter!(name, metrics::Unit::Count, "");
    }
    Ok(collector)
}

/// The Lambda function: the relay plus its metrics collector.
pub struct LambdaRelay {
    relay: AwsStreamRelay,
    metrics: Option<&'static Collector>,
    retried_so_far: AtomicU64,
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
    pub fn new(relay: AwsStreamRelay, metrics: Option<&'static Collector>) -> Self {
        Self {
            relay,
            metrics,
            retried_so_far: AtomicU64::new(0),
        }
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
        let report = self.relay.handle(records).await;
        let retried = self.relay.publisher().stats().retried;
        let before = self.retried_so_far.swap(retried, Ordering::Relaxed);
        crate::metrics::record_retried(retried.saturating_sub(before));
        if let Some(metrics) = self.metrics {
            let flushed = metrics
                .set_property("requestId", event.context.request_id.clone())
                .flush(std::io::stdout().lock());
            if let Err(err) = flushed {
                tracing::warn!(error = %err, "could not write metrics");
            }
        }
        Ok(report.response(records))
    }
}
