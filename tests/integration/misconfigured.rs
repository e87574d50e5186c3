//! A failure no retry can fix stops every binary within seconds, with one last line on stderr
//! naming the resource, the setting that named it (flag and variable), the region and the
//! endpoint, the AWS error code and what to do, and exit code 2 (issue 34).
//!
//! Each case is made the way it happens: a name nothing exists under, on the emulators; access
//! denied by the fault proxy (`deny`, as a policy without the action answers); no credentials by
//! unsetting them; an unknown region by the SDK's own endpoint for it; a refused connection by a
//! port nothing listens on. The real binaries run; nothing of the relay is mocked. The Lambda's
//! case (one ERROR at init, exit 2) runs through its packaged `bootstrap`, in `bootstrap.rs`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use outbox_tests::fault_proxy::{FaultProxy, FaultRates};
use outbox_tests::{TestEnv, emulator_endpoints};

/// How long a misconfigured binary may take to stop: its probe's calls, and the SDK's retries of
/// a refused connection (three attempts with backoff, about 2 s), with room for a loaded
/// two-core machine. A binary that retried what cannot succeed would take minutes (drain's
/// passes, run's loop never ends); the times measured are printed with `--nocapture`.
const STOPS_WITHIN: Duration = Duration::from_secs(30);

/// The exit code of a misconfiguration (docs/configuration.md, "Exit codes").
const MISCONFIGURED: i32 = 2;

/// What a person sees of a binary that stopped.
#[derive(Debug)]
struct Stopped {
    code: Option<i32>,
    elapsed: Duration,
    /// The last line on stderr.
    last_line: String,
    stderr_lines: usize,
}

/// Runs `command` to its exit (at most a minute).
async fn stopped(what: &str, mut command: tokio::process::Command) -> Stopped {
    command
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let started = Instant::now();
    let output = tokio::time::timeout(Duration::from_secs(60), command.output())
        .await
        .unwrap_or_else(|_| panic!("{what} did not stop within a minute"))
        .expect("the binary runs");
    let elapsed = started.elapsed();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let stopped = Stopped {
        code: output.status.code(),
        elapsed,
        last_line: stderr.lines().last().unwrap_or_default().to_owned(),
        stderr_lines: stderr.lines().count(),
    };
    // The measured times, for the record (`--nocapture`).
    eprintln!(
        "{what}: exit {:?} after {:.2} s, {} stderr lines; last: {}",
        stopped.code,
        elapsed.as_secs_f64(),
        stopped.stderr_lines,
        stopped.last_line
    );
    stopped
}

/// Asserts that `stopped` is a misconfiguration: exit 2, within [`STOPS_WITHIN`], its last line
/// holding every one of `names`.
fn assert_stopped_naming(what: &str, stopped: &Stopped, names: &[&str]) {
    assert_eq!(
        stopped.code,
        Some(MISCONFIGURED),
        "{what}: exit code ({stopped:?})"
    );
    assert!(
        stopped.elapsed < STOPS_WITHIN,
        "{what}: took {:?} ({stopped:?})",
        stopped.elapsed
    );
    for name in names {
        assert!(
            stopped.last_line.contains(name),
            "{what}: the last line does not name {name:?}: {}",
            stopped.last_line
        );
    }
}

/// `relay-poller` with `args`, pointed at `env`.
fn poller(env: &TestEnv, args: &[&str]) -> tokio::process::Command {
    let mut command = env.relay_command("relay-poller");
    command.args(args);
    command
}

/// `relay-stream-local`, pointed at `env`, exiting when the stream is idle.
fn stream_local(env: &TestEnv, args: &[&str]) -> tokio::process::Command {
    let mut command = env.relay_command("relay-stream-local");
    command.args(["--exit-when-idle", "1s"]).args(args);
    command
}

