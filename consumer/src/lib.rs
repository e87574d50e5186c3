//! Consumer-side helpers for events relayed from the outbox.
//!
//! Delivery through the relay is at-least-once; these helpers make a consumer's effects
//! exactly-once:
//! - [`idempotency`]: a DynamoDB idempotency store keyed on the envelope's `metadata.eventId`
//!   (or any caller key) that runs business logic once and answers duplicates with the stored
//!   response;
//! - [`occ`]: read-modify-conditional-write on a `version` attribute with bounded retries
//!   (`outbox_shared::RetryPolicy`: exponential backoff with full jitter);
//! - [`example`]: an EventBridge-triggered Lambda that reserves stock for `OrderCreated` with both;
//! - [`tables`]: creates the tables for local use and tests.

pub mod clock;
pub mod error;
pub mod example;
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
