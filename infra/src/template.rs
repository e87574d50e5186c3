//! The deployable template, embedded and parsed, so local provisioning and tests read the same
//! resource definitions that CloudFormation deploys.
//!
//! CloudFormation short-form tags (`!Ref`, `!GetAtt`, `!Sub`, …) parse as
//! [`serde_norway::Value::Tagged`]; only `!Ref` to a parameter is resolved (to its default),
//! which is all local provisioning needs. Everything else is read as plain YAML.
//!
//! [`Template::with_parameters`] gives the template as CloudFormation would create it for given
//! parameter values: the resources whose `Condition` is false left out and every `!If` decided,
//! so tests (and local provisioning) read one bus kind's resources at a time.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_norway::Value;

/// `infra/template.yaml`, as compiled into this crate.
pub const TEMPLATE_YAML: &str = include_str!("../template.yaml");

/// Logical ids of the resources local provisioning derives from.
pub mod logical_id {
    /// The outbox table (orders and outbox items).
    pub const OUTBOX_TABLE: &str = "OutboxTable";
    /// The bus the relays publish to.
    pub const EVENT_BUS: &str = "EventBus";
    /// The bus archive (replay).
    pub const EVENT_ARCHIVE: &str = "EventArchive";
    /// The relays' dead-letter queue for poison events.
    pub const DEAD_LETTER_QUEUE: &str = "DeadLetterQueue";
    /// The stream mapping's S3 on-failure destination (discarded batches).
    pub const DISCARDED_BATCH_BUCKET: &str = "DiscardedBatchBucket";
    /// The claim check's bucket (`PAYLOAD_BUCKET`): payloads too large for their event, records of
    /// dead letters too large for their queue.
    pub const PAYLOAD_BUCKET: &str = "PayloadBucket";
    /// The stream Lambda's event source mapping.
    pub const RELAY_EVENT_SOURCE_MAPPING: &str = "RelayEventSourceMapping";
    /// The poller fleet's shard leases (`relay-poller run --create-lease-table` creates the same
    /// table locally).
    pub const LEASE_TABLE: &str = "LeaseTable";
    /// A consumer's idempotency table (optional, `CreateConsumerIdempotencyTable`).
    pub const CONSUMER_IDEMPOTENCY_TABLE: &str = "ConsumerIdempotencyTable";
    /// The Custom Event Bus (`EventBusKind` custom); `Ref` is its ARN.
    pub const CUSTOM_EVENT_BUS: &str = "CustomEventBus";
    /// The example FIFO subscriber on the Custom Event Bus.
    pub const ORDER_EVENTS_SUBSCRIBER: &str = "OrderEventsSubscriber";
    /// The FIFO queue the example subscriber delivers to.
    pub const ORDER_EVENTS_QUEUE: &str = "OrderEventsQueue";
    /// The FIFO queue of the subscriber's failure records.
    pub const ORDER_EVENTS_DELIVERY_FAILURE_QUEUE: &str = "OrderEventsDeliveryFailureQueue";
    /// The role EventBridge assumes to deliver the subscriber's events.
    pub const ORDER_EVENTS_DELIVERY_ROLE: &str = "OrderEventsDeliveryRole";
}

/// Template parameters and their values that tests and local provisioning choose between.
pub mod parameter {
    /// What the relays publish to: the stack's bus ([`BUS`]), or `sns`, `sqs`, `kinesis`.
    pub const EVENT_TARGET_KIND: &str = "EventTargetKind";
    /// [`EVENT_TARGET_KIND`] for the stack's bus, of the kind [`EVENT_BUS_KIND`] says (the
    /// default).
    pub const BUS: &str = "bus";
    /// The topic's, queue's or stream's ARN when [`EVENT_TARGET_KIND`] is not [`BUS`].
    pub const EVENT_TARGET: &str = "EventTarget";
    /// The customer managed KMS key the target is encrypted with, if any.
    pub const EVENT_TARGET_KMS_KEY_ARN: &str = "EventTargetKmsKeyArn";
    /// Which bus the relays publish to.
    pub const EVENT_BUS_KIND: &str = "EventBusKind";
    /// Days the Custom Event Bus keeps events.
    pub const CUSTOM_BUS_RETENTION_DAYS: &str = "CustomBusRetentionDays";
    /// [`EVENT_BUS_KIND`] for the classic bus (the default).
    pub const CLASSIC: &str = "classic";
    /// [`EVENT_BUS_KIND`] for the Custom Event Bus.
    pub const CUSTOM: &str = "custom";
}

