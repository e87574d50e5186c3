//! The typed properties of an `AWS::DynamoDB::Table` that shape the data, as local provisioning
//! creates the table from them.

use serde::Deserialize;

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
