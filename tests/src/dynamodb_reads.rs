//! What a DynamoDB read asks for, as IAM's condition keys see it: the table and index it reads,
//! the attributes it names (`dynamodb:Attributes`: its projection's, its key's, its filter's and
//! key condition's), its `dynamodb:Select` (given, or what DynamoDB takes without one:
//! `SPECIFIC_ATTRIBUTES` for a read with a projection, else `ALL_ATTRIBUTES`, or
//! `ALL_PROJECTED_ATTRIBUTES` on an index), and the partition keys it reads by
//! (`dynamodb:LeadingKeys`, for reads by key). The fault proxy records every read through it
//! ([`crate::fault_proxy::FaultProxy::reads`]), so a test holds each to what the caller's role
//! allows: the emulators evaluate no IAM.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

/// One read of one table, from a request's JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    /// The operation (`GetItem`, `BatchGetItem`, `Query`, `Scan`).
    pub operation: String,
    pub table: String,
    pub index: Option<String>,
    /// Every attribute name the request names, placeholders resolved.
    pub attributes: BTreeSet<String>,
    /// `dynamodb:Select`: the request's `Select`, or what DynamoDB takes without one.
    pub select: String,
    /// The partition key values of a read by key (`GetItem`, `BatchGetItem`); `None` for a
    /// `Query` or a `Scan`.
    pub leading_keys: Option<Vec<String>>,
}

/// The reads of one call (`X-Amz-Target` `target`, JSON `body`): none for a call that is not a
/// read of items (or whose body does not parse), one per table of a `BatchGetItem`.
pub fn reads_of(target: &str, body: &[u8]) -> Vec<Read> {
    let Some(operation) = target.strip_prefix("DynamoDB_20120810.") else {
        return Vec::new();
    };
    let Ok(request) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    match operation {
        "GetItem" => vec![by_key(operation, &request, &request, &[&request["Key"]])],
        "BatchGetItem" => request["RequestItems"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(table, keys_and_attributes)| {
                let keys: Vec<&Value> = keys_and_attributes["Keys"]
                    .as_array()
                    .map(|keys| keys.iter().collect())
                    .unwrap_or_default();
                let mut read = by_key(operation, &request, keys_and_attributes, &keys);
                table.clone_into(&mut read.table);
                read
            })
            .collect(),
        "Query" | "Scan" => {
            let names = request["ExpressionAttributeNames"].as_object();
            let mut attributes = projected(&request, names);
            for expression in ["FilterExpression", "KeyConditionExpression"] {
                if let Some(text) = request[expression].as_str() {
                    attributes.extend(expression_attributes(text, names));
                }
            }
            let index = request["IndexName"].as_str().map(str::to_owned);
            let select = request["Select"]
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| {
                    if has_projection(&request) {
                        "SPECIFIC_ATTRIBUTES"
                    } else if index.is_some() {
                        "ALL_PROJECTED_ATTRIBUTES"
                    } else {
                        "ALL_ATTRIBUTES"
                    }
                    .to_owned()
                });
            vec![Read {
                operation: operation.to_owned(),
                table: request["TableName"].as_str().unwrap_or_default().to_owned(),
                index,
                attributes,
                select,
                leading_keys: None,
            }]
        }
        _ => Vec::new(),
    }
}

/// A read by `keys` (each an item's key) of what `spec` asks for (`GetItem`'s request itself, or
/// a `BatchGetItem` table's `KeysAndAttributes`).
fn by_key(operation: &str, request: &Value, spec: &Value, keys: &[&Value]) -> Read {
    let names = spec["ExpressionAttributeNames"].as_object();
    let mut attributes = projected(spec, names);
    for key in keys {
        attributes.extend(
            key.as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k.clone()),
        );
    }
    Read {
        operation: operation.to_owned(),
        table: request["TableName"].as_str().unwrap_or_default().to_owned(),
        index: None,
        attributes,
        select: if has_projection(spec) {
            "SPECIFIC_ATTRIBUTES"
        } else {
            "ALL_ATTRIBUTES"
        }
        .to_owned(),
        leading_keys: Some(
            keys.iter()
                .filter_map(|key| key["PK"]["S"].as_str().map(str::to_owned))
                .collect(),
        ),
    }
}

fn has_projection(spec: &Value) -> bool {
    spec["ProjectionExpression"].is_string() || spec["AttributesToGet"].is_array()
}

