//! A latency model of the AWS endpoints, for benchmarks: an in-process SDK HTTP client that answers
//! every call after a fixed delay, with unlimited parallelism.
//!
//! Plug it into any SDK client through [`LatencyModel::sdk_config`]. The SDK still builds, signs and
//! serializes each request and parses each response, so the measurement includes the relay's own
//! client-side cost; only the network and the service are replaced by a fixed delay.
//!
//! It models just what the relays call:
//! - `AWSEvents.PutEvents`: every entry accepted, or, under a quota ([`LatencyModel::limit_put_events`]),
//!   the entries beyond it refused with `ThrottlingException` as EventBridge does. A bus of fixed
//!   capacity ([`LatencyModel::serve_put_events`]) answers each call after the work queued ahead of
//!   it, so its latency grows with the calls in flight, as a slow bus's does.
//! - The Custom Event Bus's `PutEvents` (Smithy RPC v2 CBOR, its operation in the URL path):
//!   every entry `PUBLISHED`, in CBOR, counted as `PutEvents` (its entries too), at the same
//!   fixed capacity when one is set; no quota (the bus documents none per account).
//! - `DynamoDB_20120810.Query` on the pending index: the first `:`-value that is a pending-shard key
//!   (`OUTBOX#PENDING#n`) selects the shard; a value with the sort-key prefix (`EVENT#`) is an exclusive upper bound
//!   on `GSI1SK` (the grace-period cutoff); `Limit` and `ExclusiveStartKey` paginate, oldest first.
//! - `DynamoDB_20120810.BatchExecuteStatement` (the relays' marks): each statement removes the item
//!   its last two parameters name (`PK`, `SK`) from the pending index, and answers
//!   `ConditionalCheckFailed` on its own when the item was not pending, as the real condition
//!   would; a call of more than 25 statements, or naming one item twice, is refused whole as
//!   DynamoDB refuses it ([`crate::dynamodb_rules`]). With an index lag
//!   ([`LatencyModel::lag_index`]) the table changes at once (a second mark fails its condition)
//!   while queries of the index keep returning the marked item for the lag, as a global secondary
//!   index, eventually consistent, does on AWS (DynamoDB Local updates its indexes synchronously).
//! - `DynamoDB_20120810.UpdateItem` (the poller's TTL refresh, conditioned on the item being
//!   pending): applied, the item left pending, when it is pending; otherwise it fails with
//!   `ConditionalCheckFailedException` as the real condition would.
//! - The aggregate holds ([`holds`]): `UpdateItem`s, `DeleteItem`s and reads by key of hold items
//!   (`HOLD#…`), with their conditions, and `Query`s of the hold partitions; a `BatchGetItem` of
//!   outbox events answers each with its `GSI1PK` while it is pending.
//! - The SNS, SQS and Kinesis targets' calls, `PublishBatch` (SNS's query protocol: the form in,
//!   XML out), `SendMessageBatch` and `PutRecords`: every entry accepted and counted with the
//!   `PutEvents` entries, after the same fixed delay (AWS documents no latency for any of these
//!   calls, nor for `PutEvents`: the delay stands for a round trip in the region); a stream's
//!   write quota when one is set ([`LatencyModel::limit_stream_writes`], 1,000 records a second
//!   a shard), a record beyond it refused with `ProvisionedThroughputExceededException`. No quota
//!   for SNS or SQS: a standard queue's and topic's throughput is not limited per call, and a
//!   FIFO one's (3,000 messages a second a queue without high throughput, SQS developer guide,
//!   "Amazon SQS message quotas"; 3,000 a second a topic at the topic scope, SNS
//!   `FifoThroughputScope`) refuses whole calls, which the model does not do: docs/benchmarks.md
//!   compares the relay's rate with it.
//! - An outage ([`LatencyModel::fail_put_events`]): every `PutEvents` call, on either bus, answered
//!   HTTP 500 (`InternalFailure`, `InternalException`), as a bus that is down answers.
//! - What a consumer would see ([`LatencyModel::track_order`]): each accepted entry's aggregate
//!   and sequence, read from its envelope, counted as delivered, a duplicate, or out of order.
//! - `DynamoDB_20120810.PutItem` / `TransactWriteItems` / `SQS SendMessage`-style calls: accepted.
//!
//! Calls are counted per operation ([`LatencyModel::calls`]).
//!
//! The delay is waited out on one of two clocks ([`Clock`]): tokio's timer, which a test's paused
//! clock drives, or an exact one for benchmarks, which wakes the caller's runtime the way a
//! socket's answer does.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_dynamodb::config::{Credentials, SharedCredentialsProvider};
use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::{HttpRequest, HttpResponse};
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_runtime_api::http::StatusCode;
use aws_smithy_types::body::SdkBody;
use outbox_shared::OutboxItem;
use outbox_shared::schema::{self, attr};
use serde_json::{Value, json};

mod holds;

/// Pending items of one shard, by `GSI1SK`.
type Shard = BTreeMap<String, Pending>;

/// A pending item as the index holds it: its table key and its DynamoDB JSON, written once when
/// seeded, so a query copies text instead of cloning and serializing a tree per item (the model's
/// own CPU is counted in every benchmark that uses it).
#[derive(Debug)]
struct Pending {
    pk: String,
    sk: String,
    wire: Box<str>,
}

