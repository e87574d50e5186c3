//! The Custom Event Bus adapter on a mocked SDK, for what the local double cannot produce:
//! throttling, internal errors, a call that took effect but whose answer was lost, the call
//! errors of a misconfigured bus. What the double can produce (entries, groups, dedup, FIFO
//! delivery) is tested on it in the integration tests.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_eventbridgev2::Client;
use aws_sdk_eventbridgev2::config::retry::RetryConfig;
use aws_sdk_eventbridgev2::error::ErrorMetadata;
use aws_sdk_eventbridgev2::operation::put_events::{PutEventsError, PutEventsOutput};
use aws_sdk_eventbridgev2::types::error::{
    AccessDeniedException, InternalException, InvalidInputException, InvalidStateException,
    ResourceNotFoundException, ThrottlingException,
};
use aws_sdk_eventbridgev2::types::{PutEventsResultEntry, SuccessCode};
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use outbox_shared::{OutboundEvent, RetryPolicy};

use super::CustomBus;
use crate::config::{PublisherConfig, SettingError, TargetKind};
use crate::deadline::Deadline;
use crate::publisher::{PublishOutcome, Publisher, TargetPublisher};

const BUS_ARN: &str =
    "arn:aws:events:us-east-1:123456789012:event-busv2/orders/abcdefghij0123456789klmno";

/// The Custom Event Bus's publisher on `client`'s configuration.
fn publisher_on(client: Client, config: PublisherConfig) -> Result<TargetPublisher, SettingError> {
    TargetPublisher::on(CustomBus::new(client.config().to_builder()), config)
}

/// A Custom Event Bus client answered by the first of `rules` that matches each call (SDK
/// retries off: the publisher's own count).
fn custom_bus(mode: RuleMode, rules: &[&Rule]) -> Client {
    mock_client!(aws_sdk_eventbridgev2, mode, rules, |c| c
        .retry_config(RetryConfig::disabled()))
}

fn quick_config() -> PublisherConfig {
    PublisherConfig {
        retry: RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        },
        ..PublisherConfig::of_kind(TargetKind::Custom, BUS_ARN, "test.orders")
    }
}

/// Event `n` of aggregate `aggregate` (group `Order#aggregate`).
fn event_of(aggregate: &str, n: u32) -> OutboundEvent {
    OutboundEvent {
        event_id: format!("{aggregate}{n}"),
        ordering_key: aggregate.to_owned(),
        event_group: format!("Order#{aggregate}"),
        detail_type: "OrderCreated".into(),
        detail: "{}".into(),
        time: None,
        trace_header: None,
    }
}

/// An answer of `count` entries, each with `code`.
fn answered(count: usize, code: SuccessCode) -> PutEventsOutput {
    PutEventsOutput::builder()
        .set_entries(Some(
            (0..count)
                .map(|i| {
                    PutEventsResultEntry::builder()
                        .event_id(format!("eb-{i}"))
                        .sequence_number(i.to_string())
                        .success_code(code.clone())
                        .build()
                })
                .collect(),
        ))
        .failed_entry_count(0)
        .build()
}

fn meta(code: &str) -> ErrorMetadata {
    ErrorMetadata::builder()
        .code(code)
        .message("from the mock")
        .build()
}

/// The call error `code` as the SDK reads it from the bus.
fn call_error(code: &str) -> PutEventsError {
    match code {
        "ThrottlingException" => PutEventsError::ThrottlingException(
            ThrottlingException::builder().meta(meta(code)).build(),
        ),
        "InternalException" => {
            PutEventsError::InternalException(InternalException::builder().meta(meta(code)).build())
        }
        "InvalidInputException" => PutEventsError::InvalidInputException(
            InvalidInputException::builder().meta(meta(code)).build(),
        ),
        "AccessDeniedException" => PutEventsError::AccessDeniedException(
            AccessDeniedException::builder().meta(meta(code)).build(),
        ),
        "ResourceNotFoundException" => PutEventsError::ResourceNotFoundException(
            ResourceNotFoundException::builder()
                .meta(meta(code))
                .build(),
        ),
        "InvalidStateException" => PutEventsError::InvalidStateException(
            InvalidStateException::builder().meta(meta(code)).build(),
        ),
        other => panic!("no such error in the model: {other}"),
    }
}

fn counters(snapshotter: &metrics_util::debugging::Snapshotter) -> HashMap<String, DebugValue> {
    snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .map(|(key, _, _, value)| (key.key().name().to_owned(), value))
        .collect()
}

/// An entry as the bus saw it: its source, group and deduplication id.
type SeenEntry = (String, String, String);

