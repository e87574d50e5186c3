//! The status store: marks an outbox item published (or dead-lettered) with a conditional update.
//!
//! `SET Status = :status, PublishedAt = :now REMOVE GSI1PK, GSI1SK` with the condition
//! `attribute_exists(GSI1PK)`. The condition makes the flip happen once: a failed condition means
//! another relay already did it, which is an outcome, not an error.

use std::future::Future;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;

use crate::error::{ErrorClass, classify_sdk_error};
use crate::item::{ItemKey, OutboxStatus};
use crate::schema::attr;
use crate::time::format_timestamp;

/// What a conditional flip did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FlipOutcome {
    /// This call moved the item out of the pending index.
    Flipped,
    /// The item was no longer pending (another relay flipped it, or it is gone): nothing to do.
    AlreadyDone,
}

/// A flip that failed for a reason other than the item no longer being pending.
#[derive(Debug, thiserror::Error)]
#[error("could not mark {key} as {status}: {message}")]
pub struct StatusError {
    pub key: ItemKey,
    pub status: OutboxStatus,
    pub class: ErrorClass,
    pub message: String,
}

/// Port: where the relays record that an event left the outbox.
pub trait StatusStore: Send + Sync {
    /// Marks the item `PUBLISHED` and removes it from the pending index, once.
    fn mark_published(
        &self,
        key: &ItemKey,
    ) -> impl Future<Output = Result<FlipOutcome, StatusError>> + Send;

    /// Marks the item `DEAD_LETTERED` with `reason` and removes it from the pending index, once.
    fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        reason: &str,
    ) -> impl Future<Output = Result<FlipOutcome, StatusError>> + Send;
}

/// Longest dead-letter reason stored on the item; the full reason goes to the dead-letter queue.
const MAX_STORED_REASON_BYTES: usize = 1024;

/// The DynamoDB adapter.
#[derive(Debug, Clone)]
pub struct DynamoStatusStore {
    client: Client,
    table_name: String,
}

impl DynamoStatusStore {
    pub fn new(client: Client, table_name: impl Into<String>) -> Self {
        Self {
            client,
            table_name: table_name.into(),
        }
    }

    async fn flip(
        &self,
        key: &ItemKey,
        status: OutboxStatus,
        reason: Option<&str>,
    ) -> Result<FlipOutcome, StatusError> {
        let now = format_timestamp(Utc::now());
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table_name)
            .key(attr::PK, AttributeValue::S(key.pk.clone()))
            .key(attr::SK, AttributeValue::S(key.sk.clone()))
            .condition_expression("attribute_exists(#gsi1pk)")
            .expression_attribute_names("#gsi1pk", attr::GSI1PK)
            .expression_attribute_names("#gsi1sk", attr::GSI1SK)
            .expression_attribute_names("#status", attr::STATUS)
            .expression_attribute_names(
                "#at",
                match status {
                    OutboxStatus::DeadLettered => attr::DEAD_LETTERED_AT,
                    _ => attr::PUBLISHED_AT,
                },
            )
            .expression_attribute_values(":status", AttributeValue::S(status.as_str().to_owned()))
            .expression_attribute_values(":now", AttributeValue::S(now));
        update = match reason {
            Some(reason) => update
                .update_expression(
                    "SET #status = :status, #at = :now, #reason = :reason REMOVE #gsi1pk, #gsi1sk",
                )
                .expression_attribute_names("#reason", attr::DEAD_LETTER_REASON)
                .expression_attribute_values(
                    ":reason",
                    AttributeValue::S(truncate(reason, MAX_STORED_REASON_BYTES).to_owned()),
                ),
            None => update
                .update_expression("SET #status = :status, #at = :now REMOVE #gsi1pk, #gsi1sk"),
        };
        match update.send().await {
            Ok(_) => Ok(FlipOutcome::Flipped),
            Err(SdkError::ServiceError(ctx))
                if matches!(
                    ctx.err(),
                    UpdateItemError::ConditionalCheckFailedException(_)
                ) =>
            {
                Ok(FlipOutcome::AlreadyDone)
            }
            Err(err) => Err(StatusError {
                key: key.clone(),
                status,
                class: classify_sdk_error(&err),
                message: aws_sdk_dynamodb::error::DisplayErrorContext(&err).to_string(),
            }),
        }
    }
}

impl StatusStore for DynamoStatusStore {
    async fn mark_published(&self, key: &ItemKey) -> Result<FlipOutcome, StatusError> {
        self.flip(key, OutboxStatus::Published, None).await
    }

    async fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        reason: &str,
    ) -> Result<FlipOutcome, StatusError> {
        self.flip(key, OutboxStatus::DeadLettered, Some(reason))
            .await
    }
}

/// The longest prefix of `text` of at most `max` bytes that ends on a character boundary.
pub fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("héllo", 3), "hé");
        assert_eq!(truncate("abc", 10), "abc");
    }
}
