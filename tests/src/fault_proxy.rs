//! A fault-injecting HTTP proxy in front of the emulator, for tests of the relays' binaries: an
//! SDK interceptor can't reach a child process, but the SDK's endpoint variables can point it here
//! ([`FaultProxy::endpoint_env`]). It forwards each call to the emulator that serves its service
//! (DynamoDB Local for DynamoDB and its streams, moto for the rest).
//!
//! It decides by the `X-Amz-Target` header:
//! - `DynamoDB_20120810.UpdateItem`, `BatchExecuteStatement` (the relays' batched marks), `Query`
//!   and `Scan` fail at the configured rate: half as
//!   `ThrottlingException` (HTTP 400, not sent on), half as HTTP 500; and a share of the 500s are
//!   lost replies: the request is sent on (it takes effect) and the answer is a 500 anyway.
//! - `AWSEvents.PutEvents`: each entry fails at the configured rate: it is taken out of the
//!   request sent on and a failed result (`InternalFailure`) is put back in its place in the
//!   answer; and a share of whole calls are lost replies. Entries are not throttled here: the
//!   publisher slows down on `ThrottlingException` (`relay_runtime::publish_rate`), and a bus
//!   throttles by rate, not at random, so throttling is tested against a quota on the latency
//!   model (`poller_quota`), where slowing down is what ends it.
//!   Before any of that, a `PutEvents` call that EventBridge would refuse as a whole is refused
//!   here as EventBridge refuses it (HTTP 400 `ValidationException`, nothing sent on), whatever
//!   the rates: more than 10 entries, more than 256 KiB of entries, a `DetailType` over 128
//!   characters, a `TraceHeader` outside 1 to 500 ([`put_events_refusal`]). moto checks none of
//!   these, so without this a relay that sends such a call would pass here and fail on AWS.
//! - `AmazonSQS.SendMessage`: a message whose body or a string attribute value holds a character
//!   outside the set SQS allows (`#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD |
//!   #x10000-#x10FFFF`: XML 1.0's characters) is refused as AWS refuses it (HTTP 400
//!   `InvalidMessageContents`, [`sqs_invalid_contents`]); moto takes any character. And a message
//!   larger than its queue's `MaximumMessageSize` as AWS counts it (the body's UTF-8 bytes plus
//!   each message attribute's name, data type and value) is refused as AWS refuses it (HTTP 400
//!   `InvalidParameterValue`, "Message must be shorter than N bytes.").
//!   moto enforces the attribute too, but counts the body's characters and no attributes: a body
//!   of multi-byte characters, or one near the limit with attributes, passes moto and not AWS. The
//!   queue's limit is read from the queue itself (`GetQueueAttributes`, once per queue). The relays
//!   send no `SendMessageBatch`, so it is not checked.
//! - The Custom Event Bus's `PutEvents` (Smithy RPC v2 CBOR, `POST
//!   /service/AWSEventsV2/operation/PutEvents`, no `X-Amz-Target`: counted under
//!   [`PUT_EVENTS_V2`]): the same entry failures (`InternalException`) and lost replies as the
//!   classic `PutEvents`, in CBOR; a lost reply answers HTTP 500 `InternalException` as the bus
//!   does. The double itself refuses what the bus refuses as a whole (`InvalidInputException`).
//! - The SQS target's `SendMessageBatch` (JSON, results by entry id), the SNS target's
//!   `PublishBatch` (the query protocol: a form in, XML out; no `X-Amz-Target`, named
//!   `AmazonSNS.PublishBatch` from its signature's scope and `Action`) and the Kinesis target's
//!   `PutRecords` (JSON, results by position): the same entry failures (`InternalError` with
//!   `SenderFault` false, Kinesis's `InternalFailure`) and lost replies as `PutEvents`, each in its
//!   service's wire format ([`SEND_MESSAGE_BATCH`], [`PUBLISH_BATCH`], [`PUT_RECORDS`]). moto
//!   fails no entry of any of them.
//! - `DynamoDB_20120810.BatchGetItem`: a test can make its next calls answer every key
//!   unprocessed ([`FaultProxy::leave_keys_unprocessed`]), HTTP 200 with the request's keys as
//!   `UnprocessedKeys` and nothing read, as DynamoDB answers a read it throttled partway (DynamoDB
//!   Local never does).
//! - S3 (REST, no `X-Amz-Target`: told by its signature's credential scope, path-style as the SDK
//!   addresses an endpoint that is an IP address) goes through untouched, counted as
//!   `AmazonS3.{Operation}` ([`s3_operation`]), so a test sees which S3 calls a process made.
//! - Everything else (DynamoDB Streams, other SQS calls, writes the test makes itself) goes
//!   through untouched.
//!
//! Before any fault, it refuses what DynamoDB refuses and DynamoDB Local lets pass
//! ([`crate::dynamodb_rules`]): a `BatchExecuteStatement` of more than 25 statements, or naming
//! one item twice, is answered HTTP 400 `ValidationException` and not sent on. And a test can
//! deny one operation for good ([`FaultProxy::deny`]), as a policy without its permission or an
//! endpoint without the operation does.
//!
//! It records every DynamoDB read of items it forwards, with what IAM's condition keys would see
//! of it ([`FaultProxy::reads`], [`crate::dynamodb_reads`]): the emulators evaluate no IAM, so a
//! test holds each read to what the caller's role allows.
//!
//! Decisions come from a seeded RNG, so a run is reproducible up to request interleaving; what
//! was injected is counted, in all ([`FaultProxy::counts`]) and per operation
//! ([`FaultProxy::counts_for`]), so a test can check the faults really happened where it means
//! them to.

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use outbox_shared::limits::{
    PUT_EVENTS_DEFAULT_MAX_BYTES, PUT_EVENTS_DETAIL_TYPE_MAX_CHARS, PUT_EVENTS_MAX_ENTRIES,
    PUT_EVENTS_TIME_BYTES, PUT_EVENTS_TRACE_HEADER_MAX_CHARS,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::Endpoints;

/// Fault rates, in percent.
#[derive(Debug, Clone, Copy)]
pub struct FaultRates {
    /// `UpdateItem`, `BatchExecuteStatement`, `Query` and `Scan` calls that fail.
    pub dynamodb_calls: u32,
    /// `PutEvents` entries that fail.
    pub put_events_entries: u32,
    /// Of the 500s and of the `PutEvents` calls, the share whose request takes effect and whose
    /// reply is lost.
    pub lost_replies: u32,
}

impl FaultRates {
    /// No random faults: only the scripted ones ([`FaultProxy::lose_next_replies`]).
    pub const NONE: Self = Self {
        dynamodb_calls: 0,
        put_events_entries: 0,
        lost_replies: 0,
    };
}

/// What the proxy injected so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    pub throttled_calls: u64,
    pub failed_calls: u64,
    pub lost_replies: u64,
    pub failed_entries: u64,
    pub passed_calls: u64,
    /// `PutEvents` calls refused as a whole, as EventBridge refuses them ([`put_events_refusal`]).
    pub refused_calls: u64,
    /// `SendMessage` calls refused as larger than their queue's `MaximumMessageSize`.
    pub oversized_messages: u64,
    /// `SendMessage` calls refused for a character SQS does not allow ([`sqs_invalid_contents`]).
    pub invalid_messages: u64,
    /// Calls refused as DynamoDB refuses them ([`crate::dynamodb_rules`]), not sent on.
    pub invalid_calls: u64,
    /// Calls answered `AccessDeniedException` ([`FaultProxy::deny`]), not sent on.
    pub denied_calls: u64,
}

impl std::ops::AddAssign for FaultCounts {
    fn add_assign(&mut self, other: Self) {
        self.throttled_calls += other.throttled_calls;
        self.failed_calls += other.failed_calls;
        self.lost_replies += other.lost_replies;
        self.failed_entries += other.failed_entries;
        self.passed_calls += other.passed_calls;
        self.invalid_calls += other.invalid_calls;
        self.denied_calls += other.denied_calls;
        self.refused_calls += other.refused_calls;
        self.oversized_messages += other.oversized_messages;
        self.invalid_messages += other.invalid_messages;
    }
}

