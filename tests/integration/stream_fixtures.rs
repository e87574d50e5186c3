//! The stream fixtures the relay's unit tests read (`tests/fixtures/stream/outbox-batch.json` and
//! `removals-of-pending-events.json`) are recorded from DynamoDB Local, on a table provisioned
//! from the template, as Lambda delivers them (`relay_stream::records`). This test records them
//! again and fails when the committed ones drift from what the emulator gives: a stream view that
//! drops the old image, a TTL deletion without its user identity. `UPDATE_STREAM_FIXTURES=1`
//! writes what it recorded over the committed files (review the diff).
//!
//! One record comes from a second table: DynamoDB Local 1.25.1 does not TTL-delete an item that is
//! absent from a global secondary index of its table (and its sweep of that table stops there), so
//! the TTL deletion of a *published* item (out of the index) is recorded on a table with the
//! template's keys, stream view and TTL, and no index. On AWS, TTL deletes such items as any other.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, KeySchemaElement, KeyType,
    ScalarAttributeType, StreamSpecification, StreamViewType,
};
use outbox_infra::Template;
use outbox_tests::TestEnv;
use serde_json::{Value, json};

const UPDATE_FIXTURES_VAR: &str = "UPDATE_STREAM_FIXTURES";

/// How long DynamoDB Local may take to delete an expired item (about a second, measured).
const TTL_DELETION_TIMEOUT: Duration = Duration::from_secs(60);

/// A `ttl` in the past (2026-11-18): DynamoDB's TTL deletes the item.
const EXPIRED: i64 = 1_795_000_000;
/// A `ttl` far ahead (2026-12-05).
const LIVE: i64 = 1_796_464_800;

fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("fixtures/stream/{name}"))
}

/// `attributes` (plain JSON) as a DynamoDB item.
fn item(attributes: Value) -> std::collections::HashMap<String, AttributeValue> {
    serde_dynamo::to_item(attributes).expect("a JSON object is an item")
}

/// A pending outbox item of aggregate `o-9x` with the given id, as the writer shapes it.
fn pending_event(user: &str, event_id: &str, aggregate: &str, ttl: i64) -> Value {
    json!({
        "PK": format!("USER#{user}"), "SK": format!("OUTBOX#{event_id}"),
        "EntityType": "OutboxEvent", "EventId": event_id, "EventType": "OrderCreated",
        "AggregateType": "Order", "AggregateId": aggregate, "Sequence": 1,
        "Payload": format!("{{\"orderId\":\"{aggregate}\"}}"), "Status": "PENDING",
        "CreatedAt": "2026-11-14T08:00:00.000Z", "GSI1PK": "OUTBOX#PENDING#5",
        "GSI1SK": format!("EVENT#2026-11-14T08:00:00.000Z#{event_id}"), "ttl": ttl,
    })
}

