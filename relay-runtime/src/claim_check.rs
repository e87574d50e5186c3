//! The claim check at publish: an event whose entry is larger than the target takes (or than
//! `PAYLOAD_THRESHOLD_BYTES`) is published with its payload stored in the payload bucket
//! (`PAYLOAD_BUCKET`) and referenced in place of its `data` ([`outbox_shared::claim_check`]:
//! `dataref`, `datasize`, `datasha256`).
//!
//! The payload is stored before its entry is sent, under a key derived from the event id, by a
//! conditional `PutObject` S3 verifies against the payload's SHA-256: a re-publish (a retry, the
//! poller after the stream relay, another poller) finds the object there and writes nothing, so
//! one event has one object whoever publishes it. A payload the writer already stored (an item
//! with `PayloadRef`) is published as its reference, without reading or writing the object.
//!
//! An S3 failure is the event's failure, like an entry the target failed: the event is not sent,
//! stays pending, holds back the later events of its aggregate, and is published by a later
//! attempt. It is never dead-lettered for it.

use outbox_shared::OutboundEvent;
use outbox_shared::claim_check::{PayloadStore, Stored};
use outbox_shared::error::SdkFailure;

use crate::permissions::{Call, Target};

/// Its calls: the payload's conditional `PutObject` under `payloads/`.
pub const CALLS: &[Call] = &[Call::new("s3:PutObject", Target::PayloadObjects)];

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
    /// payload is already a reference).
    ///
    /// # Errors
    /// [`SdkFailure`] when S3 failed: the event must not be sent.
    pub async fn stored(
        &self,
        event: &OutboundEvent,
    ) -> Result<Option<(OutboundEvent, Stored)>, SdkFailure> {
        let Some(data) = event.data() else {
            return Ok(None);
        };
        let (reference, stored) = match self.store.put(&event.event_id, data.as_bytes()).await {
            Ok(done) => done,
            Err(failure) => {
                crate::metrics::count(crate::metrics::PAYLOAD_STORE_FAILED, 1);
                tracing::warn!(
                    event_id = %event.event_id,
                    bucket = %self.store.bucket(),
                    error = %failure,
                    "payload not stored: the event stays pending"
                );
                return Err(failure);
            }
        };
        if stored == Stored::Written {
            crate::metrics::count(crate::metrics::PAYLOADS_STORED, 1);
        }
        tracing::debug!(event_id = %event.event_id, payload = %reference, ?stored, "payload in the payload bucket");
        Ok(Some((event.with_data_ref(&reference), stored)))
    }
}
