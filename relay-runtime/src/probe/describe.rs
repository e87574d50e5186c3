//! The probes: one describe call per resource a process relies on (the credentials and region,
//! a table and its index, a queue, a bucket, the target through its room's describe call), each
//! telling what it found ([`Probed`]) from what no retry can fix ([`Unusable`]).

use std::sync::{Arc, Mutex};

use aws_config::SdkConfig;
use aws_sdk_dynamodb::config::ProvideCredentials;
use aws_sdk_dynamodb::types::TableDescription;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use outbox_shared::{Misconfiguration, SdkFailure};

use super::unusable::no_credentials_fix;
use super::{CREDENTIALS_TIMEOUT, Kind, Place, Resource, Service, Unusable, credential_sources};
use crate::permissions::Call;
use crate::target::{TargetDescription, TargetKind};

/// What a probe found out about a resource.
#[derive(Debug, Clone)]
pub enum Probed<T> {
    /// It is there, as described.
    Found(T),
    /// The call failed in a way a retry may fix (throttling, a 5xx, a timeout): nothing is
    /// known, and the process goes on.
    Unknown(SdkFailure),
}

impl<T> Probed<T> {
    /// The description, if the probe got one.
    pub fn found(self) -> Option<T> {
        match self {
            Self::Found(value) => Some(value),
            Self::Unknown(_) => None,
        }
    }
}

/// The outcome of a probe's call: found, unknown (retryable), or unusable (a misconfiguration,
/// or any other failure no retry fixes).
pub(super) fn outcome<T>(
    result: Result<T, SdkFailure>,
    resource: &Resource,
    place: impl FnOnce() -> Place,
    action: &str,
) -> Result<Probed<T>, Unusable> {
    match result {
        Ok(value) => Ok(Probed::Found(value)),
        Err(failure) => match failure.misconfiguration {
            Some(problem) => Err(Unusable::of_failure(
                resource.clone(),
                problem,
                place(),
                action,
                failure,
            )),
            // A code no retry changes and that names no misconfiguration of its own (an SNS
            // topic of another region: `InvalidParameter`) is one all the same: the relays would
            // send every event into the same refusal.
            None if !failure.is_retryable() => Err(Unusable::of_failure(
                resource.clone(),
                Misconfiguration::Refused,
                place(),
                action,
                failure,
            )),
            None => Ok(Probed::Unknown(failure)),
        },
    }
}

/// Remembers the endpoint of the last request its client sent (or tried to sign), for the line
/// that names where a call went.
#[derive(Debug, Clone, Default)]
pub struct SeenEndpoint(Arc<Mutex<Option<String>>>);

impl SeenEndpoint {
    /// The scheme and authority of the last request, if one got that far.
    pub fn get(&self) -> Option<String> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl Intercept for SeenEndpoint {
    fn name(&self) -> &'static str {
        "SeenEndpoint"
    }

    fn read_before_signing(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let uri = context.request().uri();
        let endpoint = match uri.split_once("://") {
            Some((scheme, rest)) => {
                let authority = rest.split(['/', '?']).next().unwrap_or(rest);
                format!("{scheme}://{authority}")
            }
            None => uri.to_owned(),
        };
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(endpoint);
        Ok(())
    }
}

impl<T> Probed<T> {
    pub(super) fn failure(self) -> Option<SdkFailure> {
        match self {
            Self::Found(_) => None,
            Self::Unknown(failure) => Some(failure),
        }
    }
}

