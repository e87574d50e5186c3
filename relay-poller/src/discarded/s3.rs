//! [`DiscardedBatchStore`] on the bucket of the stream mapping's on-failure destination: the
//! objects under the mapping's prefix (`aws/lambda/`), listed (`ListObjectsV2`, paginated), read
//! (`GetObject`) and deleted (`DeleteObject`).

use outbox_shared::SdkFailure;
use relay_runtime::discarded_batch::KEY_PREFIX;
use relay_runtime::permissions::{Call, Target};

use super::DiscardedBatchStore;

/// The calls of [`S3DiscardedBatches`]: `ListObjectsV2` is authorized as `s3:ListBucket` on the
/// bucket; the reads and deletes on its objects.
pub const CALLS: &[Call] = &[
    Call::new("s3:ListBucket", Target::DiscardedBatchBucket),
    Call::new("s3:GetObject", Target::DiscardedBatchObjects),
    Call::new("s3:DeleteObject", Target::DiscardedBatchObjects),
];

/// The discarded batches in `bucket`.
#[derive(Debug, Clone)]
pub struct S3DiscardedBatches {
    s3: aws_sdk_s3::Client,
    bucket: String,
}

impl S3DiscardedBatches {
    pub fn new(s3: aws_sdk_s3::Client, bucket: impl Into<String>) -> Self {
        Self {
            s3,
            bucket: bucket.into(),
        }
    }
}

impl DiscardedBatchStore for S3DiscardedBatches {
    async fn list(&self) -> Result<Vec<String>, SdkFailure> {
        let mut keys = Vec::new();
        let mut pages = self
            .s3
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(KEY_PREFIX)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| SdkFailure::new("ListObjectsV2", e))?;
            keys.extend(
                page.contents()
                    .iter()
                    .filter_map(|o| o.key().map(str::to_owned)),
            );
        }
        Ok(keys)
    }

    async fn read(&self, key: &str) -> Result<Option<Vec<u8>>, SdkFailure> {
        let object = match self
            .s3
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(object) => object,
            Err(err)
                if err.as_service_error().is_some_and(
                    aws_sdk_s3::operation::get_object::GetObjectError::is_no_such_key,
                ) =>
            {
                return Ok(None);
            }
            Err(err) => return Err(SdkFailure::new("GetObject", err)),
        };
        let body =
            object.body.collect().await.map_err(|e| {
                SdkFailure::incomplete("GetObject", format!("reading the body: {e}"))
            })?;
        Ok(Some(body.into_bytes().to_vec()))
    }

    async fn remove(&self, key: &str) -> Result<(), SdkFailure> {
        self.s3
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| SdkFailure::new("DeleteObject", e))?;
        Ok(())
    }
}
