//! `POST /v1/purchases`: checks in the contract's order — body size, edge signature and user,
//! Idempotency-Key, body — then hands the attempt to the purchase service.

use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use shared::headers::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED};
use shared::{ErrorCode, IdempotencyKey, PurchaseRequest};

use super::AppState;
use crate::problem::{ApiError, problem_response};
use crate::purchase::DecidedBy;
use crate::store::Attempt;
use crate::{auth, body};

/// Decide a purchase attempt (called by the edge only).
#[utoipa::path(
    post, path = "/v1/purchases", tag = "purchases",
    request_body(content = shared::PurchaseRequest, description = "Unknown fields are ignored; at most 16 KiB"),
    params(
        ("Idempotency-Key" = String, Header, description = "1..=255 visible ASCII, or the RFC 8941 sf-string form"),
        ("Flashgate-User" = String, Header, description = "The shopper, 1..=64 of [A-Za-z0-9._:@-]"),
        ("Flashgate-Request-Id" = Option<String>, Header, description = "Propagated into logs and echoed back"),
    ),
    security(("edge_signature" = [])),
    responses(
        (status = 201, description = "Purchased (or `Idempotent-Replayed: true` replay)", body = shared::PurchaseResponse),
        (status = 400, description = "`invalid_request` or `missing_idempotency_key`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`bad_signature`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`unknown_sku` (stored with the key)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 409, description = "`sold_out`, `purchase_limit` (stored) or `idempotency_in_flight`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 408, description = "`request_timeout`: the body did not arrive within `HTTP_BODY_READ_TIMEOUT_MS` (not stored)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`: header fields above `HTTP_MAX_HEADER_BYTES`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 422, description = "`idempotency_key_reused`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with Retry-After", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn create(
    State(app): State<AppState>,
    headers: HeaderMap,
    request: Body,
) -> Response {
    let started = Instant::now();
    app.metrics.purchase_requests.inc();
    let response = match decide(&app, &headers, request).await {
        Ok(res) => res,
        Err(e) => {
            app.metrics.count_outcome(e.code().as_str());
            e.into_response()
        }
    };
    app.metrics
        .purchase_duration
        .observe(started.elapsed().as_secs_f64());
    response
}

async fn decide(app: &AppState, headers: &HeaderMap, request: Body) -> Result<Response, ApiError> {
    let bytes = body::read_limited(request).await?;
    let now = chrono::Utc::now().timestamp();
    let signed = auth::verify_edge(
        headers,
        &app.credentials,
        "POST",
        "/v1/purchases",
        &bytes,
        now,
    )?;
    app.metrics.count_signature(&signed.signature);
    let user = signed.user;
    let key = match headers.get(IDEMPOTENCY_KEY) {
        None => {
            return Err(ApiError::new(
                ErrorCode::MissingIdempotencyKey,
                "the Idempotency-Key header is required",
            ));
        }
        Some(raw) => IdempotencyKey::parse_bytes(raw.as_bytes())?,
    };
    let request = PurchaseRequest::from_json(&bytes)?;
    let sku = request.sku.clone();
    // From here on the shopper and the key appear in logs only as pseudonyms.
    let (who, key_ref) = (
        app.pseudonyms.user(user.as_str()),
        app.pseudonyms.key(user.as_str(), key.as_str()),
    );
    let answer = match app.purchases.submit(Attempt { user, key, request }).await {
        Ok(answer) => answer,
        Err(e) => {
            tracing::info!(
                target: "flashgate::audit",
                event = "purchase",
                sku = %sku, user = %who, key = %key_ref,
                outcome = e.code().as_str(), status = e.code().status(),
                "purchase not decided"
            );
            return Err(e);
        }
    };

    let outcome = if answer.replayed {
        "replayed"
    } else if answer.status == 201 {
        "created"
    } else {
        serde_json::from_str::<shared::Problem>(&answer.body).map_or("unknown", |p| p.code.as_str())
    };
    app.metrics.count_outcome(outcome);
    let (decided_by, batch_id, fence) = match answer.decided_by {
        DecidedBy::Batch(b) => ("batch", Some(b.id), Some(b.fence)),
        // The label predates the in-process knowledge (it was a Redis mark); kept for log queries.
        DecidedBy::SoldOutFastPath => ("sold_out_mark", None, None),
    };
    tracing::info!(
        target: "flashgate::audit",
        event = "purchase",
        sku = %sku, user = %who, key = %key_ref,
        outcome, status = answer.status,
        decided_by, batch_id = batch_id.map(tracing::field::display), fence,
        "purchase decided"
    );
    let mut res = if answer.status == 201 {
        let mut res = (StatusCode::CREATED, answer.body).into_response();
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        res
    } else {
        problem_response(answer.status, answer.body)
    };
    if answer.replayed {
        res.headers_mut()
            .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    Ok(res)
}
