//! The SQS adapter on a mocked SDK, for what moto cannot produce: entries failed by the service's
//! fault or the sender's (`SenderFault`), a throttled call. Delivery, FIFO groups and
//! de-duplication are tested on moto in the integration tests.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchOutput;
use aws_sdk_sqs::types::{BatchResultErrorEntry, SendMessageBatchResultEntry};
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use outbox_shared::{OutboundEvent, RetryPolicy};

use super::SqsQueue;
use crate::config::{PublisherConfig, TargetKind};
use crate::deadline::Deadline;
use crate::publisher::{PublishOutcome, Publisher, TargetPublisher};
use crate::testing::outbound;

const QUEUE: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders";
const FIFO_QUEUE: &str = "https://sqs.us-east-1.amazonaws.com/123456789012/orders.fifo";

fn sqs(rules: &[&Rule]) -> Client {
    mock_client!(aws_sdk_sqs, RuleMode::Sequential, rules, |c| c
        .retry_config(RetryConfig::disabled()))
}

fn publisher(queue: &str, rules: &[&Rule]) -> TargetPublisher {
    let config = PublisherConfig {
        retry: RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        },
        ..PublisherConfig::of_kind(TargetKind::Sqs, queue, "test.orders")
    };
    TargetPublisher::on(SqsQueue::new(sqs(rules).config().to_builder()), config).unwrap()
}

