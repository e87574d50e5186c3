//! [`OutboxWriter`]: the DynamoDB adapter that commits business changes with their outbox events,
//! and stores first in S3 the payloads too large for an outbox item (the claim check).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, MultiRegionConsistency, Put, Update};
use backon::Retryable as _;
use chrono::{DateTime, Utc};
use outbox_shared::bucket_owner;
use outbox_shared::claim_check::{PayloadStore, Stored};
use outbox_shared::item::validate_id;
use outbox_shared::limits::CLIENT_REQUEST_TOKEN_MAX_LEN;
use outbox_shared::region::Region;
use outbox_shared::schema::{self, attr, entity};
use outbox_shared::time::format_timestamp;
use outbox_shared::{ConfigError, ItemKey, NewOutboxEvent, OutboxItem};
use sha2::{Digest, Sha256};
use tracing::debug;

use crate::config::WriterConfig;
use crate::error::{InputError, WriteError};
use crate::order::{
    CreatedOrder, INITIAL_VERSION, NewOrder, ORDER_AGGREGATE, ORDER_CREATED, ORDER_STATUS_CHANGED,
    OrderCreated, OrderStatus, OrderStatusChanged, UpdatedOrder, order_item,
};
use crate::trace::{TraceHeader, current_trace_context, trace_context_or_current};
use crate::transaction::{
    ClaimCheck, CommittedTransaction, ConditionFailure, OutboxTransaction, Prepared,
    is_token_mismatch,
};

/// The error code of a request DynamoDB refused as invalid.
const VALIDATION_CODE: &str = "ValidationException";

/// The region of the writer's DynamoDB client: a global table's events are stamped with it.
fn writer_region(client: &Client) -> Result<Region, ConfigError> {
    let region = client.config().region().ok_or(ConfigError::Empty {
        setting: "region (the DynamoDB client's, for a global table)",
    })?;
    Region::new(region.as_ref()).map_err(|e| ConfigError::OutOfRange {
        setting: "region (the DynamoDB client's, for a global table)",
        detail: e.to_string(),
    })
}

/// Writes orders (or any entity, through [`OutboxWriter::commit`]) together with their outbox
/// events. Cheap to clone: the SDK clients and the configuration are shared.
#[derive(Debug, Clone)]
pub struct OutboxWriter {
    client: Client,
    /// The payload bucket, when [`WriterConfig::payload_bucket`] names one.
    payloads: Option<PayloadStore>,
    config: Arc<WriterConfig>,
    /// Set once the table was found to take transactions ([`WriterConfig::global_table`]: not a
    /// multi-region strong consistency table), so it is read once, not on every write.
    table_checked: Arc<tokio::sync::OnceCell<()>>,
}

impl OutboxWriter {
    /// A writer on `client`, without a payload bucket (for one, see
    /// [`from_sdk_config`](Self::from_sdk_config) and [`with_s3`](Self::with_s3)).
    ///
    /// # Errors
    /// [`ConfigError`] naming the first invalid setting, or the payload bucket when one is
    /// configured: this writer would have no S3 client to store payloads with.
    pub fn new(client: Client, config: WriterConfig) -> Result<Self, ConfigError> {
        if config.payload_bucket.is_some() {
            return Err(ConfigError::OutOfRange {
                setting: "payload bucket",
                detail: "is set, but OutboxWriter::new has no S3 client to store payloads \
                         with: build the writer with OutboxWriter::from_sdk_config or \
                         OutboxWriter::with_s3"
                    .to_owned(),
            });
        }
        Self::build(client, None, config)
    }

    /// A writer whose DynamoDB client and, when [`WriterConfig::payload_bucket`] names a bucket,
    /// S3 client are built from one shared configuration (region, credentials, retries, the
    /// endpoint variables of a local emulator).
    ///
    /// # Errors
    /// [`ConfigError`] naming the first invalid setting.
    pub fn from_sdk_config(
        sdk_config: &aws_types::SdkConfig,
        config: WriterConfig,
    ) -> Result<Self, ConfigError> {
        let s3 = config
            .payload_bucket
            .as_ref()
            .map(|_| aws_sdk_s3::Client::new(sdk_config));
        Self::build(Client::new(sdk_config), s3, config)
    }