#[derive(Debug, Default)]
struct State {
    /// `GSI1PK` -> items in `GSI1SK` order.
    index: HashMap<String, Shard>,
    /// (`PK`, `SK`) -> (`GSI1PK`, `GSI1SK`) of pending items.
    keys: HashMap<(String, String), (String, String)>,
    calls: BTreeMap<String, u64>,
    /// `PutEvents` entries received, and of those refused for the quota.
    entries: u64,
    throttled: u64,
    quota: Option<Quota>,
    /// A Kinesis stream's write quota, its shards' records per second together
    /// ([`LatencyModel::limit_stream_writes`]).
    stream_quota: Option<Quota>,
    /// `PutEvents` served at a fixed capacity.
    server: Option<Server>,
    /// How long a marked item stays in query results ([`LatencyModel::lag_index`]).
    index_lag: Duration,
    /// Marked items still in the index until their time: (when, `GSI1PK`, `GSI1SK`), in mark
    /// order.
    leaving: std::collections::VecDeque<(tokio::time::Instant, String, String)>,
    /// `EventId`s handed out.
    event_ids: u64,
    /// The aggregate holds.
    holds: holds::Holds,
    /// The bus is down: every `PutEvents` call fails.
    put_events_down: bool,
    /// What a consumer sees, when tracked.
    order: Option<OrderTracker>,
}

/// Per aggregate, the sequences accepted so far: what a FIFO consumer would receive.
#[derive(Debug, Default)]
struct OrderTracker {
    seen: HashMap<String, (u64, std::collections::HashSet<u64>)>,
    report: OrderReport,
}

/// What a consumer received, per aggregate: events, repeats of an event already received, and
/// events received after a later one of their aggregate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OrderReport {
    pub delivered: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
}

impl OrderTracker {
    /// Records an accepted entry whose `Detail` is `detail`.
    fn accept(&mut self, detail: &str) {
        #[derive(serde::Deserialize)]
        struct Envelope {
            metadata: Metadata,
        }
        #[derive(serde::Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Metadata {
            aggregate_id: Option<String>,
            sequence: Option<u64>,
        }
        let Ok(Envelope { metadata }) = serde_json::from_str::<Envelope>(detail) else {
            return;
        };
        let (Some(aggregate), Some(sequence)) = (metadata.aggregate_id, metadata.sequence) else {
            return;
        };
        let (latest, seen) = self.seen.entry(aggregate).or_default();
        if !seen.insert(sequence) {
            self.report.duplicates += 1;
            return;
        }
        self.report.delivered += 1;
        if sequence < *latest {
            self.report.out_of_order += 1;
        }
        *latest = (*latest).max(sequence);
    }
}

/// What the aggregate holds on the model came to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HoldReport {
    /// Holds now.
    pub holds: usize,
    /// The largest hold item written, bytes as DynamoDB counts them.
    pub largest_item: usize,
    /// Hold items the poller's `Query`s returned.
    pub items_read: u64,
    /// Event keys read by key (`BatchGetItem`) to tell whether a hold's last event is pending.
    pub event_keys_read: u64,
    pub released: u64,
}

/// EventBridge's `PutEvents` quota as a token bucket: `per_second` tokens a second, at most one
/// second's worth saved up.
#[derive(Debug)]
struct Quota {
    per_second: f64,
    tokens: f64,
    refilled_at: tokio::time::Instant,
}

impl Quota {
    fn take(&mut self) -> bool {
        let now = tokio::time::Instant::now();
        let earned = now.duration_since(self.refilled_at).as_secs_f64() * self.per_second;
        self.tokens = (self.tokens + earned).min(self.per_second);
        self.refilled_at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// A bus that serves `PutEvents` calls one at a time, in the order they arrive, each for its
/// entries / `per_second`: a single server with a deterministic service time (M/D/1-like), so a
/// call waits for the work queued ahead of it and latency grows with the calls in flight.
#[derive(Debug)]
struct Server {
    per_second: f64,
    /// When the work queued so far is done.
    free_at: tokio::time::Instant,
}

impl Server {
    /// Queues a call of `entries` arriving now: how long until it is served.
    fn queue(&mut self, entries: usize) -> Duration {
        let now = tokio::time::Instant::now();
        let start = self.free_at.max(now);
        self.free_at = start + Duration::from_secs_f64(entries as f64 / self.per_second);
        self.free_at - now
    }
}

/// An operation that turns slow: after `after_calls` calls, it answers after `delay`.
#[derive(Debug, Clone)]
struct Slowdown {
    operation: String,
    after_calls: u64,
    delay: Duration,
}

/// What the model waits out a call's delay on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Clock {
    /// tokio's timer, so a test on a paused clock runs in virtual time. A sleep ends on the
    /// timer's next millisecond tick, and the runtime parks for whole milliseconds: a 10 ms call
    /// took 11.4 ms (median of 200 on a one-thread runtime), which a real network does not add.
    #[default]
    Tokio,
    /// `async-io`'s timer, which keeps its own thread and waits to a fraction of a millisecond
    /// (a `timerfd` on Linux); its wake reaches the caller's runtime as a socket's answer would.
    /// A 10 ms sleep took 10.1 ms (median of 200). Wall time only: a paused clock does not
    /// drive it. For benchmarks.
    Exact,
}

impl Clock {
    /// The clock a benchmark runs the model on: `LATENCY_MODEL_CLOCK` (`exact` or `tokio`),
    /// [`Clock::Exact`] when unset, so an earlier figure taken on tokio's timer can be re-run.
    ///
    /// # Panics
    /// When the variable holds anything else.
    pub fn for_benchmarks() -> Self {
        match std::env::var("LATENCY_MODEL_CLOCK").as_deref() {
            Err(std::env::VarError::NotPresent) | Ok("exact") => Self::Exact,
            Ok("tokio") => Self::Tokio,
            other => panic!("LATENCY_MODEL_CLOCK must be `exact` or `tokio`, not {other:?}"),
        }
    }

