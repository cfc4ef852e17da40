//! A shopper's own orders through the edge: `GET /v1/orders/{order_id}` and
//! `POST /v1/orders/{order_id}/cancel`, up to the point where per-user state and the origin are
//! needed, and what the edge does with the origin's answer.
//!
//! The checks, in order: the shopper token (401 `unauthenticated`, as for purchases), then the
//! order id's shape (a UUID, 8-4-4-4-12 hex digits: anything else is 400 `invalid_request`, with
//! no origin call). Then the runtime spends one unit of the user's `order` rate-limit bucket in the
//! user's Durable Object (429, its own bucket so that checking an order never eats purchase
//! attempts) and forwards the call to the origin, signed like a purchase
//! (`shared::signing`, the `Flashgate-User` header; no Idempotency-Key, so the signed key is empty;
//! the body is empty). The origin decides whose order it is: someone else's order is its 404, which
//! the edge relays as it relays every 2xx/4xx answer. An origin that cannot be had (down, slow,
//! 5xx, or a 401 because the edge keys are out of step) is 503 with `Retry-After`.
//!
//! A cancellation the origin confirms (`200`, `"status":"cancelled"`) gives the units back to the
//! user's count in their Durable Object (once per order: a repeated cancel answers the same and
//! changes nothing), so the edge's per-user cap pre-check does not refuse a purchase the origin
//! would now accept.

use serde::Deserialize;
use shared::headers::{REQUEST_ID, SIGNATURE, USER};
use shared::signing::{SignedParts, sign};
use shared::{ErrorCode, SecretRing, Sku, UserId};

use crate::forward::{self, Outcome};
use crate::jwt::{self, TokenRules};
use crate::reply::Reply;
use crate::request_id::RequestId;
use crate::session::{self, Credential};

/// The path prefix of the order routes.
pub const ORDERS_PREFIX: &str = "/v1/orders/";

/// The name of the order routes' rate-limit bucket (`RateLimit-Policy: "order";…`).
pub const RATE_POLICY_NAME: &str = "order";

/// An order id as the edge accepts it in a path: a UUID in its hyphenated form, 8-4-4-4-12 hex
/// digits (either case; kept lower-case, as the origin writes them).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OrderId(String);

impl OrderId {
    /// Parses a path segment.
    pub fn parse(raw: &str) -> Result<Self, OrderError> {
        let bytes = raw.as_bytes();
        let shaped = bytes.len() == 36
            && bytes.iter().enumerate().all(|(i, b)| match i {
                8 | 13 | 18 | 23 => *b == b'-',
                _ => b.is_ascii_hexdigit(),
            });
        if shaped {
            Ok(Self(raw.to_ascii_lowercase()))
        } else {
            Err(OrderError::InvalidOrderId)
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for OrderId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why an order request is refused before any state is touched.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    #[error("order id must be a UUID (8-4-4-4-12 hexadecimal digits)")]
    InvalidOrderId,
}

/// What the shopper asks about their order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderAction {
    /// `GET /v1/orders/{id}`.
    View,
    /// `POST /v1/orders/{id}/cancel`.
    Cancel,
}

impl OrderAction {
    /// The method of the call to the origin (and of the signature).
    pub fn method(self) -> &'static str {
        match self {
            Self::View => "GET",
            Self::Cancel => "POST",
        }
    }
}

/// An order request that passed every stateless check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderCall {
    pub user: UserId,
    pub order: OrderId,
    pub action: OrderAction,
}

impl OrderCall {
    /// The path on the origin (also the signed path).
    pub fn origin_path(&self) -> String {
        match self.action {
            OrderAction::View => format!("{ORDERS_PREFIX}{}", self.order),
            OrderAction::Cancel => format!("{ORDERS_PREFIX}{}/cancel", self.order),
        }
    }
}

/// Checks the shopper token (from the [`Credential`] the session module picked), then the order id (`raw_id`, the unvalidated path segment), at unix
/// time `now` with the session keys and token rules.
pub fn validate(
    credential: &Credential<'_>,
    raw_id: &str,
    action: OrderAction,
    session_keys: &SecretRing,
    token_rules: &TokenRules,
    now: i64,
) -> Result<OrderCall, Reply> {
    let claims = credential
        .token()
        .and_then(|token| jwt::verify_hs256(token, session_keys, token_rules, now))
        .map_err(session::unauthenticated)?;
    let order = OrderId::parse(raw_id)
        .map_err(|e| Reply::problem(ErrorCode::InvalidRequest, e.to_string()))?;
    Ok(OrderCall {
        user: claims.sub,
        order,
        action,
    })
}

