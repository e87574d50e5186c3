//! The items read from AWS one resource at a time, through the start-up probes of
//! [`relay_runtime::probe`] where a relay has one, so a resource is described one way; each
//! ARN found is kept for the permissions' simulation.

use aws_config::SdkConfig;
use aws_sdk_dynamodb::types::KeySchemaElement;
use outbox_shared::SdkFailure;
use relay_runtime::probe::{self, Kind, Probed, Resource};
use relay_runtime::{PublisherConfig, SettingError};

use super::item::Item;
use super::simulation::Arns;
use crate::config::{LeaseTableArgs, RelayArgs};

pub(super) async fn ttl(sdk: &SdkConfig, table_name: &str) -> Item {
    let client = relay_runtime::clients::dynamodb(sdk);
    match client
        .describe_time_to_live()
        .table_name(table_name)
        .send()
        .await
    {
        Ok(out) => {
            let description = out.time_to_live_description();
            Item::ttl(
                table_name,
                description.and_then(|d| d.time_to_live_status()),
                description.and_then(|d| d.attribute_name()),
            )
        }
        Err(err) => Item::unknown("ttl", &SdkFailure::new("DescribeTimeToLive", err)),
    }
}

/// The target, described as its kind is ([`probe::target`]).
pub(super) async fn target(sdk: &SdkConfig, publisher: &PublisherConfig, arns: &mut Arns) -> Item {
    let resource = probe::target_resource(publisher);
    let what = resource.kind;
    match probe::target(sdk, publisher.target_kind, &resource).await {
        Err(unusable) => Item::unusable("target", &unusable),
        Ok(Probed::Unknown(failure)) => Item::unknown("target", &failure),
        Ok(Probed::Found(described)) => {
            arns.target = Some(described.arn.clone());
            match described.state.as_deref() {
                Some(state) if state != "ACTIVE" => Item::fail(
                    "target",
                    format!(
                        "{} {what} {}: {state}, not ACTIVE: it refuses what the relays send",
                        described.kind, described.arn
                    ),
                    format!("wait for the stack to finish, or re-create the {what}"),
                ),
                _ => Item::ok(
                    "target",
                    format!(
                        "{} {what} {}{}{}; {}",
                        described.kind,
                        described.arn,
                        described
                            .state
                            .as_ref()
                            .map(|s| format!(", {s}"))
                            .unwrap_or_default(),
                        publisher.target_kind.order(&publisher.target),
                        entry_budget(publisher, what, described.max_entry_bytes)
                    ),
                ),
            }
        }
    }
}

/// The entry budget the relays go by, in words: the smaller of the entry setting and the
/// target's own limit (`limit`, read from the target), and what happens to a larger event.
pub(super) fn entry_budget(
    publisher: &PublisherConfig,
    what: Kind,
    limit: Option<usize>,
) -> String {
    let setting = SettingError::name_of::<relay_runtime::PublisherArgs>("max_entry_bytes");
    let budget = publisher.clone().within_target_limit(limit).max_entry_bytes;
    let whose = match limit {
        Some(limit) if limit < publisher.max_entry_bytes => format!(
            "the {what}'s own limit, below {setting} {}",
            publisher.max_entry_bytes
        ),
        Some(limit) => format!("{setting}; the {what} takes {limit}"),
        None => setting,
    };
    let larger = if publisher.payload_bucket.is_some() {
        "a larger event goes through the payload bucket"
    } else {
        "a larger event is dead-lettered"
    };
    format!("entry budget {budget} bytes ({whose}): {larger}")
}

pub(super) async fn dead_letter_queue(sdk: &SdkConfig, url: &str, arns: &mut Arns) -> Item {
    let resource = Resource::new(
        Kind::DeadLetterQueue,
        url,
        SettingError::name_of::<RelayArgs>("dead_letter_queue_url"),
    );
    match probe::queue(sdk, &resource).await {
        Err(unusable) => Item::unusable("dead-letter queue", &unusable),
        Ok(Probed::Unknown(failure)) => Item::unknown("dead-letter queue", &failure),
        Ok(Probed::Found(queue)) => {
            arns.queue = Some(queue.arn.clone());
            Item::dead_letter_queue(url, queue.maximum_message_size)
        }
    }
}

pub(super) async fn lease_table(sdk: &SdkConfig, name: &str, arns: &mut Arns) -> Item {
    let resource = Resource::new(
        Kind::LeaseTable,
        name,
        SettingError::name_of::<LeaseTableArgs>("lease_table"),
    );
    match probe::table(sdk, &resource).await {
        Err(unusable) => Item::unusable("lease table", &unusable),
        Ok(Probed::Unknown(failure)) => Item::unknown("lease table", &failure),
        Ok(Probed::Found(table)) => {
            arns.lease_table = table.table_arn().map(str::to_owned);
            let key = crate::assignment::lease::attr::LEASE_KEY;
            let keys: Vec<&str> = table
                .key_schema()
                .iter()
                .map(KeySchemaElement::attribute_name)
                .collect();
            if keys == [key] {
                Item::ok("lease table", format!("{name}: key {key} (HASH)"))
            } else {
                Item::fail(
                    "lease table",
                    format!("{name}: keys {}, not {key}", keys.join(", ")),
                    "create it as infra/template.yaml declares LeaseTable (locally, `run \
                     --create-lease-table` creates one)",
                )
            }
        }
    }
}

/// The bucket `resource` names, checked as `item`, whatever it is for: the one check of a bucket.
pub(super) async fn bucket(sdk: &SdkConfig, item: &'static str, resource: &Resource) -> Item {
    match probe::bucket(sdk, resource).await {
        Err(unusable) => Item::unusable(item, &unusable),
        Ok(Probed::Unknown(failure)) => Item::unknown(item, &failure),
        Ok(Probed::Found(())) => Item::ok(item, format!("{}: exists", resource.name)),
    }
}
