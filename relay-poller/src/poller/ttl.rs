//! The TTL refresh: a pending item whose `ttl` is past or within the refresh margin gets its `ttl`
//! pushed forward, only while it is still pending, so DynamoDB's TTL never deletes an unpublished
//! event the poller can read. A page's expiring items are refreshed before anything else happens
//! to them. The payload the writer stored for such an item (its `PayloadRef`) is copied onto
//! itself first ([`claim_check::refresh`]), so the payload bucket's lifecycle, which counts from
//! when the object was written, never expires it under its pending event either: it is as old as
//! the item's `ttl` is long at most. The room: the port ([`PendingTtl`]), its DynamoDB adapter
//! ([`DynamoPendingTtl`]), and the component a page runs ([`TtlRefresh`]).

use std::future::Future;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::stream;
use outbox_shared::claim_check::{self, PayloadRef, ResolveError};
use outbox_shared::schema::attr;
use outbox_shared::{ItemKey, OutboxStatus};
use relay_runtime::status_store::{ttl_after, update_applied};
use relay_runtime::{Event, StatusError};

use crate::index::RawItem;
use crate::metrics;

/// What a TTL refresh of a pending item did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TtlOutcome {
    /// The item was pending and its `ttl` now lies the retention ahead.
    Extended,
    /// The item was no longer pending (marked meanwhile, or gone): nothing to do.
    NotPending,
}

/// Port: pushes a pending item's `ttl` forward.
pub trait PendingTtl: Send + Sync {
    /// Pushes the item's `ttl` to the published retention from now, only while it is still
    /// pending, so DynamoDB's TTL never deletes an unpublished event.
    fn extend_ttl(
        &self,
        key: &ItemKey,
    ) -> impl Future<Output = Result<TtlOutcome, StatusError>> + Send;
}

/// A borrowed store is one (a test keeps its fake to inspect it).
impl<T: PendingTtl> PendingTtl for &T {
    fn extend_ttl(
        &self,
        key: &ItemKey,
    ) -> impl Future<Output = Result<TtlOutcome, StatusError>> + Send {
        (**self).extend_ttl(key)
    }
}

/// The call of [`DynamoPendingTtl`]: a conditional `UpdateItem` naming only the `ttl` and the
/// condition's `GSI1PK` (within [`relay_runtime::permissions::STATUS_ATTRIBUTES`]).
pub const CALLS: &[relay_runtime::permissions::Call] = &[relay_runtime::permissions::Call::new(
    "dynamodb:UpdateItem",
    relay_runtime::permissions::Target::OutboxStatus,
)];

/// The DynamoDB adapter: `SET ttl = :ttl` on the condition `attribute_exists(GSI1PK)`.
#[derive(Debug, Clone)]
pub struct DynamoPendingTtl {
    client: aws_sdk_dynamodb::Client,
    table_name: String,
    /// How far ahead a refreshed `ttl` lies (the published retention).
    retention: Duration,
}

impl DynamoPendingTtl {
    pub fn new(
        client: aws_sdk_dynamodb::Client,
        table_name: impl Into<String>,
        retention: Duration,
    ) -> Self {
        Self {
            client,
            table_name: table_name.into(),
            retention,
        }
    }
}

impl PendingTtl for DynamoPendingTtl {
    async fn extend_ttl(&self, key: &ItemKey) -> Result<TtlOutcome, StatusError> {
        let ttl = ttl_after(Utc::now(), self.retention);
        let result = self
            .client
            .update_item()
            .table_name(&self.table_name)
            .key(attr::PK, AttributeValue::S(key.pk.clone()))
            .key(attr::SK, AttributeValue::S(key.sk.clone()))
            .update_expression("SET #ttl = :ttl")
            .condition_expression("attribute_exists(#gsi1pk)")
            .expression_attribute_names("#gsi1pk", attr::GSI1PK)
            .expression_attribute_names("#ttl", attr::TTL)
            .expression_attribute_values(":ttl", AttributeValue::N(ttl.to_string()))
            .send()
            .await;
        let applied = update_applied(result).map_err(|failure| StatusError {
            key: key.clone(),
            status: OutboxStatus::Pending,
            failure: Box::new(failure),
        })?;
        Ok(if applied {
            TtlOutcome::Extended
        } else {
            TtlOutcome::NotPending
        })
    }
}

