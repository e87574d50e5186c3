//! The caller's trace context, carried to the bus, in both of its forms:
//!
//! - X-Ray's: the writer stores it as the outbox item's `TraceHeader`, and the relays copy it to
//!   the classic bus's `PutEvents` entry's `TraceHeader`, so the event joins the caller's X-Ray
//!   trace;
//! - W3C Trace Context: the writer stores the caller's `traceparent` and `tracestate` as the
//!   item's `TraceParent` and `TraceState` (from [`current_trace_context`], or a value it is
//!   given), and the relays carry them in the event itself on every target, so a consumer
//!   continues the caller's trace wherever the event went.

use std::fmt;

use opentelemetry::trace::TraceContextExt as _;
use outbox_shared::TraceContext;
use outbox_shared::limits::PUT_EVENTS_TRACE_HEADER_MAX_CHARS;

use crate::error::InputError;

/// The environment variable Lambda sets to the invocation's X-Ray trace header.
pub const LAMBDA_TRACE_ENV: &str = "_X_AMZN_TRACE_ID";

/// Longest `TraceHeader` EventBridge accepts on a `PutEvents` entry (ASCII here, so characters
/// and bytes agree).
pub const MAX_TRACE_HEADER_LEN: usize = PUT_EVENTS_TRACE_HEADER_MAX_CHARS;

/// An X-Ray trace header (`Root=1-…;Parent=…;Sampled=1`), checked against EventBridge's limits:
/// 1 to 500 printable ASCII characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TraceHeader(String);

impl TraceHeader {
    /// # Errors
    /// [`InputError::TraceHeader`] when `header` is empty, longer than 500 characters, or holds a
    /// character that is not printable ASCII.
    pub fn new(header: impl Into<String>) -> Result<Self, InputError> {
        let header = header.into();
        let reason = if header.is_empty() {
            Some("it is empty".to_owned())
        } else if header.len() > MAX_TRACE_HEADER_LEN {
            Some(format!(
                "it is {} characters, more than the {MAX_TRACE_HEADER_LEN} EventBridge accepts",
                header.len()
            ))
        } else {
            header
                .char_indices()
                .find(|(_, c)| !c.is_ascii_graphic())
                .map(|(i, _)| format!("character {i} is not printable ASCII"))
        };
        match reason {
            Some(reason) => Err(InputError::TraceHeader { reason }),
            None => Ok(Self(header)),
        }
    }

    /// The trace header Lambda gives the running invocation (`_X_AMZN_TRACE_ID`), if it is set and
    /// valid; `None` outside Lambda.
    pub fn from_lambda_environment() -> Option<Self> {
        Self::from_lambda_value(std::env::var(LAMBDA_TRACE_ENV).ok())
    }

    /// [`TraceHeader::from_lambda_environment`] on a given value of the variable.
    fn from_lambda_value(value: Option<String>) -> Option<Self> {
        value.and_then(|v| Self::new(v).ok())
    }

    /// `explicit`, or else the Lambda invocation's trace header.
    pub(crate) fn or_from_environment(explicit: Option<&Self>) -> Option<Self> {
        explicit.cloned().or_else(Self::from_lambda_environment)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The W3C trace context of the caller's current OpenTelemetry span, if it has a valid one:
/// `opentelemetry::Context::current()`, which is the span the caller made current, or the
/// `tracing` span it is in when it exports through `tracing-opentelemetry` (whose layer makes an
/// entered span's context current). `None` outside any span, or in one that is not recorded
/// anywhere (an invalid context).
pub fn current_trace_context() -> Option<TraceContext> {
    let context = opentelemetry::Context::current();
    let span = context.span();
    let span_context = span.span_context();
    if !span_context.is_valid() {
        return None;
    }
    let traceparent = format!(
        "00-{}-{}-{:02x}",
        span_context.trace_id(),
        span_context.span_id(),
        span_context.trace_flags().to_u8()
    );
    let state = span_context.trace_state().header();
    TraceContext::new(&traceparent, Some(state.as_str())).ok()
}

/// `explicit`, or else the caller's current span's ([`current_trace_context`]).
pub(crate) fn trace_context_or_current(explicit: Option<&TraceContext>) -> Option<TraceContext> {
    explicit.cloned().or_else(current_trace_context)
}

impl fmt::Display for TraceHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const XRAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

    #[test]
    fn accepts_an_xray_header_and_rejects_what_eventbridge_would() {
        assert_eq!(TraceHeader::new(XRAY).unwrap().as_str(), XRAY);
        for (bad, why) in [
            (String::new(), "empty"),
            ("a".repeat(501), "501 characters"),
            ("Root=1 2".to_owned(), "character 6"),
            ("Root=é".to_owned(), "character 5"),
        ] {
            let err = TraceHeader::new(bad).unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
            assert!(err.contains("trace header"), "{err}");
        }
    }

    #[test]
    fn the_current_spans_context_is_captured_and_none_outside_a_span() {
        use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
        assert_eq!(current_trace_context(), None);
        let span = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            false,
            "rojo=1".parse::<TraceState>().unwrap(),
        );
        let _entered = opentelemetry::Context::current()
            .with_remote_span_context(span)
            .attach();
        let captured = current_trace_context().unwrap();
        assert_eq!(
            captured.traceparent(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(captured.tracestate(), Some("rojo=1"));
        // A value the caller gives wins over the current span's
        let given = TraceContext::new(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
            None,
        )
        .unwrap();
        assert_eq!(trace_context_or_current(Some(&given)), Some(given));
    }

    #[test]
    fn falls_back_to_the_lambda_invocations_header() {
        assert_eq!(
            TraceHeader::from_lambda_value(Some(XRAY.to_owned())),
            Some(TraceHeader(XRAY.to_owned()))
        );
        assert_eq!(TraceHeader::from_lambda_value(None), None);
        // A malformed variable is ignored rather than failing the write.
        assert_eq!(TraceHeader::from_lambda_value(Some(String::new())), None);
    }
}
