//! Least-privilege check of the template's IAM statements.
//!
//! A statement may use `*` as an action or as its whole resource only where AWS allows nothing
//! narrower, and then the line above its `Sid` must say so with a comment starting
//! [`WILDCARD_REASON`]. Scoped wildcards inside an ARN (`table/x/stream/*`) are fine.

use serde_norway::Value;

use crate::template::Template;

/// The comment that must precede a statement with a wildcard action or resource.
pub const WILDCARD_REASON: &str = "# AWS allows nothing narrower:";

/// IAM resource types whose policies are checked.
const POLICY_HOLDERS: [&str; 3] = [
    "AWS::IAM::Role",
    "AWS::IAM::Policy",
    "AWS::IAM::ManagedPolicy",
];

/// One IAM statement found in the template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement {
    /// Logical id of the role or policy.
    pub resource: String,
    /// The statement's `Sid`, if any.
    pub sid: Option<String>,
    /// Whether an action or the whole resource is `*`.
    pub uses_wildcard: bool,
}

/// Every statement of every role and policy in the template.
pub fn statements(template: &Template) -> Vec<Statement> {
    let mut found = Vec::new();
    for (id, resource) in &template.resources {
        if !POLICY_HOLDERS.contains(&resource.resource_type.as_str()) {
            continue;
        }
        let props = &resource.properties;
        let documents = props
            .get("Policies")
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("PolicyDocument"))
            .chain(props.get("PolicyDocument"));
        for document in documents {
            let listed = document.get("Statement").and_then(Value::as_sequence);
            for statement in listed.into_iter().flatten() {
                let strings = |key: &str| -> Vec<String> {
                    match statement.get(key) {
                        Some(Value::String(s)) => vec![s.clone()],
                        Some(Value::Sequence(items)) => items
                            .iter()
                            .filter_map(|i| i.as_str().map(str::to_owned))
                            .collect(),
                        _ => Vec::new(),
                    }
                };
                let uses_wildcard = strings("Action").iter().any(|a| a.contains('*'))
                    || strings("NotAction").iter().any(|a| a.contains('*'))
                    || strings("Resource").iter().any(|r| r == "*");
                found.push(Statement {
                    resource: id.clone(),
                    sid: statement
                        .get("Sid")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    uses_wildcard,
                });
            }
        }
    }
    found
}

/// Statements that use a wildcard without the [`WILDCARD_REASON`] comment right above their `Sid`
/// in `text` (the template's source), described for a lint message. Empty when all is well.
pub fn uncommented_wildcards(template: &Template, text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    statements(template)
        .into_iter()
        .filter(|s| s.uses_wildcard)
        .filter_map(|s| {
            let Some(sid) = &s.sid else {
                return Some(format!("{}: a statement without Sid uses `*`", s.resource));
            };
            let commented = lines.windows(2).any(|pair| {
                pair[0].trim_start().starts_with(WILDCARD_REASON)
                    && pair[1].trim() == format!("- Sid: {sid}")
            });
            (!commented).then(|| {
                format!(
                    "{}: statement {sid} uses `*` without a `{WILDCARD_REASON} …` comment above it",
                    s.resource
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::TEMPLATE_YAML;

    const ROLE: &str = "Resources:\n  R:\n    Type: AWS::IAM::Role\n    Properties:\n      \
                        Policies:\n        - PolicyName: p\n          PolicyDocument:\n            \
                        Statement:\n";

    #[test]
    fn the_template_uses_wildcards_only_with_a_reason() {
        let template = Template::embedded().unwrap();

        let all = statements(&template);
        let violations = uncommented_wildcards(&template, TEMPLATE_YAML);

        assert!(violations.is_empty(), "{violations:#?}");
        // The check saw the roles' statements, including the wildcard ones that need a reason.
        assert!(all.len() >= 10, "{all:#?}");
        assert!(all.iter().any(|s| s.uses_wildcard));
    }

    #[test]
    fn a_wildcard_without_a_reason_is_reported() {
        let text = format!(
            "{ROLE}              - Sid: All\n                Effect: Allow\n                \
             Action: dynamodb:*\n                Resource: arn:aws:dynamodb:x:1:table/t\n"
        );
        let template = Template::parse(&text).unwrap();

        let violations = uncommented_wildcards(&template, &text);

        assert_eq!(violations.len(), 1);
        assert!(violations[0].contains("statement All"), "{violations:?}");
    }

    #[test]
    fn a_wildcard_resource_with_a_reason_passes_and_scoped_arns_are_not_wildcards() {
        let text = format!(
            "{ROLE}              {WILDCARD_REASON} no resource-level permissions.\n              \
             - Sid: Token\n                Effect: Allow\n                Action: ecr:GetAuthorizationToken\n                \
             Resource: \"*\"\n              - Sid: Stream\n                Effect: Allow\n                \
             Action: [dynamodb:GetRecords]\n                Resource: arn:aws:dynamodb:x:1:table/t/stream/*\n"
        );
        let template = Template::parse(&text).unwrap();

        let found = statements(&template);

        assert!(uncommented_wildcards(&template, &text).is_empty());
        assert_eq!(
            found.iter().map(|s| s.uses_wildcard).collect::<Vec<_>>(),
            [true, false]
        );
    }
}
