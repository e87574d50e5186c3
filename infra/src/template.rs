//! The deployable template, embedded and parsed, so local provisioning and tests read the same
//! resource definitions that CloudFormation deploys.
//!
//! CloudFormation short-form tags (`!Ref`, `!GetAtt`, `!Sub`, …) parse as
//! [`serde_norway::Value::Tagged`]; only `!Ref` to a parameter is resolved (to its default),
//! which is all local provisioning needs. Everything else is read as plain YAML.

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
    /// The stream Lambda's event source mapping.
    pub const RELAY_EVENT_SOURCE_MAPPING: &str = "RelayEventSourceMapping";
    /// The poller fleet's shard leases (`relay-poller run --create-lease-table` creates the same
    /// table locally).
    pub const LEASE_TABLE: &str = "LeaseTable";
    /// A consumer's idempotency table (optional, `CreateConsumerIdempotencyTable`).
    pub const CONSUMER_IDEMPOTENCY_TABLE: &str = "ConsumerIdempotencyTable";
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
}

/// The parsed template.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct Template {
    #[serde(default)]
    parameters: BTreeMap<String, Parameter>,
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
