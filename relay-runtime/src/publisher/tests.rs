use super::attempt::permanent_outcome;
use super::request::call_dependencies;
use super::*;
use crate::config::{PublisherConfig, SettingError};
use crate::deadline::Deadline;
use crate::target::classic::{self, entry_results};
use crate::target::{ClassicBus, ENTRY_TOO_LARGE};
use aws_sdk_eventbridge::Client;
use aws_sdk_eventbridge::config::retry::RetryConfig;
use aws_sdk_eventbridge::operation::put_events::PutEventsOutput;
use aws_sdk_eventbridge::types::PutEventsResultEntry;
use aws_smithy_mocks::{Rule, RuleMode, create_mock_http_client, mock, mock_client};
use outbox_shared::RetryPolicy;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// EventBridge's code of a call or entry refused for the bus's `PutEvents` quota.
const THROTTLED: &str = "ThrottlingException";

/// The classic bus's publisher on `client`'s configuration.
fn publisher_on(client: Client, config: PublisherConfig) -> Result<TargetPublisher, SettingError> {
    TargetPublisher::on(ClassicBus::new(client.config().to_builder()), config)
}

/// An EventBridge client answered by `rules` (SDK retries off: the publisher's own count).
fn mock_eventbridge(rules: &[&Rule]) -> Client {
    mock_client!(aws_sdk_eventbridge, RuleMode::Sequential, rules, |c| c
        .retry_config(RetryConfig::disabled()))
}

/// An EventBridge client answered by the first of `rules` that matches each call, as often as
/// it is called.
fn eventbridge_answering_any(rules: &[&Rule]) -> Client {
    mock_client!(aws_sdk_eventbridge, RuleMode::MatchAny, rules, |c| c
        .retry_config(RetryConfig::disabled()))
}

/// EventBridge's answer to a call it refuses as a whole: HTTP 400 with the error's `code`.
fn refused_call(code: &'static str) -> aws_smithy_runtime_api::http::Response {
    aws_smithy_runtime_api::http::Response::new(
        aws_smithy_runtime_api::http::StatusCode::try_from(400).unwrap(),
        aws_smithy_types::body::SdkBody::from(format!(
            r#"{{"__type":"{code}","message":"1 validation error detected"}}"#
        )),
    )
}

fn quick_config() -> PublisherConfig {
    PublisherConfig {
        retry: RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        },
        ..PublisherConfig::new("bus", "test.orders")
    }
}

fn accepted(count: usize) -> PutEventsOutput {
    PutEventsOutput::builder()
        .set_entries(Some(
            (0..count)
                .map(|i| {
                    PutEventsResultEntry::builder()
                        .event_id(format!("eb-{i}"))
                        .build()
                })
                .collect(),
        ))
        .failed_entry_count(0)
        .build()
}

