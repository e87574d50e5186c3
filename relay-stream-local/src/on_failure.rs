//! The event source mapping's on-failure destination, locally: a batch the reader gives up on
//! (its retries ran out) is written whole to a bucket, in the record format and under the key
//! AWS's S3 destination uses (`relay_runtime::discarded_batch`), so the poller recovers it as it
//! recovers the mapping's on AWS. On the emulator the bucket is moto's, reached through the SDK's
//! endpoint variables like every other call.

use aws_lambda_events::dynamodb::EventRecord;
use chrono::Utc;
use outbox_shared::SdkFailure;
use relay_runtime::discarded_batch::{
    DiscardedBatch, Invocation, RETRY_ATTEMPTS_EXHAUSTED, object_key,
};
use uuid::Uuid;

/// The function name the local records give as their `functionArn`'s.
const LOCAL_FUNCTION: &str = "relay-stream-local";

/// A bucket the reader writes the batches it gives up to, as one event source mapping would.
#[derive(Debug, Clone)]
pub struct S3OnFailureDestination {
    s3: aws_sdk_s3::Client,
    bucket: String,
    /// The mapping's id in the object keys: one per reader, as one per mapping on AWS.
    mapping_uuid: Uuid,
    function_arn: String,
}

impl S3OnFailureDestination {
    /// The destination `bucket`, for the batches of the stream `stream_arn` (its region and
    /// account name the local function in the records).
    pub fn new(s3: aws_sdk_s3::Client, bucket: impl Into<String>, stream_arn: &str) -> Self {
        let mut arn = stream_arn.split(':').skip(3);
        let (region, account) = (
            arn.next().unwrap_or_default(),
            arn.next().unwrap_or_default(),
        );
        Self {
            s3,
            bucket: bucket.into(),
            mapping_uuid: Uuid::new_v4(),
            function_arn: format!("arn:aws:lambda:{region}:{account}:function:{LOCAL_FUNCTION}"),
        }
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Writes `records`, the rest of a batch of `shard_id` given up after `invoke_count`
    /// invocations that reported a batch item failure; the object's key.
    ///
    /// # Errors
    /// When the object cannot be written (the mapping counts that as `DestinationDeliveryFailures`).
    pub async fn discard(
        &self,
        shard_id: &str,
        records: &[EventRecord],
        invoke_count: u32,
    ) -> Result<String, SdkFailure> {
        let at = Utc::now();
        let batch = DiscardedBatch::new(
            records.to_vec(),
            shard_id,
            Invocation {
                request_id: Uuid::new_v4().to_string(),
                function_arn: self.function_arn.clone(),
                condition: RETRY_ATTEMPTS_EXHAUSTED,
                invoke_count,
                // The handler answered with batch item failures: no function error.
                function_error: None,
            },
            at,
        );
        let key = object_key(&self.mapping_uuid.to_string(), shard_id, at, Uuid::new_v4());
        self.s3
            .put_object()
            .bucket(&self.bucket)
            .key(&key)
            .content_type("application/json")
            .body(batch.to_json().into())
            .send()
            .await
            .map_err(|e| SdkFailure::new("PutObject", e))?;
        Ok(key)
    }
}
