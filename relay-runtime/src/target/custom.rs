//! The Custom Event Bus's adapter (EventsV2): `PutEvents` of `aws-sdk-eventbridgev2` to the
//! configured bus ARN, each entry with the configured `Source`, its aggregate as
//! `SystemMetadata.EventGroupId` and its event id as `SystemMetadata.DeduplicationId`
//! ([`outbox_shared::event_group`]), its answer read entry by entry. What is done with the calls
//! (turns, retries, halves, pace) is [`crate::publisher`]'s, the same for every target. Described by EventsV2's
//! `DescribeEventBus` (its ARN and state: a bus not `ACTIVE` refuses what the relays send).
//!
//! Order: the request builder puts at most one event of an aggregate in a call and sends none
//! before the call holding the aggregate's previous event has ended, and nothing of an aggregate
//! after its failure; an event group is one aggregate (one ordering key), so a group never has
//! two unconfirmed events in flight, and the bus accepts its events in the relay's order (the
//! order a FIFO subscriber delivers; the bus orders by acceptance, and documents no order
//! between the entries of one call or between concurrent calls).
//!
//! Duplicates: a call the SDK or the publisher sends again after a lost or failed answer carries
//! the same `DeduplicationId`s, so an entry accepted the first time comes back `DEDUPLICATED`
//! within the bus's 300 s window: a success, counted ([`crate::metrics::DEDUPLICATED`]), stored
//! once. A re-publish after the window (say, by the poller much later) is a new event to the bus.
//!
//! Errors: `ThrottlingException` and `InternalException` are retried (by the SDK, then by the
//! publisher); `InvalidInputException` refuses the whole call for what one entry can cause and
//! splits it ([`SPEC`]'s poison codes); `AccessDeniedException`,
//! `ResourceNotFoundException` and `InvalidStateException` fail every entry, which stays pending.
//! The bus has no `TraceHeader`: the X-Ray trace context is not propagated on this bus (the W3C
//! trace context is, in the event itself).
//!
//! CloudEvents (`EVENT_FORMAT=cloudevents`): each event is a raw event (`PutRawEvents`, the
//! bus's API for payloads of a content type of their own), its `Data` the CloudEvent and its
//! `ContentType` `application/cloudevents+json`, with the same group, id and results. A
//! subscriber's default `RAW` delivery then hands the consumer the CloudEvent exactly as the
//! relay wrote it, where `PutEvents` would wrap it in the classic envelope (`detail`). Subscriber
//! filters copied from a classic rule match nothing of raw events: filter on the CloudEvent's
//! own attributes (`DATA` scope) instead.

use aws_sdk_eventbridgev2::types::{
    PutEventsRequestEntry, PutEventsResultEntry, PutEventsSystemMetadata, PutRawEventsRequestEntry,
    PutRawEventsResultEntry, PutRawEventsSystemMetadata, SuccessCode,
};
use futures::FutureExt;
use futures::future::BoxFuture;
use outbox_shared::envelope::{CLOUDEVENTS_CONTENT_TYPE, EventFormat};
use outbox_shared::error::ServiceCodes;
use outbox_shared::event_group::deduplication_id;
use outbox_shared::limits::PUT_EVENTS_ABSOLUTE_MAX_BYTES;
use outbox_shared::{OutboundEvent, SdkFailure};

use super::call::{CallAnswer, EntryResult, TargetCall, answer_of};
use super::{TargetDescription, TargetKind, TargetSpec, publish_client};
use crate::CallTasks;
use crate::config::PublisherConfig;
use crate::permissions::{Call, Target};
use crate::probe::{Kind, Probed, Resource, Service, Unusable};

/// The Custom Event Bus's `PutEvents` takes 1 to 100 entries per call (fixed, not adjustable).
pub const CUSTOM_BUS_PUT_EVENTS_MAX_ENTRIES: usize = 100;
/// The Custom Event Bus documents no byte limit per entry or per request; its default budget is
/// the classic bus's documented 256 KiB, which every SQS queue (the usual target) takes as one
/// message, so a limit we cannot see refuses nothing the classic bus would have taken.
pub const CUSTOM_BUS_DEFAULT_MAX_BYTES: usize = 256 * 1024;
/// The Custom Event Bus suppresses a repeat of a `DeduplicationId` within 300 s (per account and
/// event group; fixed): a re-publish after it is a new event to the bus.
pub const CUSTOM_BUS_DEDUP_WINDOW: std::time::Duration = std::time::Duration::from_secs(300);

/// The Custom Event Bus's publisher: `events:PutEvents` on the bus, and for CloudEvents (raw
/// events) `events:PutRawEvents`, both on its ARN.
pub const CALLS: &[Call] = &[
    Call::new("events:PutEvents", Target::EventTarget),
    Call::new("events:PutRawEvents", Target::EventTarget),
];

/// Its describe call, authorized as the classic bus's.
pub const DESCRIBE_CALLS: &[Call] = super::classic::DESCRIBE_CALLS;

