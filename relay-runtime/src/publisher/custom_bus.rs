//! The Custom Event Bus's adapter (EventsV2): `PutEvents` of `aws-sdk-eventbridgev2` to the
//! configured bus ARN, each entry with the configured `Source`, its aggregate as
//! `SystemMetadata.EventGroupId` and its event id as `SystemMetadata.DeduplicationId`
//! ([`outbox_shared::event_group`]), its answer read entry by entry. What is done with the calls
//! (turns, retries, halves, pace) is [`super::send`]'s, the same for every bus.
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
//! splits it ([`super::POISON_ENTRY_CODES`]); `AccessDeniedException`,
//! `ResourceNotFoundException` and `InvalidStateException` fail every entry, which stays pending.
//! The bus has no `TraceHeader`: the trace context is not propagated on this bus.

use aws_sdk_eventbridgev2::types::{
    PutEventsRequestEntry, PutEventsResultEntry, PutEventsSystemMetadata, SuccessCode,
};
use outbox_shared::OutboundEvent;
use outbox_shared::event_group::deduplication_id;

use super::send::{
    BusAdapter, BusCall, CallAnswer, EntryResult, TimeoutsToThePublisher, answer_of,
};
use crate::CallTasks;
use crate::config::{BusKind, PublisherConfig, PublisherConfigError, PublisherSetting};

/// The Custom Event Bus's `PutEvents` call.
#[derive(Debug, Clone)]
pub struct CustomBus {
    client: aws_sdk_eventbridgev2::Client,
}

/// The Custom Event Bus's adapter.
pub type CustomBusPublisher = BusAdapter<CustomBus>;

impl BusAdapter<CustomBus> {
    /// `client` keeps its settings, except that a call that times out is not retried by the SDK:
    /// the publisher retries it, after lowering its calls in flight.
    ///
    /// # Errors
    /// [`PublisherConfigError`] when the configuration is out of range, or is not for a Custom
    /// Event Bus.
    pub fn new(
        client: aws_sdk_eventbridgev2::Client,
        config: PublisherConfig,
    ) -> Result<Self, PublisherConfigError> {
        if config.bus_kind != BusKind::Custom {
            return Err(PublisherConfigError {
                setting: PublisherSetting::EventBusKind,
                detail: "must be custom for the Custom Event Bus's publisher".into(),
            });
        }
        let client = aws_sdk_eventbridgev2::Client::from_conf(
            client
                .config()
                .to_builder()
                .retry_classifier(TimeoutsToThePublisher)
                .build(),
        );
        Self::with_bus(CustomBus { client }, config)
    }
}

impl CustomBus {
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
}

impl BusCall for CustomBus {
    async fn put(
        &self,
        config: &PublisherConfig,
        events: &[OutboundEvent],
        pending: &[usize],
        call_tasks: CallTasks,
    ) -> CallAnswer {
        let entries = pending
            .iter()
            .map(|&i| Self::entry(config, &events[i]))
            .collect();
        let call = self
            .client
            .put_events()
            .event_bus_arn(&config.event_bus_name)
            .set_entries(Some(entries))
            .send();
        answer_of(call_tasks.run(call).await, |output| {
            output.entries().iter().map(entry_result).collect()
        })
    }
}

/// One result: an `ErrorCode` is a refusal; otherwise `DEDUPLICATED` an earlier acceptance, and
/// anything else (`PUBLISHED`) an acceptance.
fn entry_result(result: &PutEventsResultEntry) -> EntryResult {
    match (result.error_code(), result.success_code()) {
        (Some(code), _) => EntryResult::Refused {
            code: code.to_owned(),
            message: result.error_message().unwrap_or_default().to_owned(),
        },
        (None, Some(SuccessCode::Deduplicated)) => EntryResult::Deduplicated,
        (None, _) => EntryResult::Published,
    }
}

#[cfg(test)]
mod tests;
