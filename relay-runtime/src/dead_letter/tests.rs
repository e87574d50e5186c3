use std::sync::{Arc, Mutex};

use aws_sdk_sqs::Client;
use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::operation::get_queue_attributes::{
    GetQueueAttributesError, GetQueueAttributesOutput,
};
use aws_sdk_sqs::operation::send_message::SendMessageOutput;
use aws_sdk_sqs::types::error::InvalidAddress;
use aws_sdk_sqs::types::{MessageAttributeValue, QueueAttributeName};
use aws_smithy_mocks::{MockResponseInterceptor, Rule, RuleMode, create_mock_http_client, mock};
use outbox_shared::claim_check::{self, PayloadStore};
use outbox_shared::limits::SQS_MESSAGE_DEFAULT_MAX_BYTES;

use super::sqs::{attributes, message_size, string_attribute};
use super::sqs_text::encode;
use super::*;

/// An SQS client answered by `rules`, in order (SDK retries off).
fn mock_sqs(rules: &[&Rule]) -> Client {
    let interceptor = rules.iter().fold(
        MockResponseInterceptor::new().rule_mode(RuleMode::Sequential),
        |i, rule| i.with_rule(rule),
    );
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .http_client(create_mock_http_client())
        .interceptor(interceptor)
        .retry_config(RetryConfig::disabled())
        .build();
    Client::from_conf(config)
}

fn queue_limit(bytes: usize) -> Rule {
    mock!(Client::get_queue_attributes)
        .match_requests(|req| req.attribute_names() == [QueueAttributeName::MaximumMessageSize])
        .then_output(move || {
            GetQueueAttributesOutput::builder()
                .attributes(QueueAttributeName::MaximumMessageSize, bytes.to_string())
                .build()
        })
}

/// A `SendMessage` that is taken; its body and size as SQS counts it go to `sent`.
fn taken(sent: &Arc<Mutex<Vec<(String, usize)>>>) -> Rule {
    let sent = sent.clone();
    mock!(Client::send_message)
        .match_requests(move |req| {
            let attributes: Vec<(&str, MessageAttributeValue)> = req
                .message_attributes()
                .into_iter()
                .flatten()
                .map(|(name, value)| (name.as_str(), value.clone()))
                .collect();
            let body = req.message_body().unwrap_or_default().to_owned();
            let size = message_size(&body, &attributes);
            sent.lock().unwrap().push((body, size));
            true
        })
        .then_output(|| SendMessageOutput::builder().message_id("m").build())
}

/// A letter whose record is a payload of `payload_bytes` bytes.
fn letter(id: &str, key: Option<ItemKey>, payload_bytes: usize) -> DeadLetter {
    DeadLetter {
        reason: "EventBridge rejected the entry: EntryTooLarge: the entry is too large".into(),
        origin: "relay-poller".into(),
        event_id: Some(id.into()),
        key,
        record: serde_json::json!({"PK": "USER#u", "Payload": "x".repeat(payload_bytes)}),
        dead_lettered_at: "2026-11-22T10:00:00.000Z".into(),
        record_left_out: None,
        record_ref: None,
    }
}

fn key(id: &str) -> Option<ItemKey> {
    Some(ItemKey {
        pk: "USER#u".into(),
        sk: format!("OUTBOX#{id}"),
    })
}

fn parse(body: &str) -> DeadLetter {
    serde_json::from_str(body).unwrap()
}

#[test]
fn a_message_is_measured_as_sqs_counts_it() {
    // Body bytes (UTF-8, not characters), then each attribute's name, data type and value
    let attributes = [
        ("reason", string_attribute("é")),
        ("id", string_attribute("ab")),
    ];
    assert_eq!(
        message_size("€", &attributes),
        3 + ("reason".len() + "String".len() + 2) + ("id".len() + "String".len() + 2)
    );
}

