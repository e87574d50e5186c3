//! The idempotency store: makes a consumer's side effects happen once per key although the relay
//! delivers at least once.
//!
//! One record per key on its own table. [`IdempotencyStore::run`]:
//! 1. claims the key with a conditional upsert of `IN_PROGRESS`
//!    (`attribute_not_exists(pk) OR expiry < :now`) carrying a fresh claim token, the payload hash
//!    and a lock expiry (bounded by the Lambda's deadline when one is given);
//! 2. runs the business future;
//! 3. marks the record `COMPLETED` with the serialized response, conditioned on the claim token,
//!    so a holder whose lock expired and was taken over cannot overwrite the new holder.
//!
//! A completed record keeps its key for [`IdempotencyConfig::completed_retention`] (its `expiry`),
//! and `ttl` lets DynamoDB delete it afterwards. On a failed claim the existing record is read from
//! the same call (`ReturnValuesOnConditionCheckFailure`) and turned into the caller's outcome.

mod cache;
mod config;
mod key;
mod outcome;

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use crate::tables::idempotency::{attr, status};
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValuesOnConditionCheckFailure};
use chrono::{DateTime, Utc};
use outbox_shared::ConfigError;
use outbox_shared::limits::ITEM_MAX_BYTES;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::{debug, info, warn};

use crate::clock::{Clock, SystemClock};
use crate::error::StoreError;
use cache::{CachedCompletion, CompletedCache};
pub use config::{
    DEFAULT_COMPLETED_RETENTION, DEFAULT_LOCK_EXPIRY, FailurePolicy, IdempotencyConfig,
};
pub use key::{EventIdKey, KeyExtractor, MAX_KEY_BYTES, payload_hash};
pub use outcome::{IdempotencyError, Outcome};

/// Room kept in a record for everything but the response (key, hash, token, numbers, names).
const RECORD_OVERHEAD_BYTES: usize = 4 * 1024;

/// Longest business error message kept on a `FAILED` record.
const MAX_ERROR_CHARS: usize = 1024;

/// Claims retried when the record that refused the claim turned out to be already expired (it
/// expired between the put and our look at it). More than a couple means a clock problem.
const MAX_CLAIM_ATTEMPTS: usize = 3;

/// The DynamoDB idempotency store. Cheap to clone; clones share the cache.
#[derive(Clone)]
pub struct IdempotencyStore<C = SystemClock> {
    client: aws_sdk_dynamodb::Client,
    config: Arc<IdempotencyConfig>,
    clock: C,
    cache: Option<Arc<CompletedCache>>,
}

impl<C> fmt::Debug for IdempotencyStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotencyStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl IdempotencyStore<SystemClock> {
    /// # Errors
    /// [`ConfigError`] when the configuration is out of range.
    pub fn new(
        client: aws_sdk_dynamodb::Client,
        config: IdempotencyConfig,
    ) -> Result<Self, ConfigError> {
        Self::with_clock(client, config, SystemClock)
    }
}

/// What a refused claim found.
#[derive(Debug)]
struct ExistingRecord {
    status: String,
    expiry: DateTime<Utc>,
    payload_hash: String,
    response: Option<String>,
}

enum Claim {
    Claimed { token: String },
    Refused(Option<ExistingRecord>),
}

/// How a call proceeds after trying to claim its key.
enum Claimed<R> {
    /// The key is ours under this token: run the logic.
    Ours { token: String },
    /// The key had completed: answer with the stored response.
    Completed(Outcome<R>),
}

impl<C: Clock> IdempotencyStore<C> {
    /// A store reading time from `clock` (tests inject a [`crate::clock::ManualClock`]).
    ///
    /// # Errors
    /// [`ConfigError`] when the configuration is out of range.
    pub fn with_clock(
        client: aws_sdk_dynamodb::Client,
        config: IdempotencyConfig,
        clock: C,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let cache = (config.cache_capacity > 0)
            .then(|| Arc::new(CompletedCache::new(config.cache_capacity)));
        Ok(Self {
            client,
            config: Arc::new(config),
            clock,
            cache,
        })
    }

