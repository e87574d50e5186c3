//! Writes business changes and their outbox events atomically, in one DynamoDB transaction.
//!
//! - [`OutboxWriter::create_order_with_outbox`]: the order `Put` (only if new), the `OrderCreated`
//!   outbox event and, with an idempotency key, an idempotency record, all in one
//!   `TransactWriteItems`. A retried create with the same key returns the original result.
//! - [`OutboxWriter::update_order_status_with_outbox`]: optimistic concurrency on `Version`, the
//!   `OrderStatusChanged` event in the same transaction, conflicts retried with exponential backoff
//!   and full jitter ([`RetryPolicy`]) up to a bound.
//! - [`OutboxTransaction`] + [`OutboxWriter::commit`]: the general builder both are built on, for
//!   any entity: business `Put`/`Update`/`Delete`/`ConditionCheck` actions plus outbox events.
//! - [`OrderCreated`] and [`OrderStatusChanged`]: the `data` of the order events, for consumers
//!   to deserialize too.
//!
//! Every limit (100 actions, 4 MB per transaction, 400 KB per item, the EventBridge entry size of
//! each future event, the largest payload accepted) and every id is checked before any call, so a
//! rejected write writes nothing. Cancellations are read by position and mapped to [`WriteError`]
//! variants; any other failed call is [`WriteError::Dynamo`], a classified [`SdkFailure`] whose
//! source is the SDK error.
//!
//! # Events of any size: the claim check
//!
//! Without a payload bucket an event is as large as an item (400 KB) and an EventBridge entry
//! ([`WriterConfig::max_event_entry_bytes`]) allow. With one ([`WriterConfig::payload_bucket`],
//! the bucket the relays have as `PAYLOAD_BUCKET`; a writer built with
//! [`OutboxWriter::from_sdk_config`] or [`OutboxWriter::with_s3`]) the writer accepts payloads up
//! to [`WriterConfig::max_payload_bytes`] (10 MiB by default):
//!
//! - an outbox item that would exceed 400 KB has its payload stored in S3 first, under
//!   `payloads/{event_id}` with its SHA-256 (one `PutObject`, which S3 verifies), and the
//!   transaction writes the item with a [`PayloadRef`] (`s3://BUCKET/KEY`, size, SHA-256) in place
//!   of its `Payload`; the relays publish that reference (`dataref`) without reading the object;
//! - a smaller payload is written inline, as without a bucket, and costs no S3 call; if its entry
//!   is too large for the relays' target, they store it in S3 when they publish it;
//! - S3 failing, or the event's key already holding another payload (an event id given to two
//!   payloads), is [`WriteError::PayloadNotStored`] (retryable as its [`StoreError`](outbox_shared::claim_check::StoreError) says), and
//!   nothing is written to the table;
//! - an object whose transaction then failed is an orphan: no item refers to it, so no relay
//!   publishes it, and the bucket's lifecycle rule on `payloads/` expires it.
//!
//! The writer then needs [`PAYLOAD_OBJECT_ACTIONS`] (`s3:PutObject`, `s3:GetObject`) on `payloads/*` in the bucket
//! besides [`TABLE_ACTIONS`].
//!
//! Everything a caller needs is exported here, at the crate root; this crate and the AWS SDK for
//! DynamoDB are all an order service depends on:
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use outbox_writer::{
//!     ErrorClass, NewOrder, OrderLine, OrderStatus, OutboxConfig, OutboxWriter, ShardCount,
//!     WriteError, WriterConfig,
//! };
//!
//! #[tokio::main]
//! async fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Clients are built once; `AWS_ENDPOINT_URL` points them at a local emulator.
//!     let sdk_config = aws_config::load_defaults(aws_config::BehaviorVersion::latest()).await;
//!
//!     // Table, index and shard count must match the relays' configuration.
//!     let mut outbox = OutboxConfig::new("orders");
//!     outbox.shard_count = ShardCount::new(16)?;
//!     outbox.ttl_retention = Duration::from_secs(3 * 24 * 60 * 60);
//!     let mut config = WriterConfig::new(outbox, "com.example.orders");
//!     config.update_retry.max_retries = 5;
//!     // Payloads too large for an item go to S3 first (the relays' PAYLOAD_BUCKET); without a
//!     // bucket, `OutboxWriter::new(aws_sdk_dynamodb::Client::new(&sdk_config), config)`.
//!     config.payload_bucket = Some("orders-payloads".to_owned());
//!     let writer = OutboxWriter::from_sdk_config(&sdk_config, config)?;
//!
//!     let order = NewOrder::new(vec![OrderLine::new("SKU-RED-MUG", 2, 1250)])
//!         .with_idempotency_key("checkout-7f3a");
//!     let created = match writer.create_order_with_outbox("user-1", order).await {
//!         Ok(created) => created,
//!         Err(WriteError::AlreadyExists { key }) => return Err(format!("{key} exists").into()),
//!         Err(WriteError::InvalidInput(e)) => return Err(format!("bad order: {e}").into()),
//!         Err(WriteError::Dynamo(failure)) if failure.class == ErrorClass::Retryable => {
//!             // Throttled, timed out: the caller may try again later with the same key.
//!             return Err(failure.into());
//!         }
//!         Err(e) => return Err(e.into()),
//!     };
//!     println!("order {} (event {})", created.order_id, created.event_id);
//!
//!     match writer
//!         .update_order_status_with_outbox("user-1", &created.order_id, OrderStatus::Paid)
//!         .await
//!     {
//!         Ok(updated) => println!("version {} after {} attempts", updated.version, updated.attempts),
//!         Err(WriteError::VersionConflict { key, .. }) => println!("{key} is contended, try later"),
//!         Err(e) if e.is_retryable() => println!("try later: {e}"),
//!         Err(e) => return Err(e.into()),
//!     }
//!     Ok(())
//! }
//! ```

mod config;
mod error;
mod order;
mod size;
mod trace;
mod transaction;
mod writer;

pub use config::{DEFAULT_MAX_PAYLOAD_BYTES, WriterConfig};
pub use error::{InputError, LimitError, WriteError};
pub use order::{
    CreatedOrder, INITIAL_VERSION, NewOrder, ORDER_AGGREGATE, ORDER_CREATED, ORDER_STATUS_CHANGED,
    OrderCreated, OrderLine, OrderStatus, OrderStatusChanged, UnknownStatus, UpdatedOrder,
};
pub use outbox_shared::{TraceContext, TraceContextError};
pub use size::{item_size, value_size};
pub use trace::{LAMBDA_TRACE_ENV, MAX_TRACE_HEADER_LEN, TraceHeader, current_trace_context};
pub use transaction::{CommittedTransaction, ConditionFailure, OutboxTransaction};
pub use writer::OutboxWriter;

/// The IAM actions the writer's own calls need on the outbox table, which the template's
/// `OrderServiceWriterPolicy` grants and nothing more (checked by a test of outbox-tests):
/// `TransactWriteItems` is authorized per action in it: the `Put`s of
/// [`OutboxWriter::create_order_with_outbox`] and [`OutboxTransaction::put`], the `Update` of an
/// order's status change, [`OutboxTransaction::condition_check`]; and the consistent `GetItem` that
/// replays an idempotent create and reads an order's version; configured for a global table
/// ([`WriterConfig::global_table`]), the one `DescribeTable` that refuses a multi-region strong
/// consistency table. (A service that adds [`OutboxTransaction::delete`]s to its transactions
/// grants `dynamodb:DeleteItem` itself.)
pub const TABLE_ACTIONS: &[&str] = &[
    "dynamodb:ConditionCheckItem",
    "dynamodb:DescribeTable",
    "dynamodb:GetItem",
    "dynamodb:PutItem",
    "dynamodb:UpdateItem",
];

/// The IAM actions the writer's own calls need on the payload bucket's objects under `payloads/`
/// (relay-runtime's `Target::PayloadObjects`), with a payload bucket only: the conditional
/// `PutObject` of a payload too large for its outbox item, and, when an object is already under
/// its key (a retry of a put whose reply was lost), the `HeadObject` that checks it holds this
/// payload (`s3:GetObject`) and the copy onto itself of an old one (`CopyObject`: both). The
/// template's `OrderServiceWriterPolicy` grants them with [`TABLE_ACTIONS`].
pub const PAYLOAD_OBJECT_ACTIONS: &[&str] = &["s3:GetObject", "s3:PutObject"];

// The contract types that appear in this crate's API, so a caller needs no other project crate.
pub use outbox_shared::limits;
pub use outbox_shared::retry::FullJitter;
pub use outbox_shared::shard::InvalidShardCount;
pub use outbox_shared::{
    ConfigError, ErrorClass, ItemError, ItemKey, NewOutboxEvent, OutboxConfig, OutboxItem,
    OutboxStatus, PayloadRef, RetryPolicy, SdkFailure, ShardCount,
};
