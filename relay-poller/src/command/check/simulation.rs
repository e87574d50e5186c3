//! What the principal may do: the poller's calls (`crate::permissions`), each on the ARN the
//! probes found, as `iam:SimulatePrincipalPolicy` evaluates the principal's policies.

use std::collections::BTreeMap;

use aws_config::SdkConfig;
use outbox_shared::{SdkFailure, arn};

use super::item::Item;

/// The ARNs found, for the permissions' simulation.
#[derive(Debug, Default)]
pub(super) struct Arns {
    pub(super) table: Option<String>,
    pub(super) lease_table: Option<String>,
    pub(super) target: Option<String>,
    pub(super) queue: Option<String>,
    pub(super) bucket: Option<String>,
    pub(super) payload_bucket: Option<String>,
}

impl Arns {
    /// The ARN IAM evaluates a call on `target` against, if it is known; the buckets' in
    /// `partition` (the region's: their ARNs carry no region to take it from).
    pub(super) fn of(
        &self,
        target: relay_runtime::permissions::Target,
        index: &str,
        partition: &str,
    ) -> Option<String> {
        use relay_runtime::permissions::Target as T;
        match target {
            T::OutboxTable
            | T::OutboxStatus
            | T::HoldItems
            | T::OutboxAttributes
            | T::RecreatedItems
            | T::PendingCheck => self.table.clone(),
            T::OutboxIndex => self.table.as_ref().map(|t| format!("{t}/index/{index}")),
            T::LeaseTable => self.lease_table.clone(),
            T::EventTarget => self.target.clone(),
            T::DeadLetterQueue => self.queue.clone(),
            T::DiscardedBatchBucket => self.bucket.as_ref().map(|b| arn::bucket(partition, b)),
            T::DiscardedBatchObjects => self
                .bucket
                .as_ref()
                .map(|b| arn::objects(partition, b, relay_runtime::discarded_batch::KEY_PREFIX)),
            T::PayloadBucket => self
                .payload_bucket
                .as_ref()
                .map(|b| arn::bucket(partition, b)),
            T::PayloadObjects => self
                .payload_bucket
                .as_ref()
                .map(|b| arn::objects(partition, b, outbox_shared::claim_check::KEY_PREFIX)),
            T::DeadLetterRecords => self
                .payload_bucket
                .as_ref()
                .map(|b| arn::objects(partition, b, relay_runtime::dead_letter::RECORD_PREFIX)),
        }
    }
}

/// Whether the principal (the caller by default) may make the poller's calls, as
/// `iam:SimulatePrincipalPolicy` evaluates its policies; skipped, with a note, when the caller
/// may not simulate (or the endpoint does not offer it).
pub(super) async fn permissions(
    sdk: &SdkConfig,
    principal: Option<&str>,
    target_kind: relay_runtime::TargetKind,
    arns: &Arns,
    index_name: &str,
) -> Item {
    const ITEM: &str = "permissions";
    let principal = match principal {
        Some(principal) => principal.to_owned(),
        None => match aws_sdk_sts::Client::new(sdk)
            .get_caller_identity()
            .send()
            .await
        {
            Ok(identity) => role_of(identity.arn().unwrap_or_default()),
            Err(err) => {
                return Item::skipped(
                    ITEM,
                    format!(
                        "the caller is unknown: {}",
                        SdkFailure::new("GetCallerIdentity", err)
                    ),
                );
            }
        },
    };
    let partition = arn::partition(sdk.region().map_or("", |r| r.as_ref()));
    let mut by_resource: BTreeMap<String, Vec<&'static str>> = BTreeMap::new();
    let mut unknown = Vec::new();
    for call in crate::permissions::service(target_kind) {
        match arns.of(call.on, index_name, partition) {
            Some(arn) => by_resource.entry(arn).or_default().push(call.action),
            None => unknown.push(call.action),
        }
    }
    let iam = aws_sdk_iam::Client::new(sdk);
    let mut denied = Vec::new();
    for (resource, actions) in &by_resource {
        let answer = iam
            .simulate_principal_policy()
            .policy_source_arn(&principal)
            .set_action_names(Some(actions.iter().map(|a| (*a).to_owned()).collect()))
            .resource_arns(resource)
            .send()
            .await;
        match answer {
            Ok(out) => denied.extend(
                out.evaluation_results()
                    .iter()
                    .filter(|r| r.eval_decision().as_str() != "allowed")
                    .map(|r| format!("{} on {resource}", r.eval_action_name())),
            ),
            Err(err) => {
                let failure = SdkFailure::new("SimulatePrincipalPolicy", err);
                return Item::skipped(
                    ITEM,
                    format!(
                        "not simulated for {principal}: iam:SimulatePrincipalPolicy answered {} \
                         (allow it to the caller to have the poller's calls checked)",
                        failure.code.as_deref().unwrap_or(&failure.message)
                    ),
                );
            }
        }
    }
    if denied.is_empty() {
        Item::ok(
            ITEM,
            format!(
                "{principal} may make the poller's {} calls{}",
                by_resource.values().map(Vec::len).sum::<usize>(),
                if unknown.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (not simulated, their resource unknown: {})",
                        unknown.join(", ")
                    )
                }
            ),
        )
    } else {
        Item::fail(
            ITEM,
            format!("{principal} may not: {}", denied.join("; ")),
            "grant them as infra/template.yaml's PollerTaskRole does (relay_poller::permissions)",
        )
    }
}

/// The IAM principal of an STS caller ARN: an assumed role's session is simulated as its role.
pub(super) fn role_of(caller: &str) -> String {
    match caller.split_once(":assumed-role/") {
        Some((head, rest)) => {
            let role = rest.split('/').next().unwrap_or(rest);
            format!("{}:role/{role}", head.replacen(":sts:", ":iam:", 1))
        }
        None => caller.to_owned(),
    }
}
