//! The AWS calls of each of the poller's jobs, put together from the lists beside the calls: the
//! template gives the always-on service ([`service`]) and the operator commands ([`operator`]) a
//! task definition and role each, with exactly these permissions (checked by a test of
//! outbox-tests against `infra/template.yaml`).

use relay_runtime::TargetKind;
use relay_runtime::permissions::{Call, union};

/// `run` and a `drain` backfill (the service's task definition) publishing to a `target` of its
/// kind: the index, marks and TTL
/// refreshes, the release of holds (and the read of the events recorded on them), publishes, dead
/// letters, the shard leases, and the discarded stream batches (read, their TTL-deleted events
/// re-created, deleted); at start-up, the describe calls of the probe (`relay_runtime::probe`).
pub fn service(target: TargetKind) -> Vec<Call> {
    union(&[
        relay_runtime::probe::CALLS,
        relay_runtime::probe::LEASE_TABLE_CALLS,
        crate::discarded::s3::CALLS,
        crate::recreate::CALLS,
        crate::index::CALLS,
        relay_runtime::status_store::CALLS,
        crate::poller::ttl::CALLS,
        relay_runtime::holds::RELEASE_CALLS,
        target.spec().calls,
        target.spec().describe_calls,
        relay_runtime::dead_letter::CALLS,
        relay_runtime::dead_letter::RECORD_CALLS,
        relay_runtime::claim_check::CALLS,
        relay_runtime::probe::PAYLOAD_BUCKET_CALLS,
        crate::assignment::store::CALLS,
        crate::failover::store::CALLS,
    ])
}

/// `redrive`, `recover-discarded`, `inspect`, `status`, `adopt-region` and `hand-back-region` (the
/// operator's task definition). A
/// redrive publishes what it put back with the poller's publish path: publishes, marks and dead
/// letters, with their calls; it and `recover-discarded` re-create gone items. Each first
/// describes what it relies on (`relay_runtime::probe`).
pub fn operator(target: TargetKind) -> Vec<Call> {
    union(&[
        relay_runtime::probe::CALLS,
        relay_runtime::probe::LEASE_TABLE_CALLS,
        crate::redrive::CALLS,
        crate::recreate::CALLS,
        crate::discarded::s3::CALLS,
        target.spec().calls,
        target.spec().describe_calls,
        relay_runtime::status_store::CALLS,
        relay_runtime::dead_letter::CALLS,
        relay_runtime::dead_letter::RECORD_CALLS,
        relay_runtime::claim_check::CALLS,
        relay_runtime::probe::PAYLOAD_BUCKET_CALLS,
        crate::inspect::CALLS,
        crate::status::CALLS,
        crate::index::CALLS,
        crate::assignment::store::VIEW_CALLS,
        crate::failover::store::OPERATOR_CALLS,
    ])
}
