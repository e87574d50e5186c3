use super::cancellation::map_cancellation;
use super::*;
use aws_sdk_dynamodb::types::CancellationReason;
use outbox_shared::OutboxConfig;
use outbox_shared::limits::ITEM_MAX_BYTES;
use outbox_shared::limits::PUT_EVENTS_DEFAULT_MAX_BYTES;

fn config() -> WriterConfig {
    WriterConfig::new(OutboxConfig::new("orders"), "test.orders")
}

fn key(sk: &str) -> ItemKey {
    ItemKey {
        pk: "USER#u".into(),
        sk: sk.into(),
    }
}

fn outcomes() -> Vec<(ItemKey, ConditionFailure)> {
    vec![
        (
            key("ORDER#o"),
            ConditionFailure::VersionConflict {
                expected_version: 4,
            },
        ),
        (key("OUTBOX#e"), ConditionFailure::AlreadyExists),
    ]
}

fn reasons(codes: &[&str]) -> Vec<CancellationReason> {
    codes
        .iter()
        .map(|c| CancellationReason::builder().code(*c).build())
        .collect()
}

fn event(payload: serde_json::Value) -> NewOutboxEvent {
    NewOutboxEvent {
        partition_key: "USER#u".into(),
        event_type: "Ping".into(),
        aggregate_type: "Test".into(),
        aggregate_id: "a".into(),
        sequence: None,
        payload,
        trace_header: None,
        trace_context: None,
    }
}

#[test]
fn cancellation_reasons_are_read_by_position() {
    let map = |codes: &[&str]| map_cancellation(&reasons(codes), &outcomes(), None);
    assert_eq!(
        map(&["ConditionalCheckFailed", "None"]),
        WriteError::VersionConflict {
            key: key("ORDER#o"),
            expected_version: 4
        }
    );
    assert_eq!(
        map(&["None", "ConditionalCheckFailed"]),
        WriteError::AlreadyExists {
            key: key("OUTBOX#e")
        }
    );
    assert_eq!(
        map(&["None", "TransactionConflict"]),
        WriteError::TransactionConflict {
            key: Some(key("OUTBOX#e"))
        }
    );
    assert_eq!(
        map(&["ThrottlingError", "None"]),
        WriteError::Throttled {
            key: Some(key("ORDER#o"))
        }
    );
    assert!(matches!(
        map(&["None", "ValidationError"]),
        WriteError::Validation { key: Some(k), .. } if k == key("OUTBOX#e")
    ));
}

#[test]
fn final_reasons_win_over_retryable_ones() {
    let map = |codes: &[&str]| map_cancellation(&reasons(codes), &outcomes(), None);
    assert!(matches!(
        map(&["TransactionConflict", "ValidationError"]),
        WriteError::Validation { .. }
    ));
    assert!(matches!(
        map(&["TransactionConflict", "ConditionalCheckFailed"]),
        WriteError::AlreadyExists { .. }
    ));
    assert!(map(&["TransactionConflict", "ThrottlingError"]).is_retryable());
    assert!(matches!(map(&[]), WriteError::Validation { key: None, .. }));
}

#[test]
fn a_transaction_needs_an_event_and_at_most_100_actions() {
    let err = OutboxTransaction::new()
        .prepare(&config(), None, Utc::now())
        .unwrap_err();
    assert_eq!(err, WriteError::InvalidInput(InputError::NoEvents));
    let tx = (0..=TRANSACT_MAX_ACTIONS).fold(OutboxTransaction::new(), |tx, i| {
        tx.event(event(serde_json::json!(i)))
    });
    assert_eq!(tx.len(), 101);
    assert_eq!(
        tx.prepare(&config(), None, Utc::now()).unwrap_err(),
        WriteError::LimitExceeded(LimitError::TooManyActions {
            actions: 101,
            max: 100
        })
    );
    let tx = (0..TRANSACT_MAX_ACTIONS).fold(OutboxTransaction::new(), |tx, i| {
        tx.event(event(serde_json::json!(i)))
    });
    let prepared = tx.prepare(&config(), None, Utc::now()).unwrap();
    assert_eq!(prepared.items.len(), 100);
    assert_eq!(prepared.outcomes.len(), 100);
}