#[tokio::test]
async fn every_entry_carries_its_group_and_its_event_id_on_the_bus_arn_up_to_100_a_call() {
    // Given a bus that notes every call's entries
    let seen: Arc<Mutex<Vec<Vec<SeenEntry>>>> = Arc::default();
    let noted = Arc::clone(&seen);
    let put = mock!(Client::put_events)
        .match_requests(move |req| {
            assert_eq!(req.event_bus_arn(), Some(BUS_ARN));
            noted.lock().unwrap().push(
                req.entries()
                    .iter()
                    .map(|e| {
                        let system = e.system_metadata().expect("system metadata");
                        (
                            e.source().to_owned(),
                            system.event_group_id().unwrap_or_default().to_owned(),
                            system.deduplication_id().unwrap_or_default().to_owned(),
                        )
                    })
                    .collect(),
            );
            true
        })
        .then_compute_output(|req| answered(req.entries().len(), SuccessCode::Published));
    let publisher = publisher_on(custom_bus(RuleMode::MatchAny, &[&put]), quick_config()).unwrap();
    // 150 aggregates' first events
    let events: Vec<_> = (0..150).map(|i| event_of(&format!("o{i}"), 1)).collect();

    // When they are published
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then all are published in two calls of 100 and 50, each entry with its aggregate as its
    // group and its event id as its deduplication id, from the configured source
    assert!(outcomes.iter().all(PublishOutcome::is_published));
    let seen = seen.lock().unwrap();
    assert_eq!(seen.iter().map(Vec::len).collect::<Vec<_>>(), vec![100, 50]);
    assert_eq!(
        seen[0][7],
        ("test.orders".into(), "Order#o7".into(), "o71".into())
    );
}

#[tokio::test]
async fn a_deduplicated_entry_is_published_and_counted() {
    // Given a bus answering DEDUPLICATED for entries it had accepted before
    let put = mock!(Client::put_events)
        .then_compute_output(|req| answered(req.entries().len(), SuccessCode::Deduplicated));
    let publisher = publisher_on(custom_bus(RuleMode::MatchAny, &[&put]), quick_config()).unwrap();
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _local = metrics::set_default_local_recorder(&recorder);

    // When two events are published
    let outcomes = publisher
        .publish(&[event_of("a", 1), event_of("b", 1)], Deadline::NONE)
        .await;

    // Then both are published (they stay on the bus once), and counted as deduplicated
    assert_eq!(outcomes, vec![PublishOutcome::Published; 2]);
    let stats = publisher.stats();
    assert_eq!(
        (stats.published, stats.deduplicated, stats.retried),
        (2, 2, 0)
    );
    assert_eq!(
        counters(&snapshotter).get(crate::metrics::DEDUPLICATED),
        Some(&DebugValue::Counter(2))
    );
}

#[tokio::test]
async fn a_call_whose_answer_was_lost_is_sent_again_and_comes_back_deduplicated() {
    // Given a bus that took the first call but failed to answer it (InternalException, HTTP
    // 500), then answers the same entries DEDUPLICATED
    let lost = mock!(Client::put_events).then_error(|| call_error("InternalException"));
    let again = mock!(Client::put_events)
        .then_compute_output(|req| answered(req.entries().len(), SuccessCode::Deduplicated));
    let publisher = publisher_on(
        custom_bus(RuleMode::Sequential, &[&lost, &again]),
        quick_config(),
    )
    .unwrap();

    // When three events are published
    let events = [event_of("a", 1), event_of("b", 1), event_of("c", 1)];
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then all three are published after one retry of the call, each counted as deduplicated
    assert_eq!(outcomes, vec![PublishOutcome::Published; 3]);
    let stats = publisher.stats();
    assert_eq!(
        (stats.publish_calls, stats.retried, stats.deduplicated),
        (2, 3, 3)
    );
}

#[tokio::test(start_paused = true)]
async fn a_throttled_call_is_retried_and_lowers_the_publish_rate() {
    // Given a bus that throttles the first call as a whole (HTTP 429), then accepts
    let throttled = mock!(Client::put_events).then_error(|| call_error("ThrottlingException"));
    let accept = mock!(Client::put_events)
        .then_compute_output(|req| answered(req.entries().len(), SuccessCode::Published));
    let publisher = publisher_on(
        custom_bus(RuleMode::Sequential, &[&throttled, &accept]),
        quick_config(),
    )
    .unwrap();

    // When two events are published
    let outcomes = publisher
        .publish(&[event_of("a", 1), event_of("b", 1)], Deadline::NONE)
        .await;

    // Then both are published after a retry, counted as throttled, and the rate has a limit
    assert_eq!(outcomes, vec![PublishOutcome::Published; 2]);
    let stats = publisher.stats();
    assert_eq!((stats.publish_calls, stats.throttled), (2, 2));
    assert!(publisher.publish_rate().is_some());
}