    /// A writer on clients the caller built: `s3` stores the payloads too large for an item in
    /// [`WriterConfig::payload_bucket`] (it is not called without one).
    ///
    /// # Errors
    /// [`ConfigError`] naming the first invalid setting.
    pub fn with_s3(
        client: Client,
        s3: aws_sdk_s3::Client,
        config: WriterConfig,
    ) -> Result<Self, ConfigError> {
        Self::build(client, Some(s3), config)
    }

    fn build(
        client: Client,
        s3: Option<aws_sdk_s3::Client>,
        mut config: WriterConfig,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        if config.global_table {
            config.outbox.origin_region = Some(writer_region(&client)?);
        }
        let payloads = config.payload_bucket.as_ref().zip(s3).map(|(bucket, s3)| {
            let s3 = bucket_owner::client(s3, config.expected_bucket_owner.as_ref());
            PayloadStore::new(s3, bucket.clone())
        });
        Ok(Self {
            client,
            payloads,
            config: Arc::new(config),
            table_checked: Arc::default(),
        })
    }

    pub fn config(&self) -> &WriterConfig {
        &self.config
    }

    /// Checks `tx` and stores the payloads too large for their items in the payload bucket: what
    /// every write does before its transaction is sent (once, however often that is retried).
    async fn prepare(
        &self,
        tx: OutboxTransaction,
        now: DateTime<Utc>,
    ) -> Result<Prepared, WriteError> {
        self.check_table().await?;
        let prepared = tx.prepare(&self.config, self.payloads.as_ref(), now)?;
        self.store_payloads(&prepared.claim_checks).await?;
        Ok(prepared)
    }

    /// Stores each payload under its event's key, concurrently. A key already holding an object
    /// (the same event's payload, stored before) is left as it is.
    ///
    /// # Errors
    /// [`WriteError::PayloadNotStored`] for the first payload S3 did not store.
    async fn store_payloads(&self, claim_checks: &[ClaimCheck]) -> Result<(), WriteError> {
        let Some(store) = &self.payloads else {
            // `prepare` refers to no payload without a payload bucket.
            return Ok(());
        };
        futures::future::try_join_all(claim_checks.iter().map(|claim_check| async move {
            let event_id = &claim_check.event_id;
            let (reference, stored) = store
                .put(event_id, claim_check.payload.as_bytes())
                .await
                .map_err(|source| WriteError::PayloadNotStored {
                    event_id: event_id.clone(),
                    source,
                })?;
            debug!(
                %event_id,
                uri = %reference.uri,
                bytes = reference.size,
                already_there = stored == Stored::AlreadyThere,
                "payload stored in S3"
            );
            Ok::<_, WriteError>(())
        }))
        .await?;
        Ok(())
    }

    /// Commits business actions and outbox events atomically, retrying transaction conflicts and
    /// throttling within [`WriterConfig::transaction_retry`]. A payload too large for its outbox
    /// item is stored in the payload bucket first ([`WriterConfig::payload_bucket`]).
    ///
    /// # Errors
    /// [`WriteError::InvalidInput`]/[`WriteError::LimitExceeded`] before any call (nothing written);
    /// [`WriteError::PayloadNotStored`] (nothing written); the cancellation mapped by position; or
    /// the classified SDK error.
    pub async fn commit(&self, tx: OutboxTransaction) -> Result<CommittedTransaction, WriteError> {
        let prepared = self.prepare(tx, Utc::now()).await?;
        (|| prepared.send(&self.client, true))
            .retry(self.config.transaction_retry)
            .sleep(tokio::time::sleep)
            .when(WriteError::is_transient_rejection)
            .notify(log_retry("commit"))
            .await
            .map_err(|e| self.refused_for_strong_consistency(e))
    }

    /// On a global table, reads the table once (`DescribeTable`) before the first write: a
    /// multi-region strong consistency table cannot take the writer's transactions, and is
    /// refused with [`WriteError::StrongConsistencyTable`] before anything is written. A failed
    /// read is returned and tried again on the next write.
    async fn check_table(&self) -> Result<(), WriteError> {
        if !self.config.global_table {
            return Ok(());
        }
        let table = &self.config.outbox.table_name;
        self.table_checked
            .get_or_try_init(|| async {
                let described = self
                    .client
                    .describe_table()
                    .table_name(table)
                    .send()
                    .await
                    .map_err(|e| WriteError::from_sdk("DescribeTable", e))?;
                let strong = described.table().and_then(|t| t.multi_region_consistency())
                    == Some(&MultiRegionConsistency::Strong);
                if strong {
                    return Err(WriteError::StrongConsistencyTable {
                        table: table.clone(),
                    });
                }
                Ok(())
            })
            .await
            .map(|_| ())
    }

