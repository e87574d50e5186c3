//! The SNS adapter on a mocked SDK, for what moto cannot produce: entries failed by the service's
//! fault or the sender's (`SenderFault`), a call throttled as a whole. Delivery, FIFO groups and
//! de-duplication are tested on moto in the integration tests.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sns::Client;
use aws_sdk_sns::config::retry::RetryConfig;
use aws_sdk_sns::error::ErrorMetadata;
use aws_sdk_sns::operation::publish_batch::{PublishBatchError, PublishBatchOutput};
use aws_sdk_sns::types::{BatchResultErrorEntry, PublishBatchResultEntry};
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use outbox_shared::RetryPolicy;

use super::SnsTopic;
use crate::config::{PublisherConfig, TargetKind};
use crate::deadline::Deadline;
use crate::publisher::{PublishOutcome, Publisher, TargetPublisher};
use crate::testing::outbound;

const TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:orders";
const FIFO_TOPIC: &str = "arn:aws:sns:us-east-1:123456789012:orders.fifo";

fn publisher(topic: &str, rules: &[&Rule]) -> TargetPublisher {
    let client = mock_client!(aws_sdk_sns, RuleMode::Sequential, rules, |c| c
        .retry_config(RetryConfig::disabled()));
    let config = PublisherConfig {
        retry: RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        },
        ..PublisherConfig::of_kind(TargetKind::Sns, topic, "test.orders")
    };
    TargetPublisher::on(SnsTopic::new(client.config().to_builder()), config).unwrap()
}

/// An answer with every entry of `ids` successful but those `failed`.
fn answer(ids: &[String], failed: &[(String, &str, bool)]) -> PublishBatchOutput {
    let failed_ids: Vec<&String> = failed.iter().map(|(id, _, _)| id).collect();
    PublishBatchOutput::builder()
        .set_successful(Some(
            ids.iter()
                .filter(|id| !failed_ids.contains(id))
                .map(|id| {
                    PublishBatchResultEntry::builder()
                        .id(id)
                        .message_id(format!("m-{id}"))
                        .build()
                })
                .collect(),
        ))
        .set_failed(Some(
            failed
                .iter()
                .map(|(id, code, sender_fault)| {
                    BatchResultErrorEntry::builder()
                        .id(id)
                        .code(*code)
                        .message("from the mock")
                        .sender_fault(*sender_fault)
                        .build()
                        .unwrap()
                })
                .collect(),
        ))
        .build()
}

fn ids(req: &aws_sdk_sns::operation::publish_batch::PublishBatchInput) -> Vec<String> {
    req.publish_batch_request_entries()
        .iter()
        .map(|e| e.id().to_owned())
        .collect()
}

/// A message as the topic saw it: its `eventType` attribute, group and de-duplication id.
type Seen = (Option<String>, Option<String>, Option<String>);

#[tokio::test]
async fn a_fifo_topic_gets_each_aggregate_as_its_group_and_the_event_id_as_its_dedup_id() {
    for (topic, fifo) in [(FIFO_TOPIC, true), (TOPIC, false)] {
        // Given a topic that notes what it was sent
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let noted = Arc::clone(&seen);
        let publish = mock!(Client::publish_batch)
            .match_requests(move |req| {
                assert_eq!(req.topic_arn(), Some(topic));
                noted
                    .lock()
                    .unwrap()
                    .extend(req.publish_batch_request_entries().iter().map(|e| {
                        (
                            e.message_attributes()
                                .and_then(|a| a.get("eventType"))
                                .and_then(|v| v.string_value().map(str::to_owned)),
                            e.message_group_id().map(str::to_owned),
                            e.message_deduplication_id().map(str::to_owned),
                        )
                    }));
                true
            })
            .then_compute_output(|req| answer(&ids(req), &[]));
        let publisher = publisher(topic, &[&publish]);

        // When two events are published
        let outcomes = publisher
            .publish(
                &[outbound("e1", "o1"), outbound("e2", "o2")],
                Deadline::NONE,
            )
            .await;

        // Then each carries its type for filter policies, and on the FIFO topic only its
        // aggregate as the group and its event id as the dedup id
        assert_eq!(outcomes, vec![PublishOutcome::Published; 2]);
        let seen = seen.lock().unwrap();
        let expected_ids = if fifo {
            (Some("Order#o2".to_owned()), Some("e2".to_owned()))
        } else {
            (None, None)
        };
        assert_eq!(
            seen[1],
            (
                Some("OrderCreated".to_owned()),
                expected_ids.0,
                expected_ids.1
            )
        );
    }
}

#[tokio::test]
async fn failed_entries_are_retried_for_the_services_fault_and_poison_for_the_messages() {
    // Given a topic that fails entry 1 for its own fault and entry 0 for the message's
    let first = mock!(Client::publish_batch).then_compute_output(|req| {
        answer(
            &ids(req),
            &[
                ("1".into(), "InternalError", false),
                ("0".into(), "InvalidParameter", true),
            ],
        )
    });
    let retry = mock!(Client::publish_batch).then_compute_output(|req| answer(&ids(req), &[]));
    let publisher = publisher(TOPIC, &[&first, &retry]);

    // When two events are published
    let outcomes = publisher
        .publish(
            &[outbound("e1", "o1"), outbound("e2", "o2")],
            Deadline::NONE,
        )
        .await;

    // Then the first is poison with the topic's code, the second published after a retry
    assert!(
        matches!(&outcomes[0], PublishOutcome::Rejected { code, .. } if code == "InvalidParameter"),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[1], PublishOutcome::Published);
    assert_eq!(publisher.stats().retried, 1);
}

