//! Optimistic-concurrency status updates against the emulator: contended updates all land within
//! the retry bound with one event per version, and without retries the caller sees the conflict.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use outbox_shared::schema::{self, attr};
use outbox_shared::{ItemKey, OutboxStatus};
use outbox_tests::TestEnv;
use outbox_writer::{
    NewOrder, OrderLine, OrderStatus, OrderStatusChanged, OutboxWriter, RetryPolicy, WriteError,
};

const CALLERS: u64 = 8;

fn writer(env: &TestEnv, update_retry: RetryPolicy) -> OutboxWriter {
    env.writer_with(|config| config.update_retry = update_retry)
}

/// Enough retries for 8 contending callers: each round at least one of them wins.
fn patient() -> RetryPolicy {
    RetryPolicy {
        max_retries: 30,
        base_delay: Duration::from_millis(5),
        max_delay: Duration::from_millis(200),
    }
}

async fn order_item(env: &TestEnv, user: &str, order_id: &str) -> HashMap<String, AttributeValue> {
    env.dynamodb
        .get_item()
        .table_name(&env.table_name)
        .key(attr::PK, AttributeValue::S(schema::user_pk(user)))
        .key(attr::SK, AttributeValue::S(schema::order_sk(order_id)))
        .consistent_read(true)
        .send()
        .await
        .unwrap()
        .item()
        .cloned()
        .expect("order exists")
}

fn version(item: &HashMap<String, AttributeValue>) -> u64 {
    item[attr::VERSION].as_n().unwrap().parse().unwrap()
}

#[tokio::test]
async fn eight_concurrent_updates_all_land_with_one_event_per_version() {
    // Given an order at version 1
    let env = TestEnv::new().await;
    let writer = writer(&env, patient());
    let created = writer
        .create_order_with_outbox("u-1", NewOrder::new(vec![OrderLine::new("s", 1, 10)]))
        .await
        .unwrap();

    // When 8 callers change its status at once
    let statuses = [OrderStatus::Confirmed, OrderStatus::Paid];
    let results = futures::future::join_all((0..CALLERS).map(|i| {
        let writer = writer.clone();
        let order_id = created.order_id.clone();
        let status = statuses[usize::try_from(i).unwrap() % statuses.len()];
        tokio::spawn(async move {
            writer
                .update_order_status_with_outbox("u-1", &order_id, status)
                .await
        })
    }))
    .await;

    // Then all succeed, each with its own version
    let updated: Vec<_> = results.into_iter().map(|r| r.unwrap().unwrap()).collect();
    let mut versions: Vec<u64> = updated.iter().map(|u| u.version).collect();
    versions.sort_unstable();
    assert_eq!(versions, (2..=1 + CALLERS).collect::<Vec<_>>());

    // And the order is at version 1 + 8
    let order = order_item(&env, "u-1", &created.order_id).await;
    assert_eq!(version(&order), 1 + CALLERS);
    let last = updated.iter().max_by_key(|u| u.version).unwrap();
    assert_eq!(order[attr::STATUS].as_s().unwrap(), last.status.as_str());

    // And exactly 8 OrderStatusChanged events exist, with Sequence 2..=9
    let events: Vec<_> = env
        .outbox_items()
        .await
        .into_iter()
        .filter(|e| e.event_type == "OrderStatusChanged")
        .collect();
    assert_eq!(events.len(), usize::try_from(CALLERS).unwrap());
    let mut sequences: Vec<u64> = events.iter().map(|e| e.sequence.unwrap()).collect();
    sequences.sort_unstable();
    assert_eq!(sequences, (2..=1 + CALLERS).collect::<Vec<_>>());
    for event in &events {
        let payload: OrderStatusChanged = serde_json::from_str(&event.payload).unwrap();
        assert_eq!(Some(payload.version), event.sequence);
        assert_eq!(payload.order_id, created.order_id);
        assert_eq!(event.status, OutboxStatus::Pending);
        assert_eq!(
            event.aggregate_id.as_deref(),
            Some(created.order_id.as_str())
        );
    }
}

#[tokio::test]
async fn without_retries_contending_callers_get_the_typed_conflict() {
    // Given an order at version 1 and a writer that never retries
    let env = TestEnv::new().await;
    let writer = writer(&env, RetryPolicy::none());
    let created = writer
        .create_order_with_outbox("u-1", NewOrder::new(vec![OrderLine::new("s", 1, 10)]))
        .await
        .unwrap();

    // When 8 callers change its status at once
    let results = futures::future::join_all((0..CALLERS).map(|_| {
        let writer = writer.clone();
        let order_id = created.order_id.clone();
        tokio::spawn(async move {
            writer
                .update_order_status_with_outbox("u-1", &order_id, OrderStatus::Paid)
                .await
        })
    }))
    .await;
    let results: Vec<_> = results.into_iter().map(Result::unwrap).collect();

    // Then the losers get the typed version conflict, and only the winners' changes landed
    let succeeded = results.iter().filter(|r| r.is_ok()).count() as u64;
    let conflicts = results
        .iter()
        .filter(|r| {
            matches!(r, Err(WriteError::VersionConflict { key, .. })
                if *key == ItemKey { pk: "USER#u-1".into(), sk: format!("ORDER#{}", created.order_id) })
        })
        .count() as u64;
    assert!(succeeded >= 1, "{results:?}");
    assert!(conflicts >= 1, "{results:?}");
    assert_eq!(succeeded + conflicts, CALLERS, "{results:?}");
    let order = order_item(&env, "u-1", &created.order_id).await;
    assert_eq!(version(&order), 1 + succeeded);
    let changed = env
        .outbox_items()
        .await
        .into_iter()
        .filter(|e| e.event_type == "OrderStatusChanged")
        .count() as u64;
    assert_eq!(changed, succeeded);
}

#[tokio::test]
async fn updating_a_missing_order_is_not_found_and_writes_nothing() {
    // Given an empty table
    let env = TestEnv::new().await;
    let writer = writer(&env, patient());

    // When a status change targets an order that does not exist
    let err = writer
        .update_order_status_with_outbox("u-1", "nope", OrderStatus::Paid)
        .await
        .unwrap_err();

    // Then the caller learns so, and no event was written
    assert_eq!(
        err,
        WriteError::NotFound {
            key: ItemKey {
                pk: "USER#u-1".into(),
                sk: "ORDER#nope".into()
            }
        }
    );
    assert_eq!(env.scan_items().await, vec![]);
}
