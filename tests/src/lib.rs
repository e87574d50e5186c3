//! Test harness for integration and end-to-end tests against the local AWS emulator.
//!
//! [`TestEnv::new`] gives each test its own randomly named table, EventBridge bus (with archive) and
//! dead-letter queue, all created from `infra/template.yaml` by `outbox_infra`, plus a sink SQS queue
//! that receives everything on the bus through a rule. Run the tests with `make test`, which installs and starts the emulator
//! (moto in server mode) and points `AWS_ENDPOINT_URL` at it.

pub mod latency_model;

use std::collections::HashMap;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, QueueAttributeName};
use outbox_shared::envelope::Envelope;
use outbox_shared::{OutboxConfig, OutboxItem, PublisherConfig};
use rand::Rng;
use rand::distr::Alphanumeric;

/// The EventBridge `Source` the test environment publishes with.
pub const TEST_SOURCE: &str = "test.orders";

const HOW_TO_RUN: &str = "run the tests with `make test` (it installs the pinned emulator into \
     .venv and starts it), or start one with `scripts/emulator.sh start && eval \"$(scripts/emulator.sh env)\"` \
     and then run cargo test";

/// The emulator's endpoint, checked to be reachable.
///
/// # Panics
/// With instructions when `AWS_ENDPOINT_URL` is unset or nothing answers there: integration tests
/// never pass without the emulator.
pub fn emulator_endpoint() -> String {
    let Ok(endpoint) = std::env::var("AWS_ENDPOINT_URL") else {
        panic!(
            "AWS_ENDPOINT_URL is not set, so there is no local AWS emulator to test against: {HOW_TO_RUN}"
        );
    };
    let authority = endpoint
        .split("://")
        .nth(1)
        .unwrap_or(&endpoint)
        .trim_end_matches('/');
    let reachable = authority
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .is_some_and(|addr| TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok());
    assert!(
        reachable,
        "the local AWS emulator at AWS_ENDPOINT_URL={endpoint} does not answer: {HOW_TO_RUN}"
    );
    endpoint
}

/// A random lowercase name with `prefix`, unique per test.
pub fn unique_name(prefix: &str) -> String {
    let suffix: String = rand::rng()
        .sample_iter(&Alphanumeric)
        .take(10)
        .map(|c| char::from(c).to_ascii_lowercase())
        .collect();
    format!("{prefix}-{suffix}")
}

/// The workspace root (for finding binaries, fixtures and scripts).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace root")
        .to_path_buf()
}

/// The path of a workspace binary (`relay-stream-local`, `relay-poller`, …), built into the same
/// target directory and profile as the running test.
///
/// It builds the whole workspace with its tests rather than one `--package`: that is the feature
/// resolution of `cargo test --workspace`, so under `make test` the build is a no-op, where a
/// one-package build would recompile the SDK crates with other features (and the next test build
/// would recompile them back).
///
/// # Panics
/// When cargo cannot build it.
pub fn workspace_binary(bin: &str) -> PathBuf {
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // Test executables live in <target>/<profile>/deps; binaries in <target>/<profile>.
    let exe = std::env::current_exe().expect("current exe");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test executable sits in <target>/<profile>/deps")
        .to_path_buf();
    let target_dir = profile_dir.parent().expect("profile dir has a parent");
    let path = profile_dir.join(bin);
    let _guard = BUILD
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let mut command = std::process::Command::new(cargo);
    command
        .current_dir(workspace_root())
        .args([
            "build",
            "--quiet",
            "--workspace",
            "--bins",
            "--tests",
            "--target-dir",
        ])
        .arg(target_dir);
    if profile_dir.file_name().is_some_and(|p| p == "release") {
        command.arg("--release");
    }
    let status = command.status().expect("run cargo build");
    assert!(
        status.success(),
        "cargo build of the workspace (for {bin}) failed"
    );
    assert!(
        path.exists(),
        "{} missing after a successful build",
        path.display()
    );
    path
}

