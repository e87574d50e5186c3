//! Buckets are the ones we own: every S3 call of a client built with [`ExpectedBucketOwner`]
//! carries `ExpectedBucketOwner` (the header `x-amz-expected-bucket-owner`), the account of the
//! stack, so S3 refuses the call (`403 AccessDenied`) when the bucket is another account's. A
//! bucket ARN or name carries no account: a bucket deleted and re-created under the same name by
//! another account would otherwise be written to and read from as if it were ours.
//!
//! One interceptor on the client rather than the parameter on each call: every call the client
//! makes carries it, a call added later included.

use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextMut;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;

/// The setting (environment variable) that names the account owning the stack's buckets; the
/// template sets it to the stack's account (`AWS::AccountId`) for every job that calls S3.
pub const VARIABLE: &str = "EXPECTED_BUCKET_OWNER";

/// The HTTP header of S3's `ExpectedBucketOwner` parameter.
pub const HEADER: &str = "x-amz-expected-bucket-owner";

/// The account that owns the buckets a client calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedBucketOwner(String);

impl ExpectedBucketOwner {
    /// `account`, an AWS account id (12 digits).
    ///
    /// # Errors
    /// A message naming the value when it is not 12 digits.
    pub fn new(account: &str) -> Result<Self, String> {
        if account.len() == 12 && account.bytes().all(|b| b.is_ascii_digit()) {
            Ok(Self(account.to_owned()))
        } else {
            Err(format!(
                "{VARIABLE} {account:?} is not an AWS account id (12 digits)"
            ))
        }
    }

    /// The owner [`VARIABLE`] names, `None` when it is unset or empty (a local emulator's
    /// buckets: S3 calls then carry no owner).
    ///
    /// # Errors
    /// As [`ExpectedBucketOwner::new`].
    pub fn from_env() -> Result<Option<Self>, String> {
        match std::env::var(VARIABLE) {
            Ok(account) if !account.is_empty() => Self::new(&account).map(Some),
            _ => Ok(None),
        }
    }

    /// The account id.
    pub fn account(&self) -> &str {
        &self.0
    }

    /// `s3`, with every call carrying this owner.
    pub fn client(&self, s3: &aws_sdk_s3::Client) -> aws_sdk_s3::Client {
        aws_sdk_s3::Client::from_conf(s3.config().to_builder().interceptor(self.clone()).build())
    }
}

/// `s3` with every call carrying `owner`, when there is one; `s3` itself otherwise.
pub fn client(s3: aws_sdk_s3::Client, owner: Option<&ExpectedBucketOwner>) -> aws_sdk_s3::Client {
    match owner {
        Some(owner) => owner.client(&s3),
        None => s3,
    }
}

impl Intercept for ExpectedBucketOwner {
    fn name(&self) -> &'static str {
        "ExpectedBucketOwner"
    }

    fn modify_before_signing(
        &self,
        context: &mut BeforeTransmitInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        context
            .request_mut()
            .headers_mut()
            .insert(HEADER, self.0.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_is_an_account_id() {
        assert_eq!(
            ExpectedBucketOwner::new("123456789012").unwrap().account(),
            "123456789012"
        );
        for bad in [
            "",
            "12345678901",
            "1234567890123",
            "arn:aws:iam::1",
            "12345678901a",
        ] {
            let err = ExpectedBucketOwner::new(bad).unwrap_err();
            assert!(err.contains(VARIABLE) && err.contains(bad), "{err}");
        }
    }
}
