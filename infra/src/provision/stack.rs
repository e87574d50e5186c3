//! A whole local stack for the demo and the tests.

use super::bus::create_event_bus;
use super::queue::{create_dead_letter_queue, create_sink_queue};
use super::table::create_outbox_table;
use super::{ProvisionError, provision_error};

/// The template's table, bus and dead-letter queue on an endpoint (the local emulator), plus a
/// sink queue that receives every event on the bus: what the demo and the tests run against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalStack {
    pub table_name: String,
    pub stream_arn: String,
    pub bus_name: String,
    /// Receives every event on the bus, through a rule.
    pub sink_queue_url: String,
    /// Where the relays send poison events.
    pub dead_letter_queue_url: String,
}

impl LocalStack {
    /// Creates a fresh stack whose resource names end in `suffix` (`outbox-{suffix}`,
    /// `bus-{suffix}`, `sink-{suffix}`, `dlq-{suffix}`).
    ///
    /// # Errors
    /// [`ProvisionError`] naming the resource that could not be created.
    pub async fn provision(
        dynamodb: &aws_sdk_dynamodb::Client,
        eventbridge: &aws_sdk_eventbridge::Client,
        sqs: &aws_sdk_sqs::Client,
        suffix: &str,
    ) -> Result<Self, ProvisionError> {
        let table = create_outbox_table(dynamodb, &format!("outbox-{suffix}")).await?;
        let bus = create_event_bus(eventbridge, &format!("bus-{suffix}")).await?;
        let sink = create_sink_queue(
            eventbridge,
            sqs,
            &bus.bus_name,
            &format!("sink-{suffix}"),
            &format!("all-events-{suffix}"),
        )
        .await?;
        let dead_letters = create_dead_letter_queue(sqs, &format!("dlq-{suffix}")).await?;
        Ok(Self {
            table_name: table.table_name,
            stream_arn: table.stream_arn,
            bus_name: bus.bus_name,
            sink_queue_url: sink.queue_url,
            dead_letter_queue_url: dead_letters.queue_url,
        })
    }

    /// A stack over resources that already exist; the table's stream ARN is looked up.
    ///
    /// # Errors
    /// [`ProvisionError`] when the table cannot be described or has no stream.
    pub async fn existing(
        dynamodb: &aws_sdk_dynamodb::Client,
        table_name: &str,
        bus_name: &str,
        sink_queue_url: &str,
        dead_letter_queue_url: &str,
    ) -> Result<Self, ProvisionError> {
        let resource = || format!("table {table_name}");
        let stream_arn = dynamodb
            .describe_table()
            .table_name(table_name)
            .send()
            .await
            .map_err(|e| provision_error(resource(), e))?
            .table()
            .and_then(|t| t.latest_stream_arn())
            .map(str::to_owned)
            .ok_or_else(|| ProvisionError {
                resource: resource(),
                message: "has no stream".into(),
            })?;
        Ok(Self {
            table_name: table_name.to_owned(),
            stream_arn,
            bus_name: bus_name.to_owned(),
            sink_queue_url: sink_queue_url.to_owned(),
            dead_letter_queue_url: dead_letter_queue_url.to_owned(),
        })
    }

    /// Environment variables that point a relay binary at this stack, publishing as `source`.
    pub fn relay_env(&self, source: &str) -> Vec<(&'static str, String)> {
        vec![
            ("TABLE_NAME", self.table_name.clone()),
            ("EVENT_TARGET", self.bus_name.clone()),
            ("EVENT_SOURCE", source.to_owned()),
            ("DEAD_LETTER_QUEUE_URL", self.dead_letter_queue_url.clone()),
            // Locally moto serves one request at a time and the emulators share the machine's
            // cores with the tests: under load a call waits far longer than on AWS, so the relays
            // get longer SDK timeouts here.
            ("SDK_ATTEMPT_TIMEOUT", "30s".to_owned()),
            ("SDK_OPERATION_TIMEOUT", "90s".to_owned()),
        ]
    }
}
