//! The order aggregate: what a caller asks for, what is stored, and the events it emits.
//!
//! The order item (`PK = USER#{user}`, `SK = ORDER#{order}`) holds `EntityType = Order`,
//! `OrderId`, `UserId`, `Amount` (cents), `Items` (a list of `{sku, quantity, unitPriceCents}`
//! maps), `Status`, `Version` and `CreatedAt`. `OrderCreated` and `OrderStatusChanged` are the
//! `data` of the events the relays publish.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use aws_sdk_dynamodb::types::AttributeValue;
use outbox_shared::item::validate_id;
use outbox_shared::schema::{self, attr, entity};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::{InputError, WriteError};
use crate::trace::TraceHeader;
use outbox_shared::TraceContext;

/// `EventType` of the event a new order emits.
pub const ORDER_CREATED: &str = "OrderCreated";
/// `EventType` of the event a status change emits.
pub const ORDER_STATUS_CHANGED: &str = "OrderStatusChanged";
/// `AggregateType` of order events.
pub const ORDER_AGGREGATE: &str = entity::ORDER;
/// `Version` of a new order; each change adds one, and the event's `Sequence` is the new version.
pub const INITIAL_VERSION: u64 = 1;

/// One line of an order.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderLine {
    pub sku: String,
    pub quantity: u32,
    pub unit_price_cents: u64,
}

impl OrderLine {
    pub fn new(sku: impl Into<String>, quantity: u32, unit_price_cents: u64) -> Self {
        Self {
            sku: sku.into(),
            quantity,
            unit_price_cents,
        }
    }
}

/// A create request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewOrder {
    pub items: Vec<OrderLine>,
    /// The order id to use; a fresh UUIDv7 when `None`.
    pub order_id: Option<String>,
    /// Makes retries of this create safe: the same key returns the first result.
    pub idempotency_key: Option<String>,
    /// The caller's trace context, carried to the bus on the event; when `None`, the Lambda
    /// invocation's (`_X_AMZN_TRACE_ID`), if the caller runs in Lambda.
    pub trace_header: Option<TraceHeader>,
    /// The caller's W3C trace context, carried in the event on every target; when `None`, the
    /// caller's current OpenTelemetry span's ([`crate::current_trace_context`]), if any.
    pub trace_context: Option<TraceContext>,
}

impl NewOrder {
    pub fn new(items: Vec<OrderLine>) -> Self {
        Self {
            items,
            order_id: None,
            idempotency_key: None,
            trace_header: None,
            trace_context: None,
        }
    }

    /// Carries `context` (a W3C `traceparent` and `tracestate` the caller has, say from an
    /// incoming request's headers) in the event, instead of the current span's.
    pub fn with_trace_context(mut self, context: TraceContext) -> Self {
        self.trace_context = Some(context);
        self
    }

    /// Carries `header` (the caller's X-Ray trace context) to the bus on the event.
    pub fn with_trace_header(mut self, header: TraceHeader) -> Self {
        self.trace_header = Some(header);
        self
    }

    pub fn with_order_id(mut self, id: impl Into<String>) -> Self {
        self.order_id = Some(id.into());
        self
    }

    pub fn with_idempotency_key(mut self, key: impl Into<String>) -> Self {
        self.idempotency_key = Some(key.into());
        self
    }

    /// Checks the request and returns its amount in cents.
    ///
    /// # Errors
    /// [`InputError`] for no items, an empty sku, a zero quantity, an amount that overflows, or a
    /// malformed order id or idempotency key.
    pub fn validate(&self) -> Result<u64, InputError> {
        if let Some(id) = &self.order_id {
            validate_id("order id", id)?;
        }
        if let Some(key) = &self.idempotency_key {
            validate_id("idempotency key", key)?;
        }
        if self.items.is_empty() {
            return Err(InputError::NoItems);
        }
        let mut amount: u64 = 0;
        for (index, line) in self.items.iter().enumerate() {
            if line.sku.trim().is_empty() {
                return Err(InputError::EmptySku { index });
            }
            if line.quantity == 0 {
                return Err(InputError::ZeroQuantity {
                    index,
                    sku: line.sku.clone(),
                });
            }
            amount = line
                .unit_price_cents
                .checked_mul(u64::from(line.quantity))
                .and_then(|line_amount| amount.checked_add(line_amount))
                .ok_or(InputError::AmountOverflow)?;
        }
        Ok(amount)
    }