/// Writes what the fixtures show: an order and its outbox event (later marked published), a
/// published event and a pending one that expire, a minimal event another client writes, and a
/// pending event a user deletes.
async fn write_the_fixtures_items(env: &TestEnv) {
    let order_created = "0194f7c2-8a4b-7d3e-9c1a-2b3c4d5e6f70";
    env.put_raw_item(item(json!({
        "PK": "USER#u-42", "SK": "ORDER#o-1001", "EntityType": "Order", "OrderId": "o-1001",
        "UserId": "u-42", "Amount": 2598,
        "Items": [{"sku": "SKU-1", "quantity": 2, "unitPriceCents": 1299}],
        "Status": "CREATED", "Version": 1, "CreatedAt": "2026-11-28T08:00:00.000Z",
    })))
    .await;
    env.put_raw_item(item(json!({
        "PK": "USER#u-42", "SK": format!("OUTBOX#{order_created}"),
        "EntityType": "OutboxEvent", "EventId": order_created, "EventType": "OrderCreated",
        "AggregateType": "Order", "AggregateId": "o-1001", "Sequence": 1,
        "Payload": "{\"orderId\":\"o-1001\",\"userId\":\"u-42\",\"items\":[{\"sku\":\"SKU-1\",\"quantity\":2,\"unitPriceCents\":1299}],\"amountCents\":2598,\"status\":\"CREATED\",\"version\":1,\"createdAt\":\"2026-11-28T08:00:00.000Z\"}",
        "Status": "PENDING", "CreatedAt": "2026-11-28T08:00:00.000Z",
        "GSI1PK": "OUTBOX#PENDING#7",
        "GSI1SK": format!("EVENT#2026-11-28T08:00:00.000Z#{order_created}"), "ttl": LIVE,
    })))
    .await;
    // The relay's mark, as a relay makes it
    env.dynamodb
        .update_item()
        .table_name(&env.table_name)
        .key("PK", AttributeValue::S("USER#u-42".into()))
        .key("SK", AttributeValue::S(format!("OUTBOX#{order_created}")))
        .update_expression("SET #s = :p, #at = :at REMOVE GSI1PK, GSI1SK")
        .expression_attribute_names("#s", "Status")
        .expression_attribute_names("#at", "PublishedAt")
        .expression_attribute_values(":p", AttributeValue::S("PUBLISHED".into()))
        .expression_attribute_values(":at", AttributeValue::S("2026-11-28T08:00:01.020Z".into()))
        .send()
        .await
        .expect("mark published");
    env.put_raw_item(item(json!({
        "PK": "USER#u-9", "SK": "OUTBOX#evt-minimal-1", "EntityType": "OutboxEvent",
        "EventId": "evt-minimal-1", "EventType": "OrderShipped",
        "Payload": "{\"orderId\":\"o-9\"}", "Status": "PENDING",
        "CreatedAt": "2026-11-28T08:00:02Z", "GSI1PK": "OUTBOX#PENDING#3",
        "GSI1SK": "EVENT#2026-11-28T08:00:02Z#evt-minimal-1",
    })))
    .await;
    env.put_raw_item(item(pending_event(
        "u-9",
        "0194b001-0000-7000-8000-000000000001",
        "o-91",
        EXPIRED,
    )))
    .await;
    let deleted = "0194b001-0000-7000-8000-000000000002";
    env.put_raw_item(item(pending_event("u-9", deleted, "o-92", LIVE)))
        .await;
    env.dynamodb
        .delete_item()
        .table_name(&env.table_name)
        .key("PK", AttributeValue::S("USER#u-9".into()))
        .key("SK", AttributeValue::S(format!("OUTBOX#{deleted}")))
        .send()
        .await
        .expect("a user's delete");
}

/// A table with the template's keys, stream view and TTL, and no index; its stream's ARN.
async fn table_without_index(env: &TestEnv) -> String {
    let spec = Template::embedded().unwrap().outbox_table().unwrap();
    let view = spec
        .stream_specification
        .expect("the template's table has a stream");
    let ttl = spec
        .time_to_live_specification
        .expect("the template's table has TTL");
    let name = format!("{}-without-index", env.table_name);
    let key = |name: &str, kind: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(name)
            .key_type(kind)
            .build()
            .unwrap()
    };
    let string = |name: &str| {
        AttributeDefinition::builder()
            .attribute_name(name)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .unwrap()
    };
    let created = env
        .dynamodb
        .create_table()
        .table_name(&name)
        .billing_mode(BillingMode::PayPerRequest)
        .key_schema(key("PK", KeyType::Hash))
        .key_schema(key("SK", KeyType::Range))
        .attribute_definitions(string("PK"))
        .attribute_definitions(string("SK"))
        .stream_specification(
            StreamSpecification::builder()
                .stream_enabled(true)
                .stream_view_type(StreamViewType::from(view.stream_view_type.as_str()))
                .build()
                .unwrap(),
        )
        .send()
        .await
        .expect("create the table without index");
    outbox_tests::set_time_to_live(&env.dynamodb, &name, true, &ttl.attribute_name).await;
    let published = item(json!({
        "PK": "USER#u-7", "SK": "OUTBOX#0194a001-0000-7000-8000-000000000001",
        "EntityType": "OutboxEvent", "EventId": "0194a001-0000-7000-8000-000000000001",
        "EventType": "OrderCreated", "Payload": "{\"orderId\":\"o-7\"}", "Status": "PUBLISHED",
        "CreatedAt": "2026-11-21T08:00:00.000Z", "ttl": EXPIRED,
    }));
    env.dynamodb
        .put_item()
        .table_name(&name)
        .set_item(Some(published))
        .send()
        .await
        .expect("put the published item");
    created
        .table_description()
        .and_then(|t| t.latest_stream_arn())
        .expect("a stream")
        .to_owned()
}

