//! The refusals the routes document, as OpenAPI response sets (utoipa's `IntoResponses`): each
//! set is written once here and named in the `responses(…)` of every route that answers it.
//! Every refusal is `application/problem+json` with a stable `code` (`shared::Problem`). These
//! types describe; they are never built.

use std::collections::BTreeMap;

use utoipa::IntoResponses;
use utoipa::openapi::{ContentBuilder, Ref, RefOr, Response, ResponseBuilder};

/// One documented refusal: `status`, `description`, a problem+json body.
fn problem(status: &str, description: &str) -> (String, RefOr<Response>) {
    let content = ContentBuilder::new()
        .schema(Some(Ref::from_schema_name("Problem")))
        .build();
    let response = ResponseBuilder::new()
        .description(description)
        .content(shared::headers::PROBLEM_JSON, content)
        .build();
    (status.to_owned(), response.into())
}

/// `refusals! { /// docs  Name { "status" => "description", … } … }`: a set per name.
macro_rules! refusals {
    ($($(#[$doc:meta])* $name:ident { $($status:literal => $description:literal),+ $(,)? })+) => {$(
        $(#[$doc])*
        #[derive(Debug)]
        pub(crate) enum $name {}

        impl IntoResponses for $name {
            fn responses() -> BTreeMap<String, RefOr<Response>> {
                [$(problem($status, $description)),+].into_iter().collect()
            }
        }
    )+};
}

refusals! {
    /// `POST /v1/purchases` (the edge's signed purchase), in the contract's order.
    PurchaseRefusals {
        "400" => "`invalid_request` or `missing_idempotency_key`",
        "401" => "`bad_signature`",
        "404" => "`unknown_sku` (stored with the key)",
        "409" => "`sold_out`, `purchase_limit` (stored) or `idempotency_in_flight`; by the sale's schedule, read with the database's clock (never stored): `not_started` (problem member `starts_at`; `Retry-After` = whole seconds to the start, at least 1), `sale_ended` (`ends_at`), `sale_paused` (`Retry-After: 5`)",
        "408" => "`request_timeout`: the body did not arrive within `HTTP_BODY_READ_TIMEOUT_MS` (not stored)",
        "413" => "`payload_too_large`",
        "431" => "`headers_too_large`: header fields above `HTTP_MAX_HEADER_BYTES`",
        "422" => "`idempotency_key_reused`",
        "503" => "`unavailable`, with Retry-After",
    }

    /// `PUT /v1/admin/skus/{sku}`.
    SkuPutRefusals {
        "400" => "`invalid_request`: a bad field, e.g. `starts_at` not RFC 3339, `paused` not a bool, `waiting_room.admit_per_minute` out of 1..=1000000, `proof_of_work.min_bits` out of 1..=30, `proof_of_work.max_bits` below `min_bits` or above 30, `proof_of_work.algorithm` not `SHA-256` or `PBKDF2/SHA-256`, `network_limits.units` (or `.admissions`) out of 1..=1000000, `network_limits.window_secs` out of 1..=86400, `network_limits` with neither bound, or `ends_at` not after `starts_at` (the stored value counts for a field the body does not name); nothing changes",
        "404" => "`unknown_sku`: a schedule-only body for a SKU with no sale",
        "401" => "`unauthorized`: checked before the body is read, so it comes at once",
        "408" => "`request_timeout`: the body did not arrive within `HTTP_BODY_READ_TIMEOUT_MS` (not stored)",
        "413" => "`payload_too_large`",
        "431" => "`headers_too_large`: header fields above `HTTP_MAX_HEADER_BYTES`",
        "503" => "`unavailable`",
    }

    /// `GET /v1/skus/{sku}`, the public view.
    SkuGetRefusals {
        "400" => "`invalid_request`",
        "404" => "`unknown_sku`",
        "503" => "`unavailable`, with Retry-After: the database, or every one of the `DB_READ_MAX_CONNECTIONS` read slots for `DB_ACQUIRE_TIMEOUT_MS`",
    }

    /// The callers of an order route open to shoppers: the shop's token or the edge's signature.
    ShopOrShopper {
        "401" => "`unauthorized` (admin token) or `bad_signature` (edge)",
        "404" => "`order_not_found` (for a shopper: not one of theirs)",
    }

    /// The caller of an order route for the shop only.
    ShopOnly {
        "401" => "`unauthorized`",
        "404" => "`order_not_found`",
    }

    /// `GET /v1/orders/{order_id}`, beside its callers' refusals.
    OrderReadRefusals {
        "400" => "`invalid_request`: not a UUID",
        "503" => "`unavailable`, with Retry-After",
    }

    /// An action on an order (`pay`, `cancel`, `refund`), beside its callers' refusals.
    OrderActionRefusals {
        "400" => "`invalid_request`",
        "409" => "`order_state`, with the order's `current` state",
        "413" => "`payload_too_large`",
        "503" => "`unavailable`, with Retry-After",
    }

    /// `POST /v1/payments/stripe`.
    WebhookRefusals {
        "400" => "`webhook_signature` (missing, malformed, stale or forged signature; nothing changed) or `invalid_request` (signed, but not an event)",
        "404" => "`not_found`: PAYMENT_WEBHOOK_SECRETS is not configured",
        "408" => "`request_timeout`",
        "413" => "`payload_too_large`",
        "431" => "`headers_too_large`",
        "503" => "`unavailable`, with Retry-After (Stripe retries; the event is applied by a later delivery)",
    }
}