    /// A digest of what the request asks for (user, order id if given, items), so a reused
    /// idempotency key with different content is detected.
    pub(crate) fn request_hash(&self, user_id: &str) -> String {
        #[derive(Serialize)]
        struct Fingerprint<'a> {
            user_id: &'a str,
            order_id: Option<&'a str>,
            items: &'a [OrderLine],
        }
        let fingerprint = Fingerprint {
            user_id,
            order_id: self.order_id.as_deref(),
            items: &self.items,
        };
        let bytes = serde_json::to_vec(&fingerprint).expect("strings and numbers serialize");
        hex::encode(Sha256::digest(bytes))
    }
}

/// Order statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderStatus {
    Created,
    Confirmed,
    Paid,
    Shipped,
    Delivered,
    Cancelled,
}

impl OrderStatus {
    pub const ALL: [Self; 6] = [
        Self::Created,
        Self::Confirmed,
        Self::Paid,
        Self::Shipped,
        Self::Delivered,
        Self::Cancelled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "CREATED",
            Self::Confirmed => "CONFIRMED",
            Self::Paid => "PAID",
            Self::Shipped => "SHIPPED",
            Self::Delivered => "DELIVERED",
            Self::Cancelled => "CANCELLED",
        }
    }
}

impl fmt::Display for OrderStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A status string that is not an [`OrderStatus`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown order status {0:?}")]
pub struct UnknownStatus(pub String);

impl FromStr for OrderStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| UnknownStatus(s.to_owned()))
    }
}

/// The result of a create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedOrder {
    pub order_id: String,
    /// The `OrderCreated` event's id (the consumers' de-duplication key).
    pub event_id: String,
    /// `true` when an earlier create with the same idempotency key had already written the order:
    /// the ids are that create's, and nothing new was written.
    pub replayed: bool,
}

/// The result of a status update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdatedOrder {
    pub order_id: String,
    /// The `OrderStatusChanged` event's id.
    pub event_id: String,
    /// The order's new `Version`, also the event's `Sequence`.
    pub version: u64,
    /// The status before this change, as stored (other clients may store other values).
    pub previous_status: String,
    pub status: OrderStatus,
    /// Attempts it took (1 without conflicts).
    pub attempts: u32,
}

/// `data` of an `OrderCreated` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderCreated {
    pub order_id: String,
    pub user_id: String,
    pub items: Vec<OrderLine>,
    pub amount_cents: u64,
    pub status: OrderStatus,
    pub version: u64,
    pub created_at: String,
}

/// `data` of an `OrderStatusChanged` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OrderStatusChanged {
    pub order_id: String,
    pub user_id: String,
    pub previous_status: String,
    pub status: OrderStatus,
    pub version: u64,
    pub changed_at: String,
}

