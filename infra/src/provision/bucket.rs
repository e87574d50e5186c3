//! The template's buckets (the discarded-batch bucket, the payload bucket) with their encryption,
//! versioning and public access block.

use super::{ProvisionError, parse_enum, provision_error};
use crate::template::{Template, logical_id};

/// Creates the template's `DiscardedBatchBucket` (the stream mapping's on-failure destination)
/// under `bucket_name`, with the template's default encryption, versioning and public access
/// block; its name. (Its TLS-only policy and lifecycle are AWS's to enforce: the emulator serves
/// plain HTTP and runs no lifecycle.)
///
/// # Errors
/// [`ProvisionError`] naming the template property or the call that failed.
pub async fn create_discarded_batch_bucket(
    s3: &aws_sdk_s3::Client,
    bucket_name: &str,
) -> Result<String, ProvisionError> {
    create_bucket_as(s3, logical_id::DISCARDED_BATCH_BUCKET, bucket_name).await
}

/// Creates the template's `PayloadBucket` (the claim check's: payloads too large for their event,
/// and the records of dead letters too large for their queue) under `bucket_name`, with the
/// template's encryption, versioning and public access block; its name, for `PAYLOAD_BUCKET`.
///
/// # Errors
/// [`ProvisionError`] naming the bucket and what could not be set.
pub async fn create_payload_bucket(
    s3: &aws_sdk_s3::Client,
    bucket_name: &str,
) -> Result<String, ProvisionError> {
    create_bucket_as(s3, logical_id::PAYLOAD_BUCKET, bucket_name).await
}

/// Creates the template's bucket `id` under `bucket_name`: its encryption, versioning and public
/// access block as the template sets them.
async fn create_bucket_as(
    s3: &aws_sdk_s3::Client,
    id: &str,
    bucket_name: &str,
) -> Result<String, ProvisionError> {
    use aws_sdk_s3::types::{
        BucketVersioningStatus, PublicAccessBlockConfiguration, ServerSideEncryption,
        ServerSideEncryptionByDefault, ServerSideEncryptionConfiguration, ServerSideEncryptionRule,
        VersioningConfiguration,
    };
    // As CloudFormation creates it at the parameters' defaults (`Hardened` off: SSE-S3).
    let template = Template::embedded()?.with_parameters(&[])?;
    let resource = |what: &str| format!("bucket {bucket_name} ({what})");
    let missing = |path: &str| ProvisionError {
        resource: format!("template resource {id}"),
        message: format!("has no {path}"),
    };
    s3.create_bucket()
        .bucket(bucket_name)
        .send()
        .await
        .map_err(|e| provision_error(resource("create"), e))?;
    let algorithm = template
        .sequence_at(
            id,
            &["BucketEncryption", "ServerSideEncryptionConfiguration"],
        )?
        .into_iter()
        .find_map(|rule| {
            rule.get("ServerSideEncryptionByDefault")?
                .get("SSEAlgorithm")?
                .as_str()
                .map(str::to_owned)
        })
        .ok_or_else(|| missing("ServerSideEncryptionByDefault.SSEAlgorithm"))?;
    let encryption = ServerSideEncryptionByDefault::builder()
        .sse_algorithm(parse_enum::<ServerSideEncryption>(
            "SSEAlgorithm",
            &algorithm,
            ServerSideEncryption::values(),
        )?)
        .build()
        .map_err(|e| provision_error(resource("encryption"), e))?;
    s3.put_bucket_encryption()
        .bucket(bucket_name)
        .server_side_encryption_configuration(
            ServerSideEncryptionConfiguration::builder()
                .rules(
                    ServerSideEncryptionRule::builder()
                        .apply_server_side_encryption_by_default(encryption)
                        .build(),
                )
                .build()
                .map_err(|e| provision_error(resource("encryption"), e))?,
        )
        .send()
        .await
        .map_err(|e| provision_error(resource("encryption"), e))?;
    let versioning = template
        .scalar_at(id, &["VersioningConfiguration", "Status"])?
        .ok_or_else(|| missing("VersioningConfiguration.Status"))?;
    s3.put_bucket_versioning()
        .bucket(bucket_name)
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(parse_enum::<BucketVersioningStatus>(
                    "VersioningConfiguration.Status",
                    &versioning,
                    BucketVersioningStatus::values(),
                )?)
                .build(),
        )
        .send()
        .await
        .map_err(|e| provision_error(resource("versioning"), e))?;
    let block = |name: &str| -> Result<bool, ProvisionError> {
        Ok(template
            .scalar_at(id, &["PublicAccessBlockConfiguration", name])?
            .is_some_and(|v| v == "true"))
    };
    s3.put_public_access_block()
        .bucket(bucket_name)
        .public_access_block_configuration(
            PublicAccessBlockConfiguration::builder()
                .block_public_acls(block("BlockPublicAcls")?)
                .block_public_policy(block("BlockPublicPolicy")?)
                .ignore_public_acls(block("IgnorePublicAcls")?)
                .restrict_public_buckets(block("RestrictPublicBuckets")?)
                .build(),
        )
        .send()
        .await
        .map_err(|e| provision_error(resource("public access block"), e))?;
    Ok(bucket_name.to_owned())
}
