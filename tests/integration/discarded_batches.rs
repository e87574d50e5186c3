//! Discarded stream batches, end to end on the emulators: `relay-stream-local` gives a batch up
//! after its retries (the bus refuses every `PutEvents`, through the fault proxy) and writes it
//! whole to a bucket on moto, as the mapping's S3 on-failure destination does on AWS; the poller
//! re-creates its TTL deletion of a pending event and publishes it, and its `INSERT` through the
//! index, once each, with nothing done by hand.
//!
//! The batch is real: an order's outbox `INSERT`, another's `INSERT`, and that other's deletion by
//! DynamoDB Local's TTL (its `REMOVE` with the TTL service's identity and the old image), read from
//! the emulator's stream by the reader.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::AttributeValue;
use outbox_shared::OutboxStatus;
use outbox_shared::schema::attr;
use outbox_tests::fault_proxy::{FaultProxy, FaultRates};
use outbox_tests::{TestEnv, emulator_endpoints};
use relay_runtime::discarded_batch::DiscardedBatch;
use relay_runtime::stream_record::is_ttl_deletion;
use serde_json::Value;

/// How long DynamoDB Local may take to TTL-delete an expired item (about a second, measured).
const TTL_DELETION_TIMEOUT: Duration = Duration::from_secs(60);

/// The classic `PutEvents`, refused by the proxy: the bus is down for the stream relay.
const PUT_EVENTS: &str = "AWSEvents.PutEvents";

/// A batch the local reader gave up and wrote to the bucket.
pub(crate) struct Discarded {
    pub bucket: String,
    /// The event whose item is still pending (its `INSERT` is in the batch).
    pub inserted: String,
    /// The event DynamoDB's TTL deleted while pending (its `INSERT` and `REMOVE` are in the batch).
    pub deleted: String,
    pub key: String,
    pub body: Vec<u8>,
    /// The proxy the reader's calls went through (which calls it made: `role_calls`).
    pub reader: FaultProxy,
}

/// Two orders, the second's pending outbox item deleted by DynamoDB's TTL; then `relay-stream-local`
/// reads the stream with every `PutEvents` refused, gives the batch up after one retry and writes it
/// to a new bucket.
pub(crate) async fn discarded_batch(env: &TestEnv) -> Discarded {
    let bucket = env.create_discarded_batch_bucket().await;
    let ids = env.create_orders(2, 1).await;
    let (inserted, deleted) = (ids[0].clone(), ids[1].clone());
    expire(env, &deleted).await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 61).await;
    proxy.deny(PUT_EVENTS);
    let output = env
        .relay_command("relay-stream-local")
        .args(["--from", "trim-horizon", "--exit-when-idle", "1s"])
        .args(["--max-retries", "1", "--poll-interval", "50ms"])
        .env("DISCARDED_BATCH_BUCKET", &bucket)
        .envs(proxy.endpoint_env())
        .env("RUST_LOG", "warn")
        .stderr(Stdio::inherit())
        .output()
        .await
        .expect("relay-stream-local runs");
    assert!(output.status.success(), "{output:?}");
    assert!(proxy.counts_for(PUT_EVENTS).denied_calls > 0);
    let keys = env.object_keys(&bucket).await;
    assert_eq!(keys.len(), 1, "one discarded batch in the bucket: {keys:?}");
    let key = keys[0].clone();
    let body = env.object(&bucket, &key).await;
    Discarded {
        bucket,
        inserted,
        deleted,
        key,
        body,
        reader: proxy,
    }
}