/// The attributes `spec`'s projection names (`ProjectionExpression`, or the legacy
/// `AttributesToGet`).
fn projected(spec: &Value, names: Option<&Map<String, Value>>) -> BTreeSet<String> {
    let mut attributes = spec["ProjectionExpression"]
        .as_str()
        .map(|text| expression_attributes(text, names))
        .unwrap_or_default();
    attributes.extend(
        spec["AttributesToGet"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_owned),
    );
    attributes
}

/// The top-level attribute names an expression names: each `#placeholder` resolved through
/// `names`, each bare name that is not a keyword, a function or a value (`:v`); a path's later
/// parts (`a.b`, `a[0]`) are the attribute `a`.
pub fn expression_attributes(
    expression: &str,
    names: Option<&Map<String, Value>>,
) -> BTreeSet<String> {
    const KEYWORDS: &[&str] = &["and", "or", "not", "in", "between"];
    let is_part = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '#' | ':');
    let chars: Vec<char> = expression.chars().collect();
    let mut found = BTreeSet::new();
    let mut i = 0;
    while i < chars.len() {
        if !is_part(chars[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < chars.len() && is_part(chars[i]) {
            i += 1;
        }
        let token: String = chars[start..i].iter().collect();
        let after_dot = chars[..start]
            .iter()
            .rev()
            .find(|c| !c.is_whitespace())
            .is_some_and(|c| *c == '.');
        let a_call = chars[i..]
            .iter()
            .find(|c| !c.is_whitespace())
            .is_some_and(|c| *c == '(');
        if after_dot || a_call || token.starts_with(':') {
            continue;
        }
        if token.starts_with('#') {
            if let Some(name) = names.and_then(|n| n.get(&token)).and_then(Value::as_str) {
                found.insert(name.to_owned());
            }
        } else if !token.starts_with(|c: char| c.is_ascii_digit())
            && !KEYWORDS.contains(&token.to_ascii_lowercase().as_str())
        {
            found.insert(token);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn an_expression_names_its_placeholders_and_bare_names_but_no_keyword_function_or_value() {
        let names = json!({"#s": "Status", "#e": "EntityType"});
        assert_eq!(
            expression_attributes(
                "#s = :dead AND attribute_exists(ttl) AND NOT #e IN (:a, :b) AND Items[0].sku = :x \
                 AND size(Payload) BETWEEN :lo AND :hi",
                names.as_object()
            ),
            set(&["Status", "ttl", "EntityType", "Items", "Payload"])
        );
        assert_eq!(
            expression_attributes("#s, PK", names.as_object()),
            set(&["Status", "PK"])
        );
    }

    #[test]
    fn a_read_without_a_projection_selects_all_attributes() {
        let whole =
            json!({"TableName": "t", "Key": {"PK": {"S": "USER#1"}, "SK": {"S": "ORDER#1"}}});
        let read = &reads_of("DynamoDB_20120810.GetItem", whole.to_string().as_bytes())[0];
        assert_eq!(read.select, "ALL_ATTRIBUTES");
        assert_eq!(read.attributes, set(&["PK", "SK"]));
        assert_eq!(read.leading_keys, Some(vec!["USER#1".to_owned()]));

        let batch = json!({"RequestItems": {"t": {
            "Keys": [{"PK": {"S": "HOLD#a"}, "SK": {"S": "HOLD"}}],
            "ProjectionExpression": "#p0", "ExpressionAttributeNames": {"#p0": "OrderingKey"}}}});
        let read = &reads_of(
            "DynamoDB_20120810.BatchGetItem",
            batch.to_string().as_bytes(),
        )[0];
        assert_eq!(read.table, "t");
        assert_eq!(read.select, "SPECIFIC_ATTRIBUTES");
        assert_eq!(read.attributes, set(&["PK", "SK", "OrderingKey"]));

        let count = json!({"TableName": "t", "Select": "COUNT", "FilterExpression": "#s = :d",
                           "ExpressionAttributeNames": {"#s": "Status"}});
        let read = &reads_of("DynamoDB_20120810.Scan", count.to_string().as_bytes())[0];
        assert_eq!(
            (read.select.as_str(), read.attributes.clone()),
            ("COUNT", set(&["Status"]))
        );

        let index = json!({"TableName": "t", "IndexName": "GSI1"});
        let read = &reads_of("DynamoDB_20120810.Query", index.to_string().as_bytes())[0];
        assert_eq!(read.select, "ALL_PROJECTED_ATTRIBUTES");
        assert!(reads_of("DynamoDB_20120810.UpdateItem", b"{}").is_empty());
    }
}
