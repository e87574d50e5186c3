//! The general outbox transaction: business actions on any entity plus one or more outbox events,
//! committed atomically with one `TransactWriteItems`.
//!
//! ```no_run
//! # async fn demo(writer: outbox_writer::OutboxWriter, put: aws_sdk_dynamodb::types::Put,
//! #               event: outbox_writer::NewOutboxEvent) -> Result<(), outbox_writer::WriteError> {
//! use outbox_writer::{ConditionFailure, OutboxTransaction};
//! let committed = writer
//!     .commit(
//!         OutboxTransaction::new()
//!             .put(put, ConditionFailure::AlreadyExists)
//!             .event(event),
//!     )
//!     .await?;
//! println!("{:?}", committed.event_ids());
//! # Ok(()) }
//! ```
//!
//! Each action says what its failed condition means ([`ConditionFailure`]); a cancellation is read
//! by position against the actions, so the caller gets a typed error naming the item.
//!
//! An event whose outbox item would exceed DynamoDB's 400 KB item limit is written through the
//! claim check when the writer has a payload bucket ([`WriterConfig::payload_bucket`]): its
//! payload is stored in S3 first (`payloads/{event_id}`, one conditional `PutObject` with its
//! SHA-256), then the transaction writes the item with a `PayloadRef` in place of its `Payload`;
//! the item, not the payload, counts towards the transaction's 4 MB. If the transaction then
//! fails, the object is an orphan no item refers to: no relay publishes it, and the bucket's
//! lifecycle rule expires it.

use std::collections::HashMap;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ConditionCheck, Delete, Put, TransactWriteItem, Update,
};
use chrono::{DateTime, Utc};
use outbox_shared::claim_check::PayloadStore;
use outbox_shared::envelope::Encoding;
use outbox_shared::limits::{ITEM_MAX_BYTES, TRANSACT_MAX_ACTIONS, TRANSACT_MAX_BYTES};
use outbox_shared::schema::attr;
use outbox_shared::{ErrorClass, ItemKey, NewOutboxEvent, OutboundEvent, OutboxItem, SdkFailure};

use crate::config::WriterConfig;
use crate::error::{InputError, LimitError, WriteError};
use crate::size::{item_size, value_size};

/// `CancellationReason` codes DynamoDB uses, read by position.
mod reason {
    pub(super) const NONE: &str = "None";
    pub(super) const CONDITIONAL_CHECK_FAILED: &str = "ConditionalCheckFailed";
    pub(super) const TRANSACTION_CONFLICT: &str = "TransactionConflict";
    /// Item-level throttling codes: the transaction was not applied and can be retried.
    pub(super) const THROTTLING: &[&str] = &[
        "ThrottlingError",
        "ProvisionedThroughputExceeded",
        "RequestLimitExceeded",
    ];
}

/// The operation, as AWS names it in errors.
const TRANSACT_WRITE_ITEMS: &str = "TransactWriteItems";

/// The service error code DynamoDB answers when a `ClientRequestToken` is reused with different
/// parameters within its 10-minute window.
pub(crate) const IDEMPOTENT_PARAMETER_MISMATCH: &str = "IdempotentParameterMismatchException";

/// What a failed condition on an action means to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConditionFailure {
    /// The action creates an item (`attribute_not_exists`): [`WriteError::AlreadyExists`].
    AlreadyExists,
    /// The action checks a version: [`WriteError::VersionConflict`].
    VersionConflict { expected_version: u64 },
    /// The action needs the item to exist: [`WriteError::NotFound`].
    NotFound,
    /// Anything else: [`WriteError::ConditionFailed`].
    Failed,
}

#[derive(Debug, Clone)]
struct Action {
    item: TransactWriteItem,
    key: ItemKey,
    on_condition_failed: ConditionFailure,
    /// Item bytes for a `Put`; key plus expression bytes otherwise.
    bytes: usize,
    /// A `Put` carries its whole item, which must fit the item limit.
    is_put: bool,
}

/// Both boxed: a new event and a built item are hundreds of bytes each, and far apart in size
/// (clippy's `large_enum_variant`, under the workspace's unified features).
#[derive(Debug, Clone)]
enum EventSpec {
    New(Box<NewOutboxEvent>),
    Built(Box<OutboxItem>),
}

/// Business actions and outbox events to commit atomically.
#[derive(Debug, Clone, Default)]
pub struct OutboxTransaction {
    actions: Vec<Action>,
    events: Vec<EventSpec>,
    client_request_token: Option<String>,
}

impl OutboxTransaction {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a `Put` (with its table name, item and any condition).
    pub fn put(mut self, put: Put, on_condition_failed: ConditionFailure) -> Self {
        let key = key_of(put.item());
        let bytes = item_size(put.item());
        self.actions.push(Action {
            item: TransactWriteItem::builder().put(put).build(),
            key,
            on_condition_failed,
            bytes,
            is_put: true,
        });
        self
    }