#[tokio::test(flavor = "multi_thread")]
async fn every_command_stops_at_once_naming_a_missing_table_and_the_setting_that_named_it() {
    // Given a stack whose table name has a typo
    let env = TestEnv::new().await;
    let bucket = env.create_discarded_batch_bucket().await;
    let commands: Vec<(&str, tokio::process::Command)> = vec![
        ("drain", poller(&env, &["drain"])),
        ("run", poller(&env, &["run"])),
        ("status", poller(&env, &["status"])),
        ("redrive", poller(&env, &["redrive"])),
        ("inspect", poller(&env, &["inspect", "01JABCDEF"])),
        (
            "recover-discarded",
            poller(
                &env,
                &["recover-discarded", "--discarded-batch-bucket", &bucket],
            ),
        ),
        ("relay-stream-local", stream_local(&env, &[])),
    ];

    for (what, mut command) in commands {
        // When the command runs with it
        command.env("TABLE_NAME", "NoSuchTable");
        let stopped = stopped(what, command).await;

        // Then it stops at once, and its last line names the table, the setting, where the call
        // went, the code and the fix
        assert_stopped_naming(
            what,
            &stopped,
            &[
                "table NoSuchTable does not exist",
                "--table-name (TABLE_NAME)",
                "region us-east-1",
                "endpoint http://",
                "DescribeTable: ResourceNotFoundException",
                "to the stack's TableName output",
            ],
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn run_and_drain_stop_at_start_up_naming_a_missing_index() {
    // Given the template's table, and an index name it does not have
    let env = TestEnv::new().await;

    for command in ["run", "drain"] {
        // When the poller starts with it
        let stopped = stopped(
            command,
            poller(&env, &[command, "--index-name", "NoSuchIndex"]),
        )
        .await;

        // Then it stops at start-up, naming the index, its setting and the indexes there are
        assert_stopped_naming(
            command,
            &stopped,
            &[
                &format!(
                    "index NoSuchIndex of table {} does not exist",
                    env.table_name
                ),
                "--index-name (OUTBOX_INDEX_NAME)",
                "region us-east-1",
                "the table has GSI1",
            ],
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_bus_queue_lease_table_or_bucket_stops_the_binary_that_relies_on_it() {
    // Given the template's stack, and one setting at a time naming nothing
    let env = TestEnv::new().await;
    let no_queue = format!(
        "{}/123456789012/no-such-queue",
        emulator_endpoints().default.trim_end_matches('/')
    );
    let cases: Vec<(&str, tokio::process::Command, Vec<String>)> = vec![
        (
            "drain, a missing bus",
            poller(&env, &["drain", "--target", "no-such-bus"]),
            vec![
                "bus no-such-bus does not exist".into(),
                "--target (EVENT_TARGET)".into(),
                "DescribeEventBus: ResourceNotFoundException".into(),
            ],
        ),
        (
            "relay-stream-local, a missing bus",
            stream_local(&env, &["--target", "no-such-bus"]),
            vec![
                "bus no-such-bus does not exist".into(),
                "--target (EVENT_TARGET)".into(),
            ],
        ),
        (
            "drain, a missing SNS topic",
            poller(
                &env,
                &[
                    "drain",
                    "--target-kind",
                    "sns",
                    "--target",
                    "arn:aws:sns:us-east-1:123456789012:no-such-topic.fifo",
                ],
            ),
            vec![
                "topic arn:aws:sns:us-east-1:123456789012:no-such-topic.fifo does not exist".into(),
                "--target (EVENT_TARGET)".into(),
                "GetTopicAttributes: NotFound".into(),
            ],
        ),
        (
            "drain, a missing SQS queue",
            poller(
                &env,
                &["drain", "--target-kind", "sqs", "--target", &no_queue],
            ),
            vec![
                format!("queue {no_queue} does not exist"),
                "--target (EVENT_TARGET)".into(),
                "GetQueueAttributes".into(),
            ],
        ),
        (
            "drain, a missing Kinesis stream",
            poller(
                &env,
                &[
                    "drain",
                    "--target-kind",
                    "kinesis",
                    "--target",
                    "arn:aws:kinesis:us-east-1:123456789012:stream/no-such-stream",
                ],
            ),
            vec![
                "data stream arn:aws:kinesis:us-east-1:123456789012:stream/no-such-stream does not exist"
                    .into(),
                "--target (EVENT_TARGET)".into(),
                "DescribeStreamSummary: ResourceNotFoundException".into(),
            ],
        ),
        (
            "drain, a missing dead-letter queue",
            poller(&env, &["drain", "--dead-letter-queue-url", &no_queue]),
            vec![
                format!("dead-letter queue {no_queue} does not exist"),
                "--dead-letter-queue-url (DEAD_LETTER_QUEUE_URL)".into(),
                "GetQueueAttributes: ".into(),
            ],
        ),
        (
            "run, a missing lease table",
            poller(&env, &["run", "--lease-table", "no-such-leases"]),
            vec![
                "lease table no-such-leases does not exist".into(),
                "--lease-table (OUTBOX_LEASE_TABLE)".into(),
                "DescribeTable: ResourceNotFoundException".into(),
            ],
        ),
        (
            "run, a missing bucket",
            poller(
                &env,
                &["run", "--discarded-batch-bucket", "no-such-bucket-34"],
            ),
            vec![
                "bucket no-such-bucket-34 does not exist".into(),
                "--discarded-batch-bucket (DISCARDED_BATCH_BUCKET)".into(),
                "ListObjectsV2: NoSuchBucket".into(),
            ],
        ),
    ];

    for (what, command, names) in cases {
        // When it runs
        let stopped = stopped(what, command).await;

        // Then it stops at once naming the resource, its setting, the region and the code
        let mut names: Vec<&str> = names.iter().map(String::as_str).collect();
        names.push("region us-east-1");
        assert_stopped_naming(what, &stopped, &names);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn access_denied_stops_the_binary_naming_the_action_to_allow() {
    // Given a policy that does not allow dynamodb:DescribeTable (the fault proxy answers
    // AccessDeniedException, as IAM does)
    let env = TestEnv::new().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 34).await;
    proxy.deny("DynamoDB_20120810.DescribeTable");

    for (what, mut command) in [
        ("drain", poller(&env, &["drain"])),
        ("relay-stream-local", stream_local(&env, &[])),
    ] {
        // When the binary starts through it
        command.envs(proxy.endpoint_env());
        let stopped = stopped(what, command).await;

        // Then it stops at once, naming the table, the code and the action to allow
        assert_stopped_naming(
            what,
            &stopped,
            &[
                &format!(
                    "table {} may not be used with these credentials",
                    env.table_name
                ),
                "--table-name (TABLE_NAME)",
                "DescribeTable: AccessDeniedException",
                "allow dynamodb:DescribeTable on it",
                &proxy.url(),
            ],
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn no_credentials_stops_the_binary_naming_where_the_sdk_looked() {
    // Given no credentials anywhere the SDK looks (no variables, no profile files; the instance
    // metadata service is asked as on any machine)
    let env = TestEnv::new().await;

    for (what, mut command) in [
        ("drain", poller(&env, &["drain"])),
        ("status", poller(&env, &["status"])),
        ("relay-stream-local", stream_local(&env, &[])),
    ] {
        command
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .env_remove("AWS_SESSION_TOKEN")
            .env_remove("AWS_PROFILE")
            .env_remove("AWS_EC2_METADATA_DISABLED")
            .env("AWS_CONFIG_FILE", "/nonexistent/aws-config")
            .env(
                "AWS_SHARED_CREDENTIALS_FILE",
                "/nonexistent/aws-credentials",
            );

        // When the binary starts
        let stopped = stopped(what, command).await;

        // Then it stops, naming what the SDK looked for and what to set
        assert_stopped_naming(
            what,
            &stopped,
            &[
                "no AWS credentials found",
                "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                "the profile \"default\" (AWS_PROFILE)",
                "/nonexistent/aws-credentials (AWS_SHARED_CREDENTIALS_FILE)",
                "region us-east-1",
                "set AWS_PROFILE",
            ],
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_region_stops_the_binary_naming_the_region() {
    // Given a region AWS does not have, and no endpoint variable (the SDK's own endpoint for it)
    let env = TestEnv::new().await;

    for (what, mut command) in [
        ("drain", poller(&env, &["drain"])),
        ("relay-stream-local", stream_local(&env, &[])),
    ] {
        for (variable, _) in emulator_endpoints().env() {
            command.env_remove(variable);
        }
        command
            .env("AWS_REGION", "xx-nowhere-1")
            .env("AWS_DEFAULT_REGION", "xx-nowhere-1");

        // When the binary starts
        let stopped = stopped(what, command).await;

        // Then it stops, naming the table, the region and its endpoint
        assert_stopped_naming(
            what,
            &stopped,
            &[
                &format!("table {}", env.table_name),
                "the endpoint's host name does not resolve",
                "--table-name (TABLE_NAME)",
                "region xx-nowhere-1",
                "endpoint https://dynamodb.xx-nowhere-1.amazonaws.com",
                "check that AWS_REGION (xx-nowhere-1) is a region AWS has",
            ],
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_endpoint_that_refuses_connections_stops_the_binary_naming_its_variable() {
    // Given an endpoint variable pointing at a port nothing listens on
    let env = TestEnv::new().await;
    let endpoint = format!("http://127.0.0.1:{}", outbox_tests::unused_port());

    for (what, mut command) in [
        ("drain", poller(&env, &["drain"])),
        ("run", poller(&env, &["run"])),
        ("relay-stream-local", stream_local(&env, &[])),
    ] {
        command.env("AWS_ENDPOINT_URL_DYNAMODB", &endpoint);

        // When the binary starts
        let stopped = stopped(what, command).await;

        // Then it stops within seconds, naming the endpoint and the variable that set it
        assert_stopped_naming(
            what,
            &stopped,
            &[
                &format!("table {}", env.table_name),
                "nothing accepts connections at the endpoint",
                "--table-name (TABLE_NAME)",
                &format!("endpoint {endpoint} (AWS_ENDPOINT_URL_DYNAMODB)"),
                "DescribeTable: connection refused",
                "start the service AWS_ENDPOINT_URL_DYNAMODB points at",
            ],
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_demo_stops_at_once_when_its_endpoint_refuses_or_its_table_is_missing() {
    // Given the emulators, with DynamoDB's endpoint variable on a port nothing listens on
    let env = TestEnv::new().await;
    let endpoint = format!("http://127.0.0.1:{}", outbox_tests::unused_port());
    let bin_dir = outbox_tests::workspace_binary("relay-poller")
        .parent()
        .expect("the binaries' directory")
        .to_path_buf();
    let log_dir = tempfile::tempdir().expect("a log directory");
    let demo = |extra: &[&str]| {
        let mut command = env.relay_command("outbox-demo");
        command
            .arg("--bin-dir")
            .arg(&bin_dir)
            .arg("--log-dir")
            .arg(log_dir.path())
            .args(["--orders", "1"])
            .args(extra);
        command
    };
    let mut refused = demo(&[]);
    refused.env("AWS_ENDPOINT_URL_DYNAMODB", &endpoint);

    // When the demo starts
    let stopped_refused = stopped("demo, refused", refused).await;

    // Then it stops before writing anything, naming the endpoint and its variable
    assert_stopped_naming(
        "demo, refused",
        &stopped_refused,
        &[
            "outbox-demo: table outbox-demo-probe is out of reach",
            "nothing accepts connections",
            &format!("endpoint {endpoint} (AWS_ENDPOINT_URL_DYNAMODB)"),
            "region us-east-1",
        ],
    );

    // And given an existing stack whose table is missing (and no payload bucket, so no large
    // orders), the demo names it and its flag
    let missing = demo(&[
        "--table-name",
        "NoSuchTable",
        "--event-bus-name",
        &env.bus_name,
        "--sink-queue-url",
        &env.sink_queue_url,
        "--dead-letter-queue-url",
        &env.dead_letter_queue_url,
        "--large-order-percent",
        "0",
    ]);
    let stopped_missing = stopped("demo, missing table", missing).await;
    assert_stopped_naming(
        "demo, missing table",
        &stopped_missing,
        &[
            "table NoSuchTable does not exist",
            "set by --table-name",
            "ResourceNotFoundException",
        ],
    );
}
