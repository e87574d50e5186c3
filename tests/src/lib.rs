//! Test harness for integration and end-to-end tests against the local AWS emulator.
//!
//! [`TestEnv::new`] gives each test its own randomly named table, EventBridge bus (with archive) and
//! dead-letter queue, all created from `infra/template.yaml` by `outbox_infra`, plus a sink SQS queue
//! that receives everything on the bus through a rule. Run the tests with `make test`, which installs
//! and starts the emulators (DynamoDB Local for DynamoDB and its streams, moto for EventBridge and
//! SQS) and points the SDK's standard endpoint variables at them.

pub mod cbor;
pub mod dynamodb_reads;
pub mod dynamodb_rules;
pub mod fault_proxy;
pub mod fixtures;
pub mod lambda_events;
pub mod latency_model;
pub mod local_http;
pub mod otlp;
pub mod regions;

use std::collections::HashMap;
use std::net::{TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, QueueAttributeName};
use futures::StreamExt;
use outbox_infra::LocalStack;
use outbox_shared::envelope::Envelope;
use outbox_shared::schema::{self, attr, entity};
use outbox_shared::{OutboxConfig, OutboxItem, PayloadRef};
use outbox_writer::{NewOrder, OrderLine, OutboxWriter, WriterConfig};
use rand::Rng;
use rand::distr::Alphanumeric;
use relay_runtime::{PublisherConfig, TargetKind};

/// The EventBridge `Source` the test environment publishes with.
pub const TEST_SOURCE: &str = "test.orders";

/// The payload bucket of a consumer whose events all carry their data: its resolver reads none,
/// and would refuse a reference to any bucket that exists.
pub const NO_PAYLOAD_BUCKET: &str = "no-payloads-read";

const HOW_TO_RUN: &str = "run the tests with `make test` (it installs the pinned emulators into \
     .venv and .dynamodb-local and starts them), or start them with `scripts/emulator.sh start && eval \"$(scripts/emulator.sh env)\"` \
     and then run cargo test";

/// Where the local emulators answer, as the SDK's standard endpoint variables say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoints {
    /// `AWS_ENDPOINT_URL`: every service without its own variable (moto: EventBridge, SQS).
    pub default: String,
    /// `AWS_ENDPOINT_URL_DYNAMODB` (DynamoDB Local).
    pub dynamodb: String,
    /// `AWS_ENDPOINT_URL_DYNAMODB_STREAMS` (DynamoDB Local).
    pub dynamodb_streams: String,
    /// `AWS_ENDPOINT_URL_EVENTBRIDGEV2` (the local Custom Event Bus double).
    pub eventbridgev2: String,
}

impl Endpoints {
    /// Every service at `url`.
    pub fn all(url: &str) -> Self {
        Self {
            default: url.to_owned(),
            dynamodb: url.to_owned(),
            dynamodb_streams: url.to_owned(),
            eventbridgev2: url.to_owned(),
        }
    }

    /// The variables that point the SDK here, for a child process.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.default.clone()),
            ("AWS_ENDPOINT_URL_DYNAMODB", self.dynamodb.clone()),
            (
                "AWS_ENDPOINT_URL_DYNAMODB_STREAMS",
                self.dynamodb_streams.clone(),
            ),
            ("AWS_ENDPOINT_URL_EVENTBRIDGEV2", self.eventbridgev2.clone()),
        ]
    }

    /// The endpoint that serves a call to this URL path: the Custom Event Bus's operations
    /// (Smithy RPC v2 CBOR, `/service/AWSEventsV2/operation/…`, no `X-Amz-Target`) go to the
    /// double, every other call as [`for_target`](Self::for_target) says.
    pub fn for_request(&self, path: &str, target: &str) -> &str {
        if path.starts_with(CUSTOM_BUS_PATH) {
            &self.eventbridgev2
        } else {
            self.for_target(target)
        }
    }

    /// The endpoint that serves a call with this `X-Amz-Target` header.
    pub fn for_target(&self, target: &str) -> &str {
        if target.starts_with("DynamoDBStreams_") {
            &self.dynamodb_streams
        } else if target.starts_with("DynamoDB_") {
            &self.dynamodb
        } else {
            &self.default
        }
    }
}

