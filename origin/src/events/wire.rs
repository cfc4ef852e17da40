//! The one JSON shape of an event ([`Event`]): the feed's items (`routes::events`), the webhook
//! bodies and the stream's entries — the Standard Webhooks 1.0 shape (`id`, `type`,
//! `timestamp`, `data`) plus `position`, the feed's cursor — rendered from a stored row.
//!
//! Rendering is deterministic: an event row never changes and the order fields it reads are
//! fixed at the order's creation, so the same event renders to the same bytes every time (a
//! webhook retry carries the body it signed the first time).

use serde::Serialize;
use shared::{OrderStatus, OrderView};
use uuid::Uuid;

use crate::orders::rfc3339;
use crate::store::events::{EventRow, Subject};

/// Every event type, in the documentation's order.
pub const TYPES: [&str; 8] = [
    "order.created",
    "order.paid",
    "order.cancelled",
    "order.expired",
    "order.refunded",
    "order.refund_due",
    "sku.sold_out",
    "sku.back_on_sale",
];

/// Prefix of an event's public id.
const ID_PREFIX: &str = "evt_";

/// An event's public id: `evt_` and the 32 lowercase hex digits of its UUIDv7.
pub fn wire_id(id: Uuid) -> String {
    format!("{ID_PREFIX}{}", id.simple())
}

/// The UUID of a public event id (`evt_` + 32 hex digits); `None` for anything else.
pub fn parse_id(s: &str) -> Option<Uuid> {
    let hex = s.strip_prefix(ID_PREFIX)?;
    (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
        .then(|| Uuid::try_parse(hex).ok())
        .flatten()
}

/// One event, as the feed lists it and as a webhook or the stream carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct Event {
    /// `evt_` + 32 hex digits, stable forever: the `webhook-id` of its deliveries, the key to
    /// deduplicate on.
    pub id: String,
    /// `order.created`, `order.paid`, `order.cancelled`, `order.expired`, `order.refunded`,
    /// `order.refund_due`, `sku.sold_out`, `sku.back_on_sale`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// When the change was made: RFC 3339 UTC with milliseconds (the order's `updated_at`).
    pub timestamp: String,
    /// The feed's cursor (`<xid>-<seq>`, also the stream entry ID): events are in position
    /// order; compare two positions as pairs of integers, not as strings.
    pub position: String,
    pub data: EventData,
}

/// An event's `data`: the order after the change with its `sequence`, or a SKU and its stock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum EventData {
    Order(OrderData),
    Sku(SkuData),
}

/// An order event's `data`: the order exactly as `GET /v1/orders/{id}` returned it after the
/// change, plus its `sequence`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct OrderData {
    #[serde(flatten)]
    pub order: OrderView,
    /// 1 for the order's first event (its `order.created`), +1 for each later one, no gaps.
    pub sequence: u32,
}

/// A SKU event's `data`: the SKU and the stock its change reached.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SkuData {
    pub sku: String,
    pub stock: i64,
}

impl Event {
    /// The event of a stored row.
    pub fn render(row: &EventRow) -> Self {
        let data = match &row.subject {
            Subject::Order(o) => EventData::Order(OrderData {
                order: OrderView {
                    order_id: o.order_id.to_string(),
                    sku: o.sku.clone(),
                    qty: u32::try_from(o.qty).unwrap_or(0),
                    user: o.user_id.clone(),
                    // The column's CHECK admits only the known states.
                    status: OrderStatus::parse(&o.status).unwrap_or(OrderStatus::Confirmed),
                    expires_at: o.expires_at.map(rfc3339),
                    created_at: rfc3339(o.created_at),
                    updated_at: rfc3339(row.at),
                },
                sequence: u32::try_from(o.sequence).unwrap_or(0),
            }),
            Subject::Sku { sku, stock } => EventData::Sku(SkuData {
                sku: sku.clone(),
                stock: *stock,
            }),
        };
        Self {
            id: wire_id(row.id),
            event_type: row.event_type.clone(),
            timestamp: rfc3339(row.at),
            position: row.position.to_string(),
            data,
        }
    }

    /// The event as JSON bytes (the webhook body, the stream entry's `event`).
    pub fn to_json(&self) -> String {
        // Plain strings and numbers only: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_nothing_else_parses() {
        let id = Uuid::now_v7();
        let wire = wire_id(id);
        assert_eq!(wire.len(), 36);
        assert_eq!(parse_id(&wire), Some(id));
        for bad in [
            "",
            "evt_",
            &id.to_string(),
            &format!("evt_{id}"),
            &format!("evt_{}x", &id.simple().to_string()[1..]),
            &format!("ev_{}", id.simple()),
        ] {
            assert_eq!(parse_id(bad), None, "{bad}");
        }
    }
}
