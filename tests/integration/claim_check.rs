//! Events of any size (the claim check): a payload too large for its target's entry is stored in
//! the payload bucket (`PAYLOAD_BUCKET`) under its event's key, and the event carries `dataref`,
//! `datasize` and `datasha256` in place of `data`. On the emulators: DynamoDB Local's stream,
//! moto's S3 (through the fault proxy, which verifies `ChecksumSHA256` as S3 does and can take S3
//! out), both relays' binaries.

use std::process::Stdio;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use outbox_shared::claim_check::object_key;
use outbox_shared::schema::{self, attr};
use outbox_tests::fault_proxy::{FaultProxy, FaultRates};
use outbox_tests::{TestEnv, emulator_endpoints, minimal_outbox_item};
use serde_json::{Value, json};

/// A payload of about `bytes` bytes: an order with that many bytes of line items.
fn order_payload(bytes: usize) -> String {
    json!({"orderId": "o-large", "lines": "l".repeat(bytes)}).to_string()
}

/// Writes a pending event as another client would, with a raw `PutItem`: `payload` inline, in
/// `user`'s item collection, as aggregate `aggregate`'s `sequence`-th event.
async fn put_event(
    env: &TestEnv,
    user: &str,
    event_id: &str,
    aggregate: &str,
    sequence: u64,
    payload: &str,
) {
    let created_at = format!("2026-11-27T00:00:{:02}.000Z", sequence);
    let mut item = minimal_outbox_item(user, event_id, "OrderCreated", payload, &created_at, 0);
    item.insert(
        attr::AGGREGATE_ID.to_owned(),
        AttributeValue::S(aggregate.to_owned()),
    );
    item.insert(
        attr::SEQUENCE.to_owned(),
        AttributeValue::N(sequence.to_string()),
    );
    env.put_raw_item(item).await;
}

/// Runs a relay binary (`relay-poller drain` or `relay-stream-local`) with `PAYLOAD_BUCKET`, its
/// AWS calls through `proxy`; whether it succeeded, and its JSON summary.
async fn run_relay(env: &TestEnv, proxy: &FaultProxy, bucket: &str, relay: Relay) -> (bool, Value) {
    run_relay_with(env, proxy, bucket, relay, &[]).await
}

