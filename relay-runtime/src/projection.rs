//! Reads that name the attributes they read: a `ProjectionExpression`, each name by a placeholder.
//!
//! A role whose statement allows reading only some attributes of the table (a
//! `dynamodb:Attributes` condition with `dynamodb:Select`, `relay_runtime::permissions`) is refused
//! a read without one: DynamoDB authorizes such a read as `ALL_ATTRIBUTES`, the whole item. So
//! every read of the outbox table by key or by scan names what it reads, as its role's statement
//! lists it (the index's reads read only outbox items and need none).

/// A projection on some attributes: its expression (`#p0, #p1, …`: a placeholder for each, so
/// no name is read as a reserved word) and the names the placeholders stand for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Projection {
    pub expression: String,
    pub names: Vec<(String, String)>,
}

impl Projection {
    /// The projection on `attributes`.
    ///
    /// # Panics
    /// When `attributes` is empty: a projection on nothing is no read DynamoDB takes.
    pub fn of(attributes: &[&str]) -> Self {
        assert!(!attributes.is_empty(), "a projection on no attribute");
        let names: Vec<(String, String)> = attributes
            .iter()
            .enumerate()
            .map(|(i, name)| (format!("#p{i}"), (*name).to_owned()))
            .collect();
        Self {
            expression: names
                .iter()
                .map(|(placeholder, _)| placeholder.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            names,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_attribute_is_named_by_a_placeholder() {
        let projection = Projection::of(&["PK", "SK", "ttl"]);
        assert_eq!(projection.expression, "#p0, #p1, #p2");
        assert_eq!(
            projection.names,
            [
                ("#p0".to_owned(), "PK".to_owned()),
                ("#p1".to_owned(), "SK".to_owned()),
                ("#p2".to_owned(), "ttl".to_owned()),
            ]
        );
    }
}