#[tokio::test(start_paused = true)]
async fn a_call_throttled_as_a_whole_is_retried_and_lowers_the_publish_rate() {
    // Given a topic over the account's publish quota for one call
    let throttled = mock!(Client::publish_batch).then_error(|| {
        PublishBatchError::generic(
            ErrorMetadata::builder()
                .code("Throttled")
                .message("Rate exceeded")
                .build(),
        )
    });
    let accept = mock!(Client::publish_batch).then_compute_output(|req| answer(&ids(req), &[]));
    let publisher = publisher(TOPIC, &[&throttled, &accept]);

    // When two events are published
    let outcomes = publisher
        .publish(
            &[outbound("e1", "o1"), outbound("e2", "o2")],
            Deadline::NONE,
        )
        .await;

    // Then both are published after a retry, counted as throttled, and the rate has a limit
    assert_eq!(outcomes, vec![PublishOutcome::Published; 2]);
    let stats = publisher.stats();
    assert_eq!((stats.publish_calls, stats.throttled), (2, 2));
    assert!(publisher.publish_rate().is_some());
}

/// The publisher of `TOPIC` on a client answered by the first of `rules` that matches each
/// call, as often as it is called.
fn publisher_answering_any(rules: &[&Rule]) -> TargetPublisher {
    let client = mock_client!(aws_sdk_sns, RuleMode::MatchAny, rules, |c| c
        .retry_config(RetryConfig::disabled()));
    let config = PublisherConfig {
        retry: RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        },
        ..PublisherConfig::of_kind(TargetKind::Sns, TOPIC, "test.orders")
    };
    TargetPublisher::on(SnsTopic::new(client.config().to_builder()), config).unwrap()
}

/// SNS's answer to a call it refuses as a whole, as it is on the wire (the query protocol's XML
/// error): what the SDK reads the code from.
fn refused_call(code: &str) -> aws_smithy_runtime_api::http::Response {
    aws_smithy_runtime_api::http::Response::new(
        aws_smithy_runtime_api::http::StatusCode::try_from(400).unwrap(),
        aws_smithy_types::body::SdkBody::from(format!(
            "<ErrorResponse xmlns=\"http://sns.amazonaws.com/doc/2010-03-31/\"><Error>\
             <Type>Sender</Type><Code>{code}</Code><Message>refused by the mock</Message>\
             </Error><RequestId>r-1</RequestId></ErrorResponse>"
        )),
    )
}

#[tokio::test]
async fn a_topic_that_refuses_every_event_alone_keeps_them_pending_not_poison() {
    // Given a topic of another region: SNS answers InvalidParameter to every PublishBatch, one
    // message's too
    let refused =
        mock!(Client::publish_batch).then_http_response(|| refused_call("InvalidParameter"));
    let publisher = publisher_answering_any(&[&refused]);

    // When four events of four aggregates are published
    let events: Vec<_> = ["o1", "o2", "o3", "o4"]
        .iter()
        .enumerate()
        .map(|(i, aggregate)| outbound(&format!("e{i}"), aggregate))
        .collect();
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then the call was split down to single events, each refused alike: the topic is failing,
    // not the events, and every one stays pending; none is dead-lettered
    assert!(
        outcomes.iter().all(
            |o| matches!(o, PublishOutcome::Failed { code, message } if code == "InvalidParameter" && message.contains("the target is failing"))
        ),
        "{outcomes:?}"
    );
    let stats = publisher.stats();
    assert_eq!((stats.rejected, stats.failed), (0, 4));
}

#[tokio::test]
async fn a_message_refused_as_parameter_value_invalid_is_found_and_alone_poison() {
    // Given a topic refusing, as a whole, every call that holds event e2's message with
    // InvalidParameterValueException (the SDK's code ParameterValueInvalid), taking any other
    let refused = mock!(Client::publish_batch)
        .match_requests(|req| {
            req.publish_batch_request_entries().iter().any(|e| {
                e.message_attributes()
                    .and_then(|a| a.get("eventId"))
                    .and_then(|v| v.string_value())
                    == Some("e2")
            })
        })
        .then_http_response(|| refused_call("ParameterValueInvalid"));
    let accept = mock!(Client::publish_batch).then_compute_output(|req| answer(&ids(req), &[]));
    let publisher = publisher_answering_any(&[&refused, &accept]);

    // When four events of four aggregates are published
    let events: Vec<_> = (1..=4)
        .map(|i| outbound(&format!("e{i}"), &format!("o{i}")))
        .collect();
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then e2 alone is poison, and the others are published
    for (i, outcome) in outcomes.iter().enumerate() {
        if i == 1 {
            assert!(
                matches!(outcome, PublishOutcome::Rejected { code, .. } if code == "ParameterValueInvalid"),
                "{outcome:?}"
            );
        } else {
            assert_eq!(*outcome, PublishOutcome::Published, "event {i}");
        }
    }
}
