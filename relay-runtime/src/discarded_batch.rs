//! A stream batch Lambda's event source mapping discarded (its retries, or the records' age, ran
//! out), as the mapping's Amazon S3 on-failure destination keeps it: one JSON object per batch,
//! the invocation record the SQS and SNS destinations get too (the metadata only), with the whole
//! batch as its `payload`. A TTL deletion's `REMOVE` in it is the only copy of its event left, so
//! the poller re-creates it from this (`relay_poller::discarded`); the local stream reader
//! (`relay-stream-local`) writes it for the batches it gives up: one type for both directions.
//!
//! The format, from the Lambda developer guide ("Retain discarded records for a DynamoDB event
//! source in Lambda", `lambda/latest/dg/services-dynamodb-errors.html`: "For Amazon S3
//! destinations, Lambda also sends the entire invocation record along with the metadata"; the
//! object key from its Kinesis twin, `kinesis-on-failure-destination.html`):
//!
//! ```text
//! {"requestContext": {"requestId", "functionArn", "condition", "approximateInvokeCount"},
//!  "responseContext": {"statusCode", "executedVersion", "functionError"},
//!  "version": "1.0", "timestamp": "2026-11-22T10:00:49.717Z",
//!  "DDBStreamBatchInfo": {"shardId", "startSequenceNumber", "endSequenceNumber",
//!     "approximateArrivalOfFirstRecord", "approximateArrivalOfLastRecord", "batchSize",
//!     "streamArn"},
//!  "payload": {"Records": [the batch's stream records, as the function receives them]}}
//! ```
//!
//! under the key `aws/lambda/<ESM-UUID>/<shardID>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<Random UUID>`
//! (UTC, the time of the failure). AWS writes `payload` as a JSON object (what LocalStack recorded
//! from AWS in its validated test of this destination); a string holding the same JSON is read
//! too, as another emulator writes it.

use aws_lambda_events::dynamodb::{Event, EventRecord};
use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize};
use uuid::Uuid;

/// Where the mapping writes in its bucket: every object key starts so.
pub const KEY_PREFIX: &str = "aws/lambda/";
/// `version` of the invocation record.
pub const VERSION: &str = "1.0";
/// `requestContext.condition` of a batch whose retries ran out (`MaximumRetryAttempts`).
pub const RETRY_ATTEMPTS_EXHAUSTED: &str = "RetryAttemptsExhausted";
/// `requestContext.condition` of records older than `MaximumRecordAgeInSeconds`.
pub const RECORD_AGE_EXCEEDED: &str = "RecordAgeExceeded";

/// One discarded batch: the invocation record with the batch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DiscardedBatch {
    #[serde(rename = "requestContext", default)]
    pub request_context: RequestContext,
    #[serde(rename = "responseContext", default)]
    pub response_context: ResponseContext,
    #[serde(default)]
    pub version: String,
    /// When the mapping gave the batch up (ISO-8601, milliseconds, UTC).
    #[serde(default)]
    pub timestamp: String,
    #[serde(rename = "DDBStreamBatchInfo")]
    pub batch_info: BatchInfo,
    /// The batch, as the function received it.
    #[serde(deserialize_with = "object_or_json_text")]
    pub payload: Event,
}

/// Which invocation failed, and why the batch was given up.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RequestContext {
    pub request_id: String,
    pub function_arn: String,
    /// [`RETRY_ATTEMPTS_EXHAUSTED`], [`RECORD_AGE_EXCEEDED`], …
    pub condition: String,
    pub approximate_invoke_count: u32,
}

/// What the last invocation answered.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResponseContext {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_code: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executed_version: Option<String>,
    /// `Unhandled` when the function failed; none when it answered with batch item failures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function_error: Option<String>,
}

