//! Creates the template's table, bus and queue on an endpoint (the local emulator), by name.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType,
    TimeToLiveSpecification,
};
use aws_sdk_sqs::types::QueueAttributeName;

use crate::template::{self, KeyElement, TableSpec, Template, logical_id};

/// Archive retention when the template's `RetentionDays` cannot be resolved.
const DEFAULT_ARCHIVE_RETENTION_DAYS: i32 = 30;

/// Queue properties that are not queue attributes.
const NON_ATTRIBUTE_QUEUE_PROPERTIES: [&str; 2] = ["QueueName", "Tags"];

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

fn provision_error(resource: impl Into<String>, err: impl std::error::Error) -> ProvisionError {
    ProvisionError {
        resource: resource.into(),
        message: aws_sdk_dynamodb::error::DisplayErrorContext(err).to_string(),
    }
}

fn template_value_error(property: &str, value: &str) -> ProvisionError {
    ProvisionError {
        resource: format!("template resource {}", logical_id::OUTBOX_TABLE),
        message: format!("{property} {value:?} is not a value DynamoDB accepts"),
    }
}

/// The outbox table as provisioned: name and stream ARN.
#[derive(Debug, Clone)]
pub struct ProvisionedTable {
    pub table_name: String,
    pub stream_arn: String,
}

/// The bus as provisioned, with its archive.
#[derive(Debug, Clone)]
pub struct ProvisionedBus {
    pub bus_name: String,
    pub bus_arn: String,
    pub archive_name: String,
}

/// A queue as provisioned.
#[derive(Debug, Clone)]
pub struct ProvisionedQueue {
    pub queue_url: String,
}

/// Creates the outbox table as the template's `OutboxTable` declares it (keys, billing mode,
/// global secondary indexes, stream view type, TTL), under `table_name`.
///
/// # Errors
/// [`ProvisionError`] naming the template property or the call that failed.
pub async fn create_outbox_table(
    client: &aws_sdk_dynamodb::Client,
    table_name: &str,
) -> Result<ProvisionedTable, ProvisionError> {
    let spec = Template::embedded()?.outbox_table()?;
    let request = client
        .create_table()
        .table_name(table_name)
        .billing_mode(parse_enum::<BillingMode>(
            "BillingMode",
            &spec.billing_mode,
            BillingMode::values(),
        )?)
        .set_attribute_definitions(Some(attribute_definitions(&spec)?))
        .set_key_schema(Some(key_schema(&spec.key_schema)?))
        .set_global_secondary_indexes(Some(indexes(&spec)?).filter(|i| !i.is_empty()));
    let request = match &spec.stream_specification {
        Some(stream) => request.stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(parse_enum::<StreamViewType>(
                    "StreamViewType",
                    &stream.stream_view_type,
                    StreamViewType::values(),
                )?)
                .build()
                .map_err(|e| provision_error(format!("table {table_name}"), e))?,
        ),
        None => request,
    };
    let created = request
        .send()
        .await
        .map_err(|e| provision_error(format!("table {table_name}"), e))?;
    let stream_arn = created
        .table_description()
        .and_then(|t| t.latest_stream_arn())
        .unwrap_or_default()
        .to_owned();
    if let Some(ttl) = spec.time_to_live_specification.filter(|t| t.enabled) {
        client
            .update_time_to_live()
            .table_name(table_name)
            .time_to_live_specification(
                TimeToLiveSpecification::builder()
                    .enabled(true)
                    .attribute_name(&ttl.attribute_name)
                    .build()
                    .map_err(|e| provision_error(format!("TTL of {table_name}"), e))?,
            )
            .send()
            .await
            .map_err(|e| provision_error(format!("TTL of {table_name}"), e))?;
    }
    Ok(ProvisionedTable {
        table_name: table_name.to_owned(),
        stream_arn,
    })
}

