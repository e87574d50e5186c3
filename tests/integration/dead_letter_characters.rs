//! A dead letter SQS takes, whatever its event holds. SQS refuses a message whose body or a string
//! message attribute holds a character outside XML 1.0's set (`InvalidMessageContents`): U+FFFE,
//! U+FFFF, and the control characters but tab, newline and carriage return. An item's payload (or
//! any string of it) may hold them, and a letter SQS refuses is never sent: the event stays
//! pending (the poller) or blocks its stream shard for its retries. moto takes any character; the
//! fault proxy refuses them as SQS does.
//!
//! The relays escape those characters in the letter's JSON (`\uXXXX`, which decodes to the same
//! string) and replace them in the message attributes, and `relay-poller redrive` re-creates the
//! item from the letter attribute for attribute as it was.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::Utc;
use outbox_shared::schema::{self, attr};
use outbox_shared::time::format_timestamp;
use outbox_shared::{OutboxStatus, ShardCount};
use outbox_tests::fault_proxy::{FaultProxy, FaultRates, sqs_allows};
use outbox_tests::{TestEnv, emulator_endpoints, minimal_outbox_item, unique_name};
use relay_runtime::DeadLetter;

use crate::dead_letter_size::run;

/// Characters at and beside every boundary of the set SQS allows (U+D800 to U+DFFF, surrogates,
/// are no characters: no string holds them), and characters JSON escapes or that take several
/// bytes.
const EDGES: &str = "\u{1}\u{8}\t\n\u{B}\u{C}\r\u{E}\u{1F} \u{7F}\u{D7FF}\u{E000}\u{FFFD}\u{FFFE}\
                     \u{FFFF}\u{10000}\u{1FFFE}\u{10FFFF}\"\\/\u{2028}é€😀";

type Item = HashMap<String, AttributeValue>;

/// Two poison events (their payloads are not JSON) holding [`EDGES`]: one in its payload and
/// aggregate id, one in its event id as well (so in the letter's `eventId` attribute).
fn poison_items(created_at: &str) -> Vec<Item> {
    let payload_id = unique_name("edge-payload");
    let id_id = format!("{}-{EDGES}", unique_name("edge-id"));
    [payload_id, id_id]
        .into_iter()
        .map(|event_id| {
            let aggregate = format!("order-{EDGES}");
            let shard = outbox_shared::shard_for(&aggregate, ShardCount::default());
            let mut item = minimal_outbox_item(
                "edge-user",
                &event_id,
                "OrderCreated",
                &format!("not JSON: {EDGES}"),
                created_at,
                shard,
            );
            let s = |v: &str| AttributeValue::S(v.to_owned());
            item.insert(attr::AGGREGATE_TYPE.to_owned(), s("Order"));
            item.insert(attr::AGGREGATE_ID.to_owned(), s(&aggregate));
            item.insert(attr::SEQUENCE.to_owned(), AttributeValue::N("7".to_owned()));
            item.insert(
                attr::TTL.to_owned(),
                AttributeValue::N((Utc::now().timestamp() + 86_400).to_string()),
            );
            item
        })
        .collect()
}

fn string<'a>(item: &'a Item, name: &str) -> &'a str {
    item.get(name)
        .and_then(|v| v.as_s().ok())
        .unwrap_or_else(|| panic!("{name} in {item:?}"))
}

/// Which relay dead-letters the events.
#[derive(Debug, Clone, Copy)]
enum Relay {
    Poller,
    Stream,
}

