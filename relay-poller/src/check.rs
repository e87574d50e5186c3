//! `relay-poller check`: a preflight of a deployment, with the same settings as the relays. It
//! reads what the relays rely on and says, one line per item, OK or what is wrong and how to fix
//! it: the table's keys, the pending index's keys and projection, TTL on `ttl`, the stream and
//! its view, the target (of the configured kind), the dead-letter queue and its
//! `MaximumMessageSize`, the lease table, the discarded-batch bucket, events under partitions
//! outside the shard count, what the caller may do (`iam:SimulatePrincipalPolicy`), and the shard
//! count's write ceiling against the index's recent peak (CloudWatch).
//!
//! What is wrong about each item is decided by [`Item`]'s pure functions over what AWS answered
//! (tested without AWS); [`run`] reads the answers, through the start-up probes of
//! [`relay_runtime::preflight`] where a relay has one, so a resource is described one way.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context;
use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::{
    KeySchemaElement, KeyType, ProjectionType, StreamViewType, TableDescription, TimeToLiveStatus,
};
use clap::Args;
use outbox_shared::limits::{
    INDEX_WRITES_PER_EVENT, PARTITION_WRITES_PER_SECOND, SQS_MESSAGE_ABSOLUTE_MAX_BYTES,
    index_events_per_second,
};
use outbox_shared::schema::{self, attr};
use outbox_shared::{SdkFailure, ShardCount};
use relay_runtime::preflight::{self, Kind, Need, Probed, Resource, Unusable};
use relay_runtime::{PublisherConfig, SettingError};
use serde::Serialize;

use crate::app::{AwsClients, EXIT_CONFIG};
use crate::config::{DiscardedBatchArgs, LeaseTableArgs, RelayArgs, RelayConfig};
use crate::index::{DynamoPendingIndex, PendingCounts};