    /// Its name in `LATENCY_MODEL_CLOCK`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Tokio => "tokio",
            Self::Exact => "exact",
        }
    }
}

/// The model; cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct LatencyModel {
    delay: Duration,
    clock: Clock,
    state: Arc<Mutex<State>>,
    slowdown: Arc<Mutex<Option<Slowdown>>>,
}

impl LatencyModel {
    /// A model that answers every call after `delay`, on tokio's timer.
    pub fn new(delay: Duration) -> Self {
        Self {
            delay,
            clock: Clock::Tokio,
            state: Arc::default(),
            slowdown: Arc::default(),
        }
    }

    /// Waits out the delays on `clock`.
    #[must_use]
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Makes `operation` (`PutEvents`, `UpdateItem`, …) answer after `delay` once it has answered
    /// `after_calls` calls: an endpoint that turns slow mid-way. The call still takes effect at
    /// once, as a real call whose reply is late does.
    pub fn turn_slow(&self, operation: &str, after_calls: u64, delay: Duration) {
        *self.slowdown.lock().expect("model slowdown") = Some(Slowdown {
            operation: operation.to_owned(),
            after_calls,
            delay,
        });
    }

    /// Gives `PutEvents` a quota of `entries_per_second` (a token bucket holding one second's
    /// worth, full at the start): entries beyond it fail with `ThrottlingException`. Time is
    /// tokio's, so a test on a paused clock sees the quota in virtual time.
    pub fn limit_put_events(&self, entries_per_second: u32) {
        let per_second = f64::from(entries_per_second);
        self.state.lock().expect("model state").quota = Some(Quota {
            per_second,
            tokens: per_second,
            refilled_at: tokio::time::Instant::now(),
        });
    }

    /// Gives `PutRecords` the write quota of a stream of `shards` shards: 1,000 records a second
    /// per shard, AWS's documented limit ("Each shard can support writes up to 1,000 records per
    /// second, up to a maximum data write total of 1 MiB per second", Kinesis API reference,
    /// `PutRecords`), as one token bucket of `shards` × 1,000 records a second (one second's
    /// worth, full at the start): the relay's partition keys, one per aggregate, spread evenly
    /// over the shards, so the model does not hash them to shards; events of a few hundred bytes
    /// reach the record limit long before the 1 MiB one. A record beyond it is refused with
    /// `ProvisionedThroughputExceededException`, the call answering HTTP 200 with
    /// `FailedRecordCount`, as Kinesis does. Time is tokio's.
    pub fn limit_stream_writes(&self, shards: u32) {
        let per_second = f64::from(shards) * 1_000.0;
        self.state.lock().expect("model state").stream_quota = Some(Quota {
            per_second,
            tokens: per_second,
            refilled_at: tokio::time::Instant::now(),
        });
    }

    /// Makes the pending index lag the table by `lag`: a marked item is out of the table's pending
    /// set at once (its condition fails for a second mark) and still in query results for `lag`.
    pub fn lag_index(&self, lag: Duration) {
        self.state.lock().expect("model state").index_lag = lag;
    }

    /// Makes `PutEvents` a bus of fixed capacity: it serves `entries_per_second` entries, one call
    /// at a time in arrival order, so a call is answered once the calls queued ahead of it and its
    /// own entries are served (plus the model's delay). A call takes effect when it arrives, and
    /// one the client stops waiting for (a timeout) stays queued, as a request the bus has
    /// received does: its entries are published and its work delays the calls behind it. Time is
    /// tokio's, so a test on a paused clock sees the queue in virtual time.
    pub fn serve_put_events(&self, entries_per_second: u32) {
        self.state.lock().expect("model state").server = Some(Server {
            per_second: f64::from(entries_per_second),
            free_at: tokio::time::Instant::now(),
        });
    }

    /// While `down`, every `PutEvents` call (either bus) fails with HTTP 500, as a bus in an
    /// outage answers; nothing is published.
    pub fn fail_put_events(&self, down: bool) {
        self.state.lock().expect("model state").put_events_down = down;
    }

    /// Reads each accepted entry's aggregate and sequence from its envelope from now on, as a
    /// consumer receiving them in order would ([`Self::order_report`]).
    pub fn track_order(&self) {
        self.state.lock().expect("model state").order = Some(OrderTracker::default());
    }

    /// What a consumer received since [`Self::track_order`].
    pub fn order_report(&self) -> OrderReport {
        self.state
            .lock()
            .expect("model state")
            .order
            .as_ref()
            .map(|o| o.report)
            .unwrap_or_default()
    }

    /// The aggregate holds now, and what was written and read of them.
    pub fn hold_report(&self) -> HoldReport {
        let state = self.state.lock().expect("model state");
        HoldReport {
            holds: state.holds.count(),
            largest_item: state.holds.largest_item,
            items_read: state.holds.items_read,
            event_keys_read: state.holds.event_keys_read,
            released: state.holds.released,
        }
    }

