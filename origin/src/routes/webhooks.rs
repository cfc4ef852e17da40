//! The webhook endpoints' admin API, `/v1/admin/webhooks…`: the [`AdminToken`] (before any body
//! byte is read), the body, `events::Endpoints`, the answer. A body the API
//! does not take — unknown fields, a bad URL or type, too large — is 400 `invalid_request`.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Serialize;
use shared::ErrorCode;
use uuid::Uuid;

use super::AppState;
use super::extract::AdminToken;
use super::skus::store_error;
use crate::body;
use crate::events::endpoints::{EndpointError, EndpointView, EndpointWithSecret};
use crate::problem::ApiError;

/// `GET /v1/admin/webhooks`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct EndpointList {
    pub(crate) data: Vec<EndpointView>,
}

/// `POST /v1/admin/webhooks/{id}/replay`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct Replayed {
    /// Deliveries queued (events already waiting for this endpoint keep their place).
    pub(crate) replayed: u64,
}

fn refusal(e: EndpointError) -> ApiError {
    match e {
        EndpointError::Invalid(detail) => ApiError::new(ErrorCode::InvalidRequest, detail),
        EndpointError::NotFound => {
            ApiError::new(ErrorCode::WebhookNotFound, "no such webhook endpoint")
        }
        EndpointError::CursorExpired { after, horizon } => ApiError::new(
            ErrorCode::CursorExpired,
            format!(
                "events after {after} were purged (EVENT_RETENTION_DAYS); the oldest kept come after {horizon}"
            ),
        ),
        EndpointError::Store(e) => store_error(e),
    }
}

/// The body (after the [`AdminToken`]) — one too large is this API's 400 `invalid_request`.
async fn admin_body(request: Body) -> Result<bytes::Bytes, ApiError> {
    body::read_limited(request).await.map_err(|e| {
        if e.code() == ErrorCode::PayloadTooLarge {
            ApiError::new(
                ErrorCode::InvalidRequest,
                format!("the body is larger than {} bytes", body::MAX_BODY_BYTES),
            )
        } else {
            e
        }
    })
}

fn endpoint_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::try_parse(raw).map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            "a webhook endpoint id is a UUID (as in the creation's answer)",
        )
    })
}

