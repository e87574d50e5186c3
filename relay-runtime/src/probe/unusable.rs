//! How a resource a process cannot use is told to a person: what it is ([`Kind`], [`Resource`]),
//! where the call went ([`Place`], [`Service`]), and [`Unusable`], the one line naming the
//! resource, the setting that named it, the region and endpoint, the AWS error code and what to do.

use std::fmt;

use aws_config::SdkConfig;
use outbox_shared::{Misconfiguration, SdkFailure};

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
    pub(super) fn create_fix(&self) -> String {
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

    /// The region the resource's name places it in (an ARN's region, an SQS queue URL's host
    /// `sqs.REGION.amazonaws.com`), when that is not `region`, the region the process calls.
    pub fn other_region(&self, region: &str) -> Option<&str> {
        let named = match self.name.split(':').collect::<Vec<_>>()[..] {
            ["arn", _, _, named, ..] => Some(named),
            _ => self
                .name
                .strip_prefix("https://sqs.")
                .and_then(|rest| rest.split_once('.'))
                .filter(|(_, host)| host.starts_with("amazonaws.com"))
                .map(|(named, _)| named),
        };
        named.filter(|named| !named.is_empty() && *named != region)
    }

    /// What to do when the resource is in region `named`, not in `region`, the one the process
    /// calls: a topic, a queue or a stream is reached only in its own region.
    fn other_region_fix(&self, named: &str, region: &str) -> String {
        format!(
            "the {} is in region {named}, the process calls region {region}: set AWS_REGION to \
             {named} (the stack's region), or set {} to a {} in {region}",
            self.kind, self.setting, self.kind
        )
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
        let variable = [service.endpoint_variable, "AWS_ENDPOINT_URL"]
            .into_iter()
            .find(|v| std::env::var(v).is_ok_and(|url| !url.trim().is_empty()))
            .map(str::to_owned);
        let endpoint = seen
            .or_else(|| variable.as_deref().and_then(|v| std::env::var(v).ok()))
            .unwrap_or_else(|| format!("https://{}.{region}.amazonaws.com", service.host));
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

/// A service a probe calls, for its endpoint and its variable: the ones the probes of this module
/// call, and each target's (its room's `SERVICE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Service {
    /// The SDK's service-specific endpoint variable (`AWS_ENDPOINT_URL_DYNAMODB`).
    pub endpoint_variable: &'static str,
    /// The first label of the service's host on AWS (`dynamodb`).
    pub host: &'static str,
}

impl Service {
    pub const DYNAMODB: Self = Self::new("AWS_ENDPOINT_URL_DYNAMODB", "dynamodb");
    pub const SQS: Self = Self::new("AWS_ENDPOINT_URL_SQS", "sqs");
    pub const S3: Self = Self::new("AWS_ENDPOINT_URL_S3", "s3");
    pub const STS: Self = Self::new("AWS_ENDPOINT_URL_STS", "sts");

    pub const fn new(endpoint_variable: &'static str, host: &'static str) -> Self {
        Self {
            endpoint_variable,
            host,
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
    pub(super) fn of_failure(
        resource: Resource,
        problem: Misconfiguration,
        place: Place,
        action: &str,
        failure: SdkFailure,
    ) -> Self {
        let other_region = resource.other_region(&place.region);
        let fix = match problem {
            Misconfiguration::Missing | Misconfiguration::Refused if other_region.is_some() => {
                resource.other_region_fix(other_region.unwrap_or_default(), &place.region)
            }
            Misconfiguration::Missing => resource.create_fix(),
            Misconfiguration::Refused => format!(
                "set {} to a {} this account may use in region {} (the service's answer: {}); \
                 no retry changes it",
                resource.setting,
                resource.kind,
                place.region,
                failure.code.as_deref().unwrap_or("no error code")
            ),
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

pub(super) fn no_credentials_fix() -> String {
    "set AWS_PROFILE to a profile with credentials (or `aws configure`), or \
     AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; on ECS and Lambda the task's or function's role \
     provides them"
        .to_owned()
}
