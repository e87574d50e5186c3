//! The classic bus's adapter: `PutEvents` of `aws-sdk-eventbridge`, each entry on the configured
//! bus (a name or ARN) with the configured `Source`, its answer read entry by entry
//! ([`entry_results`]). What is done with the calls (turns, retries, halves, pace) is
//! [`super::send`]'s, the same for every bus.

use aws_sdk_eventbridge::types::{PutEventsRequestEntry, PutEventsResultEntry};
use outbox_shared::OutboundEvent;

#[cfg(test)]
use super::send::{Attempt, read_results};
use super::send::{
    BusAdapter, BusCall, CallAnswer, EntryResult, TimeoutsToThePublisher, answer_of,
};
use crate::CallTasks;
use crate::config::{PublisherConfig, PublisherConfigError};

/// The classic bus's `PutEvents` call.
#[derive(Debug, Clone)]
pub struct ClassicBus {
    client: aws_sdk_eventbridge::Client,
}

/// The classic bus's adapter.
pub type EventBridgePublisher = BusAdapter<ClassicBus>;

impl BusAdapter<ClassicBus> {
    /// `client` keeps its settings, except that a call that times out is not retried by the SDK:
    /// the publisher retries it, after lowering its calls in flight.
    ///
    /// # Errors
    /// [`PublisherConfigError`] when the configuration is out of range (or names a Custom Event
    /// Bus).
    pub fn new(
        client: aws_sdk_eventbridge::Client,
        config: PublisherConfig,
    ) -> Result<Self, PublisherConfigError> {
        let client = aws_sdk_eventbridge::Client::from_conf(
            client
                .config()
                .to_builder()
                .retry_classifier(TimeoutsToThePublisher)
                .build(),
        );
        Self::with_bus(ClassicBus { client }, config)
    }
}

impl ClassicBus {
    /// The `PutEvents` entry of `event`, on the configured bus with the configured source.
    fn entry(config: &PublisherConfig, event: &OutboundEvent) -> PutEventsRequestEntry {
        PutEventsRequestEntry::builder()
            .event_bus_name(&config.event_bus_name)
            .source(&config.source)
            .detail_type(&event.detail_type)
            .detail(&event.detail)
            .set_time(event.time)
            .set_trace_header(event.trace_header.clone())
            .build()
    }
}

impl BusCall for ClassicBus {
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
        let call = self.client.put_events().set_entries(Some(entries)).send();
        answer_of(call_tasks.run(call).await, |output| {
            output.entries().iter().map(entry_result).collect()
        })
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