#[test]
fn the_future_entry_size_is_checked_against_the_configured_limit() {
    // A payload that lands just under and just over the default 256 KiB entry once the
    // envelope, source and detail type are added.
    let fits = "x".repeat(PUT_EVENTS_DEFAULT_MAX_BYTES - 1024);
    OutboxTransaction::new()
        .event(event(serde_json::json!(fits)))
        .prepare(&config(), None, Utc::now())
        .unwrap();
    let too_big = "x".repeat(PUT_EVENTS_DEFAULT_MAX_BYTES);
    let err = OutboxTransaction::new()
        .event(event(serde_json::json!(too_big)))
        .prepare(&config(), None, Utc::now())
        .unwrap_err();
    assert!(
        matches!(err, WriteError::LimitExceeded(LimitError::EventTooLarge { max, bytes, .. })
            if max == PUT_EVENTS_DEFAULT_MAX_BYTES && bytes > max),
        "{err}"
    );
}

#[test]
fn an_event_eventbridge_would_refuse_is_refused_before_the_transaction() {
    // Given events whose EventType or TraceHeader EventBridge would refuse (and with it the
    // whole PutEvents call): new ones, and an item built and then changed by hand
    let new = |adjust: fn(&mut NewOutboxEvent)| {
        let mut e = event(serde_json::json!({}));
        adjust(&mut e);
        OutboxTransaction::new().event(e)
    };
    let mut built =
        OutboxItem::pending(event(serde_json::json!({})), &config().outbox, Utc::now()).unwrap();
    built.trace_header = Some("t".repeat(501));
    let cases = [
        (
            new(|e| e.event_type = "T".repeat(129)),
            "EventType is 129 characters; EventBridge accepts a DetailType of 1 to 128",
        ),
        (
            new(|e| e.trace_header = Some("t".repeat(501))),
            "TraceHeader is 501 characters; EventBridge accepts a TraceHeader of 1 to 500",
        ),
        (
            new(|e| e.trace_header = Some(String::new())),
            "TraceHeader is 0 characters",
        ),
        (
            OutboxTransaction::new().outbox_item(built),
            "TraceHeader is 501 characters",
        ),
    ];
    for (tx, says) in cases {
        // When it is prepared
        let err = tx.prepare(&config(), None, Utc::now()).unwrap_err();

        // Then it is refused before any call, naming the attribute and the limit, not the
        // value
        assert!(
            matches!(err, WriteError::InvalidInput(InputError::EntryField(_))),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.contains(says), "{text}");
        assert!(!text.contains("TT") && !text.contains("tt"), "{text}");
    }
}

const BUCKET: &str = "orders-payloads";

/// A payload store whose client is never called: `prepare` only builds references.
fn store() -> PayloadStore {
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::Config::builder()
            .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
            .region(aws_sdk_s3::config::Region::new("us-east-1"))
            .build(),
    );
    PayloadStore::new(s3, BUCKET)
}

fn with_bucket() -> WriterConfig {
    let mut config = config();
    config.payload_bucket = Some(BUCKET.into());
    config
}

/// An event whose payload's JSON text is `bytes` long.
fn event_of_bytes(bytes: usize) -> NewOutboxEvent {
    let payload = event(serde_json::json!({"lines": "x".repeat(bytes - 12)}));
    assert_eq!(payload.payload.to_string().len(), bytes);
    payload
}