/// Sets the `ttl` of `event_id`'s pending item in the past and waits until DynamoDB's TTL has
/// deleted it.
pub(crate) async fn expire(env: &TestEnv, event_id: &str) {
    let item = env
        .outbox_items()
        .await
        .into_iter()
        .find(|item| item.event_id == event_id)
        .expect("the item");
    let yesterday = chrono::Utc::now().timestamp() - 24 * 3600;
    env.dynamodb
        .update_item()
        .table_name(&env.table_name)
        .key(attr::PK, AttributeValue::S(item.pk.clone()))
        .key(attr::SK, AttributeValue::S(item.sk.clone()))
        .update_expression("SET #ttl = :ttl")
        .expression_attribute_names("#ttl", attr::TTL)
        .expression_attribute_values(":ttl", AttributeValue::N(yesterday.to_string()))
        .send()
        .await
        .expect("set ttl");
    let started = Instant::now();
    while env
        .outbox_items()
        .await
        .iter()
        .any(|item| item.event_id == event_id)
    {
        assert!(
            started.elapsed() < TTL_DELETION_TIMEOUT,
            "DynamoDB Local did not TTL-delete the item"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Each outbox item's status, by event id.
async fn statuses(env: &TestEnv) -> HashMap<String, OutboxStatus> {
    env.outbox_items()
        .await
        .into_iter()
        .map(|item| (item.event_id, item.status))
        .collect()
}

/// `relay-poller recover-discarded --json` on `bucket`: its exit code and summary.
pub(crate) async fn recover_discarded(
    env: &TestEnv,
    bucket: &str,
    proxy: Option<&FaultProxy>,
) -> (Option<i32>, Value) {
    let mut command = env.relay_command("relay-poller");
    command
        .args(["recover-discarded", "--json"])
        .env("DISCARDED_BATCH_BUCKET", bucket)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::inherit());
    if let Some(proxy) = proxy {
        command.envs(proxy.endpoint_env());
    }
    let output = command.output().await.expect("relay-poller runs");
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    let summary =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("summary {stdout:?}: {e}"));
    (output.status.code(), summary)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_batch_the_local_reader_gives_up_goes_whole_to_the_bucket_as_aws_writes_it() {
    // Given an outbox INSERT, and a pending event DynamoDB's TTL deleted, on the stream; and a bus
    // that refuses every PutEvents
    let env = TestEnv::new().await;

    // When relay-stream-local gives their batch up after its retries
    let discarded = discarded_batch(&env).await;

    // Then the bucket holds it under the key layout AWS documents for the mapping's S3 destination
    let layout = regex::Regex::new(
        r"^aws/lambda/[0-9a-f-]{36}/[^/]+/\d{4}/\d{2}/\d{2}/\d{4}-\d{2}-\d{2}T\d{2}\.\d{2}\.\d{2}-[0-9a-f-]{36}$",
    )
    .unwrap();
    assert!(layout.is_match(&discarded.key), "{}", discarded.key);
    // And the object is the invocation record, with the batch's records as Lambda handed them on
    let json: Value = serde_json::from_slice(&discarded.body).unwrap();
    assert_eq!(json["version"], "1.0");
    assert_eq!(
        json["requestContext"]["condition"],
        "RetryAttemptsExhausted"
    );
    assert_eq!(json["requestContext"]["approximateInvokeCount"], 2);
    let info = &json["DDBStreamBatchInfo"];
    assert_eq!(info["streamArn"], env.stream_arn.as_str());
    assert!(discarded.key.contains(info["shardId"].as_str().unwrap()));
    let batch = DiscardedBatch::from_json(&discarded.body).unwrap();
    assert_eq!(info["batchSize"], batch.records().len());
    assert_eq!(
        info["startSequenceNumber"].as_str(),
        batch.records()[0].change.sequence_number.as_deref()
    );
    let event_id = |image: &serde_dynamo::Item| match image.get(attr::EVENT_ID) {
        Some(serde_dynamo::AttributeValue::S(id)) => Some(id.clone()),
        _ => None,
    };
    let inserts: Vec<String> = batch
        .records()
        .iter()
        .filter(|r| r.event_name == "INSERT")
        .filter_map(|r| event_id(&r.change.new_image))
        .collect();
    assert_eq!(
        inserts,
        [discarded.inserted.clone(), discarded.deleted.clone()]
    );
    let ttl_deletions: Vec<String> = batch
        .records()
        .iter()
        .filter(|r| is_ttl_deletion(r))
        .filter_map(|r| event_id(&r.change.old_image))
        .collect();
    assert_eq!(ttl_deletions, std::slice::from_ref(&discarded.deleted));
}

#[tokio::test(flavor = "multi_thread")]
async fn the_running_poller_recreates_a_discarded_ttl_deletion_and_publishes_it_and_the_insert_once()
 {
    // Given a discarded batch in the bucket: an INSERT whose item is pending, and a TTL deletion of
    // a pending event whose item is gone
    let env = TestEnv::new().await;
    let discarded = discarded_batch(&env).await;
    assert_eq!(
        statuses(&env).await.get(&discarded.deleted),
        None,
        "the deleted event's item is gone"
    );

    // When the poller service runs, as the template runs it, with nothing done by hand
    let mut run = env
        .relay_command("relay-poller")
        .args(["run", "--grace-period", "0s", "--idle-backoff-max", "1s"])
        .env("DISCARDED_BATCH_BUCKET", &discarded.bucket)
        .env("DISCARDED_BATCH_INTERVAL", "1s")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("relay-poller run starts");
    let delivered = env.wait_for_sink(2, Duration::from_secs(60)).await;
    let started = Instant::now();
    while !env.object_keys(&discarded.bucket).await.is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the batch stays in the bucket"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // (a pass more: nothing else arrives)
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later = env.drain_sink().await;
    let pid = run.id().expect("pid").to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let exit = tokio::time::timeout(Duration::from_secs(30), run.wait())
        .await
        .expect("exits after SIGTERM")
        .unwrap();
    assert!(exit.success(), "{exit:?}");

    // Then both events arrived once: the INSERT through the index, the deleted one re-created
    let mut received: Vec<String> = delivered
        .iter()
        .chain(&later)
        .map(|m| m.event_id().to_owned())
        .collect();
    received.sort();
    let mut expected = vec![discarded.inserted.clone(), discarded.deleted.clone()];
    expected.sort();
    assert_eq!(received, expected);
    // And both items are published, the re-created one included; the batch left the bucket
    let statuses = statuses(&env).await;
    assert_eq!(statuses[&discarded.inserted], OutboxStatus::Published);
    assert_eq!(statuses[&discarded.deleted], OutboxStatus::Published);
    assert!(env.object_keys(&discarded.bucket).await.is_empty());
    assert_eq!(env.pending_in_index().await, 0);
}

/// A summary's counters, in a fixed order: batches, recovered, recreated, already_there,
/// left_to_index, left_in_bucket, retry_later.
fn counts(summary: &Value) -> [u64; 7] {
    [
        "batches",
        "recovered",
        "recreated",
        "already_there",
        "left_to_index",
        "left_in_bucket",
        "retry_later",
    ]
    .map(|field| {
        summary[field]
            .as_u64()
            .unwrap_or_else(|| panic!("{field} in {summary}"))
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn a_discarded_batch_processed_twice_recreates_nothing_twice_nor_an_event_published_since() {
    // Given a discarded batch with an INSERT and a TTL deletion of a pending event
    let env = TestEnv::new().await;
    let discarded = discarded_batch(&env).await;

    // When the operator's one-off command recovers it, and the same object is read once more
    let (code, first) = recover_discarded(&env, &discarded.bucket, None).await;
    assert_eq!(code, Some(0), "{first}");
    put_back(&env, &discarded).await;
    let (code, second) = recover_discarded(&env, &discarded.bucket, None).await;
    assert_eq!(code, Some(0), "{second}");

    // Then the first re-created the deleted event (pending again, in the index) and left the two
    // INSERTs to the index; the second found it there and re-created nothing; each deleted it
    assert_eq!(counts(&first), [1, 1, 1, 0, 2, 0, 0], "{first}");
    assert_eq!(counts(&second), [1, 1, 0, 1, 2, 0, 0], "{second}");
    assert_eq!(
        statuses(&env).await.get(&discarded.deleted),
        Some(&OutboxStatus::Pending)
    );
    assert!(env.object_keys(&discarded.bucket).await.is_empty());

    // When a drain publishes what is pending, and the batch is read once more after that
    let drained = env
        .relay_command("relay-poller")
        .arg("drain")
        .env("RUST_LOG", "warn")
        .output()
        .await
        .expect("drain runs");
    assert!(drained.status.success(), "{drained:?}");
    put_back(&env, &discarded).await;
    let (code, third) = recover_discarded(&env, &discarded.bucket, None).await;
    assert_eq!(code, Some(0), "{third}");

    // Then each event arrived once, and the event published since was not re-created
    let mut received: Vec<String> = env
        .wait_for_sink(2, Duration::from_secs(30))
        .await
        .iter()
        .map(|m| m.event_id().to_owned())
        .collect();
    received.sort();
    let mut expected = vec![discarded.inserted.clone(), discarded.deleted.clone()];
    expected.sort();
    assert_eq!(received, expected);
    assert_eq!(counts(&third), [1, 1, 0, 1, 2, 0, 0], "{third}");
    assert_eq!(
        statuses(&env).await.get(&discarded.deleted),
        Some(&OutboxStatus::Published)
    );
    assert_eq!(env.pending_in_index().await, 0);
}

/// Puts the discarded batch's object back under its key, as a second delivery of it would.
pub(crate) async fn put_back(env: &TestEnv, discarded: &Discarded) {
    env.s3
        .put_object()
        .bucket(&discarded.bucket)
        .key(&discarded.key)
        .body(discarded.body.clone().into())
        .send()
        .await
        .expect("put the object back");
}
