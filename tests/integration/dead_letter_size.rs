//! A dead letter larger than its queue's `MaximumMessageSize`: AWS refuses it, so before anything
//! else the relays must send what fits. An item of up to 400 KB can be too large for EventBridge
//! (poison) and its whole record too large for a queue at SQS's former default of 256 KiB; the
//! relays then send the letter without the record (the item in the table, `DEAD_LETTERED`, holds
//! it), mark the item, and `redrive` puts it back from the table. With a payload bucket the record
//! is kept there (`dead-letters/`, on moto's S3) and the letter names it, so `redrive` restores
//! the event from the letter even once the item is gone. An event whose item DynamoDB Local's TTL
//! deleted (the stream relay reads it from the `REMOVE` record) has no item to hold it: the relay
//! puts the item back `DEAD_LETTERED` before the letter without its record goes, and `redrive`
//! restores it from there.
//!
//! The queue's limit is AWS's as the fault proxy enforces it: moto checks `MaximumMessageSize` by
//! the body's characters and no message attributes, so the payload here is multi-byte (300,000
//! bytes in 100,000 characters): moto alone would take the whole letter, AWS does not.

use std::process::Stdio;
use std::time::Duration;

use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::QueueAttributeName;
use chrono::Utc;
use outbox_shared::claim_check::{PayloadStore, sha256_base64};
use outbox_shared::schema::attr;
use outbox_shared::time::format_timestamp;
use outbox_shared::{OutboxStatus, ShardCount};
use outbox_tests::fault_proxy::{FaultProxy, FaultRates};
use outbox_tests::{TestEnv, emulator_endpoints, minimal_outbox_item, unique_name};
use serde_json::Value;

/// SQS's default `MaximumMessageSize` before 2025 (256 KiB), the queue the letters must fit in.
const QUEUE_LIMIT: usize = 262_144;

/// Characters of the payload's one string: 3 bytes each in UTF-8 (300,000 bytes), so the item
/// (under DynamoDB's 400 KB) is too large for an EventBridge entry of 256 KiB and its record for
/// the queue.
const PAYLOAD_CHARS: usize = 100_000;