#[derive(Debug)]
struct State {
    rates: FaultRates,
    rng: Mutex<StdRng>,
    /// Per `X-Amz-Target` (empty for calls without one).
    counts: Mutex<HashMap<String, FaultCounts>>,
    upstreams: Endpoints,
    client: Client<HttpConnector, Full<Bytes>>,
    /// Per `X-Amz-Target`: how many of its next calls lose their reply (see
    /// [`FaultProxy::lose_next_replies`]).
    scripted_lost_replies: Mutex<HashMap<String, u32>>,
    /// Per DynamoDB `X-Amz-Target`: how many of its next calls are throttled (see
    /// [`FaultProxy::throttle_next`]).
    scripted_throttles: Mutex<HashMap<String, u32>>,
    /// Per queue URL, its `MaximumMessageSize` as the emulator answered it (read once).
    message_size_limits: Mutex<HashMap<String, usize>>,
    /// `X-Amz-Target`s answered `AccessDeniedException` (see [`FaultProxy::deny`]).
    denied: Mutex<HashSet<String>>,
    /// Per `X-Amz-Target`: how long each of its calls waits before it is sent on (see
    /// [`FaultProxy::slow_down`]).
    delays: Mutex<HashMap<String, Duration>>,
    /// Whether S3 is out (see [`FaultProxy::s3_outage`]).
    s3_out: std::sync::atomic::AtomicBool,
    /// The account every bucket belongs to, when one is set (see [`FaultProxy::buckets_owned_by`]).
    bucket_owner: Mutex<Option<String>>,
    /// The S3 calls sent without an expected bucket owner, by operation.
    s3_calls_without_owner: Mutex<Vec<String>>,
    /// How many of the next `BatchGetItem` calls answer every key unprocessed (see
    /// [`FaultProxy::leave_keys_unprocessed`]).
    unprocessed_batch_gets: Mutex<u32>,
    /// Whether an aggregate's first event fails its first attempt (see
    /// [`FaultProxy::fail_first_events_once`]), and the event ids failed so far.
    failing_first_events: Mutex<Option<HashSet<String>>>,
    /// Every read of items so far (see [`FaultProxy::reads`]).
    reads: Mutex<Vec<crate::dynamodb_reads::Read>>,
}

