//! The AWS calls the stream relay makes, put together from the lists beside the calls: the
//! template's `RelayFunctionRole` allows exactly these (checked by a test of outbox-tests), plus
//! what Lambda itself does with the function's role: the event source mapping's stream reads and
//! on-failure destination ([`ON_FAILURE_DESTINATION`]), logs, traces.

use relay_runtime::TargetKind;
use relay_runtime::permissions::{Call, Target, union};

/// What the event source mapping does with the function's role when it discards a batch: writes it
/// whole to its S3 on-failure destination. AWS documents `s3:PutObject` and `s3:ListBucket` for an
/// S3 destination; `relay-stream-local` makes the same put.
pub const ON_FAILURE_DESTINATION: &[Call] = &[
    Call::new("s3:PutObject", Target::DiscardedBatchObjects),
    Call::new("s3:ListBucket", Target::DiscardedBatchBucket),
];

/// Marks, publishes (to a `target` of its kind), dead letters, and in hold mode
/// (`HOLD_FAILED_AGGREGATES`, which the template turns on) the holds it sets and reads; on a
/// global table, its region's adoption read from the lease table; at init, the describe calls of
/// the start-up probe (the table, the target, the lease table: `relay_runtime::probe`).
pub fn calls(target: TargetKind) -> Vec<Call> {
    union(&[
        relay_runtime::probe::CALLS,
        relay_runtime::status_store::CALLS,
        target.spec().calls,
        target.spec().describe_calls,
        relay_runtime::dead_letter::CALLS,
        relay_runtime::dead_letter::RECORD_CALLS,
        relay_runtime::claim_check::CALLS,
        relay_runtime::probe::PAYLOAD_BUCKET_CALLS,
        relay_runtime::holds::HOLD_CALLS,
        relay_runtime::probe::LEASE_TABLE_CALLS,
        relay_runtime::adoption::CALLS,
    ])
}
