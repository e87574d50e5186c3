//! A DynamoDB client answered by `aws-smithy-mocks` rules, for error paths the emulator cannot
//! produce (throttling at a chosen call).

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::config::retry::RetryConfig;
use aws_sdk_dynamodb::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_dynamodb::error::ErrorMetadata;
use aws_smithy_mocks::{MockResponseInterceptor, Rule, RuleMode, create_mock_http_client};

/// A client whose calls are answered by `rules` (SDK retries off, so each rule answers once).
pub(crate) fn mock_client(rules: &[&Rule]) -> Client {
    let interceptor = rules.iter().fold(
        MockResponseInterceptor::new().rule_mode(RuleMode::MatchAny),
        |i, rule| i.with_rule(rule),
    );
    let config = aws_sdk_dynamodb::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new("test", "test", None, None, "test"))
        .http_client(create_mock_http_client())
        .interceptor(interceptor)
        .retry_config(RetryConfig::disabled())
        .build();
    Client::from_conf(config)
}

/// The error metadata DynamoDB sends when a table's throughput is exceeded.
pub(crate) fn throttled() -> ErrorMetadata {
    ErrorMetadata::builder()
        .code("ProvisionedThroughputExceededException")
        .message("Rate of requests exceeds the allowed throughput")
        .build()
}