/// The template could not be read as the resources local provisioning expects.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    /// Not valid YAML, or not a CloudFormation template.
    #[error("infra/template.yaml does not parse: {0}")]
    Parse(#[source] serde_norway::Error),
    /// A resource local provisioning needs is missing.
    #[error("infra/template.yaml has no resource {0}")]
    MissingResource(String),
    /// A resource's properties are not shaped as expected.
    #[error("infra/template.yaml resource {resource}: {message}")]
    Invalid {
        /// Logical id of the resource.
        resource: String,
        /// What is wrong.
        message: String,
    },
}

/// One resource: its type and raw properties.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Resource {
    /// The CloudFormation type, e.g. `AWS::DynamoDB::Table`.
    #[serde(rename = "Type")]
    pub resource_type: String,
    /// The condition that must hold for CloudFormation to create it, if any.
    #[serde(default)]
    pub condition: Option<String>,
    /// Properties, with intrinsic functions left as tagged values.
    #[serde(default)]
    pub properties: Value,
}

/// A parameter's declaration: what CloudFormation accepts for it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Parameter {
    /// `String`, `Number`, `List<…>`, …
    #[serde(rename = "Type")]
    pub parameter_type: String,
    #[serde(default)]
    pub default: Option<Value>,
    /// A Java regular expression the whole value must match (String parameters).
    #[serde(default)]
    pub allowed_pattern: Option<String>,
    #[serde(default)]
    pub allowed_values: Option<Vec<Value>>,
    /// The smallest value a `Number` parameter takes.
    #[serde(default)]
    pub min_value: Option<Value>,
    /// What the parameter means, as CloudFormation's console shows it.
    #[serde(default)]
    pub description: Option<String>,
}

/// The parsed template.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Template {
    #[serde(default)]
    parameters: BTreeMap<String, Parameter>,
    #[serde(default)]
    conditions: BTreeMap<String, Value>,
    /// Every resource, by logical id.
    pub resources: BTreeMap<String, Resource>,
}

/// `AttributeDefinitions` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct AttributeDefinition {
    pub attribute_name: String,
    /// `S`, `N` or `B`.
    pub attribute_type: String,
}

/// `KeySchema` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct KeyElement {
    pub attribute_name: String,
    /// `HASH` or `RANGE`.
    pub key_type: String,
}

/// `Projection` of an index.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Projection {
    /// `ALL`, `KEYS_ONLY` or `INCLUDE`.
    pub projection_type: String,
    #[serde(default)]
    pub non_key_attributes: Vec<String>,
}

/// A global secondary index.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct IndexSpec {
    pub index_name: String,
    pub key_schema: Vec<KeyElement>,
    pub projection: Projection,
}

/// `StreamSpecification`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct StreamSpec {
    /// `NEW_IMAGE`, `NEW_AND_OLD_IMAGES`, …
    pub stream_view_type: String,
}

/// `TimeToLiveSpecification`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TtlSpec {
    pub attribute_name: String,
    pub enabled: bool,
}

