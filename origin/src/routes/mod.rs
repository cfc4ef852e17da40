//! The HTTP surface: one module per group of routes, all sharing [`AppState`]. Unknown routes and
//! methods answer problem+json too.
//!
//! [`api`] is the one list of routes: each handler is registered with its `#[utoipa::path]`
//! description in one step (utoipa-axum's `routes!`), which adds both the axum route and the
//! path of the OpenAPI document whose frame is `crate::openapi`.

pub(crate) mod admin;
pub mod health;
pub mod limits;
pub(crate) mod orders;
pub(crate) mod payments;
pub(crate) mod purchases;
pub mod reads;
pub(crate) mod skus;

use std::sync::Arc;

use axum::extract::Request;
use axum::http::{HeaderName, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::{Extension, Router};
use prometheus_client::registry::Registry;
use shared::ErrorCode;
use shared::headers::REQUEST_ID;
use sqlx::PgPool;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::Credentials;
use crate::metrics::Metrics;
use crate::openapi::{ApiDoc, ServedDoc};
use crate::orders::OrderService;
use crate::problem::ApiError;
use crate::pseudonym::Pseudonyms;
use crate::purchase::PurchaseService;
use redlock::Redlock;

/// What every handler can reach: ONE `Arc`, so a request's `State` extractor clones (and drops)
/// one pointer, not one per shared part. Reads like the parts it holds ([`SharedState`]).
#[derive(Debug, Clone)]
pub struct AppState(Arc<SharedState>);

impl AppState {
    pub fn new(shared: SharedState) -> Self {
        Self(Arc::new(shared))
    }
}

impl std::ops::Deref for AppState {
    type Target = SharedState;

    fn deref(&self) -> &SharedState {
        &self.0
    }
}

/// The parts of [`AppState`].
#[derive(Debug)]
pub struct SharedState {
    pub pool: PgPool,
    pub purchases: PurchaseService,
    /// Payments, cancellations, refunds and expiries of orders.
    pub orders: OrderService,
    /// The payment provider's webhook; `None` without `PAYMENT_WEBHOOK_SECRETS` (404).
    pub payments: Option<crate::payments::PaymentWebhooks>,
    pub lock: Redlock,
    pub metrics: Arc<Metrics>,
    pub registry: Registry,
    /// Edge signature keys and admin tokens.
    pub credentials: Credentials,
    /// Keyed hashes standing for user ids and keys in logs.
    pub pseudonyms: Pseudonyms,
    /// The public reads' share of the database pool.
    pub reads: reads::ReadGate,
    /// `/readyz` probes, one at a time.
    pub readiness: health::Readiness,
}

/// Every route, each registered once with its OpenAPI description: the axum routes and the
/// document's paths come from this one list.
pub fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(purchases::create))
        .routes(routes!(skus::get))
        .routes(routes!(admin::put_sku))
        .routes(routes!(orders::get))
        .routes(routes!(orders::pay))
        .routes(routes!(orders::cancel))
        .routes(routes!(orders::refund))
        .routes(routes!(payments::stripe))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::metrics))
        .routes(routes!(openapi_json))
}

/// The whole router, with the per-request `limits` in front of every route.
///
/// The layers are one `tower` stack given to ONE `Router::layer` (outermost first): each
/// `Router::layer` call boxes every route again, so one call is one boxed service and one boxed
/// future per request instead of four.
pub fn router(state: AppState, limits: limits::RequestLimits) -> Router {
    let (routes, doc) = api().split_for_parts();
    routes
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(
            tower::ServiceBuilder::new()
                // Keep the edge's request id (or make one), log under it, echo it back.
                .layer(SetRequestIdLayer::new(request_id_header(), MakeRequestUuid))
                .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
                    let id = req.headers().get(REQUEST_ID).and_then(|v| v.to_str().ok()).unwrap_or("-");
                    tracing::info_span!("request", method = %req.method(), path = %req.uri().path(), request_id = %id)
                }))
                .layer(PropagateRequestIdLayer::new(request_id_header()))
                .layer(middleware::from_fn(no_store))
                .layer(middleware::from_fn_with_state(limits, limits::enforce))
                .layer(Extension(ServedDoc::render(&doc))),
        )
        .with_state(state)
}

/// `GET /openapi.json`: this API's OpenAPI 3.1 description.
// (The doc comment above is the operation's summary in the document; the JSON is rendered once,
// by `router`.)
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "OpenAPI 3.1 description", content_type = "application/json")))]
pub(crate) async fn openapi_json(Extension(doc): Extension<ServedDoc>) -> ServedDoc {
    doc
}

fn request_id_header() -> HeaderName {
    HeaderName::from_static(REQUEST_ID)
}

async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no such route")
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "method not allowed on this route",
    )
}

/// API answers are per request; intermediaries must not cache them (the edge caches SKU views
/// deliberately, with its own policy).
async fn no_store(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    res.headers_mut()
        .entry(header::CACHE_CONTROL)
        .or_insert(header::HeaderValue::from_static("no-store"));
    res
}
