//! The purchase and view bodies of the HTTP contract (v1): `POST /v1/purchases`
//! ([`PurchaseRequest`], parsed into domain types exactly once; [`PurchaseResponse`]) and the SKU
//! view ([`SkuView`]). The admin `PUT`'s body is `crate::sku_put`'s; `BodyError` is
//! `crate::body`'s (re-exported here, as before).

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::body::{object, required};
use crate::defence::{NetworkLimits, ProofOfWork};
use crate::domain::{DomainError, Quantity, Sku};
use crate::room::WaitingRoom;
use crate::schedule::{Schedule, Timestamp};

pub use crate::body::BodyError;

/// `POST /v1/purchases` body: `{"sku": str, "qty": int 1..=100}`. Unknown fields are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PurchaseRequest {
    /// 1..=64 characters of `[A-Za-z0-9._-]`.
    #[cfg_attr(feature = "openapi", schema(value_type = String, pattern = "^[A-Za-z0-9._-]{1,64}$", example = "SHOE-1"))]
    pub sku: Sku,
    /// Units, a JSON integer in 1..=100.
    #[cfg_attr(feature = "openapi", schema(value_type = u32, minimum = 1, maximum = 100))]
    pub qty: Quantity,
}

impl PurchaseRequest {
    pub fn from_json(body: &[u8]) -> Result<Self, BodyError> {
        let map = object(body)?;
        let sku = match required(&map, "sku")? {
            Value::String(s) => Sku::parse(s)?,
            _ => return Err(DomainError::InvalidSku.into()),
        };
        let qty = Quantity::from_json(required(&map, "qty")?)?;
        Ok(Self { sku, qty })
    }

    pub fn to_json(&self) -> String {
        format!(r#"{{"sku":"{}","qty":{}}}"#, self.sku, self.qty)
    }
}

/// `201` body of `POST /v1/purchases`. Answers stored before holds existed carry neither
/// `status` nor `expires_at` (they are replayed byte for byte), so both parse as optional.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PurchaseResponse {
    pub order_id: String,
    pub sku: String,
    pub qty: u32,
    pub user: String,
    pub remaining: i64,
    /// `held` on a SKU with holds (`hold_secs`), else `confirmed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<crate::OrderStatus>,
    /// When the hold expires unless paid (RFC 3339 UTC); only with `"status":"held"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// The public view of a SKU's sale (`GET /v1/skus/{sku}`, admin `PUT` answer); `stock` is what
/// remains.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SkuView {
    pub sku: String,
    pub name: String,
    pub price_cents: i64,
    pub stock: i64,
    /// Units in held orders (bought, not yet paid, `hold_secs`): they return to `stock` if their
    /// holds expire. A waiting room that has sold out tells its line whether units may come back
    /// (`may_return`) from it. Always present in what the origin writes; absent parses as 0.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub held: i64,
    pub max_per_user: i32,
    /// When purchases open (RFC 3339, UTC), or `null`: open since the SKU was put. Always
    /// present in what the origin writes; absent parses as `null` (views cached before it).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime, example = "2026-12-01T10:00:00Z", required = true))]
    pub starts_at: Option<Timestamp>,
    /// When purchases close (RFC 3339, UTC, exclusive), or `null`: no end.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime, required = true))]
    pub ends_at: Option<Timestamp>,
    /// Whether an operator paused the sale (purchases answer `409 sale_paused`).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub paused: bool,
    /// The sale's waiting room, or `null`: none (purchases need no pass). Always present in what
    /// the origin writes; absent parses as `null` (views cached before it).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub waiting_room: Option<WaitingRoom>,
    /// The sale's proof of work, or `null`: none (joining its room, or a purchase without a
    /// room, needs no `Flashgate-Proof`). Always present in what the origin writes; absent parses
    /// as `null` (views cached before it).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub proof_of_work: Option<ProofOfWork>,
    /// The sale's bounds per network (IPv4 /24, IPv6 /48), or `null`: none. Always present in
    /// what the origin writes; absent parses as `null`.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(required = true))]
    pub network_limits: Option<NetworkLimits>,
}

impl SkuView {
    /// The sale's schedule.
    pub fn schedule(&self) -> Schedule {
        Schedule {
            starts_at: self.starts_at,
            ends_at: self.ends_at,
            paused: self.paused,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn purchase_body_parses_and_ignores_unknown_fields() {
        let r =
            PurchaseRequest::from_json(br#"{"qty": 3, "sku": "A-1", "note": [1]}"#).expect("valid");
        assert_eq!((r.sku.as_str(), r.qty.get()), ("A-1", 3));
        assert_eq!(PurchaseRequest::from_json(r.to_json().as_bytes()), Ok(r));
    }

    #[test]
    fn purchase_body_rejects_each_bad_shape() {
        for bad in [
            &b"not json"[..],
            b"[]",
            b"{}",
            br#"{"sku":"A"}"#,
            br#"{"qty":1}"#,
            br#"{"sku":1,"qty":1}"#,
            br#"{"sku":"A","qty":"1"}"#,
            br#"{"sku":"A","qty":1.5}"#,
            br#"{"sku":"A","qty":1e400}"#,
            br#"{"sku":"A","qty":0}"#,
            br#"{"sku":"a b","qty":1}"#,
            b"",
        ] {
            assert!(
                PurchaseRequest::from_json(bad).is_err(),
                "{}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
