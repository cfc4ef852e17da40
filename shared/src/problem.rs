//! The stable error `code`s of the contract and the RFC 9457 problem+json body that carries them.
//! Every non-2xx answer of the edge and the origin is a [`Problem`].

use serde::{Deserialize, Serialize};

use crate::timestamp::Timestamp;

/// A stable, machine-readable error code. The string form ([`ErrorCode::as_str`]) is the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[non_exhaustive]
pub enum ErrorCode {
    /// 400: malformed JSON, wrong types, out-of-range values, bad sku/user/key format.
    InvalidRequest,
    /// 400: `POST /v1/purchases` without an `Idempotency-Key`.
    MissingIdempotencyKey,
    /// 401 (origin): missing, malformed, expired or forged `Flashgate-Signature`/`Flashgate-User`.
    BadSignature,
    /// 400: a payment provider webhook whose signature is missing, malformed, stale or forged.
    WebhookSignature,
    /// 401: admin endpoint without the right bearer token.
    Unauthorized,
    /// 401 (edge): missing, malformed, forged, expired or non-HS256 shopper token.
    Unauthenticated,
    /// 403 (edge): a request authenticated by the `flashgate_session` cookie without the CSRF
    /// defence (the `X-Flashgate-CSRF` header, a same-origin `Origin`/`Sec-Fetch-Site`).
    CsrfRejected,
    /// 404: no sale for this SKU.
    UnknownSku,
    /// 404: no such route.
    NotFound,
    /// 405: route exists, method does not.
    MethodNotAllowed,
    /// 409: fewer units remain than asked for.
    SoldOut,
    /// 409: the purchase would take the user above `max_per_user` for this SKU.
    PurchaseLimit,
    /// 409: the same user+key is still being decided.
    IdempotencyInFlight,
    /// 408: the request body did not arrive within the server's body read timeout.
    RequestTimeout,
    /// 413: body over the limit.
    PayloadTooLarge,
    /// 422: same user+key, different request.
    IdempotencyKeyReused,
    /// 431: request header fields over the limit.
    HeadersTooLarge,
    /// 429 (edge): per-user rate limit.
    RateLimited,
    /// 404: no such order (or, for a shopper, not one of theirs).
    OrderNotFound,
    /// 409: the order's state does not allow this transition (the problem carries `current`).
    OrderState,
    /// 409: the sale has not started (the problem carries `starts_at`; `Retry-After` = seconds to
    /// the start). Not stored with the key.
    NotStarted,
    /// 409: the sale has ended (the problem carries `ends_at`). Not stored with the key.
    SaleEnded,
    /// 409: the sale is paused (`Retry-After`). Not stored with the key.
    SalePaused,
    /// 403 (edge): a purchase of a SKU with a waiting room without a valid `Flashgate-Pass`
    /// (missing, forged, expired, another shopper's or another SKU's). The problem carries
    /// `position` (the place in line, or `null` when not in the queue) and `Retry-After`.
    NotAdmitted,
    /// 409 (edge): `/v1/queue/{sku}` of a SKU whose sale has no waiting room.
    NoWaitingRoom,
    /// 404 (edge): `GET /v1/queue/{sku}` of a shopper who never joined that queue.
    NotInQueue,
    /// 428 (edge): joining the waiting room of a sale with a proof of work, or a purchase of
    /// such a sale without a room, without a `Flashgate-Proof`. The problem carries
    /// `challenge_url`, where to get a challenge. Not stored with the key.
    ProofRequired,
    /// 403 (edge): a `Flashgate-Proof` that does not verify: malformed, wrong, expired, made for
    /// another SKU, shopper or purpose, or used before. The problem carries `challenge_url`.
    /// Not stored with the key.
    ProofRejected,
    /// 409 (edge): `GET /v1/challenge` for a sale without a proof of work.
    ProofNotRequired,
    /// 429 (edge): the shopper's network (IPv4 /24, IPv6 /48) reached the sale's
    /// `network_limits` (or has another request of the same kind in flight here), with
    /// `Retry-After` and `RateLimit` fields. Not stored with the key.
    NetworkLimit,
    /// 410 (origin): `GET /v1/events?after=` (or a webhook replay's `after`) with a cursor older
    /// than the oldest event kept (`EVENT_RETENTION_DAYS`): the events after it were purged.
    CursorExpired,
    /// 404 (origin): no kept event with this id.
    EventNotFound,
    /// 404 (origin): no webhook endpoint with this id.
    WebhookNotFound,
    /// 503: a dependency cannot be had, or the request waited past its deadline under overload.
    Unavailable,
    /// 500: a bug. Never caused by client input or a failing dependency.
    Internal,
}

