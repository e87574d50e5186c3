//! The classic bus's adapter: `PutEvents` of `aws-sdk-eventbridge`, each entry on the configured
//! bus (a name or ARN) with the configured `Source`, its answer read entry by entry
//! ([`entry_results`]). What is done with the calls (turns, retries, halves, pace) is
//! [`super::send`]'s, the same for every bus.

use aws_sdk_eventbridge::types::{PutEventsRequestEntry, PutEventsResultEntry};
use futures::FutureExt;
use futures::future::BoxFuture;
use outbox_shared::OutboundEvent;
use outbox_shared::limits::{
    PUT_EVENTS_ABSOLUTE_MAX_BYTES, PUT_EVENTS_DEFAULT_MAX_BYTES, PUT_EVENTS_MAX_ENTRIES,
};

use super::TargetSpec;
#[cfg(test)]
use super::send::{Attempt, read_results};
use super::send::{
    CallAnswer, EntryResult, TargetAdapter, TargetCall, TimeoutsToThePublisher, answer_of,
};
use crate::CallTasks;
use crate::config::{PublisherConfig, SettingError, TargetKind};

/// The classic bus's publisher: `events:PutEvents` on the bus (the Custom Event Bus's calls are
/// [`super::custom_bus::CALLS`]).
pub const CALLS: &[crate::permissions::Call] = &[crate::permissions::Call::new(
    "events:PutEvents",
    crate::permissions::Target::EventTarget,
)];

/// The classic bus: 10 entries a call, 256 KiB by default; a bus name or ARN; any `Source` but
/// EventBridge's reserved ones (checked for every kind).
pub const SPEC: TargetSpec = TargetSpec {
    max_entries_per_call: PUT_EVENTS_MAX_ENTRIES,
    default_max_entry_bytes: PUT_EVENTS_DEFAULT_MAX_BYTES,
    max_entry_bytes: PUT_EVENTS_ABSOLUTE_MAX_BYTES,
    default_max_request_bytes: PUT_EVENTS_DEFAULT_MAX_BYTES,
    max_request_bytes: PUT_EVENTS_ABSOLUTE_MAX_BYTES,
    entry_size: OutboundEvent::entry_size,
    named_by: "a classic bus's name or ARN",
    claims: |name| check_name(name).is_ok(),
    check_name,
    check_source: |_| Ok(()),
    messaging_system: "aws_eventbridge",
    calls: CALLS,
    call: |sdk| {
        std::sync::Arc::new(ClassicBus::new(aws_sdk_eventbridge::Client::from_conf(
            aws_sdk_eventbridge::config::Builder::from(sdk)
                .interceptor(crate::metrics::FailedCallCounter)
                .build(),
        )))
    },
};

/// Longest `EventBusName` (a name or an ARN) EventBridge accepts on a `PutEvents` entry.
const EVENT_BUS_NAME_MAX_CHARS: usize = 1600;

/// Checks the bus against EventBridge's model constraint on a `PutEvents` entry's
/// `EventBusName`: at most 1,600 characters, a name of `[/._A-Za-z0-9-]`, or the ARN of one
/// (`arn:aws…:events:REGION:ACCOUNT:event-bus/NAME`). EventBridge refuses every call that names
/// another bus as a whole with `ValidationException`, which the publisher would take for an
/// entry's fault and dead-letter every event alone in its call: so it is refused at start.
fn check_name(value: &str) -> Result<(), String> {
    let name_chars = |name: &str| {
        !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._-".contains(c))
    };
    let word = |part: &str| {
        part.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-".contains(c))
    };
    let valid = match value.split(':').collect::<Vec<_>>()[..] {
        [name] => name_chars(name),
        ["arn", partition, "events", region, account, resource] => {
            partition.strip_prefix("aws").is_some_and(word)
                && region.split('-').count() >= 3
                && region.split('-').all(|p| !p.is_empty() && word(p))
                && account.len() == 12
                && account.chars().all(|c| c.is_ascii_digit())
                && resource.strip_prefix("event-bus/").is_some_and(name_chars)
        }
        _ => false,
    };
    if !valid || value.chars().count() > EVENT_BUS_NAME_MAX_CHARS {
        return Err(format!(
            "must be a bus name of letters, digits and /._- or an event bus ARN, at most \
             {EVENT_BUS_NAME_MAX_CHARS} characters, as EventBridge accepts"
        ));
    }
    Ok(())
}

/// The classic bus's `PutEvents` call.
#[derive(Debug, Clone)]
pub struct ClassicBus {
    client: aws_sdk_eventbridge::Client,
}

/// The classic bus's adapter.
pub type EventBridgePublisher = TargetAdapter<ClassicBus>;

impl TargetAdapter<ClassicBus> {
    /// The classic bus's publisher on `client` ([`ClassicBus::new`]).
    ///
    /// # Errors
    /// [`SettingError`] when the configuration is out of range (or names a Custom Event
    /// Bus).
    pub fn new(
        client: aws_sdk_eventbridge::Client,
        config: PublisherConfig,
    ) -> Result<Self, SettingError> {
        Self::with_target(ClassicBus::new(client), config)
    }
}

impl ClassicBus {
    /// The call on `client`, which keeps its settings, except that a call that times out is not
    /// retried by the SDK: the publisher retries it, after lowering its calls in flight.
    pub fn new(client: aws_sdk_eventbridge::Client) -> Self {
        let client = aws_sdk_eventbridge::Client::from_conf(
            client
                .config()
                .to_builder()
                .retry_classifier(TimeoutsToThePublisher)
                .build(),
        );
        Self { client }
    }

    /// The `PutEvents` entry of `event`, on the configured bus with the configured source.
    fn entry(config: &PublisherConfig, event: &OutboundEvent) -> PutEventsRequestEntry {
        PutEventsRequestEntry::builder()
            .event_bus_name(&config.target)
            .source(&config.source)
            .detail_type(&event.detail_type)
            .detail(&event.detail)
            .set_time(event.time)
            .set_trace_header(event.trace_header.clone())
            .build()
    }
}

impl TargetCall for ClassicBus {
    fn kind(&self) -> TargetKind {
        TargetKind::Classic
    }

    fn put<'a>(
        &'a self,
        config: &'a PublisherConfig,
        events: &[&OutboundEvent],
        pending: &[usize],
        call_tasks: CallTasks,
    ) -> BoxFuture<'a, CallAnswer> {
        let entries = pending
            .iter()
            .map(|&i| Self::entry(config, events[i]))
            .collect();
        let call = self.client.put_events().set_entries(Some(entries)).send();
        async move {
            answer_of("PutEvents", call_tasks.run(call).await, |output| {
                output.entries().iter().map(entry_result).collect()
            })
        }
        .boxed()
    }
}

/// One classic result: an `ErrorCode` is a refusal, no code an acceptance.
fn entry_result(result: &PutEventsResultEntry) -> EntryResult {
    match result.error_code() {
        None => EntryResult::Published,
        Some(code) => EntryResult::Refused {
            code: code.to_owned(),
            message: result.error_message().unwrap_or_default().to_owned(),
        },
    }
}

/// Reads a classic `PutEvents` answer entry by entry ([`read_results`]), for the tests.
#[cfg(test)]
pub(crate) fn entry_results(pending: &[usize], results: &[PutEventsResultEntry]) -> Attempt {
    let results: Vec<EntryResult> = results.iter().map(entry_result).collect();
    read_results(pending, &results)
}