/// The order item's attributes, per the item schema.
pub(crate) fn order_item(
    user_id: &str,
    order_id: &str,
    items: &[OrderLine],
    amount_cents: u64,
    created_at: &str,
) -> Result<HashMap<String, AttributeValue>, WriteError> {
    let lines: AttributeValue =
        serde_dynamo::to_attribute_value(items).map_err(|e| WriteError::Encoding(e.to_string()))?;
    let s = |v: &str| AttributeValue::S(v.to_owned());
    Ok(HashMap::from([
        (attr::PK.to_owned(), s(&schema::user_pk(user_id))),
        (attr::SK.to_owned(), s(&schema::order_sk(order_id))),
        (attr::ENTITY_TYPE.to_owned(), s(entity::ORDER)),
        (attr::ORDER_ID.to_owned(), s(order_id)),
        (attr::USER_ID.to_owned(), s(user_id)),
        (
            attr::AMOUNT.to_owned(),
            AttributeValue::N(amount_cents.to_string()),
        ),
        (attr::ITEMS.to_owned(), lines),
        (attr::STATUS.to_owned(), s(OrderStatus::Created.as_str())),
        (
            attr::VERSION.to_owned(),
            AttributeValue::N(INITIAL_VERSION.to_string()),
        ),
        (attr::CREATED_AT.to_owned(), s(created_at)),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_shared::ItemError;

    fn order() -> NewOrder {
        NewOrder::new(vec![
            OrderLine::new("sku-1", 2, 150),
            OrderLine::new("sku-2", 1, 1000),
        ])
    }

    #[test]
    fn amount_is_the_sum_of_lines() {
        assert_eq!(order().validate(), Ok(1300));
    }

    #[test]
    fn rejects_malformed_orders() {
        assert_eq!(NewOrder::new(vec![]).validate(), Err(InputError::NoItems));
        assert_eq!(
            NewOrder::new(vec![OrderLine::new("a", 0, 1)]).validate(),
            Err(InputError::ZeroQuantity {
                index: 0,
                sku: "a".into()
            })
        );
        assert_eq!(
            NewOrder::new(vec![OrderLine::new(" ", 1, 1)]).validate(),
            Err(InputError::EmptySku { index: 0 })
        );
        assert_eq!(
            NewOrder::new(vec![
                OrderLine::new("a", 1, u64::MAX),
                OrderLine::new("b", 1, 1)
            ])
            .validate(),
            Err(InputError::AmountOverflow)
        );
        assert_eq!(
            NewOrder::new(vec![OrderLine::new("a", 2, u64::MAX / 2 + 1)]).validate(),
            Err(InputError::AmountOverflow)
        );
        assert!(matches!(
            order().with_order_id("a#b").validate(),
            Err(InputError::Id(ItemError::KeySeparator {
                field: "order id",
                ..
            }))
        ));
        assert!(matches!(
            order().with_idempotency_key("").validate(),
            Err(InputError::Id(ItemError::Empty {
                field: "idempotency key"
            }))
        ));
    }

    #[test]
    fn request_hash_depends_on_content_not_on_the_key() {
        let a = order().with_idempotency_key("k1").request_hash("u1");
        assert_eq!(a, order().with_idempotency_key("k2").request_hash("u1"));
        assert_ne!(a, order().request_hash("u2"));
        assert_ne!(a, order().with_order_id("o1").request_hash("u1"));
        let mut other = order();
        other.items[0].quantity = 3;
        assert_ne!(a, other.request_hash("u1"));
    }

    #[test]
    fn status_round_trips_through_text_and_json() {
        for status in OrderStatus::ALL {
            assert_eq!(status.as_str().parse::<OrderStatus>(), Ok(status));
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::json!(status.as_str())
            );
        }
        assert!("LOST".parse::<OrderStatus>().is_err());
    }

    #[test]
    fn order_created_payload_has_the_documented_shape() {
        let payload = OrderCreated {
            order_id: "o1".into(),
            user_id: "u1".into(),
            items: vec![OrderLine::new("sku-1", 2, 150)],
            amount_cents: 300,
            status: OrderStatus::Created,
            version: 1,
            created_at: "2026-11-22T10:00:00.000Z".into(),
        };
        assert_eq!(
            serde_json::to_value(payload).unwrap(),
            serde_json::json!({
                "orderId": "o1", "userId": "u1",
                "items": [{"sku": "sku-1", "quantity": 2, "unitPriceCents": 150}],
                "amountCents": 300, "status": "CREATED", "version": 1,
                "createdAt": "2026-11-22T10:00:00.000Z"
            })
        );
    }

    #[test]
    fn order_item_has_the_documented_attributes() {
        let item =
            order_item("u1", "o1", &order().items, 1300, "2026-11-22T10:00:00.000Z").unwrap();
        assert_eq!(item[attr::PK], AttributeValue::S("USER#u1".into()));
        assert_eq!(item[attr::SK], AttributeValue::S("ORDER#o1".into()));
        assert_eq!(item[attr::ENTITY_TYPE], AttributeValue::S("Order".into()));
        assert_eq!(item[attr::AMOUNT], AttributeValue::N("1300".into()));
        assert_eq!(item[attr::VERSION], AttributeValue::N("1".into()));
        assert_eq!(item[attr::STATUS], AttributeValue::S("CREATED".into()));
        let lines: Vec<OrderLine> =
            serde_dynamo::from_attribute_value(item[attr::ITEMS].clone()).unwrap();
        assert_eq!(lines, order().items);
    }
}
