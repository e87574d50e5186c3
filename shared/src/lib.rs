//! The contract every part of the outbox relay agrees on: what an outbox item is, how it is keyed
//! and sharded, what its event looks like on EventBridge, and the limits it lives within.
//!
//! It links only `aws-sdk-dynamodb` (for the item's attribute values) and `aws-sdk-s3` (for the
//! claim check), so an order service that links the writer compiles nothing of the relays. The
//! relays' runtime (publisher, status store, dead-letter sink, telemetry) is the `relay-runtime`
//! crate.
//!
//! - [`arn`]: the ARNs the code builds (S3 buckets and their objects), in the region's partition.
//! - [`bucket_owner`]: `ExpectedBucketOwner` on every S3 call, so a bucket of another account is
//!   refused.
//! - [`schema`]: attribute names, entity types and key formats of the single-table design.
//! - [`shard`]: the stable shard function that spreads pending events over the `GSI1` shards.
//! - [`item`]: [`OutboxItem`], the one serde struct for an outbox event item, both directions.
//! - [`image`]: decoding a borrowed item image (a stream record's `NewImage`, an item of a `Query`
//!   page) without cloning it.
//! - [`entry_field`]: the `PutEvents` entry fields EventBridge limits (`DetailType`, `TraceHeader`).
//! - [`envelope`]: the event's body, the envelope (`{"metadata": …, "data": <Payload>}`) or a
//!   CloudEvent, its wire shapes one type each for the relays (writing) and consumers (reading).
//! - [`event_group`]: the Custom Event Bus's `EventGroupId` (the aggregate) and `DeduplicationId`
//!   (the event id) of an event, cut to the bus's 128 characters by a documented rule.
//! - [`claim_check`]: a payload too large for its event or item, stored in S3 under a key derived
//!   from the event id and referenced (`dataref`, size, SHA-256) in its place.
//! - [`config`]: where outbox items live (table, index, shard count, retention), shared by the writer
//!   and the relays.
//! - [`limits`]: the AWS limits the design works within, named.
//! - [`region`]: global tables: the region that wrote an event (`OriginRegion`) and the regions a
//!   table spans.
//! - [`error`]: the one place where SDK errors are classified as retryable or not.
//! - [`retry`]: bounded exponential backoff with full jitter, for contention.
//! - [`time`]: the fixed-width timestamp format of `CreatedAt` and `GSI1SK`.
//! - [`trace_context`]: the W3C trace context (`traceparent`, `tracestate`) an item carries,
//!   validated as the specification says.

pub mod arn;
pub mod bucket_owner;
pub mod claim_check;
pub mod config;
pub mod entry_field;
pub mod envelope;
pub mod error;
pub mod event_group;
pub mod image;
pub mod item;
pub mod limits;
pub mod region;
pub mod retry;
pub mod schema;
pub mod shard;
pub mod time;
pub mod trace_context;

pub use claim_check::{PayloadRef, PayloadStore, ResolveError};
pub use config::{ConfigError, OutboxConfig};
pub use entry_field::EntryFieldError;
pub use envelope::{CloudEvent, DataRef, Envelope, EnvelopeError, EventMetadata, OutboundEvent};
pub use error::{ErrorClass, Misconfiguration, SdkFailure, classify_sdk_error};
pub use item::{ItemError, ItemKey, NewOutboxEvent, OutboxItem, OutboxStatus};
pub use region::{GlobalTable, GlobalTableError, InvalidRegion, Region};
pub use retry::RetryPolicy;
pub use shard::{ShardCount, shard_for};
pub use trace_context::{TraceContext, TraceContextError};
