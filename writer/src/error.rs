//! Typed errors of the writer.
//!
//! Everything rejected before a call ([`InputError`], [`LimitError`]) wrote nothing, and so did a
//! payload S3 did not store ([`WriteError::PayloadNotStored`]). Cancellations
//! of `TransactWriteItems` are read by position and become [`WriteError::AlreadyExists`],
//! [`WriteError::VersionConflict`], [`WriteError::ConditionFailed`],
//! [`WriteError::TransactionConflict`] or [`WriteError::Throttled`] (both retryable), or
//! [`WriteError::Validation`]; any other failed call is [`WriteError::Dynamo`], holding the classified
//! [`SdkFailure`] (the SDK error is its source).

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use outbox_shared::error::TRANSACTION_CONFLICT_CODE;
use outbox_shared::{EntryFieldError, ItemError, ItemKey, SdkFailure};

/// Input that can never be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    /// An id that becomes part of a key is empty or malformed (the error names which).
    #[error(transparent)]
    Id(ItemError),
    /// An event's `EventType` or `TraceHeader` that EventBridge would refuse on its `PutEvents`
    /// entry, and with it every entry of the call: no relay could publish it (the error names
    /// the attribute and the limit).
    #[error(transparent)]
    EntryField(EntryFieldError),
    #[error("an order needs at least one item")]
    NoItems,
    #[error("item {index} has an empty sku")]
    EmptySku { index: usize },
    #[error("item {index} ({sku:?}) has quantity 0")]
    ZeroQuantity { index: usize, sku: String },
    #[error("the order amount overflows (more than {max} cents)", max = u64::MAX)]
    AmountOverflow,
    #[error("a transaction needs at least one outbox event")]
    NoEvents,
    #[error("event {event_type:?} cannot become an EventBridge entry: {reason}")]
    Event { event_type: String, reason: String },
    #[error("the order's version cannot be incremented past {version}")]
    VersionOverflow { version: u64 },
    #[error("invalid trace header: {reason}")]
    TraceHeader { reason: String },
}

impl From<ItemError> for InputError {
    fn from(err: ItemError) -> Self {
        match err {
            ItemError::EntryField(field) => Self::EntryField(field),
            other => Self::Id(other),
        }
    }
}

/// A write over one of the AWS limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("a transaction has at most {max} actions, this one has {actions}")]
    TooManyActions { actions: usize, max: usize },
    #[error("a transaction holds at most {max} bytes, this one about {bytes}")]
    TransactionTooLarge { bytes: usize, max: usize },
    #[error(
        "item {key} is {bytes} bytes, more than the {max} an item may hold{}",
        bucket_hint(.payload_bucket_would_fit)
    )]
    ItemTooLarge {
        key: ItemKey,
        bytes: usize,
        max: usize,
        /// The item is an outbox event and the writer has no payload bucket: with one, its payload
        /// would be stored in S3 and the item would fit (the message says so).
        payload_bucket_would_fit: bool,
    },
    /// Only without a payload bucket: with one, the relays store such a payload in S3 when they
    /// publish the event.
    #[error(
        "event {event_id} ({event_type}) would be a {bytes}-byte EventBridge entry, more than the \
         configured {max}{PAYLOAD_BUCKET_HINT}"
    )]
    EventTooLarge {
        event_id: String,
        event_type: String,
        bytes: usize,
        max: usize,
    },
    /// Above [`WriterConfig::max_payload_bytes`](crate::WriterConfig::max_payload_bytes), with a
    /// payload bucket or without.
    #[error(
        "event {event_id} ({event_type}) has a {bytes}-byte payload, more than the {max} bytes the \
         writer accepts (WriterConfig::max_payload_bytes)"
    )]
    PayloadTooLarge {
        event_id: String,
        event_type: String,
        bytes: usize,
        max: usize,
    },
}

/// How to write an event whose payload is too large for an item or an entry.
const PAYLOAD_BUCKET_HINT: &str = "; to accept larger payloads, configure the payload bucket \
     (WriterConfig::payload_bucket): the writer and the relays store them in S3";

