//! The one logging and tracing set-up of every binary: structured logs on stderr, so stdout
//! carries only results (summaries, status tables); CloudWatch EMF metric documents go to stderr
//! too, through the same [`Lines`], so a log line never lands inside a document.
//!
//! Every binary decides text or JSON the same way ([`LogFormat::detect`]): what Lambda's advanced
//! logging controls ask for (`AWS_LAMBDA_LOG_FORMAT`) when set, else text for a person at a
//! terminal and JSON for everything else (a file, a pipe, CloudWatch, ECS). Colour codes are
//! written only to a terminal.
//!
//! OpenTelemetry spans are exported only when the standard variables ask for it
//! ([`OtelSettings::from_env`]: an OTLP endpoint, `OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, over OTLP/HTTP with protobuf; `OTEL_SDK_DISABLED=true`
//! or `OTEL_TRACES_EXPORTER=none` turn it off). Then the relays' per-event spans
//! (`crate::relay`) and every `tracing` span go to that endpoint, through a batch processor
//! whose own thread sends them. Without them nothing is set up, and [`exporting`] is one atomic
//! load: the relays build no span at all.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use opentelemetry::trace::{
    SpanContext, SpanId, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use outbox_shared::TraceContext;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer as _;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line (CloudWatch Logs Insights, ECS, a redirected log file).
    Json,
    /// Human-readable text.
    Text,
}

impl LogFormat {
    /// `AWS_LAMBDA_LOG_FORMAT` (`JSON` or `Text`) when set; otherwise text when stderr is a
    /// terminal, JSON when it is not.
    pub fn detect() -> Self {
        Self::choose(
            std::env::var("AWS_LAMBDA_LOG_FORMAT").ok().as_deref(),
            std::io::stderr().is_terminal(),
        )
    }

    fn choose(lambda_log_format: Option<&str>, stderr_is_terminal: bool) -> Self {
        match lambda_log_format.map(str::trim) {
            Some(f) if f.eq_ignore_ascii_case("json") => Self::Json,
            Some(f) if f.eq_ignore_ascii_case("text") => Self::Text,
            _ if stderr_is_terminal => Self::Text,
            _ => Self::Json,
        }
    }
}

/// Installs the global subscriber in the [detected](LogFormat::detect) format, and the
/// OpenTelemetry span exporter when the standard variables ask for one
/// ([`OtelSettings::from_env`]). The level comes from `RUST_LOG`, else `AWS_LAMBDA_LOG_LEVEL`,
/// else `info`.
///
/// Keep the returned [`Telemetry`] until the process ends: dropping it sends the spans not yet
/// exported. A process that never ends (a Lambda) calls [`flush`] after each invocation.
pub fn init_tracing() -> Telemetry {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| {
            let level = std::env::var("AWS_LAMBDA_LOG_LEVEL").unwrap_or_else(|_| "info".into());
            EnvFilter::try_new(level.to_ascii_lowercase())
        })
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(Lines::stderr())
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false);
    let lines = match LogFormat::detect() {
        LogFormat::Json => lines.json().with_current_span(false).boxed(),
        LogFormat::Text => lines.boxed(),
    };
    let otel = OtelSettings::from_env();
    let provider = otel
        .as_ref()
        .and_then(|settings| match settings.provider() {
            Ok(provider) => Some(provider),
            Err(error) => {
                // Logged once the subscriber is up, below: tracing is an aid, never a reason not to run.
                eprintln!("OpenTelemetry exporter not set up: {error}");
                None
            }
        });
    let spans = provider.as_ref().map(|provider| {
        tracing_opentelemetry::layer().with_tracer(provider.tracer(INSTRUMENTATION_SCOPE))
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(lines)
        .with(spans)
        .init();
    if let (Some(settings), Some(provider)) = (otel, &provider) {
        install(provider.clone());
        tracing::info!(endpoint = %settings.endpoint, service = %settings.service_name, "exporting OpenTelemetry spans over OTLP/HTTP");
    }
    Telemetry { provider }
}

/// The instrumentation scope of the relays' spans.
pub const INSTRUMENTATION_SCOPE: &str = "relay-runtime";

/// The span exporter of the process, while [`init_tracing`] set one up.
static TRACER: OnceLock<SdkTracer> = OnceLock::new();
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Makes `provider` the process's span exporter: [`exporting`] answers true from now on, the
/// relays' spans go to it, and so do `opentelemetry::global`'s (a library that uses the global
/// tracer). Once per process; later calls change nothing.
pub fn install(provider: SdkTracerProvider) {
    if PROVIDER.set(provider.clone()).is_err() {
        return;
    }
    let _ = TRACER.set(provider.tracer(INSTRUMENTATION_SCOPE));
    opentelemetry::global::set_tracer_provider(provider);
    opentelemetry::global::set_text_map_propagator(
        opentelemetry_sdk::propagation::TraceContextPropagator::new(),
    );
    EXPORTING.store(true, Ordering::Release);
}

/// Whether spans are exported: one atomic load, so the relays pay nothing for their spans when
/// no exporter is set up.
#[inline]
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The relays' tracer, while spans are exported.
pub fn tracer() -> Option<&'static SdkTracer> {
    if exporting() { TRACER.get() } else { None }
}

