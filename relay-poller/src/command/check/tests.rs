use aws_sdk_dynamodb::types::{
    AttributeDefinition, GlobalSecondaryIndexDescription, KeySchemaElement, Projection,
    ScalarAttributeType, StreamSpecification,
};

use std::collections::BTreeMap;

use aws_sdk_dynamodb::types::{
    KeyType, ProjectionType, StreamViewType, TableDescription, TimeToLiveStatus,
};
use outbox_shared::ShardCount;
use outbox_shared::schema::{self, attr};

use super::simulation::{Arns, role_of};
use super::*;

fn key(name: &str, key_type: KeyType) -> KeySchemaElement {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(key_type)
        .build()
        .unwrap()
}

/// The table as the template declares it, with `projection` on its index and `view` on its
/// stream.
fn table(projection: ProjectionType, view: Option<StreamViewType>) -> TableDescription {
    let strings = [attr::PK, attr::SK, attr::GSI1PK, attr::GSI1SK].map(|name| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .unwrap()
    });
    let mut builder = TableDescription::builder()
        .table_name("outbox")
        .set_attribute_definitions(Some(strings.to_vec()))
        .key_schema(key(attr::PK, KeyType::Hash))
        .key_schema(key(attr::SK, KeyType::Range))
        .global_secondary_indexes(
            GlobalSecondaryIndexDescription::builder()
                .index_name("GSI1")
                .key_schema(key(attr::GSI1PK, KeyType::Hash))
                .key_schema(key(attr::GSI1SK, KeyType::Range))
                .projection(Projection::builder().projection_type(projection).build())
                .build(),
        );
    if let Some(view) = view {
        builder = builder.stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(view)
                .build()
                .unwrap(),
        );
    }
    builder.build()
}

#[test]
fn the_templates_table_holds_every_table_item() {
    let table = table(ProjectionType::All, Some(StreamViewType::NewAndOldImages));

    let items = [
        Item::table_keys(&table),
        Item::index(&table, "GSI1"),
        Item::stream(&table),
        Item::ttl("outbox", Some(&TimeToLiveStatus::Enabled), Some("ttl")),
    ];

    assert!(items.iter().all(|i| i.verdict == Verdict::Ok), "{items:?}");
}

#[test]
fn a_new_image_stream_fails_and_says_ttl_deletions_would_be_lost() {
    let item = Item::stream(&table(ProjectionType::All, Some(StreamViewType::NewImage)));

    assert_eq!(item.verdict, Verdict::Fail);
    assert!(item.detail.starts_with("view NEW_IMAGE"), "{}", item.detail);
    assert!(item.detail.contains("no old image"), "{}", item.detail);
    assert!(
        item.fix.as_deref().unwrap().contains("NEW_AND_OLD_IMAGES"),
        "{item:?}"
    );
}

#[test]
fn a_keys_only_index_fails_with_how_to_re_create_it() {
    let item = Item::index(&table(ProjectionType::KeysOnly, None), "GSI1");

    assert_eq!(item.verdict, Verdict::Fail);
    assert!(
        item.detail.contains("projection KEYS_ONLY, not ALL"),
        "{item:?}"
    );
    assert!(item.fix.as_deref().unwrap().contains("ProjectionType ALL"));
}

#[test]
fn ttl_off_or_on_another_attribute_fails() {
    let off = Item::ttl("outbox", Some(&TimeToLiveStatus::Disabled), None);
    let other = Item::ttl("outbox", Some(&TimeToLiveStatus::Enabled), Some("expires"));

    assert_eq!(off.verdict, Verdict::Fail);
    assert!(
        off.fix
            .as_deref()
            .unwrap()
            .contains("Enabled=true,AttributeName=ttl")
    );
    assert_eq!(other.verdict, Verdict::Fail);
    assert!(
        other.detail.contains("enabled on expires, not ttl"),
        "{other:?}"
    );
}