/// Creates the template's `EventBus` under `bus_name`, and its `EventArchive` (named
/// `{bus_name}-archive`) with the template's default retention.
///
/// # Errors
/// [`ProvisionError`] naming the call that failed.
pub async fn create_event_bus(
    client: &aws_sdk_eventbridge::Client,
    bus_name: &str,
) -> Result<ProvisionedBus, ProvisionError> {
    let template = Template::embedded()?;
    let bus_arn = client
        .create_event_bus()
        .name(bus_name)
        .send()
        .await
        .map_err(|e| provision_error(format!("bus {bus_name}"), e))?
        .event_bus_arn()
        .unwrap_or_default()
        .to_owned();
    let retention_days = template
        .scalar_property(logical_id::EVENT_ARCHIVE, "RetentionDays")?
        .and_then(|d| d.parse().ok())
        .unwrap_or(DEFAULT_ARCHIVE_RETENTION_DAYS);
    let archive_name = format!("{bus_name}-archive");
    client
        .create_archive()
        .archive_name(&archive_name)
        .event_source_arn(&bus_arn)
        .retention_days(retention_days)
        .send()
        .await
        .map_err(|e| provision_error(format!("archive {archive_name}"), e))?;
    Ok(ProvisionedBus {
        bus_name: bus_name.to_owned(),
        bus_arn,
        archive_name,
    })
}

/// Creates the template's `DeadLetterQueue` under `queue_name`, with the template's queue
/// attributes (retention, visibility timeout, encryption).
///
/// # Errors
/// [`ProvisionError`] naming the call that failed.
pub async fn create_dead_letter_queue(
    client: &aws_sdk_sqs::Client,
    queue_name: &str,
) -> Result<ProvisionedQueue, ProvisionError> {
    let attributes: HashMap<QueueAttributeName, String> = Template::embedded()?
        .scalar_properties(logical_id::DEAD_LETTER_QUEUE)?
        .into_iter()
        .filter(|(name, _)| !NON_ATTRIBUTE_QUEUE_PROPERTIES.contains(&name.as_str()))
        .map(|(name, value)| (QueueAttributeName::from(name.as_str()), value))
        .collect();
    let queue_url = client
        .create_queue()
        .queue_name(queue_name)
        .set_attributes(Some(attributes))
        .send()
        .await
        .map_err(|e| provision_error(format!("queue {queue_name}"), e))?
        .queue_url()
        .unwrap_or_default()
        .to_owned();
    Ok(ProvisionedQueue { queue_url })
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

fn attribute_definitions(spec: &TableSpec) -> Result<Vec<AttributeDefinition>, ProvisionError> {
    spec.attribute_definitions
        .iter()
        .map(|a| {
            AttributeDefinition::builder()
                .attribute_name(&a.attribute_name)
                .attribute_type(parse_enum::<ScalarAttributeType>(
                    "AttributeType",
                    &a.attribute_type,
                    ScalarAttributeType::values(),
                )?)
                .build()
                .map_err(|e| provision_error("attribute definition", e))
        })
        .collect()
}

fn key_schema(keys: &[KeyElement]) -> Result<Vec<KeySchemaElement>, ProvisionError> {
    keys.iter()
        .map(|k| {
            KeySchemaElement::builder()
                .attribute_name(&k.attribute_name)
                .key_type(parse_enum::<KeyType>(
                    "KeyType",
                    &k.key_type,
                    KeyType::values(),
                )?)
                .build()
                .map_err(|e| provision_error("key schema", e))
        })
        .collect()
}

fn indexes(spec: &TableSpec) -> Result<Vec<GlobalSecondaryIndex>, ProvisionError> {
    spec.global_secondary_indexes
        .iter()
        .map(|index| {
            let projection = Projection::builder()
                .projection_type(parse_enum::<ProjectionType>(
                    "ProjectionType",
                    &index.projection.projection_type,
                    ProjectionType::values(),
                )?)
                .set_non_key_attributes(
                    Some(index.projection.non_key_attributes.clone()).filter(|a| !a.is_empty()),
                )
                .build();
            GlobalSecondaryIndex::builder()
                .index_name(&index.index_name)
                .set_key_schema(Some(key_schema(&index.key_schema)?))
                .projection(projection)
                .build()
                .map_err(|e| provision_error(format!("index {}", index.index_name), e))
        })
        .collect()
}
