//! Liveness, readiness and metrics. None needs credentials; readiness probes run one at a time
//! ([`Readiness`](super::readiness::Readiness)) and metrics do not touch the database, so none of them can take the database
//! connections purchases use.

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use shared::{ErrorCode, Problem};

use super::AppState;
use super::readiness::{LockReadiness, Probe};
use crate::problem::{ApiError, problem_response};

/// `GET /healthz`: the process is up.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "The process is up", body = String)))]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`: 200 only when Postgres and a quorum of Redlock nodes answer.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses((status = 200, description = "Postgres and a lock quorum answer", body = String), (status = 503, description = "`unavailable`", body = shared::Problem, content_type = "application/problem+json")))]
pub(crate) async fn readyz(State(app): State<AppState>) -> Response {
    readiness_answer(app.readiness.check(&app.pool, &app.lock).await)
}

/// The answer to a readiness probe: 200, or 503 with the reason.
fn readiness_answer(probe: Probe) -> Response {
    match probe {
        Probe::Ready => "ready".into_response(),
        Probe::DatabaseDown => not_ready(
            Problem::new(
                ErrorCode::Unavailable,
                "a dependency is unavailable; retry after the Retry-After delay",
            ),
            "database_unavailable",
            None,
        ),
        Probe::QuorumUnreachable(lock) => {
            let detail = match lock.quorum_lost_ms.filter(|_| lock.failing_fast) {
                Some(ms) => format!(
                    "lock quorum unreachable: {} of {} Redis nodes can vote, {} needed; for {ms} ms now, so purchases answer 503 at once until enough nodes are back",
                    lock.voting, lock.nodes, lock.quorum
                ),
                None => format!(
                    "lock quorum unreachable: {} of {} Redis nodes can vote, {} needed",
                    lock.voting, lock.nodes, lock.quorum
                ),
            };
            let reason = if lock.failing_fast {
                "lock_quorum_lost"
            } else {
                "lock_quorum_unreachable"
            };
            not_ready(
                Problem::new(ErrorCode::Unavailable, detail),
                reason,
                Some((*lock).clone()),
            )
        }
    }
}

/// A 503 from `/readyz`: the problem, plus `reason` (`database_unavailable`,
/// `lock_quorum_unreachable`, or `lock_quorum_lost` while purchases fail at once) and, for the
/// lock, what it knows of its nodes.
#[derive(Debug, Serialize)]
struct NotReady {
    #[serde(flatten)]
    problem: Problem,
    reason: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    lock: Option<LockReadiness>,
}

fn not_ready(problem: Problem, reason: &'static str, lock: Option<LockReadiness>) -> Response {
    let status = problem.status;
    let body = NotReady {
        problem,
        reason,
        lock,
    };
    // Serializing strings, integers and booleans cannot fail; an empty object if it did.
    let json = serde_json::to_string(&body).unwrap_or_else(|_| String::from("{}"));
    problem_response(status, json)
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