    /// Adds an `Update`. Its size counts as key plus expression values (the resulting item is not
    /// known before the call).
    pub fn update(mut self, update: Update, on_condition_failed: ConditionFailure) -> Self {
        let bytes = item_size(update.key())
            + expression_size(
                Some(update.update_expression()),
                update.condition_expression(),
                update.expression_attribute_values(),
            );
        self.push_keyed(
            TransactWriteItem::builder().update(update.clone()).build(),
            update.key(),
            bytes,
            on_condition_failed,
        );
        self
    }

    /// Adds a `Delete`.
    pub fn delete(mut self, delete: Delete, on_condition_failed: ConditionFailure) -> Self {
        let bytes = item_size(delete.key())
            + expression_size(
                None,
                delete.condition_expression(),
                delete.expression_attribute_values(),
            );
        self.push_keyed(
            TransactWriteItem::builder().delete(delete.clone()).build(),
            delete.key(),
            bytes,
            on_condition_failed,
        );
        self
    }

    /// Adds a `ConditionCheck` on an item the transaction does not otherwise change.
    pub fn condition_check(
        mut self,
        check: ConditionCheck,
        on_condition_failed: ConditionFailure,
    ) -> Self {
        let bytes = item_size(check.key())
            + expression_size(
                None,
                Some(check.condition_expression()),
                check.expression_attribute_values(),
            );
        self.push_keyed(
            TransactWriteItem::builder()
                .condition_check(check.clone())
                .build(),
            check.key(),
            bytes,
            on_condition_failed,
        );
        self
    }

    /// Adds an outbox event; its id (UUIDv7), shard, index keys and TTL are set at commit. An
    /// event without a W3C trace context takes the caller's current span's
    /// ([`crate::current_trace_context`]), as it is when the event is added.
    pub fn event(mut self, mut event: NewOutboxEvent) -> Self {
        if event.trace_context.is_none() {
            event.trace_context = crate::trace::current_trace_context();
        }
        self.events.push(EventSpec::New(Box::new(event)));
        self
    }

    /// Adds an outbox event item already built with [`OutboxItem::pending`] (when the caller needs
    /// the event id before the commit, e.g. to store it in another item of the transaction).
    pub fn outbox_item(mut self, item: OutboxItem) -> Self {
        self.events.push(EventSpec::Built(Box::new(item)));
        self
    }

    /// Makes the call idempotent for DynamoDB's 10-minute window (at most 36 characters).
    pub fn client_request_token(mut self, token: impl Into<String>) -> Self {
        self.client_request_token = Some(token.into());
        self
    }

    /// Number of actions the transaction will send (business actions plus events).
    pub fn len(&self) -> usize {
        self.actions.len() + self.events.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn push_keyed(
        &mut self,
        item: TransactWriteItem,
        key: &HashMap<String, AttributeValue>,
        bytes: usize,
        on_condition_failed: ConditionFailure,
    ) {
        self.actions.push(Action {
            item,
            key: key_of(key),
            on_condition_failed,
            bytes,
            is_put: false,
        });
    }

    /// Builds the request: outbox items for the events, then every limit checked. With `payloads`
    /// (the writer's payload bucket), an outbox item over the item limit refers to its payload,
    /// which [`Prepared::claim_checks`] holds to be stored before the transaction is sent.
    ///
    /// # Errors
    /// [`WriteError::InvalidInput`] or [`WriteError::LimitExceeded`]; nothing has been sent.
    pub(crate) fn prepare(
        self,
        config: &WriterConfig,
        payloads: Option<&PayloadStore>,
        now: DateTime<Utc>,
    ) -> Result<Prepared, WriteError> {
        if self.events.is_empty() {
            return Err(InputError::NoEvents.into());
        }
        let actions = self.len();
        if actions > TRANSACT_MAX_ACTIONS {
            return Err(LimitError::TooManyActions {
                actions,
                max: TRANSACT_MAX_ACTIONS,
            }
            .into());
        }
        let mut items = Vec::with_capacity(actions);
        let mut outcomes = Vec::with_capacity(actions);
        let mut total_bytes = 0;
        for action in self.actions {
            if action.is_put {
                check_item_size(&action.key, action.bytes, false)?;
            }
            total_bytes += action.bytes;
            items.push(action.item);
            outcomes.push((action.key, action.on_condition_failed));
        }
        let mut events = Vec::with_capacity(self.events.len());
        let mut claim_checks = Vec::new();
        for spec in self.events {
            let outbox = match spec {
                EventSpec::Built(item) => {
                    item.check_entry_fields().map_err(InputError::EntryField)?;
                    *item
                }
                EventSpec::New(event) => {
                    OutboxItem::pending(*event, &config.outbox, now).map_err(InputError::from)?
                }
            };
            check_payload_size(&outbox, config)?;
            check_event_size(&outbox, config, payloads.is_some())?;
            let Fitted {
                outbox,
                item,
                claim_check,
            } = fit_item(outbox, payloads)?;
            let bytes = item_size(&item);
            check_item_size(&outbox.key(), bytes, payloads.is_none())?;
            claim_checks.extend(claim_check);
            // The referenced item, not the payload in S3, is what the transaction carries.
            total_bytes += bytes;
            let put = Put::builder()
                .table_name(&config.outbox.table_name)
                .set_item(Some(item))
                // A UUIDv7 never collides, but a caller-chosen id might: never overwrite an event.
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", attr::PK)
                .build()
                .map_err(|e| WriteError::Encoding(e.to_string()))?;
            items.push(TransactWriteItem::builder().put(put).build());
            outcomes.push((outbox.key(), ConditionFailure::AlreadyExists));
            events.push(outbox);
        }
        if total_bytes > TRANSACT_MAX_BYTES {
            return Err(LimitError::TransactionTooLarge {
                bytes: total_bytes,
                max: TRANSACT_MAX_BYTES,
            }
            .into());
        }
        Ok(Prepared {
            items,
            outcomes,
            events,
            claim_checks,
            client_request_token: self.client_request_token,
        })
    }
}

/// A transaction ready to send: every check passed.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub(crate) items: Vec<TransactWriteItem>,
    /// Per position: the item and what a failed condition there means.
    pub(crate) outcomes: Vec<(ItemKey, ConditionFailure)>,
    pub(crate) events: Vec<OutboxItem>,
    /// The payloads its items refer to, to store in the payload bucket before it is sent.
    pub(crate) claim_checks: Vec<ClaimCheck>,
    pub(crate) client_request_token: Option<String>,
}