    /// `err`, or [`WriteError::StrongConsistencyTable`] when DynamoDB refused the transaction
    /// because the table is a multi-region strong consistency one (a table converted after the
    /// writer's first look). AWS documents that the transaction APIs return an error on such a
    /// table without documenting its text: a validation error naming strong consistency is read
    /// as that refusal.
    fn refused_for_strong_consistency(&self, err: WriteError) -> WriteError {
        let message = match &err {
            WriteError::Validation { message, .. } => Some(message.as_str()),
            WriteError::Dynamo(failure) if failure.code.as_deref() == Some(VALIDATION_CODE) => {
                Some(failure.message.as_str())
            }
            _ => None,
        };
        let about_mrsc = message.is_some_and(|m| {
            let m = m.to_ascii_lowercase();
            m.contains("strong consistency")
                || m.contains("strongly consistent")
                || m.contains("mrsc")
        });
        if about_mrsc {
            WriteError::StrongConsistencyTable {
                table: self.config.outbox.table_name.clone(),
            }
        } else {
            err
        }
    }

    /// Creates an order and its `OrderCreated` event in one transaction.
    ///
    /// The order is written only if its key is new. With an idempotency key, an idempotency record
    /// (`SK = IDEMPOTENCY#{key}`) joins the transaction, and a repeated create with the same key
    /// and the same content returns the first create's ids with `replayed: true`, writing nothing.
    ///
    /// # Errors
    /// - [`WriteError::InvalidInput`] / [`WriteError::LimitExceeded`]: rejected before any call.
    /// - [`WriteError::AlreadyExists`]: an order with this id exists; nothing was written.
    /// - [`WriteError::IdempotencyKeyReused`]: the key was used for a different request.
    /// - [`WriteError::TransactionConflict`] / [`WriteError::Throttled`]: still conflicting after
    ///   [`WriterConfig::transaction_retry`].
    /// - [`WriteError::Validation`] / [`WriteError::Dynamo`]: DynamoDB refused the call.
    /// - [`WriteError::PayloadNotStored`]: S3 did not store a payload too large for the outbox
    ///   item; nothing was written.
    pub async fn create_order_with_outbox(
        &self,
        user_id: &str,
        order: NewOrder,
    ) -> Result<CreatedOrder, WriteError> {
        validate_id("user id", user_id).map_err(InputError::from)?;
        let amount_cents = order.validate()?;
        let order_id = order
            .order_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let now = Utc::now();
        let created_at = format_timestamp(now);
        let table = &self.config.outbox.table_name;

        let payload = OrderCreated {
            order_id: order_id.clone(),
            user_id: user_id.to_owned(),
            items: order.items.clone(),
            amount_cents,
            status: OrderStatus::Created,
            version: INITIAL_VERSION,
            created_at: created_at.clone(),
        };
        let event = OutboxItem::pending(
            order_event(
                user_id,
                &order_id,
                ORDER_CREATED,
                INITIAL_VERSION,
                &payload,
                TraceHeader::or_from_environment(order.trace_header.as_ref()),
                trace_context_or_current(order.trace_context.as_ref()),
            )?,
            &self.config.outbox,
            now,
        )
        .map_err(InputError::from)?;
        let event_id = event.event_id.clone();

        let mut tx = OutboxTransaction::new();
        let idempotency = order
            .idempotency_key
            .as_deref()
            .map(|key| Idempotency::new(user_id, key, order.request_hash(user_id)));
        if let Some(idem) = &idempotency {
            // First position, so that when a replay also collides on the order (same order id),
            // the cancellation reports the idempotency record.
            tx = tx
                .put(
                    self.idempotency_put(idem, &order_id, &event_id, now)?,
                    ConditionFailure::AlreadyExists,
                )
                .client_request_token(client_request_token(table, user_id, &idem.key));
        }
        let order_put = put_if_new(
            table,
            order_item(user_id, &order_id, &order.items, amount_cents, &created_at)?,
        )?;
        tx = tx
            .put(order_put, ConditionFailure::AlreadyExists)
            .outbox_item(event);
        let prepared = self.prepare(tx, now).await?;

        // Cleared once a reused token turns out to guard nothing (see below).
        let send_token = AtomicBool::new(true);
        let attempt = || async {
            let err = match prepared
                .send(&self.client, send_token.load(Ordering::Relaxed))
                .await
            {
                Ok(_) => {
                    debug!(%order_id, %event_id, "order created");
                    return Ok(CreatedOrder {
                        order_id: order_id.clone(),
                        event_id: event_id.clone(),
                        replayed: false,
                    });
                }
                Err(err) => self.refused_for_strong_consistency(err),
            };
            if let Some(idem) = &idempotency {
                let token_reused = is_token_mismatch(&err);
                let lost_to_record =
                    matches!(&err, WriteError::AlreadyExists { key } if *key == idem.record_key);
                if token_reused || lost_to_record {
                    if let Some(created) = self.replay(idem).await.map_err(Attempt::Final)? {
                        return Ok(created);
                    }
                    // No record: the earlier request with this token did not commit (or its
                    // record expired), so the token guards nothing; the record's condition still
                    // does. Without a token of ours the SDK sends a fresh one of its own.
                    send_token.store(false, Ordering::Relaxed);
                    return Err(Attempt::Retry(err));
                }
            }
            Err(if err.is_transient_rejection() {
                Attempt::Retry(err)
            } else {
                Attempt::Final(err)
            })
        };
        attempt
            .retry(self.config.transaction_retry)
            .sleep(tokio::time::sleep)
            .when(Attempt::is_retry)
            .notify(|attempt: &Attempt, delay| log_retry("create")(attempt.error(), delay))
            .await
            .map_err(Attempt::into_error)
    }

