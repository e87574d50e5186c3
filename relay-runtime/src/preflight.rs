//! What a process relies on, probed once at start-up: its credentials and region, then each
//! resource its settings name (the table and its pending index, the bus, the dead-letter queue,
//! the lease table, a bucket), by a describe call each. A failure no retry can fix
//! ([`outbox_shared::Misconfiguration`]: a missing resource, access denied, no or refused
//! credentials, an unknown region, an endpoint that refuses connections) is an [`Unusable`]: one
//! line naming the resource, the setting that named it (flag and variable), the region and the
//! endpoint, the AWS error code and what to do. Every binary stops on it (exit code
//! [`EXIT_MISCONFIGURED`]); the Lambda logs it as an ERROR at init. After start-up the relays
//! keep to their loops: a resource that goes missing later is retried and alarmed on, as any
//! other failed call.
//!
//! A failure of a probe that a retry may fix (throttling, a 5xx, a timeout) is not an
//! [`Unusable`]: the probe lets it pass ([`Probed::Unknown`]) and the relay starts, as it did
//! before it probed anything.
//!
//! `relay-poller check` reads the same descriptions and goes further (keys, projection, stream
//! view, TTL, sizes); the target is described by one function, [`target`], whose `match` on the
//! kind is where a new kind of target adds its describe call.

// An `Unusable` is made at most once, at start-up, and ends the process: its size (the resource,
// where the call went, the fix, the SDK error) costs nothing, and boxing it would hide it from
// `anyhow`'s downcasts, which choose the exit code.
#![allow(clippy::result_large_err)]

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_config::SdkConfig;
use aws_sdk_dynamodb::config::ProvideCredentials;
use aws_sdk_dynamodb::types::TableDescription;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::interceptors::context::BeforeTransmitInterceptorContextRef;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::config_bag::ConfigBag;
use outbox_shared::{Misconfiguration, SdkFailure};

use crate::config::TargetKind;
use crate::permissions::{Call, Target};

/// Exit code of a process whose settings, or what they name, are wrong: a setting out of range
/// (clap's own code for a bad flag too), a missing resource, access denied, no credentials, an
/// unknown region, an endpoint that refuses connections.
pub const EXIT_MISCONFIGURED: u8 = 2;

/// How long the credential chain may look (environment, profile, web identity, the container's
/// and the instance's endpoints) before the process says it found none.
pub const CREDENTIALS_TIMEOUT: Duration = Duration::from_secs(10);

/// The probe of every relay's table (the target's is [`target_calls`]; the dead-letter queue's
/// `sqs:GetQueueAttributes` is the dead-letter sink's own call).
pub const CALLS: &[Call] = &[Call::new("dynamodb:DescribeTable", Target::OutboxTable)];

/// The probe of the payload bucket (`PAYLOAD_BUCKET`), when one is configured: [`bucket`]'s
/// `ListObjectsV2` of one key, which IAM authorizes as `s3:ListBucket`.
pub const PAYLOAD_BUCKET_CALLS: &[Call] = &[Call::new("s3:ListBucket", Target::PayloadBucket)];

/// The describe call [`target`] makes of a target of `kind`, on the target.
pub fn target_calls(kind: TargetKind) -> &'static [Call] {
    const BUS: &[Call] = &[Call::new("events:DescribeEventBus", Target::EventTarget)];
    const TOPIC: &[Call] = &[Call::new("sns:GetTopicAttributes", Target::EventTarget)];
    const QUEUE: &[Call] = &[Call::new("sqs:GetQueueAttributes", Target::EventTarget)];
    const STREAM: &[Call] = &[Call::new(
        "kinesis:DescribeStreamSummary",
        Target::EventTarget,
    )];
    match kind {
        TargetKind::Classic | TargetKind::Custom => BUS,
        TargetKind::Sns => TOPIC,
        TargetKind::Sqs => QUEUE,
        TargetKind::Kinesis => STREAM,
    }
}

/// The probe of the poller fleet's lease table.
pub const LEASE_TABLE_CALLS: &[Call] = &[Call::new("dynamodb:DescribeTable", Target::LeaseTable)];

/// What kind of thing a process relies on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    Credentials,
    Region,
    Table,
    Index,
    Stream,
    Bus,
    Topic,
    Queue,
    DataStream,
    DeadLetterQueue,
    LeaseTable,
    Bucket,
}