#[tokio::test]
async fn call_errors_of_the_bus_itself_fail_every_entry_without_splitting_the_call() {
    for code in [
        "AccessDeniedException",
        "ResourceNotFoundException",
        "InvalidStateException",
    ] {
        // Given a bus refusing every call with `code`
        let refused = mock!(Client::put_events).then_error(move || call_error(code));
        let publisher =
            publisher_on(custom_bus(RuleMode::MatchAny, &[&refused]), quick_config()).unwrap();

        // When three events are published, the third a later event of the first's aggregate
        let outcomes = publisher
            .publish(
                &[event_of("a", 1), event_of("b", 1), event_of("a", 2)],
                Deadline::NONE,
            )
            .await;

        // Then one call was made: the first two failed and stay pending, the third held back
        assert_eq!(refused.num_calls(), 1, "{code}");
        for outcome in &outcomes[..2] {
            assert!(
                matches!(outcome, PublishOutcome::Failed { code: c, .. } if c == code),
                "{code}: {outcome:?}"
            );
        }
        assert_eq!(outcomes[2], PublishOutcome::HeldBack, "{code}");
    }
}

#[tokio::test]
async fn a_call_refused_as_invalid_input_is_split_until_the_entry_at_fault_is_alone() {
    // Given a bus refusing, as a whole, every call holding the entry of type "bad"
    let refused = mock!(Client::put_events)
        .match_requests(|req| req.entries().iter().any(|e| e.detail_type() == "bad"))
        .then_error(|| call_error("InvalidInputException"));
    let accept = mock!(Client::put_events)
        .then_compute_output(|req| answered(req.entries().len(), SuccessCode::Published));
    let publisher = publisher_on(
        custom_bus(RuleMode::MatchAny, &[&refused, &accept]),
        quick_config(),
    )
    .unwrap();
    let mut events: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|k| event_of(k, 1))
        .collect();
    events[2].detail_type = "bad".into();

    // When they are published
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then the bad entry alone is poison and the others are published
    for (i, outcome) in outcomes.iter().enumerate() {
        if i == 2 {
            assert!(
                matches!(outcome, PublishOutcome::Rejected { code, .. } if code == "InvalidInputException"),
                "{outcome:?}"
            );
        } else {
            assert_eq!(*outcome, PublishOutcome::Published, "event {i}");
        }
    }
}

#[tokio::test]
async fn a_group_never_has_two_events_in_one_call_nor_one_after_its_failure() {
    // Given a bus refusing entries of group Order#a with a per-entry error the publisher cannot
    // retry, accepting the others, and noting each call's groups
    let groups: Arc<Mutex<Vec<Vec<String>>>> = Arc::default();
    let noted = Arc::clone(&groups);
    let put = mock!(Client::put_events)
        .match_requests(move |req| {
            noted.lock().unwrap().push(
                req.entries()
                    .iter()
                    .filter_map(|e| e.system_metadata()?.event_group_id().map(str::to_owned))
                    .collect(),
            );
            true
        })
        .then_compute_output(|req| {
            let entries = req
                .entries()
                .iter()
                .map(|e| {
                    let group = e.system_metadata().and_then(|s| s.event_group_id());
                    if group == Some("Order#a") {
                        PutEventsResultEntry::builder()
                            .error_code("SomethingPermanent")
                            .error_message("refused")
                            .build()
                    } else {
                        PutEventsResultEntry::builder()
                            .success_code(SuccessCode::Published)
                            .build()
                    }
                })
                .collect();
            PutEventsOutput::builder()
                .set_entries(Some(entries))
                .failed_entry_count(1)
                .build()
        });
    let publisher = publisher_on(custom_bus(RuleMode::MatchAny, &[&put]), quick_config()).unwrap();

    // When aggregates a and b publish three events each
    let events: Vec<_> = (1..=3)
        .flat_map(|n| [event_of("a", n), event_of("b", n)])
        .collect();
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then no call held two events of a group; a1 failed and a2, a3 were never sent
    let groups = groups.lock().unwrap();
    for call in groups.iter() {
        let mut unique = call.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), call.len(), "{groups:?}");
    }
    assert_eq!(
        groups.concat().iter().filter(|g| *g == "Order#a").count(),
        1
    );
    assert!(matches!(outcomes[0], PublishOutcome::Failed { .. }));
    assert_eq!(outcomes[2], PublishOutcome::HeldBack);
    assert_eq!(outcomes[4], PublishOutcome::HeldBack);
    assert!([1, 3, 5].iter().all(|&i| outcomes[i].is_published()));
}

#[test]
fn the_custom_publisher_refuses_a_classic_configuration() {
    let classic = PublisherConfig::new("bus", "test.orders");
    let err = publisher_on(custom_bus(RuleMode::MatchAny, &[]), classic).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid --target-kind (EVENT_TARGET_KIND)"),
        "{err}"
    );
}
