//! `POST /v1/purchases`: checks in the contract's order — body size, edge signature and user,
//! Idempotency-Key, body — then hands the attempt to the purchase service.

use std::time::Instant;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use shared::headers::IDEMPOTENT_REPLAYED;
use shared::{ErrorCode, PurchaseRequest};

use super::AppState;
use crate::problem::{ApiError, problem_response};
use crate::purchase::{Answer, Attempt};
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
        (status = 409, description = "`sold_out`, `purchase_limit` (stored) or `idempotency_in_flight`; by the sale's schedule, read with the database's clock (never stored): `not_started` (problem member `starts_at`; `Retry-After` = whole seconds to the start, at least 1), `sale_ended` (`ends_at`), `sale_paused` (`Retry-After: 5`)", body = shared::Problem, content_type = "application/problem+json"),
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
    let key = match signed.idempotency_key {
        None => {
            return Err(ApiError::new(
                ErrorCode::MissingIdempotencyKey,
                "the Idempotency-Key header is required",
            ));
        }
        Some(parsed) => parsed?,
    };
    let request = PurchaseRequest::from_json(&bytes)?;
    // From here on the shopper and the key appear in logs only as pseudonyms. They (two keyed
    // hashes) and the SKU's copy are made only when the audit event will be written.
    let audit = tracing::enabled!(target: "flashgate::audit", tracing::Level::INFO);
    let audited = audit.then(|| {
        (
            request.sku.clone(),
            app.pseudonyms.user(user.as_str()),
            app.pseudonyms.key(user.as_str(), key.as_str()),
        )
    });
    let answer = app.purchases.submit(Attempt { user, key, request }).await;
    let outcome = answer.outcome();
    app.metrics.count_outcome(outcome);
    let (stored, replayed, decided_by, batch) = match answer {
        Answer::Refused(refusal) => {
            let error = refusal.error();
            if let Some((sku, who, key_ref)) = &audited {
                tracing::info!(
                    target: "flashgate::audit",
                    event = "purchase",
                    sku = %sku, user = %who, key = %key_ref,
                    outcome, status = error.code().status(),
                    "purchase not decided"
                );
            }
            return Ok(error.into_response());
        }
        Answer::Fresh { answer, batch, .. } => (answer, false, "batch", Some(batch)),
        Answer::Replayed { answer, batch } => (answer, true, "batch", Some(batch)),
        // The label predates the in-process knowledge (it was a Redis mark); kept for log queries.
        Answer::SoldOutKnown(answer) => (answer, false, "sold_out_mark", None),
    };
    if let Some((sku, who, key_ref)) = &audited {
        tracing::info!(
            target: "flashgate::audit",
            event = "purchase",
            sku = %sku, user = %who, key = %key_ref,
            outcome, status = stored.status,
            decided_by,
            batch_id = batch.map(|b| tracing::field::display(b.id)),
            fence = batch.map(|b| b.fence),
            "purchase decided"
        );
    }
    let mut res = if stored.status == 201 {
        let mut res = (StatusCode::CREATED, stored.body).into_response();
        res.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        res
    } else {
        problem_response(stored.status, stored.body)
    };
    if replayed {
        res.headers_mut()
            .insert(IDEMPOTENT_REPLAYED, HeaderValue::from_static("true"));
    }
    Ok(res)
}