/// `relay-poller check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    /// The relays' settings: the same flags and variables as `run`.
    #[command(flatten)]
    pub relay: RelayArgs,
    #[command(flatten)]
    pub lease_table: LeaseTableArgs,
    #[command(flatten)]
    pub discarded: DiscardedBatchArgs,
    /// The principal whose policies are simulated for the poller's calls (a role or user ARN,
    /// such as the stack's poller task role); default: the caller.
    #[arg(long, env = "CHECK_PRINCIPAL_ARN")]
    pub principal: Option<String>,
    /// Print one JSON object instead of a line per item (the default when stdout is not a
    /// terminal is still the lines: a pipeline asks for JSON).
    #[arg(long)]
    pub json: bool,
}

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
    fn ok(item: &'static str, detail: impl Into<String>) -> Self {
        Self {
            item,
            verdict: Verdict::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    fn fail(item: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            item,
            verdict: Verdict::Fail,
            detail: detail.into(),
            fix: Some(fix.into()),
        }
    }

    fn skipped(item: &'static str, detail: impl Into<String>) -> Self {
        Self {
            item,
            verdict: Verdict::Skipped,
            detail: detail.into(),
            fix: None,
        }
    }

    /// The item for a resource a probe could not use.
    fn unusable(item: &'static str, unusable: &Unusable) -> Self {
        Self::fail(item, unusable.finding(), unusable.fix.clone())
    }

    /// The item for a probe whose call failed in a way a retry may fix.
    fn unknown(item: &'static str, failure: &SdkFailure) -> Self {
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
                "the writer and the relays use the item schema's keys (README, Item schema): \
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

    /// Events under index partitions outside the shard count (`pending`: events per partition).
    pub fn strays(pending: &BTreeMap<String, u64>, shard_count: ShardCount) -> Self {
        let strays: Vec<(&String, &u64)> = pending
            .iter()
            .filter(|(partition, _)| {
                schema::parse_pending_shard_pk(partition)
                    .is_none_or(|shard| shard >= shard_count.get())
            })
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

    /// The shard count's write ceiling on the index, against the index's recent peak.
    pub fn capacity(shard_count: ShardCount, peak_writes_per_second: Option<f64>) -> Self {
        let shards = shard_count.get();
        let ceiling_writes = u64::from(shards) * PARTITION_WRITES_PER_SECOND;
        let ceiling_events = index_events_per_second(shards);
        let base = format!(
            "{shards} shards take about {} events/s ({INDEX_WRITES_PER_EVENT} index writes per \
             event, {PARTITION_WRITES_PER_SECOND} writes/s per partition: {} writes/s)",
            thousands(ceiling_events),
            thousands(ceiling_writes)
        );
        match peak_writes_per_second {
            None => Self::ok(
                "capacity",
                format!("{base}; CloudWatch has no write metric of the index for the last 24 h"),
            ),
            Some(peak) if peak < 0.8 * ceiling_writes as f64 => Self::ok(
                "capacity",
                format!(
                    "{base}; the index's peak over the last 24 h: {peak:.0} writes/s ({:.1} %)",
                    100.0 * peak / ceiling_writes as f64
                ),
            ),
            Some(peak) => Self::fail(
                "capacity",
                format!(
                    "{base}; the index's peak over the last 24 h: {peak:.0} writes/s ({:.1} % of \
                     the ceiling): a hot shard throttles the index, and with it the order \
                     service's writes",
                    100.0 * peak / ceiling_writes as f64
                ),
                "raise --shard-count (OUTBOX_SHARD_COUNT, the template's ShardCount) and the \
                 writer's together (docs/operations.md, Capacity and Reshard)",
            ),
        }
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

/// `n` with a comma every three digits.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// What the check found, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Whether every item holds (skipped ones included).
    pub ok: bool,
    pub items: Vec<Item>,
}

impl Report {
    fn new(items: Vec<Item>) -> Self {
        Self {
            ok: items.iter().all(|i| i.verdict != Verdict::Fail),
            items,
        }
    }

    /// One line per item: `OK`, `FAIL` or `SKIP`, the item, what was found, and the fix.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for item in &self.items {
            let verdict = match item.verdict {
                Verdict::Ok => "OK  ",
                Verdict::Fail => "FAIL",
                Verdict::Skipped => "SKIP",
            };
            let _ = write!(out, "{verdict}  {:<18} {}", item.item, item.detail);
            if let Some(fix) = &item.fix {
                let _ = write!(out, "; fix: {fix}");
            }
            out.push('\n');
        }
        out
    }

    /// The outcome in words: the command's last line.
    pub fn outcome(&self) -> String {
        let failed: Vec<&str> = self
            .items
            .iter()
            .filter(|i| i.verdict == Verdict::Fail)
            .map(|i| i.item)
            .collect();
        let skipped = self
            .items
            .iter()
            .filter(|i| i.verdict == Verdict::Skipped)
            .count();
        let skipped = if skipped > 0 {
            format!(" ({skipped} skipped)")
        } else {
            String::new()
        };
        if failed.is_empty() {
            format!(
                "check: the deployment is what the relays rely on: {} items hold{skipped}",
                self.items.len()
                    - self
                        .items
                        .iter()
                        .filter(|i| i.verdict == Verdict::Skipped)
                        .count()
            )
        } else {
            format!(
                "check: {} of {} items do not hold ({}){skipped}: see each FAIL line's fix",
                failed.len(),
                self.items.len(),
                failed.join(", ")
            )
        }
    }
}

/// Runs the check: every item, one line each (or one JSON object), the outcome last; exit 0 only
/// when every item holds, [`EXIT_CONFIG`] otherwise.
///
/// # Errors
/// A setting out of range.
pub async fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let config = args.relay.validate()?;
    let discarded = args.discarded.settings()?;
    let sdk = relay_runtime::load_aws_config().await?;
    let items = collect(&sdk, &config, &args, discarded.map(|(b, _)| b)).await;
    let report = Report::new(items);
    let text = if args.json {
        serde_json::to_string(&report)? + "\n"
    } else {
        report.to_text()
    };
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing the check")?;
    relay_runtime::telemetry::outcome("relay-poller", &report.outcome());
    Ok(if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_CONFIG)
    })
}