/// The TTL refresh of a page's items.
#[derive(Debug)]
pub(super) struct TtlRefresh<T> {
    store: T,
    /// A pending item whose `ttl` is past or less than this away gets it pushed forward.
    margin: Duration,
    /// Refreshes in flight at once.
    concurrency: usize,
    /// The S3 client that copies a pending event's payload onto itself (`None`: no payload bucket,
    /// and no reference is refreshed).
    payloads: Option<aws_sdk_s3::Client>,
}

impl<T: PendingTtl> TtlRefresh<T> {
    pub(super) fn new(store: T, margin: Duration, concurrency: usize) -> Self {
        Self {
            store,
            margin,
            concurrency: concurrency.max(1),
            payloads: None,
        }
    }

    /// The refresh copying an expiring pending event's payload onto itself with `client` before
    /// its `ttl` is pushed out.
    #[must_use]
    pub(super) fn with_payloads(mut self, client: aws_sdk_s3::Client) -> Self {
        self.payloads = Some(client);
        self
    }

    /// Pushes forward, concurrently, the `ttl` of the events among `events` decoded from an
    /// outbox item whose `ttl` is past or within the margin of `now`, each after its payload's
    /// object when it refers to one: how many were extended, and how many refreshes failed
    /// (retried the next time the item is read; an object S3 did not copy leaves the `ttl` as it
    /// was, so it is).
    pub(super) async fn refresh(
        &self,
        events: &[Event<RawItem>],
        now: DateTime<Utc>,
    ) -> (u64, u64) {
        // `ttl` at or below this is pushed forward before the item can expire.
        let refresh_below = ttl_after(now, self.margin);
        // Owned keys and ids: the stream's closure then takes no borrowed argument, which keeps
        // the future `Send`.
        let expiring: Vec<(ItemKey, String, Option<PayloadRef>)> = events
            .iter()
            .filter(|e| {
                e.aggregate.is_some() && ttl_of(&e.source).is_some_and(|t| t <= refresh_below)
            })
            .filter_map(|e| {
                let reference = e.entry().and_then(|entry| entry.data_ref());
                Some((e.key.clone()?, e.id().to_owned(), reference))
            })
            .collect();
        if expiring.is_empty() {
            return (0, 0);
        }
        let results: Vec<_> = stream::iter(expiring)
            .map(|(key, event_id, reference)| async move {
                if let Err(err) = self.refresh_payload(&event_id, reference.as_ref()).await {
                    return (event_id, Err(err));
                }
                (
                    event_id,
                    self.store
                        .extend_ttl(&key)
                        .await
                        .map_err(|err| err.failure.to_string()),
                )
            })
            .buffer_unordered(self.concurrency)
            .collect()
            .await;
        let (mut extended, mut errors) = (0, 0);
        for (event_id, result) in results {
            match result {
                Ok(TtlOutcome::Extended) => extended += 1,
                Ok(TtlOutcome::NotPending) => {}
                Err(err) => {
                    tracing::warn!(event_id = %event_id, error = %err, "could not extend the ttl of a pending event");
                    errors += 1;
                }
            }
        }
        metrics::ttl_extended(extended);
        (extended, errors)
    }

    /// Copies the object `reference` names onto itself, when there is one and a client to.
    /// An object gone is no failure here: the event's publish dead-letters it, naming the object.
    ///
    /// # Errors
    /// What S3 said, when it failed.
    async fn refresh_payload(
        &self,
        event_id: &str,
        reference: Option<&PayloadRef>,
    ) -> Result<(), String> {
        let (Some(client), Some(reference)) = (&self.payloads, reference) else {
            return Ok(());
        };
        match claim_check::refresh(client, event_id, reference).await {
            Ok(()) => Ok(()),
            Err(gone @ (ResolveError::Gone { .. } | ResolveError::Reference(_))) => {
                tracing::warn!(event_id, error = %gone, "the payload of a pending event is gone; its publish dead-letters it");
                Ok(())
            }
            Err(err) => Err(err.to_string()),
        }
    }
}

/// The `ttl` of an item read from the index, when it has a number there.
fn ttl_of(raw: &RawItem) -> Option<i64> {
    raw.get(attr::TTL)?.as_n().ok()?.parse().ok()
}
