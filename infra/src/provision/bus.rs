//! The event buses: the classic bus with its archive, and the Custom Event Bus with the template's example FIFO subscriber.

use super::queue::{FIFO_QUEUE_SUFFIX, create_queue, queue_arn, queue_attributes};
use super::{ProvisionError, parse_enum, provision_error};
use crate::template::{self, Template, logical_id};

/// Archive retention when the template's `RetentionDays` cannot be resolved.
const DEFAULT_ARCHIVE_RETENTION_DAYS: i32 = 30;

/// The bus as provisioned, with its archive.
#[derive(Debug, Clone)]
pub struct ProvisionedBus {
    pub bus_name: String,
    pub bus_arn: String,
    pub archive_name: String,
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