/// The stream `stream_arn` as Lambda delivers it, once DynamoDB's TTL has made `ttl_deletions`
/// deletions.
async fn records_after_ttl_deletions(
    env: &TestEnv,
    stream_arn: &str,
    ttl_deletions: usize,
) -> Vec<Value> {
    let started = Instant::now();
    loop {
        let records: Vec<Value> = env
            .stream_records_of(stream_arn)
            .await
            .iter()
            .map(|r| {
                let mut record = serde_json::to_value(
                    relay_stream_local::records::to_event_record(r, stream_arn),
                )
                .expect("a record serializes");
                // Lambda leaves out an image the record does not carry; the event type writes
                // an empty one
                let change = record["dynamodb"].as_object_mut().expect("a change");
                for image in ["NewImage", "OldImage"] {
                    if change
                        .get(image)
                        .is_some_and(|i| i.as_object().is_some_and(serde_json::Map::is_empty))
                    {
                        change.remove(image);
                    }
                }
                record
            })
            .collect();
        let deleted = records
            .iter()
            .filter(|r| r["userIdentity"]["principalId"] == "dynamodb.amazonaws.com")
            .count();
        if deleted >= ttl_deletions {
            return records;
        }
        assert!(
            started.elapsed() < TTL_DELETION_TIMEOUT,
            "DynamoDB Local made {deleted} of {ttl_deletions} TTL deletions in {TTL_DELETION_TIMEOUT:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The record of `event_name` whose item key has `sk`, and whose deletion is (or is not) TTL's.
fn pick(records: &[Value], event_name: &str, sk: &str, by_ttl: bool) -> Value {
    records
        .iter()
        .find(|r| {
            r["eventName"] == event_name
                && r["dynamodb"]["Keys"]["SK"]["S"] == sk
                && (r["userIdentity"]["principalId"] == "dynamodb.amazonaws.com") == by_ttl
        })
        .unwrap_or_else(|| panic!("no {event_name} record of {sk} in {records:#?}"))
        .clone()
}

/// `record` without what differs from run to run: ids, sequence numbers, times, the stream.
fn stable(mut record: Value) -> Value {
    record["eventID"] = json!("(per run)");
    record["eventSourceARN"] = json!("(per run)");
    record["dynamodb"]["SequenceNumber"] = json!("(per run)");
    record["dynamodb"]["ApproximateCreationDateTime"] = json!("(per run)");
    record
}

#[tokio::test]
async fn the_stream_fixtures_are_what_the_emulator_records() {
    // Given the fixtures' items written to a table provisioned from the template
    let env = TestEnv::new().await;
    write_the_fixtures_items(&env).await;
    let without_index = table_without_index(&env).await;

    // When DynamoDB's TTL has deleted the two expired ones and the streams are read as Lambda
    // delivers them
    let records = records_after_ttl_deletions(&env, &env.stream_arn, 1).await;
    let expired_published = records_after_ttl_deletions(&env, &without_index, 1).await;
    let order_created = "OUTBOX#0194f7c2-8a4b-7d3e-9c1a-2b3c4d5e6f70";
    let recorded = [
        (
            "outbox-batch.json",
            vec![
                pick(&records, "INSERT", "ORDER#o-1001", false),
                pick(&records, "INSERT", order_created, false),
                pick(&records, "MODIFY", order_created, false),
                pick(
                    &expired_published,
                    "REMOVE",
                    "OUTBOX#0194a001-0000-7000-8000-000000000001",
                    true,
                ),
                pick(&records, "INSERT", "OUTBOX#evt-minimal-1", false),
            ],
        ),
        (
            "removals-of-pending-events.json",
            vec![
                pick(
                    &records,
                    "REMOVE",
                    "OUTBOX#0194b001-0000-7000-8000-000000000001",
                    true,
                ),
                pick(
                    &records,
                    "REMOVE",
                    "OUTBOX#0194b001-0000-7000-8000-000000000002",
                    false,
                ),
            ],
        ),
    ];

    // Then the TTL deletions carry the old image and TTL's identity...
    for (_, batch) in &recorded {
        for record in batch.iter().filter(|r| r["eventName"] == "REMOVE") {
            assert!(
                record["dynamodb"]["OldImage"]["EntityType"]["S"] == "OutboxEvent",
                "a REMOVE without its old image (is the template's stream view NEW_AND_OLD_IMAGES?): {record}"
            );
        }
    }
    // ...and the committed fixtures are these records, up to what differs per run
    for (name, batch) in recorded {
        let recorded = json!({ "Records": batch });
        if std::env::var_os(UPDATE_FIXTURES_VAR).is_some() {
            let text = serde_json::to_string_pretty(&recorded).unwrap() + "\n";
            std::fs::write(fixture_path(name), text).expect("write the fixture");
        }
        let committed: Value =
            serde_json::from_str(&std::fs::read_to_string(fixture_path(name)).unwrap()).unwrap();
        let stable_records = |v: &Value| -> Vec<Value> {
            v["Records"]
                .as_array()
                .unwrap()
                .iter()
                .cloned()
                .map(stable)
                .collect()
        };
        assert_eq!(
            stable_records(&committed),
            stable_records(&recorded),
            "{name} drifted from what DynamoDB Local records: rerun with {UPDATE_FIXTURES_VAR}=1 and review the diff"
        );
    }
}