impl ErrorCode {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::MissingIdempotencyKey => "missing_idempotency_key",
            Self::BadSignature => "bad_signature",
            Self::WebhookSignature => "webhook_signature",
            Self::Unauthorized => "unauthorized",
            Self::Unauthenticated => "unauthenticated",
            Self::CsrfRejected => "csrf_rejected",
            Self::UnknownSku => "unknown_sku",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::SoldOut => "sold_out",
            Self::PurchaseLimit => "purchase_limit",
            Self::IdempotencyInFlight => "idempotency_in_flight",
            Self::RequestTimeout => "request_timeout",
            Self::PayloadTooLarge => "payload_too_large",
            Self::IdempotencyKeyReused => "idempotency_key_reused",
            Self::HeadersTooLarge => "headers_too_large",
            Self::RateLimited => "rate_limited",
            Self::OrderNotFound => "order_not_found",
            Self::OrderState => "order_state",
            Self::NotStarted => "not_started",
            Self::SaleEnded => "sale_ended",
            Self::SalePaused => "sale_paused",
            Self::NotAdmitted => "not_admitted",
            Self::NoWaitingRoom => "no_waiting_room",
            Self::NotInQueue => "not_in_queue",
            Self::ProofRequired => "proof_required",
            Self::ProofRejected => "proof_rejected",
            Self::ProofNotRequired => "proof_not_required",
            Self::NetworkLimit => "network_limit",
            Self::CursorExpired => "cursor_expired",
            Self::EventNotFound => "event_not_found",
            Self::WebhookNotFound => "webhook_not_found",
            Self::Unavailable => "unavailable",
            Self::Internal => "internal",
        }
    }

    pub const fn status(self) -> u16 {
        match self {
            Self::InvalidRequest | Self::MissingIdempotencyKey | Self::WebhookSignature => 400,
            Self::BadSignature | Self::Unauthorized | Self::Unauthenticated => 401,
            Self::CsrfRejected | Self::NotAdmitted | Self::ProofRejected => 403,
            Self::UnknownSku
            | Self::NotFound
            | Self::OrderNotFound
            | Self::NotInQueue
            | Self::EventNotFound
            | Self::WebhookNotFound => 404,
            Self::CursorExpired => 410,
            Self::MethodNotAllowed => 405,
            Self::SoldOut
            | Self::PurchaseLimit
            | Self::IdempotencyInFlight
            | Self::OrderState
            | Self::NotStarted
            | Self::SaleEnded
            | Self::SalePaused
            | Self::NoWaitingRoom
            | Self::ProofNotRequired => 409,
            Self::RequestTimeout => 408,
            Self::PayloadTooLarge => 413,
            Self::IdempotencyKeyReused => 422,
            Self::HeadersTooLarge => 431,
            Self::ProofRequired => 428,
            Self::RateLimited | Self::NetworkLimit => 429,
            Self::Unavailable => 503,
            Self::Internal => 500,
        }
    }

    pub const fn title(self) -> &'static str {
        match self {
            Self::InvalidRequest => "Invalid request",
            Self::MissingIdempotencyKey => "Missing Idempotency-Key",
            Self::BadSignature => "Bad signature",
            Self::WebhookSignature => "Bad webhook signature",
            Self::Unauthorized => "Unauthorized",
            Self::Unauthenticated => "Unauthenticated",
            Self::CsrfRejected => "Cross-site request rejected",
            Self::UnknownSku => "Unknown SKU",
            Self::NotFound => "Not found",
            Self::MethodNotAllowed => "Method not allowed",
            Self::SoldOut => "Sold out",
            Self::PurchaseLimit => "Purchase limit reached",
            Self::IdempotencyInFlight => "Request with this Idempotency-Key is in flight",
            Self::RequestTimeout => "Request timeout",
            Self::PayloadTooLarge => "Payload too large",
            Self::IdempotencyKeyReused => "Idempotency-Key reused with a different request",
            Self::HeadersTooLarge => "Request header fields too large",
            Self::RateLimited => "Rate limited",
            Self::OrderNotFound => "Order not found",
            Self::OrderState => "Order state does not allow this",
            Self::NotStarted => "Sale not started",
            Self::SaleEnded => "Sale ended",
            Self::SalePaused => "Sale paused",
            Self::NotAdmitted => "Not admitted from the waiting room",
            Self::NoWaitingRoom => "No waiting room for this sale",
            Self::NotInQueue => "Not in the queue",
            Self::ProofRequired => "Proof of work required",
            Self::ProofRejected => "Proof of work rejected",
            Self::ProofNotRequired => "No proof of work for this sale",
            Self::NetworkLimit => "Network limit reached",
            Self::CursorExpired => "Cursor expired",
            Self::EventNotFound => "Event not found",
            Self::WebhookNotFound => "Webhook endpoint not found",
            Self::Unavailable => "Service unavailable",
            Self::Internal => "Internal error",
        }
    }

    /// Whether a purchase outcome with this code is stored with its idempotency key and replayed.
    pub const fn is_stored_outcome(self) -> bool {
        matches!(self, Self::UnknownSku | Self::SoldOut | Self::PurchaseLimit)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An RFC 9457 problem details body with Flashgate's stable `code` extension member.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Problem {
    #[serde(rename = "type")]
    pub type_uri: String,
    pub title: String,
    pub status: u16,
    pub detail: String,
    pub code: ErrorCode,
    /// `order_state` only: the order's current state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
    /// `not_started` only: when the sale starts (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub starts_at: Option<Timestamp>,
    /// `sale_ended` only: when the sale ended (RFC 3339, UTC).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<String>, format = DateTime))]
    pub ends_at: Option<Timestamp>,
    /// `proof_required` / `proof_rejected` only: where to get a challenge (a path on the edge,
    /// `/v1/challenge?sku=…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge_url: Option<String>,
}

