//! Consumer-side helpers for events relayed from the outbox.
//!
//! Delivery through the relay is at-least-once; these helpers make a consumer's effects
//! exactly-once:
//! - [`idempotency`]: a DynamoDB idempotency store keyed on the envelope's `metadata.eventId`
//!   (or any caller key) that runs business logic once and answers duplicates with the stored
//!   response;
//! - [`occ`]: read-modify-conditional-write on a `version` attribute with bounded retries
//!   ([`RetryPolicy`]: exponential backoff with full jitter);
//! - [`tables`]: the idempotency table's schema, and table creation for local use and tests.
//!
//! A complete EventBridge-triggered consumer built with both is the `order-consumer` crate in
//! `examples/`. With the `eventbridge` feature, [`EventIdKey`] also keys
//! `aws_lambda_events::eventbridge::EventBridgeEvent`s.

pub mod clock;
pub mod error;
pub mod idempotency;
pub mod occ;
pub mod tables;

#[cfg(test)]
mod test_support;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::StoreError;
pub use idempotency::{
    EventIdKey, FailurePolicy, IdempotencyConfig, IdempotencyError, IdempotencyStore, KeyExtractor,
    Outcome,
};
pub use occ::{Committed, OccConfig, OccError, OccTable, Versioned};
pub use outbox_shared::RetryPolicy;