/// Registers a webhook endpoint: every event committed from now on whose type it wants is
/// POSTed to it, signed the Standard Webhooks way. The answer is the only one (with a rotation's)
/// that shows the secret.
#[utoipa::path(
    post, path = "/v1/admin/webhooks", tag = "webhooks",
    request_body = crate::events::endpoints::CreateEndpoint,
    security(("admin_token" = [])),
    responses(
        (status = 201, body = EndpointWithSecret),
        (status = 400, description = "`invalid_request`: a URL that does not parse, is not https (http only on a loopback host unless WEBHOOK_ALLOW_HTTP), carries credentials; an unknown type; an unknown field; a body too large", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with Retry-After", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn create(
    State(app): State<AppState>,
    _: AdminToken,
    request: Body,
) -> Result<(StatusCode, Json<EndpointWithSecret>), ApiError> {
    let bytes = admin_body(request).await?;
    let created = app.webhooks.create(&bytes).await.map_err(refusal)?;
    Ok((StatusCode::CREATED, Json(created)))
}

/// Every webhook endpoint, with its pending deliveries and its failures.
#[utoipa::path(
    get, path = "/v1/admin/webhooks", tag = "webhooks",
    security(("admin_token" = [])),
    responses(
        (status = 200, body = EndpointList),
        (status = 401, description = "`unauthorized`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with Retry-After", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn list(
    State(app): State<AppState>,
    _: AdminToken,
) -> Result<Json<EndpointList>, ApiError> {
    let data = app.webhooks.list().await.map_err(refusal)?;
    Ok(Json(EndpointList { data }))
}

/// One webhook endpoint: pending deliveries, the oldest one's age, the last error, failing since.
#[utoipa::path(
    get, path = "/v1/admin/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "The endpoint id (a UUID)")),
    security(("admin_token" = [])),
    responses(
        (status = 200, body = EndpointView),
        (status = 400, description = "`invalid_request`: not a UUID", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`webhook_not_found`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with Retry-After", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn get(
    State(app): State<AppState>,
    _: AdminToken,
    Path(raw): Path<String>,
) -> Result<Json<EndpointView>, ApiError> {
    let id = endpoint_id(&raw)?;
    app.webhooks.get(id).await.map(Json).map_err(refusal)
}

/// Changes an endpoint: `enabled` (`true` resumes its waiting deliveries, in order, with a fresh
/// retry schedule), `url`, `types`, `description`.
#[utoipa::path(
    patch, path = "/v1/admin/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "The endpoint id (a UUID)")),
    request_body = crate::events::endpoints::PatchEndpoint,
    security(("admin_token" = [])),
    responses(
        (status = 200, body = EndpointView),
        (status = 400, description = "`invalid_request`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`webhook_not_found`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with Retry-After", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn update(
    State(app): State<AppState>,
    _: AdminToken,
    Path(raw): Path<String>,
    request: Body,
) -> Result<Json<EndpointView>, ApiError> {
    let bytes = admin_body(request).await?;
    let id = endpoint_id(&raw)?;
    app.webhooks
        .update(id, &bytes)
        .await
        .map(Json)
        .map_err(refusal)
}

/// Deletes an endpoint and its waiting deliveries.
#[utoipa::path(
    delete, path = "/v1/admin/webhooks/{id}", tag = "webhooks",
    params(("id" = String, Path, description = "The endpoint id (a UUID)")),
    security(("admin_token" = [])),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "`invalid_request`: not a UUID", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`webhook_not_found`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with Retry-After", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn delete(
    State(app): State<AppState>,
    _: AdminToken,
    Path(raw): Path<String>,
) -> Result<StatusCode, ApiError> {
    let id = endpoint_id(&raw)?;
    app.webhooks.delete(id).await.map_err(refusal)?;
    Ok(StatusCode::NO_CONTENT)
}

/// A new secret (shown here only); for 24 hours both the new and the previous secret sign every
/// delivery (two space-separated `v1,` signatures), so the receiver can switch at its pace.
#[utoipa::path(
    post, path = "/v1/admin/webhooks/{id}/rotate-secret", tag = "webhooks",
    params(("id" = String, Path, description = "The endpoint id (a UUID)")),
    security(("admin_token" = [])),
    responses(
        (status = 200, body = EndpointWithSecret),
        (status = 400, description = "`invalid_request`: not a UUID", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`webhook_not_found`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with Retry-After", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn rotate_secret(
    State(app): State<AppState>,
    _: AdminToken,
    Path(raw): Path<String>,
    request: Body,
) -> Result<Json<EndpointWithSecret>, ApiError> {
    admin_body(request).await?;
    let id = endpoint_id(&raw)?;
    app.webhooks.rotate(id).await.map(Json).map_err(refusal)
}

/// Re-delivers kept events to this endpoint: those after a feed cursor (`{"after": …}`), or
/// those made in a time range (`{"since": …, "until"?: …}`). Same `webhook-id`s as before, so a
/// receiver that deduplicates ignores what it already has.
#[utoipa::path(
    post, path = "/v1/admin/webhooks/{id}/replay", tag = "webhooks",
    params(("id" = String, Path, description = "The endpoint id (a UUID)")),
    request_body = crate::events::endpoints::ReplayRequest,
    security(("admin_token" = [])),
    responses(
        (status = 202, body = Replayed),
        (status = 400, description = "`invalid_request`: neither or both of `after` and `since`, a bad cursor or date", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`webhook_not_found`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 410, description = "`cursor_expired`: `after` is older than the oldest event kept", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with Retry-After", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn replay(
    State(app): State<AppState>,
    _: AdminToken,
    Path(raw): Path<String>,
    request: Body,
) -> Result<(StatusCode, Json<Replayed>), ApiError> {
    let bytes = admin_body(request).await?;
    let id = endpoint_id(&raw)?;
    let replayed = app.webhooks.replay(id, &bytes).await.map_err(refusal)?;
    Ok((StatusCode::ACCEPTED, Json(Replayed { replayed })))
}