/// The headers of the call to the origin: the user and the v2 signature over the method, the
/// order path, the user, an empty key and an empty body (with the current key of `keys`), plus
/// the request id (not signed: it only labels logs).
pub fn origin_headers(
    keys: &SecretRing,
    now: i64,
    call: &OrderCall,
    request_id: &RequestId,
) -> Vec<(&'static str, String)> {
    let path = call.origin_path();
    let parts = SignedParts {
        method: call.action.method(),
        path: &path,
        user: call.user.as_str(),
        idempotency_key: "",
        body: b"",
    };
    vec![
        (USER, call.user.to_string()),
        (SIGNATURE, sign(keys, now, &parts)),
        (REQUEST_ID, request_id.to_string()),
    ]
}

/// The edge's answer to the shopper for the origin's `status`/`body` (`retry_after`: its
/// `Retry-After`): a 2xx or 4xx is relayed as it is (someone else's order is the origin's 404, a
/// cancel of a paid order its 409 `order_state`); anything else is 503 with `Retry-After`.
/// Private to the shopper: never stored by a cache.
pub fn answer(status: u16, body: &[u8], retry_after: Option<&str>) -> Reply {
    let reply = match forward::classify(status, body, retry_after, false) {
        Outcome::Answer { status, body, .. } => Reply::stored(status, body),
        Outcome::Unavailable(reply) => reply,
    };
    reply.with_header("cache-control", "private, no-store")
}

/// The 503 for an origin that could not be reached in time.
pub fn unavailable() -> Reply {
    forward::unavailable().with_header("cache-control", "private, no-store")
}

/// Units an origin answer to a cancel gave back: the order's SKU and quantity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Returned {
    pub order: OrderId,
    pub sku: Sku,
    pub qty: u32,
}

