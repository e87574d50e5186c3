//! The stream relay finishes before the Lambda's deadline when EventBridge turns slow mid-batch.
//!
//! The emulator answers at its own pace, so the slow endpoint is the latency model (every call
//! answers after 10 ms; `PutEvents` turns slow after a few calls) behind real SDK clients with the
//! relays' own timeouts ([`relay_runtime::sdk_timeouts`], shortened here to keep the test quick).

use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use chrono::Utc;
use outbox_tests::fixtures;
use outbox_tests::latency_model::LatencyModel;
use relay_runtime::PublisherArgs;
use relay_stream::aws_lambda_events::dynamodb::EventRecord;
use relay_stream::{RecordOutcome, RelayArgs};
use tokio::time::Instant;

#[tokio::test]
async fn a_slow_endpoint_mid_batch_does_not_run_the_invocation_past_its_deadline() {
    // Given 100 pending events in one batch, and EventBridge answering in 10 ms for 3 calls and
    // then in 30 s (SDK operation timeout 1 s, one call at a time, 10 entries per call)
    let model = LatencyModel::new(Duration::from_millis(10));
    let items = fixtures::pending_items("deadline-table", 100, Utc::now());
    model.seed_pending(&items);
    model.turn_slow("PutEvents", 3, Duration::from_secs(30));
    let sdk = model
        .sdk_config()
        .into_builder()
        .timeout_config(
            TimeoutConfig::builder()
                // One attempt per call: the SDK no longer re-sends a timed-out PutEvents (the
                // publisher retries it), so each of the publisher's attempts takes the 1 s
                .operation_attempt_timeout(Duration::from_secs(1))
                .operation_timeout(Duration::from_secs(1))
                .build(),
        )
        .build();
    let args = RelayArgs {
        mark_concurrency: 100,
        // The cut (2 s in) falls inside the slow call's second attempt (1 s to 2 s and more), so
        // no retry of it and no later call can start before the cut, however the jitter falls
        deadline_margin: Duration::from_secs(2),
        ..fixtures::stream_relay_args(
            "deadline-table",
            PublisherArgs {
                publish_concurrency: 1,
                publish_max_attempts: 3,
                ..fixtures::publisher_args("bus")
            },
        )
    };
    let relay = relay_stream::build_relay(&args, &sdk).unwrap();
    let records: Vec<EventRecord> = items
        .iter()
        .enumerate()
        .map(|(i, item)| fixtures::insert_record(item, i))
        .collect();

    // When the invocation has 4 s left
    let started = Instant::now();
    let deadline = started + Duration::from_secs(4);
    let report = relay.handle(&records, relay.deadline_of(deadline)).await;
    let returned = Instant::now();

    // Then it returns before its deadline
    assert!(
        returned < deadline,
        "returned {:?} after the deadline",
        returned - deadline
    );
    // And the 30 events of the 3 fast calls are published and marked, and nothing after them is
    // reported as done
    let published: Vec<usize> = report
        .outcomes
        .iter()
        .enumerate()
        .filter(|(_, o)| matches!(o, RecordOutcome::Published { .. }))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(
        published,
        (0..30).collect::<Vec<_>>(),
        "{:?}",
        report.outcomes
    );
    assert!(
        report.outcomes[30..]
            .iter()
            .all(RecordOutcome::needs_redelivery),
        "{:?}",
        &report.outcomes[30..]
    );
    assert_eq!(report.first_unpublished, Some(30));
    let response = report.response(&records);
    assert_eq!(
        response.batch_item_failures[0].item_identifier.as_deref(),
        Some(format!("{:020}", 30).as_str())
    );
    // (the model removes an item from its pending index when it is marked published)
    assert_eq!(model.pending(), 70);
    // And no publish started after the margin: the slow call's 10 events failed (its retries
    // ended at the cut) and the 60 after it were never sent
    let stats = relay.publisher().stats();
    assert_eq!(
        (stats.published, stats.failed, stats.not_sent),
        (30, 10, 60),
        "{stats:?}"
    );
}