/// The running proxy; it stops when dropped.
#[derive(Debug)]
pub struct FaultProxy {
    state: Arc<State>,
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Starts a proxy to the emulators at `upstreams` on a free local port.
    ///
    /// # Panics
    /// When no local port can be bound.
    pub async fn start(upstreams: &Endpoints, rates: FaultRates, seed: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a local port");
        let address = listener.local_addr().expect("local address");
        let state = Arc::new(State {
            rates,
            rng: Mutex::new(StdRng::seed_from_u64(seed)),
            counts: Mutex::default(),
            upstreams: upstreams.clone(),
            client: Client::builder(TokioExecutor::new()).build_http(),
            scripted_lost_replies: Mutex::default(),
            scripted_throttles: Mutex::default(),
            message_size_limits: Mutex::default(),
            denied: Mutex::default(),
            delays: Mutex::default(),
            s3_out: std::sync::atomic::AtomicBool::new(false),
            bucket_owner: Mutex::default(),
            s3_calls_without_owner: Mutex::default(),
            unprocessed_batch_gets: Mutex::default(),
            failing_first_events: Mutex::default(),
            reads: Mutex::default(),
        });
        let serving = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = serving.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(state.handle(request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Self {
            state,
            address,
            task,
        }
    }

    /// The proxy's URL, for an in-process client's `endpoint_url`.
    pub fn url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The SDK's endpoint variables, every one pointing here: set them on a child process.
    pub fn endpoint_env(&self) -> Vec<(&'static str, String)> {
        Endpoints::all(&self.url()).env()
    }

    /// The next `calls` calls of `target` (an `X-Amz-Target`, e.g.
    /// `DynamoDB_20120810.TransactWriteItems`) take effect upstream and answer a 500, whatever
    /// the rates say.
    pub fn lose_next_replies(&self, target: &str, calls: u32) {
        script(&self.state.scripted_lost_replies, target, calls);
    }

    /// The next `calls` calls of `target` (a DynamoDB `X-Amz-Target`, e.g.
    /// `DynamoDB_20120810.BatchExecuteStatement`) are answered `ThrottlingException` and not
    /// sent on, whatever the rates say; after the scripted lost replies, if both are scripted.
    pub fn throttle_next(&self, target: &str, calls: u32) {
        script(&self.state.scripted_throttles, target, calls);
    }

    /// Every call of `target` (an `X-Amz-Target`, e.g.
    /// `DynamoDB_20120810.BatchExecuteStatement`) from now on is answered HTTP 400
    /// `AccessDeniedException` and not sent on: what an IAM policy without the operation's
    /// permission answers (`dynamodb:PartiQLUpdate` for `BatchExecuteStatement` of `UPDATE`s).
    pub fn deny(&self, target: &str) {
        self.state
            .denied
            .lock()
            .expect("denied targets")
            .insert(target.to_owned());
    }

    /// Every call of `target` (an `X-Amz-Target`, e.g.
    /// `DynamoDBStreams_20120810.GetRecords`) from now on waits `delay` before it is sent on: a
    /// service slower to answer than the emulator.
    pub fn slow_down(&self, target: &str, delay: Duration) {
        self.state
            .delays
            .lock()
            .expect("delays")
            .insert(target.to_owned(), delay);
    }

    /// While `out`, every S3 call (bucket probes aside: `ListObjectsV2`, `HeadBucket`) is answered
    /// HTTP 503 `ServiceUnavailable` and not sent on, as S3 answers during an outage of the
    /// service; counted as failed calls.
    pub fn s3_outage(&self, out: bool) {
        self.state
            .s3_out
            .store(out, std::sync::atomic::Ordering::SeqCst);
    }

    /// From now on every bucket belongs to `account`: an S3 call whose `ExpectedBucketOwner`
    /// (`x-amz-expected-bucket-owner`) names another account is answered HTTP 403 `AccessDenied`
    /// and not sent on, as S3 answers it (moto ignores the header); a call without one passes,
    /// as on S3. What a bucket deleted and re-created under its name by another account looks like.
    pub fn buckets_owned_by(&self, account: &str) {
        *self.state.bucket_owner.lock().expect("bucket owner") = Some(account.to_owned());
    }

    /// The S3 calls sent without an expected bucket owner (operations, e.g. `AmazonS3.PutObject`).
    pub fn s3_calls_without_owner(&self) -> Vec<String> {
        self.state
            .s3_calls_without_owner
            .lock()
            .expect("calls without owner")
            .clone()
    }

    /// The next `calls` `BatchGetItem` calls read nothing and answer every key they asked for as
    /// `UnprocessedKeys` (HTTP 200), as DynamoDB answers a read it throttled: a burst the caller
    /// must outlast by asking again after a backoff.
    pub fn leave_keys_unprocessed(&self, calls: u32) {
        *self
            .state
            .unprocessed_batch_gets
            .lock()
            .expect("unprocessed batch gets") = calls;
    }

    /// From now on, each aggregate's first event (`Sequence` 1 in its envelope) fails its first
    /// `PutEvents` attempt (a retryable entry failure), on either bus, whatever the rates say:
    /// the later events of its aggregate must wait for its retry.
    pub fn fail_first_events_once(&self) {
        *self
            .state
            .failing_first_events
            .lock()
            .expect("failing first events") = Some(HashSet::new());
    }

    /// What was injected so far, all operations together.
    pub fn counts(&self) -> FaultCounts {
        let mut all = FaultCounts::default();
        for counts in self.state.counts.lock().expect("counts").values() {
            all += *counts;
        }
        all
    }

    /// What was counted so far, per `X-Amz-Target` (calls passed on included): what a run cost
    /// (`costs::calls_per_path_for_docs_costs`, docs/costs.md).
    pub fn counts_by_target(&self) -> std::collections::BTreeMap<String, FaultCounts> {
        self.state
            .counts
            .lock()
            .expect("counts")
            .iter()
            .map(|(target, counts)| (target.clone(), *counts))
            .collect()
    }

    /// Every `X-Amz-Target` called through the proxy so far (each AWS operation a process made
    /// through it), whatever happened to the call.
    pub fn targets(&self) -> std::collections::BTreeSet<String> {
        self.state
            .counts
            .lock()
            .expect("counts")
            .keys()
            .filter(|t| !t.is_empty())
            .cloned()
            .collect()
    }

    /// Every DynamoDB read of items (`GetItem`, `BatchGetItem`, `Query`, `Scan`) made through the
    /// proxy so far, whatever happened to the call: each as IAM's condition keys see it.
    pub fn reads(&self) -> Vec<crate::dynamodb_reads::Read> {
        self.state.reads.lock().expect("reads").clone()
    }

    /// What was injected so far into calls of `target` (an `X-Amz-Target`).
    pub fn counts_for(&self, target: &str) -> FaultCounts {
        self.state
            .counts
            .lock()
            .expect("counts")
            .get(target)
            .copied()
            .unwrap_or_default()
    }
}

/// What to do with one call.
enum Plan {
    Pass,
    /// Answer this without sending the request on.
    Fail(StatusCode, Value),
    /// Answer this, HTTP 200, without sending the request on.
    Answer(Value),
    /// Send it on, then answer a 500.
    LoseReply,
    /// `PutEvents`: send on the entries not failed; put these failures back at their indices.
    Entries(Vec<Option<&'static str>>),
}

const DYNAMODB_FAULTED: &[&str] = &[
    "DynamoDB_20120810.UpdateItem",
    BATCH_EXECUTE_STATEMENT,
    "DynamoDB_20120810.Query",
    "DynamoDB_20120810.Scan",
];
const PUT_EVENTS: &str = "AWSEvents.PutEvents";
/// The Custom Event Bus's `PutEvents`, named as the classic calls are (it has no `X-Amz-Target`:
/// its operation is in the URL path), for [`FaultProxy::counts_for`] and
/// [`FaultProxy::lose_next_replies`].
pub const PUT_EVENTS_V2: &str = "AWSEventsV2.PutEvents";
const SEND_MESSAGE: &str = "AmazonSQS.SendMessage";
/// The SQS target's `SendMessageBatch`.
pub const SEND_MESSAGE_BATCH: &str = "AmazonSQS.SendMessageBatch";
/// The SNS target's `PublishBatch` (a query call: no `X-Amz-Target`, named from its signature's
/// scope and its `Action`).
pub const PUBLISH_BATCH: &str = "AmazonSNS.PublishBatch";
/// The Kinesis target's `PutRecords`.
pub const PUT_RECORDS: &str = "Kinesis_20131202.PutRecords";
/// The classic bus's `PutEvents`.
pub const PUT_EVENTS_CLASSIC: &str = PUT_EVENTS;
const GET_QUEUE_ATTRIBUTES: &str = "AmazonSQS.GetQueueAttributes";
/// The relays' batched marks.
pub const BATCH_EXECUTE_STATEMENT: &str = "DynamoDB_20120810.BatchExecuteStatement";

/// `X-Amz-Target` of DynamoDB Streams' `GetRecords`.
pub const GET_RECORDS: &str = "DynamoDBStreams_20120810.GetRecords";
/// `X-Amz-Target` of DynamoDB's `BatchGetItem`.
pub const BATCH_GET_ITEM: &str = "DynamoDB_20120810.BatchGetItem";

/// DynamoDB's answer to a throttled call (HTTP 400 `ThrottlingException`), not sent on.
fn dynamodb_throttle() -> Plan {
    Plan::Fail(
        StatusCode::BAD_REQUEST,
        json!({"__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException", "message": "injected: rate exceeded"}),
    )
}

/// Scripts `target`'s next `calls` calls in `scripted` (replacing what was left).
fn script(scripted: &Mutex<HashMap<String, u32>>, target: &str, calls: u32) {
    scripted
        .lock()
        .expect("scripted faults")
        .insert(target.to_owned(), calls);
}

/// Takes one of `target`'s scripted faults left in `scripted`: whether there was one.
fn take_scripted(scripted: &Mutex<HashMap<String, u32>>, target: &str) -> bool {
    let mut scripted = scripted.lock().expect("scripted faults");
    match scripted.get_mut(target) {
        Some(left) if *left > 0 => {
            *left -= 1;
            true
        }
        _ => false,
    }
}

impl State {
    fn percent(&self, rng: &mut StdRng, rate: u32) -> bool {
        rng.random_range(0..100) < rate
    }

    fn plan(&self, target: &str, body: &[u8]) -> Plan {
        let mut rng = self.rng.lock().expect("rng");
        let mut counts = self.counts.lock().expect("counts");
        let counts = counts.entry(target.to_owned()).or_default();
        if let Some(message) = refusal(target, body) {
            counts.invalid_calls += 1;
            return Plan::Fail(
                StatusCode::BAD_REQUEST,
                crate::dynamodb_rules::validation_exception(&message),
            );
        }
        if self.denied.lock().expect("denied targets").contains(target) {
            counts.denied_calls += 1;
            let action = target.rsplit('.').next().unwrap_or(target);
            return Plan::Fail(
                StatusCode::BAD_REQUEST,
                json!({
                    "__type": "com.amazon.coral.service#AccessDeniedException",
                    "Message": format!("injected: not authorized to perform {action} (no identity-based policy allows it)"),
                }),
            );
        }
        if target == BATCH_GET_ITEM {
            let mut unprocessed = self
                .unprocessed_batch_gets
                .lock()
                .expect("unprocessed batch gets");
            if *unprocessed > 0 {
                *unprocessed -= 1;
                counts.throttled_calls += 1;
                let request: Value = serde_json::from_slice(body).unwrap_or_default();
                let tables = request["RequestItems"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default();
                return Plan::Answer(json!({
                    "Responses": tables.keys().map(|t| (t.clone(), json!([]))).collect::<serde_json::Map<_, _>>(),
                    "UnprocessedKeys": tables,
                }));
            }
        }
        if take_scripted(&self.scripted_lost_replies, target) {
            counts.lost_replies += 1;
            return Plan::LoseReply;
        }
        if take_scripted(&self.scripted_throttles, target) {
            counts.throttled_calls += 1;
            return dynamodb_throttle();
        }
        if DYNAMODB_FAULTED.contains(&target) {
            if !self.percent(&mut rng, self.rates.dynamodb_calls) {
                counts.passed_calls += 1;
                return Plan::Pass;
            }
            if rng.random_bool(0.5) {
                counts.throttled_calls += 1;
                return dynamodb_throttle();
            }
            if self.percent(&mut rng, self.rates.lost_replies) {
                counts.lost_replies += 1;
                return Plan::LoseReply;
            }
            counts.failed_calls += 1;
            return Plan::Fail(
                StatusCode::INTERNAL_SERVER_ERROR,
                json!({"__type": "com.amazonaws.dynamodb.v20120810#InternalServerError", "message": "injected: internal error"}),
            );
        }
        if target == PUT_EVENTS_V2 {
            if self.percent(&mut rng, self.rates.lost_replies) {
                counts.lost_replies += 1;
                return Plan::LoseReply;
            }
            let details = crate::cbor::details(body);
            return self.fail_entries(&mut rng, counts, &details, "InternalException");
        }
        if let Some((details, code)) = target_entries(target, body) {
            if self.percent(&mut rng, self.rates.lost_replies) {
                counts.lost_replies += 1;
                return Plan::LoseReply;
            }
            return self.fail_entries(&mut rng, counts, &details, code);
        }
        if target == PUT_EVENTS {
            if let Some(message) = put_events_refusal(body) {
                counts.refused_calls += 1;
                return Plan::Fail(
                    StatusCode::BAD_REQUEST,
                    json!({"__type": "ValidationException", "message": message}),
                );
            }
            if self.percent(&mut rng, self.rates.lost_replies) {
                counts.lost_replies += 1;
                return Plan::LoseReply;
            }
            let details: Vec<String> = serde_json::from_slice::<Value>(body)
                .ok()
                .and_then(|b| {
                    b["Entries"].as_array().map(|entries| {
                        entries
                            .iter()
                            .map(|e| e["Detail"].as_str().unwrap_or_default().to_owned())
                            .collect()
                    })
                })
                .unwrap_or_default();
            return self.fail_entries(&mut rng, counts, &details, "InternalFailure");
        }
        counts.passed_calls += 1;
        Plan::Pass
    }

    /// The plan for a `PutEvents` call (either bus) whose entries have the details `details`: an
    /// entry fails with the bus's per-entry `code` if it is an aggregate's first event on its first
    /// attempt (while [`FaultProxy::fail_first_events_once`] is on) or at the entry failure rate.
    fn fail_entries(
        &self,
        rng: &mut StdRng,
        counts: &mut FaultCounts,
        details: &[String],
        code: &'static str,
    ) -> Plan {
        let plan: Vec<Option<&'static str>> = details
            .iter()
            .map(|detail| {
                (self.first_attempt_of_a_first_event(detail)
                    || self.percent(rng, self.rates.put_events_entries))
                .then_some(code)
            })
            .collect();
        counts.failed_entries += plan.iter().flatten().count() as u64;
        Plan::Entries(plan)
    }

    /// Whether the entry of `detail` is an aggregate's first event on its first attempt while
    /// [`FaultProxy::fail_first_events_once`] is on (and notes that it failed).
    fn first_attempt_of_a_first_event(&self, detail: &str) -> bool {
        let mut failing = self
            .failing_first_events
            .lock()
            .expect("failing first events");
        let Some(failed) = failing.as_mut() else {
            return false;
        };
        let envelope: Value = serde_json::from_str(detail).unwrap_or_default();
        let metadata = &envelope["metadata"];
        metadata["sequence"] == 1
            && metadata["eventId"]
                .as_str()
                .is_some_and(|id| failed.insert(id.to_owned()))
    }

    /// What S3 answers and moto does not: an outage ([`FaultProxy::s3_outage`]), and a
    /// `PutObject` whose `x-amz-checksum-sha256` is not its body's SHA-256, refused HTTP 400
    /// `BadDigest` as S3 refuses it (moto stores it).
    fn s3_fault(
        &self,
        target: &str,
        parts: &hyper::http::request::Parts,
        body: &Bytes,
    ) -> Option<Response<Full<Bytes>>> {
        let sent_owner = parts
            .headers
            .get(outbox_shared::bucket_owner::HEADER)
            .and_then(|v| v.to_str().ok());
        if sent_owner.is_none() {
            self.s3_calls_without_owner
                .lock()
                .expect("calls without owner")
                .push(target.to_owned());
        }
        let owner = self.bucket_owner.lock().expect("bucket owner").clone();
        let mut counts = self.counts.lock().expect("counts");
        let counts = counts.entry(target.to_owned()).or_default();
        if let (Some(owner), Some(sent)) = (owner, sent_owner)
            && owner != sent
        {
            counts.failed_calls += 1;
            return Some(s3_error(
                StatusCode::FORBIDDEN,
                "AccessDenied",
                "Access Denied (injected: the bucket is another account's)",
            ));
        }
        let probe = matches!(target, "AmazonS3.ListObjectsV2" | "AmazonS3.HeadBucket");
        if self.s3_out.load(std::sync::atomic::Ordering::SeqCst) && !probe {
            counts.failed_calls += 1;
            return Some(s3_error(
                StatusCode::SERVICE_UNAVAILABLE,
                "ServiceUnavailable",
                "injected: S3 is out",
            ));
        }
        let chunked = parts
            .headers
            .get("content-encoding")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("aws-chunked"));
        if target == "AmazonS3.PutObject"
            && !chunked
            && let Some(sent) = parts
                .headers
                .get("x-amz-checksum-sha256")
                .and_then(|v| v.to_str().ok())
        {
            let actual = outbox_shared::claim_check::sha256_base64(body);
            if actual != sent {
                counts.invalid_calls += 1;
                return Some(s3_error(
                    StatusCode::BAD_REQUEST,
                    "BadDigest",
                    "The SHA256 you specified did not match the calculated checksum.",
                ));
            }
        }
        None
    }

    async fn handle(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let (parts, body) = request.into_parts();
        let body = match body.collect().await {
            Ok(collected) => collected.to_bytes(),
            Err(e) => {
                return text(
                    StatusCode::BAD_GATEWAY,
                    &format!("reading the request: {e}"),
                );
            }
        };
        let target = match crate::cbor::operation(parts.uri.path()) {
            Some(operation) => format!("AWSEventsV2.{operation}"),
            None => match parts.headers.get("x-amz-target") {
                Some(target) => target.to_str().unwrap_or_default().to_owned(),
                None if signed_for(&parts.headers) == Some("s3") => {
                    format!("AmazonS3.{}", s3_operation(&parts))
                }
                None if signed_for(&parts.headers) == Some("sns") => format!(
                    "AmazonSNS.{}",
                    form_pairs(&body)
                        .into_iter()
                        .find(|(k, _)| k == "Action")
                        .map(|(_, v)| v)
                        .unwrap_or_default()
                ),
                None => String::new(),
            },
        };
        self.reads
            .lock()
            .expect("reads")
            .extend(crate::dynamodb_reads::reads_of(&target, &body));
        if target.starts_with("AmazonS3.")
            && let Some(refused) = self.s3_fault(&target, &parts, &body)
        {
            return refused;
        }
        if target == SEND_MESSAGE
            && let Some(refused) = self.refuse_invalid_message(&body)
        {
            return refused;
        }
        if target == SEND_MESSAGE
            && let Some(refused) = self.refuse_oversized_message(&parts, &body).await
        {
            return refused;
        }
        let delay = self.delays.lock().expect("delays").get(&target).copied();
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        match self.plan(&target, &body) {
            Plan::Pass => self.forward(&parts, body).await,
            Plan::Fail(status, error) => json_response(status, &error),
            Plan::Answer(answer) => json_response(StatusCode::OK, &answer),
            Plan::LoseReply if target == PUT_EVENTS_V2 => {
                let _ = self.forward(&parts, body).await;
                cbor_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    crate::cbor::error(
                        "InternalException",
                        "injected: reply lost after the call took effect",
                    ),
                )
            }
            Plan::Entries(plan) if target == PUT_EVENTS_V2 => {
                self.put_events::<CustomCbor>(&parts, &body, &plan).await
            }
            Plan::LoseReply if target == PUBLISH_BATCH => {
                let _ = self.forward(&parts, body).await;
                sns_error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "InternalError",
                    "injected: reply lost after the call took effect",
                )
            }
            Plan::Entries(plan) if target == PUBLISH_BATCH => {
                self.put_events::<SnsQuery>(&parts, &body, &plan).await
            }
            Plan::Entries(plan) if target == SEND_MESSAGE_BATCH => {
                self.put_events::<SqsJson>(&parts, &body, &plan).await
            }
            Plan::Entries(plan) if target == PUT_RECORDS => {
                self.put_events::<KinesisJson>(&parts, &body, &plan).await
            }
            Plan::LoseReply => {
                let _ = self.forward(&parts, body).await;
                json_response(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &json!({"__type": "InternalFailure", "message": "injected: reply lost after the call took effect"}),
                )
            }
            Plan::Entries(plan) => self.put_events::<ClassicJson>(&parts, &body, &plan).await,
        }
    }

    /// Sends `body` on upstream with the original method, path and headers (the signature
    /// covers the host the client saw; the emulator does not check it).
    async fn forward(
        &self,
        parts: &hyper::http::request::Parts,
        body: Bytes,
    ) -> Response<Full<Bytes>> {
        let target = parts
            .headers
            .get("x-amz-target")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let uri = format!(
            "{}{}",
            self.upstreams
                .for_request(parts.uri.path(), target)
                .trim_end_matches('/'),
            parts.uri.path_and_query().map_or("/", |p| p.as_str())
        );
        // A HEAD answer's Content-Length is the size of what a GET would answer (an S3 object's),
        // not of its empty body: it is passed on as it came.
        let head = parts.method == hyper::Method::HEAD;
        let mut request = Request::builder().method(parts.method.clone()).uri(uri);
        for (name, value) in &parts.headers {
            if name != hyper::header::CONTENT_LENGTH {
                request = request.header(name, value);
            }
        }
        let request = request
            .header(hyper::header::CONTENT_LENGTH, body.len())
            .body(Full::new(body))
            .expect("a valid request");
        match self.client.request(request).await {
            Ok(response) => {
                let (parts, body) = response.into_parts();
                let bytes = body
                    .collect()
                    .await
                    .map(|c| c.to_bytes())
                    .unwrap_or_default();
                let mut response = Response::from_parts(parts, Full::new(bytes.clone()));
                let headers = response.headers_mut();
                // The body is whole now: the upstream's framing (DynamoDB Local answers large
                // bodies chunked) must not reach the client beside a Content-Length.
                for hop_by_hop in [hyper::header::TRANSFER_ENCODING, hyper::header::CONNECTION] {
                    headers.remove(hop_by_hop);
                }
                if !head {
                    headers.insert(hyper::header::CONTENT_LENGTH, bytes.len().into());
                }
                response
            }
            Err(e) => text(StatusCode::BAD_GATEWAY, &format!("upstream: {e}")),
        }
    }

    /// AWS's answer to a `SendMessage` whose body or a string attribute value holds a character
    /// SQS does not allow ([`sqs_invalid_contents`]); `None` when every character is allowed.
    fn refuse_invalid_message(&self, body: &Bytes) -> Option<Response<Full<Bytes>>> {
        let request: Value = serde_json::from_slice(body).ok()?;
        let message = sqs_invalid_contents(&request)?;
        self.counts
            .lock()
            .expect("counts")
            .entry(SEND_MESSAGE.to_owned())
            .or_default()
            .invalid_messages += 1;
        Some(sqs_error("InvalidMessageContents", &message))
    }

    /// AWS's answer to a `SendMessage` whose message is larger than its queue's
    /// `MaximumMessageSize`; `None` when it fits (or the queue's limit can't be read).
    async fn refuse_oversized_message(
        &self,
        parts: &hyper::http::request::Parts,
        body: &Bytes,
    ) -> Option<Response<Full<Bytes>>> {
        let request: Value = serde_json::from_slice(body).ok()?;
        let queue_url = request["QueueUrl"].as_str()?;
        let limit = self.message_size_limit(parts, queue_url).await?;
        if sqs_message_size(&request) <= limit {
            return None;
        }
        self.counts
            .lock()
            .expect("counts")
            .entry(SEND_MESSAGE.to_owned())
            .or_default()
            .oversized_messages += 1;
        Some(sqs_error(
            "InvalidParameterValue",
            &format!(
                "One or more parameters are invalid. Reason: Message must be shorter than {limit} bytes."
            ),
        ))
    }

    /// The queue's `MaximumMessageSize`, asked of the emulator with the caller's own headers (the
    /// emulator reads the account and region from them, and checks no signature) the first time.
    async fn message_size_limit(
        &self,
        parts: &hyper::http::request::Parts,
        queue_url: &str,
    ) -> Option<usize> {
        if let Some(limit) = self
            .message_size_limits
            .lock()
            .expect("limits")
            .get(queue_url)
        {
            return Some(*limit);
        }
        let mut ask = Request::builder()
            .method(parts.method.clone())
            .uri(parts.uri.clone());
        for (name, value) in &parts.headers {
            if name != "x-amz-target" {
                ask = ask.header(name, value);
            }
        }
        let (ask, ()) = ask
            .header("x-amz-target", GET_QUEUE_ATTRIBUTES)
            .body(())
            .expect("a valid request")
            .into_parts();
        let question = json!({"QueueUrl": queue_url, "AttributeNames": ["MaximumMessageSize"]});
        let answer = self
            .forward(
                &ask,
                Bytes::from(serde_json::to_vec(&question).expect("JSON")),
            )
            .await;
        if answer.status() != StatusCode::OK {
            return None;
        }
        let bytes = answer.into_body().collect().await.ok()?.to_bytes();
        let answer: Value = serde_json::from_slice(&bytes).ok()?;
        let limit = answer["Attributes"]["MaximumMessageSize"]
            .as_str()?
            .parse()
            .ok()?;
        self.message_size_limits
            .lock()
            .expect("limits")
            .insert(queue_url.to_owned(), limit);
        Some(limit)
    }

    /// A `PutEvents` call, in wire format `W`, with the entries of `plan` failed: the others sent
    /// on (the call forwarded whole when none fails, or when its body does not parse), the
    /// failures put back at their indices in the answer.
    async fn put_events<W: PutEventsWire>(
        &self,
        parts: &hyper::http::request::Parts,
        body: &Bytes,
        plan: &[Option<&'static str>],
    ) -> Response<Full<Bytes>> {
        let Some(mut request) = W::request(body) else {
            return self.forward(parts, body.clone()).await;
        };
        if plan.iter().all(Option::is_none) {
            return self.forward(parts, body.clone()).await;
        }
        // Read before the request is re-encoded with the kept entries only.
        let entries = W::entries(&request);
        let kept: Vec<W::Value> = entries
            .iter()
            .zip(plan)
            .filter(|(_, fault)| fault.is_none())
            .map(|(entry, _)| entry.clone())
            .collect();
        let delivered = if kept.is_empty() {
            Vec::new()
        } else {
            let forwarded = self
                .forward(parts, W::encode_with(&mut request, kept))
                .await;
            if forwarded.status() != StatusCode::OK {
                return forwarded;
            }
            let bytes = forwarded
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            W::results(&bytes)
        };
        let mut delivered = delivered.into_iter();
        let results = plan
            .iter()
            .zip(&entries)
            .map(|(fault, entry)| match fault {
                Some(code) => W::entry_error(entry, code, "injected entry failure"),
                None => delivered
                    .next()
                    .unwrap_or_else(|| W::entry_error(entry, W::INTERNAL_ERROR, "missing result")),
            })
            .collect();
        W::answer(results)
    }
}

/// A bus's `PutEvents` wire format, as much of it as splitting a call needs: the classic bus's
/// JSON ([`ClassicJson`]) or the Custom Event Bus's CBOR ([`CustomCbor`]); and the other targets'
/// calls, which split alike.
trait PutEventsWire {
    type Value: Clone;
    /// The bus's code for an internal error, given to a result upstream's answer lacks.
    const INTERNAL_ERROR: &'static str;
    /// The request, if its body parses.
    fn request(body: &[u8]) -> Option<Self::Value>;
    /// The request's entries.
    fn entries(request: &Self::Value) -> Vec<Self::Value>;
    /// The request with `entries` in place of its own, encoded.
    fn encode_with(request: &mut Self::Value, entries: Vec<Self::Value>) -> Bytes;
    /// The per-entry results of an answer's body.
    fn results(answer: &[u8]) -> Vec<Self::Value>;
    /// The failed result of `entry`.
    fn entry_error(entry: &Self::Value, code: &str, message: &str) -> Self::Value;
    /// The answer of `results`, in entry order, with its failed-entry count.
    fn answer(results: Vec<Self::Value>) -> Response<Full<Bytes>>;
}

/// A call in AWS JSON 1.1 whose entries and per-entry results, in entry order, are the array
/// `ENTRIES` of the request and of the answer, which counts its failed ones in `FAILED_COUNT`.
trait AwsJsonBatch {
    const ENTRIES: &'static str;
    const FAILED_COUNT: &'static str;
}

/// The classic bus's `PutEvents`.
struct ClassicJson;

impl AwsJsonBatch for ClassicJson {
    const ENTRIES: &'static str = "Entries";
    const FAILED_COUNT: &'static str = "FailedEntryCount";
}

/// The Kinesis target's `PutRecords`.
struct KinesisJson;

impl AwsJsonBatch for KinesisJson {
    const ENTRIES: &'static str = "Records";
    const FAILED_COUNT: &'static str = "FailedRecordCount";
}

impl<W: AwsJsonBatch> PutEventsWire for W {
    type Value = Value;
    const INTERNAL_ERROR: &'static str = "InternalFailure";

    fn request(body: &[u8]) -> Option<Value> {
        serde_json::from_slice(body).ok()
    }

    fn entries(request: &Value) -> Vec<Value> {
        request[W::ENTRIES].as_array().cloned().unwrap_or_default()
    }

    fn encode_with(request: &mut Value, entries: Vec<Value>) -> Bytes {
        request[W::ENTRIES] = Value::Array(entries);
        Bytes::from(serde_json::to_vec(request).expect("JSON"))
    }

    fn results(answer: &[u8]) -> Vec<Value> {
        let answer: Value = serde_json::from_slice(answer).unwrap_or_default();
        answer[W::ENTRIES].as_array().cloned().unwrap_or_default()
    }

    fn entry_error(_: &Value, code: &str, message: &str) -> Value {
        json!({"ErrorCode": code, "ErrorMessage": message})
    }

    fn answer(results: Vec<Value>) -> Response<Full<Bytes>> {
        let failed = results
            .iter()
            .filter(|r| r.get("ErrorCode").is_some())
            .count();
        let mut answer = serde_json::Map::new();
        answer.insert(W::FAILED_COUNT.to_owned(), json!(failed));
        answer.insert(W::ENTRIES.to_owned(), Value::Array(results));
        json_response(StatusCode::OK, &Value::Object(answer))
    }
}

/// The Custom Event Bus: Smithy RPC v2 CBOR.
struct CustomCbor;

impl PutEventsWire for CustomCbor {
    type Value = ciborium::Value;
    const INTERNAL_ERROR: &'static str = "InternalException";

    fn request(body: &[u8]) -> Option<ciborium::Value> {
        crate::cbor::decode(body)
    }

    fn entries(request: &ciborium::Value) -> Vec<ciborium::Value> {
        crate::cbor::entries(request).cloned().unwrap_or_default()
    }

    fn encode_with(request: &mut ciborium::Value, entries: Vec<ciborium::Value>) -> Bytes {
        crate::cbor::set_entries(request, entries);
        Bytes::from(crate::cbor::encode(request))
    }

    fn results(answer: &[u8]) -> Vec<ciborium::Value> {
        crate::cbor::decode(answer)
            .as_ref()
            .and_then(crate::cbor::entries)
            .cloned()
            .unwrap_or_default()
    }

    fn entry_error(_: &ciborium::Value, code: &str, message: &str) -> ciborium::Value {
        crate::cbor::entry_error(code, message)
    }

    fn answer(results: Vec<ciborium::Value>) -> Response<Full<Bytes>> {
        cbor_response(StatusCode::OK, crate::cbor::put_events_answer(results))
    }
}

/// The entries' envelopes (their bus `Detail`, a message's body, a record's data) of a call to
/// the SQS, SNS or Kinesis target, with the code the target gives a failed entry; `None` for any
/// other call.
fn target_entries(target: &str, body: &[u8]) -> Option<(Vec<String>, &'static str)> {
    match target {
        SEND_MESSAGE_BATCH => {
            let request = SqsJson::request(body)?;
            let details = SqsJson::entries(&request)
                .iter()
                .map(|e| e["MessageBody"].as_str().unwrap_or_default().to_owned())
                .collect();
            Some((details, "InternalError"))
        }
        PUBLISH_BATCH => {
            let request = SnsQuery::request(body)?;
            let details = SnsQuery::entries(&request)
                .iter()
                .map(|e| e["Message"].as_str().unwrap_or_default().to_owned())
                .collect();
            Some((details, "InternalError"))
        }
        PUT_RECORDS => {
            let request = KinesisJson::request(body)?;
            let details = KinesisJson::entries(&request)
                .iter()
                .map(|e| {
                    e["Data"]
                        .as_str()
                        .and_then(|d| aws_smithy_types::base64::decode(d).ok())
                        .map(|d| String::from_utf8_lossy(&d).into_owned())
                        .unwrap_or_default()
                })
                .collect();
            Some((details, "InternalFailure"))
        }
        _ => None,
    }
}

/// The SQS target's `SendMessageBatch`: AWS JSON 1.0, results by entry id.
struct SqsJson;

impl PutEventsWire for SqsJson {
    type Value = Value;
    const INTERNAL_ERROR: &'static str = "InternalError";

    fn request(body: &[u8]) -> Option<Value> {
        serde_json::from_slice(body).ok()
    }

    fn entries(request: &Value) -> Vec<Value> {
        request["Entries"].as_array().cloned().unwrap_or_default()
    }

    fn encode_with(request: &mut Value, entries: Vec<Value>) -> Bytes {
        request["Entries"] = Value::Array(entries);
        Bytes::from(serde_json::to_vec(request).expect("JSON"))
    }

    fn results(answer: &[u8]) -> Vec<Value> {
        let answer: Value = serde_json::from_slice(answer).unwrap_or_default();
        ["Successful", "Failed"]
            .iter()
            .flat_map(|list| answer[list].as_array().cloned().unwrap_or_default())
            .collect()
    }

    fn entry_error(entry: &Value, code: &str, message: &str) -> Value {
        json!({"Id": entry["Id"], "Code": code, "Message": message, "SenderFault": false})
    }

    fn answer(results: Vec<Value>) -> Response<Full<Bytes>> {
        let (failed, successful): (Vec<Value>, Vec<Value>) =
            results.into_iter().partition(|r| r.get("Code").is_some());
        let bytes = Bytes::from(
            serde_json::to_vec(&json!({"Successful": successful, "Failed": failed})).expect("JSON"),
        );
        Response::builder()
            .status(StatusCode::OK)
            .header(hyper::header::CONTENT_TYPE, "application/x-amz-json-1.0")
            .header(hyper::header::CONTENT_LENGTH, bytes.len())
            .body(Full::new(bytes))
            .expect("a valid response")
    }
}

/// The SNS target's `PublishBatch`: the query protocol (a form in, XML out), results by entry id.
/// A request is read as `{"head": [[name, value], …], "entries": [{member: value, …}, …]}`.
struct SnsQuery;

/// The form members of `PublishBatch`'s entries.
const SNS_ENTRY_PREFIX: &str = "PublishBatchRequestEntries.member.";

impl PutEventsWire for SnsQuery {
    type Value = Value;
    const INTERNAL_ERROR: &'static str = "InternalError";

    fn request(body: &[u8]) -> Option<Value> {
        let mut head = Vec::new();
        let mut entries: std::collections::BTreeMap<usize, serde_json::Map<String, Value>> =
            std::collections::BTreeMap::new();
        for (name, value) in form_pairs(body) {
            match name
                .strip_prefix(SNS_ENTRY_PREFIX)
                .and_then(|rest| rest.split_once('.'))
                .and_then(|(n, member)| Some((n.parse::<usize>().ok()?, member.to_owned())))
            {
                Some((n, member)) => {
                    entries
                        .entry(n)
                        .or_default()
                        .insert(member, Value::String(value));
                }
                None => head.push(json!([name, value])),
            }
        }
        Some(json!({"head": head, "entries": entries.into_values().collect::<Vec<_>>()}))
    }

    fn entries(request: &Value) -> Vec<Value> {
        request["entries"].as_array().cloned().unwrap_or_default()
    }

    fn encode_with(request: &mut Value, entries: Vec<Value>) -> Bytes {
        let mut pairs: Vec<(String, String)> = request["head"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|pair| {
                (
                    pair[0].as_str().unwrap_or_default().to_owned(),
                    pair[1].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        for (i, entry) in entries.iter().enumerate() {
            for (member, value) in entry.as_object().into_iter().flatten() {
                pairs.push((
                    format!("{SNS_ENTRY_PREFIX}{}.{member}", i + 1),
                    value.as_str().unwrap_or_default().to_owned(),
                ));
            }
        }
        Bytes::from(form_encode(&pairs))
    }

    fn results(answer: &[u8]) -> Vec<Value> {
        let answer = String::from_utf8_lossy(answer);
        let successful = answer
            .split_once("<Successful>")
            .and_then(|(_, rest)| rest.split_once("</Successful>"))
            .map_or("", |(list, _)| list);
        successful
            .split("<member>")
            .skip(1)
            .map(|member| {
                json!({
                    "Id": xml_text(member, "Id"),
                    "MessageId": xml_text(member, "MessageId"),
                })
            })
            .collect()
    }

    fn entry_error(entry: &Value, code: &str, message: &str) -> Value {
        json!({"Id": entry["Id"], "Code": code, "Message": message})
    }

    fn answer(results: Vec<Value>) -> Response<Full<Bytes>> {
        let member = |fields: &[(&str, String)]| {
            let inner: String = fields
                .iter()
                .map(|(name, value)| format!("<{name}>{}</{name}>", xml_escape(value)))
                .collect();
            format!("<member>{inner}</member>")
        };
        let text = |r: &Value, name: &str| r[name].as_str().unwrap_or_default().to_owned();
        let (failed, successful): (Vec<Value>, Vec<Value>) =
            results.into_iter().partition(|r| r.get("Code").is_some());
        let successful: String = successful
            .iter()
            .map(|r| member(&[("Id", text(r, "Id")), ("MessageId", text(r, "MessageId"))]))
            .collect();
        let failed: String = failed
            .iter()
            .map(|r| {
                member(&[
                    ("Id", text(r, "Id")),
                    ("Code", text(r, "Code")),
                    ("Message", text(r, "Message")),
                    ("SenderFault", "false".to_owned()),
                ])
            })
            .collect();
        let body = format!(
            "<PublishBatchResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\">\
             <PublishBatchResult><Successful>{successful}</Successful><Failed>{failed}</Failed>\
             </PublishBatchResult><ResponseMetadata><RequestId>fault-proxy</RequestId>\
             </ResponseMetadata></PublishBatchResponse>"
        );
        Response::builder()
            .status(StatusCode::OK)
            .header(hyper::header::CONTENT_TYPE, "text/xml")
            .header(hyper::header::CONTENT_LENGTH, body.len())
            .body(Full::new(Bytes::from(body)))
            .expect("a valid response")
    }
}

/// SNS's error answer (the query protocol's XML).
fn sns_error(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    let body = format!(
        "<ErrorResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"><Error>\
         <Type>Receiver</Type><Code>{code}</Code><Message>{}</Message></Error>\
         <RequestId>fault-proxy</RequestId></ErrorResponse>",
        xml_escape(message)
    );
    Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, "text/xml")
        .header(hyper::header::CONTENT_LENGTH, body.len())
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}

/// The text of the first `<name>` element in `xml` (unescaped).
fn xml_text(xml: &str, name: &str) -> String {
    xml.split_once(&format!("<{name}>"))
        .and_then(|(_, rest)| rest.split_once(&format!("</{name}>")))
        .map(|(text, _)| {
            text.replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&apos;", "'")
                .replace("&amp;", "&")
        })
        .unwrap_or_default()
}

fn xml_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The pairs of an `application/x-www-form-urlencoded` body, decoded.
fn form_pairs(body: &[u8]) -> Vec<(String, String)> {
    let decode = |text: &str| {
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < bytes.len() => {
                    let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                    match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
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
    };
    String::from_utf8_lossy(body)
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            (decode(name), decode(value))
        })
        .collect()
}

/// `pairs` as an `application/x-www-form-urlencoded` body.
fn form_encode(pairs: &[(String, String)]) -> String {
    let encode = |text: &str| {
        text.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                other => format!("%{other:02X}"),
            })
            .collect::<String>()
    };
    pairs
        .iter()
        .map(|(name, value)| format!("{}={}", encode(name), encode(value)))
        .collect::<Vec<_>>()
        .join("&")
}

/// Why EventBridge would refuse this `PutEvents` request as a whole, where moto lets it pass; the
/// message names the member and the constraint as EventBridge's does, without the value.
///
/// The request size is counted as EventBridge documents it ("Calculating PutEvents event entry
/// size") and as `OutboundEvent::entry_size` counts it: per entry, 14 bytes for a `Time`, and the
/// UTF-8 bytes of `Source`, `DetailType`, `Detail` and each of `Resources`; the bus name and the
/// trace header do not count. Length constraints count characters, as Smithy's `@length` does.
pub fn put_events_refusal(body: &[u8]) -> Option<String> {
    let request: Value = serde_json::from_slice(body).ok()?;
    let entries = request["Entries"].as_array()?;
    let constraint = |member: &str, bound: &str| {
        format!(
            "1 validation error detected: Value at '{member}' failed to satisfy constraint: \
             Member must have length {bound}"
        )
    };
    if entries.len() > PUT_EVENTS_MAX_ENTRIES {
        return Some(constraint(
            "entries",
            &format!("less than or equal to {PUT_EVENTS_MAX_ENTRIES}"),
        ));
    }
    for (i, entry) in entries.iter().enumerate() {
        let member = |name: &str| format!("entries.{}.member.{name}", i + 1);
        let chars = |name: &str| entry[name].as_str().map(|v| v.chars().count());
        if chars("DetailType").is_some_and(|n| n > PUT_EVENTS_DETAIL_TYPE_MAX_CHARS) {
            return Some(constraint(
                &member("detailType"),
                &format!("less than or equal to {PUT_EVENTS_DETAIL_TYPE_MAX_CHARS}"),
            ));
        }
        match chars("TraceHeader") {
            Some(0) => {
                return Some(constraint(
                    &member("traceHeader"),
                    "greater than or equal to 1",
                ));
            }
            Some(n) if n > PUT_EVENTS_TRACE_HEADER_MAX_CHARS => {
                return Some(constraint(
                    &member("traceHeader"),
                    &format!("less than or equal to {PUT_EVENTS_TRACE_HEADER_MAX_CHARS}"),
                ));
            }
            _ => {}
        }
    }
    let bytes: usize = entries.iter().map(put_events_entry_bytes).sum();
    (bytes > PUT_EVENTS_DEFAULT_MAX_BYTES)
        .then(|| "Total size of the entries in the request is over the limit.".to_owned())
}

/// One `PutEvents` entry's size as EventBridge counts it (see [`put_events_refusal`]).
fn put_events_entry_bytes(entry: &Value) -> usize {
    let text = |name: &str| entry[name].as_str().map_or(0, str::len);
    let time = if entry.get("Time").is_some_and(|t| !t.is_null()) {
        PUT_EVENTS_TIME_BYTES
    } else {
        0
    };
    let resources: usize = entry["Resources"].as_array().map_or(0, |r| {
        r.iter().filter_map(Value::as_str).map(str::len).sum()
    });
    time + text("Source") + text("DetailType") + text("Detail") + resources
}

/// The size of a `SendMessage` request's message as SQS counts it against `MaximumMessageSize`:
/// the body's UTF-8 bytes, and each message attribute's name, data type and value (a binary value
/// decoded). Message system attributes (`AWSTraceHeader`) do not count.
fn sqs_message_size(request: &Value) -> usize {
    let body = request["MessageBody"].as_str().map_or(0, str::len);
    let attributes = request["MessageAttributes"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(name, value)| {
            let data_type = value["DataType"].as_str().map_or(0, str::len);
            let string = value["StringValue"].as_str().map_or(0, str::len);
            let binary = value["BinaryValue"]
                .as_str()
                .and_then(|b| aws_smithy_types::base64::decode(b).ok())
                .map_or(0, |b| b.len());
            name.len() + data_type + string + binary
        })
        .sum::<usize>();
    body + attributes
}

/// Whether SQS allows `c` in a message body or a string message attribute value: XML 1.0's
/// characters, `#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF` (what
/// `SendMessage` documents; anything else is `InvalidMessageContents`).
pub fn sqs_allows(c: char) -> bool {
    matches!(c, '\u{9}' | '\u{A}' | '\u{D}' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..='\u{10FFFF}')
}

/// Why SQS would refuse this `SendMessage` request (JSON protocol) as `InvalidMessageContents`:
/// the first character outside [`sqs_allows`]'s set in its body, then in its string attribute
/// values, named as AWS names it in a body (`Invalid binary character '#xFFFE' was found in the
/// message body, ...`; the wording for an attribute is modelled on it). The characters are those
/// of the request after JSON decoding: a `\u0001` escape in the request is the character U+0001,
/// refused, where six characters `\\u0001` in the body are allowed.
pub fn sqs_invalid_contents(request: &Value) -> Option<String> {
    let refused = |text: &str, place: &str| {
        text.chars().find(|c| !sqs_allows(*c)).map(|c| {
            format!(
                "Invalid binary character '#x{:X}' was found in {place}, the set of allowed \
                 characters is #x9 | #xA | #xD | [#x20-#xD7FF] | [#xE000-#xFFFD] | \
                 [#x10000-#x10FFFF]",
                u32::from(c)
            )
        })
    };
    if let Some(message) = request["MessageBody"]
        .as_str()
        .and_then(|body| refused(body, "the message body"))
    {
        return Some(message);
    }
    request["MessageAttributes"]
        .as_object()
        .into_iter()
        .flatten()
        .find_map(|(name, value)| {
            value["StringValue"]
                .as_str()
                .and_then(|text| refused(text, &format!("the value of message attribute '{name}'")))
        })
}

/// An SQS error as the JSON protocol answers it: HTTP 400, the shape's id in `__type`, and the
/// query-compatible code in `x-amzn-query-error` (the SDK reads the code from the header first).
fn sqs_error(code: &str, message: &str) -> Response<Full<Bytes>> {
    let bytes = Bytes::from(
        serde_json::to_vec(&json!({
            "__type": format!("com.amazonaws.sqs#{code}"),
            "message": message,
        }))
        .expect("JSON"),
    );
    Response::builder()
        .status(StatusCode::BAD_REQUEST)
        .header(hyper::header::CONTENT_TYPE, "application/x-amz-json-1.0")
        .header("x-amzn-query-error", format!("{code};Sender"))
        .header(hyper::header::CONTENT_LENGTH, bytes.len())
        .body(Full::new(bytes))
        .expect("a valid response")
}

/// Why DynamoDB would refuse this call ([`crate::dynamodb_rules`]), if it would.
fn refusal(target: &str, body: &[u8]) -> Option<String> {
    if target != BATCH_EXECUTE_STATEMENT {
        return None;
    }
    let request: Value = serde_json::from_slice(body).ok()?;
    let statements = request["Statements"].as_array()?;
    crate::dynamodb_rules::batch_execute_statement_refusal(
        statements.iter().map(crate::dynamodb_rules::statement_item),
    )
}

/// The service a request is signed for: the credential scope of its SigV4 `Authorization`
/// (`Credential=KEY/DATE/REGION/SERVICE/aws4_request`).
fn signed_for(headers: &hyper::HeaderMap) -> Option<&str> {
    let authorization = headers.get(hyper::header::AUTHORIZATION)?.to_str().ok()?;
    let scope = authorization.split("Credential=").nth(1)?;
    scope.split(['/', ',']).nth(3)
}

/// The S3 operation of a path-style request (`/bucket` or `/bucket/key`), as AWS names it: the
/// ones the relays and the tests make, and `Other` for the rest.
pub fn s3_operation(parts: &hyper::http::request::Parts) -> &'static str {
    use hyper::Method;
    let on_object = parts
        .uri
        .path()
        .trim_start_matches('/')
        .split_once('/')
        .is_some_and(|(_, key)| !key.is_empty());
    let query = parts.uri.query().unwrap_or_default();
    let has = |name: &str| {
        query
            .split('&')
            .any(|pair| pair.split('=').next() == Some(name))
    };
    match (&parts.method, on_object) {
        (&Method::GET, true) => "GetObject",
        (&Method::PUT, true) if parts.headers.contains_key("x-amz-copy-source") => "CopyObject",
        (&Method::PUT, true) => "PutObject",
        (&Method::DELETE, true) => "DeleteObject",
        (&Method::HEAD, true) => "HeadObject",
        (&Method::GET, false) if has("list-type") => "ListObjectsV2",
        (&Method::GET, false) if has("versions") => "ListObjectVersions",
        (&Method::HEAD, false) => "HeadBucket",
        (&Method::PUT, false) if has("versioning") => "PutBucketVersioning",
        (&Method::PUT, false) if has("encryption") => "PutBucketEncryption",
        (&Method::PUT, false) if has("publicAccessBlock") => "PutPublicAccessBlock",
        (&Method::PUT, false) if query.is_empty() => "CreateBucket",
        _ => "Other",
    }
}

