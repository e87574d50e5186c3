//! The classic bus (rules and targets): `PutEvents` of `aws-sdk-eventbridge`, each entry on the
//! configured bus (a name or ARN) with the configured `Source` and the X-Ray `TraceHeader`, its
//! answer read entry by entry; described by `DescribeEventBus`. What is done with the calls
//! (turns, retries, halves, pace) is [`crate::publisher`]'s, the same for every target.
//!
//! Order and duplicates: none past `PutEvents`: rules deliver in no order, and a re-publish is a
//! new event to the bus (consumers de-duplicate on `metadata.eventId`; the Custom Event Bus has
//! both).
//!
//! Errors: `MalformedDetail` and `InvalidArgument` refuse an entry for what it holds: poison;
//! `ThrottlingException` (the bus's `PutEvents` quota) and `InternalException` are retried;
//! `NotAuthorizedForSourceException`, `AccessDeniedException` and `ResourceNotFoundException`
//! fail every entry, which stays pending.

use aws_sdk_eventbridge::types::{PutEventsRequestEntry, PutEventsResultEntry};
use futures::FutureExt;
use futures::future::BoxFuture;
use outbox_shared::error::ServiceCodes;
use outbox_shared::limits::{
    PUT_EVENTS_ABSOLUTE_MAX_BYTES, PUT_EVENTS_DEFAULT_MAX_BYTES, PUT_EVENTS_MAX_ENTRIES,
};
use outbox_shared::{OutboundEvent, SdkFailure};

use super::call::{CallAnswer, EntryResult, TargetCall, answer_of};
use super::{TargetDescription, TargetKind, TargetSpec, publish_client};
use crate::CallTasks;
use crate::config::PublisherConfig;
use crate::permissions::{Call, Target};
use crate::probe::{Kind, Probed, Resource, Service, Unusable};

/// The classic bus's publisher: `events:PutEvents` on the bus (the Custom Event Bus's calls are
/// [`super::custom::CALLS`]).
pub const CALLS: &[Call] = &[Call::new("events:PutEvents", Target::EventTarget)];

/// Its describe call, on the bus (both buses' describe call is authorized so).
pub const DESCRIBE_CALLS: &[Call] = &[Call::new("events:DescribeEventBus", Target::EventTarget)];

/// The classic bus's codes are every AWS service's.
pub const CODES: ServiceCodes = ServiceCodes::NONE;

/// The EventBridge service, as the probes name its endpoint.
pub const SERVICE: Service = Service::new("AWS_ENDPOINT_URL_EVENTBRIDGE", "events");

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
    call: |sdk| std::sync::Arc::new(ClassicBus::new(sdk.into())),
    resource: Kind::Bus,
    describe: |sdk, resource| describe(sdk, resource).boxed(),
    describe_calls: DESCRIBE_CALLS,
    order: |_| ", no order and no de-duplication (the Custom Event Bus has both)",
    poison_codes: &["MalformedDetail", "InvalidArgument"],
    split_codes: &[],
    codes: CODES,
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

impl ClassicBus {
    /// The call on a client of `config` ([`publish_client!`]: tests inject faults through it).
    pub fn new(config: aws_sdk_eventbridge::config::Builder) -> Self {
        Self {
            client: publish_client!(aws_sdk_eventbridge, config),
        }
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
            answer_of("PutEvents", &CODES, call_tasks.run(call).await, |output| {
                output.entries().iter().map(entry_result).collect()
            })
        }
        .boxed()
    }
}

/// One classic result: an `ErrorCode` is a refusal, no code an acceptance.
fn entry_result(result: &PutEventsResultEntry) -> EntryResult {
    EntryResult::answered(result.error_code(), result.error_message(), false)
}

/// Reads a classic `PutEvents` answer entry by entry, for the tests.
#[cfg(test)]
pub(crate) fn entry_results(
    pending: &[usize],
    results: &[PutEventsResultEntry],
) -> crate::publisher::attempt::Attempt {
    let results: Vec<EntryResult> = results.iter().map(entry_result).collect();
    crate::publisher::attempt::read_results(&SPEC, pending, &results)
}

/// Describes the bus `resource` names (`DescribeEventBus`, by its name or ARN).
///
/// # Errors
/// [`Unusable`] when it does not exist, may not be described, or cannot be reached.
async fn describe(
    sdk: &aws_config::SdkConfig,
    resource: &Resource,
) -> Result<Probed<TargetDescription>, Unusable> {
    let (client, seen) = crate::probe::probe_client!(aws_sdk_eventbridge, sdk);
    let result = client
        .describe_event_bus()
        .name(&resource.name)
        .send()
        .await
        .map(|out| TargetDescription {
            kind: TargetKind::Classic,
            arn: out.arn().unwrap_or_default().to_owned(),
            state: None,
            max_entry_bytes: None,
        })
        .map_err(|e| SdkFailure::of_service("DescribeEventBus", e, &CODES));
    crate::probe::probed(result, resource, sdk, SERVICE, &seen, DESCRIBE_CALLS)
}
