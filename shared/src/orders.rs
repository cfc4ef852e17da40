//! Orders on the wire: the states an order goes through, its view (`GET /v1/orders/{order_id}`
//! and the answer of every order action) and the refund request body.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::wire::BodyError;

/// The state of an order. `held` → `paid` | `expired` | `cancelled`; `confirmed` → `cancelled`
/// | `refunded`; `paid` → `refunded`; a payment that arrives after its hold expired makes an
/// `expired` order `paid` again when a unit can still be taken, else `refund_due`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum OrderStatus {
    /// Units held until `expires_at`, waiting for the payment.
    Held,
    /// Bought on a SKU without holds.
    Confirmed,
    /// A hold that was paid.
    Paid,
    /// A hold not paid by `expires_at`: its units went back on sale.
    Expired,
    /// Cancelled: its units went back on sale.
    Cancelled,
    /// Refunded (its units back on sale or not, as the refund asked).
    Refunded,
    /// Paid after its hold expired, when no unit could be taken any more: the payment must be
    /// refunded.
    RefundDue,
}

impl OrderStatus {
    pub const ALL: [Self; 7] = [
        Self::Held,
        Self::Confirmed,
        Self::Paid,
        Self::Expired,
        Self::Cancelled,
        Self::Refunded,
        Self::RefundDue,
    ];

    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Held => "held",
            Self::Confirmed => "confirmed",
            Self::Paid => "paid",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
            Self::Refunded => "refunded",
            Self::RefundDue => "refund_due",
        }
    }

    /// The state named `s` (as stored and sent), if any.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|st| st.as_str() == s)
    }

    /// Whether the order's units count as taken: on the books as `units_out`, and toward the
    /// user's `max_per_user`.
    pub const fn holds_units(self) -> bool {
        matches!(self, Self::Held | Self::Confirmed | Self::Paid)
    }
}

impl std::fmt::Display for OrderStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An order as `GET /v1/orders/{order_id}` and the order actions answer it. Times are RFC 3339
/// UTC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct OrderView {
    pub order_id: String,
    pub sku: String,
    pub qty: u32,
    pub user: String,
    pub status: OrderStatus,
    /// When the hold expires (or expired); absent for an order that was never a hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    pub created_at: String,
    pub updated_at: String,
}

/// `POST /v1/orders/{order_id}/refund` body: `{"restock": bool}`. Unknown fields are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RefundRequest {
    /// `true`: the units go back on sale; `false`: they leave the sale for good.
    pub restock: bool,
}

impl RefundRequest {
    pub fn from_json(body: &[u8]) -> Result<Self, BodyError> {
        let map = match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return Err(BodyError::NotAnObject),
            Err(e) => return Err(BodyError::Json(e.to_string())),
        };
        match map.get("restock") {
            Some(Value::Bool(restock)) => Ok(Self { restock: *restock }),
            Some(_) => Err(BodyError::Field {
                field: "restock",
                reason: "must be true or false".into(),
            }),
            None => Err(BodyError::Missing("restock")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states_round_trip_by_name() {
        for s in OrderStatus::ALL {
            assert_eq!(OrderStatus::parse(s.as_str()), Some(s));
            assert_eq!(
                serde_json::to_value(s).expect("ser"),
                serde_json::Value::from(s.as_str())
            );
        }
        assert_eq!(OrderStatus::parse("shipped"), None);
    }

    #[test]
    fn refund_body_needs_a_boolean_restock() {
        assert_eq!(
            RefundRequest::from_json(br#"{"restock":true,"x":1}"#),
            Ok(RefundRequest { restock: true })
        );
        for bad in [
            &b"{}"[..],
            br#"{"restock":1}"#,
            b"[]",
            b"",
            br#"{"restock":"true"}"#,
        ] {
            assert!(RefundRequest::from_json(bad).is_err());
        }
    }
}
