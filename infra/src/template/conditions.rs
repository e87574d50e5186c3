//! The template as CloudFormation creates it for given parameter values: each condition
//! evaluated (`!Equals`, `!Not`, `!And`, `!Or`, `!Condition`), the resources whose condition is
//! false left out, and every `!If` decided.

use std::collections::BTreeMap;

use serde_norway::Value;

use super::{Template, TemplateError, invalid};

/// [`Template::with_parameters`].
pub(super) fn with_parameters(
    template: &Template,
    values: &[(&str, &str)],
) -> Result<Template, TemplateError> {
    let mut chosen = template.clone();
    for (name, value) in values {
        let parameter = chosen
            .parameters
            .get_mut(*name)
            .ok_or_else(|| invalid("Parameters", format!("has no parameter {name}")))?;
        let allowed = parameter.allowed_values.as_ref().is_none_or(|allowed| {
            allowed
                .iter()
                .any(|a| template.resolve_scalar(a).as_deref() == Some(*value))
        });
        if !allowed {
            return Err(invalid(
                name,
                format!("{value:?} is not one of its AllowedValues"),
            ));
        }
        parameter.default = Some(Value::String((*value).to_owned()));
    }
    let mut holds = BTreeMap::new();
    for name in chosen.conditions.keys() {
        holds.insert(name.clone(), condition_holds(&chosen, name, 0)?);
    }
    let mut resources = BTreeMap::new();
    for (id, resource) in &chosen.resources {
        if let Some(condition) = &resource.condition {
            let holds = holds.get(condition).copied().ok_or_else(|| {
                invalid(
                    id,
                    format!("names condition {condition}, which does not exist"),
                )
            })?;
            if !holds {
                continue;
            }
        }
        let mut resource = resource.clone();
        resource.properties = decide_ifs(&resource.properties, &holds)
            .map_err(|message| invalid(id, message))?
            .unwrap_or(Value::Null);
        resources.insert(id.clone(), resource);
    }
    chosen.resources = resources;
    Ok(chosen)
}

/// Whether the condition `name` holds for the parameters' current values.
fn condition_holds(template: &Template, name: &str, depth: usize) -> Result<bool, TemplateError> {
    // Conditions may refer to each other, never in a cycle; this bounds a mistaken one.
    const MAX_DEPTH: usize = 16;
    if depth > MAX_DEPTH {
        return Err(invalid("Conditions", format!("{name} refers to itself")));
    }
    let expression = template
        .conditions
        .get(name)
        .ok_or_else(|| invalid("Conditions", format!("has no condition {name}")))?;
    evaluate(template, expression, depth + 1)
        .map_err(|message| invalid("Conditions", format!("{name}: {message}")))
}

fn evaluate(template: &Template, expression: &Value, depth: usize) -> Result<bool, String> {
    let Value::Tagged(tagged) = expression else {
        return Err(format!("{expression:?} is not a condition function"));
    };
    let arguments = || {
        tagged
            .value
            .as_sequence()
            .ok_or_else(|| format!("!{} takes a list", tagged.tag))
    };
    if tagged.tag == "Equals" {
        let arguments = arguments()?;
        let [left, right] = arguments.as_slice() else {
            return Err("!Equals takes two values".to_owned());
        };
        Ok(condition_value(template, left)? == condition_value(template, right)?)
    } else if tagged.tag == "Not" {
        let arguments = arguments()?;
        let [inner] = arguments.as_slice() else {
            return Err("!Not takes one condition".to_owned());
        };
        Ok(!evaluate(template, inner, depth)?)
    } else if tagged.tag == "And" || tagged.tag == "Or" {
        let results = arguments()?
            .iter()
            .map(|inner| evaluate(template, inner, depth))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(if tagged.tag == "And" {
            results.iter().all(|held| *held)
        } else {
            results.iter().any(|held| *held)
        })
    } else if tagged.tag == "Condition" {
        let name = tagged
            .value
            .as_str()
            .ok_or("!Condition takes a condition's name")?;
        condition_holds(template, name, depth).map_err(|e| e.to_string())
    } else {
        Err(format!("!{} is not a condition function", tagged.tag))
    }
}

