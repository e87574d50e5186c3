//! The batch processor: a Lambda consumer of any target the relays publish to hands its
//! invocation's event to [`BatchProcessor`], with an async handler of one event, and returns the
//! `batchItemFailures` response the processor builds under its source's documented rule
//! ([`rules`]).
//!
//! | trigger | call | response | partial failure |
//! |---|---|---|---|
//! | SQS standard (also an SNS subscription, raw or not; an EventBridge rule's target) | [`BatchProcessor::process_sqs`] | [`BatchReport::sqs_response`] | each failed message reported, the rest acknowledged |
//! | SQS FIFO (also a FIFO topic's subscription; the Custom Event Bus's FIFO subscriber) | [`BatchProcessor::process_sqs`] | [`BatchReport::sqs_response`] | after a failure, the rest of the batch ([`FifoFailure::RestOfBatch`]) or the failed group's later messages ([`FifoFailure::Group`]) reported unhandled |
//! | Kinesis | [`BatchProcessor::process_kinesis`] | [`BatchReport::kinesis_response`] | the first failed record's sequence number; no later record handled |
//! | EventBridge (one event per invocation) | [`BatchProcessor::process_eventbridge`] | the handler's response, or the invocation's error (EventBridge retries) | — |
//!
//! Each message is read in either format the relays publish (the envelope or a CloudEvent,
//! alone, in an SNS notification or as an EventBridge event's `detail`), its payload read from
//! S3 when it carries a claim check ([`crate::PayloadResolver`], if configured), and handled in
//! a `process` span continuing its trace ([`crate::process_span`]). A message that cannot be
//! decoded is that message's failure, never the batch's.
//!
//! Optionally:
//! - [`BatchProcessor::with_idempotency`]: each event's `metadata.eventId` goes through the
//!   [`IdempotencyStore`]: a duplicate (a re-delivery, a relay's re-publish, another region's
//!   copy) is acknowledged with the stored response ([`Processed::Replayed`]) and never handled
//!   twice; a handler failure releases the key for the retry (the store's failure policy).
//! - [`BatchProcessor::with_sequencing`]: order restored per aggregate ([`crate::sequencing`]):
//!   an event is applied only after its predecessor by `metadata.sequence`; an early one is
//!   reported failed (delivered again later), one at or below the last applied is a duplicate
//!   ([`Processed::AlreadyApplied`]), and a gap older than the bound is applied with a warning.
//!   On an unordered source, an early message whose predecessor is applied later in the same
//!   batch is tried again in that invocation, in sequence order.
//!
//! Messages are handled one after the other, in the order received.
//!
//! DynamoDB calls per message: none without the options; with the idempotency store two (the
//! claim, the completion); with order restored two more (the read, the advance), and one for an
//! early event (the wait's mark).

mod error;
mod report;
mod rules;
mod source;

#[cfg(test)]
mod tests;

use std::fmt;
use std::future::Future;

use aws_lambda_events::kinesis::KinesisEvent;
use aws_lambda_events::sqs::SqsEvent;
use chrono::{DateTime, Utc};
use outbox_shared::Envelope;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::{Instrument as _, info, warn};

use crate::clock::{Clock, SystemClock};
use crate::idempotency::{IdempotencyError, IdempotencyStore, Outcome};
use crate::sequencing::{Decision, SequenceStore};
use crate::{PayloadResolver, trace};
/// The event and response types, at the version the processor reads.
pub use aws_lambda_events;
pub use error::{BatchError, HandlerError};
pub use report::{BatchReport, ItemReport, ItemStatus, Processed};
pub use rules::{FifoFailure, Semantics};
use source::Message;
pub use source::{AWS_TRACE_HEADER, MESSAGE_GROUP_ID};

/// What the invocation tells every message of its batch.
#[derive(Debug, Clone, Default)]
pub struct Invocation {
    /// The invocation's deadline: it bounds the idempotency lock, so a function that times out
    /// does not hold its keys longer than it lives.
    pub deadline: Option<DateTime<Utc>>,
    /// The invocation's X-Ray trace header (`_X_AMZN_TRACE_ID`): the trace continued when an
    /// event carries no context of its own and its message no `AWSTraceHeader`.
    pub xray_header: Option<String>,
}