/// Every item, in order. Without credentials nothing else can be read: that one item alone.
async fn collect(
    sdk: &SdkConfig,
    config: &RelayConfig,
    args: &CheckArgs,
    bucket: Option<&str>,
) -> Vec<Item> {
    if let Err(unusable) = preflight::credentials(sdk).await {
        return vec![Item::unusable("credentials", &unusable)];
    }
    let mut items = vec![Item::ok("credentials", "found")];
    let outbox = &config.index.outbox;
    let table_resource = Resource::new(
        Kind::Table,
        &outbox.table_name,
        SettingError::name_of::<crate::config::TableArgs>("table_name"),
    );
    let mut arns = Arns::default();
    match preflight::table(sdk, &table_resource).await {
        Err(unusable) => items.push(Item::unusable("table", &unusable)),
        Ok(Probed::Unknown(failure)) => items.push(Item::unknown("table", &failure)),
        Ok(Probed::Found(table)) => {
            arns.table = table.table_arn().map(str::to_owned);
            items.push(Item::table_keys(&table));
            items.push(Item::index(&table, &outbox.index_name));
            items.push(ttl(sdk, &outbox.table_name).await);
            items.push(Item::stream(&table));
        }
    }
    items.push(target(sdk, &config.publisher, &mut arns).await);
    items.push(dead_letter_queue(sdk, &config.dead_letter_queue_url, &mut arns).await);
    items.push(match args.lease_table.name() {
        Some(lease_table) => self::lease_table(sdk, lease_table, &mut arns).await,
        None => Item::skipped(
            "lease table",
            "none set (--lease-table, OUTBOX_LEASE_TABLE): run polls its --shards",
        ),
    });
    items.push(match bucket {
        Some(bucket) => {
            arns.bucket = Some(bucket.to_owned());
            self::bucket(
                sdk,
                "bucket",
                &Resource::new(
                    Kind::Bucket,
                    bucket,
                    SettingError::name_of::<DiscardedBatchArgs>("discarded_batch_bucket"),
                ),
            )
            .await
        }
        None => Item::skipped(
            "bucket",
            "no discarded-batch bucket set (--discarded-batch-bucket, DISCARDED_BATCH_BUCKET)",
        ),
    });
    items.push(match preflight::payload_bucket(&config.publisher) {
        Some(Need::Bucket(resource)) => {
            arns.payload_bucket = Some(resource.name.clone());
            self::bucket(sdk, "payload bucket", &resource).await
        }
        _ => Item::skipped(
            "payload bucket",
            format!(
                "none set ({}): an event too large for the target is dead-lettered",
                SettingError::name_of::<relay_runtime::PublisherArgs>("payload_bucket")
            ),
        ),
    });
    let clients = AwsClients::new(sdk);
    let index = DynamoPendingIndex::new(
        clients.dynamodb.clone(),
        &outbox.table_name,
        &outbox.index_name,
    );
    items.push(match index.partitions().await {
        Ok(counts) => Item::strays(&counts.pending, outbox.shard_count),
        Err(err) => Item::skipped(
            "strays",
            format!("the index could not be read: {}", err.failure),
        ),
    });
    items.push(
        permissions(
            sdk,
            args.principal.as_deref(),
            config.publisher.target_kind,
            &arns,
            &outbox.index_name,
        )
        .await,
    );
    items.push(
        capacity(
            sdk,
            &outbox.table_name,
            &outbox.index_name,
            outbox.shard_count,
        )
        .await,
    );
    items
}

async fn ttl(sdk: &SdkConfig, table_name: &str) -> Item {
    let client = relay_runtime::clients::dynamodb(sdk);
    match client
        .describe_time_to_live()
        .table_name(table_name)
        .send()
        .await
    {
        Ok(out) => {
            let description = out.time_to_live_description();
            Item::ttl(
                table_name,
                description.and_then(|d| d.time_to_live_status()),
                description.and_then(|d| d.attribute_name()),
            )
        }
        Err(err) => Item::unknown("ttl", &SdkFailure::new("DescribeTimeToLive", err)),
    }
}

/// The target, described as its kind is ([`preflight::target`]).
async fn target(sdk: &SdkConfig, publisher: &PublisherConfig, arns: &mut Arns) -> Item {
    let resource = preflight::target_resource(publisher);
    let what = resource.kind;
    match preflight::target(sdk, publisher.target_kind, &resource).await {
        Err(unusable) => Item::unusable("target", &unusable),
        Ok(Probed::Unknown(failure)) => Item::unknown("target", &failure),
        Ok(Probed::Found(described)) => {
            arns.target = Some(described.arn.clone());
            match described.state.as_deref() {
                Some(state) if state != "ACTIVE" => Item::fail(
                    "target",
                    format!(
                        "{} {what} {}: {state}, not ACTIVE: it refuses what the relays send",
                        described.kind, described.arn
                    ),
                    format!("wait for the stack to finish, or re-create the {what}"),
                ),
                _ => Item::ok(
                    "target",
                    format!(
                        "{} {what} {}{}{}",
                        described.kind,
                        described.arn,
                        described
                            .state
                            .map(|s| format!(", {s}"))
                            .unwrap_or_default(),
                        publisher.target_kind.order(&publisher.target)
                    ),
                ),
            }
        }
    }
}