/// A payload too large for its outbox item, which refers to it: stored in S3 before the
/// transaction.
#[derive(Clone)]
pub(crate) struct ClaimCheck {
    pub(crate) event_id: String,
    /// The payload's JSON text, as the item would have held it in `Payload`.
    pub(crate) payload: String,
}

/// Without the payload, which may be megabytes and may hold personal data.
impl std::fmt::Debug for ClaimCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimCheck")
            .field("event_id", &self.event_id)
            .field("payload_bytes", &self.payload.len())
            .finish()
    }
}

impl Prepared {
    /// Sends the transaction once; with `with_token` false, without its `ClientRequestToken` (the
    /// SDK then sends a fresh one of its own).
    ///
    /// # Errors
    /// The cancellation mapped by position, or the classified SDK error.
    pub(crate) async fn send(
        &self,
        client: &aws_sdk_dynamodb::Client,
        with_token: bool,
    ) -> Result<CommittedTransaction, WriteError> {
        let token = self.client_request_token.clone().filter(|_| with_token);
        client
            .transact_write_items()
            .set_transact_items(Some(self.items.clone()))
            .set_client_request_token(token)
            .send()
            .await
            .map_err(|e| map_sdk_error(e, &self.outcomes))?;
        Ok(CommittedTransaction {
            events: self.events.clone(),
        })
    }
}

/// What a committed transaction wrote to the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedTransaction {
    /// The outbox items as written, in the order they were added.
    pub events: Vec<OutboxItem>,
}

impl CommittedTransaction {
    pub fn event_ids(&self) -> Vec<&str> {
        self.events.iter().map(|e| e.event_id.as_str()).collect()
    }
}

/// `payload_bucket_would_fit`: the item is an outbox event written without a payload bucket, which
/// the error then suggests.
fn check_item_size(
    key: &ItemKey,
    bytes: usize,
    payload_bucket_would_fit: bool,
) -> Result<(), LimitError> {
    if bytes > ITEM_MAX_BYTES {
        return Err(LimitError::ItemTooLarge {
            key: key.clone(),
            bytes,
            max: ITEM_MAX_BYTES,
            payload_bucket_would_fit,
        });
    }
    Ok(())
}

/// No payload above [`WriterConfig::max_payload_bytes`], inline or stored in S3 (an item built by
/// the caller with a `PayloadRef` counts the size it names).
fn check_payload_size(item: &OutboxItem, config: &WriterConfig) -> Result<(), LimitError> {
    let bytes = item.payload_ref.as_ref().map_or(item.payload.len(), |r| {
        usize::try_from(r.size).unwrap_or(usize::MAX)
    });
    if bytes > config.max_payload_bytes {
        return Err(LimitError::PayloadTooLarge {
            event_id: item.event_id.clone(),
            event_type: item.event_type.clone(),
            bytes,
            max: config.max_payload_bytes,
        });
    }
    Ok(())
}

