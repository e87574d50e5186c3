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

use std::collections::HashMap;

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{
    AttributeValue, CancellationReason, ConditionCheck, Delete, Put, TransactWriteItem, Update,
};
use chrono::{DateTime, Utc};
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

#[derive(Debug, Clone)]
enum EventSpec {
    New(NewOutboxEvent),
    Built(OutboxItem),
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
        self.events.push(EventSpec::New(event));
        self
    }

    /// Adds an outbox event item already built with [`OutboxItem::pending`] (when the caller needs
    /// the event id before the commit, e.g. to store it in another item of the transaction).
    pub fn outbox_item(mut self, item: OutboxItem) -> Self {
        self.events.push(EventSpec::Built(item));
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

    /// Builds the request: outbox items for the events, then every limit checked.
    ///
    /// # Errors
    /// [`WriteError::InvalidInput`] or [`WriteError::LimitExceeded`]; nothing has been sent.
    pub(crate) fn prepare(
        self,
        config: &WriterConfig,
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
                check_item_size(&action.key, action.bytes)?;
            }
            total_bytes += action.bytes;
            items.push(action.item);
            outcomes.push((action.key, action.on_condition_failed));
        }
        let mut events = Vec::with_capacity(self.events.len());
        for spec in self.events {
            let outbox = match spec {
                EventSpec::Built(item) => {
                    item.check_entry_fields().map_err(InputError::EntryField)?;
                    item
                }
                EventSpec::New(event) => {
                    OutboxItem::pending(event, &config.outbox, now).map_err(InputError::from)?
                }
            };
            check_event_size(&outbox, config)?;
            let item = outbox
                .to_item()
                .map_err(|e| WriteError::Encoding(e.to_string()))?;
            let bytes = item_size(&item);
            check_item_size(&outbox.key(), bytes)?;
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
    pub(crate) client_request_token: Option<String>,
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

fn check_item_size(key: &ItemKey, bytes: usize) -> Result<(), LimitError> {
    if bytes > ITEM_MAX_BYTES {
        return Err(LimitError::ItemTooLarge {
            key: key.clone(),
            bytes,
            max: ITEM_MAX_BYTES,
        });
    }
    Ok(())
}

/// The event's future EventBridge entry must fit, or no relay could ever publish it: in either
/// format the relays may publish (the writer does not know their `EVENT_FORMAT`), the larger.
fn check_event_size(item: &OutboxItem, config: &WriterConfig) -> Result<(), WriteError> {
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
    if bytes > config.max_event_entry_bytes {
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
            .prepare(&config(), Utc::now())
            .unwrap_err();
        assert_eq!(err, WriteError::InvalidInput(InputError::NoEvents));
        let tx = (0..=TRANSACT_MAX_ACTIONS).fold(OutboxTransaction::new(), |tx, i| {
            tx.event(event(serde_json::json!(i)))
        });
        assert_eq!(tx.len(), 101);
        assert_eq!(
            tx.prepare(&config(), Utc::now()).unwrap_err(),
            WriteError::LimitExceeded(LimitError::TooManyActions {
                actions: 101,
                max: 100
            })
        );
        let tx = (0..TRANSACT_MAX_ACTIONS).fold(OutboxTransaction::new(), |tx, i| {
            tx.event(event(serde_json::json!(i)))
        });
        let prepared = tx.prepare(&config(), Utc::now()).unwrap();
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
            .prepare(&config(), Utc::now())
            .unwrap();
        let too_big = "x".repeat(PUT_EVENTS_DEFAULT_MAX_BYTES);
        let err = OutboxTransaction::new()
            .event(event(serde_json::json!(too_big)))
            .prepare(&config(), Utc::now())
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
            let err = tx.prepare(&config(), Utc::now()).unwrap_err();

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

    #[test]
    fn malformed_event_ids_are_rejected() {
        let mut bad = event(serde_json::json!({}));
        bad.aggregate_id = "a#b".into();
        let err = OutboxTransaction::new()
            .event(bad)
            .prepare(&config(), Utc::now())
            .unwrap_err();
        assert!(matches!(err, WriteError::InvalidInput(InputError::Id(_))));
    }
}
