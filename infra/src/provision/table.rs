//! The outbox table (and any table of the template) created as the template declares it: keys,
//! billing mode, global secondary indexes, stream, TTL.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType,
    TimeToLiveSpecification,
};

use super::{ProvisionError, parse_enum, provision_error};
use crate::template::{KeyElement, TableSpec, Template};

/// The outbox table as provisioned: name and stream ARN.
#[derive(Debug, Clone)]
pub struct ProvisionedTable {
    pub table_name: String,
    pub stream_arn: String,
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
    create_table_from(client, table_name, &Template::embedded()?.outbox_table()?).await
}

/// Creates a table as `spec` declares it (keys, billing mode, global secondary indexes, stream
/// view type, TTL), under `table_name`: the template's own ([`create_outbox_table`]), or one that
/// differs from it in one thing, for a test of what `relay-poller check` says about it.
///
/// # Errors
/// [`ProvisionError`] naming the property or the call that failed.
pub async fn create_table_from(
    client: &aws_sdk_dynamodb::Client,
    table_name: &str,
    spec: &TableSpec,
) -> Result<ProvisionedTable, ProvisionError> {
    let spec = spec.clone();
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
