//! The processor's path without AWS (no store): one EventBridge event recorded from a live
//! relay's delivery (`tests/fixtures/consumer/order_created_event.json`, kept honest by
//! `consumer_example::the_fixture_has_the_shape_of_a_live_relayed_order_created_event`).

use super::*;

fn fixture() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/consumer/order_created_event.json"
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("the fixture")).expect("JSON")
}

#[tokio::test]
async fn one_eventbridge_event_is_handled_or_its_failure_is_the_invocations() {
    // Given the EventBridge event a rule invokes the consumer with
    let event = fixture();
    let processor = BatchProcessor::new();

    // When it is processed by a handler that succeeds, and by one that fails
    let handled = processor
        .process_eventbridge(
            &event,
            &Invocation::default(),
            |e: Envelope<Value>| async move { Ok::<_, String>(e.data["orderId"].clone()) },
        )
        .await
        .unwrap();
    let failed = processor
        .process_eventbridge(&event, &Invocation::default(), |_: Envelope<Value>| async {
            Err::<Value, _>("inventory down".to_owned())
        })
        .await
        .unwrap_err();

    // Then the handler got the event's data; its failure names the event and is retryable
    assert_eq!(handled, Processed::Handled(json_str("ord-fixture-1")));
    assert!(matches!(&failed, BatchError::Handler { event_id, .. }
        if event_id == "01a20144-5481-733a-9a3e-af7b283e2a86"));
    assert!(failed.is_retryable());
    assert!(failed.to_string().contains("inventory down"), "{failed}");
}

#[tokio::test]
async fn an_event_that_is_not_an_outbox_event_is_its_own_failure_not_retryable() {
    let mut event = fixture();
    event["detail"] = serde_json::json!({"hello": "world"});
    let err = BatchProcessor::new()
        .process_eventbridge(&event, &Invocation::default(), |_: Envelope<Value>| async {
            Ok::<_, String>(Value::Null)
        })
        .await
        .unwrap_err();
    assert!(matches!(err, BatchError::Decode { .. }), "{err:?}");
    assert!(!err.is_retryable());
}

fn json_str(s: &str) -> Value {
    Value::String(s.to_owned())
}