#[tokio::test]
async fn the_publisher_stamps_its_bus_and_source_on_every_entry() {
    // Given EventBridge that accepts only entries for bus "bus" from source "test.orders"
    let put = mock!(Client::put_events)
        .match_requests(|req| {
            req.entries().iter().all(|e| {
                e.event_bus_name() == Some("bus")
                    && e.source() == Some("test.orders")
                    && e.detail_type() == Some("t")
            })
        })
        .then_output(|| accepted(3));
    let publisher = publisher_on(mock_eventbridge(&[&put]), quick_config()).unwrap();
    let events: Vec<_> = ["a", "b", "c"].iter().map(|k| event(k, 5)).collect();

    // When three events are published
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then all three are published in one call
    assert!(
        outcomes.iter().all(PublishOutcome::is_published),
        "{outcomes:?}"
    );
    assert_eq!(put.num_calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_throttled_entry_is_retried_until_it_is_published() {
    // Given a first answer that throttles the second entry, then acceptance
    let throttled = mock!(Client::put_events).then_output(|| {
        PutEventsOutput::builder()
            .entries(PutEventsResultEntry::builder().event_id("eb-0").build())
            .entries(
                PutEventsResultEntry::builder()
                    .error_code("ThrottlingException")
                    .error_message("slow down")
                    .build(),
            )
            .failed_entry_count(1)
            .build()
    });
    let retried = mock!(Client::put_events)
        .match_requests(|req| req.entries().len() == 1)
        .then_output(|| accepted(1));
    let publisher =
        publisher_on(mock_eventbridge(&[&throttled, &retried]), quick_config()).unwrap();
    let recorder = metrics_util::debugging::DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    // When two events are published
    let started = Instant::now();
    let outcomes = publisher
        .publish(&[event("a", 5), event("b", 5)], Deadline::NONE)
        .await;

    // Then both are published, the second after one retry
    assert_eq!(outcomes, vec![PublishOutcome::Published; 2]);
    let stats = publisher.stats();
    assert_eq!((stats.publish_calls, stats.retried), (2, 1));
    // And the publisher lowered its rate to 70 % of the one entry accepted in the last second
    // (no lower than 1 entry/s), counting the throttled entry; the retry left once the
    // throttled call's 2 entries had passed at that rate (2 s), and being accepted raised
    // the rate by 10 entries/s for each of those seconds
    assert_eq!(stats.throttled, 1);
    let waited = started.elapsed();
    assert!(
        (Duration::from_secs(2)..Duration::from_millis(2100)).contains(&waited),
        "{waited:?}"
    );
    let rate = publisher.publish_rate().expect("a limit after throttling");
    assert!((21.0..22.0).contains(&rate), "{rate}");
    // And an operator sees it: one entry throttled, one retried, the lowered limit recorded
    let recorded: std::collections::HashMap<String, metrics_util::debugging::DebugValue> =
        snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, _, _, value)| (key.key().name().to_owned(), value))
            .collect();
    use metrics_util::debugging::DebugValue;
    assert_eq!(
        recorded.get(crate::metrics::THROTTLED),
        Some(&DebugValue::Counter(1))
    );
    assert_eq!(
        recorded.get(crate::metrics::RETRIED),
        Some(&DebugValue::Counter(1))
    );
    let Some(DebugValue::Histogram(limits)) = recorded.get(crate::metrics::PUBLISH_RATE_LIMIT)
    else {
        panic!("no publish rate limit recorded: {recorded:?}");
    };
    assert_eq!(limits.len(), 1);
    // 70 % of the one entry accepted, held at the floor of 1 entry/s
    assert!((limits[0].into_inner() - 1.0).abs() < 1e-9, "{limits:?}");
}

#[tokio::test]
async fn a_publisher_with_no_ceiling_and_no_throttling_has_no_publish_rate_limit() {
    let put = mock!(Client::put_events).then_output(|| accepted(1));
    let publisher = publisher_on(mock_eventbridge(&[&put]), quick_config()).unwrap();
    let outcomes = publisher.publish(&[event("a", 5)], Deadline::NONE).await;
    assert_eq!(outcomes, vec![PublishOutcome::Published]);
    assert_eq!(publisher.publish_rate(), None);
    assert_eq!(publisher.stats().throttled, 0);
}

/// Event `n` of aggregate `aggregate`.
fn event_of(aggregate: &str, n: u32) -> OutboundEvent {
    OutboundEvent {
        event_id: format!("{aggregate}{n}"),
        ..event(aggregate, 5)
    }
}

fn one_result(code: Option<&str>) -> PutEventsResultEntry {
    match code {
        None => PutEventsResultEntry::builder().event_id("eb").build(),
        Some(code) => PutEventsResultEntry::builder()
            .error_code(code)
            .error_message("injected")
            .build(),
    }
}

