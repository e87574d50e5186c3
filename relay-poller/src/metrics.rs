//! What the poller records, under the names both relays share (`relay_runtime::metrics`).
//!
//! The binary installs the CloudWatch Embedded Metric Format recorder
//! (`relay_runtime::metrics::install_emf`); without a recorder (library use, tests) recording is a
//! no-op. These read the pass statistics; the loops call them, never the other way round.
//!
//! `Backlog` and `OldestPendingAgeSeconds` are recorded once per pass whose reads all succeeded,
//! as histogram values (emitted only when recorded): an idle, healthy poller reports 0 every pass,
//! and a poller whose reads fail reports nothing, which the oldest-pending alarm treats as
//! breaching. A gauge would repeat its last value forever.

use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_shared::time::parse_timestamp;
use relay_runtime::Tally;
use relay_runtime::metrics::{
    ALREADY_MARKED, BACKLOG, DEAD_LETTERED, DISCARDED_BATCHES_LEFT, DISCARDED_BATCHES_RECOVERED,
    DISCARDED_EVENTS_RECREATED, HOLDS, HOLDS_RELEASED, LEASE_TAKEOVERS, LEASES_OWNED, NOT_MARKED,
    OLDEST_HOLD_AGE, OLDEST_PENDING_AGE, PUBLISH_FAILED, PUBLISHED, STRAY_PENDING, TTL_EXTENDED,
    count, observe,
};

use crate::discarded::Recovery;
use crate::poller::stats::PassStats;

/// What a page's events came to: published and marked by this poller, found already marked,
/// dead-lettered (and marked), published or dead-lettered but not marked, failed.
pub(crate) fn relayed(tally: &Tally) {
    count(PUBLISHED, tally.marked);
    count(ALREADY_MARKED, tally.already_marked);
    count(DEAD_LETTERED, tally.dead_lettered);
    count(NOT_MARKED, tally.all_not_marked());
    count(PUBLISH_FAILED, tally.failed);
}

/// What a sweep of the discarded stream batches did (nothing on a dry run: it did nothing).
pub(crate) fn discarded(recovery: &Recovery) {
    if recovery.dry_run {
        return;
    }
    count(DISCARDED_BATCHES_RECOVERED, recovery.recovered);
    count(DISCARDED_EVENTS_RECREATED, recovery.recreated);
    count(DISCARDED_BATCHES_LEFT, recovery.left_in_bucket);
}

pub(crate) fn ttl_extended(n: u64) {
    count(TTL_EXTENDED, n);
}

pub(crate) fn leases_owned(n: usize) {
    #[allow(clippy::cast_precision_loss)] // at most the shard count
    observe(LEASES_OWNED, n as f64);
}

pub(crate) fn lease_takeovers(n: u64) {
    count(LEASE_TAKEOVERS, n);
}

pub(crate) fn holds_released(n: u64) {
    count(HOLDS_RELEASED, n);
}

/// The aggregate holds a sweep found, and the age of the oldest (`held_since`), 0 without any.
pub(crate) fn holds(n: u64, held_since: Option<&str>, now: DateTime<Utc>) {
    #[allow(clippy::cast_precision_loss)] // far below 2^52
    observe(HOLDS, n as f64);
    observe(OLDEST_HOLD_AGE, oldest_age(held_since, now));
}

pub(crate) fn stray_pending(n: u64) {
    #[allow(clippy::cast_precision_loss)] // far below 2^52
    observe(STRAY_PENDING, n as f64);
}

/// Backlog and oldest age from a finished pass (no extra queries: the pass's first page of each
/// shard holds that shard's oldest event); nothing when one of its reads failed, since it saw
/// only part of the index.
pub fn pass(stats: &PassStats, now: DateTime<Utc>) {
    if stats.read_errors > 0 {
        return;
    }
    #[allow(clippy::cast_precision_loss)] // a backlog beyond 2^52 events is not a concern
    observe(BACKLOG, stats.taken as f64);
    observe(
        OLDEST_PENDING_AGE,
        oldest_age(stats.oldest_created_at.as_deref(), now),
    );
}

/// Seconds since `created_at`, 0 when there is none (or it does not parse).
pub fn oldest_age(created_at: Option<&str>, now: DateTime<Utc>) -> f64 {
    created_at
        .and_then(|t| parse_timestamp(t).ok())
        .map_or(0.0, |t| {
            (now - t).to_std().unwrap_or(Duration::ZERO).as_secs_f64()
        })
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;

    #[test]
    fn oldest_age_is_seconds_since_created_at() {
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 10, 1, 0).unwrap();
        assert_eq!(oldest_age(Some("2026-11-22T10:00:00.000Z"), now), 60.0);
        assert_eq!(oldest_age(None, now), 0.0);
        assert_eq!(oldest_age(Some("garbage"), now), 0.0);
        assert_eq!(oldest_age(Some("2026-11-22T11:00:00Z"), now), 0.0);
    }

    /// The values `record` leaves for `name`.
    fn recorded(name: &str, record: impl FnOnce()) -> Vec<f64> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, record);
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, ..)| key.key().name() == name)
            .flat_map(|(.., value)| -> Vec<f64> {
                match value {
                    DebugValue::Histogram(values) => values.into_iter().map(|v| v.0).collect(),
                    other => panic!("{name} is {other:?}"),
                }
            })
            .collect()
    }

    #[test]
    fn a_pass_whose_reads_failed_reports_no_oldest_age_and_an_idle_one_reports_zero() {
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 10, 1, 0).unwrap();
        let idle = PassStats::default();
        let failed = PassStats {
            read_errors: 16,
            ..PassStats::default()
        };
        let busy = PassStats {
            taken: 5,
            oldest_created_at: Some("2026-11-22T10:00:00.000Z".into()),
            ..PassStats::default()
        };
        assert_eq!(recorded(OLDEST_PENDING_AGE, || pass(&idle, now)), [0.0]);
        assert!(recorded(OLDEST_PENDING_AGE, || pass(&failed, now)).is_empty());
        assert!(recorded(BACKLOG, || pass(&failed, now)).is_empty());
        assert_eq!(recorded(OLDEST_PENDING_AGE, || pass(&busy, now)), [60.0]);
        assert_eq!(recorded(BACKLOG, || pass(&busy, now)), [5.0]);
    }
}
