//! The consumer helpers against the local emulator: the idempotency store (concurrent duplicates,
//! crashed holders, stored responses, payload mismatches, failure policies, the cache), the
//! OCC helper (concurrent decrements, conflicts with no retries), and the payload resolver (an
//! event's payload read back from S3: 5 MiB in either format, one not the payload named, one
//! gone, one not the data expected).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_s3::primitives::ByteStream;
use chrono::{DateTime, Utc};
use futures::future::join_all;
use order_consumer::stock::{self, create_stock_table, put_stock};
use order_consumer::{DynamoInventory, StockLevel};
use outbox_consumer::idempotency::payload_hash;
use outbox_consumer::occ::OccConfig;
use outbox_consumer::tables::{create_idempotency_table, idempotency};
use outbox_consumer::{
    Clock, FailurePolicy, IdempotencyConfig, IdempotencyError, IdempotencyStore, ManualClock,
    OccError, OccTable, Outcome, RetryPolicy,
};
use outbox_consumer::{DecodeError, Envelope, PayloadResolver, ResolveError};
use outbox_shared::claim_check::PayloadStore;
use outbox_shared::envelope::Encoding;
use outbox_shared::schema::user_pk;
use outbox_shared::{NewOutboxEvent, OutboundEvent, OutboxItem};
use outbox_tests::fault_proxy::{FaultProxy, FaultRates};
use outbox_tests::{TEST_SOURCE, TestEnv, emulator_endpoints, unique_name};
use serde_json::{Value, json};

/// A fresh idempotency table in `env`.
async fn idempotency_table(env: &TestEnv) -> String {
    let name = unique_name("idempotency");
    create_idempotency_table(&env.dynamodb, &name)
        .await
        .expect("create idempotency table");
    name
}

fn store(
    env: &TestEnv,
    config: IdempotencyConfig,
    clock: &ManualClock,
) -> IdempotencyStore<ManualClock> {
    IdempotencyStore::with_clock(env.dynamodb.clone(), config, clock.clone()).expect("valid config")
}

async fn record(
    env: &TestEnv,
    table: &str,
    key: &str,
) -> Option<std::collections::HashMap<String, AttributeValue>> {
    env.dynamodb
        .get_item()
        .table_name(table)
        .key(idempotency::attr::PK, AttributeValue::S(key.to_owned()))
        .consistent_read(true)
        .send()
        .await
        .expect("get record")
        .item()
        .cloned()
}

fn string_attr(item: &std::collections::HashMap<String, AttributeValue>, name: &str) -> String {
    item[name].as_s().expect("string attribute").clone()
}

fn number_attr(item: &std::collections::HashMap<String, AttributeValue>, name: &str) -> i64 {
    item[name]
        .as_n()
        .expect("number attribute")
        .parse()
        .expect("integer")
}

/// Business logic that counts how often it really ran and answers with that count.
fn counting(runs: &Arc<AtomicUsize>) -> impl FnOnce() -> std::future::Ready<Result<Value, String>> {
    let runs = Arc::clone(runs);
    move || {
        let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
        std::future::ready(Ok(json!({"reserved": true, "run": run})))
    }
}