impl Problem {
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            type_uri: format!("urn:flashgate:problem:{}", code.as_str()),
            title: code.title().to_owned(),
            status: code.status(),
            detail: detail.into(),
            code,
            current: None,
            starts_at: None,
            ends_at: None,
            challenge_url: None,
        }
    }

    /// This problem with the `challenge_url` member (for `proof_required` / `proof_rejected`).
    pub fn with_challenge_url(mut self, url: impl Into<String>) -> Self {
        self.challenge_url = Some(url.into());
        self
    }

    /// This problem with the `starts_at` member (for `not_started`).
    pub fn with_starts_at(mut self, at: Timestamp) -> Self {
        self.starts_at = Some(at);
        self
    }

    /// This problem with the `ends_at` member (for `sale_ended`).
    pub fn with_ends_at(mut self, at: Timestamp) -> Self {
        self.ends_at = Some(at);
        self
    }

    /// This problem with the `current` member (for `order_state`).
    pub fn with_current(mut self, current: impl Into<String>) -> Self {
        self.current = Some(current.into());
        self
    }

    /// The serialized body. Serializing this struct cannot fail (only strings and integers).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_has_the_rfc9457_members_and_the_code() {
        let v: serde_json::Value =
            serde_json::from_str(&Problem::new(ErrorCode::SoldOut, "none left").to_json())
                .expect("valid json");
        assert_eq!(v["type"], "urn:flashgate:problem:sold_out");
        assert_eq!(v["title"], "Sold out");
        assert_eq!(v["status"], 409);
        assert_eq!(v["detail"], "none left");
        assert_eq!(v["code"], "sold_out");
    }

    #[test]
    fn serde_name_matches_as_str() {
        for code in [
            ErrorCode::IdempotencyKeyReused,
            ErrorCode::MissingIdempotencyKey,
            ErrorCode::Unavailable,
            ErrorCode::RequestTimeout,
            ErrorCode::HeadersTooLarge,
            ErrorCode::WebhookSignature,
            ErrorCode::OrderNotFound,
            ErrorCode::OrderState,
            ErrorCode::CsrfRejected,
            ErrorCode::NotStarted,
            ErrorCode::SaleEnded,
            ErrorCode::SalePaused,
            ErrorCode::NotAdmitted,
            ErrorCode::NoWaitingRoom,
            ErrorCode::NotInQueue,
            ErrorCode::ProofRequired,
            ErrorCode::ProofRejected,
            ErrorCode::ProofNotRequired,
            ErrorCode::NetworkLimit,
        ] {
            assert_eq!(serde_json::to_value(code).expect("ser"), code.as_str());
        }
    }
}
