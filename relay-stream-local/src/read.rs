//! Every record of a stream read at once, for tools and tests that need a real batch.

use aws_lambda_events::dynamodb::EventRecord;
use aws_sdk_dynamodbstreams::Client as StreamsClient;
use aws_sdk_dynamodbstreams::types::ShardIteratorType;

use crate::error::RunnerError;
use crate::records::to_event_record;

/// Every record currently in the stream, all shards from the trim horizon, in shard order.
///
/// For tools and tests that need a real batch (the same shape the Lambda receives).
///
/// # Errors
/// [`RunnerError::DescribeStream`] when the stream cannot be listed or read.
pub async fn read_stream_records(
    streams: &StreamsClient,
    stream_arn: &str,
) -> Result<Vec<EventRecord>, RunnerError> {
    let fail = |message: String| RunnerError::DescribeStream {
        stream_arn: stream_arn.to_owned(),
        message,
    };
    let description = streams
        .describe_stream()
        .stream_arn(stream_arn)
        .send()
        .await
        .map_err(|e| fail(outbox_shared::error::describe(&e)))?;
    let mut records = Vec::new();
    for shard in description
        .stream_description()
        .map(|d| d.shards())
        .unwrap_or_default()
    {
        let mut iterator = streams
            .get_shard_iterator()
            .stream_arn(stream_arn)
            .shard_id(shard.shard_id().unwrap_or_default())
            .shard_iterator_type(ShardIteratorType::TrimHorizon)
            .send()
            .await
            .map_err(|e| fail(outbox_shared::error::describe(&e)))?
            .shard_iterator()
            .map(str::to_owned);
        while let Some(current) = iterator.take() {
            let page = streams
                .get_records()
                .shard_iterator(current)
                .send()
                .await
                .map_err(|e| fail(outbox_shared::error::describe(&e)))?;
            if page.records().is_empty() {
                break;
            }
            records.extend(
                page.records()
                    .iter()
                    .map(|r| to_event_record(r, stream_arn)),
            );
            iterator = page.next_shard_iterator().map(str::to_owned);
        }
    }
    Ok(records)
}