/// A value compared in a condition: a scalar, a `!Ref` to a parameter (its value), a `!Sub` of
/// parameters, or a `!Select` from a `!Split` of one (the global tables' region slots).
pub(super) fn condition_value(template: &Template, value: &Value) -> Result<String, String> {
    if let Value::Tagged(tagged) = value {
        if tagged.tag == "Sub" {
            let text = tagged.value.as_str().ok_or("!Sub takes text here")?;
            return substitute(template, text);
        }
        if tagged.tag == "Select" {
            let arguments = tagged.value.as_sequence().ok_or("!Select takes a list")?;
            let [index, list] = arguments.as_slice() else {
                return Err("!Select takes an index and a list".to_owned());
            };
            let index: usize = condition_value(template, index)?
                .parse()
                .map_err(|e| format!("!Select's index: {e}"))?;
            let items = split(template, list)?;
            let count = items.len();
            return items
                .into_iter()
                .nth(index)
                .ok_or_else(|| format!("!Select {index} of a list of {count}"));
        }
    }
    template
        .resolve_scalar(value)
        .ok_or_else(|| format!("cannot read {value:?} as a value"))
}

/// The list a `!Split` makes.
fn split(template: &Template, value: &Value) -> Result<Vec<String>, String> {
    let arguments = match value {
        Value::Tagged(tagged) if tagged.tag == "Split" => tagged.value.as_sequence(),
        _ => None,
    }
    .ok_or_else(|| format!("{value:?} is not a !Split"))?;
    let [delimiter, text] = arguments.as_slice() else {
        return Err("!Split takes a delimiter and a text".to_owned());
    };
    let delimiter = condition_value(template, delimiter)?;
    Ok(condition_value(template, text)?
        .split(delimiter.as_str())
        .map(str::to_owned)
        .collect())
}

/// A `!Sub`'s text with each `${Parameter}` replaced by the parameter's value.
fn substitute(template: &Template, text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let end = rest[start..]
            .find('}')
            .map(|end| start + end)
            .ok_or("!Sub has a ${ without its }")?;
        let name = &rest[start + 2..end];
        let value = template
            .parameters
            .get(name)
            .and_then(|p| p.default.as_ref())
            .and_then(|v| template.resolve_scalar(v))
            .ok_or_else(|| format!("!Sub names {name}, which is not a parameter with a value"))?;
        out.push_str(&value);
        rest = &rest[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// `value` with every `!If` replaced by the branch `holds` picks; `None` when the value is a
/// `!Ref AWS::NoValue` (CloudFormation then leaves the property or list item out).
fn decide_ifs(value: &Value, holds: &BTreeMap<String, bool>) -> Result<Option<Value>, String> {
    match value {
        Value::Tagged(tagged) if tagged.tag == "Ref" && tagged.value.as_str() == Some(NO_VALUE) => {
            Ok(None)
        }
        Value::Tagged(tagged) if tagged.tag == "If" => {
            let branches = tagged.value.as_sequence().map(Vec::as_slice);
            let Some([Value::String(condition), then, otherwise]) = branches else {
                return Err("!If takes a condition's name and two values".to_owned());
            };
            let held = holds
                .get(condition)
                .ok_or_else(|| format!("!If names condition {condition}, which does not exist"))?;
            decide_ifs(if *held { then } else { otherwise }, holds)
        }
        Value::Tagged(tagged) => {
            let mut tagged = tagged.clone();
            tagged.value = decide_ifs(&tagged.value, holds)?.unwrap_or(Value::Null);
            Ok(Some(Value::Tagged(tagged)))
        }
        Value::Sequence(items) => {
            let mut kept = Vec::with_capacity(items.len());
            for item in items {
                kept.extend(decide_ifs(item, holds)?);
            }
            Ok(Some(Value::Sequence(kept)))
        }
        Value::Mapping(map) => {
            let mut kept = serde_norway::Mapping::new();
            for (key, item) in map {
                if let Some(item) = decide_ifs(item, holds)? {
                    kept.insert(key.clone(), item);
                }
            }
            Ok(Some(Value::Mapping(kept)))
        }
        other => Ok(Some(other.clone())),
    }
}

/// The pseudo parameter whose `!Ref` removes a property.
const NO_VALUE: &str = "AWS::NoValue";