#[tokio::test]
async fn once_an_event_fails_the_later_events_of_its_aggregate_are_held_back() {
    // Given aggregate a's first event failing on every attempt (a retryable code), and
    // aggregates b and c healthy
    let first = mock!(Client::put_events)
        .match_requests(|req| req.entries().len() == 3)
        .then_output(|| {
            PutEventsOutput::builder()
                .entries(one_result(Some("InternalFailure")))
                .entries(one_result(None))
                .entries(one_result(None))
                .failed_entry_count(1)
                .build()
        });
    let retries: Vec<Rule> = (0..2)
        .map(|_| {
            mock!(Client::put_events)
                .match_requests(|req| req.entries().len() == 1)
                .then_output(|| {
                    PutEventsOutput::builder()
                        .entries(one_result(Some("InternalFailure")))
                        .failed_entry_count(1)
                        .build()
                })
        })
        .collect();
    let publisher = publisher_on(
        mock_eventbridge(&[&first, &retries[0], &retries[1]]),
        quick_config(),
    )
    .unwrap();
    let events = [
        event_of("a", 1),
        event_of("b", 1),
        event_of("a", 2),
        event_of("c", 1),
        event_of("a", 3),
    ];

    // When they are published
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then a1 failed, a2 and a3 were never sent (they must not overtake a1), b1 and c1 left
    assert!(
        matches!(outcomes[0], PublishOutcome::Failed { .. }),
        "{outcomes:?}"
    );
    assert_eq!(
        outcomes[1..],
        [
            PublishOutcome::Published,
            PublishOutcome::HeldBack,
            PublishOutcome::Published,
            PublishOutcome::HeldBack
        ]
    );
    let stats = publisher.stats();
    assert_eq!((stats.publish_calls, stats.held_back), (3, 2));
}

#[tokio::test]
async fn nothing_is_sent_after_the_deadline() {
    // Given a deadline that has passed
    let put = mock!(Client::put_events).then_output(|| accepted(2));
    let publisher = publisher_on(mock_eventbridge(&[&put]), quick_config()).unwrap();

    // When two events are published
    let outcomes = publisher
        .publish(
            &[event("a", 5), event("b", 5)],
            Deadline::publish_by(Instant::now()),
        )
        .await;

    // Then neither was sent
    assert_eq!(outcomes, vec![PublishOutcome::NotSent; 2]);
    assert_eq!(put.num_calls(), 0);
}

#[test]
fn packs_one_event_of_an_aggregate_per_call_each_after_the_previous() {
    let events: Vec<_> = ["a", "a", "b", "a", "c"]
        .iter()
        .map(|k| event(k, 1))
        .collect();
    let calls = pack_calls(&events, 0..5, |e| e.entry_size("s"), 10, 1024);
    assert_eq!(calls, vec![vec![0, 2, 4], vec![1], vec![3]]);
    assert_eq!(
        call_dependencies(&events, &calls),
        vec![vec![], vec![0], vec![1]]
    );
}

fn event(key: &str, detail_len: usize) -> OutboundEvent {
    OutboundEvent {
        event_id: format!("e-{key}"),
        ordering_key: key.to_owned(),
        event_group: format!("Order#{key}"),
        detail_type: "t".into(),
        detail: "x".repeat(detail_len),
        time: None,
        trace_header: None,
    }
}

#[test]
fn packs_at_most_ten_entries_per_call() {
    let events: Vec<_> = (0..25).map(|i| event(&i.to_string(), 10)).collect();
    let calls = pack_calls(&events, 0..25, |e| e.entry_size("s"), 10, 256 * 1024);
    assert_eq!(calls.iter().map(Vec::len).collect::<Vec<_>>(), [10, 10, 5]);
    assert_eq!(calls.concat(), (0..25).collect::<Vec<_>>());
}

#[test]
fn packs_by_request_size() {
    // Each entry is 2 + 98 = 100 bytes; a 250-byte budget fits two.
    let events: Vec<_> = (0..5).map(|i| event(&i.to_string(), 98)).collect();
    let calls = pack_calls(&events, 0..5, |e| e.entry_size("s"), 10, 250);
    assert_eq!(calls, vec![vec![0, 1], vec![2, 3], vec![4]]);
}