/// Characters at and beside each boundary of the set SQS allows, and whether it allows each.
/// (U+D800 to U+DFFF, between `#xD7FF` and `#xE000`, are no `char`s.)
const BOUNDARIES: &[(char, bool)] = &[
    ('\u{0}', false),
    ('\u{8}', false),
    ('\u{9}', true),
    ('\u{A}', true),
    ('\u{B}', false),
    ('\u{C}', false),
    ('\u{D}', true),
    ('\u{E}', false),
    ('\u{1F}', false),
    ('\u{20}', true),
    ('\u{7F}', true),
    ('\u{D7FF}', true),
    ('\u{E000}', true),
    ('\u{FFFD}', true),
    ('\u{FFFE}', false),
    ('\u{FFFF}', false),
    ('\u{10000}', true),
    ('\u{1FFFE}', true),
    ('\u{10FFFF}', true),
];

#[test]
fn sqs_allows_exactly_xml_characters_at_every_boundary() {
    for (c, allowed) in BOUNDARIES {
        assert_eq!(sqs_allows(*c), *allowed, "{c:?}");
    }
}

#[test]
fn a_body_holds_only_characters_sqs_allows_and_decodes_to_the_letter_it_was() {
    // A letter whose record, key, id and reason hold every boundary character, alone and
    // between others (in object keys too)
    let all: String = BOUNDARIES.iter().map(|(c, _)| *c).collect();
    let mut whole = letter(&format!("e-{all}"), key(&all), 10);
    whole.reason = format!("reason {all}");
    whole.record = serde_json::json!({
        "Payload": format!("before{all}after"),
        format!("key{all}"): [all.clone(), {"nested": all.clone()}],
    });
    for (c, _) in BOUNDARIES {
        whole.record[format!("alone {:X}", u32::from(*c))] = c.to_string().into();
    }

    // When it is written as a body
    let body = encode(&whole).unwrap();

    // Then every character is one SQS allows, those it refuses written as JSON escapes
    // (serde_json's own for the control characters, `\b` and `\f` among them)
    assert!(body.chars().all(sqs_allows), "{body:?}");
    for (c, allowed) in BOUNDARIES {
        if !allowed {
            let escape = match c {
                '\u{8}' => "\\b".to_owned(),
                '\u{C}' => "\\f".to_owned(),
                c => format!("\\u{:04x}", u32::from(*c)),
            };
            let alone = format!(r#""alone {:X}":"{escape}""#, u32::from(*c));
            assert!(body.contains(&alone), "{alone} in {body}");
        }
    }
    // And it decodes to exactly the letter (the JSON serde_json writes, but escaped)
    assert_eq!(parse(&body), whole);
    let plain = serde_json::to_string(&whole).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap(),
        serde_json::from_str::<serde_json::Value>(&plain).unwrap()
    );
    // And a letter without such characters is the JSON serde_json writes
    let ordinary = letter("e1", key("e1"), 10);
    assert_eq!(
        encode(&ordinary).unwrap(),
        serde_json::to_string(&ordinary).unwrap()
    );
}

#[test]
fn an_attribute_value_has_each_character_sqs_refuses_replaced() {
    for (c, allowed) in BOUNDARIES {
        let value = string_attribute(&format!("a{c}b"));
        let expected = if *allowed {
            *c
        } else {
            char::REPLACEMENT_CHARACTER
        };
        assert_eq!(value.string_value(), Some(format!("a{expected}b").as_str()));
    }
    assert!(matches!(
        sqs_text("plain"),
        std::borrow::Cow::Borrowed("plain")
    ));
}

#[tokio::test]
async fn a_letter_of_characters_sqs_refuses_is_sent_with_only_characters_it_allows() {
    // Given a queue that takes messages
    let sent = Arc::new(Mutex::new(Vec::new()));
    let limit = queue_limit(SQS_MESSAGE_DEFAULT_MAX_BYTES);
    let checked = sent.clone();
    let send = mock!(Client::send_message)
        .match_requests(move |req| {
            let values: Vec<String> = req
                .message_attributes()
                .into_iter()
                .flatten()
                .filter_map(|(_, v)| v.string_value().map(str::to_owned))
                .collect();
            checked
                .lock()
                .unwrap()
                .push((req.message_body().unwrap_or_default().to_owned(), values));
            true
        })
        .then_output(|| SendMessageOutput::builder().message_id("m").build());
    let sink = SqsDeadLetterSink::new(mock_sqs(&[&limit, &send]), "q");

    // When a letter whose id, reason and record hold U+FFFE and U+FFFF is sent
    let mut poison = letter("e\u{FFFE}\u{FFFF}", key("e"), 10);
    poison.reason = "reason \u{FFFF}".into();
    poison.record["Payload"] = "\u{FFFE}\u{1}\u{FFFF}".into();
    sink.send(&poison).await.unwrap();

    // Then its body and every attribute value hold only characters SQS allows, and the body
    // decodes to the letter
    let sent = sent.lock().unwrap().clone();
    let (body, values) = &sent[0];
    assert!(body.chars().all(sqs_allows), "{body:?}");
    assert!(
        values.iter().flat_map(|v| v.chars()).all(sqs_allows),
        "{values:?}"
    );
    assert!(
        values.contains(&"e\u{FFFD}\u{FFFD}".to_owned()),
        "{values:?}"
    );
    assert_eq!(parse(body), poison);
}

