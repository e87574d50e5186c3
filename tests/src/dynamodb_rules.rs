//! What DynamoDB refuses that DynamoDB Local lets pass, answered as DynamoDB answers it: the fault
//! proxy ([`crate::fault_proxy`]) and the latency model ([`crate::latency_model`]) both apply
//! these, so a relay that breaks them fails in the tests as it would on AWS.
//!
//! - `BatchExecuteStatement` takes 1 to 25 statements (the API's `Statements` constraint); more is
//!   a `ValidationException` for the whole call. DynamoDB Local refuses it too.
//! - `BatchExecuteStatement` must not name one item twice: DynamoDB refuses the whole call with a
//!   `ValidationException` before any statement runs. DynamoDB Local answers the same error but
//!   has already run the statements (a repeated mark took effect behind the error).

use std::collections::HashSet;
use std::hash::Hash;

/// Statements one `BatchExecuteStatement` takes: the API's limit (`Statements`, 1 to 25), kept
/// apart from the relays' own constant so a relay that exceeds it is caught.
pub const BATCH_EXECUTE_STATEMENT_MAX: usize = 25;

/// Why DynamoDB refuses a `BatchExecuteStatement` whose statements name `items` (one per
/// statement, in order; `None` for a statement whose item could not be read), or `None` when it
/// takes the call.
pub fn batch_execute_statement_refusal<K: Eq + Hash>(
    items: impl ExactSizeIterator<Item = Option<K>>,
) -> Option<String> {
    let statements = items.len();
    if statements > BATCH_EXECUTE_STATEMENT_MAX {
        return Some(format!(
            "1 validation error detected: Value at 'statements' failed to satisfy constraint: \
             Member must have length less than or equal to {BATCH_EXECUTE_STATEMENT_MAX} \
             (it has {statements})"
        ));
    }
    let mut seen = HashSet::with_capacity(statements);
    for item in items.flatten() {
        if !seen.insert(item) {
            return Some("Provided list of item keys contains duplicates".to_owned());
        }
    }
    None
}

/// The body of DynamoDB's answer to a call it refuses as invalid (HTTP 400), in its JSON protocol.
pub fn validation_exception(message: &str) -> serde_json::Value {
    serde_json::json!({
        "__type": "com.amazon.coral.validate#ValidationException",
        "message": message,
    })
}

/// The item a PartiQL statement of a `BatchExecuteStatement` request (`{"Statement": …,
/// "Parameters": […]}`) names: its table and the values its `WHERE` clause gives the table's key
/// attributes (`PK`, `SK`), each a `?` parameter or a literal. `None` when the statement does not
/// read that way.
pub fn statement_item(statement: &serde_json::Value) -> Option<(String, String, String)> {
    use outbox_shared::schema::attr;
    let text = statement["Statement"].as_str()?;
    let parameters = statement["Parameters"].as_array();
    let mut words = text.split_whitespace();
    let table = loop {
        let word = words.next()?;
        if ["UPDATE", "FROM", "INTO"]
            .iter()
            .any(|k| word.eq_ignore_ascii_case(k))
        {
            break words.next()?.trim_matches('"').to_owned();
        }
    };
    let condition_at = text.to_ascii_uppercase().find(" WHERE ")?;
    let value_of = |name: &str| -> Option<String> {
        let pattern = format!("\"{name}\" = ");
        let at = condition_at + text[condition_at..].find(&pattern)? + pattern.len();
        let rest = &text[at..];
        if rest.starts_with('?') {
            let index = text[..at].matches('?').count();
            Some(parameters?.get(index)?.to_string())
        } else {
            rest.split_whitespace().next().map(str::to_owned)
        }
    };
    Some((table, value_of(attr::PK)?, value_of(attr::SK)?))
}

/// The size of `item` as DynamoDB counts it against the 400 KB item limit and bills its writes
/// ("Item sizes and formats" in the DynamoDB developer guide): each attribute's name (UTF-8
/// bytes) and value, a string its UTF-8 bytes, a number about one byte per two significant digits
/// plus one, a binary its bytes, a set or list the sum of its elements (and one byte per element
/// of a list or map, three for the container).
pub fn item_size(
    item: &std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>,
) -> usize {
    item.iter()
        .map(|(name, value)| name.len() + value_size(value))
        .sum()
}

fn value_size(value: &aws_sdk_dynamodb::types::AttributeValue) -> usize {
    use aws_sdk_dynamodb::types::AttributeValue as V;
    let number = |n: &str| {
        let digits = n
            .trim_start_matches('-')
            .replace('.', "")
            .trim_matches('0')
            .len();
        digits.div_ceil(2) + 1
    };
    match value {
        V::S(s) => s.len(),
        V::N(n) => number(n),
        V::B(b) => b.as_ref().len(),
        V::Ss(set) => set.iter().map(String::len).sum(),
        V::Ns(set) => set.iter().map(|n| number(n)).sum(),
        V::Bs(set) => set.iter().map(|b| b.as_ref().len()).sum(),
        V::Bool(_) | V::Null(_) => 1,
        V::L(list) => 3 + list.iter().map(|v| 1 + value_size(v)).sum::<usize>(),
        V::M(map) => {
            3 + map
                .iter()
                .map(|(k, v)| 1 + k.len() + value_size(v))
                .sum::<usize>()
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn mark(pk: &str, sk: &str) -> serde_json::Value {
        json!({
            "Statement": r#"UPDATE "t" SET "Status" = ? REMOVE "GSI1PK" WHERE "PK" = ? AND "SK" = ? AND "GSI1PK" IS NOT MISSING"#,
            "Parameters": [{"S": "PUBLISHED"}, {"S": pk}, {"S": sk}],
        })
    }

    #[test]
    fn a_statement_names_its_table_and_key() {
        assert_eq!(
            statement_item(&mark("USER#1", "OUTBOX#a")),
            Some((
                "t".to_owned(),
                r#"{"S":"USER#1"}"#.to_owned(),
                r#"{"S":"OUTBOX#a"}"#.to_owned()
            ))
        );
        let literal = json!({"Statement": r#"DELETE FROM "t" WHERE "PK" = 'a' AND "SK" = 'b'"#});
        assert_eq!(
            statement_item(&literal),
            Some(("t".to_owned(), "'a'".to_owned(), "'b'".to_owned()))
        );
    }

    #[test]
    fn more_than_25_statements_or_a_repeated_item_are_refused() {
        let distinct: Vec<_> = (0..25).map(|i| mark("P", &i.to_string())).collect();
        assert_eq!(
            batch_execute_statement_refusal(distinct.iter().map(statement_item)),
            None
        );
        let too_many: Vec<_> = (0..26).map(|i| mark("P", &i.to_string())).collect();
        assert!(
            batch_execute_statement_refusal(too_many.iter().map(statement_item))
                .unwrap()
                .contains("less than or equal to 25")
        );
        let repeated = [mark("P", "1"), mark("P", "2"), mark("P", "1")];
        assert_eq!(
            batch_execute_statement_refusal(repeated.iter().map(statement_item)).as_deref(),
            Some("Provided list of item keys contains duplicates")
        );
    }
}
