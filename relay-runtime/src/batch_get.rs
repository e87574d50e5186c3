//! Strongly consistent `BatchGetItem` reads of one table, by key, with DynamoDB's unprocessed keys
//! asked again: what the relays read when the eventually consistent index will not do (whether an
//! aggregate is held, whether the events left under a hold are still pending).

use std::collections::HashMap;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use outbox_shared::SdkFailure;

use crate::projection::Projection;

/// An item as DynamoDB returns it.
pub type Item = HashMap<String, AttributeValue>;

/// Keys one `BatchGetItem` may ask for (DynamoDB's limit).
pub const BATCH_GET_MAX_KEYS: usize = 100;
/// `BatchGetItem` rounds for unprocessed keys before giving up (the SDK already retried each
/// call; a key still unprocessed after this many rounds is a failure, never a "not found").
pub const BATCH_GET_MAX_ROUNDS: u32 = 5;

/// The items of `table` under `keys` that exist, read strongly consistent, `BATCH_GET_MAX_KEYS`
/// to a call, with only the attributes `projection` names (never a whole item: a role may read
/// only those, [`crate::projection`]). `what` names the keys in the error when some stay
/// unprocessed after [`BATCH_GET_MAX_ROUNDS`] rounds.
///
/// # Errors
/// [`SdkFailure`] when a call fails, or keys stay unprocessed.
///
/// # Panics
/// When `projection` is empty.
pub async fn consistent_items(
    client: &Client,
    table: &str,
    keys: Vec<Item>,
    projection: &[&str],
    what: &'static str,
) -> Result<Vec<Item>, SdkFailure> {
    let projection = Projection::of(projection);
    let mut items = Vec::new();
    for chunk in keys.chunks(BATCH_GET_MAX_KEYS) {
        let mut request = KeysAndAttributes::builder()
            .set_keys(Some(chunk.to_vec()))
            .consistent_read(true)
            .projection_expression(&projection.expression);
        for (placeholder, name) in &projection.names {
            request = request.expression_attribute_names(placeholder, name);
        }
        let mut request = Some(request.build().expect("keys are set"));
        let mut rounds = 0;
        while let Some(keys) = request.take() {
            rounds += 1;
            let mut output = client
                .batch_get_item()
                .request_items(table, keys)
                .send()
                .await
                .map_err(|e| SdkFailure::new("BatchGetItem", e))?;
            items.extend(
                output
                    .responses
                    .as_mut()
                    .and_then(|r| r.remove(table))
                    .into_iter()
                    .flatten(),
            );
            request = output
                .unprocessed_keys
                .and_then(|mut u| u.remove(table))
                .filter(|k| !k.keys().is_empty());
            if request.is_some() && rounds >= BATCH_GET_MAX_ROUNDS {
                return Err(SdkFailure::incomplete("BatchGetItem", what));
            }
        }
    }
    Ok(items)
}
