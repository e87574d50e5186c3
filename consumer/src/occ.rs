//! Optimistic concurrency: read an item, compute its new state, write it back only if nobody
//! wrote in between (a condition on its `version` attribute), and on conflict start over after an
//! exponential, fully jittered delay, a bounded number of times.

use std::collections::HashMap;
use std::convert::Infallible;
use std::fmt;
use std::future::Future;

use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use outbox_shared::ConfigError;
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::debug;

use crate::error::StoreError;
use outbox_shared::RetryPolicy;

/// A DynamoDB item.
pub type Item = HashMap<String, AttributeValue>;

/// Where the versioned items live and how hard to try.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OccConfig {
    pub table_name: String,
    /// The number attribute that every write increments and conditions on.
    pub version_attribute: String,
    pub retry: RetryPolicy,
}

impl OccConfig {
    /// The default retry policy (10 retries from 10 ms up to 1 s: enough for a few dozen writers
    /// on one item) for `table_name`, versioned on `version_attribute`.
    pub fn new(table_name: impl Into<String>, version_attribute: impl Into<String>) -> Self {
        Self {
            table_name: table_name.into(),
            version_attribute: version_attribute.into(),
            retry: RetryPolicy {
                base_delay: std::time::Duration::from_millis(10),
                ..RetryPolicy::default()
            },
        }
    }

    /// # Errors
    /// [`ConfigError`] naming the setting that is empty or out of range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.table_name.trim().is_empty() {
            return Err(ConfigError::Empty {
                setting: "OCC table name",
            });
        }
        if self.version_attribute.trim().is_empty() {
            return Err(ConfigError::Empty {
                setting: "version attribute",
            });
        }
        self.retry.validate("OCC retry")
    }
}

/// A value as stored, with the version it was stored at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned<T> {
    pub value: T,
    pub version: u64,
}

/// A successful write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed<T> {
    pub value: T,
    /// The version written (1 for a new item).
    pub version: u64,
    /// Attempts it took, the successful one included.
    pub attempts: usize,
}

/// Why an update did not happen.
#[derive(Debug, thiserror::Error)]
pub enum OccError<E: fmt::Display + fmt::Debug> {
    /// Someone else wrote between our read and our write on every attempt. Retryable later.
    #[error("version conflict on every one of {attempts} attempts")]
    Conflict { attempts: usize },
    /// The modify function refused the change (a business rule); nothing was written.
    #[error("update refused: {0}")]
    Rejected(E),
    /// The stored item or the new value does not map to the record type.
    #[error("item does not match the record type: {0}")]
    Serialization(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl<E: fmt::Display + fmt::Debug> OccError<E> {
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Conflict { .. } => true,
            Self::Store(e) => e.is_retryable(),
            Self::Rejected(_) | Self::Serialization(_) => false,
        }
    }
}

/// Versioned reads and conditional writes on one table.
#[derive(Debug, Clone)]
pub struct OccTable {
    client: aws_sdk_dynamodb::Client,
    config: OccConfig,
}

enum Attempt<T> {
    Written(Versioned<T>),
    /// Someone else wrote since our read.
    Conflict,
}