#[test]
fn calls_sharing_an_aggregate_wait_for_each_other() {
    let events: Vec<_> = ["a", "b", "a", "c", "b", "d"]
        .iter()
        .map(|k| event(k, 1))
        .collect();
    let calls = pack_calls(&events, 0..6, |e| e.entry_size("s"), 2, 1024);
    // calls: [a b] [a c] [b d]
    assert_eq!(
        call_dependencies(&events, &calls),
        vec![vec![], vec![0], vec![0]]
    );
}

#[test]
fn poison_codes_are_rejected_others_failed() {
    assert!(matches!(
        permanent_outcome(&classic::SPEC, "MalformedDetail".into(), String::new()),
        PublishOutcome::Rejected { .. }
    ));
    assert!(matches!(
        permanent_outcome(
            &classic::SPEC,
            "AccessDeniedException".into(),
            String::new()
        ),
        PublishOutcome::Failed { .. }
    ));
}

#[test]
fn each_entry_result_is_read_by_position() {
    // Given an answer of HTTP 200 whose second entry was throttled and third malformed
    let results = [
        one_result(None),
        one_result(Some(THROTTLED)),
        one_result(Some("MalformedDetail")),
        one_result(Some("AccessDeniedException")),
    ];

    // When the results of the events at 7, 8, 9 and 10 are read
    let attempt = entry_results(&[7, 8, 9, 10], &results);

    // Then 7 is published, 8 is sent again, 9 is poison and 10 failed for good
    assert_eq!(attempt.accepted, 1);
    assert_eq!(attempt.throttled, 1);
    assert_eq!(attempt.retry, [8]);
    assert_eq!(attempt.retry_error.0, THROTTLED);
    assert_eq!(attempt.done.len(), 3);
    assert_eq!(attempt.done[0], (7, PublishOutcome::Published));
    assert!(matches!(
        attempt.done[1],
        (9, PublishOutcome::Rejected { .. })
    ));
    assert!(matches!(
        attempt.done[2],
        (10, PublishOutcome::Failed { .. })
    ));
}

#[test]
fn an_answer_that_cannot_be_matched_to_its_entries_publishes_nothing() {
    // Given an answer with one result for two entries
    let attempt = entry_results(&[0, 1], &[one_result(None)]);

    // Then neither entry counts as published: both are sent again
    assert!(attempt.done.is_empty());
    assert_eq!(attempt.accepted, 0);
    assert_eq!(attempt.retry, [0, 1]);
    assert_eq!(attempt.retry_error.0, "ResponseMismatch");
}

#[tokio::test]
async fn a_call_refused_as_a_whole_is_split_until_the_entry_at_fault_is_alone() {
    // Given EventBridge refusing, as a whole, every call that holds the entry of type "bad"
    // (HTTP 400 ValidationException, as for a DetailType over 128 characters), and accepting
    // any other
    let refused = mock!(Client::put_events)
        .match_requests(|req| req.entries().iter().any(|e| e.detail_type() == Some("bad")))
        .then_http_response(|| refused_call("ValidationException"));
    let accept = mock!(Client::put_events).then_compute_output(|req| accepted(req.entries().len()));
    let publisher = publisher_on(
        eventbridge_answering_any(&[&refused, &accept]),
        quick_config(),
    )
    .unwrap();
    // Six aggregates' first events share a call; the bad one is d1; d2 and a2 come later
    let mut events: Vec<_> = ["a", "b", "c", "d", "e", "f"]
        .iter()
        .map(|k| event_of(k, 1))
        .collect();
    events[3].detail_type = "bad".into();
    events.push(event_of("d", 2));
    events.push(event_of("a", 2));

    // When they are published
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then the bad entry alone is poison, and every other event is published, the later events
    // of its aggregate and of its neighbours too
    for (i, outcome) in outcomes.iter().enumerate() {
        if i == 3 {
            assert!(
                matches!(outcome, PublishOutcome::Rejected { code, .. } if code == "ValidationException"),
                "{outcome:?}"
            );
        } else {
            assert_eq!(*outcome, PublishOutcome::Published, "event {i}");
        }
    }
    // And the refused call of six went again as [a b c] and [d e f], then [d] alone and [e f],
    // before the call of d2 and a2
    let stats = publisher.stats();
    assert_eq!(
        (refused.num_calls(), accept.num_calls(), stats.publish_calls),
        (3, 3, 6)
    );
    assert_eq!((stats.published, stats.rejected, stats.failed), (7, 1, 0));
}

