//! The aggregate holds on the latency model: hold items (`HOLD#…`) as the relays write, read and
//! release them (`relay_runtime::holds`), with the conditions DynamoDB evaluates on them, and the
//! pending checks of the events left under them. Only the requests the hold store makes are
//! modelled, read by which of its placeholders they carry; each answer is what DynamoDB would
//! answer to that request.
//!
//! It keeps what a benchmark of an outage asks of it: the largest hold item written (DynamoDB's
//! size: names and values), the hold items a `Query` returned, the event keys a `BatchGetItem`
//! read, and the holds released.

use std::collections::{BTreeMap, HashMap};

use outbox_shared::schema::{self, attr};
use serde_json::{Value, json};

/// `ConditionalCheckFailedException`, as DynamoDB answers it.
pub(super) const CONDITION_FAILED: &str = r#"{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed"}"#;

/// One hold item.
#[derive(Debug, Clone, Default)]
struct HoldItem {
    ordering_key: String,
    held_since: String,
    /// `GSI1PK`: the hold partition of its last event's partition.
    partition: String,
    /// `GSI1SK`: its last event's sort key.
    sort_key: String,
    last_left: Option<String>,
    left_count: u64,
    ttl: String,
}

impl HoldItem {
    /// Its size as DynamoDB counts it (each name and value; a number about a byte per two
    /// digits, plus one).
    fn size(&self, pk: &str) -> usize {
        let number = |n: &str| n.len().div_ceil(2) + 1;
        let strings = [
            (attr::PK, pk),
            (attr::SK, schema::HOLD_SK),
            (attr::ENTITY_TYPE, schema::entity::AGGREGATE_HOLD),
            (attr::ORDERING_KEY, &self.ordering_key),
            (attr::HELD_SINCE, &self.held_since),
            (attr::GSI1PK, &self.partition),
            (attr::GSI1SK, &self.sort_key),
        ];
        strings
            .iter()
            .map(|(n, v)| n.len() + v.len())
            .sum::<usize>()
            + self
                .last_left
                .as_ref()
                .map_or(0, |l| attr::LAST_LEFT.len() + l.len())
            + attr::LEFT_COUNT.len()
            + number(&self.left_count.to_string())
            + attr::TTL.len()
            + number(&self.ttl)
    }

    /// The item as the index returns it, DynamoDB JSON.
    fn wire(&self, pk: &str) -> Value {
        let mut item = json!({
            attr::PK: {"S": pk},
            attr::SK: {"S": schema::HOLD_SK},
            attr::ENTITY_TYPE: {"S": schema::entity::AGGREGATE_HOLD},
            attr::ORDERING_KEY: {"S": self.ordering_key},
            attr::HELD_SINCE: {"S": self.held_since},
            attr::GSI1PK: {"S": self.partition},
            attr::GSI1SK: {"S": self.sort_key},
            attr::LEFT_COUNT: {"N": self.left_count.to_string()},
            attr::TTL: {"N": self.ttl},
        });
        if let Some(last) = &self.last_left {
            item[attr::LAST_LEFT] = json!({"S": last});
        }
        item
    }
}

/// The hold items, and what was asked of them.
#[derive(Debug, Default)]
pub(super) struct Holds {
    /// By `PK`.
    items: HashMap<String, HoldItem>,
    /// `GSI1PK` -> `GSI1SK` -> `PK`.
    index: HashMap<String, BTreeMap<String, String>>,
    /// The largest hold item written, in bytes.
    pub(super) largest_item: usize,
    /// Hold items `Query`s returned.
    pub(super) items_read: u64,
    /// Event keys `BatchGetItem`s read (the pending checks of last events).
    pub(super) event_keys_read: u64,
    pub(super) released: u64,
}

/// The string (`S`) or number (`N`) value of `placeholder` in `request`.
fn value<'a>(request: &'a Value, placeholder: &str) -> Option<&'a str> {
    let v = &request["ExpressionAttributeValues"][placeholder];
    v["S"].as_str().or_else(|| v["N"].as_str())
}

impl Holds {
    /// Holds now.
    pub(super) fn count(&self) -> usize {
        self.items.len()
    }

    /// Whether `pk` is a hold item's key.
    pub(super) fn is_hold(pk: &str) -> bool {
        pk.starts_with("HOLD#")
    }

    fn unindex(&mut self, hold: &HoldItem) {
        if let Some(partition) = self.index.get_mut(&hold.partition) {
            partition.remove(&hold.sort_key);
        }
    }

    fn reindex(&mut self, pk: &str) {
        let hold = &self.items[pk];
        if !hold.partition.is_empty() {
            self.index
                .entry(hold.partition.clone())
                .or_default()
                .insert(hold.sort_key.clone(), pk.to_owned());
        }
    }