    /// Changes an order's status with optimistic concurrency, emitting `OrderStatusChanged` with
    /// `Sequence` = the new `Version` in the same transaction.
    ///
    /// Reads the order (consistently), then writes `Status`, `Version + 1` and `UpdatedAt` under the
    /// condition that `Version` is still the one read. Version and transaction conflicts are retried
    /// from the read, with exponential backoff and full jitter, within
    /// [`WriterConfig::update_retry`].
    ///
    /// # Errors
    /// - [`WriteError::NotFound`]: no such order.
    /// - [`WriteError::VersionConflict`] / [`WriteError::TransactionConflict`]: still contended
    ///   after the retry bound.
    /// - [`WriteError::MalformedItem`]: the stored order lacks a numeric `Version` or a `Status`.
    /// - [`WriteError::InvalidInput`] / [`WriteError::LimitExceeded`] / [`WriteError::Dynamo`].
    ///
    /// The event carries the Lambda invocation's trace header (`_X_AMZN_TRACE_ID`) when the caller
    /// runs in Lambda; for another trace context, build the event with [`OutboxTransaction`].
    pub async fn update_order_status_with_outbox(
        &self,
        user_id: &str,
        order_id: &str,
        status: OrderStatus,
    ) -> Result<UpdatedOrder, WriteError> {
        validate_id("user id", user_id).map_err(InputError::from)?;
        validate_id("order id", order_id).map_err(InputError::from)?;
        let mut attempts: u32 = 0;
        let attempt = || {
            attempts += 1;
            let attempt = attempts;
            async move {
                let mut updated = self.try_update_status(user_id, order_id, status).await?;
                updated.attempts = attempt;
                Ok(updated)
            }
        };
        let updated = attempt
            .retry(self.config.update_retry)
            .sleep(tokio::time::sleep)
            .when(|e: &WriteError| {
                matches!(e, WriteError::VersionConflict { .. }) || e.is_transient_rejection()
            })
            .notify(log_retry("status update"))
            .await?;
        debug!(
            order_id,
            event_id = %updated.event_id,
            version = updated.version,
            attempts = updated.attempts,
            "order status changed"
        );
        Ok(updated)
    }