/// Processes a Lambda consumer's batches: see the module documentation. Cheap to clone if its
/// stores are; build it once at init.
#[derive(Clone)]
pub struct BatchProcessor<I = SystemClock, S = SystemClock> {
    payloads: Option<PayloadResolver>,
    idempotency: Option<IdempotencyStore<I>>,
    sequencing: Option<SequenceStore<S>>,
    fifo_failure: FifoFailure,
}

impl<I, S> fmt::Debug for BatchProcessor<I, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BatchProcessor")
            .field("payloads", &self.payloads.is_some())
            .field("idempotency", &self.idempotency)
            .field("sequencing", &self.sequencing)
            .field("fifo_failure", &self.fifo_failure)
            .finish()
    }
}

impl Default for BatchProcessor {
    fn default() -> Self {
        Self::new()
    }
}

impl BatchProcessor {
    /// A processor with no claim check, no idempotency store and no order option, and AWS's
    /// FIFO rule ([`FifoFailure::RestOfBatch`]).
    pub fn new() -> Self {
        Self {
            payloads: None,
            idempotency: None,
            sequencing: None,
            fifo_failure: FifoFailure::default(),
        }
    }
}

impl<I: Clock, S: Clock> BatchProcessor<I, S> {
    /// Reads an event's payload from S3 when it carries a claim check (`dataref`); without a
    /// resolver, such an event is its message's failure ([`crate::DecodeError::DataInS3`]).
    #[must_use]
    pub fn with_payloads(mut self, resolver: PayloadResolver) -> Self {
        self.payloads = Some(resolver);
        self
    }

    /// Handles each event once per `metadata.eventId` through `store`.
    pub fn with_idempotency<I2: Clock>(self, store: IdempotencyStore<I2>) -> BatchProcessor<I2, S> {
        BatchProcessor {
            payloads: self.payloads,
            idempotency: Some(store),
            sequencing: self.sequencing,
            fifo_failure: self.fifo_failure,
        }
    }

    /// Restores each aggregate's order by `metadata.sequence`, recorded in `store`.
    pub fn with_sequencing<S2: Clock>(self, store: SequenceStore<S2>) -> BatchProcessor<I, S2> {
        BatchProcessor {
            payloads: self.payloads,
            idempotency: self.idempotency,
            sequencing: Some(store),
            fifo_failure: self.fifo_failure,
        }
    }

    /// What a failure on a FIFO queue holds back.
    #[must_use]
    pub fn with_fifo_failure(mut self, fifo_failure: FifoFailure) -> Self {
        self.fifo_failure = fifo_failure;
        self
    }