    /// Entries received so far (`PutEvents`'s, or the SNS, SQS or Kinesis target's), and how
    /// many of them were throttled.
    pub fn put_events_entries(&self) -> (u64, u64) {
        let state = self.state.lock().expect("model state");
        (state.entries, state.throttled)
    }

    /// SDK configuration whose clients talk to this model.
    pub fn sdk_config(&self) -> SdkConfig {
        SdkConfig::builder()
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new("us-east-1"))
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "latency-model",
                "latency-model",
                None,
                None,
                "latency-model",
            )))
            .endpoint_url("http://latency-model.invalid")
            .http_client(self.clone())
            .build()
    }

    /// Adds pending items to the modelled index (they must carry `GSI1PK`/`GSI1SK`).
    ///
    /// # Panics
    /// When an item has no index keys.
    pub fn seed_pending(&self, items: &[OutboxItem]) {
        let mut state = self.state.lock().expect("model state");
        for item in items {
            let gsi1pk = item.gsi1pk.clone().expect("pending item has GSI1PK");
            let gsi1sk = item.gsi1sk.clone().expect("pending item has GSI1SK");
            let pending = Pending {
                pk: item.pk.clone(),
                sk: item.sk.clone(),
                wire: to_wire_item(item).to_string().into_boxed_str(),
            };
            state.keys.insert(
                (item.pk.clone(), item.sk.clone()),
                (gsi1pk.clone(), gsi1sk.clone()),
            );
            state
                .index
                .entry(gsi1pk)
                .or_default()
                .insert(gsi1sk, pending);
        }
    }

    /// Items still pending whose sort key (`GSI1SK`) is below `sort_key`: what was written before
    /// a time ([`schema::pending_sort_key`] of it) and is not published yet.
    pub fn pending_before(&self, sort_key: &str) -> usize {
        let state = self.state.lock().expect("model state");
        state
            .keys
            .values()
            .filter(|(_, gsi1sk)| gsi1sk.as_str() < sort_key)
            .count()
    }

    /// Items still pending in the modelled index.
    pub fn pending(&self) -> usize {
        self.state.lock().expect("model state").keys.len()
    }

    /// Calls answered so far, by operation (`PutEvents`, `Query`, `UpdateItem`, …).
    pub fn calls(&self) -> BTreeMap<String, u64> {
        self.state.lock().expect("model state").calls.clone()
    }

    /// The status and body of the answer to one call, the calls of its operation so far, and how
    /// long the call waits for a server of fixed capacity ([`Self::serve_put_events`]).
    /// The hot calls (`UpdateItem`, `BatchExecuteStatement`, `PutEvents`) read only the fields they need and answer with
    /// text built directly: the model's own CPU is counted in every benchmark that uses it.
    fn answer(&self, operation: &str, body: &[u8]) -> (u16, String, u64, Duration) {
        match operation {
            "UpdateItem" => {
                let request: KeyOnly = serde_json::from_slice(body).unwrap_or_default();
                let key = (
                    request
                        .key
                        .get(attr::PK)
                        .map(|v| v.s.clone())
                        .unwrap_or_default(),
                    request
                        .key
                        .get(attr::SK)
                        .map(|v| v.s.clone())
                        .unwrap_or_default(),
                );
                let mut state = self.state.lock().expect("model state");
                let calls = state.count(operation);
                if holds::Holds::is_hold(&key.0) {
                    let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
                    let (status, body) = state.holds.update(&key.0, &request);
                    return (status, body, calls, Duration::ZERO);
                }
                if state.keys.contains_key(&key) {
                    (200, "{}".to_owned(), calls, Duration::ZERO)
                } else {
                    (
                        400,
                        r#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed"}"#
                            .to_owned(),
                        calls,
                        Duration::ZERO,
                    )
                }
            }
            "BatchExecuteStatement" => {
                // The relays' marks: each statement's last two parameters are the key.
                let request: StatementsOnly = serde_json::from_slice(body).unwrap_or_default();
                let mut state = self.state.lock().expect("model state");
                let calls = state.count(operation);
                let keys: Vec<(String, String)> = request
                    .statements
                    .iter()
                    .map(StatementParameters::key)
                    .collect();
                if let Some(message) =
                    crate::dynamodb_rules::batch_execute_statement_refusal(keys.iter().map(Some))
                {
                    let body = crate::dynamodb_rules::validation_exception(&message);
                    return (400, body.to_string(), calls, Duration::ZERO);
                }
                let responses: Vec<&str> = keys
                    .iter()
                    .map(|key| {
                        if state.unindex(key) {
                            "{}"
                        } else {
                            r#"{"Error":{"Code":"ConditionalCheckFailed","Message":"The conditional request failed"}}"#
                        }
                    })
                    .collect();
                (
                    200,
                    format!(r#"{{"Responses":[{}]}}"#, responses.join(",")),
                    calls,
                    Duration::ZERO,
                )
            }
            "PutEvents" => {
                let mut state = self.state.lock().expect("model state");
                let calls = state.count(operation);
                if state.put_events_down {
                    return (
                        500,
                        r#"{"__type":"InternalFailure","message":"the bus is down (latency model outage)"}"#
                            .to_owned(),
                        calls,
                        Duration::ZERO,
                    );
                }
                let details: Vec<String> = if state.order.is_some() {
                    serde_json::from_slice::<Value>(body)
                        .ok()
                        .and_then(|r| r["Entries"].as_array().cloned())
                        .unwrap_or_default()
                        .iter()
                        .map(|e| e["Detail"].as_str().unwrap_or_default().to_owned())
                        .collect()
                } else {
                    Vec::new()
                };
                let n = serde_json::from_slice::<EntriesOnly>(body).map_or(0, |r| r.entries.len());
                state.entries += n as u64;
                let mut failed = 0;
                let mut entries = Vec::with_capacity(n);
                for i in 0..n {
                    if state.quota.as_mut().is_none_or(Quota::take) {
                        if let (Some(order), Some(detail)) = (state.order.as_mut(), details.get(i))
                        {
                            order.accept(detail);
                        }
                        state.event_ids += 1;
                        entries.push(format!(r#"{{"EventId":"model-{}"}}"#, state.event_ids));
                    } else {
                        failed += 1;
                        entries.push(
                            r#"{"ErrorCode":"ThrottlingException","ErrorMessage":"Rate exceeded."}"#
                                .to_owned(),
                        );
                    }
                }
                state.throttled += failed;
                let queued = state.server.as_mut().map_or(Duration::ZERO, |s| s.queue(n));
                let body = format!(
                    r#"{{"FailedEntryCount":{failed},"Entries":[{}]}}"#,
                    entries.join(",")
                );
                (200, body, calls, queued)
            }
            "SendMessageBatch" | "PutRecords" | "PublishBatch" => {
                let mut state = self.state.lock().expect("model state");
                let calls = state.count(operation);
                let (status, body) = state.publish_to_target(operation, body);
                (status, body, calls, Duration::ZERO)
            }
            _ => {
                let request: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
                let mut state = self.state.lock().expect("model state");
                let calls = state.count(operation);
                let body = match operation {
                    "Query" => match hold_partition(&request) {
                        Some(partition) => state.holds.query(&partition, &request),
                        None => {
                            state.catch_up_index();
                            query(&state, &request)
                        }
                    },
                    "DeleteItem" => {
                        let pk = request["Key"][attr::PK]["S"].as_str().unwrap_or_default();
                        let (status, body) = state.holds.delete(pk, &request);
                        return (status, body, calls, Duration::ZERO);
                    }
                    "BatchGetItem" => state.batch_get(&request),
                    "SendMessage" => {
                        json!({"MessageId": uuid::Uuid::now_v7().to_string()}).to_string()
                    }
                    _ => "{}".to_owned(),
                };
                (200, body, calls, Duration::ZERO)
            }
        }
    }
}

/// A form value decoded (`+` a space, `%XX` a byte).
fn form_decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3])
                    .ok()
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The `Key` of an `UpdateItem` request, its other fields skipped.
#[derive(Debug, Default, serde::Deserialize)]
struct KeyOnly {
    #[serde(rename = "Key", default)]
    key: HashMap<String, StringAttribute>,
}

