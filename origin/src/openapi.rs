//! The OpenAPI 3.1 description of the origin's HTTP API, generated from the handlers' and the
//! wire types' annotations (utoipa) and served at `GET /openapi.json`. `docs/openapi.json` is the
//! committed copy; a test fails when the two differ.

use utoipa::OpenApi;

use crate::routes;

/// The origin API description.
#[derive(OpenApi, Debug)]
#[openapi(
    info(
        title = "Flashgate origin",
        description = "Decides flash-sale purchase attempts forwarded (and signed) by the Flashgate edge. \
            Every error is application/problem+json (RFC 9457) with a stable `code`; 503s carry Retry-After.",
        license(name = "Apache-2.0")
    ),
    paths(
        routes::purchases::create,
        routes::skus::get,
        routes::admin::put_sku,
        routes::health::healthz,
        routes::health::readyz,
        routes::health::metrics,
        routes::openapi_json,
    ),
    components(schemas(
        shared::PurchaseRequest,
        shared::PurchaseResponse,
        shared::SkuView,
        shared::SkuUpsert,
        shared::Problem,
        shared::ErrorCode
    )),
    modifiers(&Security),
    tags((name = "purchases"), (name = "catalogue"), (name = "admin"), (name = "operations"))
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

/// The description as pretty JSON (what `/openapi.json` serves).
pub fn json() -> String {
    ApiDoc::openapi()
        .to_pretty_json()
        .unwrap_or_else(|_| String::from("{}"))
}