/// An outbox item as the transaction writes it.
struct Fitted {
    outbox: OutboxItem,
    /// Its attribute values.
    item: HashMap<String, AttributeValue>,
    /// Its payload, to store before the transaction, when the item refers to it.
    claim_check: Option<ClaimCheck>,
}

/// The outbox item as the transaction writes it: with a payload bucket, an item over DynamoDB's
/// item limit gets its payload's reference in place of the payload. One that fits keeps its
/// payload inline, whatever its future entry's size: the relays store the payload of an entry
/// too large for their target when they publish it, and a small event costs no S3 call.
fn fit_item(mut outbox: OutboxItem, payloads: Option<&PayloadStore>) -> Result<Fitted, WriteError> {
    let encode = |outbox: &OutboxItem| {
        outbox
            .to_item()
            .map_err(|e| WriteError::Encoding(e.to_string()))
    };
    let item = encode(&outbox)?;
    let fits = item_size(&item) <= ITEM_MAX_BYTES || outbox.payload.is_empty();
    let Some(store) = payloads.filter(|_| !fits) else {
        return Ok(Fitted {
            outbox,
            item,
            claim_check: None,
        });
    };
    let payload = std::mem::take(&mut outbox.payload);
    outbox.payload_ref = Some(store.reference(&outbox.event_id, payload.as_bytes()));
    Ok(Fitted {
        item: encode(&outbox)?,
        claim_check: Some(ClaimCheck {
            event_id: outbox.event_id.clone(),
            payload,
        }),
        outbox,
    })
}

/// The event's future EventBridge entry, built in either format the relays may publish (the
/// writer does not know their `EVENT_FORMAT`), so an event no relay could build is refused now.
///
/// Without a payload bucket the larger entry must also fit [`WriterConfig::max_event_entry_bytes`],
/// or no relay could ever publish it. With one, the size refuses nothing: the relays, configured
/// with the same bucket, store the payload of an entry too large for their target in S3 and
/// publish its reference, which always fits (an item over 400 KB has its payload stored here).
fn check_event_size(
    item: &OutboxItem,
    config: &WriterConfig,
    with_payload_bucket: bool,
) -> Result<(), WriteError> {
    let mut bytes = 0;
    for encoding in [
        Encoding::envelope(),
        Encoding::cloudevents(&config.event_source),
    ] {
        let entry = OutboundEvent::from_item(item, &encoding).map_err(|e| InputError::Event {
            event_type: item.event_type.clone(),
            reason: e.to_string(),
        })?;
        bytes = bytes.max(entry.entry_size(&config.event_source));
    }
    if !with_payload_bucket && bytes > config.max_event_entry_bytes {
        return Err(LimitError::EventTooLarge {
            event_id: item.event_id.clone(),
            event_type: item.event_type.clone(),
            bytes,
            max: config.max_event_entry_bytes,
        }
        .into());
    }
    Ok(())
}

fn expression_size(
    update: Option<&str>,
    condition: Option<&str>,
    values: Option<&HashMap<String, AttributeValue>>,
) -> usize {
    update.map_or(0, str::len)
        + condition.map_or(0, str::len)
        + values.map_or(0, |v| v.values().map(value_size).sum())
}

/// The `PK`/`SK` of an item or key map, for error messages (empty when absent or not strings).
fn key_of(item: &HashMap<String, AttributeValue>) -> ItemKey {
    let text = |name: &str| {
        item.get(name)
            .and_then(|v| v.as_s().ok())
            .cloned()
            .unwrap_or_default()
    };
    ItemKey {
        pk: text(attr::PK),
        sk: text(attr::SK),
    }
}

/// Maps a failed `TransactWriteItems` call to a typed error.
pub(crate) fn map_sdk_error(
    err: SdkError<TransactWriteItemsError, HttpResponse>,
    outcomes: &[(ItemKey, ConditionFailure)],
) -> WriteError {
    match err.as_service_error() {
        Some(TransactWriteItemsError::TransactionCanceledException(cancelled)) => map_cancellation(
            cancelled.cancellation_reasons(),
            outcomes,
            cancelled.message(),
        ),
        Some(TransactWriteItemsError::IdempotentParameterMismatchException(_)) => {
            // Final for this token whatever the status code; named even when the service's
            // answer carried no code.
            let mut failure = SdkFailure::new(TRANSACT_WRITE_ITEMS, err);
            failure.class = ErrorClass::Permanent;
            failure.code = Some(IDEMPOTENT_PARAMETER_MISMATCH.to_owned());
            WriteError::Dynamo(failure)
        }
        _ => WriteError::from_sdk(TRANSACT_WRITE_ITEMS, err),
    }
}