#[tokio::test]
async fn a_letter_too_large_for_the_queue_goes_without_its_record_and_the_limit_is_read_once() {
    // Given a queue that takes messages of 2 KiB
    let sent = Arc::new(Mutex::new(Vec::new()));
    let limit = queue_limit(2048);
    let (first, second, third) = (taken(&sent), taken(&sent), taken(&sent));
    let sink = SqsDeadLetterSink::new(mock_sqs(&[&limit, &first, &second, &third]), "q");

    // When a letter that fits, one that does not, and a keyless one that does not are sent
    for letter in [
        letter("small", key("small"), 100),
        letter("large", key("large"), 4000),
        letter("keyless", None, 4000),
    ] {
        sink.send(&letter).await.unwrap();
    }

    // Then the queue's limit was read once, and every message fits in it
    assert_eq!(limit.num_calls(), 1);
    let sent = sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 3);
    assert!(sent.iter().all(|(_, size)| *size <= 2048), "{sent:?}");

    // And the small letter is whole
    let small = parse(&sent[0].0);
    assert_eq!(small, letter("small", key("small"), 100));

    // And the large one has everything but its record, and says where the record is
    let large = parse(&sent[1].0);
    let whole = letter("large", key("large"), 4000);
    let left_out = large.record_left_out.clone().expect("record left out");
    assert_eq!(left_out.max_message_bytes, 2048);
    assert_eq!(
        left_out.letter_bytes,
        message_size(&encode(&whole).unwrap(), &attributes(&whole))
    );
    assert_eq!(left_out.note, RECORD_IN_THE_TABLE);
    assert_eq!(
        large,
        DeadLetter {
            record: serde_json::Value::Null,
            record_left_out: Some(left_out),
            ..whole
        }
    );

    // And the keyless one says nothing else holds its record
    let keyless = parse(&sent[2].0);
    assert_eq!(keyless.record_left_out.unwrap().note, RECORD_LOST);
}

#[tokio::test]
async fn when_the_limit_cannot_be_read_sqs_default_is_used_and_the_next_letter_reads_it_again() {
    // Given a queue whose attributes cannot be read twice, then can (2 KiB), and that takes
    // messages
    let sent = Arc::new(Mutex::new(Vec::new()));
    let unreadable = || {
        mock!(Client::get_queue_attributes).then_error(|| {
            GetQueueAttributesError::InvalidAddress(
                InvalidAddress::builder().message("denied").build(),
            )
        })
    };
    let (unreadable_first, unreadable_second, readable) =
        (unreadable(), unreadable(), queue_limit(2048));
    let (first, second, third) = (taken(&sent), taken(&sent), taken(&sent));
    let sink = SqsDeadLetterSink::new(
        mock_sqs(&[
            &unreadable_first,
            &first,
            &unreadable_second,
            &second,
            &readable,
            &third,
        ]),
        "q",
    );

    // When a letter over 256 KiB, one under it, and one over 2 KiB are sent
    let over = letter("over", key("over"), SQS_MESSAGE_DEFAULT_MAX_BYTES);
    let under = letter("under", key("under"), SQS_MESSAGE_DEFAULT_MAX_BYTES - 2048);
    let large = letter("large", key("large"), 4000);
    sink.send(&over).await.unwrap();
    sink.send(&under).await.unwrap();
    sink.send(&large).await.unwrap();

    // Then while the limit could not be read, 256 KiB was used: the first goes without its
    // record, the second whole
    assert_eq!(unreadable_first.num_calls(), 1);
    assert_eq!(unreadable_second.num_calls(), 1);
    let sent = sent.lock().unwrap().clone();
    assert_eq!(sent.len(), 3);
    let over_sent = parse(&sent[0].0);
    assert_eq!(over_sent.record, serde_json::Value::Null);
    assert_eq!(
        over_sent.record_left_out.unwrap().max_message_bytes,
        SQS_MESSAGE_DEFAULT_MAX_BYTES
    );
    assert_eq!(parse(&sent[1].0), under);

    // And the third letter read the limit again and was measured against the queue's own
    assert_eq!(readable.num_calls(), 1);
    assert!(sent[2].1 <= 2048, "{}", sent[2].1);
    assert_eq!(
        parse(&sent[2].0).record_left_out.unwrap().max_message_bytes,
        2048
    );
}

