//! A region's adoption as the stream relay reads it: the port ([`RegionAdoption`]) and its
//! DynamoDB adapter on the poller fleet's lease table ([`DynamoRegionAdoption`]).
//!
//! On a global table, another region's pollers *adopt* a region whose relays stopped and publish
//! its events until they hand it back (docs/global-tables.md, "Failover and hand-back"); the
//! item `ADOPTION#{region}` of the lease table names the adopter. The pollers write and read the
//! region items (relay-poller's `failover`); the stream relay only reads its own region's
//! adoption, once a batch, and while another region publishes its events leaves them to that
//! region's pollers.

use std::future::Future;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::AttributeValue;
use outbox_shared::region::lease_item;
use outbox_shared::{Region, SdkFailure};

use crate::permissions::{Call, Target};

/// Port: who publishes a region's events on a global table.
pub trait RegionAdoption: Send + Sync {
    /// The region publishing `region`'s events in its place, by this region's replica of the
    /// lease table (a strongly consistent read): `None` while `region` publishes its own.
    fn adopter_of(
        &self,
        region: &Region,
    ) -> impl Future<Output = Result<Option<Region>, AdoptionError>> + Send;
}

/// A borrowed reader is one (a test keeps its fake to inspect it).
impl<A: RegionAdoption> RegionAdoption for &A {
    fn adopter_of(
        &self,
        region: &Region,
    ) -> impl Future<Output = Result<Option<Region>, AdoptionError>> + Send {
        (**self).adopter_of(region)
    }
}

/// The reader of a relay on a single-region table: no region is ever adopted. It is never read
/// (the relay reads an adoption only on a global table); it names the type of a relay without one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SingleRegion;

impl RegionAdoption for SingleRegion {
    async fn adopter_of(&self, _region: &Region) -> Result<Option<Region>, AdoptionError> {
        Ok(None)
    }
}

/// A relay with no reader (`None`: no lease table, a single-region table's relay) reads every
/// region as its own. The stream relay's settings require a lease table on a global table.
impl<A: RegionAdoption> RegionAdoption for Option<A> {
    async fn adopter_of(&self, region: &Region) -> Result<Option<Region>, AdoptionError> {
        match self {
            Some(reader) => reader.adopter_of(region).await,
            None => Ok(None),
        }
    }
}

/// A read of a region's adoption that failed, or an item that is not one.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AdoptionError {
    /// The call failed (after the SDK's retries), or was not answered by the deadline.
    #[error("reading {key} from the lease table failed")]
    Call {
        key: String,
        #[source]
        failure: SdkFailure,
    },
    /// An item the pollers did not write, or wrote with another version of it.
    #[error("lease table {table}: item {key} is malformed: {reason}")]
    Malformed {
        table: String,
        key: String,
        reason: String,
    },
}

/// The calls of [`DynamoRegionAdoption`]: one region item read.
pub const CALLS: &[Call] = &[Call::new("dynamodb:GetItem", Target::LeaseTable)];

/// The adoptions on DynamoDB, in the poller fleet's lease table.
#[derive(Debug, Clone)]
pub struct DynamoRegionAdoption {
    client: Client,
    table: String,
}

impl DynamoRegionAdoption {
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

impl RegionAdoption for DynamoRegionAdoption {
    async fn adopter_of(&self, region: &Region) -> Result<Option<Region>, AdoptionError> {
        let key = lease_item::adoption_key(region);
        let item = self
            .client
            .get_item()
            .table_name(&self.table)
            .key(lease_item::LEASE_KEY, AttributeValue::S(key.clone()))
            .projection_expression("#adopter")
            .expression_attribute_names("#adopter", lease_item::ADOPTER)
            .consistent_read(true)
            .send()
            .await
            .map_err(|err| AdoptionError::Call {
                key: key.clone(),
                failure: SdkFailure::new("GetItem", err),
            })?;
        let malformed = |reason: String| AdoptionError::Malformed {
            table: self.table.clone(),
            key: key.clone(),
            reason,
        };
        match item.item().and_then(|item| item.get(lease_item::ADOPTER)) {
            // No item yet (never adopted), or no adopter (handed back): the region's own.
            None => Ok(None),
            Some(AttributeValue::S(name)) => Region::new(name.as_str())
                .map(Some)
                .map_err(|e| malformed(e.to_string())),
            Some(_) => Err(malformed(format!(
                "{} is not a string",
                lease_item::ADOPTER
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::operation::get_item::GetItemOutput;
    use aws_smithy_mocks::mock;

    fn r(name: &str) -> Region {
        Region::new(name).unwrap()
    }

    fn reader(rules: &[&aws_smithy_mocks::Rule]) -> DynamoRegionAdoption {
        let client = Client::from_conf(crate::mocked_dynamodb(rules).build());
        DynamoRegionAdoption::new(client, "leases")
    }

    fn answer(adopter: Option<AttributeValue>) -> GetItemOutput {
        let mut item = std::collections::HashMap::from([(
            lease_item::LEASE_KEY.to_owned(),
            AttributeValue::S("ADOPTION#eu-west-1".to_owned()),
        )]);
        item.extend(adopter.map(|a| (lease_item::ADOPTER.to_owned(), a)));
        GetItemOutput::builder().set_item(Some(item)).build()
    }

    #[tokio::test]
    async fn a_region_is_its_own_until_its_adoption_names_another() {
        // Given the item read consistently by its key
        let asks_for_the_item = |req: &aws_sdk_dynamodb::operation::get_item::GetItemInput| {
            req.consistent_read() == Some(true)
                && req.key().and_then(|k| k.get(lease_item::LEASE_KEY))
                    == Some(&AttributeValue::S("ADOPTION#eu-west-1".to_owned()))
        };
        let no_item = mock!(Client::get_item)
            .match_requests(asks_for_the_item)
            .then_output(|| GetItemOutput::builder().build());
        let handed_back = mock!(Client::get_item).then_output(|| answer(None));
        let adopted = mock!(Client::get_item)
            .then_output(|| answer(Some(AttributeValue::S("us-east-1".to_owned()))));
        let reader = reader(&[&no_item, &handed_back, &adopted]);
        let eu = r("eu-west-1");
        assert_eq!(reader.adopter_of(&eu).await.unwrap(), None, "no item yet");
        assert_eq!(reader.adopter_of(&eu).await.unwrap(), None, "handed back");
        assert_eq!(
            reader.adopter_of(&eu).await.unwrap(),
            Some(r("us-east-1")),
            "adopted"
        );
    }

    #[tokio::test]
    async fn an_adopter_that_is_no_region_is_an_error_naming_the_item() {
        let bad = mock!(Client::get_item)
            .then_output(|| answer(Some(AttributeValue::S("US EAST".to_owned()))));
        let number =
            mock!(Client::get_item).then_output(|| answer(Some(AttributeValue::N("1".to_owned()))));
        let reader = reader(&[&bad, &number]);
        let eu = r("eu-west-1");
        let err = reader.adopter_of(&eu).await.unwrap_err().to_string();
        assert!(
            err.starts_with(
                "lease table leases: item ADOPTION#eu-west-1 is malformed: \"US EAST\""
            ),
            "{err}"
        );
        let err = reader.adopter_of(&eu).await.unwrap_err().to_string();
        assert_eq!(
            err,
            "lease table leases: item ADOPTION#eu-west-1 is malformed: Adopter is not a string"
        );
    }
}