    /// An `UpdateItem` of the hold `pk`: its status and body.
    pub(super) fn update(&mut self, pk: &str, request: &Value) -> (u16, String) {
        let condition = request["ConditionExpression"].as_str().unwrap_or_default();
        let existing = self.items.get(pk).cloned();
        if condition.contains("attribute_exists") && existing.is_none() {
            return (400, CONDITION_FAILED.to_owned());
        }
        let sort_key = value(request, ":sk");
        if let (Some(sort_key), Some(hold)) = (sort_key, &existing) {
            // The hold follows a later event only: its sort key must be below the new one.
            let follows = hold.sort_key.is_empty()
                || hold.partition == schema::LEGACY_HOLD_PARTITION
                || hold.sort_key.as_str() < sort_key;
            if !follows {
                return (400, CONDITION_FAILED.to_owned());
            }
        }
        let Some(updates) = request["UpdateExpression"].as_str() else {
            // A condition only: whether the hold exists.
            return (200, "{}".to_owned());
        };
        let mut hold = existing.unwrap_or_default();
        if let Some(previous) = self.items.get(pk).cloned() {
            self.unindex(&previous);
        }
        if let Some(okey) = value(request, ":okey") {
            hold.ordering_key = okey.to_owned();
        }
        if let Some(since) = value(request, ":since")
            && hold.held_since.is_empty()
        {
            hold.held_since = since.to_owned();
        }
        if let Some(sort_key) = sort_key {
            hold.sort_key = sort_key.to_owned();
            hold.partition = value(request, ":gsi1pk").unwrap_or_default().to_owned();
            hold.last_left = value(request, ":last").map(str::to_owned);
        }
        if updates.contains("ADD")
            && let Some(count) = value(request, ":count").and_then(|n| n.parse::<u64>().ok())
        {
            hold.left_count += count;
        }
        if let Some(ttl) = value(request, ":ttl") {
            hold.ttl = ttl.to_owned();
        }
        self.largest_item = self.largest_item.max(hold.size(pk));
        self.items.insert(pk.to_owned(), hold);
        self.reindex(pk);
        (200, "{}".to_owned())
    }

    /// A `DeleteItem` of the hold `pk` (a release): its status and body.
    pub(super) fn delete(&mut self, pk: &str, request: &Value) -> (u16, String) {
        let Some(hold) = self.items.get(pk) else {
            return (400, CONDITION_FAILED.to_owned());
        };
        let since = value(request, ":since");
        let count = value(request, ":count").and_then(|n| n.parse::<u64>().ok());
        if since != Some(hold.held_since.as_str()) || count != Some(hold.left_count) {
            return (400, CONDITION_FAILED.to_owned());
        }
        let hold = self.items.remove(pk).expect("present");
        self.unindex(&hold);
        self.released += 1;
        (200, "{}".to_owned())
    }

    /// A hold read by key (`BatchGetItem` of the stream relay), if it exists.
    pub(super) fn get(&self, pk: &str) -> Option<Value> {
        self.items.get(pk).map(|hold| {
            json!({
                attr::PK: {"S": pk},
                attr::SK: {"S": schema::HOLD_SK},
                attr::ORDERING_KEY: {"S": hold.ordering_key},
            })
        })
    }

    /// A `Query` of the hold partition `partition`: the body.
    pub(super) fn query(&mut self, partition: &str, request: &Value) -> String {
        let before = value(request, ":before");
        let after = request["ExclusiveStartKey"][attr::GSI1SK]["S"].as_str();
        let limit = request["Limit"]
            .as_u64()
            .and_then(|l| usize::try_from(l).ok())
            .unwrap_or(usize::MAX);
        let Some(holds) = self.index.get(partition) else {
            return r#"{"Items":[],"Count":0,"ScannedCount":0}"#.to_owned();
        };
        let lower = after.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        let mut in_range = holds
            .range::<str, _>((lower, std::ops::Bound::Unbounded))
            .take_while(|(sort_key, _)| before.is_none_or(|b| sort_key.as_str() < b))
            .peekable();
        let mut items = Vec::new();
        let mut last = None;
        while items.len() < limit {
            let Some((sort_key, pk)) = in_range.next() else {
                break;
            };
            items.push(self.items[pk].wire(pk));
            last = Some((sort_key.clone(), pk.clone()));
        }
        let more = in_range.peek().is_some();
        self.items_read += items.len() as u64;
        let mut body = json!({"Items": items, "Count": items.len(), "ScannedCount": items.len()});
        if let (true, Some((sort_key, pk))) = (more, last) {
            body["LastEvaluatedKey"] = json!({
                attr::PK: {"S": pk},
                attr::SK: {"S": schema::HOLD_SK},
                attr::GSI1PK: {"S": partition},
                attr::GSI1SK: {"S": sort_key},
            });
        }
        body.to_string()
    }
}