/// Why a write did not happen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WriteError {
    #[error("invalid input: {0}")]
    InvalidInput(#[from] InputError),
    #[error("limit exceeded: {0}")]
    LimitExceeded(#[from] LimitError),
    /// A `Put` expecting a new item found one: nothing was written.
    #[error("{key} already exists")]
    AlreadyExists { key: ItemKey },
    /// The item's `Version` was no longer the one read: another writer got there first.
    #[error("{key} no longer has version {expected_version}: it was changed concurrently")]
    VersionConflict { key: ItemKey, expected_version: u64 },
    /// The item to change does not exist.
    #[error("{key} does not exist")]
    NotFound { key: ItemKey },
    /// Any other failed condition of a business action.
    #[error("the condition on {key} failed")]
    ConditionFailed { key: ItemKey },
    /// The idempotency key was first used for a request with different content.
    #[error("idempotency key {idempotency_key:?} was already used for a different request")]
    IdempotencyKeyReused { idempotency_key: String },
    /// Another transaction touched one of the items at the same time. Retryable.
    #[error("the transaction conflicted with another one{}", on_key(.key))]
    TransactionConflict { key: Option<ItemKey> },
    /// DynamoDB throttled the request or one of its items. Retryable.
    #[error("DynamoDB throttled the write{}", on_key(.key))]
    Throttled { key: Option<ItemKey> },
    /// DynamoDB rejected the request as invalid. Not retryable.
    #[error("DynamoDB rejected the write{}: {message}", on_key(.key))]
    Validation {
        key: Option<ItemKey>,
        message: String,
    },
    /// A stored item lacks an attribute the writer needs, or holds it in the wrong type.
    #[error("stored item {key} is malformed: {reason}")]
    MalformedItem { key: ItemKey, reason: String },
    /// An item could not be converted to attribute values.
    #[error("could not encode an item: {0}")]
    Encoding(String),
    /// Any other failed DynamoDB call; the SDK error is kept as the source.
    #[error("DynamoDB {0}")]
    Dynamo(#[source] SdkFailure),
    /// The table is a multi-region strong consistency (MRSC) global table, which supports neither
    /// transactions nor TTL: the outbox writes each event in its business change's transaction,
    /// so it cannot run there. Found by the writer's first look at the table
    /// ([`WriterConfig::global_table`](crate::WriterConfig::global_table)), or read from a
    /// transaction DynamoDB refused for it. Nothing was written. Not retryable.
    #[error(
        "table {table} is a multi-region strong consistency (MRSC) global table: DynamoDB \
         supports neither transactions nor TTL on it, and the outbox writes each event in the \
         transaction of its business change; use a multi-region eventual consistency (MREC) \
         global table (docs/global-tables.md)"
    )]
    StrongConsistencyTable { table: String },
    /// Storing a payload in the payload bucket ([`WriterConfig::payload_bucket`]) failed (S3's
    /// `PutObject`), or its event's key already holds another payload (the event id was given to
    /// another payload), before the transaction: nothing was written to the table. Retryable as
    /// [`StoreError::is_retryable`] says.
    ///
    /// [`StoreError::is_retryable`]: outbox_shared::claim_check::StoreError::is_retryable
    ///
    /// [`WriterConfig::payload_bucket`]: crate::WriterConfig::payload_bucket
    #[error(
        "the payload of event {event_id} could not be stored in the payload bucket, so nothing \
         was written: {source}"
    )]
    PayloadNotStored {
        event_id: String,
        source: outbox_shared::claim_check::StoreError,
    },
}

fn bucket_hint(payload_bucket_would_fit: &bool) -> &'static str {
    if *payload_bucket_would_fit {
        PAYLOAD_BUCKET_HINT
    } else {
        ""
    }
}

fn on_key(key: &Option<ItemKey>) -> String {
    key.as_ref().map(|k| format!(" on {k}")).unwrap_or_default()
}

impl WriteError {
    /// Whether repeating the same write can succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::TransactionConflict { .. } | Self::Throttled { .. } => true,
            Self::Dynamo(failure) => failure.is_retryable(),
            Self::PayloadNotStored { source, .. } => source.is_retryable(),
            _ => false,
        }
    }

    /// Whether DynamoDB certainly did not apply the transaction and repeating it may succeed.
    ///
    /// Unlike [`Self::is_retryable`], a timeout is excluded: the transaction may have landed, and
    /// repeating a non-idempotent write could apply it twice.
    pub(crate) fn is_transient_rejection(&self) -> bool {
        matches!(
            self,
            Self::TransactionConflict { .. } | Self::Throttled { .. }
        )
    }
}

impl WriteError {
    /// A failed SDK call other than a transaction cancellation, classified by
    /// [`SdkFailure::new`]: throttling and transaction conflicts become their own variants.
    pub(crate) fn from_sdk<E>(operation: &'static str, err: SdkError<E, HttpResponse>) -> Self
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        let failure = SdkFailure::new(operation, err);
        match failure.code.as_deref() {
            _ if failure.is_throttling() => Self::Throttled { key: None },
            Some(TRANSACTION_CONFLICT_CODE) => Self::TransactionConflict { key: None },
            _ => Self::Dynamo(failure),
        }
    }
}
