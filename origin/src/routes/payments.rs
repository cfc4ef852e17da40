//! `POST /v1/payments/stripe`: Stripe's webhook. Checks in order: the webhook is configured
//! (`PAYMENT_WEBHOOK_SECRETS`, else 404 as if the route did not exist — Stripe retries any
//! non-2xx for days, so events sent before it is configured are not lost), the body's size and
//! deadline, the `Stripe-Signature` (400 `webhook_signature`), the event (400
//! `invalid_request`); then `payments::PaymentWebhooks` records and applies it. Every answer is
//! written and counted here.

use axum::Json;
use axum::extract::{FromRequest, Request, State};
use axum::response::{IntoResponse, Response};
use shared::ErrorCode;

use super::AppState;
use super::refusals::WebhookRefusals;
use crate::body;
use crate::payments::event::PaymentEvent;
use crate::payments::{self, Delivery, MAX_EVENT_BYTES, PaymentWebhooks, WebhookError, signature};
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
    responses((status = 200, description = "Recorded (see `result`)", body = payments::WebhookReceipt), WebhookRefusals)
)]
pub(crate) async fn stripe(
    State(app): State<AppState>,
    StripeSigned { webhooks, event }: StripeSigned,
) -> Response {
    match webhooks.receive(event).await {
        Ok(delivery) => {
            audit(&app, &delivery);
            Json(delivery.receipt()).into_response()
        }
        Err(e) => refused(&app, e).into_response(),
    }
}

/// Counts and audits a decided delivery.
fn audit(app: &AppState, delivery: &Delivery) {
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
}

/// As if the route did not exist: `PAYMENT_WEBHOOK_SECRETS` is not configured.
fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no such route")
}

/// Counts a refused delivery by why, and answers it.
fn refused(app: &AppState, e: WebhookError) -> ApiError {
    match &e {
        WebhookError::Signature(s) => {
            app.metrics.count_webhook_signature_failure(s.reason());
            tracing::info!(reason = s.reason(), "refused payment webhook signature");
        }
        WebhookError::Event(_) => app.metrics.count_payment_event("other", "invalid"),
        WebhookError::Unavailable(_) => app.metrics.count_payment_event("other", "unavailable"),
        WebhookError::Unexpected(_) => app.metrics.count_payment_event("other", "internal"),
    }
    ApiError::from(e)
}

/// A delivery Stripe signed, in the route's order: the webhook is configured (else 404), the
/// body under its cap ([`MAX_EVENT_BYTES`]), the `Stripe-Signature` over it, the event.
pub(crate) struct StripeSigned {
    webhooks: PaymentWebhooks,
    event: PaymentEvent,
}

impl FromRequest<AppState> for StripeSigned {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &AppState) -> Result<Self, ApiError> {
        let Some(webhooks) = app.payments.clone() else {
            return Err(not_found());
        };
        let (parts, body) = req.into_parts();
        let bytes = body::read_at_most(body, MAX_EVENT_BYTES).await?;
        // A value that is not visible ASCII is no Stripe signature: malformed, not missing.
        let header = parts
            .headers
            .get(signature::HEADER)
            .map(|v| v.to_str().unwrap_or(""));
        let now = chrono::Utc::now().timestamp();
        match webhooks.verify(header, &bytes, now) {
            Ok(event) => Ok(Self { webhooks, event }),
            Err(e) => Err(refused(app, e)),
        }
    }
}