    async fn try_update_status(
        &self,
        user_id: &str,
        order_id: &str,
        status: OrderStatus,
    ) -> Result<UpdatedOrder, WriteError> {
        let table = &self.config.outbox.table_name;
        let key = key_map(&schema::user_pk(user_id), &schema::order_sk(order_id));
        let item_key = ItemKey {
            pk: schema::user_pk(user_id),
            sk: schema::order_sk(order_id),
        };
        let current = self
            .client
            .get_item()
            .table_name(table)
            .set_key(Some(key.clone()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| WriteError::from_sdk("GetItem", e))?;
        let Some(current) = current.item() else {
            return Err(WriteError::NotFound { key: item_key });
        };
        let version = read_number(current, attr::VERSION, &item_key)?;
        let previous_status = read_text(current, attr::STATUS, &item_key)?;
        let next = version
            .checked_add(1)
            .ok_or(InputError::VersionOverflow { version })?;
        let changed_at = format_timestamp(Utc::now());

        let update = Update::builder()
            .table_name(table)
            .set_key(Some(key))
            .update_expression("SET #status = :status, #version = :next, #updated = :now")
            .condition_expression("#version = :expected")
            .expression_attribute_names("#status", attr::STATUS)
            .expression_attribute_names("#version", attr::VERSION)
            .expression_attribute_names("#updated", attr::UPDATED_AT)
            .expression_attribute_values(":status", AttributeValue::S(status.as_str().to_owned()))
            .expression_attribute_values(":next", AttributeValue::N(next.to_string()))
            .expression_attribute_values(":now", AttributeValue::S(changed_at.clone()))
            .expression_attribute_values(":expected", AttributeValue::N(version.to_string()))
            .build()
            .map_err(|e| WriteError::Encoding(e.to_string()))?;
        let payload = OrderStatusChanged {
            order_id: order_id.to_owned(),
            user_id: user_id.to_owned(),
            previous_status: previous_status.clone(),
            status,
            version: next,
            changed_at,
        };
        let tx = OutboxTransaction::new()
            .update(
                update,
                ConditionFailure::VersionConflict {
                    expected_version: version,
                },
            )
            .event(order_event(
                user_id,
                order_id,
                ORDER_STATUS_CHANGED,
                next,
                &payload,
                TraceHeader::from_lambda_environment(),
                current_trace_context(),
            )?);
        let committed = self.commit_once(tx).await?;
        let event_id = committed
            .events
            .first()
            .map(|e| e.event_id.clone())
            .unwrap_or_default();
        Ok(UpdatedOrder {
            order_id: order_id.to_owned(),
            event_id,
            version: next,
            previous_status,
            status,
            attempts: 1,
        })
    }

    async fn commit_once(&self, tx: OutboxTransaction) -> Result<CommittedTransaction, WriteError> {
        let prepared = self.prepare(tx, Utc::now()).await?;
        prepared
            .send(&self.client, true)
            .await
            .map_err(|e| self.refused_for_strong_consistency(e))
    }

    fn idempotency_put(
        &self,
        idem: &Idempotency,
        order_id: &str,
        event_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Put, WriteError> {
        let s = |v: &str| AttributeValue::S(v.to_owned());
        let retention =
            i64::try_from(self.config.outbox.ttl_retention.as_secs()).unwrap_or(i64::MAX);
        let mut item = key_map(&idem.record_key.pk, &idem.record_key.sk);
        item.extend([
            (attr::ENTITY_TYPE.to_owned(), s(entity::IDEMPOTENCY)),
            (attr::IDEMPOTENCY_KEY.to_owned(), s(&idem.key)),
            (attr::REQUEST_HASH.to_owned(), s(&idem.request_hash)),
            (attr::ORDER_ID.to_owned(), s(order_id)),
            (attr::EVENT_ID.to_owned(), s(event_id)),
            (attr::CREATED_AT.to_owned(), s(&format_timestamp(now))),
            // Keys are remembered as long as the events they guard.
            (
                attr::TTL.to_owned(),
                AttributeValue::N(now.timestamp().saturating_add(retention).to_string()),
            ),
        ]);
        put_if_new(&self.config.outbox.table_name, item)
    }

    /// Reads the idempotency record (consistently) and returns the first create's result, or
    /// `None` when there is no record.
    async fn replay(&self, idem: &Idempotency) -> Result<Option<CreatedOrder>, WriteError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.config.outbox.table_name)
            .set_key(Some(key_map(&idem.record_key.pk, &idem.record_key.sk)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| WriteError::from_sdk("GetItem", e))?;
        let Some(record) = out.item() else {
            return Ok(None);
        };
        let key = &idem.record_key;
        if read_text(record, attr::REQUEST_HASH, key)? != idem.request_hash {
            return Err(WriteError::IdempotencyKeyReused {
                idempotency_key: idem.key.clone(),
            });
        }
        let created = CreatedOrder {
            order_id: read_text(record, attr::ORDER_ID, key)?,
            event_id: read_text(record, attr::EVENT_ID, key)?,
            replayed: true,
        };
        debug!(order_id = %created.order_id, event_id = %created.event_id, "create replayed");
        Ok(Some(created))
    }
}

/// An idempotent create's key, record and request digest.
#[derive(Debug)]
struct Idempotency {
    key: String,
    record_key: ItemKey,
    request_hash: String,
}

impl Idempotency {
    fn new(user_id: &str, key: &str, request_hash: String) -> Self {
        Self {
            key: key.to_owned(),
            record_key: ItemKey {
                pk: schema::user_pk(user_id),
                sk: schema::idempotency_sk(key),
            },
            request_hash,
        }
    }
}

/// One failed attempt of a create: retried within the bound, or final.
#[derive(Debug)]
enum Attempt {
    Retry(WriteError),
    Final(WriteError),
}

impl Attempt {
    fn is_retry(&self) -> bool {
        matches!(self, Self::Retry(_))
    }

