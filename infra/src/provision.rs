//! Creates the template's table, bus and queue on an endpoint (the local emulator), by name; and
//! the Custom Event Bus with its example FIFO subscriber (`EventBusKind` custom) on the local
//! double.

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

/// The template's example FIFO subscriber as provisioned on a Custom Event Bus, with its queues.
#[derive(Debug, Clone)]
pub struct ProvisionedSubscriber {
    pub subscriber_arn: String,
    /// The FIFO queue it delivers to (each aggregate one message group).
    pub queue_url: String,
    /// The FIFO queue of its failure records.
    pub delivery_failure_queue_url: String,
}

/// The role local subscribers name: the double stores it only (it signs nothing), as moto does a
/// rule target's; its account is the emulators' (moto's default).
const LOCAL_DELIVERY_ROLE_ARN: &str = "arn:aws:iam::123456789012:role/outbox-local-delivery";

/// SQS requires a FIFO queue's name to end so.
const FIFO_QUEUE_SUFFIX: &str = ".fifo";

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

/// The template for `EventBusKind` custom, whose Custom Event Bus resources exist.
fn custom_bus_template() -> Result<Template, ProvisionError> {
    Ok(Template::embedded()?.with_parameters(&[(
        template::parameter::EVENT_BUS_KIND,
        template::parameter::CUSTOM,
    )])?)
}

/// Creates the template's `CustomEventBus` under `bus_name`, keeping events for the template's
/// default `CustomBusRetentionDays`; its ARN (the only way to address it, and the relays'
/// `EVENT_BUS_NAME`).
///
/// # Errors
/// [`ProvisionError`] naming the template property or the call that failed.
pub async fn create_custom_event_bus(
    client: &aws_sdk_eventbridgev2::Client,
    bus_name: &str,
) -> Result<String, ProvisionError> {
    let template = custom_bus_template()?;
    let id = logical_id::CUSTOM_EVENT_BUS;
    let retention_days = template
        .scalar_at(id, &["StorageConfiguration", "RetentionPeriodInDays"])?
        .and_then(|days| days.parse::<i32>().ok())
        .ok_or_else(|| ProvisionError {
            resource: format!("template resource {id}"),
            message: "has no StorageConfiguration.RetentionPeriodInDays in days".into(),
        })?;
    let created = client
        .create_event_bus()
        .name(bus_name)
        .set_description(template.scalar_property(id, "Description")?)
        .storage_configuration(
            aws_sdk_eventbridgev2::types::StorageConfiguration::builder()
                .retention_period_in_days(retention_days)
                .build(),
        )
        .send()
        .await
        .map_err(|e| provision_error(format!("Custom Event Bus {bus_name}"), e))?;
    created
        .event_bus_arn()
        .map(str::to_owned)
        .ok_or_else(|| ProvisionError {
            resource: format!("Custom Event Bus {bus_name}"),
            message: "CreateEventBus answered no EventBusArn".into(),
        })
}