/// Sends the spans ended so far and waits for the endpoint's answer (bounded by the exporter's
/// timeout, `OTEL_EXPORTER_OTLP_TIMEOUT`): what a Lambda does after each invocation, since a
/// frozen execution environment runs no batch processor. Nothing without an exporter.
pub fn flush() {
    if let Some(provider) = PROVIDER.get()
        && let Err(error) = provider.force_flush()
    {
        tracing::warn!(error = %error, "could not export OpenTelemetry spans");
    }
}

/// The process's tracing set-up: dropping it sends the spans not yet exported and stops the
/// exporter (nothing without one).
#[derive(Debug)]
#[must_use = "dropping it stops the span exporter: keep it until the process ends"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            EXPORTING.store(false, Ordering::Release);
            if let Err(error) = provider.shutdown() {
                eprintln!("could not export the last OpenTelemetry spans: {error}");
            }
        }
    }
}

/// What the standard OpenTelemetry variables ask of the span exporter. Only OTLP over HTTP
/// with protobuf is built in (the protocol of the collectors a Lambda extension or an ECS
/// sidecar runs on `localhost:4318`); the exporter itself reads the endpoint, headers and
/// timeout (`OTEL_EXPORTER_OTLP_*`), the SDK the sampler (`OTEL_TRACES_SAMPLER`), the batch
/// processor (`OTEL_BSP_*`), the span limits (`OTEL_SPAN_*`) and the resource
/// (`OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtelSettings {
    /// The endpoint as configured (for the log line).
    pub endpoint: String,
    /// `OTEL_SERVICE_NAME`, else the Lambda function's name, else the executable's.
    pub service_name: String,
}

impl OtelSettings {
    /// The settings when the environment asks for span export, `None` when it does not.
    pub fn from_env() -> Option<Self> {
        Self::from_vars(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
    }

    /// [`Self::from_env`] over `var`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Option<Self> {
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return None;
        }
        if var("OTEL_TRACES_EXPORTER")
            .is_some_and(|v| v.split(',').all(|e| !e.trim().eq_ignore_ascii_case("otlp")))
        {
            return None;
        }
        let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"))?;
        let service_name = var("OTEL_SERVICE_NAME")
            .or_else(|| var("AWS_LAMBDA_FUNCTION_NAME"))
            .or_else(|| {
                std::env::current_exe()
                    .ok()?
                    .file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "outbox-relay".to_owned());
        Some(Self {
            endpoint,
            service_name,
        })
    }

    /// The tracer provider: OTLP/HTTP protobuf through a batch processor.
    ///
    /// # Errors
    /// When the exporter cannot be built (a malformed endpoint).
    pub fn provider(&self) -> Result<SdkTracerProvider, opentelemetry_otlp::ExporterBuildError> {
        use opentelemetry_otlp::WithExportConfig as _;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .build()?;
        let resource = opentelemetry_sdk::Resource::builder()
            .with_service_name(self.service_name.clone())
            .build();
        Ok(SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build())
    }
}

/// The OpenTelemetry span context of a creation context an event carries: remote, with its
/// flags and trace state, for a link or a parent.
pub fn span_context(trace: &TraceContext) -> Option<SpanContext> {
    let trace_id = TraceId::from_hex(trace.trace_id()).ok()?;
    let span_id = SpanId::from_hex(trace.parent_id()).ok()?;
    let state = trace
        .tracestate()
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    Some(SpanContext::new(
        trace_id,
        span_id,
        TraceFlags::new(trace.flags()),
        true,
        state,
    ))
}

