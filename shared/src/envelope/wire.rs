//! The wire shapes of an event's body, one type each, for both directions: the relays serialize
//! them from borrowed strings (`S = &str`), a consumer deserializes them (`S = String`).
//!
//! - [`Envelope`]: `{"metadata": {…}, "data": …}`, its [`EventMetadata`];
//! - [`CloudEvent`]: a CloudEvents 1.0 event in structured mode, JSON event format;
//! - [`DataRef`]: the claim check's members in place of `data` in either (`dataref`, `datasize`,
//!   `datasha256`).

use serde::{Deserialize, Serialize};

use crate::claim_check::PayloadRef;

/// `metadata` of the envelope: who the event is about and when it happened.
///
/// Generic over the string type so the relays serialize it from borrowed `&str`s; consumers use
/// the default, `String`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", bound(deserialize = "S: Deserialize<'de>"))]
pub struct EventMetadata<S = String> {
    /// Stable across re-publishes: the de-duplication key.
    pub event_id: S,
    pub event_type: S,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate_type: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate_id: Option<S>,
    /// The aggregate's version when the event was written: consumers order by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    /// The outbox item's `CreatedAt`.
    pub occurred_at: S,
    /// The W3C `traceparent` the event was written in: a consumer continues its trace from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<S>,
    /// The `tracestate` of `traceparent`, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<S>,
}

/// The envelope: the `Detail` (or message body) of every event in the default format.
/// Consumers deserialize `Envelope<TheirData>`; the relays serialize `Envelope<&RawValue, &str>`,
/// so the payload is embedded as it is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound(deserialize = "D: Deserialize<'de>, S: Deserialize<'de>"))]
pub struct Envelope<D, S = String> {
    pub metadata: EventMetadata<S>,
    pub data: D,
}

/// A CloudEvent as the relays write it: the context attributes, `data`, and the outbox's
/// extensions (`sequence`, `partitionkey`, `aggregatetype`, `traceparent`, `tracestate`).
///
/// The relays serialize `CloudEvent<&RawValue, &str>`. A consumer reads it with
/// `D = serde::de::IgnoredAny` to take its attributes without copying its data, which it reads
/// apart. Only `specversion`, `id` and `type` are required to read one: the other attributes
/// the consumer does not need are taken when present.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound(deserialize = "D: Deserialize<'de>, S: Deserialize<'de> + Default"))]
pub struct CloudEvent<D, S = String> {
    /// [`CLOUDEVENTS_SPEC_VERSION`](super::CLOUDEVENTS_SPEC_VERSION).
    pub specversion: S,
    /// The outbox item's `EventId`: the de-duplication key.
    pub id: S,
    /// The relays' `EVENT_SOURCE`.
    #[serde(default)]
    pub source: S,
    /// The item's `EventType`.
    #[serde(rename = "type")]
    pub event_type: S,
    /// The aggregate's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<S>,
    /// The item's `CreatedAt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<S>,
    /// [`DATA_CONTENT_TYPE`](super::DATA_CONTENT_TYPE).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datacontenttype: Option<S>,
    /// The payload; in its place, the members of a [`DataRef`] when it is in S3.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<D>,
    /// The aggregate's version, zero-padded to
    /// [`CLOUDEVENTS_SEQUENCE_DIGITS`](super::CLOUDEVENTS_SEQUENCE_DIGITS) so it orders as a
    /// string as it does as a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<String>,
    /// The key the relays order by: the aggregate, or the item collection without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partitionkey: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregatetype: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<S>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<S>,
}

/// The name of [`DataRef`]'s member that tells a body with its data in S3.
pub const DATAREF: &str = "dataref";

/// The claim check in an event's body, in place of `data` (the envelope's top level, a
/// CloudEvent's extensions): the CloudEvents claim-check extension `dataref` (`s3://BUCKET/KEY`)
/// with the payload's size in bytes and its SHA-256 (base64).
///
/// The same reference as [`PayloadRef`], whose names are the outbox item's (`Uri`, `Size`,
/// `Sha256`); [`DataRef::of`] and `From` convert.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(bound(deserialize = "S: Deserialize<'de>"))]
pub struct DataRef<S = String> {
    pub dataref: S,
    pub datasize: u64,
    pub datasha256: S,
}

impl<'a> DataRef<&'a str> {
    /// The members naming `reference`.
    pub fn of(reference: &'a PayloadRef) -> Self {
        Self {
            dataref: &reference.uri,
            datasize: reference.size,
            datasha256: &reference.sha256,
        }
    }
}

impl From<DataRef> for PayloadRef {
    fn from(members: DataRef) -> Self {
        Self {
            uri: members.dataref,
            size: members.datasize,
            sha256: members.datasha256,
        }
    }
}
