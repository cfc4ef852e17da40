//! Liveness, readiness and metrics.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use shared::ErrorCode;

use super::AppState;
use crate::problem::ApiError;

/// `GET /healthz`: the process is up.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "The process is up", body = String)))]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`: 200 only when Postgres and a quorum of Redlock nodes answer.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses((status = 200, description = "Postgres and a lock quorum answer", body = String), (status = 503, description = "`unavailable`", body = shared::Problem, content_type = "application/problem+json")))]
pub(crate) async fn readyz(State(app): State<AppState>) -> Result<&'static str, ApiError> {
    let (db, lock) = tokio::join!(crate::store::ping(&app.pool), app.lock.quorum_reachable());
    match (db, lock) {
        (Ok(()), true) => Ok("ready"),
        (Err(e), _) => Err(ApiError::unavailable(&e)),
        (_, false) => Err(ApiError::new(
            ErrorCode::Unavailable,
            "lock quorum unreachable",
        )),
    }
}

/// `GET /metrics`: Prometheus text exposition.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses((status = 200, description = "OpenMetrics 1.0 text exposition (Prometheus scrapes it)", body = String, content_type = "application/openmetrics-text")))]
pub(crate) async fn metrics(State(app): State<AppState>) -> Response {
    // Sizes of the in-memory tables, read now.
    let gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    app.metrics
        .combiners
        .set(gauge(app.purchases.combiner_count()));
    app.metrics
        .in_flight
        .set(gauge(app.purchases.in_flight_count()));
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &app.registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(e) => ApiError::internal(&e).into_response(),
    }
}
