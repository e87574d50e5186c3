//! The harness itself: a fresh environment routes bus events to the sink queue.

use outbox_tests::{TEST_SOURCE, TestEnv};

#[tokio::test]
async fn events_on_the_bus_reach_the_sink_queue() {
    // Given a fresh environment
    let env = TestEnv::new().await;

    // When an event is put on its bus
    let detail = r#"{"metadata":{"eventId":"e1","eventType":"Ping","occurredAt":"2026-11-22T10:00:00.000Z"},"data":{"n":1}}"#;
    let out = env
        .eventbridge
        .put_events()
        .entries(
            aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
                .event_bus_name(&env.bus_name)
                .source(TEST_SOURCE)
                .detail_type("Ping")
                .detail(detail)
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(out.failed_entry_count(), 0);

    // Then exactly that event arrives on the sink queue
    let messages = env
        .wait_for_sink(1, std::time::Duration::from_secs(5))
        .await;
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].event_id(), "e1");
    assert_eq!(messages[0].detail_type(), "Ping");
    assert_eq!(messages[0].envelope.data, serde_json::json!({"n": 1}));
    assert!(env.outbox_items().await.is_empty());
}
