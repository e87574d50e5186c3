//! The region items' port ([`RegionStore`]) and its DynamoDB adapter on the lease table: a
//! consistent read of the region items, a region's heartbeat, and the conditional write that
//! changes an adoption. A conditional write that loses answers `false`; only other failures are
//! errors. Conditions see this region's replica only: what makes the writes safe across regions is
//! the rule in [`super`], not the conditions.

use std::collections::HashMap;
use std::future::Future;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::types::AttributeValue;
use outbox_shared::{Region, SdkFailure};

use super::{
    Adoption, AdoptionChange, RegionError, RegionHeartbeat, RegionView, adoption_key, attr,
    heartbeat_key,
};
use crate::assignment::Millis;

/// Port: the region items of the lease table.
pub trait RegionStore: Send + Sync {
    /// Every region's heartbeat and adoption (a strongly consistent read of this replica).
    fn read(&self) -> impl Future<Output = Result<RegionView, RegionError>> + Send;

    /// Writes `region`'s heartbeat at `at` by `owner` (unconditionally: only its pollers write it).
    fn heartbeat(
        &self,
        region: &Region,
        owner: &str,
        at: Millis,
    ) -> impl Future<Output = Result<(), RegionError>> + Send;

    /// Applies `change` if the adoption is still at the epoch it read (no item, for `None`):
    /// `false` when it is not.
    fn change(
        &self,
        change: &AdoptionChange,
    ) -> impl Future<Output = Result<bool, RegionError>> + Send;
}

/// The calls of [`DynamoRegionStore`] in a running poller: the lease table read, the region's
/// heartbeat put, adoptions changed by conditional updates.
pub const CALLS: &[relay_runtime::permissions::Call] = &[
    relay_runtime::permissions::Call::new(
        "dynamodb:Scan",
        relay_runtime::permissions::Target::LeaseTable,
    ),
    relay_runtime::permissions::Call::new(
        "dynamodb:PutItem",
        relay_runtime::permissions::Target::LeaseTable,
    ),
    relay_runtime::permissions::Call::new(
        "dynamodb:UpdateItem",
        relay_runtime::permissions::Target::LeaseTable,
    ),
];

/// The calls of `adopt-region` and `hand-back-region` (and `status`'s regions): the lease table
/// read, an adoption changed by a conditional update.
pub const OPERATOR_CALLS: &[relay_runtime::permissions::Call] = &[
    relay_runtime::permissions::Call::new(
        "dynamodb:Scan",
        relay_runtime::permissions::Target::LeaseTable,
    ),
    relay_runtime::permissions::Call::new(
        "dynamodb:UpdateItem",
        relay_runtime::permissions::Target::LeaseTable,
    ),
];

/// The region items on DynamoDB, in the lease table.
#[derive(Debug, Clone)]
pub struct DynamoRegionStore {
    client: Client,
    table: String,
}

type Item = HashMap<String, AttributeValue>;

impl DynamoRegionStore {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }

    fn failure<E>(&self, operation: &'static str, err: SdkError<E>) -> RegionError
    where
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        RegionError::Call {
            table: self.table.clone(),
            failure: SdkFailure::new(operation, err),
        }
    }

    fn malformed(&self, key: &str, reason: impl Into<String>) -> RegionError {
        RegionError::Malformed {
            table: self.table.clone(),
            key: key.to_owned(),
            reason: reason.into(),
        }
    }

    fn number(&self, item: &Item, key: &str, name: &str) -> Result<i64, RegionError> {
        match item.get(name) {
            Some(AttributeValue::N(text)) => text
                .parse()
                .map_err(|_| self.malformed(key, format!("{name} is not an integer"))),
            Some(_) => Err(self.malformed(key, format!("{name} is not a number"))),
            None => Err(self.malformed(key, format!("{name} is missing"))),
        }
    }

    fn string(&self, item: &Item, key: &str, name: &str) -> Result<Option<String>, RegionError> {
        match item.get(name) {
            None => Ok(None),
            Some(AttributeValue::S(text)) => Ok(Some(text.clone())),
            Some(_) => Err(self.malformed(key, format!("{name} is not a string"))),
        }
    }

    fn region(&self, key: &str, name: &str) -> Result<Region, RegionError> {
        Region::new(name).map_err(|e| self.malformed(key, e.to_string()))
    }

    fn heartbeat_of(
        &self,
        key: &str,
        name: &str,
        item: &Item,
    ) -> Result<RegionHeartbeat, RegionError> {
        Ok(RegionHeartbeat {
            region: self.region(key, name)?,
            heartbeat_at: self.number(item, key, attr::HEARTBEAT_AT)?,
            owner: self.string(item, key, attr::OWNER)?.unwrap_or_default(),
        })
    }

    fn adoption_of(&self, key: &str, name: &str, item: &Item) -> Result<Adoption, RegionError> {
        let adopter = match self.string(item, key, attr::ADOPTER)? {
            Some(adopter) => Some(self.region(key, &adopter)?),
            None => None,
        };
        let epoch = u64::try_from(self.number(item, key, attr::EPOCH)?)
            .map_err(|_| self.malformed(key, format!("{} is negative", attr::EPOCH)))?;
        Ok(Adoption {
            region: self.region(key, name)?,
            adopter,
            epoch,
            changed_at: self.number(item, key, attr::CHANGED_AT)?,
            by_operator: matches!(
                item.get(attr::BY_OPERATOR),
                Some(AttributeValue::Bool(true))
            ),
        })
    }
}

