//! What the poller records, under the names both relays share (`relay_runtime::metrics`).
//!
//! The binary installs the CloudWatch Embedded Metric Format recorder
//! (`relay_runtime::metrics::install_emf`); without a recorder (library use, tests) recording is a
//! no-op. These take plain values and import nothing of the poller: the loops, the sweep and the
//! statistics call them, never the other way round. What a page's events came to is recorded by
//! the runtime's one function for both relays (`relay_runtime::metrics::relayed`).
//!
//! `Backlog` and `OldestPendingAgeSeconds` are recorded once per pass whose reads all succeeded,
//! as histogram values (emitted only when recorded): an idle, healthy poller reports 0 every pass,
//! and a poller whose reads fail reports nothing, which the oldest-pending alarm treats as
//! breaching. A gauge would repeat its last value forever.

use std::time::Duration;

use chrono::{DateTime, Utc};
use outbox_shared::time::parse_timestamp;
use relay_runtime::metrics::{
    BACKLOG, DISCARDED_BATCHES_LEFT, DISCARDED_BATCHES_RECOVERED, DISCARDED_EVENTS_RECREATED,
    HOLDS, HOLDS_RELEASED, LEASE_TAKEOVERS, LEASES_OWNED, OLDEST_HOLD_AGE, OLDEST_PENDING_AGE,
    REGIONS_ADOPTED, STRAY_PENDING, TTL_EXTENDED, count, observe,
};

/// What a sweep of the discarded stream batches did: batches recovered and deleted, events
/// re-created, batches left in the bucket (the caller records nothing for a dry run: it did
/// nothing).
pub(crate) fn discarded(recovered: u64, recreated: u64, left_in_bucket: u64) {
    count(DISCARDED_BATCHES_RECOVERED, recovered);
    count(DISCARDED_EVENTS_RECREATED, recreated);
    count(DISCARDED_BATCHES_LEFT, left_in_bucket);
}

pub(crate) fn ttl_extended(n: u64) {
    count(TTL_EXTENDED, n);
}

pub(crate) fn leases_owned(n: usize) {
    #[allow(clippy::cast_precision_loss)] // at most the shard count
    observe(LEASES_OWNED, n as f64);
}

pub(crate) fn regions_adopted(n: usize) {
    #[allow(clippy::cast_precision_loss)] // at most the regions of a global table
    observe(REGIONS_ADOPTED, n as f64);
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

/// Backlog (`backlog` pending events older than the grace period) and oldest age
/// (`oldest_created_at`) of a finished pass whose reads all succeeded
/// ([`crate::poller::stats::PassStats::record`] records nothing for a pass that saw only part of
/// the index).
pub fn pass(backlog: u64, oldest_created_at: Option<&str>, now: DateTime<Utc>) {
    #[allow(clippy::cast_precision_loss)] // a backlog beyond 2^52 events is not a concern
    observe(BACKLOG, backlog as f64);
    observe(OLDEST_PENDING_AGE, oldest_age(oldest_created_at, now));
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

    use super::*;

    #[test]
    fn oldest_age_is_seconds_since_created_at() {
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 10, 1, 0).unwrap();
        assert_eq!(oldest_age(Some("2026-11-22T10:00:00.000Z"), now), 60.0);
        assert_eq!(oldest_age(None, now), 0.0);
        assert_eq!(oldest_age(Some("garbage"), now), 0.0);
        assert_eq!(oldest_age(Some("2026-11-22T11:00:00Z"), now), 0.0);
    }
}
