//! Forwarding a purchase to the origin: the signed request (here: the path and the headers the
//! origin verifies), then what the edge does with the origin's answer — pass it on or turn a
//! failure into a 503 the shopper may retry ([`answer`]), and learn sold-out facts from it
//! ([`learn`](mod@learn)).

mod answer;
mod learn;

use shared::SecretRing;
use shared::headers::{IDEMPOTENCY_KEY, REQUEST_ID, SIGNATURE, TRACEPARENT, TRACESTATE, USER};
use shared::signing::{SignedParts, sign};

use crate::purchase::Purchase;
use crate::request_id::RequestId;
use crate::trace_context::TraceContext;
pub use answer::{
    Forwarded, MAX_ORIGIN_BODY_BYTES, OriginAnswer, Outcome, UNAVAILABLE_RETRY_AFTER_SECS,
    classify, unavailable,
};
pub use learn::{Answered, learn};

/// Path of the purchase endpoint on the origin (also the signed path).
pub const PURCHASE_PATH: &str = "/v1/purchases";

/// The headers of the forwarded request: content type, the raw Idempotency-Key, the user and the
/// signature over `POST /v1/purchases`, the user, the *decoded* key and the exact body bytes — v2,
/// with the current key of `keys` (`EDGE_SHARED_SECRETS`), named by its `kid`.
pub fn signed_headers(
    keys: &SecretRing,
    now: i64,
    purchase: &Purchase,
) -> Vec<(&'static str, String)> {
    let parts = SignedParts {
        method: "POST",
        path: PURCHASE_PATH,
        user: purchase.user.as_str(),
        idempotency_key: purchase.key.as_str(),
        body: purchase.body.as_bytes(),
    };
    vec![
        ("content-type", "application/json".to_owned()),
        (IDEMPOTENCY_KEY, purchase.raw_key.clone()),
        (USER, purchase.user.to_string()),
        (SIGNATURE, sign(keys, now, &parts)),
    ]
}

/// Everything the forwarded request carries: the [`signed_headers`] plus the request id and the
/// W3C trace context (not signed: they only label logs and traces — docs/signing.md).
pub fn origin_headers(
    keys: &SecretRing,
    now: i64,
    purchase: &Purchase,
    request_id: &RequestId,
    trace: &TraceContext,
) -> Vec<(&'static str, String)> {
    let mut headers = signed_headers(keys, now, purchase);
    headers.push((REQUEST_ID, request_id.to_string()));
    headers.push((TRACEPARENT, trace.traceparent().to_owned()));
    if let Some(state) = trace.tracestate() {
        headers.push((TRACESTATE, state.to_owned()));
    }
    headers
}

#[cfg(test)]
mod tests;