/// Creates the template's `OrderEventsSubscriber` on the Custom Event Bus `bus_arn`, named
/// `name`, with its FIFO queue (`{name}.fifo`) and failure queue (`{name}-failures.fifo`) as the
/// template declares them: its type, `SqsParameters` (the event group as the message group) and
/// retry policy. The delivery role is a local stand-in (the double checks no IAM).
///
/// # Errors
/// [`ProvisionError`] naming the template property or the call that failed.
pub async fn create_fifo_subscriber(
    eventbridgev2: &aws_sdk_eventbridgev2::Client,
    sqs: &aws_sdk_sqs::Client,
    bus_arn: &str,
    name: &str,
) -> Result<ProvisionedSubscriber, ProvisionError> {
    use aws_sdk_eventbridgev2::types::{
        InvokeConfiguration, OnFailureConfiguration, OrderingType, RetryPolicy, SqsParameters,
    };
    let template = custom_bus_template()?;
    let queue = create_queue(
        sqs,
        &format!("{name}{FIFO_QUEUE_SUFFIX}"),
        queue_attributes(&template, logical_id::ORDER_EVENTS_QUEUE)?,
    )
    .await?;
    let failures = create_queue(
        sqs,
        &format!("{name}-failures{FIFO_QUEUE_SUFFIX}"),
        queue_attributes(&template, logical_id::ORDER_EVENTS_DELIVERY_FAILURE_QUEUE)?,
    )
    .await?;
    let id = logical_id::ORDER_EVENTS_SUBSCRIBER;
    let at = |path: &[&str]| template.scalar_at(id, path);
    let number = |path: &[&str]| -> Result<Option<i32>, ProvisionError> {
        Ok(at(path)?.and_then(|n| n.parse().ok()))
    };
    let ordering = at(&["Type"])?.unwrap_or_default();
    let ordering = parse_enum::<OrderingType>("Type", &ordering, OrderingType::values())?;
    let invoke = InvokeConfiguration::builder()
        .target_arn(queue_arn(sqs, &queue.queue_url).await?)
        .role_arn(LOCAL_DELIVERY_ROLE_ARN)
        .sqs_parameters(
            SqsParameters::builder()
                .set_message_group_id(at(&[
                    "InvokeConfiguration",
                    "SqsParameters",
                    "MessageGroupId",
                ])?)
                .set_message_deduplication_id(at(&[
                    "InvokeConfiguration",
                    "SqsParameters",
                    "MessageDeduplicationId",
                ])?)
                .build(),
        )
        .build()
        .map_err(|e| provision_error(format!("subscriber {name}"), e))?;
    let created = eventbridgev2
        .create_subscriber()
        .name(name)
        .event_bus_arn(bus_arn)
        .r#type(ordering)
        .set_description(at(&["Description"])?)
        .invoke_configuration(invoke)
        .retry_policy(
            RetryPolicy::builder()
                .set_max_retry_attempts(number(&["RetryPolicy", "MaxRetryAttempts"])?)
                .set_max_event_age_in_seconds(number(&["RetryPolicy", "MaxEventAgeInSeconds"])?)
                .build(),
        )
        .on_failure_configuration(
            OnFailureConfiguration::builder()
                .arn(queue_arn(sqs, &failures.queue_url).await?)
                .build(),
        )
        .send()
        .await
        .map_err(|e| provision_error(format!("subscriber {name}"), e))?;
    Ok(ProvisionedSubscriber {
        subscriber_arn: created.subscriber_arn().unwrap_or_default().to_owned(),
        queue_url: queue.queue_url,
        delivery_failure_queue_url: failures.queue_url,
    })
}

/// A queue resource's scalar properties that are queue attributes.
fn queue_attributes(
    template: &Template,
    logical_id: &str,
) -> Result<HashMap<QueueAttributeName, String>, ProvisionError> {
    Ok(template
        .scalar_properties(logical_id)?
        .into_iter()
        .filter(|(name, _)| !NON_ATTRIBUTE_QUEUE_PROPERTIES.contains(&name.as_str()))
        .map(|(name, value)| (QueueAttributeName::from(name.as_str()), value))
        .collect())
}

/// Creates the template's `DiscardedBatchBucket` (the stream mapping's on-failure destination)
/// under `bucket_name`, with the template's default encryption, versioning and public access
/// block; its name. (Its TLS-only policy and lifecycle are AWS's to enforce: the emulator serves
/// plain HTTP and runs no lifecycle.)
///
/// # Errors
/// [`ProvisionError`] naming the template property or the call that failed.
pub async fn create_discarded_batch_bucket(
    s3: &aws_sdk_s3::Client,
    bucket_name: &str,
) -> Result<String, ProvisionError> {
    create_bucket_as(s3, logical_id::DISCARDED_BATCH_BUCKET, bucket_name).await
}

