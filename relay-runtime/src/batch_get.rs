//! Strongly consistent `BatchGetItem` reads of one table, by key, with DynamoDB's unprocessed keys
//! asked again after a backoff: what the relays read when the eventually consistent index will
//! not do (whether an aggregate is held, whether the last event left under a hold is still
//! pending).
//!
//! DynamoDB answers a `BatchGetItem` it could only partly serve (throttling, a response over
//! 16 MB) with the rest as `UnprocessedKeys`, and AWS says to ask for them again with exponential
//! backoff: asked again at once, they meet the same throttling. The SDK's own retries do not see
//! them (the call succeeded), so this module backs off with the project's full jitter
//! ([`UNPROCESSED_KEYS_RETRY`]) between rounds. A caller under a deadline bounds the whole read
//! with it (`Deadline::finish`).

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_dynamodb::Client;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes};
use outbox_shared::{RetryPolicy, SdkFailure};

use crate::projection::Projection;

/// An item as DynamoDB returns it.
pub type Item = HashMap<String, AttributeValue>;

/// Keys one `BatchGetItem` may ask for (DynamoDB's limit).
pub const BATCH_GET_MAX_KEYS: usize = 100;

/// The rounds after the first for keys DynamoDB left unprocessed, and the full-jitter backoff
/// before each (from 50 ms, doubling, capped at 1 s: at most about 2.6 s in all). A key still
/// unprocessed after them is a failure, never a "not found".
pub const UNPROCESSED_KEYS_RETRY: RetryPolicy = RetryPolicy {
    max_retries: 6,
    base_delay: Duration::from_millis(50),
    max_delay: Duration::from_secs(1),
};

/// The items of `table` under `keys` that exist, read strongly consistent, `BATCH_GET_MAX_KEYS`
/// to a call, with only the attributes `projection` names (never a whole item: a role may read
/// only those, [`crate::projection`]). `what` names the keys in the error when some stay
/// unprocessed after [`UNPROCESSED_KEYS_RETRY`]'s rounds.
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
        let mut backoff = UNPROCESSED_KEYS_RETRY.delays();
        while let Some(keys) = request.take() {
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
            if request.is_some() {
                let Some(delay) = backoff.next() else {
                    return Err(SdkFailure::incomplete("BatchGetItem", what));
                };
                tokio::time::sleep(delay).await;
            }
        }
    }
    Ok(items)
}

#[cfg(test)]
mod tests {
    use aws_sdk_dynamodb::operation::batch_get_item::BatchGetItemOutput;
    use aws_smithy_mocks::{Rule, mock};

    use super::*;

    fn key(pk: &str) -> Item {
        HashMap::from([
            ("PK".to_owned(), AttributeValue::S(pk.to_owned())),
            ("SK".to_owned(), AttributeValue::S("HOLD".to_owned())),
        ])
    }

    /// A `BatchGetItem` answered with every key asked for left unprocessed, nothing read.
    fn throttled() -> Rule {
        mock!(Client::batch_get_item).then_output(|| {
            BatchGetItemOutput::builder()
                .unprocessed_keys(
                    "t",
                    KeysAndAttributes::builder()
                        .keys(key("HOLD#a"))
                        .build()
                        .unwrap(),
                )
                .build()
        })
    }

    /// A `BatchGetItem` answered with the item of `HOLD#a`.
    fn served() -> Rule {
        mock!(Client::batch_get_item).then_output(|| {
            BatchGetItemOutput::builder()
                .responses("t", vec![key("HOLD#a")])
                .build()
        })
    }

    async fn read(rules: &[&Rule]) -> Result<Vec<Item>, SdkFailure> {
        let client = Client::from_conf(crate::mocked_dynamodb(rules).build());
        consistent_items(&client, "t", vec![key("HOLD#a")], &["PK"], "hold keys").await
    }

    #[tokio::test(start_paused = true)]
    async fn unprocessed_keys_are_asked_again_after_a_backoff_until_they_are_read() {
        // Given a table that throttles the read of a key six times running, then serves it
        let throttles: Vec<Rule> = (0..6).map(|_| throttled()).collect();
        let served = served();
        let mut rules: Vec<&Rule> = throttles.iter().collect();
        rules.push(&served);
        let started = tokio::time::Instant::now();

        // When the key is read
        let items = read(&rules).await.unwrap();

        // Then it is read at the seventh call, after backing off between calls (full jitter:
        // somewhere between nothing and the schedule's sum, 2.55 s)
        assert_eq!(items, [key("HOLD#a")]);
        assert_eq!(served.num_calls(), 1);
        let waited = started.elapsed();
        assert!(waited > Duration::ZERO, "no backoff");
        assert!(waited <= Duration::from_millis(2_550), "waited {waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn keys_still_unprocessed_after_every_round_are_a_failure_not_a_miss() {
        // Given a table that throttles the read of a key on every call
        let throttles: Vec<Rule> = (0..7).map(|_| throttled()).collect();
        let rules: Vec<&Rule> = throttles.iter().collect();

        // When the key is read
        let failure = read(&rules).await.unwrap_err();

        // Then the read fails, naming the keys, after the first call and six more
        assert!(failure.to_string().contains("hold keys"), "{failure}");
        assert_eq!(throttles.iter().map(Rule::num_calls).sum::<usize>(), 7);
    }
}