/// What a relay binary did: its exit code, stdout and stderr.
pub(crate) struct Run {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

impl Run {
    /// The one JSON line on stdout.
    pub(crate) fn summary(&self) -> Value {
        serde_json::from_str(self.stdout.trim())
            .unwrap_or_else(|e| panic!("summary {:?}: {e}\n{}", self.stdout, self.stderr))
    }
}

/// Runs a relay binary with `args` and `env`'s variables, with the dead-letter queue at
/// `dead_letter_queue_url` and its AWS calls through `proxy` (when given).
pub(crate) async fn run(
    env: &TestEnv,
    proxy: Option<&FaultProxy>,
    dead_letter_queue_url: &str,
    bin: &str,
    args: &[&str],
) -> Run {
    let mut command = env.relay_command(bin);
    if let Some(proxy) = proxy {
        command.envs(proxy.endpoint_env());
    }
    let output = command
        .args(args)
        .env("DEAD_LETTER_QUEUE_URL", dead_letter_queue_url)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(120), output)
        .await
        .unwrap_or_else(|_| panic!("{bin} finishes"))
        .unwrap_or_else(|e| panic!("{bin} runs: {e}"));
    Run {
        code: output.status.code(),
        stdout: String::from_utf8(output.stdout).expect("utf-8 stdout"),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// A dead-letter queue that takes messages of at most [`QUEUE_LIMIT`] bytes.
async fn small_queue(env: &TestEnv) -> String {
    env.sqs
        .create_queue()
        .queue_name(unique_name("dlq-256k"))
        .attributes(
            QueueAttributeName::MaximumMessageSize,
            QUEUE_LIMIT.to_string(),
        )
        .send()
        .await
        .expect("create queue")
        .queue_url()
        .expect("queue url")
        .to_owned()
}

/// Puts a pending event whose payload is [`PAYLOAD_CHARS`] three-byte characters, as another
/// client would (the writer refuses an event too large for EventBridge).
async fn put_large_event(env: &TestEnv, event_id: &str) {
    let payload = serde_json::json!({"note": "€".repeat(PAYLOAD_CHARS)}).to_string();
    let created_at = format_timestamp(Utc::now() - chrono::Duration::minutes(5));
    let shard = outbox_shared::shard_for(event_id, ShardCount::default());
    env.put_raw_item(minimal_outbox_item(
        "large-payloads",
        event_id,
        "DocumentAttached",
        &payload,
        &created_at,
        shard,
    ))
    .await;
}

/// The dead letters on a queue as JSON, left there (received and made visible again at once).
async fn letters_on(env: &TestEnv, queue_url: &str) -> Vec<Value> {
    let received = env
        .sqs
        .receive_message()
        .queue_url(queue_url)
        .max_number_of_messages(10)
        .visibility_timeout(0)
        .send()
        .await
        .expect("receive message");
    received
        .messages()
        .iter()
        .map(|m| serde_json::from_str(m.body().expect("body")).expect("a dead letter"))
        .collect()
}

async fn status_of(env: &TestEnv, event_id: &str) -> Option<OutboxStatus> {
    env.outbox_items()
        .await
        .into_iter()
        .find(|item| item.event_id == event_id)
        .map(|item| item.status)
}

/// Asserts `letter` is a letter without its record about `event_id`, from `origin`.
fn assert_without_record(letter: &Value, event_id: &str, origin: &str) {
    assert_eq!(letter["eventId"], event_id, "{letter}");
    assert_eq!(letter["origin"], origin, "{letter}");
    let reason = letter["reason"].as_str().expect("a reason");
    assert!(reason.contains("EntryTooLarge"), "{reason}");
    assert_eq!(
        letter["key"]["sk"],
        format!("OUTBOX#{event_id}"),
        "{letter}"
    );
    assert_eq!(letter["record"], Value::Null, "the record is left out");
    let left_out = &letter["recordLeftOut"];
    assert_eq!(left_out["maxMessageBytes"], QUEUE_LIMIT, "{letter}");
    let letter_bytes = left_out["letterBytes"].as_u64().expect("the letter's size");
    assert!(letter_bytes > QUEUE_LIMIT as u64, "{letter}");
    let note = left_out["note"].as_str().expect("a note");
    assert!(note.contains("DEAD_LETTERED"), "{note}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_drained_dead_letter_too_large_for_its_queue_goes_without_its_record_and_redrive_puts_the_item_back()
 {
    // Given two pending events of 300 KB each (too large for an EventBridge entry), a dead-letter
    // queue of 256 KiB, and AWS's count of message sizes in front of the emulator
    let env = TestEnv::new().await;
    let queue = small_queue(&env).await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 1).await;
    put_large_event(&env, "large-kept").await;
    put_large_event(&env, "large-expired").await;

    // When the poller drains the table
    let drain = run(&env, Some(&proxy), &queue, "relay-poller", &["drain"]).await;

    // Then it finishes (exit 0): both events were dead-lettered, none failed
    let summary = drain.summary();
    assert_eq!(drain.code, Some(0), "{summary}\n{}", drain.stderr);
    assert_eq!(summary["dead_lettered"], 2, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(proxy.counts().oversized_messages, 0, "every letter fit");

    // And the queue holds their letters without the records, each saying where the record is
    let mut letters = letters_on(&env, &queue).await;
    letters.sort_by_key(|l| l["eventId"].as_str().map(str::to_owned));
    assert_eq!(letters.len(), 2, "{letters:?}");
    assert_without_record(&letters[0], "large-expired", "relay-poller");
    assert_without_record(&letters[1], "large-kept", "relay-poller");

    // And the items hold the records: dead-lettered, out of the index, kept past the queue's
    // retention
    assert_eq!(env.pending_in_index().await, 0);
    for item in env.outbox_items().await {
        assert_eq!(item.status, OutboxStatus::DeadLettered, "{}", item.event_id);
        assert_eq!(item.payload.chars().count(), PAYLOAD_CHARS + 11);
        let days = (item.ttl.expect("a ttl") - Utc::now().timestamp()) as f64 / 86_400.0;
        assert!((14.9..=15.0).contains(&days), "{days}");
    }
    assert_eq!(env.queue_depth(&env.sink_queue_url).await, 0);

    // When one item expires, and the redrive runs once the bus takes 1 MiB entries
    let expired = &letters[0]["key"];
    env.dynamodb
        .delete_item()
        .table_name(&env.table_name)
        .key(
            attr::PK,
            AttributeValue::S(expired["pk"].as_str().unwrap().to_owned()),
        )
        .key(
            attr::SK,
            AttributeValue::S(expired["sk"].as_str().unwrap().to_owned()),
        )
        .send()
        .await
        .expect("delete item");
    let wide = [
        "--max-entry-bytes",
        "1048576",
        "--max-request-bytes",
        "1048576",
    ];
    let redrive = run(
        &env,
        None,
        &queue,
        "relay-poller",
        &[&["redrive"][..], &wide].concat(),
    )
    .await;

    // Then the kept one is put back from the table and published whole
    let summary = redrive.summary();
    assert_eq!(redrive.code, Some(0), "{summary}\n{}", redrive.stderr);
    assert_eq!(summary["redriven"], 1, "{summary}");
    assert_eq!(summary["recreated"], 0, "{summary}");
    assert_eq!(summary["published"], 1, "{summary}");
    assert_eq!(
        status_of(&env, "large-kept").await,
        Some(OutboxStatus::Published)
    );
    let delivered = env.wait_for_sink(1, Duration::from_secs(30)).await;
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].event_id(), "large-kept");
    let note = delivered[0].envelope.data["note"]
        .as_str()
        .expect("the payload");
    assert_eq!(note.chars().count(), PAYLOAD_CHARS);

    // And the expired one's letter stays in the queue, with a line saying why
    assert_eq!(summary["left_in_queue"], 1, "{summary}");
    let remaining = letters_on(&env, &queue).await;
    assert_eq!(remaining.len(), 1, "{remaining:?}");
    assert_eq!(remaining[0]["eventId"], "large-expired");
    let why = redrive
        .stderr
        .lines()
        .find(|line| line.contains("large-expired"))
        .unwrap_or_else(|| panic!("no line about large-expired:\n{}", redrive.stderr));
    assert!(why.contains("without its record"), "{why}");
    assert!(why.contains("gone"), "{why}");

    // And a second redrive still leaves it there
    let again = run(&env, None, &queue, "relay-poller", &["redrive"]).await;
    assert_eq!(again.summary()["left_in_queue"], 1, "{}", again.stdout);
    assert_eq!(env.queue_depth(&queue).await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_dead_letter_too_large_for_its_queue_goes_without_its_record() {
    // Given a pending event of 300 KB on the table's stream, a dead-letter queue of 256 KiB, and
    // AWS's count of message sizes in front of the emulator
    let env = TestEnv::new().await;
    let queue = small_queue(&env).await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 2).await;
    put_large_event(&env, "large-streamed").await;

    // When the stream relay reads the stream (one delivery, no re-delivery)
    let relay = run(
        &env,
        Some(&proxy),
        &queue,
        "relay-stream-local",
        &[
            "--from",
            "trim-horizon",
            "--exit-when-idle",
            "1s",
            "--max-retries",
            "0",
        ],
    )
    .await;

    // Then it dead-lettered the event without its record, and marked the item
    let summary = relay.summary();
    assert_eq!(relay.code, Some(0), "{summary}\n{}", relay.stderr);
    assert_eq!(summary["dead_lettered"], 1, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(proxy.counts().oversized_messages, 0, "the letter fit");
    let letters = letters_on(&env, &queue).await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_without_record(&letters[0], "large-streamed", "relay-stream");
    assert_eq!(
        status_of(&env, "large-streamed").await,
        Some(OutboxStatus::DeadLettered)
    );

    // When the redrive puts it back without publishing
    let redrive = run(
        &env,
        None,
        &queue,
        "relay-poller",
        &["redrive", "--publish", "false"],
    )
    .await;

    // Then the item is pending again, in the index, and its letter is done
    let summary = redrive.summary();
    assert_eq!(summary["redriven"], 1, "{summary}\n{}", redrive.stderr);
    assert_eq!(summary["left_in_queue"], 0, "{summary}");
    assert_eq!(
        status_of(&env, "large-streamed").await,
        Some(OutboxStatus::Pending)
    );
    assert_eq!(env.pending_in_index().await, 1);
    assert_eq!(env.queue_depth(&queue).await, 0);
}

/// A payload bucket on the emulator (moto's S3), for the records of letters too large.
async fn payload_bucket(env: &TestEnv) -> String {
    let bucket = unique_name("payloads");
    env.s3
        .create_bucket()
        .bucket(&bucket)
        .send()
        .await
        .expect("create bucket");
    bucket
}

/// Drains the table in this process with a dead-letter sink that keeps the records of letters too
/// large for `queue` in `bucket`, its SQS calls through `proxy` (AWS's count of message sizes).
async fn drain_with_record_bucket(
    env: &TestEnv,
    proxy: &FaultProxy,
    queue: &str,
    bucket: &str,
) -> relay_poller::DrainSummary {
    let cli = <relay_poller::Cli as clap::Parser>::try_parse_from([
        "relay-poller",
        "drain",
        "--table-name",
        &env.table_name,
        "--event-bus-name",
        &env.bus_name,
        "--source",
        outbox_tests::TEST_SOURCE,
        "--dead-letter-queue-url",
        queue,
    ])
    .expect("drain flags");
    let relay_poller::Command::Drain(drain) = cli.command else {
        panic!("a drain")
    };
    let config = drain.relay.validate().expect("valid settings");
    let sqs = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(&env.sdk_config)
            .endpoint_url(proxy.url())
            .build(),
    );
    let dead_letters = relay_runtime::SqsDeadLetterSink::new(sqs, queue)
        .with_record_bucket(PayloadStore::new(env.s3.clone(), bucket));
    let poller = relay_poller::aws::aws_poller_with_dead_letters(
        env.dynamodb.clone(),
        env.publisher(config.publisher.clone()),
        dead_letters,
        &config,
    )
    .expect("poller");
    poller
        .drain(
            &poller.partitions().fixed(),
            Duration::ZERO,
            3,
            &relay_poller::CancellationToken::new(),
        )
        .await
}

/// Asserts `letter` is a letter about `event_id` naming its record in `bucket` (not carrying it,
/// not leaving it out), and that the object there is that record, as large and with the SHA-256
/// the letter says. The object's key.
async fn assert_record_in_bucket(
    env: &TestEnv,
    letter: &Value,
    event_id: &str,
    bucket: &str,
) -> String {
    assert_eq!(letter["eventId"], event_id, "{letter}");
    assert_eq!(letter["origin"], "relay-poller", "{letter}");
    let reason = letter["reason"].as_str().expect("a reason");
    assert!(reason.contains("EntryTooLarge"), "{reason}");
    assert_eq!(letter["record"], Value::Null, "the record is in the bucket");
    assert!(letter.get("recordLeftOut").is_none(), "{letter}");
    let named = &letter["recordRef"];
    assert_eq!(named["maxMessageBytes"], QUEUE_LIMIT, "{letter}");
    assert!(named["letterBytes"].as_u64().expect("a size") > QUEUE_LIMIT as u64);
    let uri = named["uri"].as_str().expect("a URI");
    let prefix = format!("s3://{bucket}/dead-letters/{event_id}/");
    assert!(uri.starts_with(&prefix), "{uri}");
    let key = uri[format!("s3://{bucket}/").len()..].to_owned();
    let object = env.object(bucket, &key).await;
    assert_eq!(named["size"], object.len(), "{letter}");
    assert_eq!(named["sha256"], sha256_base64(&object), "{letter}");
    let record: Value = serde_json::from_slice(&object).expect("the record is JSON");
    assert_eq!(
        record["EventId"], event_id,
        "the item as the poller read it"
    );
    let payload = record["Payload"].as_str().expect("its payload");
    assert_eq!(payload.chars().count(), PAYLOAD_CHARS + 11);
    key
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_payload_bucket_a_dead_letter_too_large_for_its_queue_keeps_its_record_there_and_redrive_restores_the_gone_item_from_it()
 {
    // Given two pending events of 300 KB each (too large for an EventBridge entry), a dead-letter
    // queue of 256 KiB behind AWS's count of message sizes, and a payload bucket
    let env = TestEnv::new().await;
    let queue = small_queue(&env).await;
    let bucket = payload_bucket(&env).await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 3).await;
    put_large_event(&env, "large-restored").await;
    put_large_event(&env, "large-lapsed").await;

    // When the poller drains the table, keeping the records of letters too large in the bucket
    let summary = drain_with_record_bucket(&env, &proxy, &queue, &bucket).await;

    // Then both events were dead-lettered, none failed, and every letter fit
    assert_eq!(summary.dead_lettered, 2, "{summary:?}");
    assert_eq!(summary.failed, 0, "{summary:?}");
    assert!(summary.complete, "{summary:?}");
    assert_eq!(proxy.counts().oversized_messages, 0, "every letter fit");

    // And each letter names its record in the bucket, one object each, under dead-letters/
    let mut letters = letters_on(&env, &queue).await;
    letters.sort_by_key(|l| l["eventId"].as_str().map(str::to_owned));
    assert_eq!(letters.len(), 2, "{letters:?}");
    let lapsed_key = assert_record_in_bucket(&env, &letters[0], "large-lapsed", &bucket).await;
    assert_record_in_bucket(&env, &letters[1], "large-restored", &bucket).await;
    assert_eq!(env.object_keys(&bucket).await.len(), 2);

    // And the items are dead-lettered and out of the index, as without a bucket
    assert_eq!(env.pending_in_index().await, 0);
    for item in env.outbox_items().await {
        assert_eq!(item.status, OutboxStatus::DeadLettered, "{}", item.event_id);
    }

    // When both items expire, one record's object expires from the bucket too, and the redrive
    // runs once the bus takes 1 MiB entries
    for letter in &letters {
        let key = &letter["key"];
        env.dynamodb
            .delete_item()
            .table_name(&env.table_name)
            .key(
                attr::PK,
                AttributeValue::S(key["pk"].as_str().unwrap().to_owned()),
            )
            .key(
                attr::SK,
                AttributeValue::S(key["sk"].as_str().unwrap().to_owned()),
            )
            .send()
            .await
            .expect("delete item");
    }
    env.s3
        .delete_object()
        .bucket(&bucket)
        .key(&lapsed_key)
        .send()
        .await
        .expect("delete object");
    let redrive = run(
        &env,
        None,
        &queue,
        "relay-poller",
        &[
            "redrive",
            "--max-entry-bytes",
            "1048576",
            "--max-request-bytes",
            "1048576",
        ],
    )
    .await;

    // Then the event whose record is in the bucket is re-created from it and published whole
    let summary = redrive.summary();
    assert_eq!(redrive.code, Some(0), "{summary}\n{}", redrive.stderr);
    assert_eq!(summary["redriven"], 1, "{summary}");
    assert_eq!(summary["recreated"], 1, "{summary}");
    assert_eq!(summary["published"], 1, "{summary}");
    assert_eq!(
        status_of(&env, "large-restored").await,
        Some(OutboxStatus::Published)
    );
    let delivered = env.wait_for_sink(1, Duration::from_secs(30)).await;
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].event_id(), "large-restored");
    let note = delivered[0].envelope.data["note"]
        .as_str()
        .expect("the payload");
    assert_eq!(note, "€".repeat(PAYLOAD_CHARS));

    // And the other's letter stays in the queue, with a line naming its object and saying it is
    // gone
    assert_eq!(summary["left_in_queue"], 1, "{summary}");
    assert_eq!(status_of(&env, "large-lapsed").await, None);
    let remaining = letters_on(&env, &queue).await;
    assert_eq!(remaining.len(), 1, "{remaining:?}");
    assert_eq!(remaining[0]["eventId"], "large-lapsed");
    let why = redrive
        .stderr
        .lines()
        .find(|line| line.contains("large-lapsed") && line.contains("left in the queue"))
        .unwrap_or_else(|| panic!("no line about large-lapsed:\n{}", redrive.stderr));
    assert!(why.contains(&lapsed_key), "{why}");
    assert!(why.contains("is gone"), "{why}");
}

/// Puts a small pending event `event_id` (it fits any entry and any letter).
async fn put_small_event(env: &TestEnv, event_id: &str) {
    let created_at = format_timestamp(Utc::now());
    let shard = outbox_shared::shard_for(event_id, ShardCount::default());
    env.put_raw_item(minimal_outbox_item(
        "canaries",
        event_id,
        "CanarySent",
        "{}",
        &created_at,
        shard,
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_ttl_deleted_events_dead_letter_too_large_for_its_queue_leaves_its_item_re_created_and_redrive_restores_it()
 {
    // Given a pending event of 300 KB (too large for an EventBridge entry) whose INSERT the
    // stream relay never sees (it reads from LATEST, as after the stream's 24 h), a dead-letter
    // queue of 256 KiB behind AWS's count of message sizes, and no payload bucket
    let env = TestEnv::new().await;
    let queue = small_queue(&env).await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 4).await;
    put_large_event(&env, "large-ttl-deleted").await;
    let relay = env
        .relay_command("relay-stream-local")
        .envs(proxy.endpoint_env())
        .args(["--from", "latest", "--max-retries", "0"])
        .env("DEAD_LETTER_QUEUE_URL", &queue)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("relay-stream-local starts");
    // It reads past LATEST once an event written now arrives on the bus
    let mut canaries = 0;
    while env.sink_depth().await == 0 {
        assert!(canaries < 10, "relay-stream-local published no new event");
        put_small_event(&env, &format!("canary-{canaries}")).await;
        canaries += 1;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    env.drain_sink().await;

    // When DynamoDB's TTL deletes the pending item for real (its ttl set in the past), and the
    // relay has handled its REMOVE
    crate::discarded_batches::expire(&env, "large-ttl-deleted").await;
    let started = std::time::Instant::now();
    while env.queue_depth(&queue).await == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no dead letter for the REMOVE"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let pid = relay.id().expect("running").to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let output = tokio::time::timeout(Duration::from_secs(60), relay.wait_with_output())
        .await
        .expect("relay-stream-local stops on SIGTERM")
        .expect("relay-stream-local exits");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("summary {stdout:?}: {e}\n{stderr}"));

    // Then the relay dead-lettered the event, without its record (the letter fit), and failed
    // none
    assert!(output.status.success(), "{summary}\n{stderr}");
    assert_eq!(summary["dead_lettered"], 1, "{summary}\n{stderr}");
    assert_eq!(summary["failed"], 0, "{summary}\n{stderr}");
    assert_eq!(proxy.counts().oversized_messages, 0, "the letter fit");
    let letters = letters_on(&env, &queue).await;
    assert_eq!(letters.len(), 1, "{letters:?}");
    assert_without_record(&letters[0], "large-ttl-deleted", "relay-stream");
    // And it called only what its role grants, the put of the item back among them
    let granted = relay_stream::permissions::calls(relay_runtime::TargetKind::Classic);
    assert_eq!(
        crate::role_calls::called_without_permission(
            &proxy,
            &granted,
            crate::role_calls::STREAM_READER
        ),
        Vec::<String>::new()
    );
    assert!(
        proxy.targets().contains("DynamoDB_20120810.PutItem"),
        "{:?}",
        proxy.targets()
    );

    // And the letter's word holds: the item it names is back in the table, re-created from the
    // REMOVE's old image as DEAD_LETTERED (its payload whole), out of the index, kept past the
    // queue's retention
    let items: Vec<_> = env
        .outbox_items()
        .await
        .into_iter()
        .filter(|item| item.event_id == "large-ttl-deleted")
        .collect();
    assert_eq!(
        items.len(),
        1,
        "the TTL-deleted item is not back in the table: the letter names an item that is not \
         there, so nothing holds the event"
    );
    let item = &items[0];
    assert_eq!(item.status, OutboxStatus::DeadLettered);
    assert_eq!(
        (item.pk.as_str(), item.sk.as_str()),
        (
            letters[0]["key"]["pk"].as_str().unwrap(),
            letters[0]["key"]["sk"].as_str().unwrap()
        )
    );
    assert_eq!(item.payload.chars().count(), PAYLOAD_CHARS + 11);
    let days = (item.ttl.expect("a ttl") - Utc::now().timestamp()) as f64 / 86_400.0;
    assert!((14.9..=15.0).contains(&days), "{days}");
    // (a canary written before the relay took its iterator may still be pending: not this one)
    assert_eq!(item.gsi1pk, None, "out of the pending index");
    assert_eq!(item.gsi1sk, None, "out of the pending index");

    // When the redrive runs once the bus takes 1 MiB entries
    let redrive = run(
        &env,
        None,
        &queue,
        "relay-poller",
        &[
            "redrive",
            "--max-entry-bytes",
            "1048576",
            "--max-request-bytes",
            "1048576",
        ],
    )
    .await;

    // Then the event is put back from the table and published whole, and its letter is done
    let summary = redrive.summary();
    assert_eq!(redrive.code, Some(0), "{summary}\n{}", redrive.stderr);
    assert_eq!(summary["redriven"], 1, "{summary}");
    assert_eq!(summary["recreated"], 0, "{summary}");
    assert_eq!(summary["left_in_queue"], 0, "{summary}");
    assert_eq!(summary["published"], 1, "{summary}");
    assert_eq!(
        status_of(&env, "large-ttl-deleted").await,
        Some(OutboxStatus::Published)
    );
    let delivered = env.wait_for_sink(1, Duration::from_secs(30)).await;
    assert_eq!(delivered.len(), 1);
    assert_eq!(delivered[0].event_id(), "large-ttl-deleted");
    let note = delivered[0].envelope.data["note"]
        .as_str()
        .expect("the payload");
    assert_eq!(note, "€".repeat(PAYLOAD_CHARS));
    assert_eq!(env.queue_depth(&queue).await, 0);
}
