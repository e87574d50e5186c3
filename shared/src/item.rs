//! [`OutboxItem`]: the one record type for an outbox event item, used in both directions
//! (`serde_dynamo::to_item` when writing, `serde_dynamo::from_item` when relaying).

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::claim_check::PayloadRef;
use crate::config::OutboxConfig;
use crate::entry_field::{EntryFieldError, check_detail_type, check_trace_header};
use crate::region::Region;
use crate::schema::{self, entity};
use crate::shard::shard_for;
use crate::time::format_timestamp;
use crate::trace_context::TraceContext;

/// Lifecycle of an outbox event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OutboxStatus {
    /// Written, not yet published; indexed in `GSI1`.
    Pending,
    /// Published to EventBridge; removed from `GSI1`.
    Published,
    /// Could never be published; sent to the dead-letter queue with a reason; removed from `GSI1`.
    DeadLettered,
}

impl OutboxStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => schema::status::PENDING,
            Self::Published => schema::status::PUBLISHED,
            Self::DeadLettered => schema::status::DEAD_LETTERED,
        }
    }
}

impl fmt::Display for OutboxStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An outbox event item as stored in the table.
///
/// Required attributes: `PK`, `SK`, `EntityType`, `EventId`, `EventType`, `Payload` (or
/// `PayloadRef`, a map `{Uri, Size, Sha256}`, when the payload is in S3), `Status`, `CreatedAt`, and — while the event is pending — `GSI1PK`/`GSI1SK`. Publishing removes the two
/// index keys (sparse index), so they are `Option` here. Everything else is optional, so items
/// written by other clients with only the required attributes decode too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxItem {
    #[serde(rename = "PK")]
    pub pk: String,
    #[serde(rename = "SK")]
    pub sk: String,
    #[serde(rename = "EntityType")]
    pub entity_type: String,
    #[serde(rename = "EventId")]
    pub event_id: String,
    #[serde(rename = "EventType")]
    pub event_type: String,
    /// The event's data as a JSON document, stored as a string; empty when the payload is in S3
    /// ([`payload_ref`](Self::payload_ref)).
    #[serde(rename = "Payload", default, skip_serializing_if = "String::is_empty")]
    pub payload: String,
    /// Where the payload is when it was too large for the item: the writer stored it in S3 first
    /// ([`crate::claim_check`]). An item has a `Payload` or a `PayloadRef`, never both.
    #[serde(
        rename = "PayloadRef",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub payload_ref: Option<PayloadRef>,
    #[serde(rename = "Status")]
    pub status: OutboxStatus,
    /// ISO-8601 UTC.
    #[serde(rename = "CreatedAt")]
    pub created_at: String,
    #[serde(rename = "GSI1PK", default, skip_serializing_if = "Option::is_none")]
    pub gsi1pk: Option<String>,
    #[serde(rename = "GSI1SK", default, skip_serializing_if = "Option::is_none")]
    pub gsi1sk: Option<String>,
    #[serde(
        rename = "AggregateType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub aggregate_type: Option<String>,
    #[serde(
        rename = "AggregateId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub aggregate_id: Option<String>,
    /// The aggregate's version when the event was written, for consumer-side ordering.
    #[serde(rename = "Sequence", default, skip_serializing_if = "Option::is_none")]
    pub sequence: Option<u64>,
    /// Epoch seconds; DynamoDB TTL deletes the item after it (cleanup only).
    #[serde(rename = "ttl", default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<i64>,
    /// Trace context captured at write time (`X-Amzn-Trace-Id` format), propagated on publish.
    #[serde(
        rename = "TraceHeader",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub trace_header: Option<String>,
    /// W3C Trace Context `traceparent` captured at write time, carried in the envelope on every
    /// target ([`crate::trace_context`]).
    #[serde(
        rename = "TraceParent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub trace_parent: Option<String>,
    /// The `tracestate` of `TraceParent`, if any.
    #[serde(
        rename = "TraceState",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub trace_state: Option<String>,
    /// On a global table, the region whose writer wrote the event
    /// ([`OutboxConfig::origin_region`]): its relays publish it, and it is pending under that
    /// region's partitions. Absent on a single-region table, and on items another client wrote
    /// without it (the first region of the relays' `--regions` publishes those).
    #[serde(
        rename = "OriginRegion",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub origin_region: Option<Region>,
}