#[tokio::test]
async fn the_same_event_delivered_ten_times_concurrently_has_its_effect_once() {
    // Given an idempotency store and a business effect that takes a while
    let env = TestEnv::new().await;
    let table = idempotency_table(&env).await;
    let store =
        IdempotencyStore::new(env.dynamodb.clone(), IdempotencyConfig::new(&table)).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let payload = json!({"orderId": "o-1", "items": [{"sku": "A", "quantity": 1}]});

    // When the same event is delivered ten times at once
    let deliveries = (0..10).map(|_| {
        let (store, runs, payload) = (store.clone(), Arc::clone(&runs), payload.clone());
        async move {
            store
                .run("evt-concurrent", &payload, None, || async move {
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
                    Ok::<_, String>(json!({"reserved": true, "run": run}))
                })
                .await
        }
    });
    let results = join_all(deliveries).await;

    // Then the effect happened once, and every caller got the response or "in progress"
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let stored = json!({"reserved": true, "run": 1});
    let mut executed = 0;
    for result in &results {
        match result {
            Ok(Outcome::Executed(r)) => {
                executed += 1;
                assert_eq!(r, &stored);
            }
            Ok(Outcome::AlreadyCompleted(r)) => assert_eq!(r, &stored),
            Err(e @ IdempotencyError::InProgress { .. }) => assert!(e.is_retryable()),
            Err(e) => panic!("unexpected outcome: {e}"),
        }
    }
    assert_eq!(executed, 1);

    // And after completion every caller gets the stored response
    let again =
        join_all((0..10).map(|_| store.run("evt-concurrent", &payload, None, counting(&runs))))
            .await;
    for result in again {
        assert_eq!(result.unwrap(), Outcome::AlreadyCompleted(stored.clone()));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let record = record(&env, &table, "evt-concurrent")
        .await
        .expect("record");
    assert_eq!(
        string_attr(&record, idempotency::attr::STATUS),
        idempotency::status::COMPLETED
    );
}

#[tokio::test]
async fn a_crashed_holder_blocks_the_key_until_its_lock_expires_then_it_runs_once() {
    // Given a store with a 30 s lock and a holder that claims the key and never completes
    let env = TestEnv::new().await;
    let table = idempotency_table(&env).await;
    let clock = ManualClock::new(Utc::now());
    let config = IdempotencyConfig {
        lock_expiry: Duration::from_secs(30),
        ..IdempotencyConfig::new(&table)
    };
    let store = store(&env, config, &clock);
    let payload = json!({"orderId": "o-2"});
    let (claimed_tx, claimed_rx) = tokio::sync::oneshot::channel();
    let holder = tokio::spawn({
        let (store, payload) = (store.clone(), payload.clone());
        async move {
            store
                .run("evt-crash", &payload, None, || async move {
                    claimed_tx.send(()).unwrap();
                    std::future::pending::<Result<Value, String>>().await
                })
                .await
        }
    });
    claimed_rx.await.expect("holder claimed the key");
    holder.abort();
    let runs = Arc::new(AtomicUsize::new(0));

    // When another caller comes just before the lock expires
    clock.advance(Duration::from_secs(29));
    let refused = store
        .run("evt-crash", &payload, None, counting(&runs))
        .await;

    // Then it is refused as in progress, without running the logic
    assert!(
        matches!(refused, Err(IdempotencyError::InProgress { .. })),
        "{refused:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);

    // When it comes again after the lock expired
    clock.advance(Duration::from_secs(2));
    let ran = store
        .run("evt-crash", &payload, None, counting(&runs))
        .await
        .unwrap();

    // Then it runs the logic, once
    assert!(ran.executed());
    let replay = store
        .run("evt-crash", &payload, None, counting(&runs))
        .await
        .unwrap();
    assert_eq!(
        replay,
        Outcome::AlreadyCompleted(json!({"reserved": true, "run": 1}))
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_lambda_deadline_bounds_the_lock() {
    // Given a 60 s lock but an invocation that ends in 5 s, and a holder that times out
    let env = TestEnv::new().await;
    let table = idempotency_table(&env).await;
    let clock = ManualClock::new(Utc::now());
    let store = store(&env, IdempotencyConfig::new(&table), &clock);
    let deadline: DateTime<Utc> = clock.now() + chrono::Duration::seconds(5);
    let (claimed_tx, claimed_rx) = tokio::sync::oneshot::channel();
    let holder = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .run("evt-deadline", &json!({}), Some(deadline), || async move {
                    claimed_tx.send(()).unwrap();
                    std::future::pending::<Result<Value, String>>().await
                })
                .await
        }
    });
    claimed_rx.await.expect("holder claimed the key");
    holder.abort();

    // When another delivery comes after the deadline, long before the 60 s lock
    let refused = store
        .run("evt-deadline", &json!({}), None, counting(&Arc::default()))
        .await;
    clock.advance(Duration::from_secs(6));
    let runs = Arc::new(AtomicUsize::new(0));
    let ran = store
        .run("evt-deadline", &json!({}), None, counting(&runs))
        .await
        .unwrap();

    // Then the key was held only until the deadline
    match refused {
        Err(IdempotencyError::InProgress { expires_at, .. }) => {
            assert_eq!(expires_at.timestamp_millis(), deadline.timestamp_millis());
        }
        other => panic!("expected in progress, got {other:?}"),
    }
    assert!(ran.executed());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_completed_key_answers_with_its_stored_response_and_refuses_another_payload() {
    // Given a key that completed
    let env = TestEnv::new().await;
    let table = idempotency_table(&env).await;
    let clock = ManualClock::new(Utc::now());
    let config = IdempotencyConfig {
        completed_retention: Duration::from_secs(3600),
        ..IdempotencyConfig::new(&table)
    };
    let store = store(&env, config, &clock);
    let runs = Arc::new(AtomicUsize::new(0));
    let payload = json!({"orderId": "o-3", "amountCents": 500});
    let first = store
        .run("evt-done", &payload, None, counting(&runs))
        .await
        .unwrap();
    assert!(first.executed());

    // When it is delivered again, the same document with its fields in another order
    let reordered: Value =
        serde_json::from_str(r#"{"amountCents": 500, "orderId": "o-3"}"#).unwrap();
    let again = store
        .run("evt-done", &reordered, None, counting(&runs))
        .await
        .unwrap();

    // Then the stored response comes back and the logic does not run
    assert_eq!(again, Outcome::AlreadyCompleted(first.into_response()));
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // When the key is reused with a different payload
    let other = json!({"orderId": "o-3", "amountCents": 999});
    let mismatch = store.run("evt-done", &other, None, counting(&runs)).await;

    // Then it is refused, not retryable, and the logic does not run
    match mismatch {
        Err(e @ IdempotencyError::PayloadMismatch { .. }) => assert!(!e.is_retryable()),
        other => panic!("expected a payload mismatch, got {other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    // And the record is set up for DynamoDB TTL to clean it up after the retention
    let record = record(&env, &table, "evt-done").await.expect("record");
    let ttl = number_attr(&record, idempotency::attr::TTL);
    let now = clock.now().timestamp();
    assert!(
        (now + 3600..=now + 3601).contains(&ttl),
        "ttl {ttl}, now {now}"
    );
    assert!(!record.contains_key(idempotency::attr::CLAIM_TOKEN));
}

#[tokio::test]
async fn a_business_failure_releases_the_key_so_a_retry_runs() {
    // Given the default policy (release on failure) and logic that fails once
    let env = TestEnv::new().await;
    let table = idempotency_table(&env).await;
    let store =
        IdempotencyStore::new(env.dynamodb.clone(), IdempotencyConfig::new(&table)).unwrap();
    let payload = json!({"orderId": "o-4"});

    // When the first delivery fails
    let failed = store
        .run("evt-fail", &payload, None, || async {
            Err::<Value, _>("inventory down".to_owned())
        })
        .await;

    // Then the caller sees the business error and the key is free again
    match &failed {
        Err(IdempotencyError::Business { error, .. }) => assert_eq!(error, "inventory down"),
        other => panic!("expected a business failure, got {other:?}"),
    }
    assert!(record(&env, &table, "evt-fail").await.is_none());

    // And a retry runs the logic
    let runs = Arc::new(AtomicUsize::new(0));
    let retried = store
        .run("evt-fail", &payload, None, counting(&runs))
        .await
        .unwrap();
    assert!(retried.executed());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_business_failure_marked_failed_is_retryable_after_the_cool_down() {
    // Given the mark-failed policy with a 10 s cool-down and logic that fails once
    let env = TestEnv::new().await;
    let table = idempotency_table(&env).await;
    let clock = ManualClock::new(Utc::now());
    let config = IdempotencyConfig {
        on_failure: FailurePolicy::MarkFailed {
            retry_after: Duration::from_secs(10),
        },
        ..IdempotencyConfig::new(&table)
    };
    let store = store(&env, config, &clock);
    let payload = json!({"orderId": "o-5"});
    let failed = store
        .run("evt-marked", &payload, None, || async {
            Err::<Value, _>("inventory down".to_owned())
        })
        .await;
    assert!(matches!(failed, Err(IdempotencyError::Business { .. })));

    // When a retry comes during the cool-down, and again after it
    let runs = Arc::new(AtomicUsize::new(0));
    let early = store
        .run("evt-marked", &payload, None, counting(&runs))
        .await;
    clock.advance(Duration::from_secs(11));
    let later = store
        .run("evt-marked", &payload, None, counting(&runs))
        .await
        .unwrap();

    // Then the early one is told to retry later, the later one runs, and the failure is on record
    assert!(
        matches!(&early, Err(e @ IdempotencyError::RetryLater { .. }) if e.is_retryable()),
        "{early:?}"
    );
    assert!(later.executed());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let record = record(&env, &table, "evt-marked").await.expect("record");
    assert_eq!(
        string_attr(&record, idempotency::attr::STATUS),
        idempotency::status::COMPLETED
    );
    assert_eq!(number_attr(&record, idempotency::attr::FAILURES), 1);
}

#[tokio::test]
async fn the_cache_answers_completed_keys_without_the_table() {
    // Given a store with a cache and a key that completed through it
    let env = TestEnv::new().await;
    let table = idempotency_table(&env).await;
    let config = IdempotencyConfig {
        cache_capacity: 16,
        ..IdempotencyConfig::new(&table)
    };
    let store = IdempotencyStore::new(env.dynamodb.clone(), config).unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let payload = json!({"orderId": "o-6"});
    store
        .run("evt-cached", &payload, None, counting(&runs))
        .await
        .unwrap();

    // When the record disappears from the table (say, TTL) and the event is delivered again
    env.dynamodb
        .delete_item()
        .table_name(&table)
        .key(
            idempotency::attr::PK,
            AttributeValue::S("evt-cached".into()),
        )
        .send()
        .await
        .unwrap();
    let again = store
        .run("evt-cached", &payload, None, counting(&runs))
        .await
        .unwrap();

    // Then the cache answers with the stored response, and still refuses another payload
    assert_eq!(
        again,
        Outcome::AlreadyCompleted(json!({"reserved": true, "run": 1}))
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let mismatch = store
        .run(
            "evt-cached",
            &json!({"orderId": "o-7"}),
            None,
            counting(&runs),
        )
        .await;
    assert!(matches!(
        mismatch,
        Err(IdempotencyError::PayloadMismatch { .. })
    ));
}

async fn stock_table(env: &TestEnv, available: u64) -> (String, Arc<DynamoInventory>, OccConfig) {
    let name = unique_name("stock");
    create_stock_table(&env.dynamodb, &name)
        .await
        .expect("create stock table");
    put_stock(&env.dynamodb, &name, "SKU-OCC", available)
        .await
        .expect("seed stock");
    let config = OccConfig::new(&name, stock::attr::VERSION);
    let inventory =
        DynamoInventory::new(OccTable::new(env.dynamodb.clone(), config.clone()).unwrap());
    (name, Arc::new(inventory), config)
}

#[tokio::test]
async fn sixteen_concurrent_decrements_of_a_stock_of_100_end_at_84() {
    // Given a stock of 100 and a patient retry policy
    let env = TestEnv::new().await;
    let (_, inventory, config) = stock_table(&env, 100).await;
    let occ = OccTable::new(
        env.dynamodb.clone(),
        OccConfig {
            retry: RetryPolicy {
                max_retries: 100,
                base_delay: Duration::from_millis(5),
                max_delay: Duration::from_millis(200),
            },
            ..config
        },
    )
    .unwrap();

    // When 16 tasks each take one unit at the same time
    let key = DynamoInventory::key("SKU-OCC");
    let decrements = (0..16).map(|_| {
        let (occ, key) = (occ.clone(), key.clone());
        tokio::spawn(async move {
            occ.update(&key, |current: Option<StockLevel>| {
                let current = current.ok_or("missing")?;
                Ok::<_, &str>(StockLevel {
                    available: current.available - 1,
                })
            })
            .await
        })
    });
    let results = join_all(decrements).await;

    // Then every decrement landed: no lost update
    for result in results {
        result.expect("task").expect("decrement");
    }
    let level = inventory
        .stock_level("SKU-OCC")
        .await
        .unwrap()
        .expect("stock");
    assert_eq!(level.value.available, 84);
    assert_eq!(level.version, 17);
}

#[tokio::test]
async fn with_no_retries_contention_gives_the_typed_conflict() {
    // Given a stock of 100 and no retries
    let env = TestEnv::new().await;
    let (_, inventory, config) = stock_table(&env, 100).await;
    let occ = OccTable::new(
        env.dynamodb.clone(),
        OccConfig {
            retry: RetryPolicy {
                max_retries: 0,
                ..RetryPolicy::default()
            },
            ..config
        },
    )
    .unwrap();

    // When 16 tasks all read the same version before any of them writes
    let barrier = Arc::new(tokio::sync::Barrier::new(16));
    let key = DynamoInventory::key("SKU-OCC");
    let decrements = (0..16).map(|_| {
        let (occ, key, barrier) = (occ.clone(), key.clone(), Arc::clone(&barrier));
        tokio::spawn(async move {
            occ.update_with(&key, |current: Option<StockLevel>| {
                let barrier = Arc::clone(&barrier);
                async move {
                    barrier.wait().await;
                    let current = current.ok_or("missing")?;
                    Ok::<_, &str>(StockLevel {
                        available: current.available - 1,
                    })
                }
            })
            .await
        })
    });
    let results: Vec<_> = join_all(decrements)
        .await
        .into_iter()
        .map(|r| r.expect("task"))
        .collect();

    // Then one wins and the other 15 get the typed, retryable conflict; nothing is lost twice
    let won = results.iter().filter(|r| r.is_ok()).count();
    let conflicts = results
        .iter()
        .filter(|r| matches!(r, Err(e @ OccError::Conflict { attempts: 1 }) if e.is_retryable()))
        .count();
    assert_eq!((won, conflicts), (1, 15), "{results:?}");
    let level = inventory
        .stock_level("SKU-OCC")
        .await
        .unwrap()
        .expect("stock");
    assert_eq!(level.value.available, 99);
}

#[tokio::test]
async fn a_holder_whose_lock_was_taken_over_cannot_overwrite_the_new_holders_response() {
    // Given a slow holder whose 30 s lock expires while its logic runs
    let env = TestEnv::new().await;
    let table = idempotency_table(&env).await;
    let clock = ManualClock::new(Utc::now());
    let config = IdempotencyConfig {
        lock_expiry: Duration::from_secs(30),
        ..IdempotencyConfig::new(&table)
    };
    let store = store(&env, config, &clock);
    let (claimed_tx, claimed_rx) = tokio::sync::oneshot::channel();
    let (finish_tx, finish_rx) = tokio::sync::oneshot::channel::<()>();
    let slow = tokio::spawn({
        let store = store.clone();
        async move {
            store
                .run("evt-slow", &json!({}), None, || async move {
                    claimed_tx.send(()).unwrap();
                    finish_rx.await.unwrap();
                    Ok::<_, String>(json!({"by": "slow"}))
                })
                .await
        }
    });
    claimed_rx.await.expect("slow holder claimed the key");

    // When another caller takes the key over after the expiry and completes, then the slow one
    // finishes
    clock.advance(Duration::from_secs(31));
    let fast = store
        .run("evt-slow", &json!({}), None, || async {
            Ok::<_, String>(json!({"by": "fast"}))
        })
        .await
        .unwrap();
    finish_tx.send(()).unwrap();
    let slow = slow.await.expect("slow task");

    // Then the slow holder is told its claim was lost, and the stored response is the new holder's
    assert!(fast.executed());
    assert!(
        matches!(&slow, Err(e @ IdempotencyError::ClaimLost { .. }) if e.is_retryable()),
        "{slow:?}"
    );
    let replay = store
        .run("evt-slow", &json!({}), None, counting(&Arc::default()))
        .await
        .unwrap();
    assert_eq!(replay, Outcome::AlreadyCompleted(json!({"by": "fast"})));
}

/// A payload bucket as the template makes it, on the emulator's S3, and the claim check's store
/// in it.
async fn payload_store(env: &TestEnv) -> PayloadStore {
    PayloadStore::new(env.s3.clone(), env.create_payload_bucket().await)
}

/// An outbox item of `payload`, and the same item as the writer writes it when the payload is
/// too large for an item: the payload stored in `payloads` first, the item holding its reference.
async fn inline_and_claim_checked(
    env: &TestEnv,
    payloads: &PayloadStore,
    payload: Value,
) -> (OutboxItem, OutboxItem) {
    let item = OutboxItem::pending(
        NewOutboxEvent {
            partition_key: user_pk("user-1"),
            event_type: "OrderCreated".to_owned(),
            aggregate_type: "Order".to_owned(),
            aggregate_id: "ord-1".to_owned(),
            sequence: Some(1),
            payload,
            trace_header: None,
            trace_context: None,
        },
        &env.outbox_config(),
        Utc::now(),
    )
    .expect("valid outbox event");
    let (reference, _) = payloads
        .put(&item.event_id, item.payload.as_bytes())
        .await
        .expect("store the payload");
    let mut stored = item.clone();
    stored.payload = String::new();
    stored.payload_ref = Some(reference);
    (item, stored)
}

/// The body of `item`'s event as the relays publish it in `encoding`.
fn body(item: &OutboxItem, encoding: &Encoding) -> Value {
    let event = OutboundEvent::from_item(item, encoding).expect("an event");
    serde_json::from_str(&event.detail).expect("JSON")
}

#[tokio::test]
async fn a_5_mib_payload_in_s3_decodes_as_the_same_event_inline_in_either_format() {
    // Given an order with 5 MiB of line items, its payload stored in the payload bucket
    let env = TestEnv::new().await;
    let payloads = payload_store(&env).await;
    let lines: Vec<Value> = (0..40_000)
        .map(|i| json!({"sku": format!("SKU-{i:08}"), "quantity": 1, "note": "n".repeat(100)}))
        .collect();
    let payload = json!({"orderId": "ord-1", "items": lines});
    let (item, stored) = inline_and_claim_checked(&env, &payloads, payload.clone()).await;
    let reference = stored.payload_ref.clone().unwrap();
    assert!(reference.size >= 5 * 1024 * 1024, "{}", reference.size);
    let resolver = PayloadResolver::new(env.s3.clone(), payloads.bucket());

    for encoding in [Encoding::envelope(), Encoding::cloudevents(TEST_SOURCE)] {
        // When its event with the reference is decoded by the resolver, as a value and as a
        // message body
        let referenced = body(&stored, &encoding);
        assert_eq!(referenced["dataref"], reference.uri.as_str());
        let from_s3: Envelope<Value> = resolver.decode(&referenced).await.unwrap();
        let from_body: Envelope<Value> =
            resolver.decode_str(&referenced.to_string()).await.unwrap();

        // Then both are the event as it decodes with its payload inline, data and metadata,
        // and the idempotency store hashes them the same
        let inline: Envelope<Value> = outbox_consumer::decode(&body(&item, &encoding)).unwrap();
        assert_eq!(from_s3.data, payload, "{encoding:?}");
        assert_eq!(from_s3, inline, "{encoding:?}");
        assert_eq!(from_body, inline, "{encoding:?}");
        assert_eq!(
            payload_hash(&from_s3).unwrap(),
            payload_hash(&inline).unwrap()
        );
    }
}

#[tokio::test]
async fn a_payload_in_s3_that_is_not_the_one_named_or_is_gone_is_refused_naming_it_and_not_retryable()
 {
    // Given an event whose payload is in the payload bucket
    let env = TestEnv::new().await;
    let payloads = payload_store(&env).await;
    let (item, stored) =
        inline_and_claim_checked(&env, &payloads, json!({"orderId": "ord-1"})).await;
    let reference = stored.payload_ref.clone().unwrap();
    let (bucket, key) = reference.location().unwrap();
    let event = body(&stored, &Encoding::envelope());
    let resolver = PayloadResolver::new(env.s3.clone(), payloads.bucket());

    // When its object is overwritten with another payload, and the event decoded
    env.s3
        .put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from_static(br#"{"orderId": "ord-2"}"#))
        .send()
        .await
        .expect("overwrite the object");
    let err = resolver.decode::<Value>(&event).await.unwrap_err();

    // Then it is refused as not the payload named: its size and SHA-256 against the event's
    assert!(
        matches!(&err, DecodeError::Payload(e) if matches!(**e, ResolveError::Mismatch { .. })),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    let message = err.to_string();
    for said in [item.event_id.as_str(), reference.uri.as_str(), "20 bytes"] {
        assert!(message.contains(said), "{said:?} not in {message}");
    }

    // When its object is gone (past the bucket's lifecycle), and the event decoded
    env.s3
        .delete_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .expect("expire the object");
    let err = resolver.decode::<Value>(&event).await.unwrap_err();

    // Then it is refused as gone, saying why, and no retry can bring it back
    assert!(
        matches!(&err, DecodeError::Payload(e) if matches!(**e, ResolveError::Gone { .. })),
        "{err:?}"
    );
    assert!(!err.is_retryable());
    assert_eq!(
        err.to_string(),
        format!(
            "the payload of event {} is gone from {}: its object expired (the payload bucket's \
             lifecycle) or was deleted; the event cannot be processed from its reference",
            item.event_id, reference.uri
        )
    );
}

#[tokio::test]
async fn a_payload_in_s3_that_is_not_the_data_expected_is_malformed_naming_its_reference() {
    // Given an event whose payload, in the payload bucket, is not an order
    #[derive(Debug, serde::Deserialize)]
    struct Order {
        #[serde(rename = "orderId")]
        _order_id: String,
    }
    let env = TestEnv::new().await;
    let payloads = payload_store(&env).await;
    let (_, stored) =
        inline_and_claim_checked(&env, &payloads, json!(["not", "an", "order"])).await;
    let event = body(&stored, &Encoding::envelope());

    // When it is decoded as an order
    let err = PayloadResolver::new(env.s3.clone(), payloads.bucket())
        .decode::<Order>(&event)
        .await
        .unwrap_err();

    // Then it is poison, named by its reference
    assert!(
        matches!(&err, DecodeError::StoredDataMalformed { uri, .. }
            if *uri == stored.payload_ref.as_ref().unwrap().uri),
        "{err:?}"
    );
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn a_claim_checked_event_naming_another_bucket_or_key_is_refused_and_not_read() {
    // Given a consumer's payload bucket, and another bucket its role could read, each holding a
    // payload, the other one's named by an event as anyone who can publish could name it
    let env = TestEnv::new().await;
    let own = payload_store(&env).await;
    let other = payload_store(&env).await;
    let (_, stored) = inline_and_claim_checked(&env, &other, json!({"orderId": "secret"})).await;
    let reference = stored.payload_ref.clone().unwrap();
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 9).await;
    let resolver = PayloadResolver::new(env.s3_through(&proxy), own.bucket());
    let (_, key) = reference.location().unwrap();
    let dead_letter_record = format!("s3://{}/dead-letters/{key}", own.bucket());

    for uri in [reference.uri.clone(), dead_letter_record] {
        let mut event = body(&stored, &Encoding::envelope());
        event["dataref"] = json!(uri);

        // When the consumer decodes it
        let err = resolver.decode::<Value>(&event).await.unwrap_err();

        // Then it is refused by name, not retryable, and S3 was not called
        assert!(
            matches!(&err, DecodeError::ForeignDataRef { .. }),
            "{uri}: {err:?}"
        );
        assert!(!err.is_retryable());
        let message = err.to_string();
        for named in [uri.as_str(), own.bucket(), "payloads/"] {
            assert!(message.contains(named), "{named}: {message}");
        }
    }
    assert!(proxy.targets().is_empty(), "{:?}", proxy.targets());
}

#[tokio::test]
async fn a_consumer_refuses_its_payload_bucket_once_another_accounts() {
    // Given an event whose payload is in the consumer's bucket, and the bucket now another
    // account's (S3 answers a call naming another owner 403)
    let env = TestEnv::new().await;
    let payloads = payload_store(&env).await;
    let (_, stored) = inline_and_claim_checked(&env, &payloads, json!({"orderId": "o1"})).await;
    let event = body(&stored, &Encoding::envelope());
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 10).await;
    proxy.buckets_owned_by("999999999999");

    // When a consumer expecting the stack's account decodes it
    let owner = outbox_consumer::ExpectedBucketOwner::new("123456789012").unwrap();
    let resolver = PayloadResolver::new(owner.client(&env.s3_through(&proxy)), payloads.bucket());
    let err = resolver.decode::<Value>(&event).await.unwrap_err();

    // Then S3's refusal is the error, final, and the call named the owner
    assert!(err.to_string().contains("AccessDenied"), "{err}");
    assert!(!err.is_retryable(), "{err}");
    assert_eq!(proxy.s3_calls_without_owner(), Vec::<String>::new());
    assert_eq!(proxy.counts_for("AmazonS3.GetObject").failed_calls, 1);
}
