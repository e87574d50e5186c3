//! Targets that are not what the settings say (issue 41, item 4), on the emulators: an SNS topic
//! of another region stops both relays at start-up with one line, fails `check`'s target item,
//! and dead-letters nothing; an
//! SQS queue whose `MaximumMessageSize` is below the entry setting bounds the entry budget, read
//! at start and shown by `check`, and the events above it go through the claim check instead of
//! the dead-letter queue. The relays' real binaries run; nothing of them is mocked.

use std::process::Stdio;

use aws_sdk_sqs::types::QueueAttributeName;
use outbox_shared::OutboxStatus;
use outbox_tests::{TestEnv, minimal_outbox_item};
use relay_runtime::TargetKind;
use serde_json::{Value, json};

/// The region the relays call (the environment's).
const RELAY_REGION: &str = "us-east-1";

/// Another region, where the topic is.
const TOPIC_REGION: &str = "us-west-2";

/// Writes a pending event as another client would: `payload` inline, in `user`'s collection.
async fn put_event(env: &TestEnv, user: &str, event_id: &str, payload: &str) {
    let created_at = "2026-11-27T00:00:01.000Z";
    env.put_raw_item(minimal_outbox_item(
        user,
        event_id,
        "OrderCreated",
        payload,
        created_at,
        0,
    ))
    .await;
}

