//! Consumer-side helpers for events relayed from the outbox.
//!
//! Delivery through the relay is at-least-once; these helpers make a consumer's effects
//! exactly-once:
//! - [`idempotency`]: a DynamoDB idempotency store keyed on the envelope's `metadata.eventId`
//!   (or any caller key) that runs business logic once and answers duplicates with the stored
//!   response;
//! - [`occ`]: read-modify-conditional-write on a `version` attribute with bounded retries
//!   ([`RetryPolicy`]: exponential backoff with full jitter);
//! - [`tables`]: the idempotency table's schema, and table creation for local use and tests;
//! - [`received`]: the event a consumer receives, in either format the relays publish (the
//!   envelope or a CloudEvent), alone or in an EventBridge event, as one [`Envelope`];
//! - [`claim_check`]: [`PayloadResolver`], the same for an event of any size: one whose payload
//!   was too large to travel in it is read from S3 (`dataref`), its size and SHA-256 checked,
//!   into the same [`Envelope`] (the consumer needs `s3:GetObject` on the payload bucket's
//!   `payloads/*` and `s3:ListBucket` on it: the template's `PayloadConsumerPolicy`);
//! - [`batch`] (feature `batch`, on by default): [`BatchProcessor`], a Lambda consumer's batch
//!   from SQS (standard or FIFO, also behind SNS or an EventBridge rule), Kinesis or EventBridge
//!   handled under its source's partial-failure rule, with the idempotency store, the payload
//!   resolver and the trace context;
//! - [`sequencing`]: order restored per aggregate by `metadata.sequence` ([`SequenceStore`]),
//!   for the targets that do not keep it;
//! - [`trace`]: the processing span, continuing the event's trace (its W3C trace context, or the
//!   delivery's X-Ray header).
//!
//! A complete EventBridge-triggered consumer built with both is the `order-consumer` crate in
//! `examples/`. With the `eventbridge` feature, [`EventIdKey`] also keys
//! `aws_lambda_events::eventbridge::EventBridgeEvent`s.

#[cfg(feature = "batch")]
pub mod batch;
pub mod claim_check;
pub mod clock;
pub mod error;
pub mod idempotency;
pub mod occ;
pub mod received;
pub mod sequencing;
pub mod tables;
pub mod trace;

#[cfg(test)]
mod test_support;

#[cfg(feature = "batch")]
pub use batch::{
    BatchError, BatchProcessor, BatchReport, FifoFailure, Invocation, ItemReport, ItemStatus,
    Processed, Semantics,
};
pub use claim_check::PayloadResolver;
pub use clock::{Clock, ManualClock, SystemClock};
pub use error::StoreError;
pub use idempotency::{
    EventIdKey, FailurePolicy, IdempotencyConfig, IdempotencyError, IdempotencyStore, KeyExtractor,
    Outcome,
};
pub use occ::{Committed, OccConfig, OccError, OccTable, Versioned};
/// The account that owns the payload bucket: `owner.client(&s3)` is `s3` with every call
/// carrying S3's `ExpectedBucketOwner`, for [`PayloadResolver::new`] (the template's
/// `EXPECTED_BUCKET_OWNER`, the stack's account; `ExpectedBucketOwner::from_env` reads it).
pub use outbox_shared::bucket_owner::ExpectedBucketOwner;
pub use outbox_shared::{
    Envelope, EventMetadata, PayloadRef, ResolveError, RetryPolicy, TraceContext,
};
pub use received::{DecodeError, decode, decode_str};
pub use sequencing::{SequenceStore, SequencingConfig};
pub use trace::process_span;