/// An answer with every entry of `ids` successful and `failed` failed.
fn answer(ids: &[String], failed: &[(String, &str, bool)]) -> SendMessageBatchOutput {
    let failed_ids: Vec<&String> = failed.iter().map(|(id, _, _)| id).collect();
    SendMessageBatchOutput::builder()
        .set_successful(Some(
            ids.iter()
                .filter(|id| !failed_ids.contains(id))
                .map(|id| {
                    SendMessageBatchResultEntry::builder()
                        .id(id)
                        .message_id(format!("m-{id}"))
                        .md5_of_message_body("x")
                        .build()
                        .unwrap()
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
        .unwrap()
}

/// A message as the queue saw it: its body, attributes, group and de-duplication id.
type Seen = (String, Option<String>, Option<String>, Option<String>);

fn events() -> Vec<OutboundEvent> {
    vec![
        outbound("e1", "o1"),
        outbound("e2", "o2"),
        outbound("e3", "o3"),
    ]
}

#[tokio::test]
async fn a_fifo_queue_gets_each_aggregate_as_its_group_and_the_event_id_as_its_dedup_id() {
    for (queue, fifo) in [(FIFO_QUEUE, true), (QUEUE, false)] {
        // Given a queue that notes what it was sent
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let noted = Arc::clone(&seen);
        let send = mock!(Client::send_message_batch)
            .match_requests(move |req| {
                assert_eq!(req.queue_url(), Some(queue));
                noted.lock().unwrap().extend(req.entries().iter().map(|e| {
                    (
                        e.message_body().to_owned(),
                        e.message_attributes()
                            .and_then(|a| a.get("eventId"))
                            .and_then(|v| v.string_value().map(str::to_owned)),
                        e.message_group_id().map(str::to_owned),
                        e.message_deduplication_id().map(str::to_owned),
                    )
                }));
                true
            })
            .then_compute_output(|req| {
                let ids: Vec<String> = req.entries().iter().map(|e| e.id().to_owned()).collect();
                answer(&ids, &[])
            });
        let publisher = publisher(queue, &[&send]);

        // When three events are published
        let events = events();
        let outcomes = publisher.publish(&events, Deadline::NONE).await;

        // Then each is one message whose body is the envelope, with its id as an attribute, and
        // on the FIFO queue only its aggregate as the group and its event id as the dedup id
        assert_eq!(outcomes, vec![PublishOutcome::Published; 3]);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[1].0, events[1].detail);
        assert_eq!(seen[1].1.as_deref(), Some("e2"));
        if fifo {
            assert_eq!(
                (seen[1].2.as_deref(), seen[1].3.as_deref()),
                (Some("Order#o2"), Some("e2"))
            );
        } else {
            assert_eq!((seen[1].2.as_deref(), seen[1].3.as_deref()), (None, None));
        }
    }
}

#[tokio::test]
async fn failed_entries_are_read_by_id_retried_for_the_services_fault_and_poison_for_the_senders() {
    // Given a queue that fails entry 0 for its own fault and entry 2 for the message's, then
    // accepts the retry
    let first = mock!(Client::send_message_batch).then_compute_output(|req| {
        let ids: Vec<String> = req.entries().iter().map(|e| e.id().to_owned()).collect();
        answer(
            &ids,
            &[
                ("2".into(), "InvalidMessageContents", true),
                ("0".into(), "InternalError", false),
            ],
        )
    });
    let retry_seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let noted = Arc::clone(&retry_seen);
    let retry = mock!(Client::send_message_batch)
        .match_requests(move |req| {
            noted
                .lock()
                .unwrap()
                .extend(req.entries().iter().map(|e| e.message_body().to_owned()));
            true
        })
        .then_compute_output(|req| {
            let ids: Vec<String> = req.entries().iter().map(|e| e.id().to_owned()).collect();
            answer(&ids, &[])
        });
    let publisher = publisher(QUEUE, &[&first, &retry]);

    // When three events are published
    let events = events();
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then the first is published after its retry (alone), the second at once, the third is
    // poison with the queue's code
    assert_eq!(outcomes[0], PublishOutcome::Published);
    assert_eq!(outcomes[1], PublishOutcome::Published);
    assert!(
        matches!(&outcomes[2], PublishOutcome::Rejected { code, .. } if code == "InvalidMessageContents"),
        "{outcomes:?}"
    );
    assert_eq!(*retry_seen.lock().unwrap(), vec![events[0].detail.clone()]);
    assert_eq!(publisher.stats().retried, 1);
}

#[tokio::test]
async fn a_sender_fault_that_is_not_the_messages_leaves_the_event_pending() {
    // Given a queue whose KMS key refuses the relay
    let denied = mock!(Client::send_message_batch).then_compute_output(|req| {
        let ids: Vec<String> = req.entries().iter().map(|e| e.id().to_owned()).collect();
        answer(&ids, &[("0".into(), "KMS.AccessDeniedException", true)])
    });
    let publisher = publisher(QUEUE, &[&denied]);

    // When an event is published
    let outcomes = publisher
        .publish(&[outbound("e1", "o1")], Deadline::NONE)
        .await;

    // Then it failed, not poison: it stays pending
    assert!(
        matches!(&outcomes[0], PublishOutcome::Failed { code, .. } if code == "KMS.AccessDeniedException"),
        "{outcomes:?}"
    );
}

/// The publisher of `QUEUE` on a client answered by the first of `rules` that matches each call,
/// as often as it is called.
fn publisher_answering_any(rules: &[&Rule]) -> TargetPublisher {
    let client = mock_client!(aws_sdk_sqs, RuleMode::MatchAny, rules, |c| c
        .retry_config(RetryConfig::disabled()));
    let config = PublisherConfig {
        retry: RetryPolicy {
            max_retries: 2,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        },
        ..PublisherConfig::of_kind(TargetKind::Sqs, QUEUE, "test.orders")
    };
    TargetPublisher::on(SqsQueue::new(client.config().to_builder()), config).unwrap()
}

/// SQS's answer to a call it refuses as a whole, as it is on the wire (the JSON protocol, its
/// query-compatible code in `x-amzn-query-error`): what the SDK reads the code from.
fn refused_call(shape: &str, code: &str) -> aws_smithy_runtime_api::http::Response {
    let mut response = aws_smithy_runtime_api::http::Response::new(
        aws_smithy_runtime_api::http::StatusCode::try_from(400).unwrap(),
        aws_smithy_types::body::SdkBody::from(format!(
            r#"{{"__type":"com.amazonaws.sqs#{shape}","message":"refused by the mock"}}"#
        )),
    );
    response
        .headers_mut()
        .insert("x-amzn-query-error", format!("{code};Sender"));
    response
        .headers_mut()
        .insert("content-type", "application/x-amz-json-1.0");
    response
}

fn accepted(
    req: &aws_sdk_sqs::operation::send_message_batch::SendMessageBatchInput,
) -> SendMessageBatchOutput {
    let ids: Vec<String> = req.entries().iter().map(|e| e.id().to_owned()).collect();
    answer(&ids, &[])
}

#[tokio::test]
async fn a_batch_too_long_is_split_and_sent_again_not_poison() {
    // Given a queue refusing any call of more than one message as too long (HTTP 400
    // AWS.SimpleQueueService.BatchRequestTooLong, as the SDK reports SQS's code), taking one
    let too_long = mock!(Client::send_message_batch)
        .match_requests(|req| req.entries().len() > 1)
        .then_http_response(|| {
            refused_call(
                "BatchRequestTooLong",
                "AWS.SimpleQueueService.BatchRequestTooLong",
            )
        });
    let accept = mock!(Client::send_message_batch).then_compute_output(accepted);
    let publisher = publisher_answering_any(&[&too_long, &accept]);

    // When three events are published in one call
    let outcomes = publisher.publish(&events(), Deadline::NONE).await;

    // Then the call went again in halves until each was taken: all published, none poison
    assert_eq!(outcomes, vec![PublishOutcome::Published; 3]);
    assert_eq!(publisher.stats().rejected, 0);
}

#[tokio::test]
async fn a_lone_message_refused_as_a_batch_too_long_stays_pending() {
    // Given a queue refusing every call as too long
    let too_long = mock!(Client::send_message_batch).then_http_response(|| {
        refused_call(
            "BatchRequestTooLong",
            "AWS.SimpleQueueService.BatchRequestTooLong",
        )
    });
    let publisher = publisher_answering_any(&[&too_long]);

    // When one event is published
    let outcomes = publisher
        .publish(&[outbound("e1", "o1")], Deadline::NONE)
        .await;

    // Then it stays pending: the batch's size is no evidence against the message
    assert!(
        matches!(&outcomes[0], PublishOutcome::Failed { code, .. } if code == "AWS.SimpleQueueService.BatchRequestTooLong"),
        "{outcomes:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_refused_for_the_queues_kms_quota_is_retried_as_throttled() {
    // Given a queue whose KMS key throttles one call (KMS.ThrottlingException), then takes it
    let throttled = mock!(Client::send_message_batch)
        .then_http_response(|| refused_call("KmsThrottled", "KMS.ThrottlingException"));
    let accept = mock!(Client::send_message_batch).then_compute_output(accepted);
    let publisher = publisher(QUEUE, &[&throttled, &accept]);

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

#[tokio::test]
async fn a_call_refused_by_the_queues_kms_key_leaves_every_event_pending() {
    // Given a queue whose KMS key's policy refuses the relay (KMS.AccessDeniedException): the
    // target failing, whatever the messages
    let denied = mock!(Client::send_message_batch)
        .then_http_response(|| refused_call("KmsAccessDenied", "KMS.AccessDeniedException"));
    let publisher = publisher_answering_any(&[&denied]);

    // When three events are published
    let outcomes = publisher.publish(&events(), Deadline::NONE).await;

    // Then one call was made, not split, and every event stays pending: none is poison
    assert_eq!(denied.num_calls(), 1);
    assert!(
        outcomes.iter().all(
            |o| matches!(o, PublishOutcome::Failed { code, .. } if code == "KMS.AccessDeniedException")
        ),
        "{outcomes:?}"
    );
}
