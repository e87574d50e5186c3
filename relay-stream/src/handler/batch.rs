//! The batch loop: decode every record, leave held aggregates to the poller, publish what this
//! relay has not published already (a re-delivered batch), settle (mark, dead-letter), hold what
//! failed, and report the first record Lambda must re-deliver.

use aws_lambda_events::dynamodb::EventRecord;
use chrono::Utc;
use outbox_shared::OutboundEvent;
use relay_runtime::{DeadLetterSink, HoldStore, PublishOutcome, Publisher, Settled, StatusStore};

use super::decode::{dead_letter_record, decode_batch};
use super::report::{BatchReport, RecordOutcome};
use super::{RESPONSE_RESERVE, StreamRelay};
use crate::metrics as m;

impl<P: Publisher, S: StatusStore, D: DeadLetterSink, H: HoldStore> StreamRelay<P, S, D, H> {
    /// Handles one batch of stream records, with no deadline.
    pub async fn handle(&self, records: &[EventRecord]) -> BatchReport {
        self.handle_until(records, None).await
    }

    /// Handles one batch of stream records that must be done by `deadline` (the invocation's):
    /// no publish starts after `deadline` minus the margin; what was published by then is marked,
    /// and the first record not published is the batch item failure.
    pub async fn handle_until(
        &self,
        records: &[EventRecord],
        deadline: Option<tokio::time::Instant>,
    ) -> BatchReport {
        let before = |d: tokio::time::Instant, margin| {
            d.checked_sub(margin)
                .unwrap_or_else(tokio::time::Instant::now)
        };
        let stop_at = deadline.map(|d| before(d, self.options.deadline_margin));
        // What runs after the last publish (marks, dead letters, holds) ends by then
        let finish_by = deadline.map(|d| before(d, RESPONSE_RESERVE));
        let mut outcomes: Vec<Option<RecordOutcome>> = vec![None; records.len()];
        let (mut ready, mut poison) = decode_batch(records, &mut outcomes);
        if self.options.hold_failed_aggregates {
            self.leave_held_aggregates(records, &mut ready, &mut poison, &mut outcomes, finish_by)
                .await;
        }
        let results = self.publish_unless_published(ready.events(), stop_at).await;
        let published_at = Utc::now();
        let mut settled = self
            .relay
            .settle_until(
                ready,
                results,
                poison,
                |&index| dead_letter_record(&records[index]),
                finish_by,
            )
            .await;
        if self.options.hold_failed_aggregates {
            settled = self
                .hold_failed(records, settled, &mut outcomes, finish_by)
                .await;
        }
        let mut max_lag_ms: Option<i64> = None;
        let mut published = Vec::new();
        for result in settled {
            if let Settled::Published {
                source, event_id, ..
            } = &result
            {
                published.push(event_id.clone());
                let lag = (published_at - records[*source].change.approximate_creation_date_time)
                    .num_milliseconds();
                max_lag_ms = Some(max_lag_ms.map_or(lag, |l| l.max(lag)));
            }
            let (index, outcome) = record_outcome(result);
            outcomes[index] = Some(outcome);
        }
        self.recently_published.remember(published);
        report(records, outcomes, max_lag_ms)
    }

    /// Publishes `events`, except those this relay published lately (a re-delivered batch brings
    /// them again): their outcome is [`PublishOutcome::Published`] without a call, so they are
    /// marked again and reported published. Only an event EventBridge accepted from this process
    /// is remembered, so none is skipped that was not published.
    async fn publish_unless_published(
        &self,
        events: &[OutboundEvent],
        stop_at: Option<tokio::time::Instant>,
    ) -> Vec<PublishOutcome> {
        let already: Vec<bool> = events
            .iter()
            .map(|e| self.recently_published.contains(&e.event_id))
            .collect();
        let skipped = already.iter().filter(|a| **a).count();
        if skipped == 0 {
            return self.publish(events, stop_at).await;
        }
        tracing::info!(
            already_published = skipped,
            "re-delivered records whose events this relay published: marked, not published again"
        );
        let fresh: Vec<OutboundEvent> = events
            .iter()
            .zip(&already)
            .filter(|(_, a)| !**a)
            .map(|(e, _)| e.clone())
            .collect();
        let mut fresh_outcomes = self.publish(&fresh, stop_at).await.into_iter();
        already
            .iter()
            .map(|a| {
                if *a {
                    PublishOutcome::Published
                } else {
                    fresh_outcomes.next().unwrap_or(PublishOutcome::NotSent)
                }
            })
            .collect()
    }

