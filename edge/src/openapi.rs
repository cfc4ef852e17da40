//! The OpenAPI 3.1 description of the edge's HTTP API — what shoppers, probes and ops call —
//! generated with utoipa from the shared wire types and the route annotations below. The edge
//! serves it at `GET /openapi.json` from the committed copy `docs/openapi-edge.json` (embedded at
//! build time, so the Worker carries no generator); a native test fails when the committed copy
//! and this generator differ. Built natively only (the wasm build has no utoipa).
//!
//! The functions below exist to carry the annotations; the real handlers are the runtime
//! adapters (`runtime::entry`), which dispatch on [`crate::routes::route`].

#![allow(dead_code)]

use utoipa::OpenApi;

/// Buy `qty` units of `sku` as the shopper named by the token's `sub`.
///
/// A retried `Idempotency-Key` that was already decided (a stored answer for the same request) is
/// answered with that stored answer (`Idempotent-Replayed: true`) before anything that only
/// guards new work is looked at — the waiting room's pass, `not_started` / `sale_paused`, the
/// proof of work, the network's bound — at no origin cost, spending nothing (no proof, no unit of
/// the network's bound); a key still in flight is `409 idempotency_in_flight`, a key used for
/// another request `422`. Only new work meets the pass, the schedule, the proof and the network
/// bound, then the per-user rate limit and the shields.
#[utoipa::path(
    post, path = "/v1/purchases", tag = "purchases",
    request_body(content = shared::PurchaseRequest, description = "Unknown fields are ignored; at most 16 KiB"),
    params(
        ("Idempotency-Key" = String, Header, description = "1..=255 visible ASCII, or the RFC 8941 sf-string form; retry with the same key"),
        ("Flashgate-Request-Id" = Option<String>, Header, description = "Propagated to the origin's logs and echoed back; generated when absent"),
        ("traceparent" = Option<String>, Header, description = "W3C Trace Context: continued into the origin's spans when valid; absent or malformed, the edge starts a trace (never an error)"),
        ("tracestate" = Option<String>, Header, description = "W3C Trace Context vendor state, forwarded with a valid `traceparent` (at most 512 characters, 32 members)"),
        ("Flashgate-Pass" = Option<String>, Header, description = "Required for a SKU with a waiting room: the `pass` of an admitted `/v1/queue/{sku}` answer, valid for this shopper and SKU until it expires"),
        ("Flashgate-Queue-Receipt" = Option<String>, Header, description = "Optional with a waiting room: the `receipt` of the last queue answer; a refusal then finds the `position` without asking the room's objects"),
        ("Flashgate-Proof" = Option<String>, Header, description = "Required for a SKU with `proof_of_work` and no waiting room: a solved challenge of `GET /v1/challenge` (base64 of the ALTCHA widget's payload JSON: v1 `{algorithm, challenge, number, salt, signature}`, v2 `{challenge: {parameters, signature}, solution: {counter, derivedKey}}`), for this SKU, this shopper and `purchase`, unexpired and never used before. Never forwarded to the origin"),
    ),
    security(("shopper_token" = []), ("session_cookie" = [])),
    responses(
        (status = 201, description = "Purchased (or `Idempotent-Replayed: true` replay): the origin's body byte for byte — with `\"status\":\"held\"` and `expires_at` when the SKU has `hold_secs`, else `\"status\":\"confirmed\"`. Carries `RateLimit-Policy` and `RateLimit`", body = shared::PurchaseResponse),
        (status = 400, description = "`invalid_request` or `missing_idempotency_key`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthenticated`: missing, malformed, expired or wrongly signed token, or one whose lifetime (`SESSION_MAX_LIFETIME_SECS`), `iss` or `aud` the settings refuse", body = shared::Problem, content_type = "application/problem+json"),
        (status = 403, description = "`csrf_rejected`: the `flashgate_session` cookie without `X-Flashgate-CSRF: 1`, or from another site (`Origin`/`Sec-Fetch-Site`); never forwarded. `not_admitted`: a SKU with a waiting room and no valid `Flashgate-Pass` (missing, forged, expired, another shopper's or SKU's): the problem carries `position` (the place in line, `null` when not in the queue) and `Retry-After`; decided before the rate limit, never forwarded. `proof_rejected`: a SKU with `proof_of_work` and a `Flashgate-Proof` that does not verify (malformed, wrong, expired, made for another SKU, shopper or purpose) or was used before; carries `challenge_url`; never stored with the key, never forwarded", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`unknown_sku` (stored with the key)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`sold_out`, `purchase_limit` (stored with the key when the origin decided them; the edge's own shield answers are not stored, and a sold-out answer from the edge's cache is only given while an origin view confirmed it less than `SKU_CACHE_TTL_SECS` ago) or `idempotency_in_flight`; `not_started` (with `starts_at` and `Retry-After`: seconds to the start), `sale_paused` (`Retry-After: 5`) or `sale_ended` (with `ends_at`), never stored — answered from the cached schedule without an origin call outside `SCHEDULE_CLOCK_MARGIN_MS` of the start or end, else the origin's", body = shared::Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`: a body above 16 KiB, announced by `Content-Length` or streamed without it (refused as soon as it passes the limit)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 422, description = "`idempotency_key_reused`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 428, description = "`proof_required`: a SKU with `proof_of_work` (and no waiting room) without `Flashgate-Proof`; carries `challenge_url` (`/v1/challenge?sku=…`); never stored with the key, never forwarded", body = shared::Problem, content_type = "application/problem+json"),
        (status = 429, description = "`rate_limited`, with `Retry-After` equal to the `RateLimit` `t`. `network_limit`: the shopper's network (IPv4 /24, IPv6 /48 of `CF-Connecting-IP`; an IPv6 address embedding an IPv4 one — mapped, 6to4, Teredo, NAT64 — counts in that IPv4 /24) bought the SKU's `network_limits.units` in its window (`Retry-After`: to the window's end), or asks for more units than it may still buy (the detail says how many; no `Retry-After`: ask for fewer), or its in-flight slot here stayed taken while the request waited its turn (at most 1 s; `Retry-After: 1`); `RateLimit-Policy: \"network\";q=<units>;w=<window_secs>` and `RateLimit: \"network\";r=<units left>;t=…`; never stored with the key", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` (origin down or slow, or the edge not configured to serve: no `POW_SECRETS` for a SKU with `proof_of_work`), with `Retry-After`; the key is left in doubt: retried (the same request), it goes to the origin as the same attempt — its proof still its own, past the cached shields — and gets what the origin decided", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
fn purchase() {}

/// A proof-of-work challenge in the ALTCHA format — v1 (`SHA-256`, the default) or proof of work
/// v2 (`PBKDF2/SHA-256`), as the SKU's `proof_of_work.algorithm` says — for the `altcha` widget's
/// `challenge` URL or any ALTCHA library's solver, for the sale's join (with a waiting room) or purchase (without), bound to
/// the SKU and the shopper, valid for `POW_CHALLENGE_TTL_SECS`, as hard as the SKU's distinct
/// arriving shoppers ask (between its `min_bits` and `max_bits`; one shopper asking often counts
/// once). A purchase's is issued only from the sale's `starts_at` on, and a purchase of a sale
/// with a start needs one issued from its start on. Each shopper may ask as often as they may
/// buy (the purchase limit's quota and window, per edge instance).
#[utoipa::path(
    get, path = "/v1/challenge", tag = "bot defence",
    params(("sku" = String, Query, description = "1..=64 of [A-Za-z0-9._-]")),
    security(("shopper_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "The challenge (`Cache-Control: no-store`), with `RateLimit-Policy: \"challenge\";q=…;w=…` and `RateLimit`", body = crate::proof::Issued),
        (status = 400, description = "`invalid_request`: no or a malformed `sku`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthenticated`, as for purchases", body = shared::Problem, content_type = "application/problem+json"),
        (status = 403, description = "`csrf_rejected`, as for purchases", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`unknown_sku`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`proof_not_required`: the sale has no `proof_of_work`. `not_started` (a sale without a waiting room, before its `starts_at`): with `starts_at` and `Retry-After`, as a purchase would be answered — no purchase proof is issued before the start", body = shared::Problem, content_type = "application/problem+json"),
        (status = 429, description = "`rate_limited`: more challenges than the shopper's `challenge` quota (the purchase limit's); `Retry-After` equal to the `RateLimit` `t`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with `Retry-After`: the origin cannot be asked about an uncached SKU, or the edge has no `POW_SECRETS`", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
fn challenge() {}

/// A SKU's public view, from the data center's cache (`Flashgate-Cache: HIT`/`MISS`).
#[utoipa::path(
    get, path = "/v1/skus/{sku}", tag = "catalogue",
    params(("sku" = String, Path, description = "1..=64 of [A-Za-z0-9._-]")),
    responses(
        (status = 200, description = "The view; `Cache-Control: public, max-age=SKU_CACHE_TTL_SECS`", body = shared::SkuView),
        (status = 400, description = "`invalid_request`: malformed SKU", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`unknown_sku`; remembered by the data center for `SKU_MISSING_TTL_SECS` (`Cache-Control: public, max-age=SKU_MISSING_TTL_SECS`, `Flashgate-Cache: HIT`/`MISS`)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with `Retry-After`", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
fn sku_view() {}

/// Primes this data center's cache (views and sold-out facts) for up to 50 SKUs.
#[utoipa::path(
    get, path = "/warmup", tag = "operations",
    params(("sku" = Vec<String>, Query, description = "Repeat for several SKUs: `?sku=A&sku=B`", explode = true)),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "What was primed", body = crate::warmup::Report),
        (status = 400, description = "`invalid_request`: no SKU, a malformed one, or too many", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`: missing or wrong admin token", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with `Retry-After`", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
fn warmup() {}

/// The shopper's own order (JWT `sub`), from the origin, signed like a purchase.
#[utoipa::path(
    get, path = "/v1/orders/{order_id}", tag = "orders",
    params(
        ("order_id" = String, Path, description = "A UUID (8-4-4-4-12 hex digits)"),
        ("Flashgate-Request-Id" = Option<String>, Header, description = "Propagated to the origin's logs and echoed back; generated when absent"),
    ),
    security(("shopper_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "The order (`Cache-Control: private, no-store`). Carries `RateLimit-Policy: \"order\";…` and `RateLimit` (a bucket of its own, same quota and window as purchases)", body = shared::OrderView),
        (status = 400, description = "`invalid_request`: the id is not a UUID (no origin call)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthenticated`, as for purchases", body = shared::Problem, content_type = "application/problem+json"),
        (status = 403, description = "`csrf_rejected`: the `flashgate_session` cookie without `X-Flashgate-CSRF: 1`, or from another site (`Origin`/`Sec-Fetch-Site`); never forwarded", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "The origin's `order_not_found`: no such order, or someone else's", body = shared::Problem, content_type = "application/problem+json"),
        (status = 429, description = "`rate_limited`, with `Retry-After` equal to the `RateLimit` `t`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` (origin down or slow), with `Retry-After`", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
fn order() {}

/// Cancels the shopper's own order (a hold, or a confirmed order), through the origin; its units
/// go back on sale. Idempotent: a repeat answers the same and changes nothing.
#[utoipa::path(
    post, path = "/v1/orders/{order_id}/cancel", tag = "orders",
    params(
        ("order_id" = String, Path, description = "A UUID (8-4-4-4-12 hex digits)"),
        ("Flashgate-Request-Id" = Option<String>, Header, description = "Propagated to the origin's logs and echoed back; generated when absent"),
    ),
    security(("shopper_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "The order, now `cancelled`. Carries `RateLimit-Policy: \"order\";…` and `RateLimit`", body = shared::OrderView),
        (status = 400, description = "`invalid_request`: the id is not a UUID (no origin call)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthenticated`, as for purchases", body = shared::Problem, content_type = "application/problem+json"),
        (status = 403, description = "`csrf_rejected`: the `flashgate_session` cookie without `X-Flashgate-CSRF: 1`, or from another site (`Origin`/`Sec-Fetch-Site`); never forwarded", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "The origin's `order_not_found`: no such order, or someone else's", body = shared::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The origin's `order_state`: this order cannot be cancelled in its state (e.g. `paid`, `expired`); its state is the body's `current`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 429, description = "`rate_limited`, with `Retry-After` equal to the `RateLimit` `t`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable` (origin down or slow), with `Retry-After`", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
fn order_cancel() {}

/// The shopper's sale page for `sku`: one HTML document (inline CSS and JavaScript allowed by
/// hash in its `Content-Security-Policy`; no third-party request) that shows the SKU, counts
/// down to `starts_at` on the edge's clock and buys through `POST /v1/purchases` with one
/// Idempotency-Key per intent. Session: the `flashgate_session` cookie, or (local demos) a
/// `#token=` URL fragment. A sale with `proof_of_work`: the page solves its challenges in a Web
/// Worker running `GET /sale-worker.js`.
#[utoipa::path(
    get, path = "/sale/{sku}", tag = "sale page",
    params(("sku" = String, Path, description = "1..=64 of [A-Za-z0-9._-]")),
    responses(
        (status = 200, description = "The page (`text/html`), the same for every SKU and shopper: `Content-Security-Policy` (`default-src 'none'`, script and style by SHA-256, `connect-src 'self'`, `worker-src 'self'`, `frame-ancestors 'none'`, Trusted Types required with one policy, `flashgate-worker`, which only makes the solver's URL), `X-Content-Type-Options: nosniff`, `Referrer-Policy: no-referrer`, `Cache-Control: public, max-age=60`", content_type = "text/html"),
        (status = 400, description = "`invalid_request`: malformed SKU", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
fn sale_page() {}

/// The sale page's proof-of-work solver: the script of a dedicated Web Worker, ALTCHA's own v1
/// solver (`altcha-lib`, pinned, bundled) with a small driver that solves a slice of the numbers
/// in chunks and reports its progress between them. Embedded in the Worker; no I/O.
#[utoipa::path(
    get, path = "/sale-worker.js", tag = "sale page",
    responses(
        (status = 200, description = "The script (`text/javascript`), the same for everyone: its own `Content-Security-Policy: default-src 'none'; require-trusted-types-for 'script'; trusted-types 'none'` (it loads and connects to nothing), `X-Content-Type-Options: nosniff`, `Cache-Control: public, max-age=60`", content_type = "text/javascript"),
    )
)]
fn sale_worker() {}

/// Joins the SKU's waiting room (joining again keeps the place) and answers where the shopper
/// stands; when admitted, the answer carries the `pass` purchases need.
#[utoipa::path(
    post, path = "/v1/queue/{sku}", tag = "waiting room",
    params(
        ("sku" = String, Path, description = "1..=64 of [A-Za-z0-9._-]"),
        ("Flashgate-Proof" = Option<String>, Header, description = "Required for a SKU with `proof_of_work`: a solved challenge of `GET /v1/challenge` for this SKU, this shopper and `join` (see the purchase's `Flashgate-Proof`); spent by this join"),
    ),
    security(("shopper_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "The place in line (`Cache-Control: private, no-store`, `Retry-After`: when to poll, `RateLimit-Policy: \"queue\";q=…;w=…` and `RateLimit`)", body = crate::room::answer::QueueAnswer),
        (status = 400, description = "`invalid_request`: malformed SKU", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthenticated`, as for purchases", body = shared::Problem, content_type = "application/problem+json"),
        (status = 403, description = "`csrf_rejected`, as for purchases. `proof_rejected`: a SKU with `proof_of_work` and a `Flashgate-Proof` that does not verify or was used before (carries `challenge_url`)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`unknown_sku`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`no_waiting_room`: the sale has none (buy directly)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 428, description = "`proof_required`: a SKU with `proof_of_work` without `Flashgate-Proof` (carries `challenge_url`)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 429, description = "`rate_limited`: more joins and polls than the shopper's `queue` quota (`QUEUE_RATE_LIMIT_QUOTA` per `QUEUE_RATE_LIMIT_WINDOW_SECS`, per edge instance); `Retry-After` equal to the `RateLimit` `t`. `network_limit`: the SKU's `network_limits.admissions` shoppers of this network (IPv4 /24, IPv6 /48) joined in the window (a member joining again is let through); `Retry-After`, `RateLimit-Policy: \"network\";q=…;w=…`, `RateLimit`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with `Retry-After`: the room's state cannot be reached (fail closed: nobody is admitted by accident), or the edge has no `ROOM_SECRETS` (or no `POW_SECRETS` for a SKU with `proof_of_work`)", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
fn queue_join() {}

/// Where the shopper stands in the SKU's waiting room (the same answer as a join); with the
/// `Flashgate-Queue-Receipt` of the last answer it is served from the data center's cache.
#[utoipa::path(
    get, path = "/v1/queue/{sku}", tag = "waiting room",
    params(
        ("sku" = String, Path, description = "1..=64 of [A-Za-z0-9._-]"),
        ("Flashgate-Queue-Receipt" = Option<String>, Header, description = "The `receipt` of the last answer"),
    ),
    security(("shopper_token" = []), ("session_cookie" = [])),
    responses(
        (status = 200, description = "The place in line, or the pass (`RateLimit-Policy: \"queue\";q=…;w=…` and `RateLimit`)", body = crate::room::answer::QueueAnswer),
        (status = 400, description = "`invalid_request`: malformed SKU", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthenticated`, as for purchases", body = shared::Problem, content_type = "application/problem+json"),
        (status = 403, description = "`csrf_rejected`, as for purchases", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not_in_queue`: this shopper never joined; `unknown_sku`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`no_waiting_room`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 429, description = "`rate_limited`: more joins and polls than the shopper's `queue` quota (as for a join)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with `Retry-After` (fail closed)", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
fn queue_poll() {}

/// The waiting room's counters: joined, admitted, the rate, and each Durable Object's requests
/// and peak requests per second.
#[utoipa::path(
    get, path = "/v1/queue/{sku}/stats", tag = "waiting room",
    params(("sku" = String, Path, description = "1..=64 of [A-Za-z0-9._-]")),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The counters (`Cache-Control: no-store`)", body = crate::room::protocol::RoomStats),
        (status = 400, description = "`invalid_request`: malformed SKU", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`: missing or wrong admin token", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with `Retry-After`", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
fn queue_stats() {}

/// Liveness.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "`{\"status\":\"ok\"}`")))]
fn healthz() {}

/// Readiness: the edge's settings (vars and secrets) parse, so it can serve.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses((status = 200, description = "`{\"status\":\"ready\"}`"), (status = 503, description = "`unavailable`, with `Retry-After`: a setting or secret is missing or malformed (the reason is in the Worker's logs)", body = shared::Problem, content_type = "application/problem+json")))]
fn readyz() {}

/// This description.
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "OpenAPI 3.1 description", content_type = "application/json")))]
fn openapi_json() {}

/// The edge API description.
#[derive(OpenApi, Debug)]
#[openapi(
    info(
        title = "Flashgate edge",
        description = "The shopper-facing API of the Flashgate Cloudflare Worker. It authenticates shoppers, \
            applies per-user rate limits and idempotency, refuses sold-out SKUs from its cache, and forwards the \
            surviving purchase attempts, signed, to the origin. Every error is application/problem+json (RFC 9457) \
            with a stable `code`; 429 and 503 carry Retry-After.",
        license(name = "Apache-2.0")
    ),
    paths(purchase, challenge, order, order_cancel, sku_view, queue_join, queue_poll, queue_stats, sale_page, sale_worker, warmup, healthz, readyz, openapi_json),
    components(schemas(
        shared::PurchaseRequest,
        shared::PurchaseResponse,
        shared::SkuView,
        shared::WaitingRoom,
        shared::ProofOfWork,
        shared::NetworkLimits,
        crate::proof::Issued,
        crate::proof::Challenge,
        crate::proof::altcha_v2::Challenge,
        crate::proof::altcha_v2::Parameters,
        crate::proof::altcha_v2::Data,
        shared::OrderView,
        shared::OrderStatus,
        shared::Problem,
        shared::ErrorCode,
        crate::warmup::Report,
        crate::room::answer::QueueAnswer,
        crate::room::protocol::RoomStats,
        crate::room::protocol::ObjectStats
    )),
    modifiers(&Security),
    tags((name = "purchases"), (name = "orders"), (name = "catalogue"), (name = "waiting room"), (name = "bot defence"), (name = "sale page"), (name = "operations"))
)]
pub struct ApiDoc;

struct Security;

impl utoipa::Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{
            ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme,
        };
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "shopper_token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .description(Some(
                        "HS256 JWT signed with a key of SESSION_SECRETS (a header `kid` selects it; without one every key is tried); `sub` is the shopper id, `exp` required, `nbf` honoured",
                    ))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "session_cookie",
            SecurityScheme::ApiKey(ApiKey::Cookie(ApiKeyValue::with_description(
                crate::session::COOKIE_NAME,
                "The shopper token (as `shopper_token`) in the HttpOnly `flashgate_session` cookie the shop sets on the edge's host. \
                 CSRF defence: a request that authenticates with it must carry `X-Flashgate-CSRF: 1`, and its `Origin` and \
                 `Sec-Fetch-Site` (when sent) must be this edge; else 403 `csrf_rejected`. An `Authorization` header, when present, wins.",
            ))),
        );
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("one of ADMIN_TOKENS"))
                    .build(),
            ),
        );
    }
}

/// The description as pretty JSON (what `docs/openapi-edge.json` holds).
pub fn json() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|_| String::from("{}"))
}