async fn dead_letter_queue(sdk: &SdkConfig, url: &str, arns: &mut Arns) -> Item {
    let resource = Resource::new(
        Kind::DeadLetterQueue,
        url,
        SettingError::name_of::<RelayArgs>("dead_letter_queue_url"),
    );
    match preflight::queue(sdk, &resource).await {
        Err(unusable) => Item::unusable("dead-letter queue", &unusable),
        Ok(Probed::Unknown(failure)) => Item::unknown("dead-letter queue", &failure),
        Ok(Probed::Found(queue)) => {
            arns.queue = Some(queue.arn.clone());
            Item::dead_letter_queue(url, queue.maximum_message_size)
        }
    }
}

async fn lease_table(sdk: &SdkConfig, name: &str, arns: &mut Arns) -> Item {
    let resource = Resource::new(
        Kind::LeaseTable,
        name,
        SettingError::name_of::<LeaseTableArgs>("lease_table"),
    );
    match preflight::table(sdk, &resource).await {
        Err(unusable) => Item::unusable("lease table", &unusable),
        Ok(Probed::Unknown(failure)) => Item::unknown("lease table", &failure),
        Ok(Probed::Found(table)) => {
            arns.lease_table = table.table_arn().map(str::to_owned);
            let key = crate::assignment::lease::attr::LEASE_KEY;
            let keys: Vec<&str> = table
                .key_schema()
                .iter()
                .map(KeySchemaElement::attribute_name)
                .collect();
            if keys == [key] {
                Item::ok("lease table", format!("{name}: key {key} (HASH)"))
            } else {
                Item::fail(
                    "lease table",
                    format!("{name}: keys {}, not {key}", keys.join(", ")),
                    "create it as infra/template.yaml declares LeaseTable (locally, `run \
                     --create-lease-table` creates one)",
                )
            }
        }
    }
}

/// The bucket `resource` names, checked as `item`, whatever it is for: the one check of a bucket.
async fn bucket(sdk: &SdkConfig, item: &'static str, resource: &Resource) -> Item {
    match preflight::bucket(sdk, resource).await {
        Err(unusable) => Item::unusable(item, &unusable),
        Ok(Probed::Unknown(failure)) => Item::unknown(item, &failure),
        Ok(Probed::Found(())) => Item::ok(item, format!("{}: exists", resource.name)),
    }
}

/// The ARNs found, for the permissions' simulation.
#[derive(Debug, Default)]
struct Arns {
    table: Option<String>,
    lease_table: Option<String>,
    target: Option<String>,
    queue: Option<String>,
    bucket: Option<String>,
    payload_bucket: Option<String>,
}

impl Arns {
    /// The ARN IAM evaluates a call on `target` against, if it is known.
    fn of(&self, target: relay_runtime::permissions::Target, index: &str) -> Option<String> {
        use relay_runtime::permissions::Target as T;
        match target {
            T::OutboxTable
            | T::OutboxStatus
            | T::HoldItems
            | T::OutboxAttributes
            | T::PendingCheck => self.table.clone(),
            T::OutboxIndex => self.table.as_ref().map(|t| format!("{t}/index/{index}")),
            T::LeaseTable => self.lease_table.clone(),
            T::EventTarget => self.target.clone(),
            T::DeadLetterQueue => self.queue.clone(),
            T::DiscardedBatchBucket => self.bucket.as_ref().map(|b| format!("arn:aws:s3:::{b}")),
            T::DiscardedBatchObjects => self
                .bucket
                .as_ref()
                .map(|b| format!("arn:aws:s3:::{b}/aws/lambda/*")),
            T::PayloadBucket => self
                .payload_bucket
                .as_ref()
                .map(|b| format!("arn:aws:s3:::{b}")),
            T::PayloadObjects => self.payload_bucket.as_ref().map(|b| {
                format!(
                    "arn:aws:s3:::{b}/{}*",
                    outbox_shared::claim_check::KEY_PREFIX
                )
            }),
            T::DeadLetterRecords => self.payload_bucket.as_ref().map(|b| {
                format!(
                    "arn:aws:s3:::{b}/{}*",
                    relay_runtime::dead_letter::RECORD_PREFIX
                )
            }),
        }
    }
}

