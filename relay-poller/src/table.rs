//! Reads of outbox items, for the operator commands: each names the attributes it reads, an
//! outbox item's ([`outbox_shared::schema::OUTBOX_ATTRIBUTES`]), the only ones the operator's role
//! may read of the table (a scan of the table meets orders too, whose own attributes it must not
//! read).

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;
use outbox_shared::schema::{OUTBOX_ATTRIBUTES, attr};
use outbox_shared::{ItemKey, SdkFailure};
use relay_runtime::projection::Projection;

/// An item's attributes, as DynamoDB takes them.
pub type Attributes = HashMap<String, AttributeValue>;

/// The projection of every read of the table by the operator commands: an outbox item's
/// attributes.
pub fn outbox_projection() -> Projection {
    Projection::of(OUTBOX_ATTRIBUTES)
}

/// The outbox attributes of the item at `key` (a strongly consistent read), if there is one.
///
/// # Errors
/// When the read fails.
pub async fn get_item(
    client: &aws_sdk_dynamodb::Client,
    table_name: &str,
    key: &ItemKey,
) -> Result<Option<Attributes>, SdkFailure> {
    let projection = outbox_projection();
    let mut request = client
        .get_item()
        .table_name(table_name)
        .key(attr::PK, AttributeValue::S(key.pk.clone()))
        .key(attr::SK, AttributeValue::S(key.sk.clone()))
        .consistent_read(true)
        .projection_expression(projection.expression);
    for (placeholder, name) in projection.names {
        request = request.expression_attribute_names(placeholder, name);
    }
    Ok(request
        .send()
        .await
        .map_err(|e| SdkFailure::new("GetItem", e))?
        .item)
}