    /// Publishes `events`, starting nothing after `stop_at`. In strict mode it publishes a chunk
    /// at a time and stops at the first chunk with an event not published: the rest are
    /// [`PublishOutcome::NotSent`].
    async fn publish(
        &self,
        events: &[OutboundEvent],
        stop_at: Option<tokio::time::Instant>,
    ) -> Vec<PublishOutcome> {
        if !self.options.stop_at_first_failure {
            return self.relay.publish_until(events, stop_at).await;
        }
        let mut results = Vec::with_capacity(events.len());
        for chunk in events.chunks(self.options.strict_chunk_size.max(1)) {
            let outcomes = self.relay.publish_until(chunk, stop_at).await;
            let failed = outcomes.iter().any(|o| {
                matches!(
                    o,
                    PublishOutcome::Failed { .. }
                        | PublishOutcome::HeldBack
                        | PublishOutcome::NotSent
                )
            });
            results.extend(outcomes);
            if failed {
                break;
            }
        }
        results.resize(events.len(), PublishOutcome::NotSent);
        results
    }
}

/// What a settled event means for its record (the record's index, and its outcome). A failed
/// mark is not a batch failure (see the module docs of [`super`]); it is counted `not_marked`.
fn record_outcome(result: Settled<usize>) -> (usize, RecordOutcome) {
    match result {
        Settled::Published {
            event_id,
            source,
            mark,
            ..
        } => (
            source,
            RecordOutcome::Published {
                event_id,
                marked: mark.is_ok(),
            },
        ),
        Settled::Failed {
            event_id,
            code,
            message,
            source,
            ..
        } => (
            source,
            RecordOutcome::Failed {
                event_id: Some(event_id),
                reason: format!("{code}: {message}"),
            },
        ),
        Settled::NotSent {
            event_id, source, ..
        }
        | Settled::HeldBack {
            event_id, source, ..
        } => (source, RecordOutcome::NotSent { event_id }),
        Settled::DeadLettered { poison, mark } => (
            poison.source,
            RecordOutcome::DeadLettered {
                event_id: poison.event_id,
                reason: poison.reason,
                marked: !matches!(mark, Some(Err(_))),
            },
        ),
        Settled::NotDeadLettered { poison, error } => {
            let reason = match error {
                None => format!(
                    "poison (no dead-letter queue configured): {}",
                    poison.reason
                ),
                Some(err) => format!("dead-letter queue unavailable: {err}"),
            };
            (
                poison.source,
                RecordOutcome::Failed {
                    event_id: poison.event_id,
                    reason,
                },
            )
        }
    }
}

/// The batch's report from every record's outcome, counted in the metrics and the log.
fn report(
    records: &[EventRecord],
    outcomes: Vec<Option<RecordOutcome>>,
    max_lag_ms: Option<i64>,
) -> BatchReport {
    let outcomes: Vec<RecordOutcome> = outcomes
        .into_iter()
        .map(|o| o.expect("every record gets an outcome"))
        .collect();
    let first_unpublished = outcomes.iter().position(RecordOutcome::needs_redelivery);
    let report = BatchReport {
        outcomes,
        first_unpublished,
    };
    let counts = report.counts();
    m::record_batch(&counts, max_lag_ms);
    tracing::info!(
        records = records.len(),
        published = counts.published,
        ignored = counts.ignored,
        dead_lettered = counts.dead_lettered,
        failed = counts.failed,
        not_marked = counts.not_marked,
        "batch handled"
    );
    report
}