    fn error(&self) -> &WriteError {
        match self {
            Self::Retry(e) | Self::Final(e) => e,
        }
    }

    fn into_error(self) -> WriteError {
        match self {
            Self::Retry(e) | Self::Final(e) => e,
        }
    }
}

/// Logs a retry before its delay is slept.
fn log_retry(what: &'static str) -> impl Fn(&WriteError, Duration) {
    move |err, delay| {
        debug!(what, delay_ms = delay.as_millis(), error = %err, "retrying after a conflict");
    }
}

/// A `ClientRequestToken` for an idempotent create: a digest of table, user and key, so every
/// retry of one logical create sends the same token, within DynamoDB's length limit.
pub(crate) fn client_request_token(table: &str, user_id: &str, key: &str) -> String {
    let digest = Sha256::digest(format!("{table}\u{0}{user_id}\u{0}{key}"));
    let mut token = hex::encode(digest);
    token.truncate(CLIENT_REQUEST_TOKEN_MAX_LEN.min(32));
    token
}

fn order_event(
    user_id: &str,
    order_id: &str,
    event_type: &str,
    sequence: u64,
    payload: &impl serde::Serialize,
    trace_header: Option<TraceHeader>,
    trace_context: Option<outbox_shared::TraceContext>,
) -> Result<NewOutboxEvent, WriteError> {
    Ok(NewOutboxEvent {
        partition_key: schema::user_pk(user_id),
        event_type: event_type.to_owned(),
        aggregate_type: ORDER_AGGREGATE.to_owned(),
        aggregate_id: order_id.to_owned(),
        sequence: Some(sequence),
        payload: serde_json::to_value(payload).map_err(|e| WriteError::Encoding(e.to_string()))?,
        trace_header: trace_header.map(|h| h.as_str().to_owned()),
        trace_context,
    })
}

fn put_if_new(table: &str, item: HashMap<String, AttributeValue>) -> Result<Put, WriteError> {
    Put::builder()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression("attribute_not_exists(#pk)")
        .expression_attribute_names("#pk", attr::PK)
        .build()
        .map_err(|e| WriteError::Encoding(e.to_string()))
}

fn key_map(pk: &str, sk: &str) -> HashMap<String, AttributeValue> {
    HashMap::from([
        (attr::PK.to_owned(), AttributeValue::S(pk.to_owned())),
        (attr::SK.to_owned(), AttributeValue::S(sk.to_owned())),
    ])
}

fn read_text(
    item: &HashMap<String, AttributeValue>,
    name: &str,
    key: &ItemKey,
) -> Result<String, WriteError> {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .ok_or_else(|| WriteError::MalformedItem {
            key: key.clone(),
            reason: format!("{name} is missing or not a string"),
        })
}

fn read_number(
    item: &HashMap<String, AttributeValue>,
    name: &str,
    key: &ItemKey,
) -> Result<u64, WriteError> {
    item.get(name)
        .and_then(|v| v.as_n().ok())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| WriteError::MalformedItem {
            key: key.clone(),
            reason: format!("{name} is missing or not a non-negative integer"),
        })
}

#[cfg(test)]
mod tests;
