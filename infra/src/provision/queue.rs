//! The queues: the dead-letter queue as the template declares it, a sink queue with the rule that
//! routes every event of a bus to it, and what the demo and the tests read of a queue.

use std::collections::HashMap;

use aws_sdk_sqs::types::QueueAttributeName;

use super::{ProvisionError, provision_error};
use crate::template::{Template, logical_id};

/// Queue properties that are not queue attributes.
const NON_ATTRIBUTE_QUEUE_PROPERTIES: [&str; 2] = ["QueueName", "Tags"];

/// A queue as provisioned.
#[derive(Debug, Clone)]
pub struct ProvisionedQueue {
    pub queue_url: String,
}

/// SQS requires a FIFO queue's name to end so.
pub(super) const FIFO_QUEUE_SUFFIX: &str = ".fifo";

/// A queue resource's scalar properties that are queue attributes.
pub(super) fn queue_attributes(
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

/// Creates the template's `DeadLetterQueue` under `queue_name`, with the template's queue
/// attributes (retention, visibility timeout, encryption).
///
/// # Errors
/// [`ProvisionError`] naming the call that failed.
pub async fn create_dead_letter_queue(
    client: &aws_sdk_sqs::Client,
    queue_name: &str,
) -> Result<ProvisionedQueue, ProvisionError> {
    // As CloudFormation creates it at the parameters' defaults (`Hardened` off: SSE-SQS).
    let template = Template::embedded()?.with_parameters(&[])?;
    let attributes = queue_attributes(&template, logical_id::DEAD_LETTER_QUEUE)?;
    create_queue(client, queue_name, attributes).await
}

/// Creates a queue with `attributes`.
pub(super) async fn create_queue(
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

/// The ARN of the queue at `queue_url`.
pub(super) async fn queue_arn(
    sqs: &aws_sdk_sqs::Client,
    queue_url: &str,
) -> Result<String, ProvisionError> {
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