/// Where the batch was on the stream.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct BatchInfo {
    pub shard_id: String,
    pub start_sequence_number: String,
    pub end_sequence_number: String,
    /// ISO-8601 in seconds, UTC.
    pub approximate_arrival_of_first_record: String,
    pub approximate_arrival_of_last_record: String,
    pub batch_size: u64,
    pub stream_arn: String,
}

/// The invocation that gave a batch up, as the mapping reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    pub request_id: String,
    pub function_arn: String,
    pub condition: &'static str,
    /// Attempts made (the first one and its retries).
    pub invoke_count: u32,
    /// `Some("Unhandled")` when the function failed; `None` when it reported batch item failures.
    pub function_error: Option<String>,
}

impl DiscardedBatch {
    /// The invocation record of `records` (one shard's, in order) given up at `at`.
    pub fn new(
        records: Vec<EventRecord>,
        shard_id: &str,
        invocation: Invocation,
        at: DateTime<Utc>,
    ) -> Self {
        let arrival = |record: Option<&EventRecord>| {
            record.map_or_else(String::new, |r| {
                r.change
                    .approximate_creation_date_time
                    .to_rfc3339_opts(SecondsFormat::Secs, true)
            })
        };
        let sequence = |record: Option<&EventRecord>| {
            record
                .and_then(|r| r.change.sequence_number.clone())
                .unwrap_or_default()
        };
        let batch_info = BatchInfo {
            shard_id: shard_id.to_owned(),
            start_sequence_number: sequence(records.first()),
            end_sequence_number: sequence(records.last()),
            approximate_arrival_of_first_record: arrival(records.first()),
            approximate_arrival_of_last_record: arrival(records.last()),
            batch_size: records.len() as u64,
            stream_arn: records
                .first()
                .and_then(|r| r.event_source_arn.clone())
                .unwrap_or_default(),
        };
        let mut payload = Event::default();
        payload.records = records;
        Self {
            request_context: RequestContext {
                request_id: invocation.request_id,
                function_arn: invocation.function_arn,
                condition: invocation.condition.to_owned(),
                approximate_invoke_count: invocation.invoke_count,
            },
            response_context: ResponseContext {
                status_code: Some(200),
                executed_version: Some("$LATEST".to_owned()),
                function_error: invocation.function_error,
            },
            version: VERSION.to_owned(),
            timestamp: at.to_rfc3339_opts(SecondsFormat::Millis, true),
            batch_info,
            payload,
        }
    }

    /// The batch's stream records.
    pub fn records(&self) -> &[EventRecord] {
        &self.payload.records
    }

    /// Reads an object's body.
    ///
    /// # Errors
    /// When the body is not an invocation record of a DynamoDB stream batch.
    pub fn from_json(body: &[u8]) -> Result<Self, serde_json::Error> {
        serde_json::from_slice(body)
    }

    /// The object's body.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("an invocation record serializes")
    }
}

/// The key of the object of a batch of `shard_id` that the mapping `mapping_uuid` gave up at `at`:
/// `aws/lambda/<ESM-UUID>/<shardID>/YYYY/MM/DD/YYYY-MM-DDTHH.MM.SS-<Random UUID>`.
pub fn object_key(mapping_uuid: &str, shard_id: &str, at: DateTime<Utc>, random: Uuid) -> String {
    format!(
        "{KEY_PREFIX}{mapping_uuid}/{shard_id}/{}/{}-{random}",
        at.format("%Y/%m/%d"),
        at.format("%Y-%m-%dT%H.%M.%S")
    )
}

