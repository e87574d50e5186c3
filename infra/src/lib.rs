//! The deployable template (`infra/template.yaml`) and the local provisioning derived from it.
//!
//! Local provisioning creates, on the emulator, the same table (keys, sparse sharded index,
//! stream, TTL), bus and queues the template declares.

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType, Projection,
    ProjectionType, ScalarAttributeType, StreamSpecification, StreamViewType,
    TimeToLiveSpecification,
};
use outbox_shared::schema::{DEFAULT_INDEX_NAME, attr};

/// Provisioning failed.
#[derive(Debug, thiserror::Error)]
#[error("could not provision {resource}: {message}")]
pub struct ProvisionError {
    pub resource: String,
    pub message: String,
}

fn provision_error(resource: &str, err: impl std::error::Error) -> ProvisionError {
    ProvisionError {
        resource: resource.to_owned(),
        message: aws_sdk_dynamodb::error::DisplayErrorContext(err).to_string(),
    }
}

/// The outbox table as provisioned: name and stream ARN.
#[derive(Debug, Clone)]
pub struct ProvisionedTable {
    pub table_name: String,
    pub stream_arn: String,
}

/// Creates the outbox table: `PK`/`SK`, on-demand, sparse `GSI1` (`GSI1PK`/`GSI1SK`, all
/// attributes projected), stream with new and old images, TTL on `ttl`.
///
/// # Errors
/// [`ProvisionError`] naming the call that failed.
pub async fn create_outbox_table(
    client: &aws_sdk_dynamodb::Client,
    table_name: &str,
) -> Result<ProvisionedTable, ProvisionError> {
    let key = |name: &str, key_type: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(key_type)
            .build()
            .expect("name and key type are set")
    };
    let string_attr = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .expect("name and type are set")
    };
    let created = client
        .create_table()
        .table_name(table_name)
        .billing_mode(BillingMode::PayPerRequest)
        .set_attribute_definitions(Some(
            [attr::PK, attr::SK, attr::GSI1PK, attr::GSI1SK]
                .into_iter()
                .map(string_attr)
                .collect(),
        ))
        .key_schema(key(attr::PK, KeyType::Hash))
        .key_schema(key(attr::SK, KeyType::Range))
        .global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(DEFAULT_INDEX_NAME)
                .key_schema(key(attr::GSI1PK, KeyType::Hash))
                .key_schema(key(attr::GSI1SK, KeyType::Range))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::All)
                        .build(),
                )
                .build()
                .expect("index name and keys are set"),
        )
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::NewAndOldImages)
                .build()
                .expect("stream enabled is set"),
        )
        .send()
        .await
        .map_err(|e| provision_error(&format!("table {table_name}"), e))?;
    let stream_arn = created
        .table_description()
        .and_then(|t| t.latest_stream_arn())
        .ok_or_else(|| ProvisionError {
            resource: format!("table {table_name}"),
            message: "created without a stream".into(),
        })?
        .to_owned();
    client
        .update_time_to_live()
        .table_name(table_name)
        .time_to_live_specification(
            TimeToLiveSpecification::builder()
                .enabled(true)
                .attribute_name(attr::TTL)
                .build()
                .expect("enabled and attribute are set"),
        )
        .send()
        .await
        .map_err(|e| provision_error(&format!("TTL of {table_name}"), e))?;
    Ok(ProvisionedTable {
        table_name: table_name.to_owned(),
        stream_arn,
    })
}