/// One event as EventBridge delivered it to the sink queue.
#[derive(Debug, Clone)]
pub struct SinkMessage {
    /// The whole EventBridge event (`id`, `source`, `detail-type`, `detail`, …).
    pub event: serde_json::Value,
    /// `detail`, parsed as the relay's envelope.
    pub envelope: Envelope<serde_json::Value>,
}

impl SinkMessage {
    pub fn event_id(&self) -> &str {
        &self.envelope.metadata.event_id
    }

    pub fn detail_type(&self) -> &str {
        self.event["detail-type"].as_str().unwrap_or_default()
    }

    pub fn source(&self) -> &str {
        self.event["source"].as_str().unwrap_or_default()
    }
}

/// A private set of emulator resources for one test.
#[derive(Debug, Clone)]
pub struct TestEnv {
    pub sdk_config: SdkConfig,
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub streams: aws_sdk_dynamodbstreams::Client,
    pub eventbridge: aws_sdk_eventbridge::Client,
    pub sqs: aws_sdk_sqs::Client,
    pub table_name: String,
    pub stream_arn: String,
    pub bus_name: String,
    /// Receives every event on the bus, through a rule.
    pub sink_queue_url: String,
    /// Where the relays send poison records.
    pub dead_letter_queue_url: String,
}

impl TestEnv {
    /// Creates a fresh table, bus, sink queue (with the rule) and dead-letter queue.
    ///
    /// # Panics
    /// When the emulator is missing (with instructions) or refuses to create a resource.
    pub async fn new() -> Self {
        let endpoint = emulator_endpoint();
        let sdk_config = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .load()
            .await;
        let env = Self {
            dynamodb: aws_sdk_dynamodb::Client::new(&sdk_config),
            streams: aws_sdk_dynamodbstreams::Client::new(&sdk_config),
            eventbridge: aws_sdk_eventbridge::Client::new(&sdk_config),
            sqs: aws_sdk_sqs::Client::new(&sdk_config),
            sdk_config,
            table_name: unique_name("outbox"),
            stream_arn: String::new(),
            bus_name: unique_name("bus"),
            sink_queue_url: String::new(),
            dead_letter_queue_url: String::new(),
        };
        env.provision().await
    }