#[tokio::test]
async fn a_call_refused_for_a_reason_of_no_entry_is_not_split() {
    // Given EventBridge refusing every call as a whole with AccessDeniedException
    let denied =
        mock!(Client::put_events).then_http_response(|| refused_call("AccessDeniedException"));
    let publisher = publisher_on(eventbridge_answering_any(&[&denied]), quick_config()).unwrap();

    // When four events are published
    let events: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|k| event_of(k, 1))
        .collect();
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then one call was made, and every event failed and stays pending: none is poison
    assert_eq!(denied.num_calls(), 1);
    assert!(
        outcomes.iter().all(
            |o| matches!(o, PublishOutcome::Failed { code, .. } if code == "AccessDeniedException")
        ),
        "{outcomes:?}"
    );
}

#[tokio::test]
async fn a_lone_event_refused_with_a_validation_code_is_poison() {
    // Given EventBridge refusing every call as a whole with ValidationException
    let refused =
        mock!(Client::put_events).then_http_response(|| refused_call("ValidationException"));
    let publisher = publisher_on(eventbridge_answering_any(&[&refused]), quick_config()).unwrap();

    // When two events of one aggregate are published (a call each)
    let outcomes = publisher
        .publish(&[event_of("a", 1), event_of("a", 2)], Deadline::NONE)
        .await;

    // Then each, alone in its call, is poison: the first does not hold the second back
    assert_eq!(refused.num_calls(), 2);
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, PublishOutcome::Rejected { .. })),
        "{outcomes:?}"
    );
}

/// A connection to a mocked bus whose first `unanswered` requests get no answer at all (the SDK's
/// attempt timeout ends them) and whose later requests are answered after `latency`; it notes how
/// many requests were in flight when each arrived. The answers themselves are the mocks' (every
/// entry accepted).
#[derive(Debug, Clone)]
struct SlowConnection {
    inner: aws_smithy_runtime_api::client::http::SharedHttpClient,
    unanswered: usize,
    latency: Duration,
    seen: Arc<Mutex<Seen>>,
}

#[derive(Debug, Default)]
struct Seen {
    requests: usize,
    in_flight: usize,
    /// When each request arrived, and the requests in flight then (itself included).
    arrivals: Vec<(Instant, usize)>,
}

/// A request in flight until dropped (answered, or abandoned by the SDK's timeout).
struct InFlight(Arc<Mutex<Seen>>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.lock().unwrap().in_flight -= 1;
    }
}

impl SlowConnection {
    fn new(unanswered: usize, latency: Duration) -> Self {
        Self {
            inner: create_mock_http_client(),
            unanswered,
            latency,
            seen: Arc::default(),
        }
    }

    fn requests(&self) -> usize {
        self.seen.lock().unwrap().requests
    }

    fn arrivals(&self) -> Vec<(Instant, usize)> {
        self.seen.lock().unwrap().arrivals.clone()
    }
}

#[derive(Debug)]
struct SlowConnector {
    connection: SlowConnection,
    inner: aws_smithy_runtime_api::client::http::SharedHttpConnector,
}