/// [`run_relay`], with the environment variables `vars` set too.
async fn run_relay_with(
    env: &TestEnv,
    proxy: &FaultProxy,
    bucket: &str,
    relay: Relay,
    vars: &[(&str, &str)],
) -> (bool, Value) {
    let (bin, args): (&str, &[&str]) = match relay {
        Relay::Drain => (
            "relay-poller",
            &["drain", "--shard-count", "1", "--max-stalled-passes", "1"],
        ),
        Relay::Stream => (
            "relay-stream-local",
            &["--from", "trim-horizon", "--exit-when-idle", "1s"],
        ),
    };
    let output = env
        .relay_command(bin)
        .args(args)
        .env("PAYLOAD_BUCKET", bucket)
        .envs(vars.iter().copied())
        .envs(proxy.endpoint_env())
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .unwrap_or_else(|e| panic!("{bin} runs: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{bin} summary {stdout:?}: {e}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.success(), summary)
}

#[derive(Debug, Clone, Copy)]
enum Relay {
    Drain,
    Stream,
}

/// The S3 calls of `operation` the relays made through `proxy`.
fn s3_calls(proxy: &FaultProxy, operation: &str) -> u64 {
    let counts = proxy.counts_for(&format!("AmazonS3.{operation}"));
    counts.passed_calls + counts.failed_calls + counts.invalid_calls
}

/// A 300 KB payload (over the classic bus's 256 KiB entry, under DynamoDB's 400 KB item) written
/// by another client is published by `relay` with its payload in the bucket: the event is
/// delivered with its reference, the object is under the event's key, readable, with the
/// checksum S3 verified and the SHA-256 the event names.
async fn a_300_kb_payload_another_client_wrote_is_delivered_with_its_payload_in_s3(relay: Relay) {
    let env = TestEnv::new().await;
    let bucket = env.create_payload_bucket().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 1).await;
    let payload = order_payload(300 * 1000);
    put_event(&env, "u-large", "e-large-1", "o-large", 1, &payload).await;

    let (succeeded, summary) = run_relay(&env, &proxy, &bucket, relay).await;

    assert!(succeeded, "{relay:?}: {summary}");
    let delivered = env.wait_for_sink(1, Duration::from_secs(30)).await;
    assert_eq!(delivered.len(), 1, "{relay:?}");
    let event = &delivered[0];
    assert_eq!(event.event_id(), "e-large-1");
    let reference = event
        .payload_ref
        .as_ref()
        .unwrap_or_else(|| panic!("{relay:?}: delivered without a reference: {}", event.event));
    assert_eq!(
        reference.uri,
        format!("s3://{bucket}/{}", object_key("e-large-1"))
    );
    assert_eq!(reference.size, payload.len() as u64);
    assert_eq!(
        reference.sha256,
        outbox_shared::claim_check::sha256_base64(payload.as_bytes())
    );
    // The consumer's read: the object is the payload, size and SHA-256 checked
    assert_eq!(
        env.payload_of(event).await,
        serde_json::from_str::<Value>(&payload).unwrap()
    );
    // S3 verified and keeps the checksum it was sent
    let head = env
        .s3
        .head_object()
        .bucket(&bucket)
        .key(object_key("e-large-1"))
        .checksum_mode(aws_sdk_s3::types::ChecksumMode::Enabled)
        .send()
        .await
        .expect("head object");
    assert_eq!(head.checksum_sha256(), Some(reference.sha256.as_str()));
    // One PutObject for the one large event, and no call the relay's role lacks
    assert_eq!(s3_calls(&proxy, "PutObject"), 1, "{relay:?}");
    let (granted, platform) = match relay {
        Relay::Drain => (
            relay_poller::permissions::service(relay_runtime::TargetKind::Classic),
            &[][..],
        ),
        Relay::Stream => (
            relay_stream::permissions::calls(relay_runtime::TargetKind::Classic),
            crate::role_calls::STREAM_READER,
        ),
    };
    assert_eq!(
        crate::role_calls::called_without_permission(&proxy, &granted, platform),
        Vec::<String>::new(),
        "{relay:?}"
    );
    let item = &env.outbox_items().await[0];
    assert_eq!(item.status, outbox_shared::OutboxStatus::Published);
    assert_eq!(item.payload, payload, "the item keeps its payload");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_300_kb_payload_another_client_wrote_is_delivered_by_drain_with_its_payload_in_s3() {
    a_300_kb_payload_another_client_wrote_is_delivered_with_its_payload_in_s3(Relay::Drain).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_300_kb_payload_another_client_wrote_is_delivered_by_the_stream_relay_with_its_payload_in_s3()
 {
    a_300_kb_payload_another_client_wrote_is_delivered_with_its_payload_in_s3(Relay::Stream).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_re_publish_writes_no_second_object() {
    // Given a large event the stream relay published, its payload stored once
    let env = TestEnv::new().await;
    let bucket = env.create_payload_bucket().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 2).await;
    let payload = order_payload(300 * 1000);
    put_event(&env, "u-again", "e-again-1", "o-again", 1, &payload).await;
    let (succeeded, summary) = run_relay(&env, &proxy, &bucket, Relay::Stream).await;
    assert!(succeeded, "{summary}");
    let key = object_key("e-again-1");
    assert_eq!(env.object_versions(&bucket, &key).await, 1);

    // And its item pending again, as a mark whose reply was lost leaves it
    env.dynamodb
        .update_item()
        .table_name(&env.table_name)
        .key(attr::PK, AttributeValue::S(schema::user_pk("u-again")))
        .key(attr::SK, AttributeValue::S(schema::outbox_sk("e-again-1")))
        .update_expression("SET #status = :pending, #gsi1pk = :pk, #gsi1sk = :sk")
        .expression_attribute_names("#status", attr::STATUS)
        .expression_attribute_names("#gsi1pk", attr::GSI1PK)
        .expression_attribute_names("#gsi1sk", attr::GSI1SK)
        .expression_attribute_values(
            ":pending",
            AttributeValue::S(schema::status::PENDING.into()),
        )
        .expression_attribute_values(":pk", AttributeValue::S(schema::pending_shard_pk(0)))
        .expression_attribute_values(
            ":sk",
            AttributeValue::S(schema::pending_sort_key(
                "2026-11-27T00:00:01.000Z",
                "e-again-1",
            )),
        )
        .send()
        .await
        .expect("put the item back to pending");

    // When the poller publishes it again
    let (succeeded, summary) = run_relay(&env, &proxy, &bucket, Relay::Drain).await;

    // Then it is delivered again with the same reference, and S3 holds the one object it held:
    // the re-publish's conditional PutObject found it and wrote nothing
    assert!(succeeded, "{summary}");
    let delivered = env.wait_for_sink(2, Duration::from_secs(30)).await;
    assert_eq!(delivered.len(), 2);
    assert_eq!(delivered[0].payload_ref, delivered[1].payload_ref);
    assert_eq!(
        env.object_versions(&bucket, &key).await,
        1,
        "a second object was written"
    );
    assert_eq!(env.object_keys(&bucket).await, vec![key]);
    assert_eq!(summary["payloads_stored"], 0, "{summary}");
    assert_eq!(summary["payloads_already_stored"], 1, "{summary}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_s3_outage_during_publish_loses_nothing_and_reorders_nothing() {
    // Given aggregate x's large event then its small one, and aggregate y's small event
    let env = TestEnv::new().await;
    let bucket = env.create_payload_bucket().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 3).await;
    let large = order_payload(300 * 1000);
    put_event(&env, "u-x", "e-x-1", "o-x", 1, &large).await;
    put_event(
        &env,
        "u-x",
        "e-x-2",
        "o-x",
        2,
        r#"{"orderId":"o-x","status":"PAID"}"#,
    )
    .await;
    put_event(&env, "u-y", "e-y-1", "o-y", 1, r#"{"orderId":"o-y"}"#).await;

    // When the poller drains while S3 is out
    proxy.s3_outage(true);
    let (succeeded, summary) = run_relay(&env, &proxy, &bucket, Relay::Drain).await;

    // Then it says events remain; only y's event left, x's stay pending in order, nothing was
    // dead-lettered
    assert!(
        !succeeded,
        "a drain that left events pending succeeded: {summary}"
    );
    assert!(proxy.counts_for("AmazonS3.PutObject").failed_calls > 0);
    let delivered = env.wait_for_sink(1, Duration::from_secs(30)).await;
    let ids: Vec<_> = delivered.iter().map(|m| m.event_id().to_owned()).collect();
    assert_eq!(ids, ["e-y-1"]);
    assert!(env.drain_dead_letters().await.is_empty());
    assert_eq!(env.pending_in_index().await, 2);

    // When S3 is back and the poller drains again
    proxy.s3_outage(false);
    let (succeeded, summary) = run_relay(&env, &proxy, &bucket, Relay::Drain).await;

    // Then x's events are delivered, in order, the large one with its payload
    assert!(succeeded, "{summary}");
    let delivered = env.wait_for_sink(2, Duration::from_secs(30)).await;
    let ids: Vec<_> = delivered.iter().map(|m| m.event_id().to_owned()).collect();
    assert_eq!(ids, ["e-x-1", "e-x-2"]);
    assert_eq!(
        env.payload_of(&delivered[0]).await,
        serde_json::from_str::<Value>(&large).unwrap()
    );
    assert_eq!(env.pending_in_index().await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_payload_bucket_a_payload_too_large_is_dead_lettered_saying_how_to_publish_it() {
    let env = TestEnv::new().await;
    put_event(
        &env,
        "u-big",
        "e-big-1",
        "o-big",
        1,
        &order_payload(300 * 1000),
    )
    .await;

    let output = env
        .relay_command("relay-poller")
        .args(["drain", "--shard-count", "1"])
        .env("RUST_LOG", "error")
        .output()
        .await
        .expect("drain runs");

    assert!(output.status.success(), "{output:?}");
    let letters = env.drain_dead_letters().await;
    assert_eq!(letters.len(), 1);
    let reason = &letters[0].reason;
    assert!(
        reason.contains("--payload-bucket (PAYLOAD_BUCKET)"),
        "{reason}"
    );
}

/// An `OrderImported` event of `order` whose payload is `lines` order lines (about 55 bytes of
/// JSON each): 100,000 lines are over 5 MiB.
fn imported(user: &str, order: &str, lines: usize) -> outbox_shared::NewOutboxEvent {
    outbox_shared::NewOutboxEvent {
        partition_key: schema::user_pk(user),
        event_type: "OrderImported".into(),
        aggregate_type: "Order".into(),
        aggregate_id: order.into(),
        sequence: Some(1),
        payload: json!({
            "orderId": order,
            "items": (0..lines)
                .map(|i| outbox_writer::OrderLine::new(format!("SKU-{i:07}"), 1, 1_250))
                .collect::<Vec<_>>(),
        }),
        trace_header: None,
        trace_context: None,
    }
}

/// Commits order `order` of `user` and its `OrderImported` event of `lines` lines with `writer`.
pub(crate) async fn import_order(
    env: &TestEnv,
    writer: &outbox_writer::OutboxWriter,
    user: &str,
    order: &str,
    lines: usize,
) -> Result<String, outbox_writer::WriteError> {
    let put = aws_sdk_dynamodb::types::Put::builder()
        .table_name(&env.table_name)
        .item(attr::PK, AttributeValue::S(schema::user_pk(user)))
        .item(attr::SK, AttributeValue::S(schema::order_sk(order)))
        .item(
            attr::ENTITY_TYPE,
            AttributeValue::S(schema::entity::ORDER.into()),
        )
        .condition_expression("attribute_not_exists(PK)")
        .build()
        .expect("a put");
    let committed = writer
        .commit(
            outbox_writer::OutboxTransaction::new()
                .put(put, outbox_writer::ConditionFailure::AlreadyExists)
                .event(imported(user, order, lines)),
        )
        .await?;
    Ok(committed.event_ids()[0].to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_5_mib_payload_goes_from_the_writer_through_both_relays_to_the_consumer() {
    // Given a writer with a payload bucket, and a 5 MiB order written while the stream relay runs
    let env = TestEnv::new().await;
    let bucket = env.create_payload_bucket().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 5).await;
    let writer = env.writer_with(|c| c.payload_bucket = Some(bucket.clone()));
    let resolver = outbox_consumer::PayloadResolver::new(env.s3.clone(), &bucket);
    let streamed = import_order(&env, &writer, "u-5", "o-streamed", 100_000)
        .await
        .expect("the 5 MiB order is written");

    // When the stream relay relays it
    let (succeeded, summary) = run_relay(&env, &proxy, &bucket, Relay::Stream).await;
    assert!(succeeded, "{summary}");

    // Then the consumer crate reads its 5 MiB payload back, checked, as the order written
    let delivered = env.wait_for_sink(1, Duration::from_secs(30)).await;
    assert_eq!(delivered[0].event_id(), streamed);
    let event: outbox_consumer::Envelope<Value> = resolver
        .decode(&delivered[0].event)
        .await
        .expect("the consumer resolves the payload");
    let expected = imported("u-5", "o-streamed", 100_000).payload;
    assert!(expected.to_string().len() >= 5 * 1024 * 1024);
    assert_eq!(event.data, expected);
    assert_eq!(event.metadata.event_id, streamed);

    // When a second one is written during a stream outage and the poller drains it
    let drained = import_order(&env, &writer, "u-5", "o-drained", 100_000)
        .await
        .expect("the second 5 MiB order is written");
    let (succeeded, summary) = run_relay(&env, &proxy, &bucket, Relay::Drain).await;
    assert!(succeeded, "{summary}");

    // Then it reaches the consumer the same way
    let delivered = env.wait_for_sink(1, Duration::from_secs(30)).await;
    assert_eq!(delivered[0].event_id(), drained);
    let event: outbox_consumer::Envelope<Value> =
        resolver.decode(&delivered[0].event).await.unwrap();
    assert_eq!(event.data, imported("u-5", "o-drained", 100_000).payload);

    // And the relays published the writer's references without reading or writing an object
    // (each looked at with a HeadObject)
    assert_eq!(s3_calls(&proxy, "PutObject"), 0);
    assert_eq!(s3_calls(&proxy, "GetObject"), 0);
    assert_eq!(env.object_keys(&bucket).await.len(), 2);

    // When a create of an order that exists stores its payload, then fails its transaction
    let failed = import_order(&env, &writer, "u-5", "o-drained", 100_000).await;
    assert!(
        matches!(failed, Err(outbox_writer::WriteError::AlreadyExists { .. })),
        "{failed:?}"
    );
    assert_eq!(env.object_keys(&bucket).await.len(), 3, "the orphan");

    // Then no relay publishes the orphan: nothing names it
    let (succeeded, summary) = run_relay(&env, &proxy, &bucket, Relay::Drain).await;
    assert!(succeeded, "{summary}");
    assert_eq!(summary["published"], 0, "{summary}");
    assert_eq!(env.sink_depth().await, 0);
}

/// The current version of each object under `payloads/` in `bucket`: `(key, version id)`.
async fn current_payload_versions(env: &TestEnv, bucket: &str) -> Vec<(String, String)> {
    let versions = env
        .s3
        .list_object_versions()
        .bucket(bucket)
        .prefix(outbox_shared::claim_check::KEY_PREFIX)
        .send()
        .await
        .expect("list object versions");
    versions
        .versions()
        .iter()
        .filter(|v| v.is_latest() == Some(true))
        .filter_map(|v| Some((v.key()?.to_owned(), v.version_id()?.to_owned())))
        .collect()
}

/// What the payload bucket's lifecycle rule (`ExpirePayloads`, template) does to the objects
/// `stored` names once they are older than `PayloadRetentionDays`: each still as it was then
/// (the same current version) expires (a delete marker, as S3's expiration in a versioned
/// bucket); one written again since counts its age from then and stays.
async fn expire_as_the_lifecycle_would(env: &TestEnv, bucket: &str, stored: &[(String, String)]) {
    let now = current_payload_versions(env, bucket).await;
    for (key, version) in stored {
        if now.contains(&(key.clone(), version.clone())) {
            env.s3
                .delete_object()
                .bucket(bucket)
                .key(key)
                .send()
                .await
                .expect("expire an object");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_writer_stored_payload_gone_at_publish_is_dead_lettered_naming_its_object() {
    // Given a large event the writer stored in the bucket, whose object is gone (expired or
    // deleted) before any relay published it
    let env = TestEnv::new().await;
    let bucket = env.create_payload_bucket().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 3).await;
    let writer = env.writer_with(|c| c.payload_bucket = Some(bucket.clone()));
    let event_id = import_order(&env, &writer, "u-gone", "o-gone", 10_000)
        .await
        .expect("the order is written");
    let key = object_key(&event_id);
    env.s3
        .delete_object()
        .bucket(&bucket)
        .key(&key)
        .send()
        .await
        .expect("delete the object");

    // When the poller drains the outbox
    let (succeeded, summary) = run_relay(&env, &proxy, &bucket, Relay::Drain).await;

    // Then the event is not published: it is dead-lettered, the reason naming the object
    assert!(succeeded, "{summary}");
    assert_eq!(summary["published"], 0, "{summary}");
    assert_eq!(
        env.sink_depth().await,
        0,
        "a reference to nothing was published"
    );
    let letters = env.drain_dead_letters().await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    let uri = format!("s3://{bucket}/{key}");
    assert!(letters[0].reason.contains(&uri), "{}", letters[0].reason);
    assert!(letters[0].reason.contains("gone"), "{}", letters[0].reason);
    let items = env.outbox_items().await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].status, outbox_shared::OutboxStatus::DeadLettered);
}

#[tokio::test(flavor = "multi_thread")]
async fn two_events_with_one_id_and_different_payloads_never_publish_a_mismatching_reference() {
    // Given two large events of two clients with one event id and different payloads
    let env = TestEnv::new().await;
    let bucket = env.create_payload_bucket().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 4).await;
    let first = json!({"orderId": "o-first", "lines": "a".repeat(300 * 1000)}).to_string();
    let second = json!({"orderId": "o-second", "lines": "b".repeat(300 * 1000)}).to_string();
    put_event(&env, "u-first", "e-twice", "o-first", 1, &first).await;
    put_event(&env, "u-second", "e-twice", "o-second", 2, &second).await;

    // When the poller drains the outbox
    let (succeeded, summary) = run_relay(&env, &proxy, &bucket, Relay::Drain).await;

    // Then one is delivered with a reference to its own payload, and the other, whose key holds
    // the first's payload, is dead-lettered saying so: no consumer meets a mismatch
    assert!(succeeded, "{summary}");
    let delivered = env.wait_for_sink(1, Duration::from_secs(30)).await;
    assert_eq!(delivered.len(), 1, "{summary}");
    let data = env.payload_of(&delivered[0]).await;
    let letters = env.drain_dead_letters().await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    let (published, dead_lettered) = if data["orderId"] == "o-first" {
        (&first, "u-second")
    } else {
        (&second, "u-first")
    };
    assert_eq!(data, serde_json::from_str::<Value>(published).unwrap());
    let reason = &letters[0].reason;
    assert!(reason.contains("already holds another payload"), "{reason}");
    assert!(
        reason.contains(&format!("s3://{bucket}/{}", object_key("e-twice"))),
        "{reason}"
    );
    assert_eq!(
        letters[0].key.as_ref().map(|k| k.pk.clone()),
        Some(schema::user_pk(dead_lettered))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pending_large_event_older_than_the_payload_retention_is_delivered_with_its_payload() {
    // Given a large event the writer stored in the bucket, pending so long its item's ttl is
    // within the poller's refresh margin (the poller pushed it out all along; a ttl in the past
    // DynamoDB Local would act on) and its object as old as the payload retention
    let env = TestEnv::new().await;
    let bucket = env.create_payload_bucket().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 5).await;
    let writer = env.writer_with(|c| c.payload_bucket = Some(bucket.clone()));
    let event_id = import_order(&env, &writer, "u-old", "o-old", 10_000)
        .await
        .expect("the order is written");
    env.dynamodb
        .update_item()
        .table_name(&env.table_name)
        .key(attr::PK, AttributeValue::S(schema::user_pk("u-old")))
        .key(attr::SK, AttributeValue::S(schema::outbox_sk(&event_id)))
        .update_expression("SET #ttl = :soon")
        .expression_attribute_names("#ttl", attr::TTL)
        .expression_attribute_values(
            ":soon",
            AttributeValue::N((chrono::Utc::now().timestamp() + 3600).to_string()),
        )
        .send()
        .await
        .expect("age the item");
    let stored = current_payload_versions(&env, &bucket).await;
    assert_eq!(stored.len(), 1);

    // When the poller drains the outbox, and the bucket's lifecycle then expires what is past
    // the retention
    let (succeeded, summary) = run_relay(&env, &proxy, &bucket, Relay::Drain).await;
    expire_as_the_lifecycle_would(&env, &bucket, &stored).await;

    // Then the event is delivered, and its consumer reads its payload back, checked
    assert!(succeeded, "{summary}");
    let delivered = env.wait_for_sink(1, Duration::from_secs(30)).await;
    assert_eq!(delivered.len(), 1, "{summary}");
    assert_eq!(
        env.payload_of(&delivered[0]).await,
        imported("u-old", "o-old", 10_000).payload
    );
}

/// The stack's account, as the template gives it to every job (`EXPECTED_BUCKET_OWNER`).
const STACK_ACCOUNT: &str = "123456789012";

#[tokio::test(flavor = "multi_thread")]
async fn a_payload_bucket_of_another_account_is_refused_not_written_to() {
    // Given a 300 KB event, and its payload bucket now another account's (deleted and re-created
    // under its name: S3 answers a call naming another owner 403)
    let env = TestEnv::new().await;
    let bucket = env.create_payload_bucket().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 7).await;
    proxy.buckets_owned_by("999999999999");
    let payload = order_payload(300 * 1000);
    put_event(&env, "u-owner", "e-owner-1", "o-owner", 1, &payload).await;

    // When the poller publishes it, the stack's account its expected bucket owner
    let owner = [("EXPECTED_BUCKET_OWNER", STACK_ACCOUNT)];
    let output = env
        .relay_command("relay-poller")
        .args(["drain", "--shard-count", "1", "--max-stalled-passes", "1"])
        .env("PAYLOAD_BUCKET", &bucket)
        .envs(owner)
        .envs(proxy.endpoint_env())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .await
        .expect("relay-poller runs");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    // Then the bucket was refused (its probe at start, or the payload's PutObject): nothing
    // written to it, the event not published
    let refused = proxy.counts_for("AmazonS3.ListObjectsV2").failed_calls
        + proxy.counts_for("AmazonS3.PutObject").failed_calls;
    assert!(refused >= 1, "{said}");
    assert_eq!(
        proxy.counts_for("AmazonS3.PutObject").passed_calls,
        0,
        "{said}"
    );
    assert_eq!(
        env.object_keys(&bucket).await,
        Vec::<String>::new(),
        "{said}"
    );
    let item = &env.outbox_items().await[0];
    assert_ne!(
        item.status,
        outbox_shared::OutboxStatus::Published,
        "{said}"
    );
    assert!(said.contains("AccessDenied"), "{said}");

    // And every S3 call named the owner
    assert_eq!(proxy.s3_calls_without_owner(), Vec::<String>::new());

    // When the bucket is the stack's account's again, and the poller runs again
    proxy.buckets_owned_by(STACK_ACCOUNT);
    env.put_raw_item({
        let created_at = "2026-11-27T00:00:02.000Z";
        let mut item = minimal_outbox_item(
            "u-owner",
            "e-owner-2",
            "OrderCreated",
            &payload,
            created_at,
            0,
        );
        item.insert(
            attr::AGGREGATE_ID.to_owned(),
            AttributeValue::S("o-owner-2".to_owned()),
        );
        item
    })
    .await;
    let (succeeded, summary) = run_relay_with(&env, &proxy, &bucket, Relay::Drain, &owner).await;

    // Then its payload is stored, the call naming the owner
    assert!(succeeded, "{summary}");
    assert!(
        env.object_keys(&bucket)
            .await
            .contains(&object_key("e-owner-2")),
        "{summary}"
    );
    assert_eq!(proxy.s3_calls_without_owner(), Vec::<String>::new());
}

#[tokio::test]
async fn the_writer_refuses_a_payload_bucket_of_another_account() {
    use outbox_writer::{OutboxWriter, WriterConfig};
    // Given a writer storing large payloads, the stack's account its expected bucket owner, its
    // S3 calls through a proxy where the bucket is now another account's
    let env = TestEnv::new().await;
    let bucket = env.create_payload_bucket().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 8).await;
    proxy.buckets_owned_by("999999999999");
    let mut config = WriterConfig::new(env.outbox_config(), outbox_tests::TEST_SOURCE);
    config.payload_bucket = Some(bucket.clone());
    config.expected_bucket_owner =
        Some(outbox_shared::bucket_owner::ExpectedBucketOwner::new(STACK_ACCOUNT).unwrap());
    let writer = OutboxWriter::with_s3(env.dynamodb.clone(), env.s3_through(&proxy), config)
        .expect("a valid writer");

    // When it writes an order whose payload is larger than an item
    let err = import_order(&env, &writer, "u-owner", "o-owner", 100_000)
        .await
        .expect_err("the bucket is another account's");

    // Then it is refused, naming S3's refusal; nothing is stored, every call named the owner
    assert!(err.to_string().contains("AccessDenied"), "{err}");
    assert_eq!(env.object_keys(&bucket).await, Vec::<String>::new());
    assert_eq!(proxy.s3_calls_without_owner(), Vec::<String>::new());
    assert!(env.outbox_items().await.is_empty());
}