    /// Processes an SQS trigger's batch (a standard or FIFO queue, told by its source ARN);
    /// answer Lambda with [`BatchReport::sqs_response`].
    pub async fn process_sqs<D, R, E, H, Fut>(
        &self,
        event: &SqsEvent,
        invocation: &Invocation,
        handler: H,
    ) -> BatchReport<R>
    where
        D: Serialize + DeserializeOwned,
        R: Serialize + DeserializeOwned,
        E: Into<HandlerError>,
        H: Fn(Envelope<D>) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        let semantics = if source::is_fifo(&event.records) {
            Semantics::Fifo(self.fifo_failure)
        } else {
            Semantics::Unordered
        };
        let messages: Vec<Message<'_>> = event.records.iter().map(Message::sqs).collect();
        self.process(semantics, &messages, invocation, &handler)
            .await
    }

    /// Processes a Kinesis trigger's batch; answer Lambda with
    /// [`BatchReport::kinesis_response`].
    pub async fn process_kinesis<D, R, E, H, Fut>(
        &self,
        event: &KinesisEvent,
        invocation: &Invocation,
        handler: H,
    ) -> BatchReport<R>
    where
        D: Serialize + DeserializeOwned,
        R: Serialize + DeserializeOwned,
        E: Into<HandlerError>,
        H: Fn(Envelope<D>) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        let messages: Vec<Message<'_>> = event.records.iter().map(Message::kinesis).collect();
        self.process(Semantics::Stream, &messages, invocation, &handler)
            .await
    }

    /// Processes one EventBridge event (an invocation by a rule or the Custom Event Bus).
    ///
    /// An asynchronous invocation is retried at most twice (the function's
    /// `MaximumRetryAttempts`), so an early event under the order option may reach the
    /// on-failure destination before its predecessor arrives: to restore order on the classic
    /// bus, put an SQS queue behind the rule and process it with
    /// [`BatchProcessor::process_sqs`] (the queue re-delivers until its `maxReceiveCount`).
    ///
    /// # Errors
    /// [`BatchError`] when the event fails: return it as the invocation's error, so EventBridge
    /// retries the event (and then sends it to the function's on-failure destination).
    pub async fn process_eventbridge<D, R, E, H, Fut>(
        &self,
        event: &Value,
        invocation: &Invocation,
        handler: H,
    ) -> Result<Processed<R>, BatchError>
    where
        D: Serialize + DeserializeOwned,
        R: Serialize + DeserializeOwned,
        E: Into<HandlerError>,
        H: Fn(Envelope<D>) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        let mut item = ItemReport::new(String::new());
        self.apply(
            &Message::eventbridge(event),
            invocation,
            &handler,
            &mut item,
        )
        .await
    }

    async fn process<D, R, E, H, Fut>(
        &self,
        semantics: Semantics,
        messages: &[Message<'_>],
        invocation: &Invocation,
        handler: &H,
    ) -> BatchReport<R>
    where
        D: Serialize + DeserializeOwned,
        R: Serialize + DeserializeOwned,
        E: Into<HandlerError>,
        H: Fn(Envelope<D>) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        let mut rules = rules::Rules::new(semantics);
        let mut items = Vec::with_capacity(messages.len());
        for message in messages {
            let mut item = ItemReport::new(message.id.to_owned());
            if !rules.holds_back(message.group) {
                self.process_one(message, invocation, handler, &mut item)
                    .await;
                if !item.is_done() {
                    rules.failed(message.group);
                }
            }
            items.push(item);
        }
        if semantics == Semantics::Unordered && self.sequencing.is_some() {
            self.retry_early(messages, invocation, handler, &mut items)
                .await;
        }
        let report = BatchReport { semantics, items };
        let failures = report.failures().len();
        if failures > 0 {
            info!(
                messages = messages.len(),
                failures,
                ?semantics,
                "batch partly failed"
            );
        }
        report
    }

    /// Tries again, in sequence order, the messages that were early while a message of their
    /// aggregate was applied in this batch, as long as one more applies.
    async fn retry_early<D, R, E, H, Fut>(
        &self,
        messages: &[Message<'_>],
        invocation: &Invocation,
        handler: &H,
        items: &mut [ItemReport<R>],
    ) where
        D: Serialize + DeserializeOwned,
        R: Serialize + DeserializeOwned,
        E: Into<HandlerError>,
        H: Fn(Envelope<D>) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        if !items.iter().any(ItemReport::is_done) {
            return;
        }
        loop {
            let mut early: Vec<(u64, usize)> = items
                .iter()
                .enumerate()
                .filter_map(|(index, item)| match item.error() {
                    Some(BatchError::Early { sequence, .. }) => Some((*sequence, index)),
                    _ => None,
                })
                .collect();
            if early.is_empty() {
                return;
            }
            early.sort_unstable();
            let mut progressed = false;
            for (_, index) in early {
                let item = &mut items[index];
                self.process_one(&messages[index], invocation, handler, item)
                    .await;
                progressed |= item.is_done();
            }
            if !progressed {
                return;
            }
        }
    }

    async fn process_one<D, R, E, H, Fut>(
        &self,
        message: &Message<'_>,
        invocation: &Invocation,
        handler: &H,
        item: &mut ItemReport<R>,
    ) where
        D: Serialize + DeserializeOwned,
        R: Serialize + DeserializeOwned,
        E: Into<HandlerError>,
        H: Fn(Envelope<D>) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        item.status = match self.apply(message, invocation, handler, item).await {
            Ok(processed) => ItemStatus::Done(processed),
            Err(error @ BatchError::Early { .. }) => {
                info!(message_id = message.id, error = %error, "event early: reported for re-delivery");
                ItemStatus::Failed(error)
            }
            Err(error) => {
                warn!(message_id = message.id, event_id = item.event_id.as_deref(),
                    retryable = error.is_retryable(), error = %error,
                    "message failed: reported for re-delivery");
                ItemStatus::Failed(error)
            }
        };
    }

    /// Decodes the message's event, continues its trace, and applies it.
    async fn apply<D, R, E, H, Fut>(
        &self,
        message: &Message<'_>,
        invocation: &Invocation,
        handler: &H,
        item: &mut ItemReport<R>,
    ) -> Result<Processed<R>, BatchError>
    where
        D: Serialize + DeserializeOwned,
        R: Serialize + DeserializeOwned,
        E: Into<HandlerError>,
        H: Fn(Envelope<D>) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        let event = message.event()?;
        let decoded = match &self.payloads {
            Some(resolver) => resolver.decode(&event).await,
            None => crate::decode(&event),
        };
        let envelope: Envelope<D> = decoded.map_err(|source| BatchError::Decode {
            id: message.id.to_owned(),
            source,
        })?;
        item.event_id = Some(envelope.metadata.event_id.clone());
        let xray = message.xray.or(invocation.xray_header.as_deref());
        let span = trace::process_span(&envelope, xray);
        self.apply_in_order(envelope, invocation, handler, item)
            .instrument(span)
            .await
    }

    /// Applies the event if its aggregate's order allows (order option), once (idempotency).
    async fn apply_in_order<D, R, E, H, Fut>(
        &self,
        envelope: Envelope<D>,
        invocation: &Invocation,
        handler: &H,
        item: &mut ItemReport<R>,
    ) -> Result<Processed<R>, BatchError>
    where
        D: Serialize + DeserializeOwned,
        R: Serialize + DeserializeOwned,
        E: Into<HandlerError>,
        H: Fn(Envelope<D>) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        let metadata = &envelope.metadata;
        let event_id = metadata.event_id.clone();
        let sequencing = |source| BatchError::Sequencing {
            event_id: event_id.clone(),
            source: Box::new(source),
        };
        let ordered = match (&self.sequencing, &metadata.aggregate_id, metadata.sequence) {
            (Some(store), Some(aggregate), Some(sequence)) => {
                let key = SequenceStore::<S>::key(metadata.aggregate_type.as_deref(), aggregate);
                let check = store.check(&key, sequence).await.map_err(sequencing)?;
                match check.decision {
                    Decision::Duplicate => return Ok(Processed::AlreadyApplied),
                    Decision::Early => {
                        return Err(BatchError::Early {
                            event_id,
                            aggregate: aggregate.clone(),
                            sequence,
                            last: check.read.last,
                        });
                    }
                    Decision::Apply | Decision::ApplyAfterGap { .. } => Some((store, check)),
                }
            }
            _ => None,
        };
        let processed = self.run_handler(envelope, invocation, handler).await?;
        if let Some((store, check)) = ordered {
            store.advance(&check).await.map_err(sequencing)?;
            if let Decision::ApplyAfterGap { missing, .. } = check.decision {
                item.gap = Some(missing);
            }
        }
        Ok(processed)
    }

    /// Runs the handler, through the idempotency store when there is one.
    async fn run_handler<D, R, E, H, Fut>(
        &self,
        envelope: Envelope<D>,
        invocation: &Invocation,
        handler: &H,
    ) -> Result<Processed<R>, BatchError>
    where
        D: Serialize + DeserializeOwned,
        R: Serialize + DeserializeOwned,
        E: Into<HandlerError>,
        H: Fn(Envelope<D>) -> Fut,
        Fut: Future<Output = Result<R, E>>,
    {
        let event_id = envelope.metadata.event_id.clone();
        let Some(store) = &self.idempotency else {
            return handler(envelope)
                .await
                .map(Processed::Handled)
                .map_err(|e| BatchError::Handler {
                    event_id,
                    source: e.into(),
                });
        };
        // The payload the key stands for: the envelope, whatever format or wrapping it came in.
        let payload = serde_json::to_value(&envelope).map_err(|e| BatchError::Idempotency {
            event_id: event_id.clone(),
            source: Box::new(IdempotencyError::Serialization {
                key: event_id.clone(),
                what: "payload",
                reason: e.to_string(),
            }),
        })?;
        let ran = store
            .run(&event_id, &payload, invocation.deadline, || async {
                handler(envelope).await.map_err(Into::into)
            })
            .await;
        match ran {
            Ok(Outcome::Executed(response)) => Ok(Processed::Handled(response)),
            Ok(Outcome::AlreadyCompleted(response)) => Ok(Processed::Replayed(response)),
            Err(IdempotencyError::Business { error, .. }) => Err(BatchError::Handler {
                event_id,
                source: error,
            }),
            Err(source) => Err(BatchError::Idempotency {
                event_id,
                source: Box::new(source),
            }),
        }
    }
}
