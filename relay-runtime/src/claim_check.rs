//! The claim check at publish: an event whose entry is larger than the target takes (or than
//! `PAYLOAD_THRESHOLD_BYTES`) is published with its payload stored in the payload bucket
//! (`PAYLOAD_BUCKET`) and referenced in place of its `data` ([`outbox_shared::claim_check`]).

use crate::permissions::{Call, Target};

/// Its calls: the payload's conditional `PutObject` under `payloads/`.
pub const CALLS: &[Call] = &[Call::new("s3:PutObject", Target::PayloadObjects)];