/// The units a cancel answer gave back to the user (a 200 whose order is `cancelled`), read
/// tolerantly (unknown fields ignored); `None` for anything else.
pub fn returned(call: &OrderCall, status: u16, body: &str) -> Option<Returned> {
    #[derive(Deserialize)]
    struct Cancelled {
        order_id: String,
        sku: String,
        qty: u32,
        status: String,
    }
    if call.action != OrderAction::Cancel || status != 200 {
        return None;
    }
    let order: Cancelled = serde_json::from_str(body).ok()?;
    let id = OrderId::parse(&order.order_id).ok()?;
    (order.status == "cancelled" && id == call.order).then_some(())?;
    Some(Returned {
        order: id,
        sku: Sku::parse(&order.sku).ok()?,
        qty: order.qty,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jwt::sign_hs256;
    use serde_json::json;
    use shared::signing::{Verified, Verifier, Version};
    use shared::{KeyId, Problem};

    const SECRET: &[u8] = b"session";
    const NOW: i64 = 1_700_000_000;
    const ID: &str = "0192f1c2-7b3a-7c4d-9e8f-0123456789ab";

    fn auth(sub: &str) -> String {
        format!(
            "Bearer {}",
            sign_hs256(&json!({"sub": sub, "exp": NOW + 60}), SECRET)
        )
    }

    fn run(authorization: Option<&str>, id: &str, action: OrderAction) -> Result<OrderCall, Reply> {
        validate(
            &crate::session::Credential::from_authorization(authorization),
            id,
            action,
            &SecretRing::single(SECRET.to_vec()),
            &TokenRules::default(),
            NOW,
        )
    }

    #[test]
    fn order_ids_are_uuids() {
        assert_eq!(OrderId::parse(ID).map(|o| o.to_string()), Ok(ID.to_owned()));
        assert_eq!(
            OrderId::parse(&ID.to_ascii_uppercase()).map(|o| o.to_string()),
            Ok(ID.to_owned()),
            "kept lower-case"
        );
        for bad in [
            "",
            "1",
            "0192f1c27b3a7c4d9e8f0123456789ab",
            "{0192f1c2-7b3a-7c4d-9e8f-0123456789ab}",
            "0192f1c2-7b3a-7c4d-9e8f-0123456789ag",
            "0192f1c2-7b3a-7c4d-9e8f-0123456789abc",
            "0192f1c2+7b3a-7c4d-9e8f-0123456789ab",
            "0192f1c2-7b3a-7c4d-9e8f-0123456789a%",
            "..%2F..%2Fadmin%2Fskus%2FA-000000000",
        ] {
            assert_eq!(
                OrderId::parse(bad),
                Err(OrderError::InvalidOrderId),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_token_is_checked_before_the_id() {
        let code = |r: Result<OrderCall, Reply>| r.err().and_then(|reply| reply.code());
        assert_eq!(
            code(run(None, "junk", OrderAction::View)),
            Some(ErrorCode::Unauthenticated)
        );
        assert_eq!(
            code(run(Some("Bearer a.b.c"), ID, OrderAction::Cancel)),
            Some(ErrorCode::Unauthenticated)
        );
        let a = auth("alice");
        let bad = run(Some(&a), "junk", OrderAction::View).expect_err("bad id");
        assert_eq!(
            (bad.status, bad.code()),
            (400, Some(ErrorCode::InvalidRequest))
        );
        let ok = run(Some(&a), ID, OrderAction::Cancel).expect("valid");
        assert_eq!(ok.user.as_str(), "alice");
        assert_eq!(ok.origin_path(), format!("/v1/orders/{ID}/cancel"));
        let view = run(Some(&a), ID, OrderAction::View).expect("valid");
        assert_eq!(view.origin_path(), format!("/v1/orders/{ID}"));
    }

    #[test]
    fn the_origin_call_verifies_with_the_origin_rules() {
        let a = auth("alice");
        let keys = SecretRing::parse("k2:edge-new,k1:edge-old", 1).expect("ring");
        let rid = RequestId::parse("trace-9").expect("id");
        for action in [OrderAction::View, OrderAction::Cancel] {
            let call = run(Some(&a), ID, action).expect("valid");
            let headers = origin_headers(&keys, NOW, &call, &rid);
            let get = |n: &str| {
                headers
                    .iter()
                    .find(|(k, _)| *k == n)
                    .map(|(_, v)| v.as_str())
            };
            assert_eq!(get(USER), Some("alice"));
            assert_eq!(get(REQUEST_ID), Some("trace-9"));
            let path = call.origin_path();
            let parts = SignedParts {
                method: action.method(),
                path: &path,
                user: "alice",
                idempotency_key: "",
                body: b"",
            };
            let origin = SecretRing::parse("k2:edge-new", 1).expect("ring");
            let verifier = Verifier {
                ring: &origin,
                accept_v1: false,
            };
            assert_eq!(
                verifier.verify(get(SIGNATURE), NOW + 10, &parts),
                Ok(Verified {
                    version: Version::V2,
                    kid: KeyId::parse("k2").expect("kid"),
                }),
                "{action:?}"
            );
            // Signed for this user and this order only: another user, another order, or the
            // other action do not verify.
            let other_user = SignedParts {
                user: "bob",
                ..parts
            };
            assert!(verifier.verify(get(SIGNATURE), NOW, &other_user).is_err());
            let other_path = SignedParts {
                path: "/v1/orders/0192f1c2-7b3a-7c4d-9e8f-0123456789ac",
                ..parts
            };
            assert!(verifier.verify(get(SIGNATURE), NOW, &other_path).is_err());
        }
    }

    #[test]
    fn origin_answers_are_relayed_or_become_503() {
        let order = format!(
            r#"{{"order_id":"{ID}","sku":"A","qty":1,"user":"alice","status":"held","expires_at":"2026-01-01T00:00:00Z","created_at":"x","updated_at":"y"}}"#
        );
        let r = answer(200, order.as_bytes(), None);
        assert_eq!(
            (r.status, r.body.as_str()),
            (200, order.as_str()),
            "byte for byte"
        );
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.header("cache-control"), Some("private, no-store"));
        for code in [ErrorCode::NotFound, ErrorCode::InvalidRequest] {
            let body = Problem::new(code, "x").to_json();
            let r = answer(code.status(), body.as_bytes(), None);
            assert_eq!((r.status, r.body.as_str()), (code.status(), body.as_str()));
            assert_eq!(
                r.header("content-type"),
                Some(shared::headers::PROBLEM_JSON)
            );
        }
        let state = r#"{"type":"about:blank","title":"Conflict","status":409,"detail":"paid","code":"order_state","state":"paid"}"#;
        assert_eq!(answer(409, state.as_bytes(), None).body, state);
        for status in [500, 502, 401, 302] {
            let r = answer(status, b"boom", None);
            assert_eq!(
                (r.status, r.header("retry-after")),
                (503, Some("2")),
                "{status}"
            );
        }
        let r = answer(503, b"{}", Some("4"));
        assert_eq!((r.status, r.header("retry-after")), (503, Some("4")));
        assert_eq!(unavailable().status, 503);
    }

    #[test]
    fn a_confirmed_cancellation_gives_units_back_once_per_order() {
        let a = auth("alice");
        let cancel = run(Some(&a), ID, OrderAction::Cancel).expect("valid");
        let body = |status: &str| {
            format!(
                r#"{{"order_id":"{ID}","sku":"A-1","qty":2,"user":"alice","status":"{status}","created_at":"x","updated_at":"y","extra":[1]}}"#
            )
        };
        assert_eq!(
            returned(&cancel, 200, &body("cancelled")),
            Some(Returned {
                order: OrderId::parse(ID).expect("id"),
                sku: Sku::parse("A-1").expect("sku"),
                qty: 2,
            })
        );
        assert_eq!(returned(&cancel, 200, &body("paid")), None);
        assert_eq!(returned(&cancel, 409, &body("cancelled")), None);
        assert_eq!(returned(&cancel, 200, "nonsense"), None);
        let view = run(Some(&a), ID, OrderAction::View).expect("valid");
        assert_eq!(
            returned(&view, 200, &body("cancelled")),
            None,
            "a GET returns nothing"
        );
        let other = body("cancelled").replace("89ab", "89ac");
        assert_eq!(
            returned(&cancel, 200, &other),
            None,
            "another order's answer"
        );
    }
}
