//! The consumer's processing span, started from the event's context: the W3C trace context the
//! writer captured and the relays carried in the event (`metadata.traceparent`, or a
//! CloudEvent's `traceparent` extension), else the X-Ray trace header the delivery carries (an
//! SQS message's `AWSTraceHeader` attribute, a Lambda invocation's `_X_AMZN_TRACE_ID`).
//!
//! [`process_span`] follows OpenTelemetry's messaging conventions for a push-based consumer: a
//! `process` span of kind CONSUMER for one message, its parent the message's creation context
//! (so the consumer's work is in the writer's trace) and a link to it, with
//! `messaging.operation.type = process` and `messaging.message.id` the event id. It is a
//! `tracing` span, exported when the application's subscriber has a `tracing-opentelemetry`
//! layer (the project's binaries set one up when the standard `OTEL_*` variables ask for it);
//! without one it is an ordinary `tracing` span and costs what any span does.

use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt as _, TraceFlags, TraceId, TraceState,
};
use outbox_shared::{Envelope, TraceContext};
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// `messaging.system` of the process span: the events come from EventBridge.
pub const MESSAGING_SYSTEM: &str = "aws_eventbridge";

/// The creation context `envelope` carries, if it has a valid one (an invalid one is ignored).
pub fn creation_context<D>(envelope: &Envelope<D>) -> Option<TraceContext> {
    TraceContext::received(
        envelope.metadata.traceparent.as_deref(),
        envelope.metadata.tracestate.as_deref(),
    )
    .0
}

/// The context to continue: the event's own ([`creation_context`]), else the delivery's X-Ray
/// header (`xray_header`), mapped as AWS's X-Ray propagator maps it.
pub fn parent_context<D>(
    envelope: &Envelope<D>,
    xray_header: Option<&str>,
) -> Option<TraceContext> {
    creation_context(envelope).or_else(|| xray_header.and_then(TraceContext::from_xray))
}

/// A remote OpenTelemetry span context of `trace`.
pub fn span_context(trace: &TraceContext) -> Option<SpanContext> {
    Some(SpanContext::new(
        TraceId::from_hex(trace.trace_id()).ok()?,
        SpanId::from_hex(trace.parent_id()).ok()?,
        TraceFlags::new(trace.flags()),
        true,
        trace
            .tracestate()
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default(),
    ))
}

/// The `process` span of one event: run the event's handling in it
/// (`tracing::Instrument::instrument`). Its parent is the event's context ([`parent_context`]),
/// and it links to the event's creation context.
pub fn process_span<D>(envelope: &Envelope<D>, xray_header: Option<&str>) -> tracing::Span {
    let span = tracing::info_span!(
        "process",
        otel.kind = "consumer",
        event_id = %envelope.metadata.event_id,
        event_type = %envelope.metadata.event_type,
    );
    if let Some(parent) = parent_context(envelope, xray_header)
        .as_ref()
        .and_then(span_context)
    {
        // Without an OpenTelemetry layer there is no span to parent: nothing to do.
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
    }
    if let Some(creation) = creation_context(envelope).as_ref().and_then(span_context) {
        span.add_link(creation);
    }
    span.set_attribute("messaging.system", MESSAGING_SYSTEM);
    span.set_attribute("messaging.operation.type", "process");
    span.set_attribute("messaging.operation.name", "process");
    span.set_attribute("messaging.message.id", envelope.metadata.event_id.clone());
    if let Some(aggregate) = &envelope.metadata.aggregate_id {
        span.set_attribute("outbox.aggregate_id", aggregate.clone());
    }
    span
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(traceparent: Option<&str>) -> Envelope<()> {
        Envelope {
            metadata: outbox_shared::EventMetadata {
                event_id: "e1".into(),
                event_type: "OrderCreated".into(),
                aggregate_type: None,
                aggregate_id: Some("o1".into()),
                sequence: Some(1),
                occurred_at: "2026-11-22T10:00:00.000Z".into(),
                traceparent: traceparent.map(str::to_owned),
                tracestate: None,
            },
            data: (),
        }
    }

    const XRAY: &str = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";

    #[test]
    fn the_events_own_context_wins_over_the_deliverys_xray_header() {
        let traced = envelope(Some(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ));
        assert_eq!(
            parent_context(&traced, Some(XRAY)).unwrap().trace_id(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        // Without one (or with an invalid one), the X-Ray header's trace is continued
        for untraced in [envelope(None), envelope(Some("garbage"))] {
            assert_eq!(
                parent_context(&untraced, Some(XRAY)).unwrap().trace_id(),
                "5759e988bd862e3fe1be46a994272793"
            );
            assert_eq!(creation_context(&untraced), None);
        }
        assert_eq!(parent_context(&envelope(None), None), None);
    }
}