/// Writes `program: words` to stderr when stderr is a person's terminal: the command's outcome in
/// words, its last line, after every log line (which stay what they are, for machines). Not at a
/// terminal (ECS, Lambda, a pipe) nothing is written: the logs and the summaries say it there.
pub fn outcome(program: &str, words: &str) {
    if std::io::stderr().is_terminal() {
        // Nowhere left to report a failure to write the last line.
        let _ = Lines::stderr().write_line(outcome_line(program, words).as_bytes());
    }
}

/// The outcome line: `program: words`.
pub fn outcome_line(program: &str, words: &str) -> String {
    format!("{program}: {words}")
}

/// The process's one output for log lines and metric documents: each line is written whole,
/// under one lock, so a log line never lands inside a metric document (which CloudWatch would
/// then reject) nor a document inside a log line. `tracing` writes through it
/// ([`init_tracing`]), and so does `crate::metrics::emf::Emf::flush`.
#[derive(Clone)]
pub struct Lines {
    out: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl std::fmt::Debug for Lines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lines").finish_non_exhaustive()
    }
}

impl Lines {
    /// Whole lines to `out`.
    pub fn new(out: impl Write + Send + 'static) -> Self {
        Self {
            out: Arc::new(Mutex::new(Box::new(out))),
        }
    }

    /// The process's stderr, shared by every caller.
    pub fn stderr() -> Self {
        static STDERR: OnceLock<Lines> = OnceLock::new();
        STDERR.get_or_init(|| Self::new(std::io::stderr())).clone()
    }

    /// Writes `line` and a newline (unless it ends with one) in one piece.
    ///
    /// # Errors
    /// When the output cannot be written.
    pub fn write_line(&self, line: &[u8]) -> std::io::Result<()> {
        let mut whole = Vec::with_capacity(line.len() + 1);
        whole.extend_from_slice(line);
        if !whole.ends_with(b"\n") {
            whole.push(b'\n');
        }
        let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        out.write_all(&whole)?;
        out.flush()
    }
}

/// One log event, gathered until `tracing` is done with it and then written whole.
#[derive(Debug)]
pub struct LineBuffer<'a> {
    lines: &'a Lines,
    buffer: Vec<u8>,
}

impl Write for LineBuffer<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LineBuffer<'_> {
    fn drop(&mut self) {
        if !self.buffer.is_empty() {
            // Nowhere left to report a failure to write a log line.
            let _ = self.lines.write_line(&self.buffer);
        }
    }
}

impl<'a> MakeWriter<'a> for Lines {
    type Writer = LineBuffer<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineBuffer {
            lines: self,
            buffer: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lambda_setting_wins_then_the_terminal_decides() {
        assert_eq!(LogFormat::choose(Some("JSON"), true), LogFormat::Json);
        assert_eq!(LogFormat::choose(Some("Text"), false), LogFormat::Text);
        assert_eq!(LogFormat::choose(None, true), LogFormat::Text);
        assert_eq!(LogFormat::choose(None, false), LogFormat::Json);
        assert_eq!(LogFormat::choose(Some("other"), false), LogFormat::Json);
    }

    #[test]
    fn spans_are_exported_only_when_an_otlp_endpoint_is_set_and_nothing_turns_them_off() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert_eq!(OtelSettings::from_vars(vars(&[])), None);
        let on = OtelSettings::from_vars(vars(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318"),
            ("OTEL_SERVICE_NAME", "relay"),
        ]))
        .unwrap();
        assert_eq!(on.endpoint, "http://localhost:4318");
        assert_eq!(on.service_name, "relay");
        let traces_only = OtelSettings::from_vars(vars(&[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                "http://c:4318/v1/traces",
            ),
            ("AWS_LAMBDA_FUNCTION_NAME", "relay-fn"),
        ]))
        .unwrap();
        assert_eq!(traces_only.service_name, "relay-fn");
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
            ("OTEL_TRACES_EXPORTER", "console"),
        ] {
            let pairs: &'static [(&str, &str)] = Box::leak(
                vec![("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), off].into_boxed_slice(),
            );
            assert_eq!(OtelSettings::from_vars(vars(pairs)), None, "{off:?}");
        }
    }

    #[test]
    fn an_events_creation_context_becomes_a_remote_span_context() {
        let trace = TraceContext::new(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some("rojo=1"),
        )
        .unwrap();
        let context = span_context(&trace).unwrap();
        assert!(context.is_valid() && context.is_remote() && context.is_sampled());
        assert_eq!(
            context.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(context.span_id().to_string(), "00f067aa0ba902b7");
        assert_eq!(context.trace_state().header(), "rojo=1");
    }
}
