//! `relay-poller inspect`: what happened to an event. Its item's status, shard, age, `ttl`,
//! published or dead-lettered time and reason, and whether it is in the pending index.
//!
//! By event id the item is found with a paginated `Scan` of the table (there is no index by
//! `EventId`): fine for an operator's question, not for a hot path. By key (`--key PK SK`) it is
//! one `GetItem`. Both read an outbox item's attributes only ([`crate::table`]).

use std::collections::HashMap;
use std::fmt::Write as _;

use aws_sdk_dynamodb::types::AttributeValue;
use chrono::{DateTime, Utc};
use outbox_shared::schema::{self, attr, entity};
use outbox_shared::time::{format_timestamp, parse_timestamp};
use outbox_shared::{ItemKey, SdkFailure};
use serde::Serialize;

use crate::table::Attributes;

/// An event as `inspect` reports it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inspection {
    /// What was asked for: an event id, or `PK/SK`.
    pub query: String,
    pub found: bool,
    pub event_id: Option<String>,
    pub event_type: Option<String>,
    pub key: Option<ItemKey>,
    /// `PENDING`, `PUBLISHED` or `DEAD_LETTERED`.
    pub status: Option<String>,
    pub created_at: Option<String>,
    /// Seconds since `created_at`.
    pub age_seconds: Option<f64>,
    /// The item's `GSI1PK` while it is pending.
    pub partition: Option<String>,
    /// The shard of that partition, when it is a shard partition.
    pub shard: Option<u16>,
    /// Whether the item is in the pending index (`GSI1PK` set).
    pub in_pending_index: bool,
    /// Epoch seconds after which DynamoDB's TTL may delete the item.
    pub ttl: Option<i64>,
    /// `ttl` as a timestamp.
    pub expires_at: Option<String>,
    pub published_at: Option<String>,
    pub dead_lettered_at: Option<String>,
    pub dead_letter_reason: Option<String>,
}

impl Inspection {
    fn missing(query: String) -> Self {
        Self {
            query,
            found: false,
            event_id: None,
            event_type: None,
            key: None,
            status: None,
            created_at: None,
            age_seconds: None,
            partition: None,
            shard: None,
            in_pending_index: false,
            ttl: None,
            expires_at: None,
            published_at: None,
            dead_lettered_at: None,
            dead_letter_reason: None,
        }
    }

    /// Reads `item` (an outbox item) as of `now`.
    pub fn of(query: String, item: &Attributes, now: DateTime<Utc>) -> Self {
        let string = |name: &str| item.get(name).and_then(|v| v.as_s().ok()).cloned();
        let created_at = string(attr::CREATED_AT);
        let partition = string(attr::GSI1PK);
        let ttl = item
            .get(attr::TTL)
            .and_then(|v| v.as_n().ok())
            .and_then(|n| n.parse::<i64>().ok());
        Self {
            query,
            found: true,
            event_id: string(attr::EVENT_ID),
            event_type: string(attr::EVENT_TYPE),
            key: string(attr::PK)
                .zip(string(attr::SK))
                .map(|(pk, sk)| ItemKey { pk, sk }),
            status: string(attr::STATUS),
            age_seconds: created_at
                .as_deref()
                .and_then(|t| parse_timestamp(t).ok())
                .map(|t| (now - t).num_milliseconds() as f64 / 1000.0),
            created_at,
            shard: partition
                .as_deref()
                .and_then(schema::parse_pending_shard_pk),
            in_pending_index: partition.is_some(),
            partition,
            expires_at: ttl
                .and_then(|t| DateTime::<Utc>::from_timestamp(t, 0))
                .map(format_timestamp),
            ttl,
            published_at: string(attr::PUBLISHED_AT),
            dead_lettered_at: string(attr::DEAD_LETTERED_AT),
            dead_letter_reason: string(attr::DEAD_LETTER_REASON),
        }
    }

    /// Lines for people.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        if !self.found {
            let _ = writeln!(out, "{}: not found", self.query);
            return out;
        }
        let show = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".to_owned());
        let _ = writeln!(out, "{}", self.query);
        let _ = writeln!(out, "  event id          {}", show(&self.event_id));
        let _ = writeln!(out, "  type              {}", show(&self.event_type));
        if let Some(key) = &self.key {
            let _ = writeln!(out, "  key               {} / {}", key.pk, key.sk);
        }
        let _ = writeln!(out, "  status            {}", show(&self.status));
        let _ = writeln!(
            out,
            "  created at        {} ({})",
            show(&self.created_at),
            self.age_seconds
                .map_or("-".to_owned(), |a| format!("{a:.0} s ago"))
        );
        let _ = writeln!(
            out,
            "  pending index     {}",
            if self.in_pending_index {
                format!("yes, under {}", show(&self.partition))
            } else {
                "no".to_owned()
            }
        );
        let _ = writeln!(out, "  expires at (ttl)  {}", show(&self.expires_at));
        if self.published_at.is_some() {
            let _ = writeln!(out, "  published at      {}", show(&self.published_at));
        }
        if self.dead_lettered_at.is_some() {
            let _ = writeln!(out, "  dead-lettered at  {}", show(&self.dead_lettered_at));
            let _ = writeln!(
                out,
                "  reason            {}",
                show(&self.dead_letter_reason)
            );
        }
        out
    }
}

