//! The relay's spans, following OpenTelemetry's messaging conventions for batch publishing: one
//! `publish {target}` span per publish, one `mark` span per settle, one `dead-letter` span per
//! poison event, each linked to the creation context of the events it concerns.

use std::collections::HashMap;
use std::time::SystemTime;

use opentelemetry::trace::{Link, Span as _, SpanKind, Status, Tracer as _};
use opentelemetry::{KeyValue, Value};
use outbox_shared::envelope::EventFormat;

use super::Outbound;
use crate::event::{Event, State};
use crate::status_store::MarkOutcome;
use crate::telemetry;

/// `messaging.system` of the dead-letter spans.
pub const SQS_SYSTEM: &str = "aws_sqs";

/// `messaging.system` of the mark spans: the outbox table, the relays' intermediary on the side
/// they consume from.
pub const OUTBOX_SYSTEM: &str = "aws_dynamodb";

/// The `publish {target}` span of one publish: a `send` of a batch, linked to each event's
/// creation context (the writer's span), each link saying what became of its event.
pub(super) fn publish<R>(
    outbound: &Outbound,
    origin: &'static str,
    started: SystemTime,
    events: &[Event<R>],
    published: &[usize],
) {
    let Some(tracer) = telemetry::tracer() else {
        return;
    };
    let mut counts: HashMap<&'static str, i64> = HashMap::new();
    let mut failure = None;
    let links = published
        .iter()
        .map(|&i| {
            let event = &events[i];
            let outcome = outcome_name(&event.state);
            *counts.entry(outcome).or_default() += 1;
            if let State::Failed { code, .. } = &event.state {
                failure.get_or_insert_with(|| code.clone());
            }
            (event, outcome)
        })
        .filter_map(|(event, outcome)| {
            let context = telemetry::span_context(event.trace.as_ref()?)?;
            Some(Link::new(
                context,
                vec![
                    KeyValue::new("messaging.message.id", event.id().to_owned()),
                    KeyValue::new("outbox.outcome", outcome),
                ],
                0,
            ))
        })
        .collect();
    let destination = &outbound.destination;
    let name = if destination.is_empty() {
        "publish".to_owned()
    } else {
        format!("publish {destination}")
    };
    let mut attributes = vec![
        KeyValue::new("messaging.system", outbound.system),
        KeyValue::new("messaging.operation.type", "send"),
        KeyValue::new("messaging.operation.name", "publish"),
        KeyValue::new("messaging.destination.name", destination.clone()),
        KeyValue::new(
            "messaging.batch.message_count",
            i64::try_from(published.len()).unwrap_or(i64::MAX),
        ),
        KeyValue::new("outbox.relay", origin),
        KeyValue::new("outbox.event_format", format_name(outbound.encoding.format)),
    ];
    attributes.extend(
        counts
            .into_iter()
            .map(|(outcome, n)| KeyValue::new(format!("outbox.{outcome}"), n)),
    );
    let mut span = tracer
        .span_builder(name)
        .with_kind(SpanKind::Client)
        .with_start_time(started)
        .with_attributes(attributes)
        .with_links(links)
        .start(tracer);
    if let Some(code) = failure {
        span.set_attribute(KeyValue::new("error.type", code));
        span.set_status(Status::error("events not published: they stay pending"));
    }
    span.end();
}

/// The `mark` span of one settle: the published events' status updates (a `settle` of the
/// outbox's messages), linked to each event's creation context with its outcome.
pub(super) fn mark<R>(
    origin: &'static str,
    started: SystemTime,
    events: &[Event<R>],
    marked: &[usize],
) {
    let Some(tracer) = telemetry::tracer() else {
        return;
    };
    let not_marked = marked
        .iter()
        .filter(|&&i| matches!(events[i].state, State::NotMarked(_)))
        .count();
    let links = marked
        .iter()
        .filter_map(|&i| {
            let event = &events[i];
            Some(Link::new(
                telemetry::span_context(event.trace.as_ref()?)?,
                vec![
                    KeyValue::new("messaging.message.id", event.id().to_owned()),
                    KeyValue::new("outbox.outcome", outcome_name(&event.state)),
                ],
                0,
            ))
        })
        .collect();
    let mut span = tracer
        .span_builder("mark")
        .with_kind(SpanKind::Client)
        .with_start_time(started)
        .with_attributes([
            KeyValue::new("messaging.system", OUTBOX_SYSTEM),
            KeyValue::new("messaging.operation.type", "settle"),
            KeyValue::new("messaging.operation.name", "mark"),
            KeyValue::new(
                "messaging.batch.message_count",
                i64::try_from(marked.len()).unwrap_or(i64::MAX),
            ),
            KeyValue::new("outbox.relay", origin),
            KeyValue::new(
                "outbox.not_marked",
                i64::try_from(not_marked).unwrap_or(i64::MAX),
            ),
        ])
        .with_links(links)
        .start(tracer);
    if not_marked > 0 {
        span.set_attribute(KeyValue::new("error.type", "NotMarked"));
        span.set_status(Status::error(
            "published events not marked: they stay pending and are published again",
        ));
    }
    span.end();
}

/// The `dead-letter` span of one poison event: its letter sent to the queue (a `send`), and
/// its mark; linked to its creation context.
pub(super) fn dead_letter<R>(
    origin: &'static str,
    started: SystemTime,
    event: &Event<R>,
    state: &State,
) {
    let Some(tracer) = telemetry::tracer() else {
        return;
    };
    let reason = match state {
        State::DeadLettered { reason, .. } | State::NotDeadLettered { reason, .. } => {
            reason.clone()
        }
        _ => String::new(),
    };
    let links = event
        .trace
        .as_ref()
        .and_then(telemetry::span_context)
        .map(|context| vec![Link::with_context(context)])
        .unwrap_or_default();
    let mut span = tracer
        .span_builder("dead-letter")
        .with_kind(SpanKind::Producer)
        .with_start_time(started)
        .with_attributes([
            KeyValue::new("messaging.system", SQS_SYSTEM),
            KeyValue::new("messaging.operation.type", "send"),
            KeyValue::new("messaging.operation.name", "dead-letter"),
            KeyValue::new("messaging.message.id", event.id().to_owned()),
            KeyValue::new("outbox.relay", origin),
            KeyValue::new("outbox.outcome", outcome_name(state)),
            KeyValue::new("outbox.dead_letter.reason", Value::from(reason)),
        ])
        .with_links(links)
        .start(tracer);
    if matches!(state, State::NotDeadLettered { .. }) {
        span.set_attribute(KeyValue::new("error.type", "NotDeadLettered"));
        span.set_status(Status::error(
            "poison event not dead-lettered: it stays pending",
        ));
    }
    span.end();
}

/// What became of an event, as its span links name it.
fn outcome_name(state: &State) -> &'static str {
    match state {
        State::Published => "published",
        State::Marked(MarkOutcome::Marked) => "marked",
        State::Marked(MarkOutcome::AlreadyMarked) => "already_marked",
        State::NotMarked(_) => "not_marked",
        State::Poison { .. } => "rejected",
        State::DeadLettered { .. } => "dead_lettered",
        State::NotDeadLettered { .. } => "not_dead_lettered",
        State::Failed { .. } => "failed",
        State::NotSent | State::Ready(_) => "not_sent",
        State::HeldBack { .. } => "held_back",
        State::LeftToHold => "left_to_hold",
        State::Ignored(_) => "ignored",
    }
}

fn format_name(format: EventFormat) -> &'static str {
    format.as_str()
}
