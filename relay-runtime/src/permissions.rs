//! The AWS calls each relay job makes, as IAM names them and on what: the template gives each job
//! a role with exactly these (a test of outbox-tests reads every role from `infra/template.yaml` and
//! compares), and the integration runs of each job through the fault proxy check that the job calls
//! nothing else (a call missing here would be `AccessDeniedException` on AWS).
//!
//! Each module that makes calls lists its own beside them (`status_store::CALLS`,
//! `publisher::CALLS`, …); the relays' binaries put their modules' lists together
//! (`relay_stream::permissions`, `relay_poller::permissions`).

use outbox_shared::schema::attr;

/// What a call is made on, as the template's roles scope it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    /// The outbox table, any item and attribute.
    OutboxTable,
    /// The outbox table, only the attributes of [`STATUS_ATTRIBUTES`] (a `dynamodb:Attributes`
    /// condition): marks, dead-letter marks, TTL refreshes, a redrive's put-back.
    OutboxStatus,
    /// The outbox table, only the aggregate hold items (keys `HOLD#…`, a `dynamodb:LeadingKeys`
    /// condition).
    HoldItems,
    /// The outbox table, reading only an outbox item's attributes
    /// ([`outbox_shared::schema::OUTBOX_ATTRIBUTES`]), never an order's own: the operator
    /// commands' reads, each with a projection on them (or a count).
    OutboxAttributes,
    /// The outbox table, putting only an outbox item's attributes
    /// ([`outbox_shared::schema::OUTBOX_ATTRIBUTES`], a `dynamodb:Attributes` condition) and
    /// returning none (`dynamodb:ReturnValues` `NONE`): the re-create of an event whose item is
    /// gone, never an order's item (its own attributes are not among them).
    RecreatedItems,
    /// The outbox table, reading only whether an item is pending ([`PENDING_CHECK_ATTRIBUTES`]):
    /// the poller's read of the events recorded on a hold, projected on those.
    PendingCheck,
    /// The outbox table's pending index (`GSI1`).
    OutboxIndex,
    /// The poller fleet's lease table.
    LeaseTable,
    /// What the relays publish to (`EVENT_TARGET`): the bus, topic, queue or stream of the
    /// configured kind; each kind's calls are its [`crate::target::TargetSpec::calls`].
    EventTarget,
    /// The dead-letter queue of poison events.
    DeadLetterQueue,
    /// The bucket of the stream mapping's on-failure destination (discarded batches), as a bucket
    /// (`s3:ListBucket`).
    DiscardedBatchBucket,
    /// The objects the mapping writes in that bucket (`aws/lambda/…`).
    DiscardedBatchObjects,
    /// The payload bucket (`PAYLOAD_BUCKET`), as a bucket (`s3:ListBucket`: the start-up probe).
    PayloadBucket,
    /// The claim-check objects in it (`payloads/…`, [`outbox_shared::claim_check::KEY_PREFIX`]).
    PayloadObjects,
    /// The records of dead letters too large for their queue, in it (`dead-letters/…`).
    DeadLetterRecords,
}

/// One IAM action a job needs, and on what.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Call {
    /// The IAM action, e.g. `dynamodb:UpdateItem` (a `BatchExecuteStatement` of PartiQL
    /// `UPDATE`s is `dynamodb:PartiQLUpdate`).
    pub action: &'static str,
    pub on: Target,
}

impl Call {
    pub const fn new(action: &'static str, on: Target) -> Self {
        Self { action, on }
    }
}

/// Every top-level attribute a status update names: a mark (published or dead-lettered), a TTL
/// refresh and a redrive's put-back, keys included (IAM counts a request's key attributes among
/// its `dynamodb:Attributes`). The roles' status statements allow these and no other.
pub const STATUS_ATTRIBUTES: &[&str] = &[
    attr::PK,
    attr::SK,
    attr::STATUS,
    attr::PUBLISHED_AT,
    attr::DEAD_LETTERED_AT,
    attr::DEAD_LETTER_REASON,
    attr::TTL,
    attr::GSI1PK,
    attr::GSI1SK,
];

/// What the poller reads of each event recorded on an aggregate hold, to know whether it is still
/// pending: its keys and `GSI1PK` (set while pending), strongly consistent, by `BatchGetItem`.
pub const PENDING_CHECK_ATTRIBUTES: &[&str] = &[attr::PK, attr::SK, attr::GSI1PK];

/// `dynamodb:Select` of a read that names its attributes (a `ProjectionExpression`, or `Select`
/// set so); IAM sets it to `ALL_ATTRIBUTES` for a read of whole items.
pub const SELECT_SPECIFIC: &str = "SPECIFIC_ATTRIBUTES";
/// `dynamodb:Select` of a `Scan` or `Query` that counts items and returns none.
pub const SELECT_COUNT: &str = "COUNT";