/// Given poison events holding characters SQS refuses, when `relay` dead-letters them through
/// SQS's rules, then each letter is taken and decodes to what the item held, and a redrive after
/// the items are gone re-creates them as they were.
async fn dead_letter_and_redrive(relay: Relay) {
    // Given two poison events whose strings hold every character at a boundary of SQS's set, and
    // SQS's rules in front of the emulator
    let env = TestEnv::new().await;
    let proxy = FaultProxy::start(&emulator_endpoints(), FaultRates::NONE, 5).await;
    let created_at = format_timestamp(Utc::now() - chrono::Duration::minutes(5));
    let originals = poison_items(&created_at);
    for item in &originals {
        env.put_raw_item(item.clone()).await;
    }
    let queue = env.dead_letter_queue_url.clone();

    // When the relay relays them
    let relayed = match relay {
        Relay::Poller => run(&env, Some(&proxy), &queue, "relay-poller", &["drain"]).await,
        Relay::Stream => {
            let args = [
                "--from",
                "trim-horizon",
                "--exit-when-idle",
                "1s",
                "--max-retries",
                "0",
            ];
            run(&env, Some(&proxy), &queue, "relay-stream-local", &args).await
        }
    };

    // Then SQS took both letters: both events are dead-lettered, none failed
    let summary = relayed.summary();
    assert_eq!(
        summary["dead_lettered"], 2,
        "{relay:?}: {summary}\n{}",
        relayed.stderr
    );
    assert_eq!(summary["failed"], 0, "{relay:?}: {summary}");
    assert_eq!(relayed.code, Some(0), "{relay:?}: {summary}");
    assert_eq!(
        proxy.counts().invalid_messages,
        0,
        "{relay:?}: SQS refused a letter"
    );

    // And each letter decodes to exactly what its item held, and its eventId attribute is the
    // event id with each character SQS refuses replaced by U+FFFD
    let messages = env
        .sqs
        .receive_message()
        .queue_url(&queue)
        .max_number_of_messages(10)
        .message_attribute_names("All")
        .visibility_timeout(0)
        .send()
        .await
        .expect("receive message")
        .messages
        .unwrap_or_default();
    assert_eq!(messages.len(), 2, "{messages:?}");
    for message in &messages {
        let body = message.body().expect("a body");
        assert!(body.chars().all(sqs_allows), "{body:?}");
        let letter: DeadLetter = serde_json::from_str(body).expect("a dead letter");
        let event_id = letter.event_id.clone().expect("an event id");
        let original = originals
            .iter()
            .find(|item| string(item, attr::EVENT_ID) == event_id)
            .unwrap_or_else(|| panic!("a letter about another event: {event_id:?}"));
        let payload = match relay {
            Relay::Poller => letter.record[attr::PAYLOAD].as_str(),
            Relay::Stream => letter.record["dynamodb"]["NewImage"][attr::PAYLOAD]["S"].as_str(),
        };
        assert_eq!(payload, Some(string(original, attr::PAYLOAD)), "{body}");
        let attribute = message
            .message_attributes()
            .and_then(|a| a.get("eventId"))
            .and_then(|v| v.string_value())
            .expect("an eventId attribute");
        let replaced: String = event_id
            .chars()
            .map(|c| if sqs_allows(c) { c } else { '\u{FFFD}' })
            .collect();
        assert_eq!(attribute, replaced);
    }
    for item in env.outbox_items().await {
        assert_eq!(item.status, OutboxStatus::DeadLettered, "{}", item.event_id);
    }

    // When both items are gone (expired), and the redrive puts them back from their letters
    for item in &originals {
        env.dynamodb
            .delete_item()
            .table_name(&env.table_name)
            .key(attr::PK, item[attr::PK].clone())
            .key(attr::SK, item[attr::SK].clone())
            .send()
            .await
            .expect("delete item");
    }
    let redrive = run(
        &env,
        Some(&proxy),
        &queue,
        "relay-poller",
        &["redrive", "--publish", "false"],
    )
    .await;

    // Then it re-created both
    let summary = redrive.summary();
    assert_eq!(redrive.code, Some(0), "{summary}\n{}", redrive.stderr);
    assert_eq!(summary["recreated"], 2, "{summary}\n{}", redrive.stderr);
    assert_eq!(summary["left_in_queue"], 0, "{summary}");

    // And each item is the original, attribute by attribute, pending under its own index keys,
    // with a ttl from the redrive
    let items = env.scan_items().await;
    assert_eq!(items.len(), 2, "{items:?}");
    for original in &originals {
        let recreated = items
            .iter()
            .find(|item| item[attr::SK] == original[attr::SK])
            .unwrap_or_else(|| panic!("{:?} re-created", original[attr::SK]));
        let without_ttl = |item: &Item| {
            let mut item = item.clone();
            item.remove(attr::TTL);
            item
        };
        assert_eq!(without_ttl(recreated), without_ttl(original));
        assert_eq!(string(recreated, attr::STATUS), schema::status::PENDING);
        let ttl: i64 = recreated[attr::TTL].as_n().unwrap().parse().unwrap();
        assert!(ttl > Utc::now().timestamp(), "{ttl}");
    }
    assert_eq!(env.pending_in_index().await, 2);
    assert_eq!(env.queue_depth(&queue).await, 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poller_dead_letter_of_characters_sqs_refuses_is_sent_escaped_and_redrive_restores_the_item()
 {
    dead_letter_and_redrive(Relay::Poller).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stream_dead_letter_of_characters_sqs_refuses_is_sent_escaped_and_redrive_restores_the_item()
 {
    dead_letter_and_redrive(Relay::Stream).await;
}