    pub fn config(&self) -> &IdempotencyConfig {
        &self.config
    }

    /// Runs `logic` once for `key`: see the module documentation for the protocol.
    ///
    /// `payload` is what the key stands for; a later call with the same key and another payload
    /// is refused. `deadline` (a Lambda's invocation deadline) bounds the lock, so a function that
    /// times out does not hold its key longer than it lives.
    ///
    /// # Errors
    /// [`IdempotencyError`]: refused (`InProgress`, `RetryLater`, `PayloadMismatch`), the logic's
    /// own failure (`Business`, after releasing or marking the claim), or a store failure.
    pub async fn run<P, R, E, F, Fut>(
        &self,
        key: &str,
        payload: &P,
        deadline: Option<DateTime<Utc>>,
        logic: F,
    ) -> Result<Outcome<R>, IdempotencyError<E>>
    where
        P: Serialize + ?Sized,
        R: Serialize + DeserializeOwned,
        E: fmt::Display + fmt::Debug,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        key::validate_key(key).map_err(|reason| IdempotencyError::InvalidKey {
            key: key.to_owned(),
            reason,
        })?;
        let hash = payload_hash(payload).map_err(|reason| IdempotencyError::Serialization {
            key: key.to_owned(),
            what: "payload",
            reason,
        })?;
        if let Some(hit) = self.cached(key) {
            debug!(key, "idempotency cache hit");
            return self.answer_completed(key, &hash, &hit.payload_hash, &hit.response);
        }
        let token = match self.claim_or_answer(key, &hash, deadline).await? {
            Claimed::Ours { token } => token,
            Claimed::Completed(outcome) => return Ok(outcome),
        };
        match logic().await {
            Ok(response) => {
                self.complete(key, &hash, &token, &response).await?;
                Ok(Outcome::Executed(response))
            }
            Err(error) => {
                self.handle_failure(key, &token, &error).await;
                Err(IdempotencyError::Business {
                    key: key.to_owned(),
                    error,
                })
            }
        }
    }

    /// [`IdempotencyStore::run`] with the key taken from `event` by `keys` and the event itself
    /// as the payload (pass the envelope, not the EventBridge wrapper: its `id` and `time` change
    /// on every delivery).
    ///
    /// # Errors
    /// As [`IdempotencyStore::run`].
    pub async fn run_event<Ev, R, E, F, Fut>(
        &self,
        event: &Ev,
        keys: &impl KeyExtractor<Ev>,
        deadline: Option<DateTime<Utc>>,
        logic: F,
    ) -> Result<Outcome<R>, IdempotencyError<E>>
    where
        Ev: Serialize + ?Sized,
        R: Serialize + DeserializeOwned,
        E: fmt::Display + fmt::Debug,
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        let key = keys.key(event);
        self.run(&key, event, deadline, logic).await
    }

    fn cached(&self, key: &str) -> Option<CachedCompletion> {
        self.cache.as_ref()?.get(key, self.clock.now())
    }

    /// Claims the key, or answers from the record that holds it (stored response or refusal).
    async fn claim_or_answer<R, E>(
        &self,
        key: &str,
        hash: &str,
        deadline: Option<DateTime<Utc>>,
    ) -> Result<Claimed<R>, IdempotencyError<E>>
    where
        R: DeserializeOwned,
        E: fmt::Display + fmt::Debug,
    {
        for _ in 0..MAX_CLAIM_ATTEMPTS {
            let now = self.clock.now();
            let existing = match self.claim(key, hash, now, deadline).await? {
                Claim::Claimed { token } => return Ok(Claimed::Ours { token }),
                Claim::Refused(Some(existing)) => existing,
                Claim::Refused(None) => match self.read(key).await? {
                    Some(existing) => existing,
                    // Deleted (released) between the put and the read: claim again.
                    None => continue,
                },
            };
            if existing.expiry < now {
                continue;
            }
            if existing.payload_hash != hash {
                return Err(IdempotencyError::PayloadMismatch {
                    key: key.to_owned(),
                });
            }
            let answer = match existing.status.as_str() {
                status::COMPLETED => {
                    let response = existing.response.unwrap_or_default();
                    if let Some(cache) = &self.cache {
                        cache.insert(
                            key,
                            CachedCompletion {
                                payload_hash: existing.payload_hash.clone(),
                                response: response.clone(),
                                expiry: existing.expiry,
                            },
                        );
                    }
                    self.answer_completed(key, hash, &existing.payload_hash, &response)
                        .map(Claimed::Completed)
                }
                status::FAILED => Err(IdempotencyError::RetryLater {
                    key: key.to_owned(),
                    retry_at: existing.expiry,
                }),
                _ => {
                    debug!(key, expires_at = %existing.expiry, "idempotency key in progress elsewhere");
                    Err(IdempotencyError::InProgress {
                        key: key.to_owned(),
                        expires_at: existing.expiry,
                    })
                }
            };
            return answer;
        }
        Err(IdempotencyError::Store(StoreError::malformed(
            "UpdateItem",
            &self.config.table_name,
            format!(
                "key {key:?} could not be claimed in {MAX_CLAIM_ATTEMPTS} attempts although its \
                 record kept expiring: are clocks far apart?"
            ),
        )))
    }

    fn answer_completed<R, E>(
        &self,
        key: &str,
        hash: &str,
        stored_hash: &str,
        response: &str,
    ) -> Result<Outcome<R>, IdempotencyError<E>>
    where
        R: DeserializeOwned,
        E: fmt::Display + fmt::Debug,
    {
        if stored_hash != hash {
            return Err(IdempotencyError::PayloadMismatch {
                key: key.to_owned(),
            });
        }
        let response =
            serde_json::from_str(response).map_err(|e| IdempotencyError::Serialization {
                key: key.to_owned(),
                what: "stored response",
                reason: e.to_string(),
            })?;
        debug!(key, "idempotency key already completed");
        Ok(Outcome::AlreadyCompleted(response))
    }

    async fn claim(
        &self,
        key: &str,
        hash: &str,
        now: DateTime<Utc>,
        deadline: Option<DateTime<Utc>>,
    ) -> Result<Claim, StoreError> {
        let mut expiry = now + to_chrono(self.config.lock_expiry);
        if let Some(deadline) = deadline {
            expiry = expiry.min(deadline.max(now));
        }
        let token = uuid::Uuid::now_v7().to_string();
        // An upsert rather than a whole-item put, under the same condition: a key that failed
        // before keeps its failure count across the new claim.
        let sent = self
            .client
            .update_item()
            .table_name(&self.config.table_name)
            .key(attr::PK, s(key))
            .update_expression(
                "SET #status = :in_progress, #expiry = :expiry, #ttl = :ttl, \
                 #hash = :hash, #token = :token REMOVE #response",
            )
            .condition_expression("attribute_not_exists(#pk) OR #expiry < :now")
            .expression_attribute_names("#pk", attr::PK)
            .expression_attribute_names("#status", attr::STATUS)
            .expression_attribute_names("#expiry", attr::EXPIRY)
            .expression_attribute_names("#ttl", attr::TTL)
            .expression_attribute_names("#hash", attr::PAYLOAD_HASH)
            .expression_attribute_names("#token", attr::CLAIM_TOKEN)
            .expression_attribute_names("#response", attr::RESPONSE)
            .expression_attribute_values(":in_progress", s(status::IN_PROGRESS))
            .expression_attribute_values(":expiry", millis(expiry))
            .expression_attribute_values(":ttl", self.ttl(now))
            .expression_attribute_values(":hash", s(hash))
            .expression_attribute_values(":token", s(&token))
            .expression_attribute_values(":now", millis(now))
            .return_values_on_condition_check_failure(ReturnValuesOnConditionCheckFailure::AllOld)
            .send()
            .await;
        match sent {
            Ok(_) => {
                debug!(key, expires_at = %expiry, "idempotency key claimed");
                Ok(Claim::Claimed { token })
            }
            Err(err) => match err.as_service_error() {
                Some(UpdateItemError::ConditionalCheckFailedException(failed)) => {
                    let existing = failed.item().map(|item| self.parse(item)).transpose()?;
                    Ok(Claim::Refused(existing))
                }
                _ => Err(StoreError::from_sdk(
                    "UpdateItem",
                    &self.config.table_name,
                    err,
                )),
            },
        }
    }

    async fn read(&self, key: &str) -> Result<Option<ExistingRecord>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.config.table_name)
            .key(attr::PK, s(key))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", &self.config.table_name, e))?;
        output.item().map(|item| self.parse(item)).transpose()
    }

    fn parse(&self, item: &HashMap<String, AttributeValue>) -> Result<ExistingRecord, StoreError> {
        let malformed =
            |detail: String| StoreError::malformed("read", &self.config.table_name, detail);
        let string = |name: &str| {
            item.get(name)
                .and_then(|v| v.as_s().ok())
                .cloned()
                .ok_or_else(|| malformed(format!("{name} is missing or not a string")))
        };
        let expiry_ms: i64 = item
            .get(attr::EXPIRY)
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| malformed(format!("{} is missing or not a number", attr::EXPIRY)))?;
        Ok(ExistingRecord {
            status: string(attr::STATUS)?,
            expiry: DateTime::from_timestamp_millis(expiry_ms).ok_or_else(|| {
                malformed(format!("{} {expiry_ms} is out of range", attr::EXPIRY))
            })?,
            payload_hash: string(attr::PAYLOAD_HASH)?,
            response: item
                .get(attr::RESPONSE)
                .and_then(|v| v.as_s().ok())
                .cloned(),
        })
    }

    async fn complete<R, E>(
        &self,
        key: &str,
        hash: &str,
        token: &str,
        response: &R,
    ) -> Result<(), IdempotencyError<E>>
    where
        R: Serialize,
        E: fmt::Display + fmt::Debug,
    {
        let json =
            serde_json::to_string(response).map_err(|e| IdempotencyError::Serialization {
                key: key.to_owned(),
                what: "response",
                reason: e.to_string(),
            })?;
        let max = ITEM_MAX_BYTES - RECORD_OVERHEAD_BYTES;
        if json.len() > max {
            warn!(
                key,
                bytes = json.len(),
                "response too large to store; the claim is left to expire"
            );
            return Err(IdempotencyError::ResponseTooLarge {
                key: key.to_owned(),
                bytes: json.len(),
                max,
            });
        }
        let now = self.clock.now();
        let expiry = now + to_chrono(self.config.completed_retention);
        let sent = self
            .client
            .update_item()
            .table_name(&self.config.table_name)
            .key(attr::PK, s(key))
            .update_expression(
                "SET #status = :completed, #response = :response, #expiry = :expiry, #ttl = :ttl \
                 REMOVE #token",
            )
            .condition_expression("#token = :token")
            .expression_attribute_names("#status", attr::STATUS)
            .expression_attribute_names("#response", attr::RESPONSE)
            .expression_attribute_names("#expiry", attr::EXPIRY)
            .expression_attribute_names("#ttl", attr::TTL)
            .expression_attribute_names("#token", attr::CLAIM_TOKEN)
            .expression_attribute_values(":completed", s(status::COMPLETED))
            .expression_attribute_values(":response", s(&json))
            .expression_attribute_values(":expiry", millis(expiry))
            .expression_attribute_values(":ttl", self.ttl(now))
            .expression_attribute_values(":token", s(token))
            .send()
            .await;
        match sent {
            Ok(_) => {
                info!(key, "idempotency key completed");
                if let Some(cache) = &self.cache {
                    cache.insert(
                        key,
                        CachedCompletion {
                            payload_hash: hash.to_owned(),
                            response: json,
                            expiry,
                        },
                    );
                }
                Ok(())
            }
            Err(err)
                if err
                    .as_service_error()
                    .is_some_and(|e| e.is_conditional_check_failed_exception()) =>
            {
                warn!(
                    key,
                    "claim expired and was taken over before completion; the effect may have run twice"
                );
                Err(IdempotencyError::ClaimLost {
                    key: key.to_owned(),
                })
            }
            Err(err) => {
                Err(StoreError::from_sdk("UpdateItem", &self.config.table_name, err).into())
            }
        }
    }

    /// Applies the failure policy. Best effort: if it cannot, the claim still expires.
    async fn handle_failure<E: fmt::Display>(&self, key: &str, token: &str, error: &E) {
        let result = match self.config.on_failure {
            FailurePolicy::Release => self
                .client
                .delete_item()
                .table_name(&self.config.table_name)
                .key(attr::PK, s(key))
                .condition_expression("#token = :token")
                .expression_attribute_names("#token", attr::CLAIM_TOKEN)
                .expression_attribute_values(":token", s(token))
                .send()
                .await
                .map(drop)
                .map_err(|e| {
                    let taken = e
                        .as_service_error()
                        .is_some_and(|e| e.is_conditional_check_failed_exception());
                    (
                        taken,
                        StoreError::from_sdk("DeleteItem", &self.config.table_name, e),
                    )
                }),
            FailurePolicy::MarkFailed { retry_after } => {
                let message: String = error.to_string().chars().take(MAX_ERROR_CHARS).collect();
                let retry_at = self.clock.now() + to_chrono(retry_after);
                self.client
                    .update_item()
                    .table_name(&self.config.table_name)
                    .key(attr::PK, s(key))
                    .update_expression(
                        "SET #status = :failed, #error = :error, #expiry = :expiry, \
                         #failures = if_not_exists(#failures, :zero) + :one REMOVE #token",
                    )
                    .condition_expression("#token = :token")
                    .expression_attribute_names("#status", attr::STATUS)
                    .expression_attribute_names("#error", attr::ERROR)
                    .expression_attribute_names("#expiry", attr::EXPIRY)
                    .expression_attribute_names("#failures", attr::FAILURES)
                    .expression_attribute_names("#token", attr::CLAIM_TOKEN)
                    .expression_attribute_values(":failed", s(status::FAILED))
                    .expression_attribute_values(":error", s(&message))
                    .expression_attribute_values(":expiry", millis(retry_at))
                    .expression_attribute_values(":zero", AttributeValue::N("0".into()))
                    .expression_attribute_values(":one", AttributeValue::N("1".into()))
                    .expression_attribute_values(":token", s(token))
                    .send()
                    .await
                    .map(drop)
                    .map_err(|e| {
                        let taken = e
                            .as_service_error()
                            .is_some_and(|e| e.is_conditional_check_failed_exception());
                        (
                            taken,
                            StoreError::from_sdk("UpdateItem", &self.config.table_name, e),
                        )
                    })
            }
        };
        match result {
            Ok(()) => {
                info!(key, policy = ?self.config.on_failure, "business logic failed; key left retryable")
            }
            Err((true, _)) => debug!(key, "claim already taken over; nothing to release"),
            Err((false, e)) => {
                warn!(key, error = %e, "could not release the claim; it frees itself when the lock expires")
            }
        }
    }

    fn ttl(&self, now: DateTime<Utc>) -> AttributeValue {
        let retention =
            i64::try_from(self.config.completed_retention.as_secs()).unwrap_or(i64::MAX);
        // Never before the record's own expiry, so TTL only removes records that no longer matter.
        AttributeValue::N(
            now.timestamp()
                .saturating_add(retention)
                .saturating_add(1)
                .to_string(),
        )
    }
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

fn millis(at: DateTime<Utc>) -> AttributeValue {
    AttributeValue::N(at.timestamp_millis().to_string())
}

fn to_chrono(duration: Duration) -> chrono::Duration {
    // Validated at construction to fit.
    chrono::Duration::from_std(duration).unwrap_or(chrono::Duration::MAX)
}

#[cfg(test)]
mod tests;