impl Target {
    /// The attributes a call on this target may name (`dynamodb:Attributes`: its projection, key,
    /// condition, filter and update attributes), when its statement limits them; `None` when it
    /// does not.
    pub fn attributes(self) -> Option<&'static [&'static str]> {
        match self {
            Self::OutboxStatus => Some(STATUS_ATTRIBUTES),
            Self::OutboxAttributes | Self::RecreatedItems => {
                Some(outbox_shared::schema::OUTBOX_ATTRIBUTES)
            }
            Self::PendingCheck => Some(PENDING_CHECK_ATTRIBUTES),
            Self::OutboxTable
            | Self::HoldItems
            | Self::OutboxIndex
            | Self::LeaseTable
            | Self::EventTarget
            | Self::DeadLetterQueue
            | Self::DiscardedBatchBucket
            | Self::DiscardedBatchObjects
            | Self::PayloadBucket
            | Self::PayloadObjects
            | Self::DeadLetterRecords => None,
        }
    }

    /// The `dynamodb:Select` a read on this target may have, when its statement limits it to reads
    /// of the attributes it names (never `ALL_ATTRIBUTES`); empty when it does not.
    pub fn selects(self) -> &'static [&'static str] {
        match self {
            Self::OutboxAttributes => &[SELECT_SPECIFIC, SELECT_COUNT],
            Self::PendingCheck => &[SELECT_SPECIFIC],
            Self::OutboxTable
            | Self::OutboxStatus
            | Self::RecreatedItems
            | Self::HoldItems
            | Self::OutboxIndex
            | Self::LeaseTable
            | Self::EventTarget
            | Self::DeadLetterQueue
            | Self::DiscardedBatchBucket
            | Self::DiscardedBatchObjects
            | Self::PayloadBucket
            | Self::PayloadObjects
            | Self::DeadLetterRecords => &[],
        }
    }
}

/// `X-Amz-Target` of a call (as the SDK sends it) to the IAM action that authorizes it; `None`
/// for a target that is not DynamoDB, EventBridge, SQS, SNS, Kinesis or S3 (SNS's query calls have
/// no `X-Amz-Target`: they are named `AmazonSNS.{Action}`, as the test proxy names them). A batch
/// is authorized as its single call: `SendMessageBatch` as `sqs:SendMessage`, `PublishBatch` as
/// `sns:Publish`. The relays' `BatchExecuteStatement`s
/// hold PartiQL `UPDATE`s only. S3's REST calls have no `X-Amz-Target`: they are named
/// `AmazonS3.{Operation}` (as the test proxy names them), and IAM authorizes a listing of a
/// bucket's objects (`ListObjectsV2`) as `s3:ListBucket`.
pub fn action_of_target(target: &str) -> Option<String> {
    let (service, operation) = target.split_once('.')?;
    let prefix = match service {
        "DynamoDB_20120810" => "dynamodb",
        "DynamoDBStreams_20120810" => "dynamodb",
        // Both buses' PutEvents is events:PutEvents (the proxy names the Custom Event Bus's,
        // which has no X-Amz-Target, AWSEventsV2.PutEvents).
        "AWSEvents" | "AWSEventsV2" => "events",
        "AmazonSQS" => "sqs",
        "AmazonS3" => "s3",
        "AmazonSNS" => "sns",
        "Kinesis_20131202" => "kinesis",
        _ => return None,
    };
    Some(match operation {
        "BatchExecuteStatement" => "dynamodb:PartiQLUpdate".to_owned(),
        // A batch is authorized as each of its messages.
        "SendMessageBatch" => "sqs:SendMessage".to_owned(),
        "PublishBatch" => "sns:Publish".to_owned(),
        "ListObjectsV2" | "HeadBucket" if prefix == "s3" => "s3:ListBucket".to_owned(),
        // S3 authorizes HeadObject as s3:GetObject (and CopyObject as s3:GetObject on the source
        // with s3:PutObject on the copy: the copy onto itself, here).
        "HeadObject" if prefix == "s3" => "s3:GetObject".to_owned(),
        "CopyObject" if prefix == "s3" => "s3:PutObject".to_owned(),
        operation => format!("{prefix}:{operation}"),
    })
}

/// The distinct calls of `lists`, sorted.
pub fn union(lists: &[&[Call]]) -> Vec<Call> {
    let mut all: Vec<Call> = lists.iter().flat_map(|l| l.iter().copied()).collect();
    all.sort_unstable();
    all.dedup();
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_map_to_the_actions_iam_checks() {
        assert_eq!(
            action_of_target("DynamoDB_20120810.BatchExecuteStatement").as_deref(),
            Some("dynamodb:PartiQLUpdate")
        );
        assert_eq!(
            action_of_target("AmazonSQS.SendMessage").as_deref(),
            Some("sqs:SendMessage")
        );
        assert_eq!(
            action_of_target("AWSEvents.PutEvents").as_deref(),
            Some("events:PutEvents")
        );
        assert_eq!(
            action_of_target("AmazonS3.ListObjectsV2").as_deref(),
            Some("s3:ListBucket")
        );
        assert_eq!(
            action_of_target("AmazonS3.GetObject").as_deref(),
            Some("s3:GetObject")
        );
        assert_eq!(
            action_of_target("AmazonS3.HeadObject").as_deref(),
            Some("s3:GetObject")
        );
        assert_eq!(
            action_of_target("AWSEventsV2.PutEvents").as_deref(),
            Some("events:PutEvents")
        );
        assert_eq!(
            action_of_target("AmazonSQS.SendMessageBatch").as_deref(),
            Some("sqs:SendMessage")
        );
        assert_eq!(
            action_of_target("AmazonSNS.PublishBatch").as_deref(),
            Some("sns:Publish")
        );
        assert_eq!(
            action_of_target("Kinesis_20131202.PutRecords").as_deref(),
            Some("kinesis:PutRecords")
        );
        assert_eq!(action_of_target(""), None);
    }

    #[test]
    fn what_a_status_update_or_a_pending_check_names_is_an_outbox_attribute() {
        for name in STATUS_ATTRIBUTES.iter().chain(PENDING_CHECK_ATTRIBUTES) {
            assert!(
                outbox_shared::schema::OUTBOX_ATTRIBUTES.contains(name),
                "{name}"
            );
        }
    }
}
