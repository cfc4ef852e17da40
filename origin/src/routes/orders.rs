//! `GET /v1/orders/{order_id}` and the order actions `POST /v1/orders/{order_id}/pay`,
//! `/cancel`, `/refund`: parse, authenticate, then hand the action to the order service
//! (`crate::orders`), whose answer is written here.
//!
//! Who may call: the shop backend with an admin bearer token — any order, every action — and, for
//! the read and the cancellation only, a shopper through the edge, which signs the request like a
//! purchase (`Flashgate-Signature` over the method, the path, `Flashgate-User` and the body): a
//! shopper sees and cancels only their own orders, anyone else's is 404 `order_not_found`.
//! Checks in order: credentials (an admin token before any body byte is read), body size and
//! deadline, order id (400 `invalid_request`), body, then the action.

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Uri, header};
use shared::{ErrorCode, OrderView, RefundRequest};
use uuid::Uuid;

use super::AppState;
use crate::orders::{OrderAction, OrderError, PaymentSource, Requester};
use crate::problem::ApiError;
use crate::{auth, body};

/// The order id of the path; 400 `invalid_request` for anything but a UUID.
fn order_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::try_parse(raw).map_err(|_| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            "the order id must be a UUID (as in the purchase's 201)",
        )
    })
}

/// Who is asking: the shop (admin bearer token) or, where `shoppers` allows, a shopper whose
/// request the edge signed. Reads the body (the signature covers it) and returns it.
async fn requester(
    app: &AppState,
    headers: &HeaderMap,
    method: &str,
    uri: &Uri,
    request: Body,
) -> Result<(Requester, bytes::Bytes), ApiError> {
    if headers.contains_key(header::AUTHORIZATION) {
        // The token first: a caller without it gets its 401 without the body being read.
        auth::require_admin(headers, &app.credentials.admin_tokens)?;
        return Ok((Requester::Shop, body::read_limited(request).await?));
    }
    let signed = headers.contains_key(shared::headers::SIGNATURE)
        || headers.contains_key(shared::headers::USER);
    if !signed {
        return Err(ApiError::new(
            ErrorCode::Unauthorized,
            "an admin bearer token, or the edge's signature of the shopper's request, is required",
        ));
    }
    let bytes = body::read_limited(request).await?;
    let now = chrono::Utc::now().timestamp();
    let edge = auth::verify_edge(headers, &app.credentials, method, uri.path(), &bytes, now)?;
    app.metrics.count_signature(&edge.signature);
    Ok((Requester::Shopper(edge.user), bytes))
}

/// The answer to an order error.
fn refusal(e: OrderError) -> ApiError {
    match e {
        OrderError::NotFound => ApiError::new(ErrorCode::OrderNotFound, "no such order"),
        OrderError::State { current } => ApiError::new(
            ErrorCode::OrderState,
            format!("the order is {current}: this action does not apply to it"),
        )
        .with_current(current.as_str()),
        e if e.is_unavailable() => ApiError::unavailable(&e),
        e => ApiError::internal(&e),
    }
}

async fn act(
    app: &AppState,
    raw: &str,
    action: OrderAction,
    who: Requester,
) -> Result<Json<OrderView>, ApiError> {
    let id = order_id(raw)?;
    app.orders
        .apply(id, action, who)
        .await
        .map(Json)
        .map_err(refusal)
}

/// An order: its state, and when a hold expires.
#[utoipa::path(
    get, path = "/v1/orders/{order_id}", tag = "orders",
    params(("order_id" = String, Path, description = "The order id of the purchase's 201 (a UUID)")),
    security(("admin_token" = []), ("edge_signature" = [])),
    responses(
        (status = 200, body = shared::OrderView),
        (status = 400, description = "`invalid_request`: not a UUID", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized` (admin token) or `bad_signature` (edge)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`order_not_found` (for a shopper: not one of theirs)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with Retry-After", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn get(
    State(app): State<AppState>,
    Path(raw): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    request: Body,
) -> Result<Json<OrderView>, ApiError> {
    let (who, _) = requester(&app, &headers, "GET", &uri, request).await?;
    let id = order_id(&raw)?;
    app.orders.get(id, &who).await.map(Json).map_err(refusal)
}

/// The shop recorded the payment of a hold (`held` → `paid`). A payment after the hold expired
/// takes a unit again if one is left (`paid`), else the order becomes `refund_due`.
#[utoipa::path(
    post, path = "/v1/orders/{order_id}/pay", tag = "orders",
    params(("order_id" = String, Path, description = "The order id of the purchase's 201 (a UUID)")),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The order now (a repeat answers the same and changes nothing)", body = shared::OrderView),
        (status = 400, description = "`invalid_request`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`order_not_found`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`order_state`, with the order's `current` state", body = shared::Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with Retry-After", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn pay(
    State(app): State<AppState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    request: Body,
) -> Result<Json<OrderView>, ApiError> {
    auth::require_admin(&headers, &app.credentials.admin_tokens)?;
    body::read_limited(request).await?;
    let action = OrderAction::Pay {
        source: PaymentSource::Api,
    };
    act(&app, &raw, action, Requester::Shop).await
}

/// Cancels a hold or a confirmed order; its units go back on sale, and the answer comes once
/// every origin process sells them (about one second after the commit).
#[utoipa::path(
    post, path = "/v1/orders/{order_id}/cancel", tag = "orders",
    params(("order_id" = String, Path, description = "The order id of the purchase's 201 (a UUID)")),
    security(("admin_token" = []), ("edge_signature" = [])),
    responses(
        (status = 200, description = "The order now (a repeat answers the same and changes nothing)", body = shared::OrderView),
        (status = 400, description = "`invalid_request`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized` (admin token) or `bad_signature` (edge)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`order_not_found` (for a shopper: not one of theirs)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`order_state`, with the order's `current` state", body = shared::Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with Retry-After", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn cancel(
    State(app): State<AppState>,
    Path(raw): Path<String>,
    uri: Uri,
    headers: HeaderMap,
    request: Body,
) -> Result<Json<OrderView>, ApiError> {
    let (who, _) = requester(&app, &headers, "POST", &uri, request).await?;
    act(&app, &raw, OrderAction::Cancel, who).await
}

/// Refunds a confirmed or paid order; with `"restock": true` its units go back on sale (the
/// answer then comes once every origin process sells them).
#[utoipa::path(
    post, path = "/v1/orders/{order_id}/refund", tag = "orders",
    params(("order_id" = String, Path, description = "The order id of the purchase's 201 (a UUID)")),
    request_body = shared::RefundRequest,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The order now (a repeat answers the same and changes nothing)", body = shared::OrderView),
        (status = 400, description = "`invalid_request`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`order_not_found`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`order_state`, with the order's `current` state", body = shared::Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with Retry-After", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn refund(
    State(app): State<AppState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    request: Body,
) -> Result<Json<OrderView>, ApiError> {
    auth::require_admin(&headers, &app.credentials.admin_tokens)?;
    let bytes = body::read_limited(request).await?;
    let id = order_id(&raw)?;
    let refund = RefundRequest::from_json(&bytes)?;
    let action = OrderAction::Refund {
        restock: refund.restock,
    };
    app.orders
        .apply(id, action, Requester::Shop)
        .await
        .map(Json)
        .map_err(refusal)
}