/// `payload`: an object, or a string holding one.
fn object_or_json_text<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Event, D::Error> {
    use serde::de::Error;
    match serde_json::Value::deserialize(deserializer)? {
        serde_json::Value::String(text) => serde_json::from_str(&text).map_err(D::Error::custom),
        value => serde_json::from_value(value).map_err(D::Error::custom),
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;
    use serde_json::json;

    use super::*;

    fn record(sequence: &str, seconds: i64) -> EventRecord {
        let mut record = EventRecord::default();
        record.event_name = "INSERT".to_owned();
        record.event_source_arn =
            Some("arn:aws:dynamodb:eu-west-1:123456789012:table/t/stream/x".to_owned());
        record.change.sequence_number = Some(sequence.to_owned());
        record.change.approximate_creation_date_time =
            Utc.timestamp_opt(seconds, 0).single().unwrap();
        record
    }

    fn batch() -> DiscardedBatch {
        DiscardedBatch::new(
            vec![record("100", 1_795_000_000), record("200", 1_795_000_007)],
            "shardId-00000001-abc",
            Invocation {
                request_id: "r-1".to_owned(),
                function_arn: "arn:aws:lambda:eu-west-1:123456789012:function:relay".to_owned(),
                condition: RETRY_ATTEMPTS_EXHAUSTED,
                invoke_count: 4,
                function_error: None,
            },
            Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 49).unwrap()
                + chrono::Duration::milliseconds(717),
        )
    }

    #[test]
    fn the_record_has_the_fields_aws_documents() {
        let json: serde_json::Value = serde_json::from_slice(&batch().to_json()).unwrap();

        assert_eq!(json["version"], "1.0");
        assert_eq!(json["timestamp"], "2026-11-22T10:00:49.717Z");
        assert_eq!(
            json["requestContext"]["condition"],
            "RetryAttemptsExhausted"
        );
        assert_eq!(json["requestContext"]["approximateInvokeCount"], 4);
        assert_eq!(json["responseContext"]["statusCode"], 200);
        assert!(json["responseContext"].get("functionError").is_none());
        let info = &json["DDBStreamBatchInfo"];
        assert_eq!(info["shardId"], "shardId-00000001-abc");
        assert_eq!(info["startSequenceNumber"], "100");
        assert_eq!(info["endSequenceNumber"], "200");
        assert_eq!(
            info["approximateArrivalOfFirstRecord"],
            "2026-11-18T11:06:40Z"
        );
        assert_eq!(
            info["approximateArrivalOfLastRecord"],
            "2026-11-18T11:06:47Z"
        );
        assert_eq!(info["batchSize"], 2);
        assert_eq!(
            info["streamArn"],
            "arn:aws:dynamodb:eu-west-1:123456789012:table/t/stream/x"
        );
        let records = json["payload"]["Records"].as_array().unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(records[1]["dynamodb"]["SequenceNumber"], "200");
    }

    #[test]
    fn a_record_reads_back_as_written_and_from_a_payload_given_as_text() {
        let written = batch();
        assert_eq!(
            DiscardedBatch::from_json(&written.to_json()).unwrap(),
            written
        );

        let mut json: serde_json::Value = serde_json::from_slice(&written.to_json()).unwrap();
        json["payload"] = json!(json["payload"].to_string());
        let read = DiscardedBatch::from_json(json.to_string().as_bytes()).unwrap();
        assert_eq!(read.records(), written.records());
    }

    #[test]
    fn a_body_without_the_batch_is_not_a_discarded_batch() {
        assert!(DiscardedBatch::from_json(b"{}").is_err());
        assert!(DiscardedBatch::from_json(br#"{"DDBStreamBatchInfo": {}}"#).is_err());
        assert!(DiscardedBatch::from_json(b"not json").is_err());
    }

    #[test]
    fn the_key_is_the_mappings_shards_and_the_failures_utc_time() {
        let at = Utc.with_ymd_and_hms(2026, 9, 4, 23, 7, 8).unwrap();
        let random = Uuid::parse_str("12345678-1234-4234-8234-123456789abc").unwrap();

        let key = object_key("esm-1", "shardId-1", at, random);

        assert_eq!(
            key,
            "aws/lambda/esm-1/shardId-1/2026/09/04/2026-09-04T23.07.08-12345678-1234-4234-8234-123456789abc"
        );
        assert!(key.starts_with(KEY_PREFIX));
    }
}