/// Creates the template's `PayloadBucket` (the claim check's: payloads too large for their event,
/// and the records of dead letters too large for their queue) under `bucket_name`, with the
/// template's encryption, versioning and public access block; its name, for `PAYLOAD_BUCKET`.
///
/// # Errors
/// [`ProvisionError`] naming the bucket and what could not be set.
pub async fn create_payload_bucket(
    s3: &aws_sdk_s3::Client,
    bucket_name: &str,
) -> Result<String, ProvisionError> {
    create_bucket_as(s3, logical_id::PAYLOAD_BUCKET, bucket_name).await
}

/// Creates the template's bucket `id` under `bucket_name`: its encryption, versioning and public
/// access block as the template sets them.
async fn create_bucket_as(
    s3: &aws_sdk_s3::Client,
    id: &str,
    bucket_name: &str,
) -> Result<String, ProvisionError> {
    use aws_sdk_s3::types::{
        BucketVersioningStatus, PublicAccessBlockConfiguration, ServerSideEncryption,
        ServerSideEncryptionByDefault, ServerSideEncryptionConfiguration, ServerSideEncryptionRule,
        VersioningConfiguration,
    };
    let template = Template::embedded()?;
    let resource = |what: &str| format!("bucket {bucket_name} ({what})");
    let missing = |path: &str| ProvisionError {
        resource: format!("template resource {id}"),
        message: format!("has no {path}"),
    };
    s3.create_bucket()
        .bucket(bucket_name)
        .send()
        .await
        .map_err(|e| provision_error(resource("create"), e))?;
    let algorithm = template
        .sequence_at(
            id,
            &["BucketEncryption", "ServerSideEncryptionConfiguration"],
        )?
        .into_iter()
        .find_map(|rule| {
            rule.get("ServerSideEncryptionByDefault")?
                .get("SSEAlgorithm")?
                .as_str()
                .map(str::to_owned)
        })
        .ok_or_else(|| missing("ServerSideEncryptionByDefault.SSEAlgorithm"))?;
    let encryption = ServerSideEncryptionByDefault::builder()
        .sse_algorithm(parse_enum::<ServerSideEncryption>(
            "SSEAlgorithm",
            &algorithm,
            ServerSideEncryption::values(),
        )?)
        .build()
        .map_err(|e| provision_error(resource("encryption"), e))?;
    s3.put_bucket_encryption()
        .bucket(bucket_name)
        .server_side_encryption_configuration(
            ServerSideEncryptionConfiguration::builder()
                .rules(
                    ServerSideEncryptionRule::builder()
                        .apply_server_side_encryption_by_default(encryption)
                        .build(),
                )
                .build()
                .map_err(|e| provision_error(resource("encryption"), e))?,
        )
        .send()
        .await
        .map_err(|e| provision_error(resource("encryption"), e))?;
    let versioning = template
        .scalar_at(id, &["VersioningConfiguration", "Status"])?
        .ok_or_else(|| missing("VersioningConfiguration.Status"))?;
    s3.put_bucket_versioning()
        .bucket(bucket_name)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(parse_enum::<BucketVersioningStatus>(
                    "VersioningConfiguration.Status",
                    &versioning,
                    BucketVersioningStatus::values(),
                )?)
                .build(),
        )
        .send()
        .await
        .map_err(|e| provision_error(resource("versioning"), e))?;
    let block = |name: &str| -> Result<bool, ProvisionError> {
        Ok(template
            .scalar_at(id, &["PublicAccessBlockConfiguration", name])?
            .is_some_and(|v| v == "true"))
    };
    s3.put_public_access_block()
        .bucket(bucket_name)
        .public_access_block_configuration(
            PublicAccessBlockConfiguration::builder()
                .block_public_acls(block("BlockPublicAcls")?)
                .block_public_policy(block("BlockPublicPolicy")?)
                .ignore_public_acls(block("IgnorePublicAcls")?)
                .restrict_public_buckets(block("RestrictPublicBuckets")?)
                .build(),
        )
        .send()
        .await
        .map_err(|e| provision_error(resource("public access block"), e))?;
    Ok(bucket_name.to_owned())
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
    let attributes = queue_attributes(&Template::embedded()?, logical_id::DEAD_LETTER_QUEUE)?;
    create_queue(client, queue_name, attributes).await
}