/// The Custom Event Bus's codes are every AWS service's.
pub const CODES: ServiceCodes = ServiceCodes::NONE;

/// The EventsV2 service, as the probes name its endpoint.
pub const SERVICE: Service = Service::new("AWS_ENDPOINT_URL_EVENTBRIDGEV2", "eventsv2");

/// The Custom Event Bus: 100 entries a call, 256 KiB by default (it documents no limit); its
/// whole ARN; a `Source` of at most 256 characters.
pub const SPEC: TargetSpec = TargetSpec {
    max_entries_per_call: CUSTOM_BUS_PUT_EVENTS_MAX_ENTRIES,
    default_max_entry_bytes: CUSTOM_BUS_DEFAULT_MAX_BYTES,
    max_entry_bytes: PUT_EVENTS_ABSOLUTE_MAX_BYTES,
    default_max_request_bytes: CUSTOM_BUS_DEFAULT_MAX_BYTES,
    max_request_bytes: PUT_EVENTS_ABSOLUTE_MAX_BYTES,
    entry_size: OutboundEvent::entry_size,
    named_by: "a Custom Event Bus ARN (event-busv2)",
    claims: |name| name.contains(":event-busv2/"),
    check_name,
    check_source,
    messaging_system: "aws_eventbridge",
    calls: CALLS,
    call: |sdk| std::sync::Arc::new(CustomBus::new(sdk.into())),
    resource: Kind::Bus,
    describe: |sdk, resource| describe(sdk, resource).boxed(),
    describe_calls: DESCRIBE_CALLS,
    order: |_| ", each aggregate in order, re-publishes suppressed",
    // A parameter over a model constraint.
    poison_codes: &["InvalidInputException"],
    split_codes: &[],
    codes: CODES,
};

/// Longest Custom Event Bus ARN `PutEvents` accepts as `EventBusArn`.
const EVENT_BUS_ARN_MAX_CHARS: usize = 1011;

/// Characters of the id the service appends to a Custom Event Bus's name in its ARN.
const CUSTOM_BUS_ID_CHARS: usize = 25;

/// Longest Custom Event Bus name.
const CUSTOM_BUS_NAME_MAX_CHARS: usize = 256;

/// Longest `Source` the Custom Event Bus accepts, in characters.
const CUSTOM_BUS_SOURCE_MAX_CHARS: usize = 256;

/// Checks that `value` is a Custom Event Bus's whole ARN (the service appends an id to the name,
/// so the ARN cannot be built from the name).
fn check_name(value: &str) -> Result<(), String> {
    if is_custom_bus_arn(value) {
        return Ok(());
    }
    Err(format!(
        "must be the Custom Event Bus's whole ARN \
         (arn:aws:events:REGION:ACCOUNT:event-busv2/NAME/ID, the ID {CUSTOM_BUS_ID_CHARS} \
         lowercase letters and digits), at most {EVENT_BUS_ARN_MAX_CHARS} characters"
    ))
}

/// Whether `value` is a Custom Event Bus ARN:
/// `arn:aws…:events:REGION:ACCOUNT:event-busv2/NAME/ID`, NAME starting with a letter or digit
/// (then `._-` too, at most 256), ID 25 lowercase letters and digits.
fn is_custom_bus_arn(value: &str) -> bool {
    let word = |part: &str| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
    };
    let ["arn", partition, "events", region, account, resource] =
        value.split(':').collect::<Vec<_>>()[..]
    else {
        return false;
    };
    let Some([name, id]) = resource
        .strip_prefix("event-busv2/")
        .map(|rest| rest.split('/').collect::<Vec<_>>())
        .and_then(|parts| <[&str; 2]>::try_from(parts).ok())
    else {
        return false;
    };
    // `aws`, or `aws-` and lowercase words joined by `-` (`aws-cn`, `aws-us-gov`).
    let partition_ok = partition.strip_prefix("aws").is_some_and(|rest| {
        rest.is_empty()
            || rest
                .strip_prefix('-')
                .is_some_and(|r| r.split('-').all(word))
    });
    partition_ok
        && region.split('-').count() >= 3
        && region.split('-').all(word)
        && account.len() == 12
        && account.chars().all(|c| c.is_ascii_digit())
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name.chars().count() <= CUSTOM_BUS_NAME_MAX_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        && id.len() == CUSTOM_BUS_ID_CHARS
        && word(id)
        && value.chars().count() <= EVENT_BUS_ARN_MAX_CHARS
}

/// The Custom Event Bus refuses a call whose `Source` is over its model's 256 characters as a
/// whole (`InvalidInputException`), which the publisher would take for an entry's fault.
fn check_source(source: &str) -> Result<(), String> {
    let chars = source.chars().count();
    if chars > CUSTOM_BUS_SOURCE_MAX_CHARS {
        return Err(format!(
            "must have at most {CUSTOM_BUS_SOURCE_MAX_CHARS} characters on the Custom Event Bus, \
             got {chars}"
        ));
    }
    Ok(())
}