/// An S3 error answer: XML, as S3's REST API answers.
fn s3_error(status: StatusCode, code: &str, message: &str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, "application/xml")
        .body(Full::new(Bytes::from(format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>"
        ))))
        .expect("a response")
}

fn json_response(status: StatusCode, body: &Value) -> Response<Full<Bytes>> {
    let bytes = Bytes::from(serde_json::to_vec(body).expect("JSON"));
    Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, "application/x-amz-json-1.1")
        .header(hyper::header::CONTENT_LENGTH, bytes.len())
        .body(Full::new(bytes))
        .expect("a valid response")
}

fn cbor_response(status: StatusCode, body: Vec<u8>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header(hyper::header::CONTENT_TYPE, crate::cbor::CONTENT_TYPE)
        .header(crate::cbor::PROTOCOL_HEADER, crate::cbor::PROTOCOL)
        .header(hyper::header::CONTENT_LENGTH, body.len())
        .body(Full::new(Bytes::from(body)))
        .expect("a valid response")
}

fn text(status: StatusCode, message: &str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .body(Full::new(Bytes::from(message.to_owned())))
        .expect("a valid response")
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_shared::OutboundEvent;

    fn entry(detail_type: &str, detail: &str) -> Value {
        json!({"Source": "test.orders", "DetailType": detail_type, "Detail": detail,
               "EventBusName": "bus", "Time": 1.7e9})
    }

    fn request(entries: Vec<Value>) -> Vec<u8> {
        serde_json::to_vec(&json!({ "Entries": entries })).unwrap()
    }

    #[test]
    fn an_entry_is_sized_as_the_publisher_sizes_it() {
        let event = OutboundEvent {
            event_id: "e1".into(),
            ordering_key: "a".into(),
            event_group: "Order#a".into(),
            detail_type: "OrderCreated".into(),
            detail: r#"{"data":"ü"}"#.into(),
            time: Some(aws_smithy_types::DateTime::from_secs(1_700_000_000)),
            trace_header: Some("Root=1-abc".into()),
        };
        let json = entry(&event.detail_type, &event.detail);
        assert_eq!(
            put_events_entry_bytes(&json),
            event.entry_size("test.orders")
        );
    }

    #[test]
    fn refuses_what_sqs_refuses_as_invalid_message_contents() {
        let message = |body: &str, attribute: &str| {
            json!({"QueueUrl": "q", "MessageBody": body, "MessageAttributes": {
                "eventId": {"DataType": "String", "StringValue": attribute}}})
        };
        // Each boundary of the allowed set, in the body and in an attribute value
        for allowed in [
            '\u{9}',
            '\u{A}',
            '\u{D}',
            '\u{20}',
            '\u{D7FF}',
            '\u{E000}',
            '\u{FFFD}',
            '\u{10000}',
            '\u{10FFFF}',
        ] {
            let text = format!("a{allowed}b");
            assert_eq!(
                sqs_invalid_contents(&message(&text, &text)),
                None,
                "{allowed:?}"
            );
        }
        for refused in [
            '\u{0}', '\u{8}', '\u{B}', '\u{C}', '\u{E}', '\u{1F}', '\u{FFFE}', '\u{FFFF}',
        ] {
            let text = format!("a{refused}b");
            let hex = format!("'#x{:X}'", u32::from(refused));
            let in_body = sqs_invalid_contents(&message(&text, "ok")).expect("refused");
            assert!(
                in_body.contains(&hex) && in_body.contains("message body"),
                "{in_body}"
            );
            let in_attribute = sqs_invalid_contents(&message("ok", &text)).expect("refused");
            assert!(
                in_attribute.contains(&hex) && in_attribute.contains("'eventId'"),
                "{in_attribute}"
            );
        }
        // A JSON escape in the body is six allowed characters, not the character it stands for
        assert_eq!(
            sqs_invalid_contents(&message(r#"{"p":"\ufffe"}"#, "ok")),
            None
        );
    }

    #[test]
    fn refuses_what_eventbridge_refuses_as_a_whole_call() {
        let ok = || entry("OrderCreated", "{}");
        assert_eq!(put_events_refusal(&request(vec![ok(); 10])), None);
        let refused = [
            (vec![ok(); 11], "'entries'"),
            (
                vec![ok(), entry(&"x".repeat(129), "{}")],
                "'entries.2.member.detailType'",
            ),
            (
                vec![{
                    let mut e = ok();
                    e["TraceHeader"] = json!("");
                    e
                }],
                "greater than or equal to 1",
            ),
            (
                vec![{
                    let mut e = ok();
                    e["TraceHeader"] = json!("t".repeat(501));
                    e
                }],
                "less than or equal to 500",
            ),
            (
                vec![
                    entry("t", &"d".repeat(200 * 1024)),
                    entry("t", &"d".repeat(60 * 1024)),
                ],
                "Total size",
            ),
        ];
        for (entries, says) in refused {
            let message = put_events_refusal(&request(entries)).expect("refused");
            assert!(message.contains(says), "{message}");
        }
        // 128 characters of 2 bytes each are within the limit: it counts characters
        assert_eq!(
            put_events_refusal(&request(vec![entry(&"é".repeat(128), "{}")])),
            None
        );
    }
}