#[test]
fn events_under_partitions_outside_the_shard_count_fail() {
    let pending = BTreeMap::from([
        (schema::pending_shard_pk(3), 5),
        (schema::pending_shard_pk(20), 2),
    ]);

    let item = Item::strays(
        &pending,
        &crate::partitions::Partitions::single_region(ShardCount::new(16).unwrap()),
    );

    assert_eq!(item.verdict, Verdict::Fail);
    assert!(
        item.detail
            .starts_with("2 pending events under partitions outside --shard-count 16"),
        "{item:?}"
    );
}

#[test]
fn sixteen_shards_take_about_8000_events_a_second() {
    let shards = ShardCount::new(16).unwrap();

    let quiet = Item::capacity(shards, Some(1_200.0));
    let hot = Item::capacity(shards, Some(14_000.0));

    assert!(
        quiet
            .detail
            .starts_with("16 shards take about 8,000 events/s"),
        "{quiet:?}"
    );
    assert!(quiet.detail.contains("1200 writes/s (7.5 %)"), "{quiet:?}");
    assert_eq!(quiet.verdict, Verdict::Ok);
    assert_eq!(hot.verdict, Verdict::Fail);
    assert!(hot.fix.as_deref().unwrap().contains("--shard-count"));
}

#[test]
fn the_buckets_are_simulated_in_the_regions_partition() {
    use relay_runtime::permissions::Target;
    let arns = Arns {
        bucket: Some("discarded".to_owned()),
        payload_bucket: Some("payloads".to_owned()),
        ..Arns::default()
    };
    let partition = outbox_shared::arn::partition("cn-north-1");
    for (target, want) in [
        (Target::DiscardedBatchBucket, "arn:aws-cn:s3:::discarded"),
        (
            Target::DiscardedBatchObjects,
            "arn:aws-cn:s3:::discarded/aws/lambda/*",
        ),
        (Target::PayloadBucket, "arn:aws-cn:s3:::payloads"),
        (
            Target::PayloadObjects,
            "arn:aws-cn:s3:::payloads/payloads/*",
        ),
        (
            Target::DeadLetterRecords,
            "arn:aws-cn:s3:::payloads/dead-letters/*",
        ),
    ] {
        assert_eq!(arns.of(target, "GSI1", partition).as_deref(), Some(want));
    }
}

#[test]
fn an_assumed_roles_session_is_simulated_as_its_role() {
    assert_eq!(
        role_of("arn:aws:sts::123456789012:assumed-role/poller-task/0123abcd"),
        "arn:aws:iam::123456789012:role/poller-task"
    );
    assert_eq!(
        role_of("arn:aws:iam::123456789012:user/ci"),
        "arn:aws:iam::123456789012:user/ci"
    );
}

#[test]
fn the_outcome_names_the_items_that_do_not_hold() {
    let report = Report::new(vec![
        Item::ok("table", "fine"),
        Item::fail("stream", "view NEW_IMAGE", "fix it"),
        Item::skipped("permissions", "not simulated"),
    ]);

    assert!(!report.ok);
    assert_eq!(
        report.outcome(),
        "check: 1 of 3 items do not hold (stream) (1 skipped): see each FAIL line's fix"
    );
    assert!(
        report
            .to_text()
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("FAIL  stream")
    );
}

#[test]
fn the_target_item_shows_the_entry_budget_and_whose_limit_it_is() {
    let queue = relay_runtime::PublisherConfig::of_kind(
        relay_runtime::TargetKind::Sqs,
        "https://sqs.us-east-1.amazonaws.com/123456789012/orders",
        "test.orders",
    );
    assert_eq!(
        resources::entry_budget(&queue, relay_runtime::probe::Kind::Queue, Some(4096)),
        "entry budget 4096 bytes (the queue's own limit, below --max-entry-bytes \
         (MAX_ENTRY_BYTES) 262144): a larger event is dead-lettered"
    );
    assert_eq!(
        resources::entry_budget(&queue, relay_runtime::probe::Kind::Queue, Some(1 << 20)),
        "entry budget 262144 bytes (--max-entry-bytes (MAX_ENTRY_BYTES); the queue takes \
         1048576): a larger event is dead-lettered"
    );
}
