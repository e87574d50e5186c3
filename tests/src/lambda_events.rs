//! The events Lambda's event source mappings hand a function, recorded from the emulator: the
//! messages (ids, receipt handles, bodies, system and message attributes) and records (sequence
//! numbers, partition keys, data, arrival times) are what moto's SQS and Kinesis answer; only
//! the mapping's own envelope around them (`eventSource`, `eventSourceARN`, `awsRegion`, the
//! Kinesis `eventID`) is added here, as the mapping adds it, and the result is read back by
//! `aws_lambda_events`' types, so a shape they do not accept fails the test.

use std::time::{Duration, Instant};

use aws_sdk_kinesis::types::ShardIteratorType;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use outbox_consumer::batch::aws_lambda_events::kinesis::KinesisEvent;
use outbox_consumer::batch::aws_lambda_events::sqs::SqsEvent;
use serde_json::{Map, Value, json};

use crate::TestEnv;

/// An SQS trigger's event of up to `count` messages received from `queue_url` (waiting up to
/// 20 s for them), left in flight for five minutes as a batch in an invocation is.
///
/// # Panics
/// When moto refuses a call, or the event is not one `aws_lambda_events` reads.
pub async fn sqs_event(env: &TestEnv, queue_url: &str, count: usize) -> SqsEvent {
    let arn = env.queue_arn(queue_url).await;
    let region = region(env);
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut records = Vec::new();
    while records.len() < count && Instant::now() < deadline {
        let received = env
            .sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(i32::try_from(count - records.len()).unwrap_or(10).min(10))
            .visibility_timeout(300)
            .message_system_attribute_names(MessageSystemAttributeName::All)
            .message_attribute_names("All")
            .send()
            .await
            .expect("receive message");
        if received.messages().is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for message in received.messages() {
            let attributes: Map<String, Value> = message
                .attributes()
                .into_iter()
                .flatten()
                .map(|(name, value)| (name.as_str().to_owned(), json!(value)))
                .collect();
            let message_attributes: Map<String, Value> = message
                .message_attributes()
                .into_iter()
                .flatten()
                .map(|(name, value)| {
                    (
                        name.clone(),
                        json!({
                            "stringValue": value.string_value(),
                            "stringListValues": [],
                            "binaryListValues": [],
                            "dataType": value.data_type(),
                        }),
                    )
                })
                .collect();
            records.push(json!({
                "messageId": message.message_id(),
                "receiptHandle": message.receipt_handle(),
                "body": message.body(),
                "attributes": attributes,
                "messageAttributes": message_attributes,
                "md5OfBody": message.md5_of_body(),
                "eventSource": "aws:sqs",
                "eventSourceARN": arn,
                "awsRegion": region,
            }));
        }
    }
    serde_json::from_value(json!({ "Records": records })).expect("an SQS event")
}

/// A Kinesis trigger's event: every record of the stream's first shard that has any, from its
/// start (a batch is one shard's).
///
/// # Panics
/// When moto refuses a call, or the event is not one `aws_lambda_events` reads.
pub async fn kinesis_event(env: &TestEnv, stream_arn: &str) -> KinesisEvent {
    let shards = env
        .kinesis
        .list_shards()
        .stream_arn(stream_arn)
        .send()
        .await
        .expect("list shards");
    let mut found = None;
    for shard in shards.shards() {
        let iterator = env
            .kinesis
            .get_shard_iterator()
            .stream_arn(stream_arn)
            .shard_id(shard.shard_id())
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .expect("shard iterator")
            .shard_iterator()
            .expect("an iterator")
            .to_owned();
        let read = env
            .kinesis
            .get_records()
            .stream_arn(stream_arn)
            .shard_iterator(iterator)
            .send()
            .await
            .expect("get records");
        if !read.records().is_empty() {
            found = Some((shard.shard_id().to_owned(), read));
            break;
        }
    }
    let (shard, read) = found.expect("a shard with records");
    let region = region(env);
    let records: Vec<Value> = read
        .records()
        .iter()
        .map(|record| {
            let arrival = record
                .approximate_arrival_timestamp()
                .map(|t| t.as_secs_f64());
            json!({
                "kinesis": {
                    "kinesisSchemaVersion": "1.0",
                    "partitionKey": record.partition_key(),
                    "sequenceNumber": record.sequence_number(),
                    "data": aws_smithy_types::base64::encode(record.data().as_ref()),
                    "approximateArrivalTimestamp": arrival,
                },
                "eventSource": "aws:kinesis",
                "eventVersion": "1.0",
                "eventID": format!("{shard}:{}", record.sequence_number()),
                "eventName": "aws:kinesis:record",
                "invokeIdentityArn": "arn:aws:iam::123456789012:role/consumer",
                "awsRegion": region,
                "eventSourceARN": stream_arn,
            })
        })
        .collect();
    serde_json::from_value(json!({ "Records": records })).expect("a Kinesis event")
}

fn region(env: &TestEnv) -> String {
    env.sdk_config
        .region()
        .map_or_else(|| "us-east-1".to_owned(), ToString::to_string)
}