#[derive(Debug, serde::Deserialize)]
struct StringAttribute {
    #[serde(rename = "S")]
    s: String,
}

/// The statements of a `BatchExecuteStatement` request, with their parameters.
#[derive(Debug, Default, serde::Deserialize)]
struct StatementsOnly {
    #[serde(rename = "Statements", default)]
    statements: Vec<StatementParameters>,
}

#[derive(Debug, serde::Deserialize)]
struct StatementParameters {
    #[serde(rename = "Parameters", default)]
    parameters: Vec<Parameter>,
}

/// One statement parameter: its string, if it is one (`S`); its other members skipped, so a mark's
/// parameters are read without building a JSON tree (the model's CPU is counted).
#[derive(Debug, serde::Deserialize)]
struct Parameter {
    #[serde(rename = "S", default)]
    s: Option<String>,
}

impl StatementParameters {
    /// The item a relay's mark names: its last two parameters (`PK`, `SK`).
    fn key(&self) -> (String, String) {
        let string = |from_end: usize| {
            self.parameters
                .len()
                .checked_sub(from_end)
                .and_then(|i| self.parameters[i].s.clone())
                .unwrap_or_default()
        };
        (string(2), string(1))
    }
}

/// The Custom Event Bus's `PutEvents` answer, as the model writes it.
#[derive(serde::Serialize)]
struct CustomPutEventsAnswer {
    #[serde(rename = "FailedEntryCount")]
    failed_entry_count: u32,
    #[serde(rename = "Entries")]
    entries: Vec<CustomResult>,
}

#[derive(serde::Serialize)]
struct CustomResult {
    #[serde(rename = "EventId")]
    event_id: String,
    #[serde(rename = "SequenceNumber")]
    sequence_number: String,
    #[serde(rename = "SuccessCode")]
    success_code: &'static str,
}

/// The entries of a `PutEvents` request, not read.
#[derive(Debug, serde::Deserialize)]
struct EntriesOnly {
    #[serde(rename = "Entries")]
    entries: Vec<serde::de::IgnoredAny>,
}

