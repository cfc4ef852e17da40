//! `POST /v1/payments/stripe`: Stripe's webhook. Checks in order: the webhook is configured
//! (`PAYMENT_WEBHOOK_SECRETS`, else 404 as if the route did not exist — Stripe retries any
//! non-2xx for days, so events sent before it is configured are not lost), the body's size and
//! deadline, the `Stripe-Signature` (400 `webhook_signature`), the event (400
//! `invalid_request`); then `payments::PaymentWebhooks` records and applies it. Every answer is
//! written and counted here.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use shared::ErrorCode;

use super::AppState;
use crate::body;
use crate::payments::{self, MAX_EVENT_BYTES, WebhookError, signature};
use crate::problem::ApiError;

/// Receive a Stripe event (called by Stripe only).
///
/// Answered 200 once the event is recorded — applied, or deliberately ignored (unknown type or
/// order, a failure after the payment …) — so Stripe stops retrying; a repeated event id applies
/// nothing and is answered from the first delivery's result.
#[utoipa::path(
    post, path = "/v1/payments/stripe", tag = "payments",
    request_body(content = Object, description = "A Stripe event, verified over its raw bytes (at most 256 KiB); the order id is in `data.object.metadata.order_id`", content_type = "application/json"),
    params(
        ("Stripe-Signature" = String, Header, description = "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, \"{t}.{raw body}\")>[,v1=…]; any v1 under any of PAYMENT_WEBHOOK_SECRETS; |now - t| <= 300 s; other schemes (v0) ignored"),
    ),
    responses(
        (status = 200, description = "Recorded (see `result`)", body = payments::WebhookReceipt),
        (status = 400, description = "`webhook_signature` (missing, malformed, stale or forged signature; nothing changed) or `invalid_request` (signed, but not an event)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 404, description = "`not_found`: PAYMENT_WEBHOOK_SECRETS is not configured", body = shared::Problem, content_type = "application/problem+json"),
        (status = 408, description = "`request_timeout`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`, with Retry-After (Stripe retries; the event is applied by a later delivery)", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn stripe(
    State(app): State<AppState>,
    headers: HeaderMap,
    request: Body,
) -> Response {
    let Some(webhooks) = &app.payments else {
        return ApiError::new(ErrorCode::NotFound, "no such route").into_response();
    };
    let bytes = match body::read_at_most(request, MAX_EVENT_BYTES).await {
        Ok(bytes) => bytes,
        Err(e) => return e.into_response(),
    };
    // A value that is not visible ASCII is no Stripe signature: malformed, not missing.
    let header = headers
        .get(signature::HEADER)
        .map(|v| v.to_str().unwrap_or(""));
    let now = chrono::Utc::now().timestamp();
    match webhooks.receive(header, &bytes, now).await {
        Ok(delivery) => {
            let kind = delivery.event.kind.as_str();
            let result = if delivery.duplicate {
                "duplicate"
            } else {
                delivery.outcome.as_str()
            };
            app.metrics.count_payment_event(kind, result);
            tracing::info!(
                target: "flashgate::audit",
                event = "payment_event",
                event_id = %delivery.event.id,
                event_type = %delivery.event.raw_type,
                order_id = delivery.event.order.map(tracing::field::display),
                result = delivery.outcome.as_str(),
                duplicate = delivery.duplicate,
                "payment event decided"
            );
            Json(delivery.receipt()).into_response()
        }
        Err(e) => {
            match &e {
                WebhookError::Signature(s) => {
                    app.metrics.count_webhook_signature_failure(s.reason());
                    tracing::info!(reason = s.reason(), "refused payment webhook signature");
                }
                WebhookError::Event(_) => app.metrics.count_payment_event("other", "invalid"),
                WebhookError::Unavailable(_) => {
                    app.metrics.count_payment_event("other", "unavailable");
                }
                WebhookError::Unexpected(_) => app.metrics.count_payment_event("other", "internal"),
            }
            ApiError::from(e).into_response()
        }
    }
}
