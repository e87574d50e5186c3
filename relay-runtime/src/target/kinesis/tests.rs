//! The Kinesis adapter on a mocked SDK, for what moto cannot produce: records refused one by one
//! (`ErrorCode`, HTTP 200), and the order of an aggregate's records when one of them is refused.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_kinesis::Client;
use aws_sdk_kinesis::config::retry::RetryConfig;
use aws_sdk_kinesis::operation::put_records::PutRecordsOutput;
use aws_sdk_kinesis::types::PutRecordsResultEntry;
use aws_smithy_mocks::{Rule, RuleMode, mock, mock_client};
use outbox_shared::RetryPolicy;

use super::KinesisStream;
use crate::config::{PublisherConfig, TargetKind};
use crate::deadline::Deadline;
use crate::publisher::{PublishOutcome, Publisher, TargetPublisher};
use crate::testing::outbound;

const STREAM: &str = "arn:aws:kinesis:us-east-1:123456789012:stream/orders";

fn publisher(mode: RuleMode, rules: &[&Rule]) -> TargetPublisher {
    let client = mock_client!(aws_sdk_kinesis, mode, rules, |c| c
        .retry_config(RetryConfig::disabled()));
    let config = PublisherConfig {
        retry: RetryPolicy {
            max_retries: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        },
        ..PublisherConfig::of_kind(TargetKind::Kinesis, STREAM, "test.orders")
    };
    TargetPublisher::on(KinesisStream::new(client.config().to_builder()), config).unwrap()
}

/// The answer to `records` records, those at `refused` refused with `code`.
fn answer(records: usize, refused: &[usize], code: &str) -> PutRecordsOutput {
    PutRecordsOutput::builder()
        .set_records(Some(
            (0..records)
                .map(|i| {
                    if refused.contains(&i) {
                        PutRecordsResultEntry::builder()
                            .error_code(code)
                            .error_message("from the mock")
                            .build()
                    } else {
                        PutRecordsResultEntry::builder()
                            .sequence_number(format!("{i:020}"))
                            .shard_id("shardId-000000000000")
                            .build()
                    }
                })
                .collect(),
        ))
        .failed_record_count(refused.len() as i32)
        .build()
        .unwrap()
}

/// Each call's records as (partition key, event id), in the order sent.
type NotedCalls = Arc<Mutex<Vec<Vec<(String, String)>>>>;

#[tokio::test]
async fn a_refused_record_is_sent_again_before_any_later_record_of_its_aggregate() {
    // Given a stream that notes each call's records (their data's event ids) and refuses the first
    // record of the first call for the shard's throughput, accepting everything after
    let calls: NotedCalls = Arc::default();
    let noted = Arc::clone(&calls);
    let first_call = Arc::new(Mutex::new(true));
    let put = mock!(Client::put_records)
        .match_requests(move |req| {
            assert_eq!(req.stream_arn(), Some(STREAM));
            noted.lock().unwrap().push(
                req.records()
                    .iter()
                    .map(|r| {
                        let data: serde_json::Value =
                            serde_json::from_slice(r.data().as_ref()).unwrap();
                        (
                            r.partition_key().unwrap_or_default().to_owned(),
                            data["metadata"]["eventId"].as_str().unwrap().to_owned(),
                        )
                    })
                    .collect(),
            );
            true
        })
        .then_compute_output(move |req| {
            let refuse_first = std::mem::take(&mut *first_call.lock().unwrap());
            let refused: &[usize] = if refuse_first { &[0] } else { &[] };
            answer(
                req.records().len(),
                refused,
                "ProvisionedThroughputExceededException",
            )
        });
    let publisher = publisher(RuleMode::MatchAny, &[&put]);

    // When two aggregates' two events each are published (a1, b1, a2, b2)
    let events = [
        outbound("a1", "a"),
        outbound("b1", "b"),
        outbound("a2", "a"),
        outbound("b2", "b"),
    ];
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then all are published, the refused a1 was sent again alone of its aggregate, and a2 left
    // only after a1 was accepted: on the stream a's records are in order
    assert_eq!(outcomes, vec![PublishOutcome::Published; 4]);
    let calls = calls.lock().unwrap();
    let order: Vec<&str> = calls.iter().flatten().map(|(_, id)| id.as_str()).collect();
    let position = |id: &str| order.iter().rposition(|sent| *sent == id).unwrap();
    assert!(position("a1") < position("a2"), "{calls:?}");
    assert!(position("b1") < position("b2"), "{calls:?}");
    for call in calls.iter() {
        let mut keys: Vec<&str> = call.iter().map(|(key, _)| key.as_str()).collect();
        keys.dedup();
        assert_eq!(keys.len(), call.len(), "one record per aggregate: {call:?}");
    }
    assert_eq!(calls[0][0], ("Order#a".to_owned(), "a1".to_owned()));
    let stats = publisher.stats();
    assert_eq!((stats.retried, stats.throttled), (1, 1));
    assert!(
        publisher.publish_rate().is_some(),
        "a throttled record slows the publisher"
    );
}

#[tokio::test]
async fn a_record_refused_every_time_holds_its_aggregates_later_records_back() {
    // Given a stream that refuses every record of aggregate a with an internal failure
    let put = mock!(Client::put_records).then_compute_output(|req| {
        let refused: Vec<usize> = req
            .records()
            .iter()
            .enumerate()
            .filter(|(_, r)| r.partition_key() == Some("Order#a"))
            .map(|(i, _)| i)
            .collect();
        answer(req.records().len(), &refused, "InternalFailure")
    });
    let publisher = publisher(RuleMode::MatchAny, &[&put]);

    // When a1, b1, a2 are published
    let events = [
        outbound("a1", "a"),
        outbound("b1", "b"),
        outbound("a2", "a"),
    ];
    let outcomes = publisher.publish(&events, Deadline::NONE).await;

    // Then a1 failed after its retries, b1 is published, and a2 was never sent
    assert!(
        matches!(&outcomes[0], PublishOutcome::Failed { code, .. } if code == "InternalFailure"),
        "{outcomes:?}"
    );
    assert_eq!(outcomes[1], PublishOutcome::Published);
    assert_eq!(outcomes[2], PublishOutcome::HeldBack);
}