/// The Custom Event Bus's `PutEvents` call.
#[derive(Debug, Clone)]
pub struct CustomBus {
    client: aws_sdk_eventbridgev2::Client,
}

impl CustomBus {
    /// The call on a client of `config` ([`publish_client!`]: tests inject faults through it).
    pub fn new(config: aws_sdk_eventbridgev2::config::Builder) -> Self {
        Self {
            client: publish_client!(aws_sdk_eventbridgev2, config),
        }
    }

    /// The `PutEvents` entry of `event`, with the configured source, its group and its id.
    fn entry(config: &PublisherConfig, event: &OutboundEvent) -> PutEventsRequestEntry {
        PutEventsRequestEntry::builder()
            .source(&config.source)
            .detail_type(&event.detail_type)
            .detail(&event.detail)
            .set_time(event.time)
            .system_metadata(
                PutEventsSystemMetadata::builder()
                    .event_group_id(&event.event_group)
                    .deduplication_id(deduplication_id(&event.event_id))
                    .build(),
            )
            .build()
            .expect("source and detail type are set")
    }

    /// The `PutRawEvents` entry of `event`: its CloudEvent as the data, with its group and id.
    fn raw_entry(event: &OutboundEvent) -> PutRawEventsRequestEntry {
        PutRawEventsRequestEntry::builder()
            .data(aws_smithy_types::Blob::new(event.detail.as_bytes()))
            .system_metadata(
                PutRawEventsSystemMetadata::builder()
                    .content_type(CLOUDEVENTS_CONTENT_TYPE)
                    .event_group_id(&event.event_group)
                    .deduplication_id(deduplication_id(&event.event_id))
                    .build()
                    .expect("the content type is set"),
            )
            .build()
            .expect("the data is set")
    }
}

impl TargetCall for CustomBus {
    fn kind(&self) -> TargetKind {
        TargetKind::Custom
    }

    fn put<'a>(
        &'a self,
        config: &'a PublisherConfig,
        events: &[&OutboundEvent],
        pending: &[usize],
        call_tasks: CallTasks,
    ) -> BoxFuture<'a, CallAnswer> {
        if config.event_format == EventFormat::CloudEvents {
            let entries = pending
                .iter()
                .map(|&i| Self::raw_entry(events[i]))
                .collect();
            let call = self
                .client
                .put_raw_events()
                .event_bus_arn(&config.target)
                .set_entries(Some(entries))
                .send();
            return async move {
                answer_of(
                    "PutRawEvents",
                    &CODES,
                    call_tasks.run(call).await,
                    |output| output.entries().iter().map(raw_entry_result).collect(),
                )
            }
            .boxed();
        }
        let entries = pending
            .iter()
            .map(|&i| Self::entry(config, events[i]))
            .collect();
        let call = self
            .client
            .put_events()
            .event_bus_arn(&config.target)
            .set_entries(Some(entries))
            .send();
        async move {
            answer_of("PutEvents", &CODES, call_tasks.run(call).await, |output| {
                output.entries().iter().map(entry_result).collect()
            })
        }
        .boxed()
    }
}

/// One raw event's result, read as [`entry_result`] reads a `PutEvents` one.
fn raw_entry_result(result: &PutRawEventsResultEntry) -> EntryResult {
    EntryResult::answered(
        result.error_code(),
        result.error_message(),
        result.success_code() == Some(&SuccessCode::Deduplicated),
    )
}

/// One result: an `ErrorCode` is a refusal; otherwise `DEDUPLICATED` an earlier acceptance, and
/// anything else (`PUBLISHED`) an acceptance.
fn entry_result(result: &PutEventsResultEntry) -> EntryResult {
    EntryResult::answered(
        result.error_code(),
        result.error_message(),
        result.success_code() == Some(&SuccessCode::Deduplicated),
    )
}

/// Describes the Custom Event Bus `resource` names by its ARN (EventsV2's `DescribeEventBus`).
///
/// # Errors
/// [`Unusable`] when it does not exist, may not be described, or cannot be reached.
async fn describe(
    sdk: &aws_config::SdkConfig,
    resource: &Resource,
) -> Result<Probed<TargetDescription>, Unusable> {
    let (client, seen) = crate::probe::probe_client!(aws_sdk_eventbridgev2, sdk);
    let result = client
        .describe_event_bus()
        .event_bus_arn(&resource.name)
        .send()
        .await
        .map(|out| TargetDescription {
            kind: TargetKind::Custom,
            arn: out.event_bus_arn().unwrap_or_default().to_owned(),
            state: out.state().map(|s| s.as_str().to_owned()),
            max_entry_bytes: None,
        })
        .map_err(|e| SdkFailure::of_service("DescribeEventBus", e, &CODES));
    crate::probe::probed(result, resource, sdk, SERVICE, &seen, DESCRIBE_CALLS)
}

#[cfg(test)]
mod tests;
