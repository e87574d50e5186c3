//! The limits a transaction's outbox items are checked against before the call, and an item too
//! large for DynamoDB fitted through the claim check.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use outbox_shared::claim_check::PayloadStore;
use outbox_shared::envelope::Encoding;
use outbox_shared::limits::ITEM_MAX_BYTES;
use outbox_shared::{ItemKey, OutboundEvent, OutboxItem};

use super::prepared::ClaimCheck;
use crate::config::WriterConfig;
use crate::error::{InputError, LimitError, WriteError};
use crate::size::item_size;

/// `payload_bucket_would_fit`: the item is an outbox event written without a payload bucket, which
/// the error then suggests.
pub(super) fn check_item_size(
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
pub(super) fn check_payload_size(
    item: &OutboxItem,
    config: &WriterConfig,
) -> Result<(), LimitError> {
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
pub(super) struct Fitted {
    pub(super) outbox: OutboxItem,
    /// Its attribute values.
    pub(super) item: HashMap<String, AttributeValue>,
    /// Its payload, to store before the transaction, when the item refers to it.
    pub(super) claim_check: Option<ClaimCheck>,
}

/// The outbox item as the transaction writes it: with a payload bucket, an item over DynamoDB's
/// item limit gets its payload's reference in place of the payload. One that fits keeps its
/// payload inline, whatever its future entry's size: the relays store the payload of an entry
/// too large for their target when they publish it, and a small event costs no S3 call.
pub(super) fn fit_item(
    mut outbox: OutboxItem,
    payloads: Option<&PayloadStore>,
) -> Result<Fitted, WriteError> {
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
pub(super) fn check_event_size(
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
