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

/// The Custom Event Bus's `PutEvents` takes 1 to 100 entries per call (fixed, not adjustable).
pub const CUSTOM_BUS_PUT_EVENTS_MAX_ENTRIES: usize = 100;

/// The Custom Event Bus documents no byte limit per entry or per request; its default budget is
/// the classic bus's documented 256 KiB, which every SQS queue (the usual target) takes as one
/// message, so a limit we cannot see refuses nothing the classic bus would have taken.
pub const CUSTOM_BUS_DEFAULT_MAX_BYTES: usize = 256 * 1024;

/// Longest `SystemMetadata.EventGroupId` of a Custom Event Bus entry, in characters: a model
/// constraint, so a longer one refuses the whole call.
pub const EVENT_GROUP_ID_MAX_CHARS: usize = 128;

/// Longest `SystemMetadata.DeduplicationId` of a Custom Event Bus entry, in characters: a model
/// constraint, so a longer one refuses the whole call.
pub const DEDUPLICATION_ID_MAX_CHARS: usize = 128;

/// The Custom Event Bus suppresses a repeat of a `DeduplicationId` within 300 s (per account and
/// event group; fixed): a re-publish after it is a new event to the bus.
pub const CUSTOM_BUS_DEDUP_WINDOW: std::time::Duration = std::time::Duration::from_secs(300);

/// SNS's `PublishBatch` takes at most 10 messages.
pub const SNS_PUBLISH_BATCH_MAX_ENTRIES: usize = 10;

/// SNS's and SQS's message size unless the topic or queue sets a larger `MaximumMessageSize`
/// (256 KiB), a message's and a batch's: the publisher's default for both.
pub const SQS_SNS_DEFAULT_MAX_BYTES: usize = 256 * 1024;

/// Kinesis's `PutRecords` takes at most 500 records.
pub const KINESIS_PUT_RECORDS_MAX_ENTRIES: usize = 500;

/// A Kinesis record's data and partition key together are at most 1 MiB (a stream's default).
pub const KINESIS_RECORD_MAX_BYTES: usize = 1024 * 1024;

/// A `PutRecords` call's records, data and partition keys, are at most 5 MiB.
pub const KINESIS_PUT_RECORDS_MAX_BYTES: usize = 5 * 1024 * 1024;

/// A Kinesis partition key is 1 to 256 Unicode characters.
pub const KINESIS_PARTITION_KEY_MAX_CHARS: usize = 256;

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
