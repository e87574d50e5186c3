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

use aws_sdk_dynamodb::types::{
    AttributeValue, ConditionCheck, Delete, Put, TransactWriteItem, Update,
};
use chrono::{DateTime, Utc};
use outbox_shared::claim_check::PayloadStore;
use outbox_shared::limits::{TRANSACT_MAX_ACTIONS, TRANSACT_MAX_BYTES};
use outbox_shared::schema::attr;
use outbox_shared::{ItemKey, NewOutboxEvent, OutboxItem};

use crate::config::WriterConfig;
use crate::error::{InputError, LimitError, WriteError};
use crate::size::{item_size, value_size};

mod cancellation;
mod limits;
mod prepared;

pub(crate) use cancellation::is_token_mismatch;
use limits::{Fitted, check_event_size, check_item_size, check_payload_size, fit_item};
pub use prepared::CommittedTransaction;
pub(crate) use prepared::{ClaimCheck, Prepared};

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

#[cfg(test)]
mod tests;