impl State {
    /// A call to the SQS, SNS or Kinesis target (`SendMessageBatch`, `PublishBatch`,
    /// `PutRecords`): every entry accepted (a record beyond a stream's write quota refused), its envelope seen by the order tracker, the answer in
    /// the service's own shape (SNS's query protocol answers XML); HTTP 500 during an outage.
    fn publish_to_target(&mut self, operation: &str, body: &[u8]) -> (u16, String) {
        if self.put_events_down {
            return (
                500,
                r#"{"__type":"InternalFailure","message":"the target is down (latency model outage)"}"#
                    .to_owned(),
            );
        }
        // (entry id, envelope) of each entry.
        let entries: Vec<(String, String)> = match operation {
            "SendMessageBatch" => serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|r| r["Entries"].as_array().cloned())
                .unwrap_or_default()
                .iter()
                .map(|e| {
                    (
                        e["Id"].as_str().unwrap_or_default().to_owned(),
                        e["MessageBody"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect(),
            "PutRecords" => serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|r| r["Records"].as_array().cloned())
                .unwrap_or_default()
                .iter()
                .map(|e| {
                    let data = e["Data"]
                        .as_str()
                        .and_then(|d| aws_smithy_types::base64::decode(d).ok())
                        .unwrap_or_default();
                    (String::new(), String::from_utf8_lossy(&data).into_owned())
                })
                .collect(),
            _ => {
                // The query protocol's form: PublishBatchRequestEntries.member.N.{Id,Message}.
                let mut by_member: BTreeMap<usize, (String, String)> = BTreeMap::new();
                for pair in String::from_utf8_lossy(body).split('&') {
                    let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
                    let Some((n, field)) = name
                        .strip_prefix("PublishBatchRequestEntries.member.")
                        .and_then(|rest| rest.split_once('.'))
                    else {
                        continue;
                    };
                    let Ok(n) = n.parse() else { continue };
                    let entry = by_member.entry(n).or_default();
                    match field {
                        "Id" => entry.0 = value.to_owned(),
                        "Message" if self.order.is_some() => entry.1 = form_decoded(value),
                        _ => {}
                    }
                }
                by_member.into_values().collect()
            }
        };
        self.entries += entries.len() as u64;
        // Whether each entry was taken: all of them but the records beyond a stream's quota.
        let taken: Vec<bool> = entries
            .iter()
            .map(|_| match (operation, self.stream_quota.as_mut()) {
                ("PutRecords", Some(quota)) => quota.take(),
                _ => true,
            })
            .collect();
        for ((_, envelope), taken) in entries.iter().zip(&taken) {
            if !taken {
                self.throttled += 1;
                continue;
            }
            if let Some(order) = self.order.as_mut() {
                order.accept(envelope);
            }
            self.event_ids += 1;
        }
        let body = match operation {
            "SendMessageBatch" => {
                let successful: Vec<String> = entries
                    .iter()
                    .map(|(id, _)| {
                        format!(
                            r#"{{"Id":"{id}","MessageId":"model-{id}","MD5OfMessageBody":"model"}}"#
                        )
                    })
                    .collect();
                format!(r#"{{"Successful":[{}],"Failed":[]}}"#, successful.join(","))
            }
            "PutRecords" => {
                let records: Vec<&str> = taken
                    .iter()
                    .map(|taken| {
                        if *taken {
                            r#"{"SequenceNumber":"1","ShardId":"shardId-000000000000"}"#
                        } else {
                            r#"{"ErrorCode":"ProvisionedThroughputExceededException","ErrorMessage":"Rate exceeded for shard shardId-000000000000 (latency model)"}"#
                        }
                    })
                    .collect();
                let failed = taken.iter().filter(|taken| !**taken).count();
                format!(
                    r#"{{"FailedRecordCount":{failed},"Records":[{}]}}"#,
                    records.join(",")
                )
            }
            _ => {
                let members: String = entries
                    .iter()
                    .map(|(id, _)| {
                        format!("<member><Id>{id}</Id><MessageId>model-{id}</MessageId></member>")
                    })
                    .collect();
                format!(
                    "<PublishBatchResponse><PublishBatchResult><Successful>{members}</Successful>\
                     <Failed/></PublishBatchResult></PublishBatchResponse>"
                )
            }
        };
        (200, body)
    }

    /// Takes the item at `key` (`PK`, `SK`) out of the index: whether it was pending there.
    fn unindex(&mut self, key: &(String, String)) -> bool {
        let Some((gsi1pk, gsi1sk)) = self.keys.remove(key) else {
            return false;
        };
        if self.index_lag.is_zero() {
            if let Some(shard) = self.index.get_mut(&gsi1pk) {
                shard.remove(&gsi1sk);
            }
        } else {
            let at = tokio::time::Instant::now() + self.index_lag;
            self.leaving.push_back((at, gsi1pk, gsi1sk));
        }
        true
    }

    /// Takes out of the index the marked items whose lag is over.
    fn catch_up_index(&mut self) {
        let now = tokio::time::Instant::now();
        while self.leaving.front().is_some_and(|(at, ..)| *at <= now) {
            let (_, gsi1pk, gsi1sk) = self.leaving.pop_front().expect("a front");
            if let Some(shard) = self.index.get_mut(&gsi1pk) {
                shard.remove(&gsi1sk);
            }
        }
    }

    /// Counts a call of `operation`; the calls of it so far.
    fn count(&mut self, operation: &str) -> u64 {
        let calls = match self.calls.get_mut(operation) {
            Some(calls) => calls,
            None => self.calls.entry(operation.to_owned()).or_default(),
        };
        *calls += 1;
        *calls
    }
}

/// The hold partition a `Query` reads, if it reads one.
fn hold_partition(request: &Value) -> Option<String> {
    request["ExpressionAttributeValues"]
        .as_object()?
        .values()
        .filter_map(|v| v["S"].as_str())
        .find(|v| schema::is_hold_partition(v))
        .map(str::to_owned)
}

impl State {
    /// A `BatchGetItem`: the holds asked for that exist, and the outbox events asked for (their
    /// `GSI1PK` while pending).
    fn batch_get(&mut self, request: &Value) -> String {
        let mut responses = serde_json::Map::new();
        for (table, asked) in request["RequestItems"].as_object().into_iter().flatten() {
            let mut items = Vec::new();
            for key in asked["Keys"].as_array().into_iter().flatten() {
                let pk = key[attr::PK]["S"].as_str().unwrap_or_default();
                let sk = key[attr::SK]["S"].as_str().unwrap_or_default();
                if holds::Holds::is_hold(pk) {
                    items.extend(self.holds.get(pk));
                    continue;
                }
                self.holds.event_keys_read += 1;
                let mut item = json!({attr::PK: {"S": pk}, attr::SK: {"S": sk}});
                if let Some((gsi1pk, _)) = self.keys.get(&(pk.to_owned(), sk.to_owned())) {
                    item[attr::GSI1PK] = json!({"S": gsi1pk});
                }
                items.push(item);
            }
            responses.insert(table.clone(), Value::Array(items));
        }
        json!({"Responses": responses, "UnprocessedKeys": {}}).to_string()
    }
}

/// The answer to a `Query` of the pending index, as the body's text.
fn query(state: &State, request: &Value) -> String {
    let values: Vec<&str> = request["ExpressionAttributeValues"]
        .as_object()
        .map(|m| m.values().filter_map(|v| v["S"].as_str()).collect())
        .unwrap_or_default();
    let sort_key_prefix = sort_key_prefix();
    let shard_key = values
        .iter()
        .find(|v| schema::parse_pending_shard_pk(v).is_some());
    let upper = values.iter().find(|v| v.starts_with(&sort_key_prefix));
    let start_after = request["ExclusiveStartKey"][attr::GSI1SK]["S"].as_str();
    let limit = request["Limit"]
        .as_u64()
        .and_then(|l| usize::try_from(l).ok())
        .unwrap_or(usize::MAX);
    let Some((shard_key, shard)) = shard_key.and_then(|k| state.index.get_key_value(*k)) else {
        return r#"{"Items":[],"Count":0,"ScannedCount":0}"#.to_owned();
    };
    let lower = start_after.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
    let mut in_range = shard
        .range::<str, _>((lower, std::ops::Bound::Unbounded))
        .take_while(|(sort_key, _)| upper.is_none_or(|u| sort_key.as_str() < *u))
        .peekable();
    let mut items = String::from("[");
    let mut count = 0;
    let mut last = None;
    while count < limit {
        let Some((sort_key, pending)) = in_range.next() else {
            break;
        };
        if count > 0 {
            items.push(',');
        }
        items.push_str(&pending.wire);
        count += 1;
        last = Some((sort_key, pending));
    }
    items.push(']');
    let last_evaluated_key = match last {
        Some((sort_key, pending)) if in_range.peek().is_some() => {
            let key = json!({
                attr::PK: {"S": pending.pk},
                attr::SK: {"S": pending.sk},
                attr::GSI1PK: {"S": shard_key},
                attr::GSI1SK: {"S": sort_key},
            });
            format!(r#","LastEvaluatedKey":{key}"#)
        }
        _ => String::new(),
    };
    format!(r#"{{"Count":{count},"ScannedCount":{count},"Items":{items}{last_evaluated_key}}}"#)
}

/// What every `GSI1SK` starts with (`EVENT#`), read off the schema's key format: the sort key of
/// an empty timestamp and event id is that prefix followed by the separator.
fn sort_key_prefix() -> String {
    let empty = schema::pending_sort_key("", "");
    empty
        .strip_suffix('#')
        .expect("the sort key ends with its separator")
        .to_owned()
}

/// DynamoDB JSON of an outbox item (strings as `S`, numbers as `N`).
fn to_wire_item(item: &OutboxItem) -> Value {
    let plain = serde_json::to_value(item).expect("outbox item serializes");
    let object = plain
        .as_object()
        .expect("outbox item is an object")
        .iter()
        .map(|(name, value)| {
            let wire = match value {
                Value::Number(n) => json!({"N": n.to_string()}),
                Value::String(s) => json!({"S": s}),
                other => json!({"S": other.to_string()}),
            };
            (name.clone(), wire)
        })
        .collect();
    Value::Object(object)
}

impl HttpConnector for LatencyModel {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        if crate::cbor::operation(request.uri()) == Some("PutEvents") {
            return self.custom_put_events(request.body().bytes().unwrap_or_default());
        }
        let target = request
            .headers()
            .get("x-amz-target")
            .unwrap_or_default()
            .to_owned();
        let body = request.body().bytes().unwrap_or_default();
        // SNS's query calls have no `X-Amz-Target`: their form names the action.
        let (operation, protocol) = if target.is_empty() && body.starts_with(b"Action=PublishBatch")
        {
            ("PublishBatch", Protocol::Query)
        } else {
            (target.rsplit('.').next().unwrap_or(&target), Protocol::Json)
        };
        let (status, body, calls, queued) = self.answer(operation, body);
        self.reply(operation, calls, queued, status, body, protocol)
    }
}

/// How an answer is written: the JSON protocols', SNS's query protocol (XML) or the Custom
/// Event Bus's CBOR.
#[derive(Debug, Clone, Copy)]
enum Protocol {
    Json,
    Query,
    Cbor,
}
impl LatencyModel {
    /// The answer `body` with `status`, after the model's delay for the `calls`-th call of
    /// `operation` (slower once it turned slow) and `queued` behind a bus of fixed capacity.
    fn reply(
        &self,
        operation: &str,
        calls: u64,
        queued: Duration,
        status: u16,
        body: impl Into<SdkBody>,
        protocol: Protocol,
    ) -> HttpConnectorFuture {
        let delay = match &*self.slowdown.lock().expect("model slowdown") {
            Some(slow) if slow.operation == operation && calls > slow.after_calls => slow.delay,
            _ => self.delay,
        } + queued;
        let clock = self.clock;
        let body = body.into();
        HttpConnectorFuture::new(async move {
            wait(clock, delay).await;
            let mut response =
                HttpResponse::new(StatusCode::try_from(status).expect("valid status"), body);
            let headers = response.headers_mut();
            match protocol {
                Protocol::Json => {
                    headers.insert("content-type", "application/x-amz-json-1.0");
                }
                Protocol::Query => {
                    headers.insert("content-type", "text/xml");
                }
                Protocol::Cbor => {
                    headers.insert("content-type", crate::cbor::CONTENT_TYPE);
                    headers.insert(crate::cbor::PROTOCOL_HEADER, crate::cbor::PROTOCOL);
                }
            }
            Ok(response)
        })
    }
}

impl LatencyModel {
    /// The Custom Event Bus's `PutEvents`: every entry published, after the delay (and the wait
    /// for a bus of fixed capacity).
    fn custom_put_events(&self, body: &[u8]) -> HttpConnectorFuture {
        {
            let state = self.state.lock().expect("model state");
            if state.put_events_down || state.order.is_some() || state.quota.is_some() {
                drop(state);
                return self.custom_put_events_modelled(body);
            }
        }
        // Read and written through serde, skipping what it does not need, as the JSON calls are:
        // the model's own CPU is counted in every benchmark that uses it.
        let n = ciborium::from_reader::<EntriesOnly, _>(body).map_or(0, |r| r.entries.len());
        let (calls, queued, first_id) = {
            let mut state = self.state.lock().expect("model state");
            let calls = state.count("PutEvents");
            state.entries += n as u64;
            let first_id = state.event_ids + 1;
            state.event_ids += n as u64;
            let queued = state.server.as_mut().map_or(Duration::ZERO, |s| s.queue(n));
            (calls, queued, first_id)
        };
        let answer = CustomPutEventsAnswer {
            failed_entry_count: 0,
            entries: (first_id..first_id + n as u64)
                .map(|id| CustomResult {
                    event_id: format!("model-{id}"),
                    sequence_number: format!("{id:020}"),
                    success_code: "PUBLISHED",
                })
                .collect(),
        };
        let mut body = Vec::with_capacity(64 + 80 * n);
        ciborium::into_writer(&answer, &mut body).expect("CBOR into a Vec");
        self.reply("PutEvents", calls, queued, 200, body, Protocol::Cbor)
    }
}

impl LatencyModel {
    /// The Custom Event Bus's `PutEvents` under an outage ([`Self::fail_put_events`]: HTTP 500
    /// `InternalException`), a quota (entries beyond it refused `ThrottlingException`, as the
    /// classic bus's), or with what a consumer sees tracked ([`Self::track_order`]).
    fn custom_put_events_modelled(&self, body: &[u8]) -> HttpConnectorFuture {
        let details = crate::cbor::details(body);
        let (status, answer, calls, queued) = {
            let mut state = self.state.lock().expect("model state");
            let calls = state.count("PutEvents");
            if state.put_events_down {
                let error = crate::cbor::error(
                    "InternalException",
                    "the bus is down (latency model outage)",
                );
                (500, error, calls, Duration::ZERO)
            } else {
                state.entries += details.len() as u64;
                let mut results = Vec::with_capacity(details.len());
                for detail in &details {
                    if state.quota.as_mut().is_none_or(Quota::take) {
                        if let Some(order) = state.order.as_mut() {
                            order.accept(detail);
                        }
                        state.event_ids += 1;
                        let id = state.event_ids;
                        results.push(crate::cbor::published(&format!("model-{id}"), id));
                    } else {
                        state.throttled += 1;
                        results.push(crate::cbor::entry_error(
                            "ThrottlingException",
                            "Rate exceeded.",
                        ));
                    }
                }
                let queued = state
                    .server
                    .as_mut()
                    .map_or(Duration::ZERO, |s| s.queue(details.len()));
                (200, crate::cbor::put_events_answer(results), calls, queued)
            }
        };
        self.reply("PutEvents", calls, queued, status, answer, Protocol::Cbor)
    }
}

/// Waits `delay` on `clock`.
async fn wait(clock: Clock, delay: Duration) {
    match clock {
        Clock::Tokio => tokio::time::sleep(delay).await,
        Clock::Exact => {
            async_io::Timer::after(delay).await;
        }
    }
}

impl HttpClient for LatencyModel {
    fn http_connector(
        &self,
        _settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        SharedHttpConnector::new(self.clone())
    }
}

#[cfg(test)]
mod tests;
