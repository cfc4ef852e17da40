//! The OpenAPI 3.1 description of the origin's HTTP API — beside the request path, not on it.
//! This module holds the document's frame: its info, tags, security schemes and the wire types'
//! schemas. The paths are not listed here: `routes` registers each route together with its
//! `#[utoipa::path]` description in one step (utoipa-axum's `OpenApiRouter` and `routes!`), so
//! the router and the document cannot disagree, and this module depends on no route (`routes`
//! uses it, never the other way). The finished document is rendered once when the router is
//! built ([`ServedDoc`]) and served at `GET /openapi.json`; `docs/openapi.json` is the committed
//! copy, and a test fails when the two differ.

use axum::http::header;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use utoipa::OpenApi;

/// The frame of the origin API description; `routes::api` adds every path to it.
#[derive(OpenApi, Debug)]
#[openapi(
    info(
        title = "Flashgate origin",
        description = "Decides flash-sale purchase attempts forwarded (and signed) by the Flashgate edge. \
            Every error is application/problem+json (RFC 9457) with a stable `code`; 503s carry Retry-After.",
        license(name = "Apache-2.0")
    ),
    components(schemas(
        shared::PurchaseRequest,
        shared::PurchaseResponse,
        shared::SkuView,
        shared::SkuUpsert,
        shared::WaitingRoom,
        shared::ProofOfWork,
        shared::PowAlgorithm,
        shared::NetworkLimits,
        shared::Problem,
        shared::ErrorCode,
        shared::OrderView,
        shared::OrderStatus,
        shared::RefundRequest
    )),
    modifiers(&Security),
    tags((name = "purchases"), (name = "orders"), (name = "payments"), (name = "events"), (name = "webhooks"), (name = "catalogue"), (name = "admin"), (name = "operations"))
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
            "admin_token",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some("one of ADMIN_TOKENS (or ADMIN_TOKEN)"))
                    .build(),
            ),
        );
        components.add_security_scheme(
            "edge_signature",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::with_description(
                "Flashgate-Signature",
                "v2 (what the edge sends): t=<unix seconds>,kid=<key id>,v2=<hex HMAC-SHA256(secret of kid, netstrings of \
                 flashgate-signature-v2, t, kid, METHOD, path, Flashgate-User, Idempotency-Key, sha256_hex(body))>, \
                 a netstring being <byte length>:<bytes>, (docs/signing.md). \
                 v1 (accepted while ACCEPT_SIGNATURE_V1=true, against every configured secret): \
                 t=<unix seconds>,v1=<hex HMAC-SHA256(secret, \"{t}.{METHOD}.{path}.{Flashgate-User}.{Idempotency-Key}.{sha256_hex(body)}\")>. \
                 |now - t| <= 300 s.",
            ))),
        );
    }
}

/// The finished description as pretty JSON, rendered once: the answer of `GET /openapi.json`.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct ServedDoc(Bytes);

impl ServedDoc {
    /// Renders `doc` (the frame with every route's path added).
    pub fn render(doc: &utoipa::openapi::OpenApi) -> Self {
        // Serializing the document's strings and maps cannot fail; an empty object if it did.
        let json = doc.to_pretty_json().unwrap_or_else(|_| String::from("{}"));
        Self(Bytes::from(json))
    }
}

impl IntoResponse for ServedDoc {
    fn into_response(self) -> Response {
        ([(header::CONTENT_TYPE, "application/json")], self.0).into_response()
    }
}