/// The emulators' endpoints, each checked to be reachable.
///
/// # Panics
/// With instructions when a variable is unset or nothing answers there: integration tests never
/// pass without the emulators.
pub fn emulator_endpoints() -> Endpoints {
    let read = |variable: &str| {
        let Ok(endpoint) = std::env::var(variable) else {
            panic!(
                "{variable} is not set, so there is no local AWS emulator to test against: {HOW_TO_RUN}"
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
            "the local AWS emulator at {variable}={endpoint} does not answer: {HOW_TO_RUN}"
        );
        endpoint
    };
    Endpoints {
        default: read("AWS_ENDPOINT_URL"),
        dynamodb: read("AWS_ENDPOINT_URL_DYNAMODB"),
        dynamodb_streams: read("AWS_ENDPOINT_URL_DYNAMODB_STREAMS"),
        eventbridgev2: read("AWS_ENDPOINT_URL_EVENTBRIDGEV2"),
    }
}

/// The URL path prefix of the Custom Event Bus's operations (Smithy RPC v2 CBOR).
pub const CUSTOM_BUS_PATH: &str = "/service/AWSEventsV2/operation/";

/// The role the test subscribers name (the double stores it only, as moto does a rule's).
const TEST_ROLE_ARN: &str = "arn:aws:iam::123456789012:role/outbox-tests-delivery";

/// A loopback port nothing listens on, for a process to bind (or for a connection to be refused
/// on): below the kernel's ephemeral range (32768 and up on Linux), free on both families. A port
/// from that range (what binding port 0 gives, released) is what any other server of the suite,
/// or any outgoing connection, may get next: one took it before `cargo lambda watch` bound it.
/// (On a machine without IPv6 the IPv4 check alone decides.)
///
/// # Panics
/// When a thousand ports in a row are taken.
#[must_use]
pub fn unused_port() -> u16 {
    for _ in 0..1000 {
        let port = rand::random_range(20_000..32_768);
        let taken = |bound: std::io::Result<std::net::TcpListener>| {
            bound.is_err_and(|e| e.kind() == std::io::ErrorKind::AddrInUse)
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok()
            && !taken(std::net::TcpListener::bind(("::", port)))
        {
            return port;
        }
    }
    panic!("no free loopback port in 20000..32768 after a thousand tries");
}

/// Turns the TTL of `table` on (or off) on `attribute`.
///
/// # Panics
/// When DynamoDB refuses the change.
pub async fn set_time_to_live(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
    enabled: bool,
    attribute: &str,
) {
    dynamodb
        .update_time_to_live()
        .table_name(table)
        .time_to_live_specification(
            aws_sdk_dynamodb::types::TimeToLiveSpecification::builder()
                .enabled(enabled)
                .attribute_name(attribute)
                .build()
                .expect("a TTL specification"),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("TTL of {table} enabled {enabled} on {attribute}: {e}"));
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
/// The first call builds the whole workspace with its tests, once per test process; later calls
/// only find the binary. A whole-workspace build is the feature resolution of
/// `cargo test --workspace`, and `make test` runs this build before the tests, so there it is a
/// no-op, where a one-package build would recompile the SDK crates with other features (and the
/// next test build would recompile them back).
///
/// # Panics
/// When cargo cannot build the workspace, or the binary is not one of its binaries.
pub fn workspace_binary(bin: &str) -> PathBuf {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let profile_dir = BUILT
        .get_or_init(build_workspace)
        .as_ref()
        .unwrap_or_else(|e| panic!("{e}"));
    let path = profile_dir.join(bin);
    assert!(
        path.exists(),
        "{} missing after a successful build of the workspace",
        path.display()
    );
    path
}

/// Builds the workspace's binaries into the running test's target directory and profile; the
/// profile directory on success.
fn build_workspace() -> Result<PathBuf, String> {
    // Test executables live in <target>/<profile>/deps; binaries in <target>/<profile>.
    let exe = std::env::current_exe().map_err(|e| format!("current exe: {e}"))?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("test executable sits in <target>/<profile>/deps")?
        .to_path_buf();
    let target_dir = profile_dir
        .parent()
        .ok_or("profile dir has a parent")?
        .to_path_buf();
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
        .arg(&target_dir);
    if profile_dir.file_name().is_some_and(|p| p == "release") {
        command.arg("--release");
    }
    let status = command
        .status()
        .map_err(|e| format!("run cargo build: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build of the workspace failed ({status})"));
    }
    Ok(profile_dir)
}

/// A sink message read from `event`: a bus's event (the envelope or a CloudEvent as its detail),
/// a raw event's CloudEvent, or another target's message read as a bus's event. Its event is
/// read as a consumer reads it.
///
/// # Panics
/// When it holds no event the relays publish, in either format.
fn sink_message(event: serde_json::Value) -> SinkMessage {
    let body = event.get("detail").unwrap_or(&event);
    let payload_ref = body.get("dataref").map(|uri| PayloadRef {
        uri: uri.as_str().expect("dataref is a string").to_owned(),
        size: body["datasize"].as_u64().expect("datasize is a number"),
        sha256: body["datasha256"]
            .as_str()
            .expect("datasha256 is a string")
            .to_owned(),
    });
    // A claim-checked event is read as a consumer reads it once its payload is resolved: here its
    // data is the reference, which `TestEnv::payload_of` resolves.
    let readable = match &payload_ref {
        None => event.clone(),
        Some(_) => with_data_in_place_of_reference(&event),
    };
    let envelope = outbox_consumer::decode(&readable)
        .unwrap_or_else(|e| panic!("sink message is not an outbox event ({e}): {event}"));
    SinkMessage {
        event,
        envelope,
        payload_ref,
    }
}

/// `event` with its reference's members moved under `data` (the test's own reading, so that
/// [`outbox_consumer::decode`] reads a claim-checked event's metadata).
fn with_data_in_place_of_reference(event: &serde_json::Value) -> serde_json::Value {
    let mut event = event.clone();
    let body = match event.get_mut("detail") {
        Some(detail) => detail,
        None => &mut event,
    };
    let object = body.as_object_mut().expect("an event is a JSON object");
    let reference: serde_json::Map<String, serde_json::Value> =
        ["dataref", "datasize", "datasha256"]
            .into_iter()
            .filter_map(|name| object.remove(name).map(|v| (name.to_owned(), v)))
            .collect();
    object.insert("data".to_owned(), serde_json::Value::Object(reference));
    event
}

/// One event as the target delivered it to the sink (for SNS, SQS and Kinesis read as an event of
/// the bus's shape: [`TestEnv::drain_sink`]).
#[derive(Debug, Clone)]
pub struct SinkMessage {
    /// The whole EventBridge event (`id`, `source`, `detail-type`, `detail`, …), or a raw
    /// event's CloudEvent (the Custom Event Bus, `EVENT_FORMAT=cloudevents`).
    pub event: serde_json::Value,
    /// The event, read as a consumer reads it (`outbox_consumer::decode`): either format. For a
    /// claim-checked event, `data` holds the reference's members ([`Self::payload_ref`]).
    pub envelope: Envelope<serde_json::Value>,
    /// Where its payload is, when it was published with its payload in S3 (`dataref`).
    pub payload_ref: Option<PayloadRef>,
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

/// Sends SIGTERM to the running `child` (as ECS stops a task), without waiting for it.
///
/// # Panics
/// When the child has exited already, or `kill` can't run.
pub fn sigterm(child: &tokio::process::Child) {
    let pid = child.id().expect("running");
    std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill");
}

/// The sum of the metric `name` over the EMF documents among `lines` (a relay's log and metric
/// lines, as a child process writes them to stderr).
pub fn metric_sum(lines: &str, name: &str) -> u64 {
    lines
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|doc| doc.get("_aws").is_some())
        .filter_map(|doc| match doc.get(name)? {
            serde_json::Value::Number(n) => n.as_u64(),
            serde_json::Value::Array(values) => {
                Some(values.iter().filter_map(serde_json::Value::as_u64).sum())
            }
            _ => None,
        })
        .sum()
}

/// A pending outbox item with only the required attributes, as another client (any language, no
/// writer) writes it: in `user`'s item collection, created at `created_at`, on index shard `shard`.
pub fn minimal_outbox_item(
    user: &str,
    event_id: &str,
    event_type: &str,
    payload: &str,
    created_at: &str,
    shard: u16,
) -> HashMap<String, AttributeValue> {
    [
        (attr::PK, schema::user_pk(user)),
        (attr::SK, schema::outbox_sk(event_id)),
        (attr::ENTITY_TYPE, entity::OUTBOX_EVENT.to_owned()),
        (attr::EVENT_ID, event_id.to_owned()),
        (attr::EVENT_TYPE, event_type.to_owned()),
        (attr::PAYLOAD, payload.to_owned()),
        (attr::STATUS, schema::status::PENDING.to_owned()),
        (attr::CREATED_AT, created_at.to_owned()),
        (attr::GSI1PK, schema::pending_shard_pk(shard)),
        (attr::GSI1SK, schema::pending_sort_key(created_at, event_id)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), AttributeValue::S(v)))
    .collect()
}

/// The SDK configuration for the emulator and the clients every environment holds; with
/// `credentials`, those instead of the ones the environment variables name.
async fn clients(
    credentials: Option<&TestCredentials>,
) -> (
    SdkConfig,
    aws_sdk_dynamodb::Client,
    aws_sdk_eventbridge::Client,
    aws_sdk_sqs::Client,
) {
    // The SDK reads the endpoints from the standard variables, as the relays do.
    emulator_endpoints();
    let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
    if let Some(credentials) = credentials {
        loader = loader.credentials_provider(aws_sdk_dynamodb::config::Credentials::new(
            &credentials.access_key_id,
            &credentials.secret_access_key,
            None,
            None,
            "outbox-tests",
        ));
    }
    let sdk_config = loader.load().await;
    (
        sdk_config.clone(),
        aws_sdk_dynamodb::Client::new(&sdk_config),
        aws_sdk_eventbridge::Client::new(&sdk_config),
        aws_sdk_sqs::Client::new(&sdk_config),
    )
}

/// The access key one test environment signs with.
///
/// DynamoDB Local keeps a separate database for each access key (it runs without `-sharedDb`),
/// and its calls slow down with every table a database holds: after the suite's first few dozen
/// tests a `PutItem` took 33 ms instead of 2.4 ms. A key of its own gives each test an empty
/// database, as its own AWS account would. moto serves every key as the same account.
#[derive(Debug, Clone, PartialEq, Eq)]
struct TestCredentials {
    access_key_id: String,
    secret_access_key: String,
}

impl TestCredentials {
    fn unique() -> Self {
        let suffix: String = rand::rng()
            .sample_iter(&Alphanumeric)
            .take(16)
            .map(|c| char::from(c).to_ascii_uppercase())
            .collect();
        Self {
            access_key_id: format!("AKIATEST{suffix}"),
            secret_access_key: "outbox-tests".to_owned(),
        }
    }
}

/// A private set of emulator resources for one test.
#[derive(Debug, Clone)]
pub struct TestEnv {
    pub sdk_config: SdkConfig,
    /// The access key of this environment's own database, when it has one (see
    /// [`TestCredentials`]); `None` signs with the environment variables' credentials.
    credentials: Option<TestCredentials>,
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub streams: aws_sdk_dynamodbstreams::Client,
    pub eventbridge: aws_sdk_eventbridge::Client,
    /// The Custom Event Bus's client (`AWS_ENDPOINT_URL_EVENTBRIDGEV2`: the local double).
    pub eventbridgev2: aws_sdk_eventbridgev2::Client,
    pub sqs: aws_sdk_sqs::Client,
    /// SNS on moto: a topic target and its subscription into the sink queue.
    pub sns: aws_sdk_sns::Client,
    /// Kinesis on moto: a stream target, read back as the sink.
    pub kinesis: aws_sdk_kinesis::Client,
    /// Per shard of a Kinesis target, where the sink has read up to (its next shard iterator).
    kinesis_cursors: std::sync::Arc<std::sync::Mutex<HashMap<String, String>>>,
    /// Records of a Kinesis target read by [`sink_depth`](Self::sink_depth) and not drained yet.
    kinesis_unread: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    /// S3 on moto: the stream mapping's on-failure destination
    /// ([`create_discarded_batch_bucket`](Self::create_discarded_batch_bucket)).
    pub s3: aws_sdk_s3::Client,
    pub table_name: String,
    pub stream_arn: String,
    /// What the relays publish to: `bus_name` is the target (`EVENT_TARGET`): the classic bus's
    /// name, the Custom Event Bus's ARN, a topic's ARN, a queue's URL or a stream's ARN.
    pub target_kind: TargetKind,
    pub bus_name: String,
    /// Receives every event published: through a rule (classic), a FIFO subscriber (custom), a
    /// raw subscription (SNS), or it is the target itself (SQS); a Kinesis target is read back.
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
        let credentials = TestCredentials::unique();
        let (sdk_config, dynamodb, eventbridge, sqs) = clients(Some(&credentials)).await;
        let stack = LocalStack::provision(&dynamodb, &eventbridge, &sqs, &unique_name("t"))
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Self::on(
            stack,
            Some(credentials),
            sdk_config,
            dynamodb,
            eventbridge,
            sqs,
        )
    }

    /// Like [`new`](Self::new) with a bus of `kind`: for [`TargetKind::Custom`] a Custom Event Bus on
    /// the local double with a FIFO subscriber into a FIFO sink queue (the group as the
    /// `MessageGroupId`, the bus's event id as the `MessageDeduplicationId`), in place of the
    /// classic bus and its sink.
    ///
    /// # Panics
    /// When the emulator or the double is missing or refuses to create a resource.
    pub async fn with_bus(kind: TargetKind) -> Self {
        let mut env = Self::new().await;
        if kind == TargetKind::Custom {
            let (bus_arn, sink) = env.create_custom_bus(true).await;
            env.target_kind = TargetKind::Custom;
            env.bus_name = bus_arn;
            env.sink_queue_url = sink;
        }
        env
    }

    /// Like [`new`](Self::new) with a target of `kind`: a bus ([`with_bus`](Self::with_bus)), or a
    /// FIFO SNS topic delivering into a FIFO sink queue (raw messages), a FIFO SQS queue that is
    /// the sink itself, or a Kinesis stream read back as the sink.
    ///
    /// # Panics
    /// When the emulator refuses a resource.
    pub async fn with_target(kind: TargetKind) -> Self {
        Self::with_target_of(kind, true).await
    }

    /// Like [`with_target`](Self::with_target), the topic or queue FIFO or standard.
    ///
    /// # Panics
    /// When the emulator refuses a resource.
    pub async fn with_target_of(kind: TargetKind, fifo: bool) -> Self {
        if kind.is_bus() {
            return Self::with_bus(kind).await;
        }
        let mut env = Self::new().await;
        env.target_kind = kind;
        match kind {
            TargetKind::Sqs => {
                let queue = env.create_sink_queue("sqs-target", fifo).await;
                env.bus_name = queue.clone();
                env.sink_queue_url = queue;
            }
            TargetKind::Sns => {
                let (topic, queue) = env.create_topic(fifo).await;
                env.bus_name = topic;
                env.sink_queue_url = queue;
            }
            TargetKind::Kinesis => env.bus_name = env.create_stream().await,
            TargetKind::Classic | TargetKind::Custom => unreachable!("a bus"),
        }
        env
    }

    /// A new queue, FIFO (its name ending `.fifo`) or standard; its URL.
    ///
    /// # Panics
    /// When moto refuses it.
    pub async fn create_sink_queue(&self, prefix: &str, fifo: bool) -> String {
        if !fifo {
            return self.create_queue(&unique_name(prefix)).await;
        }
        self.sqs
            .create_queue()
            .queue_name(format!("{}.fifo", unique_name(prefix)))
            .attributes(QueueAttributeName::FifoQueue, "true")
            .send()
            .await
            .expect("create FIFO queue")
            .queue_url()
            .expect("queue url")
            .to_owned()
    }

    /// An SNS topic (FIFO or standard) with a raw subscription into a new queue of the same
    /// kind, as a consumer subscribes; the topic's ARN and the queue's URL.
    ///
    /// # Panics
    /// When moto refuses a resource.
    pub async fn create_topic(&self, fifo: bool) -> (String, String) {
        let name = unique_name("topic");
        let mut create = self.sns.create_topic();
        create = if fifo {
            create
                .name(format!("{name}.fifo"))
                .attributes("FifoTopic", "true")
        } else {
            create.name(name)
        };
        let topic = create
            .send()
            .await
            .expect("create topic")
            .topic_arn()
            .expect("topic ARN")
            .to_owned();
        let queue = self.create_sink_queue("topic-sink", fifo).await;
        self.sns
            .subscribe()
            .topic_arn(&topic)
            .protocol("sqs")
            .endpoint(self.queue_arn(&queue).await)
            .attributes("RawMessageDelivery", "true")
            .send()
            .await
            .expect("subscribe the sink queue");
        (topic, queue)
    }

    /// A Kinesis data stream of two shards; its ARN.
    ///
    /// # Panics
    /// When moto refuses it.
    pub async fn create_stream(&self) -> String {
        let name = unique_name("stream");
        self.kinesis
            .create_stream()
            .stream_name(&name)
            .shard_count(2)
            .send()
            .await
            .expect("create stream");
        self.kinesis
            .describe_stream_summary()
            .stream_name(&name)
            .send()
            .await
            .expect("describe stream")
            .stream_description_summary()
            .expect("a summary")
            .stream_arn()
            .to_owned()
    }

    /// Every record put on the Kinesis target since the last read, each shard from where the
    /// last read left it (its start, the first time), shard after shard.
    async fn read_stream(&self) -> Vec<Vec<u8>> {
        let shards = self
            .kinesis
            .list_shards()
            .stream_arn(&self.bus_name)
            .send()
            .await
            .expect("list shards");
        let mut data = Vec::new();
        for shard in shards.shards() {
            let id = shard.shard_id().to_owned();
            let known = self
                .kinesis_cursors
                .lock()
                .expect("cursors")
                .get(&id)
                .cloned();
            let mut iterator = match known {
                Some(iterator) => iterator,
                None => self
                    .kinesis
                    .get_shard_iterator()
                    .stream_arn(&self.bus_name)
                    .shard_id(&id)
                    .shard_iterator_type(aws_sdk_kinesis::types::ShardIteratorType::TrimHorizon)
                    .send()
                    .await
                    .expect("shard iterator")
                    .shard_iterator()
                    .expect("an iterator")
                    .to_owned(),
            };
            loop {
                let read = self
                    .kinesis
                    .get_records()
                    .shard_iterator(&iterator)
                    .stream_arn(&self.bus_name)
                    .limit(1000)
                    .send()
                    .await
                    .expect("get records");
                let records = read.records();
                data.extend(records.iter().map(|r| r.data().as_ref().to_vec()));
                let Some(next) = read.next_shard_iterator() else {
                    break;
                };
                iterator = next.to_owned();
                if records.is_empty() {
                    break;
                }
            }
            self.kinesis_cursors
                .lock()
                .expect("cursors")
                .insert(id, iterator);
        }
        data
    }

    /// Creates a Custom Event Bus on the double and a subscriber (FIFO, or UNORDERED) into a new
    /// queue (FIFO for a FIFO subscriber); the bus's ARN and the queue's URL.
    ///
    /// # Panics
    /// When the double or moto refuses a resource.
    pub async fn create_custom_bus(&self, fifo: bool) -> (String, String) {
        use aws_sdk_eventbridgev2::types::{InvokeConfiguration, OrderingType, SqsParameters};
        let bus_arn = self
            .eventbridgev2
            .create_event_bus()
            .name(unique_name("custom-bus"))
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "create a Custom Event Bus on the double: {}",
                    aws_sdk_eventbridgev2::error::DisplayErrorContext(e)
                )
            })
            .event_bus_arn()
            .expect("the bus's ARN")
            .to_owned();
        let queue_url = if fifo {
            self.sqs
                .create_queue()
                .queue_name(format!("{}.fifo", unique_name("custom-sink")))
                .attributes(QueueAttributeName::FifoQueue, "true")
                .send()
                .await
                .expect("create FIFO sink queue")
                .queue_url()
                .expect("queue url")
                .to_owned()
        } else {
            self.create_queue(&unique_name("custom-sink")).await
        };
        let mut sqs_parameters = SqsParameters::builder();
        if fifo {
            sqs_parameters =
                sqs_parameters.message_group_id("{% $events.SystemMetadata.EventGroupId %}");
        }
        self.eventbridgev2
            .create_subscriber()
            .name(unique_name("sink"))
            .event_bus_arn(&bus_arn)
            .r#type(if fifo {
                OrderingType::Fifo
            } else {
                OrderingType::Unordered
            })
            .invoke_configuration(
                InvokeConfiguration::builder()
                    .target_arn(self.queue_arn(&queue_url).await)
                    .role_arn(TEST_ROLE_ARN)
                    .sqs_parameters(sqs_parameters.build())
                    .build()
                    .expect("target and role are set"),
            )
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "create a subscriber on the double: {}",
                    aws_sdk_eventbridgev2::error::DisplayErrorContext(e)
                )
            });
        (bus_arn, queue_url)
    }

    /// An environment over resources that already exist (a table provisioned from the template,
    /// a bus, a queue receiving everything on the bus, a dead-letter queue).
    ///
    /// # Panics
    /// When the emulator is missing or the table does not exist.
    pub async fn existing(table: &str, bus: &str, sink_queue_url: &str, dlq_url: &str) -> Self {
        let (sdk_config, dynamodb, eventbridge, sqs) = clients(None).await;
        let stack = LocalStack::existing(&dynamodb, table, bus, sink_queue_url, dlq_url)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        Self::on(stack, None, sdk_config, dynamodb, eventbridge, sqs)
    }

    fn on(
        stack: LocalStack,
        credentials: Option<TestCredentials>,
        sdk_config: SdkConfig,
        dynamodb: aws_sdk_dynamodb::Client,
        eventbridge: aws_sdk_eventbridge::Client,
        sqs: aws_sdk_sqs::Client,
    ) -> Self {
        Self {
            sns: aws_sdk_sns::Client::new(&sdk_config),
            kinesis: aws_sdk_kinesis::Client::new(&sdk_config),
            kinesis_cursors: std::sync::Arc::default(),
            kinesis_unread: std::sync::Arc::default(),
            streams: aws_sdk_dynamodbstreams::Client::new(&sdk_config),
            eventbridgev2: aws_sdk_eventbridgev2::Client::new(&sdk_config),
            s3: aws_sdk_s3::Client::new(&sdk_config),
            sdk_config,
            credentials,
            dynamodb,
            eventbridge,
            sqs,
            table_name: stack.table_name,
            stream_arn: stack.stream_arn,
            target_kind: TargetKind::Classic,
            bus_name: stack.bus_name,
            sink_queue_url: stack.sink_queue_url,
            dead_letter_queue_url: stack.dead_letter_queue_url,
        }
    }

    /// Adds a rule on the bus that sends every event to `queue_url` (the sink queue has one; tests
    /// add more for independent counts).
    pub async fn route_all_events_to(&self, queue_url: &str) {
        outbox_infra::route_all_events(
            &self.eventbridge,
            &self.sqs,
            &self.bus_name,
            queue_url,
            &unique_name("all-events"),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Creates a bucket as the template's `DiscardedBatchBucket` (the stream mapping's on-failure
    /// destination); its name, for the relays' `DISCARDED_BATCH_BUCKET`.
    ///
    /// # Panics
    /// When the emulator refuses the bucket.
    pub async fn create_discarded_batch_bucket(&self) -> String {
        outbox_infra::create_discarded_batch_bucket(&self.s3, &unique_name("discarded"))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A payload bucket as the template makes it (`PAYLOAD_BUCKET`), versioned, so a test can see
    /// every object ever written in it ([`Self::object_versions`]).
    ///
    /// # Panics
    /// When the emulator refuses the bucket.
    pub async fn create_payload_bucket(&self) -> String {
        outbox_infra::create_payload_bucket(&self.s3, &unique_name("payloads"))
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The versions of the object at `key` in `bucket`: how many times it was written.
    pub async fn object_versions(&self, bucket: &str, key: &str) -> usize {
        self.s3
            .list_object_versions()
            .bucket(bucket)
            .prefix(key)
            .send()
            .await
            .expect("list object versions")
            .versions()
            .iter()
            .filter(|v| v.key() == Some(key))
            .count()
    }

    /// The payload of `message`: its data, or, claim-checked, its object read back from S3 and
    /// checked against its size and SHA-256 as a consumer checks it.
    ///
    /// # Panics
    /// When the object is gone or is not the payload the event names.
    pub async fn payload_of(&self, message: &SinkMessage) -> serde_json::Value {
        match &message.payload_ref {
            None => message.envelope.data.clone(),
            Some(reference) => {
                let bytes =
                    outbox_shared::claim_check::get(&self.s3, message.event_id(), reference)
                        .await
                        .unwrap_or_else(|e| panic!("{e}"));
                serde_json::from_slice(&bytes).expect("a payload is JSON")
            }
        }
    }

    /// The keys of the objects in `bucket` (current versions), in key order.
    pub async fn object_keys(&self, bucket: &str) -> Vec<String> {
        let mut keys = Vec::new();
        let mut pages = self
            .s3
            .list_objects_v2()
            .bucket(bucket)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.expect("list objects");
            keys.extend(
                page.contents()
                    .iter()
                    .filter_map(|o| o.key().map(str::to_owned)),
            );
        }
        keys
    }

    /// The body of the object at `key` in `bucket`.
    pub async fn object(&self, bucket: &str, key: &str) -> Vec<u8> {
        self.s3
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .expect("get object")
            .body
            .collect()
            .await
            .expect("object body")
            .into_bytes()
            .to_vec()
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

    /// A writer on this environment's table, with [`TEST_SOURCE`] and the default retries.
    ///
    /// # Panics
    /// When the configuration is invalid.
    pub fn writer(&self) -> OutboxWriter {
        self.writer_with(|_| {})
    }

    /// A writer whose configuration `adjust` changes first (with a `payload_bucket`, it stores
    /// payloads too large for an item through this environment's S3 client).
    ///
    /// # Panics
    /// When the adjusted configuration is invalid.
    pub fn writer_with(&self, adjust: impl FnOnce(&mut WriterConfig)) -> OutboxWriter {
        let mut config = WriterConfig::new(self.outbox_config(), TEST_SOURCE);
        adjust(&mut config);
        OutboxWriter::with_s3(self.dynamodb.clone(), self.s3.clone(), config)
            .expect("valid writer config")
    }

    /// A writer like [`writer`](Self::writer) whose calls go through `proxy`.
    ///
    /// # Panics
    /// When the configuration is invalid.
    pub fn writer_through(&self, proxy: &fault_proxy::FaultProxy) -> OutboxWriter {
        let config = WriterConfig::new(self.outbox_config(), TEST_SOURCE);
        OutboxWriter::new(self.dynamodb_through(proxy), config).expect("valid writer config")
    }

    /// A DynamoDB client of this environment whose calls go through `proxy`.
    pub fn dynamodb_through(&self, proxy: &fault_proxy::FaultProxy) -> aws_sdk_dynamodb::Client {
        aws_sdk_dynamodb::Client::from_conf(
            aws_sdk_dynamodb::config::Builder::from(&self.sdk_config)
                .endpoint_url(proxy.url())
                .build(),
        )
    }

    /// An S3 client of this environment whose calls go through `proxy`.
    pub fn s3_through(&self, proxy: &fault_proxy::FaultProxy) -> aws_sdk_s3::Client {
        aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&self.sdk_config)
                .endpoint_url(proxy.url())
                .build(),
        )
    }

    /// Writes `count` orders through the writer (one `OrderCreated` each, users `user-0` to
    /// `user-16` in turn), `concurrency` at a time; the event ids in order. With `concurrency` 1
    /// each order's two stream records are adjacent, as a busy table's would be within a shard.
    ///
    /// # Panics
    /// When an order cannot be written.
    pub async fn create_orders(&self, count: usize, concurrency: usize) -> Vec<String> {
        let writer = self.writer();
        futures::stream::iter(0..count)
            .map(|i| {
                let writer = writer.clone();
                async move {
                    let line = OrderLine::new(format!("SKU-{i}"), 1, 100 + i as u64);
                    writer
                        .create_order_with_outbox(
                            &format!("user-{}", i % 17),
                            NewOrder::new(vec![line]),
                        )
                        .await
                        .expect("order created")
                        .event_id
                }
            })
            .buffered(concurrency.max(1))
            .collect()
            .await
    }

    /// Puts `item` into the table as another client would: no writer, no checks.
    ///
    /// # Panics
    /// When the emulator refuses the item.
    pub async fn put_raw_item(&self, item: HashMap<String, AttributeValue>) {
        self.dynamodb
            .put_item()
            .table_name(&self.table_name)
            .set_item(Some(item))
            .send()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "put item: {}",
                    aws_sdk_dynamodb::error::DisplayErrorContext(e)
                )
            });
    }

    /// A workspace binary (`relay-stream-local`, `relay-poller`, …) pointed at this environment.
    pub fn relay_command(&self, bin: &str) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(workspace_binary(bin));
        command.envs(self.relay_env());
        command
    }

    /// The publisher of `config` (this environment's bus kind or another), on a client of this
    /// environment's (no fault, no interceptor).
    ///
    /// # Panics
    /// When `config` is invalid.
    pub fn publisher(&self, config: PublisherConfig) -> relay_runtime::TargetPublisher {
        relay_runtime::TargetPublisher::new(&self.sdk_config, config)
            .expect("a valid configuration")
    }

    /// The publisher configuration for this environment's bus, with [`TEST_SOURCE`].
    pub fn publisher_config(&self) -> PublisherConfig {
        PublisherConfig::of_kind(self.target_kind, &self.bus_name, TEST_SOURCE)
    }

    /// The publisher's flags at their defaults for this environment's bus.
    pub fn publisher_args(&self) -> relay_runtime::PublisherArgs {
        fixtures::publisher_args_of(self.target_kind, &self.bus_name)
    }

    /// Environment variables that point a relay binary at this environment (and sign its calls
    /// with this environment's credentials).
    pub fn relay_env(&self) -> Vec<(&'static str, String)> {
        let mut env = self.stack().relay_env(TEST_SOURCE);
        env.push(("EVENT_TARGET_KIND", self.target_kind.to_string()));
        env.extend(self.credentials_env());
        env
    }

    /// The variables that make a child process sign its calls as this environment does (none
    /// when it signs with the environment variables' credentials).
    pub fn credentials_env(&self) -> Vec<(&'static str, String)> {
        self.credentials
            .iter()
            .flat_map(|credentials| {
                [
                    ("AWS_ACCESS_KEY_ID", credentials.access_key_id.clone()),
                    (
                        "AWS_SECRET_ACCESS_KEY",
                        credentials.secret_access_key.clone(),
                    ),
                ]
            })
            .collect()
    }

    /// The environment's resources, as `outbox-infra` provisions them.
    pub fn stack(&self) -> LocalStack {
        LocalStack {
            table_name: self.table_name.clone(),
            stream_arn: self.stream_arn.clone(),
            bus_name: self.bus_name.clone(),
            sink_queue_url: self.sink_queue_url.clone(),
            dead_letter_queue_url: self.dead_letter_queue_url.clone(),
        }
    }

    /// Reads and deletes every message on a queue, until it is empty; each with its
    /// `MessageGroupId` attribute on a FIFO queue.
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
                .message_system_attribute_names(
                    aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId,
                )
                .message_attribute_names("All")
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
        outbox_infra::queue_depth(&self.sqs, queue_url)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Every event delivered to the sink so far (read and deleted from the sink queue, or read
    /// from the Kinesis target), parsed. On a bus the message is the bus's event; on SNS and SQS
    /// the message's body is the envelope and its `eventType` attribute the type, and on Kinesis
    /// the record's data: both read here as an event of the bus's shape (`detail`,
    /// `detail-type`).
    ///
    /// # Panics
    /// When a message is not an event the relays publish.
    pub async fn drain_sink(&self) -> Vec<SinkMessage> {
        if self.target_kind == TargetKind::Kinesis {
            let mut records = std::mem::take(&mut *self.kinesis_unread.lock().expect("unread"));
            records.extend(self.read_stream().await);
            return records
                .into_iter()
                .map(|data| {
                    let detail: serde_json::Value = serde_json::from_slice(&data)
                        .unwrap_or_else(|e| panic!("a record's data is not JSON ({e})"));
                    // The envelope's type, or a CloudEvent's.
                    let detail_type = match &detail["metadata"]["eventType"] {
                        serde_json::Value::Null => detail["type"].clone(),
                        event_type => event_type.clone(),
                    };
                    sink_message(serde_json::json!({
                        "detail-type": detail_type,
                        "detail": detail,
                    }))
                })
                .collect();
        }
        self.drain_queue(&self.sink_queue_url)
            .await
            .into_iter()
            .map(|m| {
                let body = m.body().expect("message body");
                let parsed: serde_json::Value = serde_json::from_str(body)
                    .unwrap_or_else(|e| panic!("sink message {body:?}: {e}"));
                if self.target_kind.is_bus() {
                    return sink_message(parsed);
                }
                let attribute = |name: &str| {
                    m.message_attributes()
                        .and_then(|a| a.get(name))
                        .and_then(|v| v.string_value())
                        .map(str::to_owned)
                };
                sink_message(serde_json::json!({
                    "detail-type": attribute("eventType"),
                    "eventId": attribute("eventId"),
                    "group": m.attributes().and_then(|a| a.get(&aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId)),
                    "detail": parsed,
                }))
            })
            .collect()
    }

    /// Messages on the sink queue (visible or in flight), or a Kinesis target's records not
    /// drained yet (read now and kept for [`drain_sink`](Self::drain_sink)).
    pub async fn sink_depth(&self) -> u64 {
        if self.target_kind != TargetKind::Kinesis {
            return self.queue_depth(&self.sink_queue_url).await;
        }
        let read = self.read_stream().await;
        let mut unread = self.kinesis_unread.lock().expect("unread");
        unread.extend(read);
        unread.len() as u64
    }

    /// Waits until the sink holds at least `count` messages or `timeout` passes, then drains it
    /// (a Kinesis target: reads it until it has `count` records or `timeout` passes).
    pub async fn wait_for_sink(&self, count: u64, timeout: Duration) -> Vec<SinkMessage> {
        let deadline = Instant::now() + timeout;
        if self.target_kind == TargetKind::Kinesis {
            let mut all = Vec::new();
            loop {
                all.extend(self.drain_sink().await);
                if all.len() as u64 >= count || Instant::now() >= deadline {
                    return all;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        while self.queue_depth(&self.sink_queue_url).await < count && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.drain_sink().await
    }

    /// Every dead letter on the dead-letter queue so far (read and deleted), parsed.
    pub async fn drain_dead_letters(&self) -> Vec<relay_runtime::DeadLetter> {
        self.drain_queue(&self.dead_letter_queue_url)
            .await
            .into_iter()
            .map(|m| serde_json::from_str(m.body().expect("body")).expect("dead letter JSON"))
            .collect()
    }

    /// Every record on the table's stream so far, all shards, oldest first.
    pub async fn stream_records(&self) -> Vec<aws_sdk_dynamodbstreams::types::Record> {
        self.stream_records_of(&self.stream_arn).await
    }

    /// Every record of the stream `stream_arn` (another table's), from the start of each shard.
    ///
    /// # Panics
    /// When the stream can't be read.
    pub async fn stream_records_of(
        &self,
        stream_arn: &str,
    ) -> Vec<aws_sdk_dynamodbstreams::types::Record> {
        read_stream(&self.streams, stream_arn).await
    }

    /// Every item in the table (a full scan).
    pub async fn scan_items(&self) -> Vec<HashMap<String, AttributeValue>> {
        scan_table(&self.dynamodb, &self.table_name).await
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

/// Every record of the stream `stream_arn`, every shard from its start, oldest first per shard.
///
/// # Panics
/// When the stream can't be read.
pub async fn read_stream(
    streams: &aws_sdk_dynamodbstreams::Client,
    stream_arn: &str,
) -> Vec<aws_sdk_dynamodbstreams::types::Record> {
    let description = streams
        .describe_stream()
        .stream_arn(stream_arn)
        .send()
        .await
        .expect("describe stream")
        .stream_description
        .expect("stream description");
    let mut records = Vec::new();
    for shard in description.shards() {
        let mut iterator = streams
            .get_shard_iterator()
            .stream_arn(stream_arn)
            .shard_id(shard.shard_id().expect("shard id"))
            .shard_iterator_type(aws_sdk_dynamodbstreams::types::ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("get shard iterator")
            .shard_iterator;
        while let Some(current) = iterator {
            let page = streams
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

/// Every item in `table` (a full scan).
///
/// # Panics
/// When the table can't be scanned.
pub async fn scan_table(
    dynamodb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Vec<HashMap<String, AttributeValue>> {
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let page = dynamodb
            .scan()
            .table_name(table)
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
