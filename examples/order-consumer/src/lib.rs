//! An example consumer of the outbox's order events: an EventBridge-triggered Lambda that
//! reserves stock for each `OrderCreated` event exactly once, however often the relay delivers it.
//!
//! The idempotency store of `outbox-consumer` (keyed on the envelope's `metadata.eventId`) makes
//! the whole reservation happen once per event; its OCC helper makes each SKU's decrement safe
//! against concurrent orders for the same SKU. A reservation that cannot be met (unknown SKU, not
//! enough stock) is a final answer, stored like any other response; an inventory failure releases
//! the claim so the retry runs. The event's `data` is the writer's own [`outbox_writer::OrderCreated`],
//! carried in the event or, for an order too large to travel in it, read from S3 by
//! [`outbox_consumer::PayloadResolver`] before the event is claimed (a payload gone, past the
//! payload bucket's lifecycle, is a final refusal and leaves the event unclaimed).
//!
//! - [`handle_event`]: the handler, generic over the [`Inventory`] port;
//! - [`handle_sqs_batch`], [`handle_kinesis_batch`]: the same for a batch from an SQS queue
//!   (standard or FIFO: the Custom Event Bus's FIFO subscriber's target, an SNS subscription, a
//!   rule's queue) or a Kinesis stream, through `outbox_consumer`'s batch processor and each
//!   source's partial-failure rule;
//! - [`DynamoInventory`]: the inventory on the [`stock`] table;
//! - [`ExampleArgs`]: the configuration the `example-consumer` binary reads.

mod batch;
mod config;
mod handler;
mod inventory;
pub mod stock;

pub use batch::{Reserved, handle_kinesis_batch, handle_sqs_batch, invocation, processor, reserve};
pub use config::ExampleArgs;
pub use handler::{EventBridgeEvent, Handled, HandlerError, handle_envelope, handle_event};
pub use inventory::{
    DynamoInventory, Inventory, InventoryError, Reservation, ReservedLine, StockLevel,
};
pub use outbox_consumer::batch::aws_lambda_events::kinesis::KinesisEvent;
pub use outbox_consumer::batch::aws_lambda_events::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};

/// The IAM actions the consumer calls on its idempotency table: the store's claim (a conditional
/// `UpdateItem`), its read of a claimed or completed record, its completion, its release of a
/// failed claim (`DeleteItem`). The template's `ExampleConsumerRole` grants exactly these.
pub const IDEMPOTENCY_TABLE_ACTIONS: &[&str] = &[
    "dynamodb:DeleteItem",
    "dynamodb:GetItem",
    "dynamodb:UpdateItem",
];

/// The IAM actions the consumer calls on its stock table: a SKU's read, and its write on its
/// version (`outbox_consumer::OccTable`). The template's `ExampleConsumerRole` grants exactly
/// these.
pub const STOCK_TABLE_ACTIONS: &[&str] = &["dynamodb:GetItem", "dynamodb:PutItem"];
