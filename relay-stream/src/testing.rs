//! In-memory ports for unit tests, property tests and benchmarks: a publisher that records what
//! it was given and answers with scripted outcomes, a status store and a dead-letter sink that
//! record their calls. Nothing here talks to AWS.

use std::collections::HashMap;
use std::sync::Mutex;

use outbox_shared::error::ErrorClass;
use outbox_shared::{
    DeadLetter, DeadLetterError, DeadLetterSink, FlipOutcome, ItemKey, OutboundEvent, OutboxStatus,
    PublishOutcome, Publisher, StatusError, StatusStore,
};

/// Publishes nothing and answers `Published` for every event, unless scripted otherwise by
/// event id.
#[derive(Debug, Default)]
pub struct FakePublisher {
    script: HashMap<String, PublishOutcome>,
    max_entry_bytes: Option<usize>,
    published: Mutex<Vec<OutboundEvent>>,
    calls: Mutex<usize>,
}

impl FakePublisher {
    /// Answers `outcome` for the event with `event_id`.
    pub fn with_outcome(mut self, event_id: &str, outcome: PublishOutcome) -> Self {
        self.script.insert(event_id.to_owned(), outcome);
        self
    }

    /// Rejects events larger than `max` bytes as EventBridge would (`EntryTooLarge`).
    pub fn with_max_entry_bytes(mut self, max: usize) -> Self {
        self.max_entry_bytes = Some(max);
        self
    }

    /// Events answered `Published`, in the order they were given.
    pub fn published(&self) -> Vec<OutboundEvent> {
        self.published.lock().expect("not poisoned").clone()
    }

    /// `publish` calls made.
    pub fn calls(&self) -> usize {
        *self.calls.lock().expect("not poisoned")
    }
}

impl Publisher for FakePublisher {
    async fn publish(&self, events: &[OutboundEvent]) -> Vec<PublishOutcome> {
        *self.calls.lock().expect("not poisoned") += 1;
        let outcomes: Vec<PublishOutcome> = events
            .iter()
            .map(|e| {
                if let Some(outcome) = self.script.get(&e.event_id) {
                    return outcome.clone();
                }
                match self.max_entry_bytes {
                    Some(max) if e.entry_size() > max => PublishOutcome::Rejected {
                        code: outbox_shared::publisher::ENTRY_TOO_LARGE.to_owned(),
                        message: format!("entry is {} bytes", e.entry_size()),
                    },
                    _ => PublishOutcome::Published,
                }
            })
            .collect();
        let mut published = self.published.lock().expect("not poisoned");
        published.extend(
            events
                .iter()
                .zip(&outcomes)
                .filter(|(_, o)| o.is_published())
                .map(|(e, _)| e.clone()),
        );
        outcomes
    }
}

/// Records flips; fails every flip when built with [`FakeStatusStore::failing`].
#[derive(Debug, Default)]
pub struct FakeStatusStore {
    fail: bool,
    flips: Mutex<Vec<(ItemKey, OutboxStatus)>>,
}

impl FakeStatusStore {
    /// A store whose every update fails as throttled.
    pub fn failing() -> Self {
        Self {
            fail: true,
            ..Self::default()
        }
    }

    pub fn flips(&self) -> Vec<(ItemKey, OutboxStatus)> {
        self.flips.lock().expect("not poisoned").clone()
    }

    fn flip(&self, key: &ItemKey, status: OutboxStatus) -> Result<FlipOutcome, StatusError> {
        if self.fail {
            return Err(StatusError {
                key: key.clone(),
                status,
                class: ErrorClass::Retryable,
                message: "ProvisionedThroughputExceededException".into(),
            });
        }
        self.flips
            .lock()
            .expect("not poisoned")
            .push((key.clone(), status));
        Ok(FlipOutcome::Flipped)
    }
}

impl StatusStore for FakeStatusStore {
    async fn mark_published(&self, key: &ItemKey) -> Result<FlipOutcome, StatusError> {
        self.flip(key, OutboxStatus::Published)
    }

    async fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        _reason: &str,
    ) -> Result<FlipOutcome, StatusError> {
        self.flip(key, OutboxStatus::DeadLettered)
    }
}

/// Records dead letters; refuses them when built with [`FakeDeadLetters::unavailable`].
#[derive(Debug, Default)]
pub struct FakeDeadLetters {
    unavailable: bool,
    letters: Mutex<Vec<DeadLetter>>,
}

impl FakeDeadLetters {
    pub fn unavailable() -> Self {
        Self {
            unavailable: true,
            ..Self::default()
        }
    }

    pub fn letters(&self) -> Vec<DeadLetter> {
        self.letters.lock().expect("not poisoned").clone()
    }
}

impl DeadLetterSink for FakeDeadLetters {
    async fn send(&self, letter: &DeadLetter) -> Result<(), DeadLetterError> {
        if self.unavailable {
            return Err(DeadLetterError {
                event_id: letter.event_id.clone(),
                message: "queue unavailable".into(),
            });
        }
        self.letters
            .lock()
            .expect("not poisoned")
            .push(letter.clone());
        Ok(())
    }
}

// Borrowed fakes are ports too, so a test keeps the fake to inspect it after the handler ran.
impl Publisher for &FakePublisher {
    async fn publish(&self, events: &[OutboundEvent]) -> Vec<PublishOutcome> {
        (*self).publish(events).await
    }
}

impl StatusStore for &FakeStatusStore {
    async fn mark_published(&self, key: &ItemKey) -> Result<FlipOutcome, StatusError> {
        (*self).mark_published(key).await
    }

    async fn mark_dead_lettered(
        &self,
        key: &ItemKey,
        reason: &str,
    ) -> Result<FlipOutcome, StatusError> {
        (*self).mark_dead_lettered(key, reason).await
    }
}

impl DeadLetterSink for &FakeDeadLetters {
    async fn send(&self, letter: &DeadLetter) -> Result<(), DeadLetterError> {
        (*self).send(letter).await
    }
}