/// Reads cancellation reasons by position. A validation failure wins (the request is wrong and
/// retrying cannot help), then a failed condition (final for this request), then a transaction
/// conflict, then throttling (both retryable).
pub(crate) fn map_cancellation(
    reasons: &[CancellationReason],
    outcomes: &[(ItemKey, ConditionFailure)],
    message: Option<&str>,
) -> WriteError {
    let key_at = |i: usize| outcomes.get(i).map(|(key, _)| key.clone());
    let mut validation = None;
    let mut condition = None;
    let mut conflict = None;
    let mut throttled = None;
    for (i, r) in reasons.iter().enumerate() {
        match r.code() {
            None | Some(reason::NONE) => {}
            Some(reason::CONDITIONAL_CHECK_FAILED) => {
                condition.get_or_insert(i);
            }
            Some(reason::TRANSACTION_CONFLICT) => {
                conflict.get_or_insert(i);
            }
            Some(code) if reason::THROTTLING.contains(&code) => {
                throttled.get_or_insert(i);
            }
            Some(code) => {
                validation.get_or_insert((i, format!("{code}: {}", r.message().unwrap_or(""))));
            }
        }
    }
    if let Some((i, message)) = validation {
        return WriteError::Validation {
            key: key_at(i),
            message,
        };
    }
    if let Some(i) = condition {
        return match outcomes.get(i) {
            Some((key, outcome)) => condition_error(key.clone(), outcome),
            None => WriteError::Validation {
                key: None,
                message: format!("condition failed at unknown position {i}"),
            },
        };
    }
    if let Some(i) = conflict {
        return WriteError::TransactionConflict { key: key_at(i) };
    }
    if let Some(i) = throttled {
        return WriteError::Throttled { key: key_at(i) };
    }
    WriteError::Validation {
        key: None,
        message: format!(
            "transaction cancelled without a reason: {}",
            message.unwrap_or("no message")
        ),
    }
}

fn condition_error(key: ItemKey, outcome: &ConditionFailure) -> WriteError {
    match outcome {
        ConditionFailure::AlreadyExists => WriteError::AlreadyExists { key },
        ConditionFailure::VersionConflict { expected_version } => WriteError::VersionConflict {
            key,
            expected_version: *expected_version,
        },
        ConditionFailure::NotFound => WriteError::NotFound { key },
        ConditionFailure::Failed => WriteError::ConditionFailed { key },
    }
}

