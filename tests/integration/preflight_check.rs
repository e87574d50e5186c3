//! `relay-poller check` on the emulators: a stack provisioned from the template holds every item
//! (exit 0), and a table that differs from the template in one thing (a `NEW_IMAGE` stream, TTL
//! off, an index that projects its keys only), or a dead-letter queue that is not there, fails
//! that item alone, with its fix (exit 2).

use std::process::Stdio;

use outbox_infra::template::{Projection, StreamSpec, TableSpec, Template};
use outbox_tests::{TestEnv, emulator_endpoints, unique_name};
use serde_json::Value;

/// `relay-poller check --json` with `args` and `env_overrides` against `env`: its exit code and
/// its report.
async fn check(env: &TestEnv, args: &[&str], env_overrides: &[(&str, &str)]) -> (i32, Value) {
    let mut command = env.relay_command("relay-poller");
    command
        .arg("check")
        .arg("--json")
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (variable, value) in env_overrides {
        command.env(variable, value);
    }
    let output = command.output().await.expect("relay-poller check runs");
    let stdout = String::from_utf8(output.stdout).expect("utf-8");
    let report = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("check --json prints one JSON object ({e}): {stdout}"));
    (output.status.code().expect("an exit code"), report)
}

/// The report's items by name: (verdict, detail, fix).
fn items(report: &Value) -> Vec<(String, String, String, String)> {
    report["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| {
            let text = |field: &str| item[field].as_str().unwrap_or_default().to_owned();
            (text("item"), text("verdict"), text("detail"), text("fix"))
        })
        .collect()
}

/// The items that failed, by name.
fn failed(report: &Value) -> Vec<String> {
    items(report)
        .into_iter()
        .filter(|(_, verdict, _, _)| verdict == "fail")
        .map(|(item, ..)| item)
        .collect()
}

/// The one item named `name`: (verdict, detail, fix).
fn item(report: &Value, name: &str) -> (String, String, String) {
    items(report)
        .into_iter()
        .find(|(item, ..)| item == name)
        .map(|(_, verdict, detail, fix)| (verdict, detail, fix))
        .unwrap_or_else(|| panic!("no item {name} in {report}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stack_provisioned_from_the_template_holds_every_item() {
    // Given the template's table, bus, dead-letter queue, a lease table and the bucket
    let env = TestEnv::new().await;
    let lease_table = unique_name("leases");
    relay_poller::assignment::create_lease_table(&env.dynamodb, &lease_table)
        .await
        .expect("lease table");
    let bucket = env.create_discarded_batch_bucket().await;
    let payload_bucket = env.create_payload_bucket().await;

    // When check runs with the relays' settings
    let (code, report) = check(
        &env,
        &[
            "--lease-table",
            &lease_table,
            "--discarded-batch-bucket",
            &bucket,
            "--payload-bucket",
            &payload_bucket,
        ],
        &[],
    )
    .await;

    // Then every item holds, the permissions are skipped with a note (the emulators have no
    // iam:SimulatePrincipalPolicy), and it exits 0
    assert_eq!(failed(&report), Vec::<String>::new(), "{report:#}");
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["ok"], true);
    let names: Vec<String> = items(&report).into_iter().map(|(i, ..)| i).collect();
    assert_eq!(
        names,
        [
            "credentials",
            "table",
            "index",
            "ttl",
            "stream",
            "target",
            "dead-letter queue",
            "lease table",
            "bucket",
            "payload bucket",
            "strays",
            "permissions",
            "capacity"
        ]
    );
    let (verdict, payload, _) = item(&report, "payload bucket");
    assert_eq!(
        (verdict.as_str(), payload),
        ("ok", format!("{payload_bucket}: exists"))
    );
    let (_, index, _) = item(&report, "index");
    assert_eq!(
        index,
        "GSI1: keys GSI1PK (HASH), GSI1SK (RANGE), projection ALL"
    );
    let (_, stream, _) = item(&report, "stream");
    assert!(
        stream.starts_with("enabled, NEW_AND_OLD_IMAGES"),
        "{stream}"
    );
    let (_, ttl, _) = item(&report, "ttl");
    assert_eq!(ttl, "enabled on ttl");
    let (_, queue, _) = item(&report, "dead-letter queue");
    assert!(
        queue.contains("MaximumMessageSize 1048576 bytes"),
        "{queue}"
    );
    let (verdict, permissions, _) = item(&report, "permissions");
    assert_eq!(verdict, "skipped", "{permissions}");
    assert!(
        permissions.contains("iam:SimulatePrincipalPolicy answered"),
        "{permissions}"
    );
    let (verdict, capacity, _) = item(&report, "capacity");
    assert_eq!(verdict, "ok");
    assert!(
        capacity.starts_with("16 shards take about 8,000 events/s"),
        "{capacity}"
    );
}

/// Creates the template's outbox table changed by `change`, under a new name; its name.
async fn table_differing(env: &TestEnv, change: impl FnOnce(&mut TableSpec)) -> String {
    let mut spec = Template::embedded()
        .expect("the template")
        .outbox_table()
        .expect("its table");
    change(&mut spec);
    let name = unique_name("differs");
    outbox_infra::create_table_from(&env.dynamodb, &name, &spec)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    name
}

/// A stack that differs from the template in one thing, and what check says of it.
struct Difference<'a> {
    what: &'a str,
    /// The variable that points check at the difference, and its value.
    setting: (&'a str, &'a str),
    /// The item that fails, what it says was found, and its fix.
    item: &'a str,
    detail: &'a str,
    fix: &'a str,
}

