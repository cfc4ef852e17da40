//! Liveness, readiness and metrics. None needs credentials; readiness probes run one at a time
//! ([`Readiness`]) and metrics do not touch the database, so none of them can take the database
//! connections purchases use.

use std::time::Instant;

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
    match app.readiness.check(&app).await {
        Probe::Ready => Ok("ready"),
        Probe::DatabaseDown => Err(ApiError::new(
            ErrorCode::Unavailable,
            "a dependency is unavailable; retry after the Retry-After delay",
        )),
        Probe::QuorumUnreachable => Err(ApiError::new(
            ErrorCode::Unavailable,
            "lock quorum unreachable",
        )),
    }
}

/// What one readiness probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Probe {
    Ready,
    DatabaseDown,
    QuorumUnreachable,
}

/// `/readyz` probes, one at a time: `/readyz` needs no credentials, so a flood of it must cost
/// at most one database connection and one round of Redis pings at a time. A request takes the
/// answer of a probe that started after it arrived (never an older one), or runs one itself:
/// requests arriving during a probe wait for it, then share the next one.
#[derive(Debug, Default)]
pub struct Readiness {
    /// When the last probe started, and what it found.
    last: tokio::sync::Mutex<Option<(Instant, Probe)>>,
}

impl Readiness {
    async fn check(&self, app: &AppState) -> Probe {
        let arrived = Instant::now();
        // Fair: waiters are served in arrival order.
        let mut last = self.last.lock().await;
        if let Some((started, probe)) = *last {
            if started >= arrived {
                return probe;
            }
        }
        let started = Instant::now();
        let (db, lock) = tokio::join!(crate::store::ping(&app.pool), app.lock.quorum_reachable());
        let probe = match (db, lock) {
            (Ok(()), true) => Probe::Ready,
            (Err(e), _) => {
                tracing::warn!(error = %e, "readiness: database unavailable");
                Probe::DatabaseDown
            }
            (_, false) => Probe::QuorumUnreachable,
        };
        *last = Some((started, probe));
        probe
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