/// An S3 client answered by `rules`, in order (SDK retries off).
fn mock_s3(rules: &[&Rule]) -> aws_sdk_s3::Client {
    aws_sdk_s3::Client::from_conf(crate::mocked_s3(rules).build())
}

/// What a `PutObject` was asked to store.
#[derive(Debug, Clone)]
struct Put {
    bucket: String,
    key: String,
    checksum_sha256: Option<String>,
    body: Vec<u8>,
}

/// A `PutObject` that is taken; what it stored goes to `puts`.
fn stored(puts: &Arc<Mutex<Vec<Put>>>) -> Rule {
    let puts = puts.clone();
    mock!(aws_sdk_s3::Client::put_object)
        .match_requests(move |req| {
            puts.lock().unwrap().push(Put {
                bucket: req.bucket().unwrap_or_default().to_owned(),
                key: req.key().unwrap_or_default().to_owned(),
                checksum_sha256: req.checksum_sha256().map(str::to_owned),
                body: req.body().bytes().unwrap_or_default().to_vec(),
            });
            true
        })
        .then_output(|| aws_sdk_s3::operation::put_object::PutObjectOutput::builder().build())
}

#[tokio::test]
async fn a_letter_too_large_for_the_queue_keeps_its_record_in_the_bucket_and_names_it() {
    // Given a queue that takes messages of 2 KiB, and a record bucket
    let sent = Arc::new(Mutex::new(Vec::new()));
    let puts = Arc::new(Mutex::new(Vec::new()));
    let limit = queue_limit(2048);
    let (first, second) = (taken(&sent), taken(&sent));
    let put = stored(&puts);
    let sink = SqsDeadLetterSink::new(mock_sqs(&[&limit, &first, &second]), "q")
        .with_record_bucket(PayloadStore::new(mock_s3(&[&put]), "orders-payloads"));
    assert_eq!(sink.record_bucket(), Some("orders-payloads"));

    // When a letter that fits and one that does not are sent
    let small = letter("small", key("small"), 100);
    let large = letter("large", key("large"), 4000);
    sink.send(&small).await.unwrap();
    sink.send(&large).await.unwrap();

    // Then one object was stored, for the large letter: its record, under dead-letters/ and
    // its event id, with its SHA-256 for S3 to check
    assert_eq!(put.num_calls(), 1);
    let puts = puts.lock().unwrap().clone();
    let object = &puts[0];
    assert_eq!(object.bucket, "orders-payloads");
    assert!(
        object.key.starts_with("dead-letters/large/") && object.key.ends_with(".json"),
        "{}",
        object.key
    );
    let record: serde_json::Value = serde_json::from_slice(&object.body).unwrap();
    assert_eq!(record, large.record);
    let sha256 = claim_check::sha256_base64(&object.body);
    assert_eq!(object.checksum_sha256.as_deref(), Some(sha256.as_str()));

    // And the small letter is whole, the large one names the object instead of carrying its
    // record, and both fit
    let sent = sent.lock().unwrap().clone();
    assert!(sent.iter().all(|(_, size)| *size <= 2048), "{sent:?}");
    assert_eq!(parse(&sent[0].0), small);
    let named = parse(&sent[1].0);
    let record_ref = named.record_ref.clone().expect("a record reference");
    assert_eq!(
        record_ref,
        RecordRef {
            uri: format!("s3://orders-payloads/{}", object.key),
            size: object.body.len() as u64,
            sha256,
            letter_bytes: message_size(&encode(&large).unwrap(), &attributes(&large)),
            max_message_bytes: 2048,
            note: RECORD_IN_THE_BUCKET.to_owned(),
        }
    );
    assert_eq!(
        named,
        DeadLetter {
            record: serde_json::Value::Null,
            record_ref: Some(record_ref.clone()),
            ..large
        }
    );
    assert_eq!(record_ref.payload_ref().validate(), Ok(()));
    let body: serde_json::Value = serde_json::from_str(&sent[1].0).unwrap();
    assert_eq!(body["recordRef"]["uri"], record_ref.uri, "{body}");
    assert!(body.get("recordLeftOut").is_none(), "{body}");
}