#[tokio::test(flavor = "multi_thread")]
async fn a_table_that_differs_from_the_template_in_one_thing_fails_that_item_with_its_fix() {
    let env = TestEnv::new().await;
    let new_image = table_differing(&env, |spec| {
        spec.stream_specification = Some(StreamSpec {
            stream_view_type: "NEW_IMAGE".into(),
        });
    })
    .await;
    let ttl_off = table_differing(&env, |spec| spec.time_to_live_specification = None).await;
    let keys_only = table_differing(&env, |spec| {
        spec.global_secondary_indexes[0].projection = Projection {
            projection_type: "KEYS_ONLY".into(),
            non_key_attributes: Vec::new(),
        };
    })
    .await;
    let no_queue = format!(
        "{}/123456789012/{}",
        emulator_endpoints().default.trim_end_matches('/'),
        unique_name("no-such-dlq")
    );
    let cases = [
        Difference {
            what: "a NEW_IMAGE stream",
            setting: ("TABLE_NAME", new_image.as_str()),
            item: "stream",
            detail: "view NEW_IMAGE: a TTL deletion's REMOVE record carries no old image",
            fix: "StreamViewType=NEW_AND_OLD_IMAGES",
        },
        Difference {
            what: "TTL off",
            setting: ("TABLE_NAME", ttl_off.as_str()),
            item: "ttl",
            detail: "published and dead-lettered items stay forever",
            fix: "--time-to-live-specification Enabled=true,AttributeName=ttl",
        },
        Difference {
            what: "an index projecting its keys only",
            setting: ("TABLE_NAME", keys_only.as_str()),
            item: "index",
            detail: "GSI1: projection KEYS_ONLY, not ALL",
            fix: "ProjectionType ALL",
        },
        Difference {
            what: "a missing dead-letter queue",
            setting: ("DEAD_LETTER_QUEUE_URL", no_queue.as_str()),
            item: "dead-letter queue",
            detail: "does not exist (set by --dead-letter-queue-url (DEAD_LETTER_QUEUE_URL)",
            fix: "the stack's DeadLetterQueueUrl output",
        },
    ];

    for Difference {
        what,
        setting,
        item: failing,
        detail,
        fix,
    } in cases
    {
        // When check runs against a stack with that one difference
        let (code, report) = check(&env, &[], &[setting]).await;

        // Then that item alone fails, saying what is wrong and how to fix it, and it exits 2
        assert_eq!(failed(&report), [failing], "{what}: {report:#}");
        assert_eq!(code, 2, "{what}");
        assert_eq!(report["ok"], false, "{what}");
        let (_, found, how) = item(&report, failing);
        assert!(found.contains(detail), "{what}: {found}");
        assert!(how.contains(fix), "{what}: {how}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn check_without_json_prints_one_line_per_item_with_its_fix() {
    // Given a table whose stream is NEW_IMAGE
    let env = TestEnv::new().await;
    let new_image = table_differing(&env, |spec| {
        spec.stream_specification = Some(StreamSpec {
            stream_view_type: "NEW_IMAGE".into(),
        });
    })
    .await;

    // When check runs for a person (no --json)
    let output = env
        .relay_command("relay-poller")
        .arg("check")
        .env("TABLE_NAME", &new_image)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .output()
        .await
        .expect("check runs");

    // Then each item is one line, OK or FAIL with what is wrong and the fix, and it exits 2
    let stdout = String::from_utf8(output.stdout).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 13, "{stdout}"); // one per item, the payload bucket's included
    let stream = lines
        .iter()
        .find(|l| l.starts_with("FAIL  stream"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(stream.contains("view NEW_IMAGE"), "{stream}");
    assert!(
        stream.contains("; fix: enable the stream with NEW_AND_OLD_IMAGES"),
        "{stream}"
    );
    assert!(
        lines
            .iter()
            .filter(|l| !l.starts_with("FAIL  stream"))
            .all(|l| l.starts_with("OK ") || l.starts_with("SKIP")),
        "{stdout}"
    );
    assert_eq!(output.status.code(), Some(2));
}

on_every_target!(check_describes_a_target_of_each_kind_and_says_its_order);
async fn check_describes_a_target_of_each_kind_and_says_its_order(kind: relay_runtime::TargetKind) {
    use relay_runtime::TargetKind;
    // Given a target of `kind` (the FIFO topic or queue, the stream, the bus)
    let env = TestEnv::with_target(kind).await;

    // When check runs with the relays' settings
    let (_, report) = check(&env, &[], &[]).await;

    // Then the target item holds, naming the kind and the order and de-duplication it gives
    let (verdict, detail, _) = item(&report, "target");
    assert_eq!(verdict, "ok", "{kind}: {report:#}");
    let (what, order) = match kind {
        TargetKind::Classic => ("classic bus", "no order and no de-duplication"),
        TargetKind::Custom => ("custom bus", "each aggregate in order"),
        TargetKind::Sns => ("sns topic", "FIFO: each aggregate in order"),
        TargetKind::Sqs => ("sqs queue", "FIFO: each aggregate in order"),
        TargetKind::Kinesis => ("kinesis data stream", "in order on its shard"),
    };
    assert!(detail.starts_with(what), "{kind}: {detail}");
    assert!(detail.contains(order), "{kind}: {detail}");

    // And a target of that kind that is not there fails that item alone, naming the setting
    let missing = match kind {
        TargetKind::Classic => "no-such-bus".to_owned(),
        // arn:…:event-busv2/NAME/ID: another name
        TargetKind::Custom => env.bus_name.replace("event-busv2/", "event-busv2/no-such-"),
        // a topic's or a stream's ARN, a queue's URL: another name, last in each
        _ => {
            let at = env.bus_name.rfind([':', '/']).expect("a name") + 1;
            format!("{}no-such-{}", &env.bus_name[..at], &env.bus_name[at..])
        }
    };
    let (code, report) = check(&env, &[], &[("EVENT_TARGET", missing.as_str())]).await;
    assert_eq!(failed(&report), ["target"], "{kind}: {report:#}");
    assert_eq!(code, 2, "{kind}");
    let (_, detail, fix) = item(&report, "target");
    assert!(detail.contains("does not exist"), "{kind}: {detail}");
    assert!(fix.contains("--target (EVENT_TARGET)"), "{kind}: {fix}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_payload_bucket_that_does_not_exist_fails_its_item_naming_the_setting() {
    let env = TestEnv::new().await;

    let (code, report) = check(&env, &["--payload-bucket", "no-such-payload-bucket"], &[]).await;

    assert_eq!(code, 2, "{report:#}");
    let (verdict, detail, fix) = item(&report, "payload bucket");
    assert_eq!(verdict, "fail", "{report:#}");
    assert!(detail.contains("no-such-payload-bucket"), "{detail}");
    assert!(fix.contains("--payload-bucket (PAYLOAD_BUCKET)"), "{fix}");
}