/// The calls of [`Inspector`]: an item by key, a scan of the table by event id, each of an
/// outbox item's attributes.
pub const CALLS: &[relay_runtime::permissions::Call] = &[
    relay_runtime::permissions::Call::new(
        "dynamodb:GetItem",
        relay_runtime::permissions::Target::OutboxAttributes,
    ),
    relay_runtime::permissions::Call::new(
        "dynamodb:Scan",
        relay_runtime::permissions::Target::OutboxAttributes,
    ),
];

/// Looks up outbox items.
#[derive(Debug, Clone)]
pub struct Inspector {
    pub dynamodb: aws_sdk_dynamodb::Client,
    pub table_name: String,
}

impl Inspector {
    /// The item at `key`.
    ///
    /// # Errors
    /// When the read fails.
    pub async fn by_key(
        &self,
        key: &ItemKey,
        now: DateTime<Utc>,
    ) -> Result<Inspection, SdkFailure> {
        let query = format!("{}/{}", key.pk, key.sk);
        let item = crate::table::get_item(&self.dynamodb, &self.table_name, key).await?;
        Ok(match item {
            Some(item) => Inspection::of(query, &item, now),
            None => Inspection::missing(query),
        })
    }

    /// The outbox items of `event_ids`, in the order asked (one `Scan` of the table for all).
    ///
    /// # Errors
    /// When the scan fails.
    pub async fn by_event_ids(
        &self,
        event_ids: &[String],
        now: DateTime<Utc>,
    ) -> Result<Vec<Inspection>, SdkFailure> {
        let mut found: HashMap<String, Attributes> = HashMap::new();
        let placeholders: Vec<String> = (0..event_ids.len()).map(|i| format!(":e{i}")).collect();
        let projection = crate::table::outbox_projection();
        let mut start = None;
        loop {
            let mut scan = self
                .dynamodb
                .scan()
                .table_name(&self.table_name)
                .projection_expression(&projection.expression)
                .filter_expression(format!(
                    "#entity = :outbox AND #id IN ({})",
                    placeholders.join(", ")
                ))
                .expression_attribute_names("#entity", attr::ENTITY_TYPE)
                .expression_attribute_names("#id", attr::EVENT_ID)
                .expression_attribute_values(
                    ":outbox",
                    AttributeValue::S(entity::OUTBOX_EVENT.to_owned()),
                )
                .set_exclusive_start_key(start);
            for (placeholder, id) in placeholders.iter().zip(event_ids) {
                scan = scan.expression_attribute_values(placeholder, AttributeValue::S(id.clone()));
            }
            for (placeholder, name) in &projection.names {
                scan = scan.expression_attribute_names(placeholder, name);
            }
            let page = scan.send().await.map_err(|e| SdkFailure::new("Scan", e))?;
            for item in page.items.unwrap_or_default() {
                if let Some(id) = item.get(attr::EVENT_ID).and_then(|v| v.as_s().ok()) {
                    found.insert(id.clone(), item);
                }
            }
            start = page.last_evaluated_key;
            if start.is_none() || found.len() == event_ids.len() {
                break;
            }
        }
        Ok(event_ids
            .iter()
            .map(|id| match found.get(id) {
                Some(item) => Inspection::of(id.clone(), item, now),
                None => Inspection::missing(id.clone()),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn reads_a_dead_lettered_item() {
        let item: Attributes = [
            (attr::PK, AttributeValue::S("USER#u1".into())),
            (attr::SK, AttributeValue::S("OUTBOX#e1".into())),
            (attr::EVENT_ID, AttributeValue::S("e1".into())),
            (attr::EVENT_TYPE, AttributeValue::S("OrderCreated".into())),
            (attr::STATUS, AttributeValue::S("DEAD_LETTERED".into())),
            (
                attr::CREATED_AT,
                AttributeValue::S("2026-11-22T10:00:00.000Z".into()),
            ),
            (attr::TTL, AttributeValue::N("1795348800".into())),
            (
                attr::DEAD_LETTERED_AT,
                AttributeValue::S("2026-11-22T10:00:01.000Z".into()),
            ),
            (
                attr::DEAD_LETTER_REASON,
                AttributeValue::S("EventBridge rejected the entry".into()),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let now = Utc.with_ymd_and_hms(2026, 11, 22, 10, 1, 0).unwrap();
        let seen = Inspection::of("e1".into(), &item, now);
        assert!(seen.found && !seen.in_pending_index);
        assert_eq!(seen.status.as_deref(), Some("DEAD_LETTERED"));
        assert_eq!(seen.age_seconds, Some(60.0));
        assert_eq!(seen.expires_at.as_deref(), Some("2026-11-22T12:00:00.000Z"));
        assert_eq!(seen.shard, None);
        let text = seen.to_text();
        assert!(text.contains("EventBridge rejected the entry"), "{text}");
        assert!(
            Inspection::missing("x".into())
                .to_text()
                .contains("not found")
        );
    }
}