#[tokio::test]
async fn when_s3_fails_a_letter_too_large_is_not_sent_so_its_event_stays_pending() {
    // Given a queue that takes messages of 2 KiB, and a record bucket S3 cannot write to now
    let sent = Arc::new(Mutex::new(Vec::new()));
    let limit = queue_limit(2048);
    let send = taken(&sent);
    let unavailable = mock!(aws_sdk_s3::Client::put_object).then_http_response(|| {
        aws_smithy_runtime_api::http::Response::new(
            aws_smithy_runtime_api::http::StatusCode::try_from(503).unwrap(),
            aws_smithy_types::body::SdkBody::from(
                "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>",
            ),
        )
    });
    let sink = SqsDeadLetterSink::new(mock_sqs(&[&limit, &send]), "q").with_record_bucket(
        PayloadStore::new(mock_s3(&[&unavailable]), "orders-payloads"),
    );

    // When a letter too large for the queue is sent
    let err = sink
        .send(&letter("large", key("large"), 4000))
        .await
        .unwrap_err();

    // Then the sink fails it, retryable, naming the event, the object and S3's answer, and
    // sent nothing: the relay keeps the event pending (never a letter without its record, nor
    // one naming an object that is not there)
    let DeadLetterError::Record {
        event_id,
        uri,
        failure,
    } = &err
    else {
        panic!("{err:?}")
    };
    assert_eq!(event_id.as_deref(), Some("large"));
    assert!(
        uri.starts_with("s3://orders-payloads/dead-letters/large/"),
        "{uri}"
    );
    assert_eq!(failure.operation, "PutObject");
    assert_eq!(failure.code.as_deref(), Some("SlowDown"));
    assert!(failure.is_retryable(), "{failure}");
    let text = err.to_string();
    assert!(
        text.contains("large") && text.contains(uri.as_str()),
        "{text}"
    );
    assert_eq!(unavailable.num_calls(), 1);
    assert_eq!(send.num_calls(), 0, "no letter sent");
    assert!(sent.lock().unwrap().is_empty());
}

#[test]
fn each_letter_of_an_event_has_a_record_key_of_its_own() {
    // The event id as the claim check keys it, then a unique part
    let (a, b) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    let id = "0193a5e0-7c1a-7cc3-9f00-0a1b2c3d4e5f";
    assert_eq!(
        record_key(Some(id), key(id).as_ref(), a),
        format!("dead-letters/{id}/{a}.json")
    );
    assert_ne!(
        record_key(Some(id), None, a),
        record_key(Some(id), None, b),
        "dead-lettered twice, two records"
    );
    // An id a URI would escape is hashed, as the claim check hashes it
    let odd = record_key(Some("order 1/../x?"), None, a);
    let hashed = claim_check::object_key("order 1/../x?");
    assert_eq!(
        odd,
        format!(
            "dead-letters/{}/{a}.json",
            &hashed[claim_check::KEY_PREFIX.len()..]
        )
    );
    // Without an event id, the item's key, hashed (it names a user); without either, a
    // fixed word
    let keyed = record_key(None, key("e1").as_ref(), a);
    assert!(keyed.starts_with("dead-letters/sha256-"), "{keyed}");
    assert!(!keyed.contains("USER"), "{keyed}");
    assert_eq!(keyed, record_key(Some(""), key("e1").as_ref(), a));
    assert_eq!(
        record_key(None, None, a),
        format!("dead-letters/unidentified/{a}.json")
    );
}