/// A relay binary's exit code and the last line it wrote on stderr.
async fn exit_and_last_line(mut command: tokio::process::Command) -> (Option<i32>, String) {
    let output = command
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output()
        .await
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    (
        output.status.code(),
        stderr.lines().last().unwrap_or_default().to_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn an_sns_topic_of_another_region_stops_both_relays_at_start_up_and_nothing_is_dead_lettered()
{
    // Given a topic created in us-west-2, relays configured in us-east-1, and a pending event
    let env = TestEnv::new().await;
    let sns_west = aws_sdk_sns::Client::from_conf(
        aws_sdk_sns::config::Builder::from(&env.sdk_config)
            .region(aws_sdk_sns::config::Region::new(TOPIC_REGION))
            .build(),
    );
    let topic = sns_west
        .create_topic()
        .name(outbox_tests::unique_name("west"))
        .send()
        .await
        .expect("create the topic in us-west-2")
        .topic_arn()
        .expect("its ARN")
        .to_owned();
    assert!(topic.contains(&format!(":sns:{TOPIC_REGION}:")), "{topic}");
    put_event(
        &env,
        "u-1",
        "01JTARGETREGION0000000001",
        r#"{"orderId":"o-1"}"#,
    )
    .await;

    let target = ["--target-kind", "sns", "--target", topic.as_str()];
    let mut drain = env.relay_command("relay-poller");
    drain.arg("drain").args(target);
    let mut stream = env.relay_command("relay-stream-local");
    stream
        .args(["--from", "trim-horizon", "--exit-when-idle", "1s"])
        .args(target);
    for (what, command) in [("drain", drain), ("relay-stream-local", stream)] {
        // When the relay starts with it
        let (code, line) = exit_and_last_line(command).await;

        // Then it stops at start-up (exit 2), its last line naming the topic, the setting, the
        // region it calls and the fix: the topic's region
        assert_eq!(code, Some(2), "{what}: {line}");
        for name in [
            &format!("topic {topic}"),
            "--target (EVENT_TARGET)",
            &format!("region {RELAY_REGION}"),
            &format!(
                "the topic is in region {TOPIC_REGION}, the process calls region {RELAY_REGION}: \
                 set AWS_REGION to {TOPIC_REGION}"
            ),
        ] {
            assert!(
                line.contains(name),
                "{what}: the line does not name {name:?}: {line}"
            );
        }
    }

    // And check fails the target item with the same line
    let output = env
        .relay_command("relay-poller")
        .args(["check", "--json"])
        .args(target)
        .env("RUST_LOG", "error")
        .output()
        .await
        .expect("check runs");
    assert_eq!(output.status.code(), Some(2));
    let report: Value = serde_json::from_slice(&output.stdout).expect("check --json");
    let item = report["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|item| item["item"] == "target")
        .expect("a target item");
    assert_eq!(item["verdict"], "fail", "{item}");
    assert!(
        item["fix"]
            .as_str()
            .is_some_and(|fix| fix.contains(&format!("set AWS_REGION to {TOPIC_REGION}"))),
        "{item}"
    );

    // And nothing was dead-lettered: the event is still pending
    assert!(env.drain_dead_letters().await.is_empty());
    let items = env.outbox_items().await;
    assert_eq!(items.len(), 1);
    assert_eq!(items[0].status, OutboxStatus::Pending);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_sqs_target_smaller_than_the_entry_setting_carries_larger_events_by_the_claim_check() {
    // Given an SQS queue target whose MaximumMessageSize is 4 KiB, the entry setting at its 256
    // KiB default, a payload bucket, and two pending events: one of 1 KB and one of 20 KB (above
    // the queue's limit, below the setting)
    let env = TestEnv::with_target_of(TargetKind::Sqs, false).await;
    env.sqs
        .set_queue_attributes()
        .queue_url(&env.sink_queue_url)
        .attributes(QueueAttributeName::MaximumMessageSize, "4096")
        .send()
        .await
        .expect("set the queue's MaximumMessageSize");
    let bucket = env.create_payload_bucket().await;
    let small = json!({"orderId": "o-small", "lines": "s".repeat(1_000)});
    let large = json!({"orderId": "o-large", "lines": "l".repeat(20_000)});
    put_event(&env, "u-1", "01JTARGETLIMIT00000000001", &small.to_string()).await;
    put_event(&env, "u-2", "01JTARGETLIMIT00000000002", &large.to_string()).await;

    // When check reads the target
    let output = env
        .relay_command("relay-poller")
        .args(["check", "--json", "--payload-bucket", &bucket])
        .env("RUST_LOG", "error")
        .output()
        .await
        .expect("check runs");
    let report: Value = serde_json::from_slice(&output.stdout).expect("check --json");
    let target = report["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|item| item["item"] == "target")
        .expect("a target item");

    // Then it shows the entry budget: the queue's own limit, below the setting
    assert_eq!(target["verdict"], "ok", "{target}");
    let detail = target["detail"].as_str().expect("detail");
    assert!(
        detail.contains(
            "entry budget 4096 bytes (the queue's own limit, below --max-entry-bytes \
             (MAX_ENTRY_BYTES) 262144): a larger event goes through the payload bucket"
        ),
        "{detail}"
    );

    // When the poller drains with the payload bucket
    let drained = env
        .relay_command("relay-poller")
        .args(["drain", "--shard-count", "1", "--max-stalled-passes", "1"])
        .env("PAYLOAD_BUCKET", &bucket)
        .env("RUST_LOG", "error")
        .stderr(Stdio::inherit())
        .output()
        .await
        .expect("drain runs");
    assert!(drained.status.success(), "drain: {drained:?}");

    // Then both are delivered: the large one by reference, its payload read back whole from the
    // bucket, the small one inline; nothing is dead-lettered and nothing stays pending
    let mut delivered = env.drain_sink().await;
    delivered.sort_by(|a, b| a.event_id().cmp(b.event_id()));
    assert_eq!(delivered.len(), 2, "{delivered:?}");
    assert!(delivered[0].payload_ref.is_none());
    assert_eq!(env.payload_of(&delivered[0]).await, small);
    assert!(
        delivered[1].payload_ref.is_some(),
        "{:?}",
        delivered[1].event
    );
    assert_eq!(env.payload_of(&delivered[1]).await, large);
    assert!(env.drain_dead_letters().await.is_empty());
    assert!(
        env.outbox_items()
            .await
            .iter()
            .all(|item| item.status == OutboxStatus::Published)
    );
}