/// The primary key of an item.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ItemKey {
    pub pk: String,
    pub sk: String,
}

impl fmt::Display for ItemKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.pk, self.sk)
    }
}

/// What a caller says about a new event; [`OutboxItem::pending`] turns it into an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOutboxEvent {
    /// Partition key of the item collection the event belongs to (the aggregate's `PK`), so the
    /// event sits beside the business item it describes.
    pub partition_key: String,
    /// Becomes the EventBridge `DetailType`.
    pub event_type: String,
    pub aggregate_type: String,
    /// Chooses the shard: one aggregate's events share a shard.
    pub aggregate_id: String,
    pub sequence: Option<u64>,
    /// Any JSON document; becomes `data` in the envelope.
    pub payload: serde_json::Value,
    /// Becomes the entry's `TraceHeader`: 1 to 500 characters.
    pub trace_header: Option<String>,
    /// The W3C trace context the event was written in: `TraceParent` and `TraceState`, carried
    /// in the envelope.
    pub trace_context: Option<TraceContext>,
}

/// An outbox event that cannot be written as given.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ItemError {
    #[error("{field} must not be empty")]
    Empty { field: &'static str },
    #[error("{field} is {len} bytes, more than the {max} allowed")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    // The value is not quoted: an id may hold personal data (an e-mail address as user id).
    #[error("{field} must not contain '#' (it separates key segments)")]
    KeySeparator { field: &'static str },
    #[error("{field} contains a control character")]
    ControlCharacter { field: &'static str },
    /// An attribute EventBridge would refuse on the event's `PutEvents` entry, and with it the
    /// whole call.
    #[error(transparent)]
    EntryField(#[from] EntryFieldError),
}

/// Longest id accepted in a key segment. Far below DynamoDB's 2,048-byte partition key limit,
/// so prefixes always fit.
pub const MAX_ID_BYTES: usize = 256;

/// Checks an id that becomes part of a key: non-empty, at most [`MAX_ID_BYTES`], no `#` (the key
/// separator) and no control characters.
///
/// # Errors
/// The [`ItemError`] naming `field` and what is wrong with it.
pub fn validate_id(field: &'static str, value: &str) -> Result<(), ItemError> {
    if value.trim().is_empty() {
        return Err(ItemError::Empty { field });
    }
    if value.len() > MAX_ID_BYTES {
        return Err(ItemError::TooLong {
            field,
            len: value.len(),
            max: MAX_ID_BYTES,
        });
    }
    if value.contains('#') {
        return Err(ItemError::KeySeparator { field });
    }
    if value.chars().any(char::is_control) {
        return Err(ItemError::ControlCharacter { field });
    }
    Ok(())
}

impl OutboxItem {
    /// A new pending event with a fresh time-ordered id (UUIDv7), indexed on its aggregate's shard.
    ///
    /// # Errors
    /// [`ItemError`] when the event type, aggregate type or aggregate id is empty or malformed.
    pub fn pending(
        event: NewOutboxEvent,
        config: &OutboxConfig,
        now: DateTime<Utc>,
    ) -> Result<Self, ItemError> {
        let event_id = uuid::Uuid::now_v7().to_string();
        Self::pending_with_id(event, config, now, event_id)
    }

    /// Like [`OutboxItem::pending`] with a caller-chosen event id (deterministic replays, tests).
    ///
    /// # Errors
    /// [`ItemError`] when an id, the event type or the aggregate type is empty or malformed, or
    /// the event type or trace header is one EventBridge would refuse
    /// ([`ItemError::EntryField`]).
    pub fn pending_with_id(
        event: NewOutboxEvent,
        config: &OutboxConfig,
        now: DateTime<Utc>,
        event_id: String,
    ) -> Result<Self, ItemError> {
        if event.partition_key.is_empty() {
            return Err(ItemError::Empty {
                field: "partition key",
            });
        }
        validate_id("event id", &event_id)?;
        // Before `validate_id`, whose longer byte limit would name the wrong bound.
        check_detail_type(&event.event_type)?;
        validate_id("event type", &event.event_type)?;
        if let Some(trace_header) = &event.trace_header {
            check_trace_header(trace_header)?;
        }
        validate_id("aggregate type", &event.aggregate_type)?;
        validate_id("aggregate id", &event.aggregate_id)?;
        let created_at = format_timestamp(now);
        let shard = shard_for(&event.aggregate_id, config.shard_count);
        let ttl =
            now.timestamp() + i64::try_from(config.ttl_retention.as_secs()).unwrap_or(i64::MAX);
        Ok(Self {
            pk: event.partition_key,
            sk: schema::outbox_sk(&event_id),
            entity_type: entity::OUTBOX_EVENT.to_owned(),
            gsi1pk: Some(schema::pending_partition(
                config.origin_region.as_ref(),
                shard,
            )),
            gsi1sk: Some(schema::pending_sort_key(&created_at, &event_id)),
            event_id,
            event_type: event.event_type,
            payload: event.payload.to_string(),
            payload_ref: None,
            status: OutboxStatus::Pending,
            created_at,
            aggregate_type: Some(event.aggregate_type),
            aggregate_id: Some(event.aggregate_id),
            sequence: event.sequence,
            ttl: Some(ttl),
            trace_header: event.trace_header,
            trace_parent: event
                .trace_context
                .as_ref()
                .map(|c| c.traceparent().to_owned()),
            trace_state: event
                .trace_context
                .as_ref()
                .and_then(|c| c.tracestate().map(str::to_owned)),
            origin_region: config.origin_region.clone(),
        })
    }

    /// Checks the attributes that become `PutEvents` entry fields (`EventType`, `TraceHeader`)
    /// against what EventBridge accepts: an item built or changed by hand passes through here.
    ///
    /// # Errors
    /// [`EntryFieldError`] naming the attribute and the limit.
    pub fn check_entry_fields(&self) -> Result<(), EntryFieldError> {
        check_detail_type(&self.event_type)?;
        self.trace_header
            .as_deref()
            .map_or(Ok(()), check_trace_header)
    }

    pub fn key(&self) -> ItemKey {
        ItemKey {
            pk: self.pk.clone(),
            sk: self.sk.clone(),
        }
    }

    /// What orders this event among others: its aggregate (`AggregateId`), or its item
    /// collection (`PK`) when another client wrote none. Events with one ordering key are never
    /// published out of order.
    pub fn ordering_key(&self) -> &str {
        self.aggregate_id.as_deref().unwrap_or(&self.pk)
    }

    /// The W3C trace context stored on the item as a receiver keeps it
    /// ([`TraceContext::received`]): none when `TraceParent` is missing or invalid, without
    /// `TraceState` when only that is invalid; the error says what was dropped.
    pub fn trace_context(
        &self,
    ) -> (
        Option<TraceContext>,
        Option<crate::trace_context::TraceContextError>,
    ) {
        TraceContext::received(self.trace_parent.as_deref(), self.trace_state.as_deref())
    }

    /// Whether this is an outbox event item (`EntityType = OutboxEvent`).
    pub fn is_outbox_event(&self) -> bool {
        self.entity_type == entity::OUTBOX_EVENT
    }

    /// Converts the item to DynamoDB attribute values.
    ///
    /// # Errors
    /// Only if serialization fails, which the field types rule out in practice.
    pub fn to_item(
        &self,
    ) -> Result<
        std::collections::HashMap<String, aws_sdk_dynamodb::types::AttributeValue>,
        serde_dynamo::Error,
    > {
        serde_dynamo::to_item(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::types::AttributeValue as Av;
    use chrono::TimeZone;
    use std::collections::HashMap;
    use std::time::Duration;

    fn config() -> OutboxConfig {
        OutboxConfig {
            ttl_retention: Duration::from_secs(7 * 24 * 3600),
            ..OutboxConfig::new("orders")
        }
    }

    fn new_event() -> NewOutboxEvent {
        NewOutboxEvent {
            partition_key: schema::user_pk("u1"),
            event_type: "OrderCreated".into(),
            aggregate_type: "Order".into(),
            aggregate_id: "o1".into(),
            sequence: Some(1),
            payload: serde_json::json!({"orderId": "o1"}),
            trace_header: None,
            trace_context: None,
        }
    }

    #[test]
    fn pending_item_has_the_documented_keys() {
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap();
        let item = OutboxItem::pending_with_id(new_event(), &config(), now, "e1".into()).unwrap();
        let shard = shard_for("o1", config().shard_count);
        assert_eq!(item.pk, "USER#u1");
        assert_eq!(item.sk, "OUTBOX#e1");
        assert_eq!(
            item.gsi1pk.as_deref(),
            Some(format!("OUTBOX#PENDING#{shard}").as_str())
        );
        assert_eq!(
            item.gsi1sk.as_deref(),
            Some("EVENT#2026-11-22T10:00:00.000Z#e1")
        );
        assert_eq!(item.ttl, Some(now.timestamp() + 7 * 24 * 3600));
        assert_eq!(item.status, OutboxStatus::Pending);
        assert_eq!(item.payload, r#"{"orderId":"o1"}"#);
    }

    #[test]
    fn a_global_tables_item_is_stamped_and_pending_under_its_regions_partition() {
        let region = Region::new("eu-west-1").unwrap();
        let config = OutboxConfig {
            origin_region: Some(region.clone()),
            ..config()
        };
        let item = OutboxItem::pending(new_event(), &config, Utc::now()).unwrap();
        let shard = shard_for("o1", config.shard_count);
        assert_eq!(item.origin_region, Some(region));
        assert_eq!(
            item.gsi1pk,
            Some(format!("OUTBOX#PENDING#eu-west-1#{shard}"))
        );
        let av = item.to_item().unwrap();
        assert_eq!(av["OriginRegion"], Av::S("eu-west-1".into()));
        let back: OutboxItem = serde_dynamo::from_item(av).unwrap();
        assert_eq!(back, item);
        // A single-region item has none
        let plain = OutboxItem::pending(new_event(), &self::config(), Utc::now()).unwrap();
        assert!(!plain.to_item().unwrap().contains_key("OriginRegion"));
    }

    #[test]
    fn every_attribute_of_an_outbox_item_is_an_outbox_attribute_and_none_is_an_orders_own() {
        // An item with every optional attribute set
        let item = OutboxItem {
            origin_region: Some(Region::new("us-east-1").unwrap()),
            trace_header: Some("Root=1-5759e988-bd862e3fe1be46a994272793".into()),
            trace_parent: Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into()),
            trace_state: Some("k=v".into()),
            payload_ref: Some(PayloadRef::of("b", "payloads/e1", b"{}")),
            ..OutboxItem::pending(new_event(), &config(), Utc::now()).unwrap()
        };
        for name in item.to_item().unwrap().keys() {
            assert!(
                schema::OUTBOX_ATTRIBUTES.contains(&name.as_str()),
                "{name} is not in OUTBOX_ATTRIBUTES"
            );
        }
        for order_own in [
            schema::attr::ORDER_ID,
            schema::attr::USER_ID,
            schema::attr::AMOUNT,
            schema::attr::ITEMS,
            schema::attr::VERSION,
            schema::attr::UPDATED_AT,
        ] {
            assert!(
                !schema::OUTBOX_ATTRIBUTES.contains(&order_own),
                "{order_own}"
            );
        }
    }

    #[test]
    fn round_trips_through_attribute_values() {
        let item = OutboxItem::pending(new_event(), &config(), Utc::now()).unwrap();
        let av = item.to_item().unwrap();
        assert_eq!(av["Status"], Av::S("PENDING".into()));
        assert_eq!(av["Sequence"], Av::N("1".into()));
        let back: OutboxItem = serde_dynamo::from_item(av).unwrap();
        assert_eq!(back, item);
    }

    #[test]
    fn decodes_an_item_with_only_the_required_attributes() {
        let av: HashMap<String, Av> = [
            ("PK", "USER#x"),
            ("SK", "OUTBOX#e9"),
            ("EntityType", "OutboxEvent"),
            ("EventId", "e9"),
            ("EventType", "OrderCreated"),
            ("Payload", "{}"),
            ("Status", "PENDING"),
            ("CreatedAt", "2026-11-22T10:00:00Z"),
            ("GSI1PK", "OUTBOX#PENDING#3"),
            ("GSI1SK", "EVENT#2026-11-22T10:00:00Z#e9"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Av::S(v.to_owned())))
        .collect();
        let item: OutboxItem = serde_dynamo::from_item(av).unwrap();
        assert_eq!(item.event_id, "e9");
        assert_eq!(item.aggregate_id, None);
        assert!(item.is_outbox_event());
    }

    #[test]
    fn refuses_an_event_type_or_trace_header_eventbridge_would_refuse() {
        let mut long_type = new_event();
        long_type.event_type = "T".repeat(129);
        let err = OutboxItem::pending(long_type, &config(), Utc::now()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "EventType is 129 characters; EventBridge accepts a DetailType of 1 to 128"
        );
        for (header, chars) in [(String::new(), 0), ("t".repeat(501), 501)] {
            let mut traced = new_event();
            traced.trace_header = Some(header);
            let err = OutboxItem::pending(traced, &config(), Utc::now()).unwrap_err();
            assert_eq!(
                err,
                ItemError::EntryField(EntryFieldError {
                    attribute: "TraceHeader",
                    entry_field: "TraceHeader",
                    chars,
                    min: 1,
                    max: 500,
                })
            );
        }
        let mut longest = new_event();
        longest.event_type = "T".repeat(128);
        longest.trace_header = Some("t".repeat(500));
        let item = OutboxItem::pending(longest, &config(), Utc::now()).unwrap();
        assert_eq!(item.check_entry_fields(), Ok(()));
    }

    #[test]
    fn a_malformed_id_is_named_and_not_quoted() {
        // Given ids that hold personal data and a key separator or a control character
        let secret = "jane.doe@example.com";
        for (id, what) in [
            (format!("{secret}#1"), "'#'"),
            (format!("{secret}\n"), "control character"),
        ] {
            // When they are checked
            let reason = validate_id("user id", &id).unwrap_err().to_string();

            // Then the error names the field and what is wrong, never the value
            assert!(!reason.contains(secret), "{reason}");
            assert!(
                reason.contains("user id") && reason.contains(what),
                "{reason}"
            );
        }
    }

    #[test]
    fn rejects_malformed_ids() {
        let mut e = new_event();
        e.aggregate_id = "a#b".into();
        assert!(matches!(
            OutboxItem::pending(e, &config(), Utc::now()),
            Err(ItemError::KeySeparator {
                field: "aggregate id",
                ..
            })
        ));
        let mut e = new_event();
        e.event_type = " ".into();
        assert!(matches!(
            OutboxItem::pending(e, &config(), Utc::now()),
            Err(ItemError::Empty {
                field: "event type"
            })
        ));
    }
}
