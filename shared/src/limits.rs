//! AWS service limits the design works within, each with the reason it matters.

/// `PutEvents` accepts at most 10 entries per call.
pub const PUT_EVENTS_MAX_ENTRIES: usize = 10;

/// `PutEvents` classic limit for one entry and for one whole request (256 KiB). Buses created
/// since 2026 accept 1 MiB entries; the publisher's limits are configurable, this is the safe default.
pub const PUT_EVENTS_DEFAULT_MAX_BYTES: usize = 256 * 1024;

/// Largest per-entry size any EventBridge bus accepts (1 MiB), the upper bound for configuration.
pub const PUT_EVENTS_ABSOLUTE_MAX_BYTES: usize = 1024 * 1024;

/// EventBridge counts a set `Time` field as 14 bytes of the entry size.
pub const PUT_EVENTS_TIME_BYTES: usize = 14;

/// Longest `DetailType` (the item's `EventType`) of a `PutEvents` entry, in characters: a model
/// constraint, so a longer one makes EventBridge refuse the whole call, every entry in it.
pub const PUT_EVENTS_DETAIL_TYPE_MAX_CHARS: usize = 128;

/// Longest `TraceHeader` of a `PutEvents` entry, in characters (at least 1): a model constraint,
/// so one outside 1 to 500 makes EventBridge refuse the whole call.
pub const PUT_EVENTS_TRACE_HEADER_MAX_CHARS: usize = 500;

/// `TransactWriteItems` accepts at most 100 actions.
pub const TRANSACT_MAX_ACTIONS: usize = 100;

/// `TransactWriteItems` accepts at most 4 MB of item data in total.
pub const TRANSACT_MAX_BYTES: usize = 4 * 1024 * 1024;

/// A DynamoDB item (attribute names plus values) is at most 400 KB.
pub const ITEM_MAX_BYTES: usize = 400 * 1024;

/// `ClientRequestToken` makes `TransactWriteItems` idempotent for 10 minutes; at most 36 characters.
pub const CLIENT_REQUEST_TOKEN_MAX_LEN: usize = 36;

/// SQS's `MaximumMessageSize` of a queue that sets none (256 KiB): what a dead letter is measured
/// against when the queue's own limit cannot be read.
pub const SQS_MESSAGE_DEFAULT_MAX_BYTES: usize = 256 * 1024;

/// The largest `MaximumMessageSize` a queue can set (1 MiB): the dead-letter queue's in the template,
/// so a letter carries the whole record of nearly any item (400 KB at most, JSON-escaped).
pub const SQS_MESSAGE_ABSOLUTE_MAX_BYTES: usize = 1024 * 1024;

/// `SendMessageBatch` takes at most 10 messages (the dead letters and the SQS target).
pub const SQS_SEND_BATCH_MAX: usize = 10;

/// Longest `SystemMetadata.EventGroupId` of a Custom Event Bus entry, in characters: a model
/// constraint, so a longer one refuses the whole call.
pub const EVENT_GROUP_ID_MAX_CHARS: usize = 128;

/// Longest `SystemMetadata.DeduplicationId` of a Custom Event Bus entry, in characters: a model
/// constraint, so a longer one refuses the whole call.
pub const DEDUPLICATION_ID_MAX_CHARS: usize = 128;

/// Writes per second one partition key takes, a global secondary index's included (1,000 WCU of
/// items up to 1 KB): beyond it DynamoDB throttles, and an index that throttles throttles the
/// table's own writes.
pub const PARTITION_WRITES_PER_SECOND: u64 = 1_000;

/// Writes an event costs on its shard's index partition: in when the writer puts it pending, out
/// when a relay marks it (its `GSI1PK` removed).
pub const INDEX_WRITES_PER_EVENT: u64 = 2;

/// Events per second the pending index takes over `shards` shards before a partition throttles,
/// with the aggregates spread evenly over the shards.
pub fn index_events_per_second(shards: u16) -> u64 {
    u64::from(shards) * PARTITION_WRITES_PER_SECOND / INDEX_WRITES_PER_EVENT
}