impl Kind {
    /// The kind of resource a target of `kind` is.
    pub fn of_target(kind: TargetKind) -> Self {
        match kind {
            TargetKind::Classic | TargetKind::Custom => Self::Bus,
            TargetKind::Sns => Self::Topic,
            TargetKind::Sqs => Self::Queue,
            TargetKind::Kinesis => Self::DataStream,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Credentials => "credentials",
            Self::Region => "region",
            Self::Table => "table",
            Self::Index => "index",
            Self::Stream => "stream",
            Self::Bus => "bus",
            Self::Topic => "topic",
            Self::Queue => "queue",
            Self::DataStream => "data stream",
            Self::DeadLetterQueue => "dead-letter queue",
            Self::LeaseTable => "lease table",
            Self::Bucket => "bucket",
        })
    }
}

/// A resource a process relies on, and the setting that names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resource {
    pub kind: Kind,
    pub name: String,
    /// The setting as a person names it: `--flag (VARIABLE)` ([`crate::SettingError::setting`]).
    pub setting: String,
}

impl Resource {
    pub fn new(kind: Kind, name: impl Into<String>, setting: impl Into<String>) -> Self {
        Self {
            kind,
            name: name.into(),
            setting: setting.into(),
        }
    }

    /// What to do when it does not exist.
    fn create_fix(&self) -> String {
        let setting = &self.setting;
        match self.kind {
            Kind::Table => format!(
                "set {setting} to the stack's TableName output, or create the table as \
                 infra/template.yaml declares OutboxTable"
            ),
            Kind::Index => format!(
                "set {setting} to the table's pending index (the template's GSI1), or create the \
                 index as infra/template.yaml declares it"
            ),
            Kind::Stream => "enable the table's stream with the view NEW_AND_OLD_IMAGES, as \
                 infra/template.yaml declares it"
                .to_owned(),
            Kind::Bus => format!(
                "set {setting} to the stack's bus (the EventBusName parameter, or a Custom Event \
                 Bus's whole ARN), or create it"
            ),
            Kind::Topic | Kind::Queue | Kind::DataStream => format!(
                "set {setting} to the {} the stack's EventTarget parameter names (an ARN; a \
                 queue's URL), or create it",
                self.kind
            ),
            Kind::DeadLetterQueue => {
                format!("set {setting} to the stack's DeadLetterQueueUrl output")
            }
            Kind::LeaseTable => format!(
                "set {setting} to the stack's LeaseTableName output (locally, \
                 --create-lease-table creates it)"
            ),
            Kind::Bucket => format!(
                "set {setting} to the stack's bucket (its DiscardedBatchBucketName or \
                 PayloadBucketName output), or leave it unset"
            ),
            Kind::Credentials | Kind::Region => format!("set {setting}"),
        }
    }
}

/// Where a call went: the region and the endpoint, and the variable that chose the endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The SDK's region (`none` when it has none).
    pub region: String,
    /// The endpoint the call was sent to (or would have been).
    pub endpoint: String,
    /// The variable that set the endpoint (`AWS_ENDPOINT_URL_DYNAMODB`, `AWS_ENDPOINT_URL`), or
    /// `None` for the SDK's own endpoint for the region.
    pub endpoint_variable: Option<String>,
}

impl Place {
    /// Where a call of `service` goes with `sdk`: the endpoint the call was seen to use, or the
    /// one the endpoint variables or the region give.
    pub fn of(sdk: &SdkConfig, service: Service, seen: Option<String>) -> Self {
        let region = sdk
            .region()
            .map_or_else(|| "none".to_owned(), ToString::to_string);
        let variable = [service.endpoint_variable(), "AWS_ENDPOINT_URL"]
            .into_iter()
            .find(|v| std::env::var(v).is_ok_and(|url| !url.trim().is_empty()))
            .map(str::to_owned);
        let endpoint = seen
            .or_else(|| variable.as_deref().and_then(|v| std::env::var(v).ok()))
            .unwrap_or_else(|| format!("https://{}.{region}.amazonaws.com", service.host()));
        Self {
            region,
            endpoint,
            endpoint_variable: variable,
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "region {}, endpoint {}", self.region, self.endpoint)?;
        match &self.endpoint_variable {
            Some(variable) => write!(f, " ({variable})"),
            None => Ok(()),
        }
    }
}

/// The services a probe calls, for their endpoint and its variable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Service {
    DynamoDb,
    EventBridge,
    EventBridgeV2,
    Sns,
    Sqs,
    Kinesis,
    S3,
    Sts,
}

