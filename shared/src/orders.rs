//! Orders on the wire: an order's view (`GET /v1/orders/{order_id}` and the answer of every order
//! action), with the states it goes through ([`OrderStatus`], `crate::order_status`), and the
//! refund request body.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::body::BodyError;
/// The states of an order (`crate::order_status`), where they have always been named.
pub use crate::order_status::OrderStatus;

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
