//! Header names of the Flashgate HTTP contract (v1), in one place so the edge and the origin can
//! never disagree on spelling.

/// The client's idempotency key: 1..=255 visible ASCII, or the RFC 8941 sf-string form `"..."`.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";
/// The shopper's id, set by the edge after it authenticated the shopper.
pub const USER: &str = "flashgate-user";
/// `t=<unix>,v1=<hex>` or `t=<unix>,kid=<key id>,v2=<hex>` (HMAC-SHA256), see [`crate::signing`].
pub const SIGNATURE: &str = "flashgate-signature";
/// `true` on a response that replays a stored outcome of the same idempotency key.
pub const IDEMPOTENT_REPLAYED: &str = "idempotent-replayed";
/// A request id propagated from the edge through the origin for log correlation.
pub const REQUEST_ID: &str = "flashgate-request-id";
/// W3C Trace Context: the trace a request belongs to (`version-traceid-parentid-flags`); the edge
/// forwards it to the origin unsigned, next to the request id (docs/signing.md).
pub const TRACEPARENT: &str = "traceparent";
/// W3C Trace Context: vendors' state of the trace, forwarded with [`TRACEPARENT`].
pub const TRACESTATE: &str = "tracestate";
/// RFC 9457 media type of every error body.
pub const PROBLEM_JSON: &str = "application/problem+json";
