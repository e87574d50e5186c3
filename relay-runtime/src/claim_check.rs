//! The claim check at publish: an event whose entry is larger than the target takes (or than
//! `PAYLOAD_THRESHOLD_BYTES`) is published with its payload stored in the payload bucket
//! (`PAYLOAD_BUCKET`) and referenced in place of its `data` ([`outbox_shared::claim_check`]:
//! `dataref`, `datasize`, `datasha256`).
//!
//! The payload is stored before its entry is sent, under a key derived from the event id, by a
//! conditional `PutObject` S3 verifies against the payload's SHA-256: a re-publish (a retry, the
//! poller after the stream relay, another poller) finds the object there and writes nothing, so
//! one event has one object whoever publishes it. An object found there is referenced only once
//! a `HeadObject` shows it holds this payload (its size and the SHA-256 S3 keeps with it); one
//! holding another payload (the event id given to two payloads) is never referenced: the event is
//! dead-lettered ([`PAYLOAD_KEY_TAKEN`]). A payload the writer already stored (an item with
//! `PayloadRef`) is published as its reference once the same `HeadObject` shows its object there
//! and holding it; an object gone (expired, deleted) or holding other bytes is never referenced:
//! the event is dead-lettered with a reason naming the object ([`PAYLOAD_GONE`],
//! [`PAYLOAD_MISMATCH`]). An object older than [`claim_check::REFRESH_AFTER`] is copied onto
//! itself before its event is sent, so its consumers get the bucket's whole retention but that
//! day to read it.
//!
//! An S3 failure is the event's failure, like an entry the target failed: the event is not sent,
//! stays pending, holds back the later events of its aggregate, and is published by a later
//! attempt. It is never dead-lettered for it.

use std::time::SystemTime;

use outbox_shared::OutboundEvent;
use outbox_shared::claim_check::{self, PayloadStore, ResolveError, StoreError, Stored};
use outbox_shared::error::SdkFailure;

use crate::permissions::{Call, Target};

/// Its calls: the payload's conditional `PutObject` under `payloads/`, and, for an object found
/// there or named by the writer, its `HeadObject` (`s3:GetObject`) and, when old, its copy onto
/// itself (`CopyObject`: `s3:GetObject` and `s3:PutObject`).
pub const CALLS: &[Call] = &[
    Call::new("s3:PutObject", Target::PayloadObjects),
    Call::new("s3:GetObject", Target::PayloadObjects),
];

/// Why an event cannot be sent with its payload referenced.
#[derive(Debug, Clone)]
pub enum PayloadError {
    /// S3 failed: the event is not sent and stays pending, whatever the failure's class (it is
    /// the bucket's, not the event's).
    Failed(SdkFailure),
    /// No attempt can publish it: its object is gone or holds another payload. The reason names
    /// the object (`s3://BUCKET/KEY`); the event is dead-lettered.
    Unpublishable { code: &'static str, reason: String },
}

/// The code of an event whose payload's object is gone (expired or deleted).
pub const PAYLOAD_GONE: &str = "PayloadGone";
/// The code of an event whose payload's object holds other bytes than its reference names.
pub const PAYLOAD_MISMATCH: &str = "PayloadMismatch";
/// The code of an event whose key already holds another payload.
pub const PAYLOAD_KEY_TAKEN: &str = "PayloadKeyTaken";

impl From<ResolveError> for PayloadError {
    fn from(err: ResolveError) -> Self {
        let code = match &err {
            ResolveError::Read { source, .. } => return Self::Failed(source.clone()),
            ResolveError::Gone { .. } => PAYLOAD_GONE,
            ResolveError::Mismatch { .. } | ResolveError::Reference(_) => PAYLOAD_MISMATCH,
        };
        Self::Unpublishable {
            code,
            reason: err.to_string(),
        }
    }
}

impl From<StoreError> for PayloadError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::Failed(failure) => Self::Failed(failure),
            taken @ StoreError::Taken(_) => Self::Unpublishable {
                code: PAYLOAD_KEY_TAKEN,
                reason: taken.to_string(),
            },
        }
    }
}

/// The publisher's claim check: the payload bucket.
#[derive(Debug, Clone)]
pub struct ClaimCheck {
    store: PayloadStore,
}

impl ClaimCheck {
    pub fn new(store: PayloadStore) -> Self {
        Self { store }
    }

    pub fn bucket(&self) -> &str {
        self.store.bucket()
    }

    /// The payload bucket.
    pub fn store(&self) -> &PayloadStore {
        &self.store
    }

    /// `event` with its payload stored in the bucket and referenced in place of its `data`, and
    /// whether the object was written or found there; `None` when it has no `data` to store (its
    /// payload is already a reference, whose object is checked to hold it, and copied onto
    /// itself when old: [`claim_check::keep`]).
    ///
    /// # Errors
    /// [`PayloadError`]: S3 failed, or the object is gone or holds another payload. The event
    /// must not be sent.
    pub async fn stored(
        &self,
        event: &OutboundEvent,
    ) -> Result<Option<(OutboundEvent, Stored)>, PayloadError> {
        let Some(data) = event.data() else {
            return match event.data_ref() {
                Some(reference) => self.kept(event, &reference).await.map(|()| None),
                None => Ok(None),
            };
        };
        let (reference, stored) = match self.store.put(&event.event_id, data.as_bytes()).await {
            Ok(done) => done,
            Err(err) => return Err(self.not_published(event, err.into())),
        };
        if stored == Stored::Written {
            crate::metrics::count(crate::metrics::PAYLOADS_STORED, 1);
        }
        tracing::debug!(event_id = %event.event_id, payload = %reference, ?stored, "payload in the payload bucket");
        Ok(Some((event.with_data_ref(&reference), stored)))
    }

    /// Checks that the object `reference` (the writer's) names holds `event`'s payload, and
    /// copies it onto itself when old.
    async fn kept(
        &self,
        event: &OutboundEvent,
        reference: &claim_check::PayloadRef,
    ) -> Result<(), PayloadError> {
        claim_check::keep(
            self.store.client(),
            &event.event_id,
            reference,
            SystemTime::now(),
        )
        .await
        .map(|_| ())
        .map_err(|err| self.not_published(event, err.into()))
    }

    /// Counts and logs `err`, the reason `event` is not sent.
    fn not_published(&self, event: &OutboundEvent, err: PayloadError) -> PayloadError {
        match &err {
            PayloadError::Failed(failure) => {
                crate::metrics::count(crate::metrics::PAYLOAD_STORE_FAILED, 1);
                tracing::warn!(
                    event_id = %event.event_id,
                    bucket = %self.store.bucket(),
                    error = %failure,
                    "payload not stored or not checked: the event stays pending"
                );
            }
            PayloadError::Unpublishable { code, reason } => {
                tracing::warn!(
                    event_id = %event.event_id,
                    code,
                    reason = %reason,
                    "the event's payload cannot be referenced: it is dead-lettered"
                );
            }
        }
        err
    }
}
