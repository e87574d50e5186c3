//! Creates the template's table, bus and queue on an endpoint (the local emulator), by name; and
//! the Custom Event Bus with its example FIFO subscriber (`EventBusKind` custom) on the local
//! double. One file per kind of resource (`table.rs`, `bus.rs`, `queue.rs`, `bucket.rs`), and the
//! whole stack the demo and the tests run against (`stack.rs`).

use crate::template::{self, logical_id};

mod bucket;
mod bus;
mod queue;
mod stack;
mod table;

pub use bucket::{create_discarded_batch_bucket, create_payload_bucket};
pub use bus::{
    ProvisionedBus, ProvisionedSubscriber, create_custom_event_bus, create_event_bus,
    create_fifo_subscriber,
};
pub use queue::{
    ProvisionedQueue, create_dead_letter_queue, create_sink_queue, queue_depth, route_all_events,
};
pub use stack::LocalStack;
pub use table::{ProvisionedTable, create_outbox_table, create_table_from};

/// Provisioning failed.
#[derive(Debug, thiserror::Error)]
#[error("could not provision {resource}: {message}")]
pub struct ProvisionError {
    /// What was being created, e.g. `table outbox-x` or `template resource OutboxTable`.
    pub resource: String,
    /// Why, with the SDK's error context.
    pub message: String,
}

impl From<template::TemplateError> for ProvisionError {
    fn from(err: template::TemplateError) -> Self {
        Self {
            resource: "infra/template.yaml".to_owned(),
            message: err.to_string(),
        }
    }
}

fn provision_error(
    resource: impl Into<String>,
    err: impl std::error::Error + 'static,
) -> ProvisionError {
    ProvisionError {
        resource: resource.into(),
        message: outbox_shared::error::describe(&err),
    }
}

fn template_value_error(property: &str, value: &str) -> ProvisionError {
    ProvisionError {
        resource: format!("template resource {}", logical_id::OUTBOX_TABLE),
        message: format!("{property} {value:?} is not a value DynamoDB accepts"),
    }
}

/// Parses an SDK enum from the template's text, rejecting values the SDK does not know (it would
/// otherwise send them as-is and the service would reject them with a less helpful message).
fn parse_enum<T>(property: &str, value: &str, known: &[&str]) -> Result<T, ProvisionError>
where
    T: for<'a> From<&'a str>,
{
    if known.contains(&value) {
        Ok(T::from(value))
    } else {
        Err(template_value_error(property, value))
    }
}