impl Service {
    /// The SDK's service-specific endpoint variable.
    pub fn endpoint_variable(self) -> &'static str {
        match self {
            Self::DynamoDb => "AWS_ENDPOINT_URL_DYNAMODB",
            Self::EventBridge => "AWS_ENDPOINT_URL_EVENTBRIDGE",
            Self::EventBridgeV2 => "AWS_ENDPOINT_URL_EVENTBRIDGEV2",
            Self::Sns => "AWS_ENDPOINT_URL_SNS",
            Self::Sqs => "AWS_ENDPOINT_URL_SQS",
            Self::Kinesis => "AWS_ENDPOINT_URL_KINESIS",
            Self::S3 => "AWS_ENDPOINT_URL_S3",
            Self::Sts => "AWS_ENDPOINT_URL_STS",
        }
    }

    /// The first label of the service's host on AWS.
    fn host(self) -> &'static str {
        match self {
            Self::DynamoDb => "dynamodb",
            Self::EventBridge => "events",
            Self::EventBridgeV2 => "eventsv2",
            Self::Sns => "sns",
            Self::Sqs => "sqs",
            Self::Kinesis => "kinesis",
            Self::S3 => "s3",
            Self::Sts => "sts",
        }
    }
}

/// A resource the process cannot use, and no retry would change that: the one line a person
/// reads ([`fmt::Display`]), with the SDK's error as its source.
#[derive(Debug, Clone)]
pub struct Unusable {
    pub resource: Resource,
    pub problem: Misconfiguration,
    pub place: Place,
    /// The API operation that found it (`DescribeTable`), or what was done instead of a call.
    pub operation: &'static str,
    /// The service's error code, when it answered with one.
    pub code: Option<String>,
    /// What to do.
    pub fix: String,
    pub failure: Option<SdkFailure>,
}

impl Unusable {
    /// `resource`, found `problem` by the failed call `failure` sent to `place`; `action` is the
    /// IAM action the call needs (named when access is denied).
    fn of_failure(
        resource: Resource,
        problem: Misconfiguration,
        place: Place,
        action: &str,
        failure: SdkFailure,
    ) -> Self {
        let fix = match problem {
            Misconfiguration::Missing => resource.create_fix(),
            Misconfiguration::AccessDenied => format!(
                "allow {action} on it to the caller (infra/template.yaml gives each job's role \
                 the calls it makes), or run with the credentials of the job's role"
            ),
            Misconfiguration::CredentialsRefused => "the credentials are not valid for this \
                 account or have expired: renew them (a new session, `aws sso login`) or choose \
                 others (AWS_PROFILE, AWS_ACCESS_KEY_ID)"
                .to_owned(),
            Misconfiguration::NoCredentials => no_credentials_fix(),
            Misconfiguration::UnknownHost => format!(
                "check that AWS_REGION ({}) is a region AWS has{}",
                place.region,
                place
                    .endpoint_variable
                    .as_deref()
                    .map(|v| format!(" and that {v} names a host that exists"))
                    .unwrap_or_default()
            ),
            Misconfiguration::ConnectionRefused => match &place.endpoint_variable {
                Some(variable) => format!(
                    "start the service {variable} points at, or set {variable} to where it \
                     listens (unset, the SDK calls AWS in the region)"
                ),
                None => "check the network's route to AWS (a proxy, a firewall, a VPC \
                     endpoint)"
                    .to_owned(),
            },
        };
        Self {
            resource,
            problem,
            place,
            operation: failure.operation,
            code: failure.code.clone(),
            fix,
            failure: Some(failure),
        }
    }
}

impl Unusable {
    /// What was found, without what to do: the resource, what is wrong with it, the setting that
    /// named it, where the call went and the error code.
    pub fn finding(&self) -> String {
        let code = self.code.as_deref().unwrap_or(match self.problem {
            Misconfiguration::ConnectionRefused => "connection refused",
            Misconfiguration::UnknownHost => "host not found",
            Misconfiguration::NoCredentials => "no credentials",
            Misconfiguration::Missing => "not listed",
            _ => "no error code",
        });
        match self.resource.kind {
            Kind::Credentials => format!(
                "no AWS credentials found: {} ({}; {}: {code})",
                self.resource.name, self.place, self.operation
            ),
            Kind::Region => format!(
                "no AWS region set ({}; {})",
                self.resource.setting, self.operation
            ),
            _ => format!(
                "{} {} {} (set by {}; {}; {}: {code})",
                self.resource.kind,
                self.resource.name,
                self.problem.words(),
                self.resource.setting,
                self.place,
                self.operation
            ),
        }
    }
}

/// The one line a person reads: what was found, then what to do.
impl fmt::Display for Unusable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.finding(), self.fix)
    }
}

