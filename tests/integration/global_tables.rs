//! The outbox table as a global table on the local replicator (`outbox_tests::regions`): what a
//! region's relays will see of events written in another region (docs/testing.md, "The local
//! global table").

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodbstreams::types::OperationType;
use outbox_shared::schema::{self, attr, status};
use outbox_shared::{OutboxConfig, shard_for};
use outbox_tests::regions::{GlobalTestEnv, RegionEnv};
use outbox_tests::{TEST_SOURCE, minimal_outbox_item};
use outbox_writer::{NewOrder, OrderLine, OutboxWriter, WriterConfig};

type Item = HashMap<String, AttributeValue>;

fn s(item: &Item, name: &str) -> String {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .cloned()
        .unwrap_or_default()
}

/// The items of the outbox table in `region`, by (`PK`, `SK`).
async fn items_by_key(
    global: &GlobalTestEnv,
    region: &RegionEnv,
) -> HashMap<(String, String), Item> {
    region
        .scan_items(&global.env.table_name)
        .await
        .into_iter()
        .map(|item| ((s(&item, attr::PK), s(&item, attr::SK)), item))
        .collect()
}

/// The event ids of the outbox items the stream of `region` holds an `INSERT` of, in order.
async fn inserted_event_ids(region: &RegionEnv) -> Vec<String> {
    region
        .stream_records()
        .await
        .into_iter()
        .filter(|r| r.event_name() == Some(&OperationType::Insert))
        .filter_map(|r| {
            let image = r.dynamodb()?.new_image()?;
            (image.get(attr::ENTITY_TYPE)?.as_s().ok()? == schema::entity::OUTBOX_EVENT)
                .then(|| image.get(attr::EVENT_ID)?.as_s().ok().cloned())?
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn events_written_in_one_region_arrive_in_the_others_table_and_stream_once() {
    // Given the outbox table global in two regions
    let global = GlobalTestEnv::new().await;
    let (a, b) = (global.a(), global.b());
    let table = &global.env.table_name;
    // When the writer in A creates 5 orders (each order and its event one transaction)
    let writer = OutboxWriter::new(
        a.dynamodb.clone(),
        WriterConfig::new(OutboxConfig::new(table), TEST_SOURCE),
    )
    .expect("a valid writer configuration");
    let mut written = Vec::new();
    for i in 0..5 {
        let line = OrderLine::new(format!("SKU-{i}"), 1, 100);
        let created = writer
            .create_order_with_outbox(&format!("user-{i}"), NewOrder::new(vec![line]))
            .await
            .expect("order created");
        written.push(created.event_id);
    }
    // And another client writes 3 events stamped with A as their origin, under A's partitions
    for i in 0..3 {
        let event_id = format!("regional-{i}");
        let shard = shard_for(&event_id, OutboxConfig::new(table).shard_count);
        let mut item = minimal_outbox_item(
            "user-r",
            &event_id,
            "OrderCreated",
            "{}",
            "2026-11-28T12:00:00.000Z",
            shard,
        );
        item.insert(
            attr::ORIGIN_REGION.to_owned(),
            AttributeValue::S(a.region.to_string()),
        );
        item.insert(
            attr::GSI1PK.to_owned(),
            AttributeValue::S(schema::regional_pending_shard_pk(&a.region, shard)),
        );
        a.dynamodb
            .put_item()
            .table_name(table)
            .set_item(Some(item))
            .send()
            .await
            .expect("put a regional event");
        written.push(event_id);
    }
    global.replicator.wait_caught_up().await;

    // Then B holds every item A holds, attribute for attribute (OriginRegion and the regional
    // pending key included)
    let in_a = items_by_key(&global, a).await;
    let in_b = items_by_key(&global, b).await;
    assert_eq!(in_a.len(), 5 * 2 + 3, "5 orders and 8 events in A");
    assert_eq!(in_b, in_a);
    let regional = in_b
        .values()
        .filter(|item| s(item, attr::EVENT_ID).starts_with("regional-"))
        .collect::<Vec<_>>();
    assert_eq!(regional.len(), 3);
    for item in regional {
        assert_eq!(s(item, attr::ORIGIN_REGION), a.region.as_str());
        assert!(s(item, attr::GSI1PK).starts_with(&format!("OUTBOX#PENDING#{}#", a.region)));
    }
    // And each region's stream holds each event's INSERT exactly once: every region's stream
    // holds every write, and none is replicated back
    let mut expected = written.clone();
    expected.sort();
    for region in [a, b] {
        let mut inserted = inserted_event_ids(region).await;
        inserted.sort();
        assert_eq!(
            inserted, expected,
            "the INSERTs in {}'s stream",
            region.region
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn two_regions_marking_one_event_while_cut_off_end_with_the_later_mark_in_both() {
    // Given a pending event in both regions, and both links cut
    let global = GlobalTestEnv::new().await;
    let (a, b) = (global.a(), global.b());
    let table = &global.env.table_name;
    let item = minimal_outbox_item(
        "user-1",
        "e1",
        "OrderCreated",
        "{}",
        "2026-11-28T12:00:00.000Z",
        0,
    );
    a.dynamodb
        .put_item()
        .table_name(table)
        .set_item(Some(item.clone()))
        .send()
        .await
        .expect("put the event");
    global.replicator.wait_caught_up().await;
    assert_eq!(b.scan_items(table).await, vec![item.clone()]);
    global.replicator.isolate(&a.region, &global.regions).await;

    // When A marks it PUBLISHED, then B marks it DEAD_LETTERED, each on the condition that it is
    // still pending: a condition is checked against the local replica only, so both succeed
    for (region, mark) in [(a, status::PUBLISHED), (b, status::DEAD_LETTERED)] {
        region
            .dynamodb
            .update_item()
            .table_name(table)
            .set_key(Some(
                [attr::PK, attr::SK]
                    .into_iter()
                    .map(|k| (k.to_owned(), item[k].clone()))
                    .collect(),
            ))
            .update_expression("SET #status = :mark REMOVE #gsi1pk, #gsi1sk")
            .condition_expression("attribute_exists(#gsi1pk)")
            .expression_attribute_names("#status", attr::STATUS)
            .expression_attribute_names("#gsi1pk", attr::GSI1PK)
            .expression_attribute_names("#gsi1sk", attr::GSI1SK)
            .expression_attribute_values(":mark", AttributeValue::S(mark.to_owned()))
            .send()
            .await
            .unwrap_or_else(|e| panic!("mark in {}: {e:?}", region.region));
        global.replicator.wait_caught_up().await;
    }
    // And the regions are connected again
    global
        .replicator
        .reconnect(&a.region, &global.regions)
        .await;
    global.replicator.wait_caught_up().await;

    // Then both hold the later mark, the earlier dropped where it arrived (last writer wins)
    for region in [a, b] {
        let items = region.scan_items(table).await;
        assert_eq!(items.len(), 1);
        assert_eq!(
            s(&items[0], attr::STATUS),
            status::DEAD_LETTERED,
            "in {}",
            region.region
        );
    }
    let from_a = global.replicator.link_stats(&a.region, &b.region).await;
    assert_eq!(from_a.dropped_as_older, 1, "{from_a:?}");
    assert_eq!(from_a.held_back, 0);
}
