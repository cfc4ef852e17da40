//! The HTTP surface: one module per group of routes, all sharing [`AppState`]. Unknown routes and
//! methods answer problem+json too.
//!
//! [`api`] is the one list of routes: each handler is registered with its `#[utoipa::path]`
//! description in one step (utoipa-axum's `routes!`), which adds both the axum route and the
//! path of the OpenAPI document whose frame is `crate::openapi`.

pub(crate) mod admin;
pub mod envelope;
mod extract;
pub mod health;
pub mod limits;
pub(crate) mod orders;
pub(crate) mod payments;
pub(crate) mod purchases;
pub mod readiness;
pub mod reads;
mod refusals;
pub(crate) mod skus;
pub mod state;

use axum::Router;
use axum::extract::State;
use shared::ErrorCode;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::openapi::{ApiDoc, ServedDoc};
use crate::problem::ApiError;
pub use state::{AppState, Credentials, SharedState};

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

/// This API's OpenAPI description: the frame (`crate::openapi`) with every route of [`api`].
pub fn document() -> utoipa::openapi::OpenApi {
    api().split_for_parts().1
}

/// The whole router, with the [`envelope`] (request id, log span, per-request `limits`,
/// no-store) around every route.
///
/// The envelope is ONE tower layer given to ONE `Router::layer`: each `Router::layer` call boxes
/// every route again, and each `tower_http` layer or `from_fn` middleware costs a boxed service,
/// a future or a clone per request.
pub fn router(state: AppState, limits: limits::RequestLimits) -> Router {
    api()
        .split_for_parts()
        .0
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(envelope::Envelope::new(limits))
        .with_state(state)
}

/// `GET /openapi.json`: this API's OpenAPI 3.1 description.
// (The doc comment above is the operation's summary in the document; the JSON is rendered once,
// when the state is built.)
#[utoipa::path(get, path = "/openapi.json", tag = "operations", responses((status = 200, description = "OpenAPI 3.1 description", content_type = "application/json")))]
pub(crate) async fn openapi_json(State(app): State<AppState>) -> ServedDoc {
    app.doc.clone()
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