impl std::error::Error for Unusable {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.failure
            .as_ref()
            .map(|failure| failure as &(dyn std::error::Error + 'static))
    }
}

/// What a probe found out about a resource.
#[derive(Debug, Clone)]
pub enum Probed<T> {
    /// It is there, as described.
    Found(T),
    /// The call failed in a way a retry may fix: nothing is known, and the process goes on.
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

/// The outcome of a probe's call: found, unknown (retryable), or unusable.
fn outcome<T>(
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

/// Where the credential chain of the SDK looks, in its order, as the line about missing
/// credentials names it: with the profile `AWS_PROFILE` names, or `default`.
pub fn credential_sources() -> String {
    let profile = std::env::var("AWS_PROFILE").unwrap_or_else(|_| "default".to_owned());
    let files = |variable: &str, default: &str| {
        std::env::var(variable).unwrap_or_else(|_| default.to_owned())
    };
    format!(
        "the SDK looked in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, the profile {profile:?} \
         (AWS_PROFILE) in {} (AWS_SHARED_CREDENTIALS_FILE) and {} (AWS_CONFIG_FILE), a web \
         identity token (AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN), the container's \
         credentials (AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI) and the EC2 instance \
         metadata service{}",
        files("AWS_SHARED_CREDENTIALS_FILE", "~/.aws/credentials"),
        files("AWS_CONFIG_FILE", "~/.aws/config"),
        if std::env::var("AWS_EC2_METADATA_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true"))
        {
            " (disabled by AWS_EC2_METADATA_DISABLED)"
        } else {
            ""
        }
    )
}

fn no_credentials_fix() -> String {
    "set AWS_PROFILE to a profile with credentials (or `aws configure`), or \
     AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; on ECS and Lambda the task's or function's role \
     provides them"
        .to_owned()
}

/// The process's region and credentials, before any call: the SDK's default chain, given
/// [`CREDENTIALS_TIMEOUT`] to find them.
///
/// # Errors
/// [`Unusable`] when there is no region, or no credentials (naming where the SDK looked).
pub async fn credentials(sdk: &SdkConfig) -> Result<(), Unusable> {
    let place = Place::of(sdk, Service::Sts, None);
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
        || Place::of(sdk, Service::DynamoDb, seen.get()),
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
        place: Place::of(sdk, Service::DynamoDb, None),
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

/// A target as its service describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetDescription {
    pub kind: TargetKind,
    /// Its ARN, as the service answered it.
    pub arn: String,
    /// Its state, where the kind has one (the Custom Event Bus: `ACTIVE`, `CREATING`, …).
    pub state: Option<String>,
}

/// Describes the target `resource` names as a target of `kind` would be: the one place a kind of
/// target says how it is described (a new kind adds its arm here, and its describe call's IAM
/// action in [`target_calls`]).
///
/// # Errors
/// [`Unusable`] when it does not exist, may not be described, or cannot be reached.
pub async fn target(
    sdk: &SdkConfig,
    kind: TargetKind,
    resource: &Resource,
) -> Result<Probed<TargetDescription>, Unusable> {
    let seen = SeenEndpoint::default();
    let (service, result) = match kind {
        TargetKind::Classic => {
            let client = aws_sdk_eventbridge::Client::from_conf(
                aws_sdk_eventbridge::config::Builder::from(sdk)
                    .interceptor(seen.clone())
                    .build(),
            );
            let result = client
                .describe_event_bus()
                .name(&resource.name)
                .send()
                .await
                .map(|out| TargetDescription {
                    kind,
                    arn: out.arn().unwrap_or_default().to_owned(),
                    state: None,
                })
                .map_err(|e| SdkFailure::new("DescribeEventBus", e));
            (Service::EventBridge, result)
        }
        TargetKind::Custom => {
            let client = aws_sdk_eventbridgev2::Client::from_conf(
                aws_sdk_eventbridgev2::config::Builder::from(sdk)
                    .interceptor(seen.clone())
                    .build(),
            );
            let result = client
                .describe_event_bus()
                .event_bus_arn(&resource.name)
                .send()
                .await
                .map(|out| TargetDescription {
                    kind,
                    arn: out.event_bus_arn().unwrap_or_default().to_owned(),
                    state: out.state().map(|s| s.as_str().to_owned()),
                })
                .map_err(|e| SdkFailure::new("DescribeEventBus", e));
            (Service::EventBridgeV2, result)
        }
        TargetKind::Sns => {
            let client = aws_sdk_sns::Client::from_conf(
                aws_sdk_sns::config::Builder::from(sdk)
                    .interceptor(seen.clone())
                    .build(),
            );
            let result = client
                .get_topic_attributes()
                .topic_arn(&resource.name)
                .send()
                .await
                .map(|out| TargetDescription {
                    kind,
                    arn: out
                        .attributes()
                        .and_then(|a| a.get("TopicArn"))
                        .cloned()
                        .unwrap_or_else(|| resource.name.clone()),
                    state: None,
                })
                .map_err(|e| SdkFailure::new("GetTopicAttributes", e));
            (Service::Sns, result)
        }
        TargetKind::Sqs => {
            // A queue is described as the dead-letter queue is.
            return Ok(match queue(sdk, resource).await? {
                Probed::Found(queue) => Probed::Found(TargetDescription {
                    kind,
                    arn: queue.arn,
                    state: None,
                }),
                Probed::Unknown(failure) => Probed::Unknown(failure),
            });
        }
        TargetKind::Kinesis => {
            let client = aws_sdk_kinesis::Client::from_conf(
                aws_sdk_kinesis::config::Builder::from(sdk)
                    .interceptor(seen.clone())
                    .build(),
            );
            let result = client
                .describe_stream_summary()
                .stream_arn(&resource.name)
                .send()
                .await
                .map(|out| {
                    let summary = out.stream_description_summary();
                    TargetDescription {
                        kind,
                        arn: summary
                            .map(|s| s.stream_arn().to_owned())
                            .unwrap_or_default(),
                        state: summary.map(|s| s.stream_status().as_str().to_owned()),
                    }
                })
                .map_err(|e| SdkFailure::new("DescribeStreamSummary", e));
            (Service::Kinesis, result)
        }
    };
    let action = target_calls(kind)[0].action;
    outcome(
        result,
        resource,
        || Place::of(sdk, service, seen.get()),
        action,
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
        || Place::of(sdk, Service::Sqs, seen.get()),
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
    let client = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(sdk)
            .interceptor(seen.clone())
            .build(),
    );
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

/// What a process relies on, to probe at start-up in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// The outbox table, and its pending index when the process reads it.
    Table {
        table: Resource,
        index: Option<Resource>,
    },
    /// The target events are published to.
    Target { kind: TargetKind, target: Resource },
    /// The dead-letter queue.
    Queue(Resource),
    /// The poller fleet's lease table.
    LeaseTable(Resource),
    /// A bucket.
    Bucket(Resource),
}

impl Need {
    /// The target `publisher` publishes to, named by its setting.
    pub fn target(publisher: &crate::PublisherConfig) -> Self {
        Self::Target {
            kind: publisher.target_kind,
            target: target_resource(publisher),
        }
    }
}

/// The payload bucket `publisher` stores large payloads in, named by its setting, if it has one.
pub fn payload_bucket(publisher: &crate::PublisherConfig) -> Option<Need> {
    publisher.payload_bucket.as_ref().map(|bucket| {
        Need::Bucket(Resource::new(
            Kind::Bucket,
            bucket,
            crate::SettingError::name_of::<crate::PublisherArgs>("payload_bucket"),
        ))
    })
}

/// The target `publisher` publishes to, as a resource named by `--target (EVENT_TARGET)`.
pub fn target_resource(publisher: &crate::PublisherConfig) -> Resource {
    Resource::new(
        Kind::of_target(publisher.target_kind),
        &publisher.target,
        crate::SettingError::name_of::<crate::PublisherArgs>("target"),
    )
}

/// Probes, in order, the credentials and then each of `needs`.
///
/// # Errors
/// The first [`Unusable`] found.
pub async fn require(sdk: &SdkConfig, needs: &[Need]) -> Result<(), Unusable> {
    credentials(sdk).await?;
    for need in needs {
        let unknown = match need {
            Need::Table { table: t, index: i } => {
                table_and_index(sdk, t, i.as_ref()).await?;
                None
            }
            Need::Target { kind, target: t } => target(sdk, *kind, t).await?.failure(),
            Need::Queue(q) => queue(sdk, q).await?.failure(),
            Need::LeaseTable(t) => table(sdk, t).await?.failure(),
            Need::Bucket(b) => bucket(sdk, b).await?.failure(),
        };
        if let Some(failure) = unknown {
            tracing::warn!(error = %failure, "could not check a resource at start-up; going on");
        }
    }
    Ok(())
}

impl<T> Probed<T> {
    fn failure(self) -> Option<SdkFailure> {
        match self {
            Self::Found(_) => None,
            Self::Unknown(failure) => Some(failure),
        }
    }
}

#[cfg(test)]
mod tests;
