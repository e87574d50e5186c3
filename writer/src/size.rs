//! DynamoDB item size, computed the way DynamoDB counts it, so limits are checked before a call.
//!
//! Per the DynamoDB developer guide ("Item sizes and formats"): an item's size is the sum over its
//! attributes of the UTF-8 bytes of the name plus the size of the value. Strings and binaries count
//! their bytes; a number counts about one byte per two significant digits plus one; booleans and
//! nulls one byte; lists and maps 3 bytes plus, per element, 1 byte and the element's size (and,
//! for maps, the key's bytes). Sets count their elements. Where DynamoDB says "approximately"
//! this rounds up, so an accepted item is never over the real limit.

use std::collections::HashMap;

use aws_sdk_dynamodb::types::AttributeValue;

/// Bytes of overhead DynamoDB counts for a list or map, whatever its contents.
const CONTAINER_OVERHEAD: usize = 3;
/// Bytes of overhead DynamoDB counts per element of a list or map.
const ELEMENT_OVERHEAD: usize = 1;

/// Size of a whole item (names plus values).
pub fn item_size(item: &HashMap<String, AttributeValue>) -> usize {
    item.iter()
        .map(|(name, value)| name.len() + value_size(value))
        .sum()
}

/// Size of one attribute value.
pub fn value_size(value: &AttributeValue) -> usize {
    match value {
        AttributeValue::S(s) => s.len(),
        AttributeValue::N(n) => number_size(n),
        AttributeValue::B(b) => b.as_ref().len(),
        AttributeValue::Bool(_) | AttributeValue::Null(_) => 1,
        AttributeValue::Ss(set) => set.iter().map(String::len).sum(),
        AttributeValue::Ns(set) => set.iter().map(|n| number_size(n)).sum(),
        AttributeValue::Bs(set) => set.iter().map(|b| b.as_ref().len()).sum(),
        AttributeValue::L(list) => {
            CONTAINER_OVERHEAD
                + list
                    .iter()
                    .map(|v| ELEMENT_OVERHEAD + value_size(v))
                    .sum::<usize>()
        }
        AttributeValue::M(map) => {
            CONTAINER_OVERHEAD
                + map
                    .iter()
                    .map(|(k, v)| ELEMENT_OVERHEAD + k.len() + value_size(v))
                    .sum::<usize>()
        }
        // A value type newer than this SDK: count nothing rather than guess.
        _ => 0,
    }
}

/// `ceil(significant digits / 2) + 1`. Sign, decimal point and exponent are not digits; leading
/// and trailing zeros are trimmed (DynamoDB stores numbers normalized).
fn number_size(number: &str) -> usize {
    let mantissa = number.split(['e', 'E']).next().unwrap_or(number);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let significant = digits.trim_start_matches('0').trim_end_matches('0').len();
    significant.max(1).div_ceil(2) + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> AttributeValue {
        AttributeValue::S(v.to_owned())
    }

    #[test]
    fn strings_count_name_and_utf8_bytes() {
        let item = HashMap::from([("PK".to_owned(), s("USER#ü"))]);
        // "PK" = 2, "USER#ü" = 5 + 2 bytes.
        assert_eq!(item_size(&item), 2 + 7);
    }

    #[test]
    fn numbers_count_one_byte_per_two_significant_digits_plus_one() {
        assert_eq!(number_size("1"), 2);
        assert_eq!(number_size("12"), 2);
        assert_eq!(number_size("123"), 3);
        assert_eq!(number_size("-1200"), 2);
        assert_eq!(number_size("0.0012"), 2);
        assert_eq!(number_size("1.5E+10"), 2);
        assert_eq!(number_size("0"), 2);
    }

    #[test]
    fn containers_add_three_bytes_and_one_per_element() {
        assert_eq!(value_size(&AttributeValue::L(vec![])), 3);
        assert_eq!(value_size(&AttributeValue::M(HashMap::new())), 3);
        let list = AttributeValue::L(vec![s("ab"), AttributeValue::Bool(true)]);
        assert_eq!(value_size(&list), 3 + (1 + 2) + (1 + 1));
        let map = AttributeValue::M(HashMap::from([("sku".to_owned(), s("x"))]));
        assert_eq!(value_size(&map), 3 + 1 + 3 + 1);
        assert_eq!(value_size(&AttributeValue::Null(true)), 1);
        assert_eq!(
            value_size(&AttributeValue::Ss(vec!["ab".into(), "c".into()])),
            3
        );
    }
}
