//! The contract every part of the outbox relay agrees on.
//!
//! - [`schema`]: attribute names, entity types and key formats of the single-table design.
//! - [`shard`]: the stable shard function that spreads pending events over the `GSI1` shards.
//! - [`item`]: [`OutboxItem`], the one serde struct for an outbox event item, both directions.
//! - [`image`]: decoding a borrowed item image (a stream record's `NewImage`) without cloning it.
//! - [`envelope`]: the EventBridge envelope (`Detail = {"metadata": …, "data": <Payload>}`).
//! - [`config`]: typed configuration shared by the writer and the relays.
//! - [`limits`]: the AWS limits the design works within, named.
//! - [`error`]: the one place where SDK errors are classified as retryable or not.
//! - [`retry`]: bounded exponential backoff with full jitter, for contention.
//! - [`publisher`]: the publisher port and its EventBridge adapter (size-aware batching, bounded
//!   concurrency, per-entry retries).
//! - [`status`]: the status-store port and its DynamoDB adapter (the conditional "mark published" flip).
//! - [`telemetry`]: the tracing set-up every binary uses.
//! - [`dead_letter`]: the dead-letter port and its SQS adapter for poison events.

pub mod config;
pub mod dead_letter;
pub mod envelope;
pub mod error;
pub mod image;
pub mod item;
pub mod limits;
pub mod publisher;
pub mod retry;
pub mod schema;
pub mod shard;
pub mod status;
pub mod telemetry;
pub mod time;

pub use config::{ConfigError, OutboxConfig, PublisherConfig};
pub use dead_letter::{DeadLetter, DeadLetterError, DeadLetterSink, SqsDeadLetterSink};
pub use envelope::{Envelope, EnvelopeError, EventMetadata, OutboundEvent};
pub use error::{ErrorClass, classify_sdk_error};
pub use item::{ItemError, ItemKey, NewOutboxEvent, OutboxItem, OutboxStatus};
pub use publisher::{EventBridgePublisher, PublishOutcome, PublishStats, Publisher};
pub use retry::RetryPolicy;
pub use shard::{ShardCount, shard_for};
pub use status::{DynamoStatusStore, FlipOutcome, StatusError, StatusStore};

/// Loads the AWS SDK configuration from the standard sources (environment, profile, IMDS).
///
/// The local emulator is reached through the standard `AWS_ENDPOINT_URL` setting, so there is no
/// code branch for it.
pub async fn load_aws_config() -> aws_config::SdkConfig {
    aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await
}