#[test]
fn with_a_bucket_an_item_over_the_item_limit_refers_to_its_payload() {
    // Given a writer with a payload bucket and an event of 500 KB (more than an item holds)
    let tx = OutboxTransaction::new().event(event_of_bytes(500_000));

    // When the transaction is prepared
    let prepared = tx
        .prepare(&with_bucket(), Some(&store()), Utc::now())
        .unwrap();

    // Then the payload is to be stored under the event's key, and the item refers to it
    let event = &prepared.events[0];
    let [claim_check] = prepared.claim_checks.as_slice() else {
        panic!("one payload to store: {:?}", prepared.claim_checks);
    };
    assert_eq!(claim_check.event_id, event.event_id);
    assert_eq!(claim_check.payload.len(), 500_000);
    assert!(claim_check.payload.starts_with(r#"{"lines":"xxx"#));
    assert_eq!(event.payload, "");
    let reference = event.payload_ref.as_ref().expect("a reference");
    assert_eq!(
        reference.uri,
        format!("s3://{BUCKET}/payloads/{}", event.event_id)
    );
    assert_eq!(reference.size, 500_000);
    assert_eq!(
        reference.sha256,
        outbox_shared::claim_check::sha256_base64(claim_check.payload.as_bytes())
    );
    // And the request's item is the referenced one, a few hundred bytes
    let put = prepared.items[0].put().expect("a put");
    assert!(put.item().contains_key(attr::PAYLOAD_REF));
    assert!(!put.item().contains_key(attr::PAYLOAD));
    assert!(item_size(put.item()) < 1_000, "{}", item_size(put.item()));
}

#[test]
fn with_a_bucket_an_item_that_fits_keeps_its_payload_whatever_its_entry_size() {
    // Given a writer with a payload bucket and an event of 300 KB: its item fits, its
    // 256 KiB EventBridge entry would not (the relays store such a payload when publishing)
    let tx = OutboxTransaction::new().event(event_of_bytes(300_000));

    // When the transaction is prepared
    let prepared = tx
        .prepare(&with_bucket(), Some(&store()), Utc::now())
        .unwrap();

    // Then nothing is to be stored and the payload is inline
    assert!(prepared.claim_checks.is_empty());
    assert_eq!(prepared.events[0].payload.len(), 300_000);
    assert_eq!(prepared.events[0].payload_ref, None);
}

#[test]
fn without_a_bucket_the_limits_refuse_and_say_how_to_accept_larger_payloads() {
    // Given a writer without a payload bucket, one of them accepting 1 MiB entries
    let mut large_entries = config();
    large_entries.max_event_entry_bytes = 1024 * 1024;

    // When a 300 KB and a 500 KB event are prepared
    let entry_err = OutboxTransaction::new()
        .event(event_of_bytes(300_000))
        .prepare(&config(), None, Utc::now())
        .unwrap_err();
    let item_err = OutboxTransaction::new()
        .event(event_of_bytes(500_000))
        .prepare(&large_entries, None, Utc::now())
        .unwrap_err();

    // Then the first is too large for its entry, the second for its item, and both
    // messages name the setting that accepts them
    assert!(
        matches!(
            entry_err,
            WriteError::LimitExceeded(LimitError::EventTooLarge { .. })
        ),
        "{entry_err:?}"
    );
    assert!(
        matches!(
            item_err,
            WriteError::LimitExceeded(LimitError::ItemTooLarge {
                payload_bucket_would_fit: true,
                max: ITEM_MAX_BYTES,
                ..
            })
        ),
        "{item_err:?}"
    );
    for err in [entry_err, item_err] {
        assert!(
            err.to_string().ends_with(
                "; to accept larger payloads, configure the payload bucket \
                 (WriterConfig::payload_bucket): the writer and the relays store them in S3"
            ),
            "{err}"
        );
    }
}

#[test]
fn a_business_item_over_the_item_limit_gets_no_payload_bucket_advice() {
    let put = Put::builder()
        .table_name("orders")
        .item(attr::PK, AttributeValue::S("USER#u".into()))
        .item(attr::SK, AttributeValue::S("BLOB#1".into()))
        .item("Blob", AttributeValue::S("x".repeat(ITEM_MAX_BYTES)))
        .build()
        .unwrap();
    let err = OutboxTransaction::new()
        .put(put, ConditionFailure::AlreadyExists)
        .event(event(serde_json::json!({})))
        .prepare(&with_bucket(), Some(&store()), Utc::now())
        .unwrap_err();
    assert!(
        matches!(
            &err,
            WriteError::LimitExceeded(LimitError::ItemTooLarge {
                payload_bucket_would_fit: false,
                ..
            })
        ),
        "{err:?}"
    );
    assert!(!err.to_string().contains("payload bucket"), "{err}");
}

#[test]
fn a_payload_over_the_largest_accepted_is_refused_naming_sizes_and_setting() {
    for (config, payloads) in [(config(), None), (with_bucket(), Some(store()))] {
        // Given a writer accepting payloads up to 1,000 bytes
        let config = WriterConfig {
            max_payload_bytes: 1_000,
            ..config
        };

        // When an event of 1,001 bytes is prepared
        let err = OutboxTransaction::new()
            .event(event_of_bytes(1_001))
            .prepare(&config, payloads.as_ref(), Utc::now())
            .unwrap_err();

        // Then it is refused, naming both sizes and the setting
        assert!(
            matches!(
                &err,
                WriteError::LimitExceeded(LimitError::PayloadTooLarge {
                    bytes: 1_001,
                    max: 1_000,
                    ..
                })
            ),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains(
                "has a 1001-byte payload, more than the 1000 bytes the writer \
                 accepts (WriterConfig::max_payload_bytes)"
            ),
            "{text}"
        );
        // And one of 1,000 bytes is not
        OutboxTransaction::new()
            .event(event_of_bytes(1_000))
            .prepare(&config, payloads.as_ref(), Utc::now())
            .unwrap();
    }
}

#[test]
fn the_transaction_counts_the_referenced_items_not_the_payloads() {
    // Given 20 events of 500 KB each: 10 MB of payloads, 2.5 times what a transaction holds
    let tx = (0..20).fold(OutboxTransaction::new(), |tx, _| {
        tx.event(event_of_bytes(500_000))
    });

    // When the transaction is prepared with a payload bucket
    let prepared = tx
        .prepare(&with_bucket(), Some(&store()), Utc::now())
        .unwrap();

    // Then every payload is to be stored, and the transaction carries 20 small items
    assert_eq!(prepared.claim_checks.len(), 20);
    assert_eq!(prepared.items.len(), 20);

    // And business items still count in full: with 11 items of 390 KB it is too large
    let fat_put = |i: usize| {
        Put::builder()
            .table_name("orders")
            .item(attr::PK, AttributeValue::S("USER#u".into()))
            .item(attr::SK, AttributeValue::S(format!("BLOB#{i}")))
            .item("Blob", AttributeValue::S("x".repeat(390 * 1024)))
            .build()
            .unwrap()
    };
    let err = (0..11)
        .fold(
            OutboxTransaction::new().event(event_of_bytes(500_000)),
            |tx, i| tx.put(fat_put(i), ConditionFailure::AlreadyExists),
        )
        .prepare(&with_bucket(), Some(&store()), Utc::now())
        .unwrap_err();
    assert!(
        matches!(
            err,
            WriteError::LimitExceeded(LimitError::TransactionTooLarge { bytes, .. })
                // 11 items of 390 KB and their keys, and the event's item of under 2 KB
                if bytes > TRANSACT_MAX_BYTES && bytes < 11 * (390 * 1024 + 100) + 2_000
        ),
        "{err:?}"
    );
}

#[test]
fn a_payload_to_store_is_not_in_its_debug_text() {
    let claim_check = ClaimCheck {
        event_id: "e1".into(),
        payload: r#"{"email":"someone@example.com"}"#.into(),
    };
    let text = format!("{claim_check:?}");
    assert_eq!(text, r#"ClaimCheck { event_id: "e1", payload_bytes: 31 }"#);
}

#[test]
fn malformed_event_ids_are_rejected() {
    let mut bad = event(serde_json::json!({}));
    bad.aggregate_id = "a#b".into();
    let err = OutboxTransaction::new()
        .event(bad)
        .prepare(&config(), None, Utc::now())
        .unwrap_err();
    assert!(matches!(err, WriteError::InvalidInput(InputError::Id(_))));
}