/// Whether the principal (the caller by default) may make the poller's calls, as
/// `iam:SimulatePrincipalPolicy` evaluates its policies; skipped, with a note, when the caller
/// may not simulate (or the endpoint does not offer it).
async fn permissions(
    sdk: &SdkConfig,
    principal: Option<&str>,
    target_kind: relay_runtime::TargetKind,
    arns: &Arns,
    index_name: &str,
) -> Item {
    const ITEM: &str = "permissions";
    let principal = match principal {
        Some(principal) => principal.to_owned(),
        None => match aws_sdk_sts::Client::new(sdk)
            .get_caller_identity()
            .send()
            .await
        {
            Ok(identity) => role_of(identity.arn().unwrap_or_default()),
            Err(err) => {
                return Item::skipped(
                    ITEM,
                    format!(
                        "the caller is unknown: {}",
                        SdkFailure::new("GetCallerIdentity", err)
                    ),
                );
            }
        },
    };
    let mut by_resource: BTreeMap<String, Vec<&'static str>> = BTreeMap::new();
    let mut unknown = Vec::new();
    for call in crate::permissions::service(target_kind) {
        match arns.of(call.on, index_name) {
            Some(arn) => by_resource.entry(arn).or_default().push(call.action),
            None => unknown.push(call.action),
        }
    }
    let iam = aws_sdk_iam::Client::new(sdk);
    let mut denied = Vec::new();
    for (resource, actions) in &by_resource {
        let answer = iam
            .simulate_principal_policy()
            .policy_source_arn(&principal)
            .set_action_names(Some(actions.iter().map(|a| (*a).to_owned()).collect()))
            .resource_arns(resource)
            .send()
            .await;
        match answer {
            Ok(out) => denied.extend(
                out.evaluation_results()
                    .iter()
                    .filter(|r| r.eval_decision().as_str() != "allowed")
                    .map(|r| format!("{} on {resource}", r.eval_action_name())),
            ),
            Err(err) => {
                let failure = SdkFailure::new("SimulatePrincipalPolicy", err);
                return Item::skipped(
                    ITEM,
                    format!(
                        "not simulated for {principal}: iam:SimulatePrincipalPolicy answered {} \
                         (allow it to the caller to have the poller's calls checked)",
                        failure.code.as_deref().unwrap_or(&failure.message)
                    ),
                );
            }
        }
    }
    if denied.is_empty() {
        Item::ok(
            ITEM,
            format!(
                "{principal} may make the poller's {} calls{}",
                by_resource.values().map(Vec::len).sum::<usize>(),
                if unknown.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (not simulated, their resource unknown: {})",
                        unknown.join(", ")
                    )
                }
            ),
        )
    } else {
        Item::fail(
            ITEM,
            format!("{principal} may not: {}", denied.join("; ")),
            "grant them as infra/template.yaml's PollerTaskRole does (relay_poller::permissions)",
        )
    }
}

/// The IAM principal of an STS caller ARN: an assumed role's session is simulated as its role.
fn role_of(caller: &str) -> String {
    match caller.split_once(":assumed-role/") {
        Some((head, rest)) => {
            let role = rest.split('/').next().unwrap_or(rest);
            format!("{}:role/{role}", head.replacen(":sts:", ":iam:", 1))
        }
        None => caller.to_owned(),
    }
}

/// The shard count's ceiling, and the index's peak write rate over the last 24 h where
/// CloudWatch has it (`ConsumedWriteCapacityUnits` of the index, per minute).
async fn capacity(sdk: &SdkConfig, table: &str, index: &str, shard_count: ShardCount) -> Item {
    use aws_sdk_cloudwatch::types::{Dimension, Statistic};
    let now = std::time::SystemTime::now();
    let day = std::time::Duration::from_secs(24 * 3600);
    let answer = aws_sdk_cloudwatch::Client::new(sdk)
        .get_metric_statistics()
        .namespace("AWS/DynamoDB")
        .metric_name("ConsumedWriteCapacityUnits")
        .dimensions(Dimension::builder().name("TableName").value(table).build())
        .dimensions(
            Dimension::builder()
                .name("GlobalSecondaryIndexName")
                .value(index)
                .build(),
        )
        .start_time((now - day).into())
        .end_time(now.into())
        .period(60)
        .statistics(Statistic::Sum)
        .send()
        .await;
    match answer {
        Ok(out) => {
            let peak = out
                .datapoints()
                .iter()
                .filter_map(|d| d.sum())
                .map(|sum| sum / 60.0)
                .fold(None, |max: Option<f64>, v| {
                    Some(max.map_or(v, |m| m.max(v)))
                });
            Item::capacity(shard_count, peak)
        }
        Err(err) => {
            let failure = SdkFailure::new("GetMetricStatistics", err);
            let mut item = Item::capacity(shard_count, None);
            item.detail = format!(
                "{}; CloudWatch could not be read ({})",
                item.detail.split("; ").next().unwrap_or_default(),
                failure.code.as_deref().unwrap_or("no answer")
            );
            item
        }
    }
}

#[cfg(test)]
mod tests;