/// The process's region and credentials, before any call: the SDK's default chain, given
/// [`CREDENTIALS_TIMEOUT`] to find them.
///
/// # Errors
/// [`Unusable`] when there is no region, or no credentials (naming where the SDK looked).
pub async fn credentials(sdk: &SdkConfig) -> Result<(), Unusable> {
    let place = Place::of(sdk, Service::STS, None);
    if sdk.region().is_none() {
        return Err(Unusable {
            resource: Resource::new(
                Kind::Region,
                "",
                "AWS_REGION, AWS_DEFAULT_REGION or the profile's region",
            ),
            problem: Misconfiguration::Missing,
            place,
            operation: "resolving the region",
            code: None,
            fix: "set AWS_REGION to the stack's region (or `region` in the profile)".to_owned(),
            failure: None,
        });
    }
    let unusable = |why: String| Unusable {
        resource: Resource::new(Kind::Credentials, why, "AWS_PROFILE"),
        problem: Misconfiguration::NoCredentials,
        place: place.clone(),
        operation: "resolving credentials",
        code: None,
        fix: no_credentials_fix(),
        failure: None,
    };
    let Some(provider) = sdk.credentials_provider() else {
        return Err(unusable(
            "the SDK was set up without a credentials provider".to_owned(),
        ));
    };
    match tokio::time::timeout(CREDENTIALS_TIMEOUT, provider.provide_credentials()).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(unusable(format!(
            "{} ({})",
            credential_sources(),
            outbox_shared::error::describe(&err)
        ))),
        Err(_) => Err(unusable(format!(
            "{} (none answered within {})",
            credential_sources(),
            humantime::format_duration(CREDENTIALS_TIMEOUT)
        ))),
    }
}

/// A DynamoDB client of `sdk` for a probe, remembering where its call went.
fn dynamodb(sdk: &SdkConfig) -> (aws_sdk_dynamodb::Client, SeenEndpoint) {
    let seen = SeenEndpoint::default();
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(sdk)
            .interceptor(seen.clone())
            .build(),
    );
    (client, seen)
}

/// Describes the table `resource` names (`DescribeTable`).
///
/// # Errors
/// [`Unusable`] when it does not exist, may not be described, or cannot be reached.
pub async fn table(
    sdk: &SdkConfig,
    resource: &Resource,
) -> Result<Probed<TableDescription>, Unusable> {
    let (client, seen) = dynamodb(sdk);
    let result = client
        .describe_table()
        .table_name(&resource.name)
        .send()
        .await
        .map(|out| {
            out.table
                .unwrap_or_else(|| TableDescription::builder().build())
        })
        .map_err(|e| SdkFailure::new("DescribeTable", e));
    outcome(
        result,
        resource,
        || Place::of(sdk, Service::DYNAMODB, seen.get()),
        "dynamodb:DescribeTable",
    )
}

/// Checks that `table` (described) has the index `resource` names.
///
/// # Errors
/// [`Unusable`] naming the index, the table and the indexes it has.
pub fn index(
    sdk: &SdkConfig,
    table: &TableDescription,
    resource: &Resource,
) -> Result<(), Unusable> {
    let names: Vec<&str> = table
        .global_secondary_indexes()
        .iter()
        .filter_map(|i| i.index_name())
        .collect();
    if names.contains(&resource.name.as_str()) {
        return Ok(());
    }
    let table_name = table.table_name().unwrap_or_default();
    Err(Unusable {
        resource: Resource::new(
            Kind::Index,
            format!("{} of table {table_name}", resource.name),
            resource.setting.clone(),
        ),
        problem: Misconfiguration::Missing,
        place: Place::of(sdk, Service::DYNAMODB, None),
        operation: "DescribeTable",
        code: None,
        fix: format!(
            "{} (the table has {})",
            resource.create_fix(),
            if names.is_empty() {
                "no global secondary index".to_owned()
            } else {
                names.join(", ")
            }
        ),
        failure: None,
    })
}

/// The table `table` names and its index `index` (a relay's or the poller's).
///
/// # Errors
/// [`Unusable`] when either is missing, or the table may not be described or reached.
pub async fn table_and_index(
    sdk: &SdkConfig,
    table_resource: &Resource,
    index_resource: Option<&Resource>,
) -> Result<(), Unusable> {
    let described = table(sdk, table_resource).await?;
    if let (Some(index_resource), Probed::Found(described)) = (index_resource, &described) {
        index(sdk, described, index_resource)?;
    }
    Ok(())
}