/// Creates a queue with `attributes`.
async fn create_queue(
    client: &aws_sdk_sqs::Client,
    queue_name: &str,
    attributes: HashMap<QueueAttributeName, String>,
) -> Result<ProvisionedQueue, ProvisionError> {
    let queue_url = client
        .create_queue()
        .queue_name(queue_name)
        .set_attributes(Some(attributes).filter(|a| !a.is_empty()))
        .send()
        .await
        .map_err(|e| provision_error(format!("queue {queue_name}"), e))?
        .queue_url()
        .unwrap_or_default()
        .to_owned();
    Ok(ProvisionedQueue { queue_url })
}

/// Creates a plain queue under `queue_name` that receives every event on `bus_name`, through a
/// rule named `rule_name` (how the local stack observes deliveries: the sink of the demo and the
/// tests).
///
/// # Errors
/// [`ProvisionError`] naming the call that failed.
pub async fn create_sink_queue(
    eventbridge: &aws_sdk_eventbridge::Client,
    sqs: &aws_sdk_sqs::Client,
    bus_name: &str,
    queue_name: &str,
    rule_name: &str,
) -> Result<ProvisionedQueue, ProvisionError> {
    let queue = create_queue(sqs, queue_name, HashMap::new()).await?;
    route_all_events(eventbridge, sqs, bus_name, &queue.queue_url, rule_name).await?;
    Ok(queue)
}

/// Adds a rule `rule_name` on `bus_name` that sends every event to the queue at `queue_url`.
///
/// # Errors
/// [`ProvisionError`] naming the call that failed.
pub async fn route_all_events(
    eventbridge: &aws_sdk_eventbridge::Client,
    sqs: &aws_sdk_sqs::Client,
    bus_name: &str,
    queue_url: &str,
    rule_name: &str,
) -> Result<(), ProvisionError> {
    let queue_arn = queue_arn(sqs, queue_url).await?;
    eventbridge
        .put_rule()
        .name(rule_name)
        .event_bus_name(bus_name)
        .event_pattern(r#"{"source": [{"prefix": ""}]}"#)
        .send()
        .await
        .map_err(|e| provision_error(format!("rule {rule_name}"), e))?;
    let target = aws_sdk_eventbridge::types::Target::builder()
        .id("sink")
        .arn(queue_arn)
        .build()
        .map_err(|e| provision_error(format!("target of rule {rule_name}"), e))?;
    eventbridge
        .put_targets()
        .rule(rule_name)
        .event_bus_name(bus_name)
        .targets(target)
        .send()
        .await
        .map_err(|e| provision_error(format!("targets of rule {rule_name}"), e))?;
    Ok(())
}

/// The ARN of the queue at `queue_url`.
async fn queue_arn(sqs: &aws_sdk_sqs::Client, queue_url: &str) -> Result<String, ProvisionError> {
    sqs.get_queue_attributes()
        .queue_url(queue_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| provision_error(format!("queue {queue_url}"), e))?
        .attributes()
        .and_then(|a| a.get(&QueueAttributeName::QueueArn))
        .cloned()
        .ok_or_else(|| ProvisionError {
            resource: format!("queue {queue_url}"),
            message: "no QueueArn attribute".into(),
        })
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

/// Messages on a queue, visible and in flight.
///
/// # Errors
/// [`ProvisionError`] when the queue's attributes cannot be read.
pub async fn queue_depth(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
) -> Result<u64, ProvisionError> {
    let counted = [
        QueueAttributeName::ApproximateNumberOfMessages,
        QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
    ];
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(queue_url)
        .set_attribute_names(Some(counted.to_vec()))
        .send()
        .await
        .map_err(|e| provision_error(format!("queue {queue_url}"), e))?
        .attributes()
        .cloned()
        .unwrap_or_default();
    Ok(counted
        .iter()
        .filter_map(|name| attributes.get(name)?.parse::<u64>().ok())
        .sum())
}
