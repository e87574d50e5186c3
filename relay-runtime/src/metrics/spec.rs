//! What CloudWatch accepts as an Embedded Metric Format document, checked the way CloudWatch Logs
//! checks it before extracting metrics (the specification:
//! <https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/CloudWatch_Embedded_Metric_Format_Specification.html>).
//! A document that breaks one of these rules yields no metric at all (CloudWatch counts it under
//! `AWS/Logs` `EMFValidationErrors`), so an alarm on it sees missing data.
//!
//! For tests: the relays' own documents, and whatever a relay binary writes, are held to it.

use serde_json::Value;

use super::emf::{
    MAX_DIMENSIONS_PER_SET, MAX_DOCUMENT_BYTES, MAX_METRICS_PER_DIRECTIVE, MAX_VALUES_PER_METRIC,
};

/// The units a `MetricDefinition` may name (CloudWatch's `StandardUnit`).
const STANDARD_UNITS: &[&str] = &[
    "Seconds",
    "Microseconds",
    "Milliseconds",
    "Bytes",
    "Kilobytes",
    "Megabytes",
    "Gigabytes",
    "Terabytes",
    "Bits",
    "Kilobits",
    "Megabits",
    "Gigabits",
    "Terabits",
    "Percent",
    "Count",
    "Bytes/Second",
    "Kilobytes/Second",
    "Megabytes/Second",
    "Gigabytes/Second",
    "Terabytes/Second",
    "Bits/Second",
    "Kilobits/Second",
    "Megabits/Second",
    "Gigabits/Second",
    "Terabits/Second",
    "Count/Second",
    "None",
];

/// Whether a line of a relay's output is meant as an EMF document (it has the `_aws` member).
pub fn is_emf(document: &Value) -> bool {
    document.get("_aws").is_some()
}

/// Every rule of the specification `line` breaks; empty when CloudWatch would extract its metrics.
pub fn violations(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    if line.len() > MAX_DOCUMENT_BYTES {
        found.push(format!(
            "the document has {} bytes (at most {MAX_DOCUMENT_BYTES})",
            line.len()
        ));
    }
    let document: Value = match serde_json::from_str(line) {
        Ok(document) => document,
        Err(e) => {
            found.push(format!("not one JSON object: {e}"));
            return found;
        }
    };
    let Some(root) = document.as_object() else {
        found.push("the root is not an object".into());
        return found;
    };
    let Some(aws) = root.get("_aws").and_then(Value::as_object) else {
        found.push("no _aws object".into());
        return found;
    };
    if aws
        .get("Timestamp")
        .is_none_or(|t| t.as_u64().is_none_or(|t| t == 0))
    {
        found.push("_aws.Timestamp is not epoch milliseconds".into());
    }
    let Some(directives) = aws.get("CloudWatchMetrics").and_then(Value::as_array) else {
        found.push("no _aws.CloudWatchMetrics array".into());
        return found;
    };
    for directive in directives {
        if !directive
            .get("Namespace")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty() && n.len() <= 1024)
        {
            found.push("a directive has no Namespace of 1 to 1024 characters".into());
        }
        match directive.get("Dimensions").and_then(Value::as_array) {
            None => found.push("a directive has no Dimensions array".into()),
            Some(sets) => {
                for set in sets {
                    let Some(keys) = set.as_array() else {
                        found.push("a dimension set is not an array".into());
                        continue;
                    };
                    if keys.len() > MAX_DIMENSIONS_PER_SET {
                        found.push(format!(
                            "a dimension set has {} dimensions (at most {MAX_DIMENSIONS_PER_SET})",
                            keys.len()
                        ));
                    }
                    for key in keys {
                        let value = key.as_str().and_then(|k| root.get(k));
                        if !value
                            .and_then(Value::as_str)
                            .is_some_and(|v| !v.is_empty() && v.len() <= 1024)
                        {
                            found.push(format!("dimension {key} has no string value at the root"));
                        }
                    }
                }
            }
        }
        let Some(metrics) = directive.get("Metrics").and_then(Value::as_array) else {
            found.push("a directive has no Metrics array".into());
            continue;
        };
        if metrics.len() > MAX_METRICS_PER_DIRECTIVE {
            found.push(format!(
                "a directive has {} metrics (at most {MAX_METRICS_PER_DIRECTIVE})",
                metrics.len()
            ));
        }
        for metric in metrics {
            let Some(name) = metric
                .get("Name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty() && n.len() <= 1024)
            else {
                found.push("a metric has no Name of 1 to 1024 characters".into());
                continue;
            };
            if let Some(unit) = metric.get("Unit")
                && !unit.as_str().is_some_and(|u| STANDARD_UNITS.contains(&u))
            {
                found.push(format!("{name} has unit {unit}, not a standard unit"));
            }
            if let Some(resolution) = metric.get("StorageResolution")
                && !matches!(resolution.as_u64(), Some(1 | 60))
            {
                found.push(format!("{name} has StorageResolution {resolution}"));
            }
            match root.get(name) {
                Some(Value::Number(_)) => {}
                Some(Value::Array(values)) => {
                    if values.is_empty() || values.len() > MAX_VALUES_PER_METRIC {
                        found.push(format!(
                            "{name} has {} values (1 to {MAX_VALUES_PER_METRIC})",
                            values.len()
                        ));
                    }
                    if !values.iter().all(Value::is_number) {
                        found.push(format!("{name} has a value that is not a number"));
                    }
                }
                other => found.push(format!(
                    "{name} has no numeric value at the root: {other:?}"
                )),
            }
        }
    }
    found
}

/// The values a document gives `name` (none when it names no such metric).
pub fn values_of(document: &Value, name: &str) -> Vec<f64> {
    let named = document["_aws"]["CloudWatchMetrics"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|d| d["Metrics"].as_array().into_iter().flatten())
        .any(|m| m["Name"] == name);
    if !named {
        return Vec::new();
    }
    match &document[name] {
        Value::Number(n) => n.as_f64().into_iter().collect(),
        Value::Array(values) => values.iter().filter_map(Value::as_f64).collect(),
        _ => Vec::new(),
    }
}
