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

mod conditions;
mod table;

pub use table::{
    AttributeDefinition, IndexSpec, KeyElement, Projection, StreamSpec, TableSpec, TtlSpec,
};

/// `infra/template.yaml`, as compiled into this crate.
pub const TEMPLATE_YAML: &str = include_str!("../../template.yaml");

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
    /// The outbox table as a global table (`GlobalTableRegions`), in the stack that creates it.
    pub const OUTBOX_GLOBAL_TABLE: &str = "OutboxGlobalTable";
    /// The lease table as a global table, beside [`OUTBOX_GLOBAL_TABLE`].
    pub const LEASE_GLOBAL_TABLE: &str = "LeaseGlobalTable";
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
    /// A global table's regions (the relays' `OUTBOX_REGIONS`); empty for a single-region table.
    pub const GLOBAL_TABLE_REGIONS: &str = "GlobalTableRegions";
    /// The global tables' name, the same in every region (the lease table's with `-leases`).
    pub const GLOBAL_TABLE_NAME: &str = "GlobalTableName";
    /// Empty in the stack that creates the global tables; elsewhere its region's replica's stream.
    pub const GLOBAL_TABLE_STREAM_ARN: &str = "GlobalTableStreamArn";
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

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct FilterCriteria {
    filters: Vec<Filter>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Filter {
    /// The pattern's text, or a `!Sub` (`Fn::Sub` once transformed) of it naming the stack's
    /// region.
    pattern: Value,
}

/// The stack's region in a `!Sub`.
const REGION_VARIABLE: &str = "${AWS::Region}";

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

    /// The keys, index, stream and TTL of the table `logical_id`: an `AWS::DynamoDB::Table`,
    /// or an `AWS::DynamoDB::GlobalTable` (whose replicas [`Self::replica_regions`] reads).
    ///
    /// # Errors
    /// [`TemplateError`] when the resource is missing or not shaped like a table.
    pub fn table(&self, logical_id: &str) -> Result<TableSpec, TemplateError> {
        self.typed_properties(logical_id)
    }

    /// The regions of a global table's replicas (`Replicas[].Region`), each `!Select` of a
    /// `!Split` of the parameters read for their values: call it on the template
    /// [`Self::with_parameters`] decided, whose `!If`s left the replicas of the regions listed.
    ///
    /// # Errors
    /// [`TemplateError::Invalid`] when the resource has no replicas or a region cannot be read.
    pub fn replica_regions(&self, logical_id: &str) -> Result<Vec<String>, TemplateError> {
        let replicas = self
            .resource(logical_id)?
            .properties
            .get("Replicas")
            .and_then(Value::as_sequence)
            .ok_or_else(|| invalid(logical_id, "has no Replicas"))?;
        replicas
            .iter()
            .map(|replica| {
                let region = replica
                    .get("Region")
                    .ok_or_else(|| invalid(logical_id, "has a replica without a Region"))?;
                conditions::condition_value(self, region)
                    .map_err(|message| invalid(logical_id, message))
            })
            .collect()
    }

    /// A value as CloudFormation computes it from the parameters' values: a scalar, a `!Ref` to
    /// a parameter, a `!Sub` of parameters, or a `!Select` of a `!Split` of one.
    ///
    /// # Errors
    /// [`TemplateError::Invalid`] when the value is another intrinsic function, or names no
    /// parameter with a value.
    pub fn value(&self, value: &Value) -> Result<String, TemplateError> {
        conditions::condition_value(self, value).map_err(|message| invalid("a value", message))
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
        self.stream_filter_patterns_in(REGION_VARIABLE)
    }

    /// The event source mapping's filter patterns in a stack in `region` (a `!Sub` of the
    /// stack's region resolved; [`Self::stream_filter_patterns`] leaves it as written).
    ///
    /// # Errors
    /// [`TemplateError`] when the mapping or its filter is missing or malformed.
    pub fn stream_filter_patterns_in(&self, region: &str) -> Result<Vec<String>, TemplateError> {
        let id = logical_id::RELAY_EVENT_SOURCE_MAPPING;
        let criteria = self
            .resource(id)?
            .properties
            .get("FilterCriteria")
            .cloned()
            .ok_or_else(|| invalid(id, "has no FilterCriteria"))?;
        let criteria: FilterCriteria =
            serde_norway::from_value(criteria).map_err(|e| invalid(id, e))?;
        criteria
            .filters
            .into_iter()
            .map(|f| {
                let text = match &f.pattern {
                    Value::String(text) => Some(text.clone()),
                    Value::Tagged(tagged) if tagged.tag == "Sub" => {
                        tagged.value.as_str().map(str::to_owned)
                    }
                    Value::Mapping(map) => map
                        .get("Fn::Sub")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    _ => None,
                };
                text.map(|t| t.replace(REGION_VARIABLE, region))
                    .ok_or_else(|| {
                        invalid(
                            id,
                            format!(
                                "a filter pattern is neither text nor a !Sub: {:?}",
                                f.pattern
                            ),
                        )
                    })
            })
            .collect()
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
        conditions::with_parameters(self, values)
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
mod tests;
