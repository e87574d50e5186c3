//! The OTLP receiver the emulators' script runs (`tools/otlp_receiver.py`, on OpenTelemetry's own
//! protobuf classes): where a test points the processes it runs (`OTEL_EXPORTER_OTLP_ENDPOINT`,
//! [`relay_otel_env`]) and the applications it plays in-process ([`AppTracing`]: an order
//! service, a consumer), and what it reads their spans back from ([`spans_of_trace`],
//! [`spans_linked_to`]).

use std::time::{Duration, Instant};

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde_json::Value;
use tracing_subscriber::layer::SubscriberExt as _;

/// The receiver's address (`OTLP_RECEIVER_ENDPOINT`).
///
/// # Panics
/// When the tests do not run under `scripts/emulator.sh`, which starts it.
pub fn receiver_endpoint() -> String {
    std::env::var("OTLP_RECEIVER_ENDPOINT").unwrap_or_else(|_| {
        panic!(
            "OTLP_RECEIVER_ENDPOINT is not set: run the tests under scripts/emulator.sh run -- …, \
             which starts the OTLP receiver"
        )
    })
}

/// The standard variables that make a relay binary export its spans to the receiver as
/// `service`, its batch processor sending every 100 ms.
pub fn relay_otel_env(service: &str) -> Vec<(&'static str, String)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver_endpoint()),
        ("OTEL_SERVICE_NAME", service.to_owned()),
        ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
    ]
}

/// An application the test plays (an order service, a consumer): a tracer provider of its own
/// exporting to the receiver as `service`, and a `tracing` dispatcher with the
/// `tracing-opentelemetry` layer on it, as an application that exports its `tracing` spans sets up.
#[derive(Debug)]
pub struct AppTracing {
    provider: SdkTracerProvider,
    pub dispatch: tracing::Dispatch,
}

impl AppTracing {
    /// # Panics
    /// When the exporter cannot be built.
    pub fn new(service: &str) -> Self {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("{}/v1/traces", receiver_endpoint()))
            .build()
            .expect("an OTLP/HTTP exporter");
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(
                opentelemetry_sdk::Resource::builder()
                    .with_service_name(service.to_owned())
                    .build(),
            )
            .build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer(service.to_owned())));
        Self {
            provider,
            dispatch: tracing::Dispatch::new(subscriber),
        }
    }

    /// Sends the spans ended so far.
    ///
    /// # Panics
    /// When the receiver does not take them.
    pub async fn flush(&self) {
        let provider = self.provider.clone();
        tokio::task::spawn_blocking(move || provider.force_flush())
            .await
            .expect("the flush runs")
            .expect("the receiver takes the spans");
    }
}

impl Drop for AppTracing {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

async fn get(path: &str) -> Value {
    let (status, body) = crate::local_http::request(&receiver_endpoint(), "GET", path, None).await;
    assert_eq!(status, 200, "GET {path} from the OTLP receiver: {body}");
    body
}

/// The spans of trace `trace_id` the receiver has.
pub async fn spans_of_trace(trace_id: &str) -> Vec<Value> {
    as_list(get(&format!("/spans?trace_id={trace_id}")).await)
}

/// The spans whose links name trace `trace_id`.
pub async fn spans_linked_to(trace_id: &str) -> Vec<Value> {
    as_list(get(&format!("/spans?linked={trace_id}")).await)
}

fn as_list(value: Value) -> Vec<Value> {
    value.as_array().cloned().unwrap_or_default()
}

/// Polls `read` until `done` holds of what it returns or `timeout` passes; the last reading.
pub async fn wait_for<F, Fut>(
    timeout: Duration,
    read: F,
    done: impl Fn(&[Value]) -> bool,
) -> Vec<Value>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Vec<Value>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let spans = read().await;
        if done(&spans) || Instant::now() > deadline {
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The span of `spans` named `name` from `service`, if any.
pub fn named<'a>(spans: &'a [Value], service: &str, name: &str) -> Option<&'a Value> {
    spans
        .iter()
        .find(|s| s["name"] == name && s["resource"]["service.name"] == service)
}
