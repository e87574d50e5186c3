//! What the check says about each item: a [`Verdict`] and what was found, with the fix, decided
//! by pure functions over what AWS answered (tested without AWS).

use crate::partitions::Partitions;
use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::{
    KeySchemaElement, KeyType, ProjectionType, StreamViewType, TableDescription, TimeToLiveStatus,
};
use outbox_shared::SdkFailure;
use outbox_shared::limits::SQS_MESSAGE_ABSOLUTE_MAX_BYTES;
use outbox_shared::schema::attr;
use relay_runtime::probe::Unusable;
use serde::Serialize;

/// Whether an item holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Fail,
    /// Not checked, with a note why (not a failure).
    Skipped,
}

/// One line of the check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Item {
    /// What is checked: `table`, `index`, `ttl`, `stream`, `target`, …
    pub item: &'static str,
    pub verdict: Verdict,
    /// What was found.
    pub detail: String,
    /// What to do, when it does not hold.
    pub fix: Option<String>,
}

impl Item {
    pub(super) fn ok(item: &'static str, detail: impl Into<String>) -> Self {
        Self {
            item,
            verdict: Verdict::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    pub(super) fn fail(
        item: &'static str,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self {
            item,
            verdict: Verdict::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    pub(super) fn skipped(item: &'static str, detail: impl Into<String>) -> Self {
        Self {
            item,
            verdict: Verdict::Skipped,
            detail: detail.into(),
            fix: None,
        }
    }

    /// The item for a resource a probe could not use.
    pub(super) fn unusable(item: &'static str, unusable: &Unusable) -> Self {
        Self::fail(item, unusable.finding(), unusable.fix.clone())
    }

    /// The item for a probe whose call failed in a way a retry may fix.
    pub(super) fn unknown(item: &'static str, failure: &SdkFailure) -> Self {
        Self::fail(
            item,
            format!("could not be read: {failure}"),
            "run check again; if it keeps failing, the error says why",
        )
    }

    /// The table's keys: `PK` (HASH) and `SK` (RANGE), strings.
    pub fn table_keys(table: &TableDescription) -> Self {
        let expected = [(attr::PK, KeyType::Hash), (attr::SK, KeyType::Range)];
        match keys_differ(table, table.key_schema(), &expected) {
            None => Self::ok(
                "table",
                format!(
                    "{}: keys {} (HASH), {} (RANGE), strings",
                    table.table_name().unwrap_or_default(),
                    attr::PK,
                    attr::SK
                ),
            ),
            Some(found) => Self::fail(
                "table",
                format!(
                    "{}: keys {found}, not {} (HASH), {} (RANGE) strings",
                    table.table_name().unwrap_or_default(),
                    attr::PK,
                    attr::SK
                ),
                "the writer and the relays use the item schema's keys (docs/schema.md, Item schema): \
                 create the table as infra/template.yaml declares OutboxTable",
            ),
        }
    }

    /// The pending index: its keys (`GSI1PK` HASH, `GSI1SK` RANGE, strings) and a projection of
    /// every attribute (the poller publishes from the index).
    pub fn index(table: &TableDescription, index_name: &str) -> Self {
        let Some(index) = table
            .global_secondary_indexes()
            .iter()
            .find(|i| i.index_name() == Some(index_name))
        else {
            return Self::fail(
                "index",
                format!("the table has no index {index_name}"),
                "create it as infra/template.yaml declares GSI1, or set --index-name \
                 (OUTBOX_INDEX_NAME) to the pending index",
            );
        };
        let expected = [
            (attr::GSI1PK, KeyType::Hash),
            (attr::GSI1SK, KeyType::Range),
        ];
        if let Some(found) = keys_differ(table, index.key_schema(), &expected) {
            return Self::fail(
                "index",
                format!(
                    "{index_name}: keys {found}, not {} (HASH), {} (RANGE) strings",
                    attr::GSI1PK,
                    attr::GSI1SK
                ),
                "the writer puts pending events under GSI1PK/GSI1SK: create the index as \
                 infra/template.yaml declares GSI1 (an index's keys cannot change: a new index \
                 under another name, then --index-name)",
            );
        }
        let projection = index
            .projection()
            .and_then(|p| p.projection_type())
            .cloned();
        if projection != Some(ProjectionType::All) {
            return Self::fail(
                "index",
                format!(
                    "{index_name}: projection {}, not ALL: the poller publishes each event from \
                     what the index returns, so it would read events without their payload",
                    projection.as_ref().map_or("none", ProjectionType::as_str)
                ),
                format!(
                    "re-create the index with ProjectionType ALL, as infra/template.yaml declares \
                     GSI1 (a projection cannot change in place: add an index under another name \
                     with the same keys, set --index-name (OUTBOX_INDEX_NAME) to it, then delete \
                     {index_name})"
                ),
            );
        }
        Self::ok(
            "index",
            format!(
                "{index_name}: keys {} (HASH), {} (RANGE), projection ALL",
                attr::GSI1PK,
                attr::GSI1SK
            ),
        )
    }

    /// The stream: enabled, with a view that carries old images (a TTL deletion's `REMOVE` is
    /// the last copy of a pending event) and new ones (an `INSERT` is what the relay publishes).
    pub fn stream(table: &TableDescription) -> Self {
        let name = table.table_name().unwrap_or_default();
        let spec = table.stream_specification();
        let fix = format!(
            "enable the stream with NEW_AND_OLD_IMAGES (aws dynamodb update-table --table-name \
             {name} --stream-specification StreamEnabled=true,StreamViewType=NEW_AND_OLD_IMAGES, \
             after disabling a stream of another view; the stream relay's mapping then needs the \
             new stream ARN: docs/operations.md, Stream view)"
        );
        match spec {
            Some(spec) if spec.stream_enabled() => match spec.stream_view_type() {
                Some(StreamViewType::NewAndOldImages) => Self::ok(
                    "stream",
                    format!(
                        "enabled, NEW_AND_OLD_IMAGES ({})",
                        table.latest_stream_arn().unwrap_or_default()
                    ),
                ),
                view => Self::fail(
                    "stream",
                    format!(
                        "view {}: {}",
                        view.map_or("none", StreamViewType::as_str),
                        match view {
                            Some(StreamViewType::NewImage | StreamViewType::KeysOnly) => {
                                "a TTL deletion's REMOVE record carries no old image, so a \
                                 pending event TTL deletes is lost"
                            }
                            _ =>
                                "an INSERT record carries no new image, so the stream relay \
                                 cannot publish it",
                        }
                    ),
                    fix,
                ),
            },
            _ => Self::fail(
                "stream",
                "not enabled: the stream relay has nothing to read",
                fix,
            ),
        }
    }

    /// TTL, enabled on `ttl` (status as `DescribeTimeToLive` answers it).
    pub fn ttl(
        table_name: &str,
        status: Option<&TimeToLiveStatus>,
        attribute: Option<&str>,
    ) -> Self {
        let fix = format!(
            "aws dynamodb update-time-to-live --table-name {table_name} \
             --time-to-live-specification Enabled=true,AttributeName={}",
            attr::TTL
        );
        match (status, attribute) {
            (Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling), Some(a))
                if a == attr::TTL =>
            {
                Self::ok("ttl", format!("enabled on {}", attr::TTL))
            }
            (Some(TimeToLiveStatus::Enabled | TimeToLiveStatus::Enabling), Some(other)) => {
                Self::fail(
                    "ttl",
                    format!(
                        "enabled on {other}, not {}: published items are never removed",
                        attr::TTL
                    ),
                    format!("disable TTL, wait an hour (DynamoDB's rule), then: {fix}"),
                )
            }
            (status, _) => Self::fail(
                "ttl",
                format!(
                    "{}: published and dead-lettered items stay forever",
                    status.map_or("not enabled".to_owned(), |s| format!(
                        "status {}",
                        s.as_str()
                    ))
                ),
                fix,
            ),
        }
    }

    /// The dead-letter queue and its `MaximumMessageSize`.
    pub fn dead_letter_queue(url: &str, maximum_message_size: Option<u64>) -> Self {
        let template = SQS_MESSAGE_ABSOLUTE_MAX_BYTES as u64;
        match maximum_message_size {
            Some(size) if size >= template => Self::ok(
                "dead-letter queue",
                format!("{url}: MaximumMessageSize {size} bytes (an item of 400 KB fits whole)"),
            ),
            Some(size) => Self::ok(
                "dead-letter queue",
                format!(
                    "{url}: MaximumMessageSize {size} bytes: a letter larger than that goes \
                     without its record (the template's queue takes {template})"
                ),
            ),
            None => Self::ok("dead-letter queue", format!("{url}: exists")),
        }
    }

    /// Events under index partitions outside every region's shards ([`Partitions::is_indexed`];
    /// `pending`: events per partition).
    pub fn strays(pending: &BTreeMap<String, u64>, partitions: &Partitions) -> Self {
        let shard_count = partitions.shard_count();
        let strays: Vec<(&String, &u64)> = pending
            .iter()
            .filter(|(partition, _)| !partitions.is_indexed(partition))
            .collect();
        if strays.is_empty() {
            return Self::ok(
                "strays",
                format!("no pending event outside the {shard_count} shards"),
            );
        }
        let total: u64 = strays.iter().map(|(_, n)| **n).sum();
        let listed: Vec<String> = strays.iter().map(|(p, n)| format!("{p}: {n}")).collect();
        Self::fail(
            "strays",
            format!(
                "{total} pending events under partitions outside --shard-count {shard_count} ({})",
                listed.join(", ")
            ),
            "a writer uses another shard count than the poller: make them equal \
             (OUTBOX_SHARD_COUNT, the writer's shard_count), then `relay-poller drain` publishes \
             the strays (docs/operations.md, Reshard)",
        )
    }
}

/// The keys of `schema` as `NAME (TYPE) type` when they are not `expected` strings, `None` when
/// they are.
fn keys_differ(
    table: &TableDescription,
    schema: &[KeySchemaElement],
    expected: &[(&str, KeyType)],
) -> Option<String> {
    let string = |name: &str| {
        table
            .attribute_definitions()
            .iter()
            .find(|d| d.attribute_name() == name)
            .is_some_and(|d| d.attribute_type().as_str() == "S")
    };
    let matches = schema.len() == expected.len()
        && expected.iter().all(|(name, key_type)| {
            schema
                .iter()
                .any(|k| k.attribute_name() == *name && k.key_type() == key_type)
                && string(name)
        });
    if matches {
        return None;
    }
    Some(
        schema
            .iter()
            .map(|k| {
                let kind = table
                    .attribute_definitions()
                    .iter()
                    .find(|d| d.attribute_name() == k.attribute_name())
                    .map_or("?", |d| d.attribute_type().as_str());
                format!("{} ({}, {kind})", k.attribute_name(), k.key_type().as_str())
            })
            .collect::<Vec<_>>()
            .join(", "),
    )
}
