//! Liveness, readiness and metrics. None needs credentials; readiness probes run one at a time
//! ([`Readiness`]) and metrics do not touch the database, so none of them can take the database
//! connections purchases use.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use shared::{ErrorCode, Problem};

use super::AppState;
use crate::problem::{ApiError, problem_response};
use redlock::{NodeState, QuorumStatus};

/// `GET /healthz`: the process is up.
#[utoipa::path(get, path = "/healthz", tag = "operations", responses((status = 200, description = "The process is up", body = String)))]
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`: 200 only when Postgres and a quorum of Redlock nodes answer.
#[utoipa::path(get, path = "/readyz", tag = "operations", responses((status = 200, description = "Postgres and a lock quorum answer", body = String), (status = 503, description = "`unavailable`", body = shared::Problem, content_type = "application/problem+json")))]
pub(crate) async fn readyz(State(app): State<AppState>) -> Response {
    match app.readiness.check(&app).await {
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

/// What one readiness probe found.
#[derive(Debug, Clone)]
enum Probe {
    Ready,
    DatabaseDown,
    /// Fewer than a quorum of lock nodes can vote; what the lock knows of them.
    QuorumUnreachable(Arc<LockReadiness>),
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
        if let Some((started, probe)) = &*last {
            if *started >= arrived {
                return probe.clone();
            }
        }
        let started = Instant::now();
        // Every node is probed to the end (within the node timeout), not just until a quorum
        // answered: readiness is off the purchase path, and a complete probe keeps each node's
        // breaker and `redlock_node_errors_total` current, and says which nodes are out.
        let (db, states) = tokio::join!(crate::store::ping(&app.pool), app.lock.node_states());
        let status = app.lock.quorum_status();
        let voting = states
            .iter()
            .filter(|s| matches!(s, NodeState::Ready))
            .count();
        let probe = match db {
            Err(e) => {
                tracing::warn!(error = %e, "readiness: database unavailable");
                Probe::DatabaseDown
            }
            Ok(()) if voting >= status.quorum => Probe::Ready,
            Ok(()) => Probe::QuorumUnreachable(Arc::new(LockReadiness::new(&states, &status))),
        };
        *last = Some((started, probe.clone()));
        probe
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

/// The `lock` member of a 503 from `/readyz`.
#[derive(Debug, Clone, Serialize)]
struct LockReadiness {
    /// Configured Redis nodes.
    nodes: usize,
    /// Votes needed.
    quorum: usize,
    /// Nodes that answered this probe and can vote.
    voting: usize,
    /// Each node's state by its index in `REDIS_URLS`: `ready`, `recovering` (restart guard)
    /// or `unreachable`.
    node_states: Vec<&'static str>,
    /// Whether purchases needing the lock answer 503 at once (the loss outlasted
    /// `REDLOCK_QUORUM_LOSS_GRACE_MS`).
    failing_fast: bool,
    /// How long fewer than a quorum of nodes have been able to vote, as far as the lock knows.
    #[serde(skip_serializing_if = "Option::is_none")]
    quorum_lost_ms: Option<u64>,
}

impl LockReadiness {
    fn new(states: &[NodeState], status: &QuorumStatus) -> Self {
        let node_states: Vec<&'static str> = states.iter().map(NodeState::name).collect();
        Self {
            nodes: status.nodes,
            quorum: status.quorum,
            voting: node_states.iter().filter(|s| **s == "ready").count(),
            node_states,
            failing_fast: status.failing_fast,
            quorum_lost_ms: status
                .lost_for
                .map(|lost| u64::try_from(lost.as_millis()).unwrap_or(u64::MAX)),
        }
    }
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
