//! A transaction every check passed, ready to send, and what it wrote once committed.

use aws_sdk_dynamodb::types::TransactWriteItem;
use outbox_shared::{ItemKey, OutboxItem};

use super::ConditionFailure;
use super::cancellation::map_sdk_error;
use crate::error::WriteError;

/// A transaction ready to send: every check passed.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    pub(crate) items: Vec<TransactWriteItem>,
    /// Per position: the item and what a failed condition there means.
    pub(crate) outcomes: Vec<(ItemKey, ConditionFailure)>,
    pub(crate) events: Vec<OutboxItem>,
    /// The payloads its items refer to, to store in the payload bucket before it is sent.
    pub(crate) claim_checks: Vec<ClaimCheck>,
    pub(crate) client_request_token: Option<String>,
}

/// A payload too large for its outbox item, which refers to it: stored in S3 before the
/// transaction.
#[derive(Clone)]
pub(crate) struct ClaimCheck {
    pub(crate) event_id: String,
    /// The payload's JSON text, as the item would have held it in `Payload`.
    pub(crate) payload: String,
}

/// Without the payload, which may be megabytes and may hold personal data.
impl std::fmt::Debug for ClaimCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimCheck")
            .field("event_id", &self.event_id)
            .field("payload_bytes", &self.payload.len())
            .finish()
    }
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