/// Describes the target `resource` names as a target of `kind` is ([`crate::target::TargetSpec::describe`]).
///
/// # Errors
/// [`Unusable`] when it does not exist, may not be described, or cannot be reached.
pub async fn target(
    sdk: &SdkConfig,
    kind: TargetKind,
    resource: &Resource,
) -> Result<Probed<TargetDescription>, Unusable> {
    (kind.spec().describe)(sdk, resource).await
}

/// A client of the SDK crate `$sdk` built from `$config` for a probe, and the endpoint it called
/// ([`SeenEndpoint`]).
macro_rules! probe_client {
    ($sdk:ident, $config:expr) => {{
        let seen = $crate::probe::SeenEndpoint::default();
        let client = $sdk::Client::from_conf(
            $sdk::config::Builder::from($config)
                .interceptor(seen.clone())
                .build(),
        );
        (client, seen)
    }};
}
pub(crate) use probe_client;

/// What a probe's call to `service` found: found, unknown (retryable), or unusable (naming the
/// first of `calls`, the IAM action the call needs, when access is denied).
///
/// # Errors
/// [`Unusable`] when the failure is a misconfiguration.
pub(crate) fn probed<T>(
    result: Result<T, SdkFailure>,
    resource: &Resource,
    sdk: &SdkConfig,
    service: Service,
    seen: &SeenEndpoint,
    calls: &[Call],
) -> Result<Probed<T>, Unusable> {
    outcome(
        result,
        resource,
        || Place::of(sdk, service, seen.get()),
        calls.first().map_or("", |call| call.action),
    )
}

/// A queue's attributes the relays read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueDescription {
    pub arn: String,
    /// `MaximumMessageSize`, in bytes.
    pub maximum_message_size: Option<u64>,
}

/// Describes the queue `resource` names by its URL (`GetQueueAttributes`).
///
/// # Errors
/// [`Unusable`] when it does not exist, may not be described, or cannot be reached.
pub async fn queue(
    sdk: &SdkConfig,
    resource: &Resource,
) -> Result<Probed<QueueDescription>, Unusable> {
    use aws_sdk_sqs::types::QueueAttributeName;
    let seen = SeenEndpoint::default();
    let client = aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(sdk)
            .interceptor(seen.clone())
            .build(),
    );
    let result = client
        .get_queue_attributes()
        .queue_url(&resource.name)
        .attribute_names(QueueAttributeName::QueueArn)
        .attribute_names(QueueAttributeName::MaximumMessageSize)
        .send()
        .await
        .map(|out| {
            let attributes = out.attributes().cloned().unwrap_or_default();
            QueueDescription {
                arn: attributes
                    .get(&QueueAttributeName::QueueArn)
                    .cloned()
                    .unwrap_or_default(),
                maximum_message_size: attributes
                    .get(&QueueAttributeName::MaximumMessageSize)
                    .and_then(|size| size.parse().ok()),
            }
        })
        .map_err(|e| SdkFailure::new("GetQueueAttributes", e));
    outcome(
        result,
        resource,
        || Place::of(sdk, Service::SQS, seen.get()),
        "sqs:GetQueueAttributes",
    )
}

/// Whether the bucket `resource` names exists and may be listed (`ListObjectsV2` of one key,
/// authorized as `s3:ListBucket`): the one check of a bucket, whatever the bucket is for.
///
/// # Errors
/// [`Unusable`] when it does not exist, may not be listed, or cannot be reached.
pub async fn bucket(sdk: &SdkConfig, resource: &Resource) -> Result<Probed<()>, Unusable> {
    let seen = SeenEndpoint::default();
    let mut config = aws_sdk_s3::config::Builder::from(sdk).interceptor(seen.clone());
    if let Ok(Some(owner)) = crate::expected_bucket_owner() {
        config = config.interceptor(owner);
    }
    let client = aws_sdk_s3::Client::from_conf(config.build());
    let result = client
        .list_objects_v2()
        .bucket(&resource.name)
        .max_keys(1)
        .send()
        .await
        .map(|_| ())
        .map_err(|e| SdkFailure::new("ListObjectsV2", e));
    outcome(
        result,
        resource,
        || Place::of(sdk, Service::S3, seen.get()),
        "s3:ListBucket",
    )
}