impl OccTable {
    /// # Errors
    /// [`ConfigError`] when the configuration is out of range.
    pub fn new(client: aws_sdk_dynamodb::Client, config: OccConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self { client, config })
    }

    pub fn config(&self) -> &OccConfig {
        &self.config
    }

    /// The item at `key` and its version (0 for an item written without one), strongly consistent.
    ///
    /// # Errors
    /// [`OccError::Store`] when the read fails, [`OccError::Serialization`] when the item does not
    /// decode as `T`.
    pub async fn read<T>(&self, key: &Item) -> Result<Option<Versioned<T>>, OccError<Infallible>>
    where
        T: DeserializeOwned,
    {
        let item = self.read_item(key).await?;
        item.map(|item| self.decode(item)).transpose()
    }

    /// Applies `modify` to the current value (`None` when the item does not exist) and writes the
    /// result if the version is unchanged, retrying from a fresh read on conflict.
    ///
    /// The written item is `T`'s attributes plus `key` plus the next version; `modify` may be
    /// called once per attempt, so it must not have side effects of its own.
    ///
    /// # Errors
    /// [`OccError::Conflict`] when every attempt lost the race, [`OccError::Rejected`] when
    /// `modify` refused, or a store/serialization failure.
    pub async fn update<T, E, F>(
        &self,
        key: &Item,
        mut modify: F,
    ) -> Result<Committed<T>, OccError<E>>
    where
        T: Serialize + DeserializeOwned,
        E: fmt::Display + fmt::Debug,
        F: FnMut(Option<T>) -> Result<T, E>,
    {
        self.update_with(key, |current| std::future::ready(modify(current)))
            .await
    }

    /// [`OccTable::update`] with an async `modify` (it may look things up, or wait).
    ///
    /// # Errors
    /// As [`OccTable::update`].
    pub async fn update_with<T, E, F, Fut>(
        &self,
        key: &Item,
        mut modify: F,
    ) -> Result<Committed<T>, OccError<E>>
    where
        T: Serialize + DeserializeOwned,
        E: fmt::Display + fmt::Debug,
        F: FnMut(Option<T>) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut delays = self.config.retry.delays();
        let mut current = self.read_item(key).await?;
        let mut attempts = 0;
        loop {
            attempts += 1;
            let stored: Option<Versioned<T>> = current.map(|item| self.decode(item)).transpose()?;
            let expected = stored.as_ref().map(|s| s.version);
            let next = modify(stored.map(|s| s.value))
                .await
                .map_err(OccError::Rejected)?;
            match self.try_write(key, next, expected).await? {
                Attempt::Written(written) => {
                    return Ok(Committed {
                        value: written.value,
                        version: written.version,
                        attempts,
                    });
                }
                Attempt::Conflict => {
                    let Some(delay) = delays.next() else {
                        return Err(OccError::Conflict { attempts });
                    };
                    debug!(
                        table = %self.config.table_name,
                        attempts,
                        delay_ms = delay.as_millis() as u64,
                        "version conflict; retrying"
                    );
                    tokio::time::sleep(delay).await;
                    // Read again after the delay rather than reuse the winner's item from the
                    // failed call: by then it may have moved on too.
                    current = self.read_item(key).await?;
                }
            }
        }
    }

    async fn try_write<T, E>(
        &self,
        key: &Item,
        value: T,
        expected: Option<u64>,
    ) -> Result<Attempt<T>, OccError<E>>
    where
        T: Serialize,
        E: fmt::Display + fmt::Debug,
    {
        let version_attr = &self.config.version_attribute;
        let next_version = expected.map_or(1, |v| v + 1);
        let mut item: Item =
            serde_dynamo::to_item(&value).map_err(|e| OccError::Serialization(e.to_string()))?;
        item.extend(key.iter().map(|(k, v)| (k.clone(), v.clone())));
        item.insert(version_attr.clone(), number(next_version));
        let request = self
            .client
            .put_item()
            .table_name(&self.config.table_name)
            .set_item(Some(item))
            .expression_attribute_names("#v", version_attr);
        let request = match expected {
            Some(version) => request
                .condition_expression("#v = :expected")
                .expression_attribute_values(":expected", number(version)),
            None => request.condition_expression("attribute_not_exists(#v)"),
        };
        match request.send().await {
            Ok(_) => Ok(Attempt::Written(Versioned {
                value,
                version: next_version,
            })),
            Err(err) => match err.as_service_error() {
                Some(PutItemError::ConditionalCheckFailedException(_)) => Ok(Attempt::Conflict),
                _ => Err(StoreError::from_sdk("PutItem", &self.config.table_name, err).into()),
            },
        }
    }

    async fn read_item(&self, key: &Item) -> Result<Option<Item>, StoreError> {
        let output = self
            .client
            .get_item()
            .table_name(&self.config.table_name)
            .set_key(Some(key.clone()))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| StoreError::from_sdk("GetItem", &self.config.table_name, e))?;
        Ok(output.item().cloned())
    }

    fn decode<T, E>(&self, item: Item) -> Result<Versioned<T>, OccError<E>>
    where
        T: DeserializeOwned,
        E: fmt::Display + fmt::Debug,
    {
        let version = match item.get(&self.config.version_attribute) {
            None => 0,
            Some(v) => v.as_n().ok().and_then(|n| n.parse().ok()).ok_or_else(|| {
                OccError::Serialization(format!(
                    "{} is not a non-negative integer",
                    self.config.version_attribute
                ))
            })?,
        };
        let value =
            serde_dynamo::from_item(item).map_err(|e| OccError::Serialization(e.to_string()))?;
        Ok(Versioned { value, version })
    }
}

fn number(n: u64) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_errors_name_the_setting() {
        OccConfig::new("stock", "version").validate().unwrap();
        let err = OccConfig::new("stock", "").validate().unwrap_err();
        assert_eq!(err.to_string(), "version attribute must not be empty");
    }

    #[test]
    fn only_conflicts_and_transient_store_errors_retry() {
        let conflict: OccError<String> = OccError::Conflict { attempts: 3 };
        assert!(conflict.is_retryable());
        let rejected: OccError<String> = OccError::Rejected("insufficient".into());
        assert!(!rejected.is_retryable());
    }

    #[tokio::test]
    async fn a_throttled_write_is_a_store_error_not_a_conflict() {
        use crate::test_support::{mock_client, throttled};
        use aws_sdk_dynamodb::Client;
        use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
        use aws_sdk_dynamodb::types::error::ProvisionedThroughputExceededException;
        use aws_smithy_mocks::mock;

        #[derive(Debug, serde::Serialize, serde::Deserialize)]
        struct Counter {
            n: u64,
        }

        let read = mock!(Client::get_item).then_output(|| {
            GetItemOutput::builder()
                .set_item(Some(Item::from([
                    ("pk".to_owned(), AttributeValue::S("sku".into())),
                    ("n".to_owned(), number(5)),
                    ("version".to_owned(), number(1)),
                ])))
                .build()
        });
        let write = mock!(Client::put_item).then_error(|| {
            PutItemError::ProvisionedThroughputExceededException(
                ProvisionedThroughputExceededException::builder()
                    .message("throttled")
                    .meta(throttled())
                    .build(),
            )
        });
        let table = OccTable::new(
            mock_client(&[&read, &write]),
            OccConfig::new("t", "version"),
        )
        .unwrap();
        let key = Item::from([("pk".to_owned(), AttributeValue::S("sku".into()))]);
        let result = table
            .update(&key, |current: Option<Counter>| {
                let n = current.map_or(0, |c| c.n);
                Ok::<_, String>(Counter {
                    n: n.saturating_sub(1),
                })
            })
            .await;
        match result {
            Err(e @ OccError::Store(_)) => assert!(e.is_retryable(), "{e}"),
            other => panic!("expected a store error, got {other:?}"),
        }
        assert_eq!(write.num_calls(), 1);
    }
}
