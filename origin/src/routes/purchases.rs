//! `POST /v1/purchases`: checks in the contract's order — body size, edge signature and user,
//! Idempotency-Key, body: the [`EdgeSigned`] extractor — then hands the attempt to the purchase
//! service, and writes, counts and audits its answer.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use shared::headers::IDEMPOTENT_REPLAYED;

use super::AppState;
use super::extract::{Arrived, EdgeSigned, Purchase};
use super::refusals::PurchaseRefusals;
use crate::problem::{ApiError, problem_response};
use crate::purchase::{Answer, Attempt};
use crate::telemetry::traces;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// Decide a purchase attempt (called by the edge only).
#[utoipa::path(
    post, path = "/v1/purchases", tag = "purchases",
    request_body(content = shared::PurchaseRequest, description = "Unknown fields are ignored; at most 16 KiB"),
    params(
        ("Idempotency-Key" = String, Header, description = "1..=255 visible ASCII, or the RFC 8941 sf-string form"),
        ("Flashgate-User" = String, Header, description = "The shopper, 1..=64 of [A-Za-z0-9._:@-]"),
        ("Flashgate-Request-Id" = Option<String>, Header, description = "Propagated into logs and echoed back"),
        ("traceparent" = Option<String>, Header, description = "W3C Trace Context: the trace this purchase continues when traces are exported (the edge sends it); missing or malformed starts a new trace"),
        ("tracestate" = Option<String>, Header, description = "W3C Trace Context vendor state, continued with `traceparent`"),
    ),
    security(("edge_signature" = [])),
    responses(
        (status = 201, description = "Purchased (or `Idempotent-Replayed: true` replay)", body = shared::PurchaseResponse),
        PurchaseRefusals,
    )
)]
pub(crate) async fn create(
    State(app): State<AppState>,
    Arrived(started): Arrived,
    signed: Result<EdgeSigned<Purchase>, ApiError>,
) -> Response {
    app.metrics.purchase_requests.inc();
    let response = match signed {
        Ok(signed) => decide(&app, signed).await,
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

async fn decide(app: &AppState, signed: EdgeSigned<Purchase>) -> Response {
    let EdgeSigned {
        user,
        request: Purchase { key, request },
    } = signed;
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
            return error.into_response();
        }
        Answer::Fresh { answer, batch, .. } => (answer, false, "batch", Some(batch)),
        Answer::Replayed { answer, batch } => (answer, true, "batch", Some(batch)),
        Answer::SoldOutKnown(answer) => (answer, false, "knowledge", None),
    };
    if let Some(batch) = batch.filter(|_| traces::on()) {
        // The request's trace span (telemetry::traces): which batch decided it.
        tracing::Span::current().set_attribute("flashgate.batch.id", batch.id.to_string());
    }
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
    res
}
