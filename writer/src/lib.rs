//! Writes business changes and their outbox events atomically, in one DynamoDB transaction.
//!
//! - [`OutboxWriter::create_order_with_outbox`]: the order `Put` (only if new), the `OrderCreated`
//!   outbox event and, with an idempotency key, an idempotency record, all in one
//!   `TransactWriteItems`. A retried create with the same key returns the original result.
//! - [`OutboxWriter::update_order_status_with_outbox`]: optimistic concurrency on `Version`, the
//!   `OrderStatusChanged` event in the same transaction, conflicts retried with exponential backoff
//!   and full jitter up to a bound.
//! - [`OutboxTransaction`] + [`OutboxWriter::commit`]: the general builder both are built on, for
//!   any entity: business `Put`/`Update`/`Delete`/`ConditionCheck` actions plus outbox events.
//!
//! Every limit (100 actions, 4 MB per transaction, 400 KB per item, the EventBridge entry size of
//! each future event) and every id is checked before any call, so a rejected write writes nothing.
//! Cancellations are read by position and mapped to [`WriteError`] variants.

pub mod config;
pub mod error;
pub mod order;
pub mod size;
pub mod transaction;
mod writer;

pub use config::WriterConfig;
pub use error::{InputError, LimitError, WriteError};
pub use order::{
    CreatedOrder, NewOrder, OrderCreated, OrderLine, OrderStatus, OrderStatusChanged, UpdatedOrder,
};
pub use outbox_shared::RetryPolicy;
pub use outbox_shared::{ConfigError, NewOutboxEvent};
pub use transaction::{CommittedTransaction, ConditionFailure, OutboxTransaction};
pub use writer::OutboxWriter;