fn n(value: impl ToString) -> AttributeValue {
    AttributeValue::N(value.to_string())
}

fn s(value: &str) -> AttributeValue {
    AttributeValue::S(value.to_owned())
}

impl RegionStore for DynamoRegionStore {
    async fn read(&self) -> Result<RegionView, RegionError> {
        let mut view = RegionView::default();
        let mut start = None;
        loop {
            // The lease table is small (a lease per partition, a heartbeat per poller, two items
            // per region): one consistent scan, as the lease rounds read it.
            let page = self
                .client
                .scan()
                .table_name(&self.table)
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| self.failure("Scan", e))?;
            for item in page.items() {
                let Some(key) = item.get(attr::LEASE_KEY).and_then(|k| k.as_s().ok()) else {
                    continue;
                };
                if let Some(name) = key.strip_prefix("REGION#") {
                    let beat = self.heartbeat_of(key, name, item)?;
                    view.heartbeats.insert(beat.region.clone(), beat);
                } else if let Some(name) = key.strip_prefix("ADOPTION#") {
                    let adoption = self.adoption_of(key, name, item)?;
                    view.adoptions.insert(adoption.region.clone(), adoption);
                }
            }
            start = page.last_evaluated_key;
            if start.is_none() {
                return Ok(view);
            }
        }
    }

    async fn heartbeat(&self, region: &Region, owner: &str, at: Millis) -> Result<(), RegionError> {
        self.client
            .put_item()
            .table_name(&self.table)
            .item(attr::LEASE_KEY, s(&heartbeat_key(region)))
            .item(attr::HEARTBEAT_AT, n(at))
            .item(attr::OWNER, s(owner))
            .send()
            .await
            .map_err(|e| self.failure("PutItem", e))?;
        Ok(())
    }

    async fn change(&self, change: &AdoptionChange) -> Result<bool, RegionError> {
        let (set_adopter, tail) = match change.adopter {
            Some(_) => (", #adopter = :adopter", ""),
            None => ("", " REMOVE #adopter"),
        };
        let mut update = self
            .client
            .update_item()
            .table_name(&self.table)
            .key(attr::LEASE_KEY, s(&adoption_key(&change.region)))
            .update_expression(format!(
                "SET #epoch = :next, #changed = :at, #operator = :operator{set_adopter}{tail}"
            ))
            .expression_attribute_names("#epoch", attr::EPOCH)
            .expression_attribute_names("#changed", attr::CHANGED_AT)
            .expression_attribute_names("#operator", attr::BY_OPERATOR)
            .expression_attribute_names("#adopter", attr::ADOPTER)
            .expression_attribute_values(":next", n(change.next_epoch()))
            .expression_attribute_values(":at", n(change.at))
            .expression_attribute_values(":operator", AttributeValue::Bool(change.by_operator));
        if let Some(adopter) = &change.adopter {
            update = update.expression_attribute_values(":adopter", s(adopter.as_str()));
        }
        update = match change.expect {
            None => update
                .condition_expression("attribute_not_exists(#key)")
                .expression_attribute_names("#key", attr::LEASE_KEY),
            Some(epoch) => update
                .condition_expression("#epoch = :seen")
                .expression_attribute_values(":seen", n(epoch)),
        };
        match update.send().await {
            Ok(_) => Ok(true),
            Err(err)
                if err
                    .as_service_error()
                    .and_then(ProvideErrorMetadata::code)
                    .is_some_and(|c| c == "ConditionalCheckFailedException") =>
            {
                Ok(false)
            }
            Err(err) => Err(self.failure("UpdateItem", err)),
        }
    }
}