/// The parts of an `AWS::DynamoDB::Table` that shape the data: keys, indexes, stream, TTL.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct TableSpec {
    /// `PAY_PER_REQUEST` or `PROVISIONED`.
    pub billing_mode: String,
    pub attribute_definitions: Vec<AttributeDefinition>,
    pub key_schema: Vec<KeyElement>,
    #[serde(default)]
    pub global_secondary_indexes: Vec<IndexSpec>,
    pub stream_specification: Option<StreamSpec>,
    pub time_to_live_specification: Option<TtlSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct FilterCriteria {
    filters: Vec<Filter>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Filter {
    pattern: String,
}

impl Template {
    /// The template compiled into this crate.
    ///
    /// # Errors
    /// [`TemplateError::Parse`] when `infra/template.yaml` is not a valid template.
    pub fn embedded() -> Result<Self, TemplateError> {
        Self::parse(TEMPLATE_YAML)
    }

    /// Parses a template from YAML text.
    ///
    /// # Errors
    /// [`TemplateError::Parse`] when the text is not YAML with a `Resources` mapping.
    pub fn parse(yaml: &str) -> Result<Self, TemplateError> {
        serde_norway::from_str(yaml).map_err(TemplateError::Parse)
    }

    /// The parameter with this name.
    ///
    /// # Errors
    /// [`TemplateError::Invalid`] when there is none.
    pub fn parameter(&self, name: &str) -> Result<&Parameter, TemplateError> {
        self.parameters
            .get(name)
            .ok_or_else(|| invalid(name, "is not a parameter"))
    }

    /// The resource with this logical id.
    ///
    /// # Errors
    /// [`TemplateError::MissingResource`] when there is none.
    pub fn resource(&self, logical_id: &str) -> Result<&Resource, TemplateError> {
        self.resources
            .get(logical_id)
            .ok_or_else(|| TemplateError::MissingResource(logical_id.to_owned()))
    }

    /// The outbox table's keys, index, stream and TTL.
    ///
    /// # Errors
    /// [`TemplateError`] when the resource is missing or not shaped like a table.
    pub fn outbox_table(&self) -> Result<TableSpec, TemplateError> {
        self.typed_properties(logical_id::OUTBOX_TABLE)
    }

    /// The lease table's keys and TTL.
    ///
    /// # Errors
    /// [`TemplateError`] when the resource is missing or not shaped like a table.
    pub fn lease_table(&self) -> Result<TableSpec, TemplateError> {
        self.typed_properties(logical_id::LEASE_TABLE)
    }

    /// A consumer's idempotency table: key and TTL.
    ///
    /// # Errors
    /// [`TemplateError`] when the resource is missing or not shaped like a table.
    pub fn consumer_idempotency_table(&self) -> Result<TableSpec, TemplateError> {
        self.typed_properties(logical_id::CONSUMER_IDEMPOTENCY_TABLE)
    }

    /// The event patterns of the stream relay's `FilterCriteria`, as JSON text.
    ///
    /// # Errors
    /// [`TemplateError`] when the mapping or its filters are missing.
    pub fn stream_filter_patterns(&self) -> Result<Vec<String>, TemplateError> {
        let id = logical_id::RELAY_EVENT_SOURCE_MAPPING;
        let criteria = self
            .resource(id)?
            .properties
            .get("FilterCriteria")
            .cloned()
            .ok_or_else(|| invalid(id, "has no FilterCriteria"))?;
        let criteria: FilterCriteria =
            serde_norway::from_value(criteria).map_err(|e| invalid(id, e))?;
        Ok(criteria.filters.into_iter().map(|f| f.pattern).collect())
    }

    /// A property as plain text: scalars as written, `!Ref` to a parameter as its default.
    /// `None` when the property is absent or another intrinsic function (e.g. `!GetAtt`).
    ///
    /// # Errors
    /// [`TemplateError::MissingResource`] when the resource is missing.
    pub fn scalar_property(
        &self,
        logical_id: &str,
        property: &str,
    ) -> Result<Option<String>, TemplateError> {
        let value = self.resource(logical_id)?.properties.get(property);
        Ok(value.and_then(|v| self.resolve_scalar(v)))
    }

    /// A property nested under `path` (e.g. `["StorageConfiguration", "RetentionPeriodInDays"]`)
    /// as plain text, resolved as [`Self::scalar_property`] resolves a top-level one.
    ///
    /// # Errors
    /// [`TemplateError::MissingResource`] when the resource is missing.
    pub fn scalar_at(
        &self,
        logical_id: &str,
        path: &[&str],
    ) -> Result<Option<String>, TemplateError> {
        let mut value = Some(&self.resource(logical_id)?.properties);
        for key in path {
            value = value.and_then(|v| v.get(*key));
        }
        Ok(value.and_then(|v| self.resolve_scalar(v)))
    }

    /// The list nested under `path` (e.g. a bucket's encryption rules), as written; empty when
    /// absent or not a list.
    ///
    /// # Errors
    /// [`TemplateError::MissingResource`] when the resource is missing.
    pub fn sequence_at(
        &self,
        logical_id: &str,
        path: &[&str],
    ) -> Result<Vec<Value>, TemplateError> {
        let mut value = Some(&self.resource(logical_id)?.properties);
        for key in path {
            value = value.and_then(|v| v.get(*key));
        }
        Ok(value
            .and_then(Value::as_sequence)
            .cloned()
            .unwrap_or_default())
    }

    /// Every scalar property of a resource (after [`Self::scalar_property`] resolution), by name.
    ///
    /// # Errors
    /// [`TemplateError::MissingResource`] when the resource is missing.
    pub fn scalar_properties(
        &self,
        logical_id: &str,
    ) -> Result<BTreeMap<String, String>, TemplateError> {
        let Some(properties) = self.resource(logical_id)?.properties.as_mapping() else {
            return Ok(BTreeMap::new());
        };
        Ok(properties
            .iter()
            .filter_map(|(k, v)| Some((k.as_str()?.to_owned(), self.resolve_scalar(v)?)))
            .collect())
    }

    /// The template as CloudFormation creates it when the parameters in `values` take those
    /// values (the others their defaults): only the resources whose `Condition` holds, each
    /// `!If` in their properties replaced by the branch its condition picks (a `!Ref
    /// AWS::NoValue` branch removes the property or list item), and `!Ref` to a parameter read
    /// as its value by [`Self::scalar_property`].
    ///
    /// # Errors
    /// [`TemplateError::Invalid`] when a value is not one of the parameter's `AllowedValues`, a
    /// parameter is unknown, or a condition uses a function other than `!Equals`, `!Not`,
    /// `!And`, `!Or` and `!Condition` or names a condition that does not exist.
    pub fn with_parameters(&self, values: &[(&str, &str)]) -> Result<Self, TemplateError> {
        let mut chosen = self.clone();
        for (name, value) in values {
            let parameter = chosen
                .parameters
                .get_mut(*name)
                .ok_or_else(|| invalid("Parameters", format!("has no parameter {name}")))?;
            let allowed = parameter.allowed_values.as_ref().is_none_or(|allowed| {
                allowed
                    .iter()
                    .any(|a| self.resolve_scalar(a).as_deref() == Some(*value))
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
            holds.insert(name.clone(), chosen.condition_holds(name, 0)?);
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
    fn condition_holds(&self, name: &str, depth: usize) -> Result<bool, TemplateError> {
        // Conditions may refer to each other, never in a cycle; this bounds a mistaken one.
        const MAX_DEPTH: usize = 16;
        if depth > MAX_DEPTH {
            return Err(invalid("Conditions", format!("{name} refers to itself")));
        }
        let expression = self
            .conditions
            .get(name)
            .ok_or_else(|| invalid("Conditions", format!("has no condition {name}")))?;
        self.evaluate(expression, depth + 1)
            .map_err(|message| invalid("Conditions", format!("{name}: {message}")))
    }

    fn evaluate(&self, expression: &Value, depth: usize) -> Result<bool, String> {
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
            let value = |v: &Value| {
                self.resolve_scalar(v)
                    .ok_or_else(|| format!("cannot read {v:?} as a value"))
            };
            Ok(value(left)? == value(right)?)
        } else if tagged.tag == "Not" {
            let arguments = arguments()?;
            let [inner] = arguments.as_slice() else {
                return Err("!Not takes one condition".to_owned());
            };
            Ok(!self.evaluate(inner, depth)?)
        } else if tagged.tag == "And" || tagged.tag == "Or" {
            let results = arguments()?
                .iter()
                .map(|inner| self.evaluate(inner, depth))
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
            self.condition_holds(name, depth).map_err(|e| e.to_string())
        } else {
            Err(format!("!{} is not a condition function", tagged.tag))
        }
    }

    fn resolve_scalar(&self, value: &Value) -> Option<String> {
        match value {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            Value::Bool(b) => Some(b.to_string()),
            Value::Tagged(tagged) if tagged.tag == "Ref" => {
                let name = tagged.value.as_str()?;
                let default = self.parameters.get(name)?.default.as_ref()?;
                self.resolve_scalar(default)
            }
            _ => None,
        }
    }

    fn typed_properties<T: serde::de::DeserializeOwned>(
        &self,
        logical_id: &str,
    ) -> Result<T, TemplateError> {
        let properties = self.resource(logical_id)?.properties.clone();
        serde_norway::from_value(properties).map_err(|e| invalid(logical_id, e))
    }
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

fn invalid(resource: &str, message: impl std::fmt::Display) -> TemplateError {
    TemplateError::Invalid {
        resource: resource.to_owned(),
        message: message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_shared::schema::{DEFAULT_INDEX_NAME, attr};

    fn template() -> Template {
        Template::embedded().expect("the embedded template parses")
    }

    #[test]
    fn table_keys_and_index_use_the_shared_schema_names() {
        let table = template().outbox_table().unwrap();

        let keys: Vec<_> = table
            .key_schema
            .iter()
            .map(|k| (k.attribute_name.as_str(), k.key_type.as_str()))
            .collect();
        assert_eq!(keys, [(attr::PK, "HASH"), (attr::SK, "RANGE")]);
        let index = &table.global_secondary_indexes[0];
        assert_eq!(table.global_secondary_indexes.len(), 1);
        assert_eq!(index.index_name, DEFAULT_INDEX_NAME);
        let index_keys: Vec<_> = index
            .key_schema
            .iter()
            .map(|k| (k.attribute_name.as_str(), k.key_type.as_str()))
            .collect();
        assert_eq!(
            index_keys,
            [(attr::GSI1PK, "HASH"), (attr::GSI1SK, "RANGE")]
        );
        assert_eq!(index.projection.projection_type, "ALL");
        let ttl = table.time_to_live_specification.unwrap();
        assert_eq!(
            (ttl.attribute_name.as_str(), ttl.enabled),
            (attr::TTL, true)
        );
    }

    #[test]
    fn ref_to_a_parameter_resolves_to_its_default_and_other_intrinsics_do_not() {
        let t = Template::parse(
            "Parameters:\n  Days: {Type: Number, Default: 30}\nResources:\n  A:\n    Type: X\n    \
             Properties:\n      Days: !Ref Days\n      Arn: !GetAtt B.Arn\n      On: true\n",
        )
        .unwrap();

        assert_eq!(
            t.scalar_property("A", "Days").unwrap().as_deref(),
            Some("30")
        );
        assert_eq!(t.scalar_property("A", "Arn").unwrap(), None);
        let all = t.scalar_properties("A").unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all["On"], "true");
        assert!(matches!(
            t.scalar_property("Nope", "Days"),
            Err(TemplateError::MissingResource(_))
        ));
    }

    const CONDITIONAL: &str = "Parameters:\n  Kind: {Type: String, Default: a, AllowedValues: [a, b]}\n\
        Conditions:\n  IsB: !Equals [!Ref Kind, b]\n  IsA: !Not [!Condition IsB]\n\
        Resources:\n  A:\n    Type: X\n    Condition: IsA\n  B:\n    Type: Y\n    Condition: IsB\n\
        \x20 Both:\n    Type: Z\n    Properties:\n      Target: !If [IsB, !Ref B, !Ref A]\n\
        \x20     Only: !If [IsB, on, !Ref AWS::NoValue]\n      List: [one, !If [IsA, two, !Ref AWS::NoValue]]\n\
        \x20     Kind: !Ref Kind\n";

    #[test]
    fn with_parameters_keeps_the_resources_whose_condition_holds_and_decides_each_if() {
        let t = Template::parse(CONDITIONAL).unwrap();

        let a = t.with_parameters(&[]).unwrap();
        let b = t.with_parameters(&[("Kind", "b")]).unwrap();

        assert_eq!(a.resources.keys().collect::<Vec<_>>(), ["A", "Both"]);
        assert_eq!(b.resources.keys().collect::<Vec<_>>(), ["B", "Both"]);
        let both = |t: &Template| serde_json::to_value(&t.resources["Both"].properties).unwrap();
        assert_eq!(
            both(&a),
            serde_json::json!({"Target": {"!Ref": "A"}, "List": ["one", "two"], "Kind": {"!Ref": "Kind"}})
        );
        assert_eq!(
            both(&b),
            serde_json::json!({"Target": {"!Ref": "B"}, "Only": "on", "List": ["one"], "Kind": {"!Ref": "Kind"}})
        );
        assert_eq!(
            b.scalar_property("Both", "Kind").unwrap().as_deref(),
            Some("b")
        );
    }

    #[test]
    fn with_parameters_refuses_a_value_outside_allowed_values_and_an_unknown_parameter() {
        let t = Template::parse(CONDITIONAL).unwrap();

        let outside = t.with_parameters(&[("Kind", "c")]).unwrap_err();
        let unknown = t.with_parameters(&[("Kinds", "a")]).unwrap_err();

        assert!(outside.to_string().contains("AllowedValues"), "{outside}");
        assert!(unknown.to_string().contains("Kinds"), "{unknown}");
    }

    #[test]
    fn each_bus_kind_creates_its_own_bus_only() {
        use super::logical_id::{
            CUSTOM_EVENT_BUS, EVENT_ARCHIVE, EVENT_BUS, ORDER_EVENTS_SUBSCRIBER,
        };
        use super::parameter::{CLASSIC, CUSTOM, EVENT_BUS_KIND};

        let default = template().with_parameters(&[]).unwrap();
        let classic = template()
            .with_parameters(&[(EVENT_BUS_KIND, CLASSIC)])
            .unwrap();
        let custom = template()
            .with_parameters(&[(EVENT_BUS_KIND, CUSTOM)])
            .unwrap();

        let has = |t: &Template, id: &str| t.resources.contains_key(id);
        for t in [&default, &classic] {
            assert!(has(t, EVENT_BUS) && has(t, EVENT_ARCHIVE));
            assert!(!has(t, CUSTOM_EVENT_BUS) && !has(t, ORDER_EVENTS_SUBSCRIBER));
        }
        assert!(has(&custom, CUSTOM_EVENT_BUS) && has(&custom, ORDER_EVENTS_SUBSCRIBER));
        assert!(!has(&custom, EVENT_BUS) && !has(&custom, EVENT_ARCHIVE));
    }

    #[test]
    fn stream_filter_is_valid_json_for_outbox_inserts_and_ttl_deletions() {
        let patterns = template().stream_filter_patterns().unwrap();

        assert_eq!(patterns.len(), 2, "{patterns:?}");
        let inserts: serde_json::Value = serde_json::from_str(&patterns[0]).unwrap();
        assert_eq!(inserts["eventName"], serde_json::json!(["INSERT"]));
        assert_eq!(
            inserts["dynamodb"]["NewImage"][attr::ENTITY_TYPE]["S"],
            serde_json::json!(["OutboxEvent"])
        );
        let ttl_deletions: serde_json::Value = serde_json::from_str(&patterns[1]).unwrap();
        assert_eq!(ttl_deletions["eventName"], serde_json::json!(["REMOVE"]));
        assert_eq!(
            ttl_deletions["userIdentity"],
            serde_json::json!({"type": ["Service"], "principalId": ["dynamodb.amazonaws.com"]})
        );
        assert_eq!(
            ttl_deletions["dynamodb"]["OldImage"][attr::STATUS]["S"],
            serde_json::json!(["PENDING"])
        );
    }
}