    /// An environment over resources that already exist (a table provisioned from the template,
    /// a bus, a queue receiving everything on the bus, a dead-letter queue).
    ///
    /// # Panics
    /// When the emulator is missing or the table does not exist.
    pub async fn existing(table: &str, bus: &str, sink_queue_url: &str, dlq_url: &str) -> Self {
        let endpoint = emulator_endpoint();
        let sdk_config = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(endpoint)
            .load()
            .await;
        let dynamodb = aws_sdk_dynamodb::Client::new(&sdk_config);
        let stream_arn = dynamodb
            .describe_table()
            .table_name(table)
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "table {table}: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(e)
                )
            })
            .table()
            .and_then(|t| t.latest_stream_arn())
            .unwrap_or_else(|| panic!("table {table} has no stream"))
            .to_owned();
        Self {
            dynamodb,
            streams: aws_sdk_dynamodbstreams::Client::new(&sdk_config),
            eventbridge: aws_sdk_eventbridge::Client::new(&sdk_config),
            sqs: aws_sdk_sqs::Client::new(&sdk_config),
            sdk_config,
            table_name: table.to_owned(),
            stream_arn,
            bus_name: bus.to_owned(),
            sink_queue_url: sink_queue_url.to_owned(),
            dead_letter_queue_url: dlq_url.to_owned(),
        }
    }

    async fn provision(mut self) -> Self {
        let table = outbox_infra::create_outbox_table(&self.dynamodb, &self.table_name)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        self.stream_arn = table.stream_arn;
        outbox_infra::create_event_bus(&self.eventbridge, &self.bus_name)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        self.sink_queue_url = self.create_queue(&unique_name("sink")).await;
        self.dead_letter_queue_url =
            outbox_infra::create_dead_letter_queue(&self.sqs, &unique_name("dlq"))
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .queue_url;
        self.route_all_events_to(&self.sink_queue_url).await;
        self
    }

    /// Adds a rule on the bus that sends every event to `queue_url` (the sink queue has one; tests
    /// add more for independent counts).
    pub async fn route_all_events_to(&self, queue_url: &str) {
        let queue_arn = self.queue_arn(queue_url).await;
        let rule = unique_name("all-events");
        self.eventbridge
            .put_rule()
            .name(&rule)
            .event_bus_name(&self.bus_name)
            .event_pattern(r#"{"source": [{"prefix": ""}]}"#)
            .send()
            .await
            .expect("put rule");
        self.eventbridge
            .put_targets()
            .rule(&rule)
            .event_bus_name(&self.bus_name)
            .targets(
                aws_sdk_eventbridge::types::Target::builder()
                    .id("sink")
                    .arn(queue_arn)
                    .build()
                    .expect("id and arn are set"),
            )
            .send()
            .await
            .expect("put targets");
    }

    /// Creates another queue (for tests that need more than the sink and dead-letter queues).
    pub async fn create_queue(&self, name: &str) -> String {
        self.sqs
            .create_queue()
            .queue_name(name)
            .send()
            .await
            .expect("create queue")
            .queue_url()
            .expect("queue url")
            .to_owned()
    }

    pub async fn queue_arn(&self, queue_url: &str) -> String {
        self.sqs
            .get_queue_attributes()
            .queue_url(queue_url)
            .attribute_names(QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("get queue attributes")
            .attributes()
            .and_then(|a| a.get(&QueueAttributeName::QueueArn))
            .expect("queue arn")
            .clone()
    }

    /// Creates a bus with no rules (delivery cost out of the measurement, for benchmarks).
    pub async fn create_bus_without_rules(&self) -> String {
        let name = unique_name("bare-bus");
        self.eventbridge
            .create_event_bus()
            .name(&name)
            .send()
            .await
            .expect("create event bus");
        name
    }

    /// The outbox configuration for this environment's table (16 shards, 7 days retention).
    pub fn outbox_config(&self) -> OutboxConfig {
        OutboxConfig::new(&self.table_name)
    }

    /// The publisher configuration for this environment's bus, with [`TEST_SOURCE`].
    pub fn publisher_config(&self) -> PublisherConfig {
        PublisherConfig::new(&self.bus_name, TEST_SOURCE)
    }

    /// Environment variables that point a relay binary at this environment.
    pub fn relay_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("TABLE_NAME", self.table_name.clone()),
            ("EVENT_BUS_NAME", self.bus_name.clone()),
            ("EVENT_SOURCE", TEST_SOURCE.to_owned()),
            ("DEAD_LETTER_QUEUE_URL", self.dead_letter_queue_url.clone()),
        ]
    }

    /// Reads and deletes every message on a queue, until it is empty.
    pub async fn drain_queue(&self, queue_url: &str) -> Vec<aws_sdk_sqs::types::Message> {
        let mut all = Vec::new();
        loop {
            let received = self
                .sqs
                .receive_message()
                .queue_url(queue_url)
                .max_number_of_messages(10)
                .wait_time_seconds(0)
                .visibility_timeout(300)
                .send()
                .await
                .expect("receive message");
            let messages = received.messages().to_vec();
            if messages.is_empty() {
                if self.queue_depth(queue_url).await == 0 {
                    return all;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
            let entries: Vec<_> = messages
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    DeleteMessageBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(m.receipt_handle().expect("receipt handle"))
                        .build()
                        .expect("id and handle are set")
                })
                .collect();
            self.sqs
                .delete_message_batch()
                .queue_url(queue_url)
                .set_entries(Some(entries))
                .send()
                .await
                .expect("delete message batch");
            all.extend(messages);
        }
    }

    /// Messages visible or in flight on a queue.
    pub async fn queue_depth(&self, queue_url: &str) -> u64 {
        let attrs = self
            .sqs
            .get_queue_attributes()
            .queue_url(queue_url)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
            .attribute_names(QueueAttributeName::ApproximateNumberOfMessagesNotVisible)
            .send()
            .await
            .expect("get queue attributes");
        let attrs = attrs.attributes().cloned().unwrap_or_default();
        [
            QueueAttributeName::ApproximateNumberOfMessages,
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
        ]
        .iter()
        .filter_map(|name| attrs.get(name)?.parse::<u64>().ok())
        .sum()
    }

    /// Every event delivered to the sink queue so far (read and deleted), parsed.
    ///
    /// # Panics
    /// When a message is not an EventBridge event carrying the relay's envelope.
    pub async fn drain_sink(&self) -> Vec<SinkMessage> {
        self.drain_queue(&self.sink_queue_url)
            .await
            .into_iter()
            .map(|m| {
                let body = m.body().expect("message body");
                let event: serde_json::Value = serde_json::from_str(body)
                    .unwrap_or_else(|e| panic!("sink message {body:?}: {e}"));
                let envelope =
                    serde_json::from_value(event["detail"].clone()).unwrap_or_else(|e| {
                        panic!("sink message detail is not an envelope ({e}): {body}")
                    });
                SinkMessage { event, envelope }
            })
            .collect()
    }

    /// Waits until the sink queue holds at least `count` messages or `timeout` passes, then drains it.
    pub async fn wait_for_sink(&self, count: u64, timeout: Duration) -> Vec<SinkMessage> {
        let deadline = Instant::now() + timeout;
        while self.queue_depth(&self.sink_queue_url).await < count && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.drain_sink().await
    }

    /// Every dead letter on the dead-letter queue so far (read and deleted), parsed.
    pub async fn drain_dead_letters(&self) -> Vec<outbox_shared::DeadLetter> {
        self.drain_queue(&self.dead_letter_queue_url)
            .await
            .into_iter()
            .map(|m| serde_json::from_str(m.body().expect("body")).expect("dead letter JSON"))
            .collect()
    }

    /// Every record on the table's stream so far, all shards, oldest first.
    pub async fn stream_records(&self) -> Vec<aws_sdk_dynamodbstreams::types::Record> {
        let description = self
            .streams
            .describe_stream()
            .stream_arn(&self.stream_arn)
            .send()
            .await
            .expect("describe stream")
            .stream_description
            .expect("stream description");
        let mut records = Vec::new();
        for shard in description.shards() {
            let mut iterator = self
                .streams
                .get_shard_iterator()
                .stream_arn(&self.stream_arn)
                .shard_id(shard.shard_id().expect("shard id"))
                .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::TrimHorizon)
                .send()
                .await
                .expect("get shard iterator")
                .shard_iterator;
            while let Some(current) = iterator {
                let page = self
                    .streams
                    .get_records()
                    .shard_iterator(current)
                    .send()
                    .await
                    .expect("get records");
                if page.records().is_empty() {
                    break;
                }
                records.extend(page.records().iter().cloned());
                iterator = page.next_shard_iterator;
            }
        }
        records
    }

    /// Every item in the table (a full scan).
    pub async fn scan_items(&self) -> Vec<HashMap<String, AttributeValue>> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let page = self
                .dynamodb
                .scan()
                .table_name(&self.table_name)
                .set_exclusive_start_key(start)
                .send()
                .await
                .expect("scan");
            items.extend(page.items().iter().cloned());
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return items;
            }
        }
    }

    /// Every outbox event item in the table, decoded through the shared struct.
    pub async fn outbox_items(&self) -> Vec<OutboxItem> {
        self.scan_items()
            .await
            .into_iter()
            .filter(|item| {
                item.get(outbox_shared::schema::attr::ENTITY_TYPE)
                    .and_then(|v| v.as_s().ok())
                    .is_some_and(|t| t == outbox_shared::schema::entity::OUTBOX_EVENT)
            })
            .map(|item| serde_dynamo::from_item(item).expect("outbox item decodes"))
            .collect()
    }

    /// Number of items in the pending index (`GSI1`), all shards.
    pub async fn pending_in_index(&self) -> usize {
        let mut count = 0;
        let mut start = None;
        loop {
            let page = self
                .dynamodb
                .scan()
                .table_name(&self.table_name)
                .index_name(outbox_shared::schema::DEFAULT_INDEX_NAME)
                .set_exclusive_start_key(start)
                .send()
                .await
                .expect("scan index");
            count += page.items().len();
            start = page.last_evaluated_key().cloned();
            if start.is_none() {
                return count;
            }
        }
    }
}