impl aws_smithy_runtime_api::client::http::HttpConnector for SlowConnector {
    fn call(
        &self,
        request: aws_smithy_runtime_api::client::orchestrator::HttpRequest,
    ) -> aws_smithy_runtime_api::client::http::HttpConnectorFuture {
        let (request_number, in_flight) = {
            let mut seen = self.connection.seen.lock().unwrap();
            seen.requests += 1;
            seen.in_flight += 1;
            let arrival = (Instant::now(), seen.in_flight);
            seen.arrivals.push(arrival);
            (seen.requests, InFlight(Arc::clone(&self.connection.seen)))
        };
        let answered = request_number > self.connection.unanswered;
        let latency = self.connection.latency;
        let answer = self.inner.call(request);
        aws_smithy_runtime_api::client::http::HttpConnectorFuture::new(async move {
            let _in_flight = in_flight;
            if !answered {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(latency).await;
            answer.await
        })
    }
}

impl aws_smithy_runtime_api::client::http::HttpClient for SlowConnection {
    fn http_connector(
        &self,
        settings: &aws_smithy_runtime_api::client::http::HttpConnectorSettings,
        components: &aws_smithy_runtime_api::client::runtime_components::RuntimeComponents,
    ) -> aws_smithy_runtime_api::client::http::SharedHttpConnector {
        aws_smithy_runtime_api::client::http::SharedHttpConnector::new(SlowConnector {
            connection: self.clone(),
            inner: self.inner.http_connector(settings, components),
        })
    }
}

/// The SDK's attempt timeout in these tests.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(1);

/// An EventBridge client over `connection`, every call answered by the mocks with its one entry
/// accepted, with `retry` for the SDK's own retries and a 1 s attempt timeout.
fn eventbridge_over(connection: &SlowConnection, retry: RetryConfig) -> Client {
    let one_accepted = mock!(Client::put_events)
        .sequence()
        .http_status(
            200,
            Some(r#"{"FailedEntryCount":0,"Entries":[{"EventId":"eb"}]}"#.to_owned()),
        )
        .repeatedly()
        .build();
    let connection = connection.clone();
    mock_client!(
        aws_sdk_eventbridge,
        RuleMode::MatchAny,
        [&one_accepted],
        move |c| c
            .http_client(connection.clone())
            .retry_config(retry.clone())
            .timeout_config(
                aws_sdk_eventbridge::config::timeout::TimeoutConfig::builder()
                    .operation_attempt_timeout(ATTEMPT_TIMEOUT)
                    .build(),
            )
    )
}

#[tokio::test(start_paused = true)]
async fn a_timed_out_call_lowers_the_calls_in_flight() {
    // Given a bus that answers none of the first 4 calls before the 1 s attempt timeout and
    // every later call after 100 ms, and a publisher of one entry per call with 4 calls in
    // flight
    let connection = SlowConnection::new(4, Duration::from_millis(100));
    let config = PublisherConfig {
        max_entries_per_call: 1,
        max_concurrency: 4,
        ..quick_config()
    };
    let publisher = publisher_on(
        eventbridge_over(&connection, RetryConfig::disabled()),
        config,
    )
    .unwrap();
    let events: Vec<_> = (0..12).map(|i| event(&format!("a{i}"), 5)).collect();

    // When 12 events are published
    let started = Instant::now();
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then all are published, the 4 calls of the first wave after their timeout
    assert_eq!(outcomes, vec![PublishOutcome::Published; 12]);
    assert_eq!(publisher.stats().timed_out, 4);
    // And the bus saw 4 calls in flight at once before the timeouts, and at most 2 in the
    // 100 ms after them, before any answer came back: the publisher halved what it sends at once
    let arrivals = connection.arrivals();
    let in_flight_at = |from: Duration, to: Duration| -> Vec<usize> {
        arrivals
            .iter()
            .filter(|(at, _)| (from..to).contains(&at.duration_since(started)))
            .map(|&(_, in_flight)| in_flight)
            .collect()
    };
    assert_eq!(in_flight_at(Duration::ZERO, ATTEMPT_TIMEOUT), [1, 2, 3, 4]);
    let after = in_flight_at(
        ATTEMPT_TIMEOUT,
        ATTEMPT_TIMEOUT + Duration::from_millis(100),
    );
    assert_eq!(after, [1, 2], "{arrivals:?}");
    // And the limit grows back while calls are answered in time; the publish rate, which
    // answers the quota's throttles, was left unlimited
    assert!(publisher.publish_concurrency() >= 2);
    assert_eq!(publisher.publish_rate(), None);
}

#[tokio::test(start_paused = true)]
async fn the_sdk_does_not_retry_a_timed_out_put_events_the_publisher_does() {
    // Given a bus that never answers, an EventBridge client with the SDK's standard retries (3
    // attempts), and a publisher that tries each entry twice
    let connection = SlowConnection::new(usize::MAX, Duration::ZERO);
    let config = PublisherConfig {
        retry: RetryPolicy {
            max_retries: 1,
            ..quick_config().retry
        },
        ..quick_config()
    };
    let publisher = publisher_on(
        eventbridge_over(&connection, RetryConfig::standard().with_max_attempts(3)),
        config,
    )
    .unwrap();

    // When one event is published
    let outcomes = publisher.publish(&[event("a", 5)], Deadline::NONE).await;

    // Then it failed after two requests, one per attempt of the publisher: each timeout came
    // back to the publisher (which lowered its rate and calls in flight) instead of the SDK
    // sending the call again into the same queue
    assert!(
        matches!(outcomes[..], [PublishOutcome::Failed { .. }]),
        "{outcomes:?}"
    );
    assert_eq!(connection.requests(), 2);
    assert_eq!(publisher.stats().timed_out, 2);
    assert_eq!(publisher.publish_concurrency(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_call_waiting_for_its_place_in_flight_is_not_sent_after_the_deadline() {
    // Given a publisher allowed one call in flight, that call out to a bus that does not answer
    let connection = SlowConnection::new(usize::MAX, Duration::ZERO);
    let config = PublisherConfig {
        max_concurrency: 1,
        ..quick_config()
    };
    let publisher = publisher_on(
        eventbridge_over(&connection, RetryConfig::disabled()),
        config,
    )
    .unwrap();
    let unanswered = [event("a", 5)];
    let first = publisher.publish(&unanswered, Deadline::NONE);

    // When another publish (another shard's page) must be done within 500 ms
    let stop_at = Instant::now() + Duration::from_millis(500);
    let waiting = [event("b", 5)];
    let second = async {
        tokio::task::yield_now().await;
        publisher
            .publish(&waiting, Deadline::publish_by(stop_at))
            .await
    };
    let (_, second) = tokio::join!(first, second);

    // Then its call, which had no place in flight before the deadline, was not sent: the bus saw
    // only the first publish's three attempts
    assert_eq!(second, [PublishOutcome::NotSent]);
    assert_eq!(connection.requests(), 3);
    assert_eq!(publisher.stats().publish_calls, 3);
}

/// An event of aggregate `key` with a payload of `payload_len` bytes, in the envelope.
fn large_event(key: &str, sequence: u64, payload_len: usize) -> OutboundEvent {
    let payload = format!("{{\"lines\":\"{}\"}}", "x".repeat(payload_len));
    OutboundEvent {
        event_id: format!("e-{key}-{sequence}"),
        ordering_key: key.to_owned(),
        event_group: format!("Order#{key}"),
        detail_type: "t".into(),
        detail: format!(
            r#"{{"metadata":{{"eventId":"e-{key}-{sequence}","eventType":"t","occurredAt":"2026-11-27T00:00:00.000Z","sequence":{sequence}}},"data":{payload}}}"#
        ),
        time: None,
        trace_header: None,
    }
}

/// An S3 client answered by `rules`, in order (SDK retries off).
fn mock_s3(rules: &[&Rule]) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(crate::mocked_s3(rules).build())
}

#[tokio::test]
async fn an_event_too_large_without_a_payload_bucket_is_poison_whose_reason_says_how_to_publish_it()
{
    // Given a publisher without a payload bucket, and an event over the entry budget
    let publisher = publisher_on(mock_eventbridge(&[]), quick_config()).unwrap();
    let events = [large_event("a", 1, 300 * 1024)];

    // When it is published
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then it is refused without a call, and the reason names the setting that turns the claim
    // check on
    let [PublishOutcome::Rejected { code, message }] = outcomes.as_slice() else {
        panic!("{outcomes:?}")
    };
    assert_eq!(code, ENTRY_TOO_LARGE);
    assert!(
        message.contains("--payload-bucket (PAYLOAD_BUCKET)"),
        "{message}"
    );
}

#[tokio::test]
async fn an_event_whose_payload_s3_did_not_store_stays_pending_and_holds_back_its_aggregate() {
    // Given S3 that fails the first payload's PutObject (503), then stores the next one, and a bus
    // that accepts whatever it is sent
    let outage = mock!(aws_sdk_s3::Client::put_object).then_http_response(|| {
        aws_smithy_runtime_api::http::Response::new(
            aws_smithy_runtime_api::http::StatusCode::try_from(503).unwrap(),
            aws_smithy_types::body::SdkBody::from(
                "<Error><Code>ServiceUnavailable</Code><Message>injected</Message></Error>",
            ),
        )
    });
    let stored = mock!(aws_sdk_s3::Client::put_object)
        .then_output(|| aws_sdk_s3::operation::put_object::PutObjectOutput::builder().build());
    let sent = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = sent.clone();
    let put = mock!(Client::put_events)
        .match_requests(move |req| {
            seen.lock().unwrap().extend(
                req.entries()
                    .iter()
                    .map(|e| e.detail().unwrap_or_default().to_owned()),
            );
            true
        })
        .then_output(|| accepted(1));
    let publisher = publisher_on(mock_eventbridge(&[&put, &put]), quick_config())
        .unwrap()
        .with_payload_store(outbox_shared::PayloadStore::new(
            mock_s3(&[&outage, &stored]),
            "orders-payloads",
        ));
    // x-1 large (its store fails), x-2 small; y-1 large (stored)
    let events = [
        large_event("x", 1, 300 * 1024),
        large_event("x", 2, 10),
        large_event("y", 1, 300 * 1024),
    ];

    // When they are published
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then x-1 failed (it stays pending), x-2 is held back behind it, y-1 is published as its
    // reference
    assert!(
        matches!(&outcomes[0], PublishOutcome::Failed { code, message }
            if code == "ServiceUnavailable" && message.contains("orders-payloads")),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[1], PublishOutcome::HeldBack);
    assert_eq!(outcomes[2], PublishOutcome::Published);
    let sent = sent.lock().unwrap();
    assert_eq!(sent.len(), 1, "only y-1 was sent");
    let body: serde_json::Value = serde_json::from_str(&sent[0]).unwrap();
    assert_eq!(body["dataref"], "s3://orders-payloads/payloads/e-y-1");
    assert!(body.get("data").is_none());
    assert_eq!(publisher.stats().payloads_stored, 1);
}

#[test]
fn a_poison_refusal_names_what_refused_it() {
    // Given an SNS topic refusing an entry for good, and a bus refusing one
    let sns = permanent_outcome(
        crate::target::TargetKind::Sns.spec(),
        "ParameterValueInvalid".into(),
        "bad attribute".into(),
    );
    let bus = permanent_outcome(
        crate::target::TargetKind::Classic.spec(),
        "MalformedDetail".into(),
        "bad detail".into(),
    );

    // Then each is poison, its message naming the resource that refused it
    assert_eq!(
        sns,
        PublishOutcome::Rejected {
            code: "ParameterValueInvalid".into(),
            message: "the topic refused it: bad attribute".into(),
        }
    );
    assert_eq!(
        bus,
        PublishOutcome::Rejected {
            code: "MalformedDetail".into(),
            message: "the bus refused it: bad detail".into(),
        }
    );
}