/// The `IdempotentParameterMismatch` answer: the token was used for a different request.
pub(crate) fn is_token_mismatch(err: &WriteError) -> bool {
    matches!(err, WriteError::Dynamo(failure) if failure.code.as_deref() == Some(IDEMPOTENT_PARAMETER_MISMATCH))
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_shared::OutboxConfig;
    use outbox_shared::limits::PUT_EVENTS_DEFAULT_MAX_BYTES;

    fn config() -> WriterConfig {
        WriterConfig::new(OutboxConfig::new("orders"), "test.orders")
    }

    fn key(sk: &str) -> ItemKey {
        ItemKey {
            pk: "USER#u".into(),
            sk: sk.into(),
        }
    }

    fn outcomes() -> Vec<(ItemKey, ConditionFailure)> {
        vec![
            (
                key("ORDER#o"),
                ConditionFailure::VersionConflict {
                    expected_version: 4,
                },
            ),
            (key("OUTBOX#e"), ConditionFailure::AlreadyExists),
        ]
    }

    fn reasons(codes: &[&str]) -> Vec<CancellationReason> {
        codes
            .iter()
            .map(|c| CancellationReason::builder().code(*c).build())
            .collect()
    }

    fn event(payload: serde_json::Value) -> NewOutboxEvent {
        NewOutboxEvent {
            partition_key: "USER#u".into(),
            event_type: "Ping".into(),
            aggregate_type: "Test".into(),
            aggregate_id: "a".into(),
            sequence: None,
            payload,
            trace_header: None,
            trace_context: None,
        }
    }

    #[test]
    fn cancellation_reasons_are_read_by_position() {
        let map = |codes: &[&str]| map_cancellation(&reasons(codes), &outcomes(), None);
        assert_eq!(
            map(&["ConditionalCheckFailed", "None"]),
            WriteError::VersionConflict {
                key: key("ORDER#o"),
                expected_version: 4
            }
        );
        assert_eq!(
            map(&["None", "ConditionalCheckFailed"]),
            WriteError::AlreadyExists {
                key: key("OUTBOX#e")
            }
        );
        assert_eq!(
            map(&["None", "TransactionConflict"]),
            WriteError::TransactionConflict {
                key: Some(key("OUTBOX#e"))
            }
        );
        assert_eq!(
            map(&["ThrottlingError", "None"]),
            WriteError::Throttled {
                key: Some(key("ORDER#o"))
            }
        );
        assert!(matches!(
            map(&["None", "ValidationError"]),
            WriteError::Validation { key: Some(k), .. } if k == key("OUTBOX#e")
        ));
    }

    #[test]
    fn final_reasons_win_over_retryable_ones() {
        let map = |codes: &[&str]| map_cancellation(&reasons(codes), &outcomes(), None);
        assert!(matches!(
            map(&["TransactionConflict", "ValidationError"]),
            WriteError::Validation { .. }
        ));
        assert!(matches!(
            map(&["TransactionConflict", "ConditionalCheckFailed"]),
            WriteError::AlreadyExists { .. }
        ));
        assert!(map(&["TransactionConflict", "ThrottlingError"]).is_retryable());
        assert!(matches!(map(&[]), WriteError::Validation { key: None, .. }));
    }

    #[test]
    fn a_transaction_needs_an_event_and_at_most_100_actions() {
        let err = OutboxTransaction::new()
            .prepare(&config(), None, Utc::now())
            .unwrap_err();
        assert_eq!(err, WriteError::InvalidInput(InputError::NoEvents));
        let tx = (0..=TRANSACT_MAX_ACTIONS).fold(OutboxTransaction::new(), |tx, i| {
            tx.event(event(serde_json::json!(i)))
        });
        assert_eq!(tx.len(), 101);
        assert_eq!(
            tx.prepare(&config(), None, Utc::now()).unwrap_err(),
            WriteError::LimitExceeded(LimitError::TooManyActions {
                actions: 101,
                max: 100
            })
        );
        let tx = (0..TRANSACT_MAX_ACTIONS).fold(OutboxTransaction::new(), |tx, i| {
            tx.event(event(serde_json::json!(i)))
        });
        let prepared = tx.prepare(&config(), None, Utc::now()).unwrap();
        assert_eq!(prepared.items.len(), 100);
        assert_eq!(prepared.outcomes.len(), 100);
    }

    #[test]
    fn the_future_entry_size_is_checked_against_the_configured_limit() {
        // A payload that lands just under and just over the default 256 KiB entry once the
        // envelope, source and detail type are added.
        let fits = "x".repeat(PUT_EVENTS_DEFAULT_MAX_BYTES - 1024);
        OutboxTransaction::new()
            .event(event(serde_json::json!(fits)))
            .prepare(&config(), None, Utc::now())
            .unwrap();
        let too_big = "x".repeat(PUT_EVENTS_DEFAULT_MAX_BYTES);
        let err = OutboxTransaction::new()
            .event(event(serde_json::json!(too_big)))
            .prepare(&config(), None, Utc::now())
            .unwrap_err();
        assert!(
            matches!(err, WriteError::LimitExceeded(LimitError::EventTooLarge { max, bytes, .. })
                if max == PUT_EVENTS_DEFAULT_MAX_BYTES && bytes > max),
            "{err}"
        );
    }

    #[test]
    fn an_event_eventbridge_would_refuse_is_refused_before_the_transaction() {
        // Given events whose EventType or TraceHeader EventBridge would refuse (and with it the
        // whole PutEvents call): new ones, and an item built and then changed by hand
        let new = |adjust: fn(&mut NewOutboxEvent)| {
            let mut e = event(serde_json::json!({}));
            adjust(&mut e);
            OutboxTransaction::new().event(e)
        };
        let mut built =
            OutboxItem::pending(event(serde_json::json!({})), &config().outbox, Utc::now())
                .unwrap();
        built.trace_header = Some("t".repeat(501));
        let cases = [
            (
                new(|e| e.event_type = "T".repeat(129)),
                "EventType is 129 characters; EventBridge accepts a DetailType of 1 to 128",
            ),
            (
                new(|e| e.trace_header = Some("t".repeat(501))),
                "TraceHeader is 501 characters; EventBridge accepts a TraceHeader of 1 to 500",
            ),
            (
                new(|e| e.trace_header = Some(String::new())),
                "TraceHeader is 0 characters",
            ),
            (
                OutboxTransaction::new().outbox_item(built),
                "TraceHeader is 501 characters",
            ),
        ];
        for (tx, says) in cases {
            // When it is prepared
            let err = tx.prepare(&config(), None, Utc::now()).unwrap_err();

            // Then it is refused before any call, naming the attribute and the limit, not the
            // value
            assert!(
                matches!(err, WriteError::InvalidInput(InputError::EntryField(_))),
                "{err:?}"
            );
            let text = err.to_string();
            assert!(text.contains(says), "{text}");
            assert!(!text.contains("TT") && !text.contains("tt"), "{text}");
        }
    }

    const BUCKET: &str = "orders-payloads";

    /// A payload store whose client is never called: `prepare` only builds references.
    fn store() -> PayloadStore {
        let s3 = aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::Config::builder()
                .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
                .region(aws_sdk_s3::config::Region::new("us-east-1"))
                .build(),
        );
        PayloadStore::new(s3, BUCKET)
    }

    fn with_bucket() -> WriterConfig {
        let mut config = config();
        config.payload_bucket = Some(BUCKET.into());
        config
    }

    /// An event whose payload's JSON text is `bytes` long.
    fn event_of_bytes(bytes: usize) -> NewOutboxEvent {
        let payload = event(serde_json::json!({"lines": "x".repeat(bytes - 12)}));
        assert_eq!(payload.payload.to_string().len(), bytes);
        payload
    }

    #[test]
    fn with_a_bucket_an_item_over_the_item_limit_refers_to_its_payload() {
        // Given a writer with a payload bucket and an event of 500 KB (more than an item holds)
        let tx = OutboxTransaction::new().event(event_of_bytes(500_000));

        // When the transaction is prepared
        let prepared = tx
            .prepare(&with_bucket(), Some(&store()), Utc::now())
            .unwrap();

        // Then the payload is to be stored under the event's key, and the item refers to it
        let event = &prepared.events[0];
        let [claim_check] = prepared.claim_checks.as_slice() else {
            panic!("one payload to store: {:?}", prepared.claim_checks);
        };
        assert_eq!(claim_check.event_id, event.event_id);
        assert_eq!(claim_check.payload.len(), 500_000);
        assert!(claim_check.payload.starts_with(r#"{"lines":"xxx"#));
        assert_eq!(event.payload, "");
        let reference = event.payload_ref.as_ref().expect("a reference");
        assert_eq!(
            reference.uri,
            format!("s3://{BUCKET}/payloads/{}", event.event_id)
        );
        assert_eq!(reference.size, 500_000);
        assert_eq!(
            reference.sha256,
            outbox_shared::claim_check::sha256_base64(claim_check.payload.as_bytes())
        );
        // And the request's item is the referenced one, a few hundred bytes
        let put = prepared.items[0].put().expect("a put");
        assert!(put.item().contains_key(attr::PAYLOAD_REF));
        assert!(!put.item().contains_key(attr::PAYLOAD));
        assert!(item_size(put.item()) < 1_000, "{}", item_size(put.item()));
    }

    #[test]
    fn with_a_bucket_an_item_that_fits_keeps_its_payload_whatever_its_entry_size() {
        // Given a writer with a payload bucket and an event of 300 KB: its item fits, its
        // 256 KiB EventBridge entry would not (the relays store such a payload when publishing)
        let tx = OutboxTransaction::new().event(event_of_bytes(300_000));

        // When the transaction is prepared
        let prepared = tx
            .prepare(&with_bucket(), Some(&store()), Utc::now())
            .unwrap();

        // Then nothing is to be stored and the payload is inline
        assert!(prepared.claim_checks.is_empty());
        assert_eq!(prepared.events[0].payload.len(), 300_000);
        assert_eq!(prepared.events[0].payload_ref, None);
    }

    #[test]
    fn without_a_bucket_the_limits_refuse_and_say_how_to_accept_larger_payloads() {
        // Given a writer without a payload bucket, one of them accepting 1 MiB entries
        let mut large_entries = config();
        large_entries.max_event_entry_bytes = 1024 * 1024;

        // When a 300 KB and a 500 KB event are prepared
        let entry_err = OutboxTransaction::new()
            .event(event_of_bytes(300_000))
            .prepare(&config(), None, Utc::now())
            .unwrap_err();
        let item_err = OutboxTransaction::new()
            .event(event_of_bytes(500_000))
            .prepare(&large_entries, None, Utc::now())
            .unwrap_err();

        // Then the first is too large for its entry, the second for its item, and both
        // messages name the setting that accepts them
        assert!(
            matches!(
                entry_err,
                WriteError::LimitExceeded(LimitError::EventTooLarge { .. })
            ),
            "{entry_err:?}"
        );
        assert!(
            matches!(
                item_err,
                WriteError::LimitExceeded(LimitError::ItemTooLarge {
                    payload_bucket_would_fit: true,
                    max: ITEM_MAX_BYTES,
                    ..
                })
            ),
            "{item_err:?}"
        );
        for err in [entry_err, item_err] {
            assert!(
                err.to_string().ends_with(
                    "; to accept larger payloads, configure the payload bucket \
                     (WriterConfig::payload_bucket): the writer and the relays store them in S3"
                ),
                "{err}"
            );
        }
    }

    #[test]
    fn a_business_item_over_the_item_limit_gets_no_payload_bucket_advice() {
        let put = Put::builder()
            .table_name("orders")
            .item(attr::PK, AttributeValue::S("USER#u".into()))
            .item(attr::SK, AttributeValue::S("BLOB#1".into()))
            .item("Blob", AttributeValue::S("x".repeat(ITEM_MAX_BYTES)))
            .build()
            .unwrap();
        let err = OutboxTransaction::new()
            .put(put, ConditionFailure::AlreadyExists)
            .event(event(serde_json::json!({})))
            .prepare(&with_bucket(), Some(&store()), Utc::now())
            .unwrap_err();
        assert!(
            matches!(
                &err,
                WriteError::LimitExceeded(LimitError::ItemTooLarge {
                    payload_bucket_would_fit: false,
                    ..
                })
            ),
            "{err:?}"
        );
        assert!(!err.to_string().contains("payload bucket"), "{err}");
    }

    #[test]
    fn a_payload_over_the_largest_accepted_is_refused_naming_sizes_and_setting() {
        for (config, payloads) in [(config(), None), (with_bucket(), Some(store()))] {
            // Given a writer accepting payloads up to 1,000 bytes
            let config = WriterConfig {
                max_payload_bytes: 1_000,
                ..config
            };

            // When an event of 1,001 bytes is prepared
            let err = OutboxTransaction::new()
                .event(event_of_bytes(1_001))
                .prepare(&config, payloads.as_ref(), Utc::now())
                .unwrap_err();

            // Then it is refused, naming both sizes and the setting
            assert!(
                matches!(
                    &err,
                    WriteError::LimitExceeded(LimitError::PayloadTooLarge {
                        bytes: 1_001,
                        max: 1_000,
                        ..
                    })
                ),
                "{err:?}"
            );
            let text = err.to_string();
            assert!(
                text.contains(
                    "has a 1001-byte payload, more than the 1000 bytes the writer \
                     accepts (WriterConfig::max_payload_bytes)"
                ),
                "{text}"
            );
            // And one of 1,000 bytes is not
            OutboxTransaction::new()
                .event(event_of_bytes(1_000))
                .prepare(&config, payloads.as_ref(), Utc::now())
                .unwrap();
        }
    }

    #[test]
    fn the_transaction_counts_the_referenced_items_not_the_payloads() {
        // Given 20 events of 500 KB each: 10 MB of payloads, 2.5 times what a transaction holds
        let tx = (0..20).fold(OutboxTransaction::new(), |tx, _| {
            tx.event(event_of_bytes(500_000))
        });

        // When the transaction is prepared with a payload bucket
        let prepared = tx
            .prepare(&with_bucket(), Some(&store()), Utc::now())
            .unwrap();

        // Then every payload is to be stored, and the transaction carries 20 small items
        assert_eq!(prepared.claim_checks.len(), 20);
        assert_eq!(prepared.items.len(), 20);

        // And business items still count in full: with 11 items of 390 KB it is too large
        let fat_put = |i: usize| {
            Put::builder()
                .table_name("orders")
                .item(attr::PK, AttributeValue::S("USER#u".into()))
                .item(attr::SK, AttributeValue::S(format!("BLOB#{i}")))
                .item("Blob", AttributeValue::S("x".repeat(390 * 1024)))
                .build()
                .unwrap()
        };
        let err = (0..11)
            .fold(
                OutboxTransaction::new().event(event_of_bytes(500_000)),
                |tx, i| tx.put(fat_put(i), ConditionFailure::AlreadyExists),
            )
            .prepare(&with_bucket(), Some(&store()), Utc::now())
            .unwrap_err();
        assert!(
            matches!(
                err,
                WriteError::LimitExceeded(LimitError::TransactionTooLarge { bytes, .. })
                    // 11 items of 390 KB and their keys, and the event's item of under 2 KB
                    if bytes > TRANSACT_MAX_BYTES && bytes < 11 * (390 * 1024 + 100) + 2_000
            ),
            "{err:?}"
        );
    }

    #[test]
    fn a_payload_to_store_is_not_in_its_debug_text() {
        let claim_check = ClaimCheck {
            event_id: "e1".into(),
            payload: r#"{"email":"someone@example.com"}"#.into(),
        };
        let text = format!("{claim_check:?}");
        assert_eq!(text, r#"ClaimCheck { event_id: "e1", payload_bytes: 31 }"#);
    }

    #[test]
    fn malformed_event_ids_are_rejected() {
        let mut bad = event(serde_json::json!({}));
        bad.aggregate_id = "a#b".into();
        let err = OutboxTransaction::new()
            .event(bad)
            .prepare(&config(), None, Utc::now())
            .unwrap_err();
        assert!(matches!(err, WriteError::InvalidInput(InputError::Id(_))));
    }
}
