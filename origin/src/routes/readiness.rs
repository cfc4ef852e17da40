//! The `/readyz` probe ([`Readiness`]): Postgres and every Redlock node asked, one probe at a
//! time, and what it found ([`Probe`]), which `health::readyz` answers.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use sqlx::PgPool;

use redlock::{NodeState, QuorumStatus, Redlock};

/// What one readiness probe found.
#[derive(Debug, Clone)]
pub(super) enum Probe {
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
    pub(super) async fn check(&self, pool: &PgPool, lock: &Redlock) -> Probe {
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
        let (db, states) = tokio::join!(crate::store::ping(pool), lock.node_states());
        let status = lock.quorum_status();
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

/// The `lock` member of a 503 from `/readyz`.
#[derive(Debug, Clone, Serialize)]
pub(super) struct LockReadiness {
    /// Configured Redis nodes.
    pub(super) nodes: usize,
    /// Votes needed.
    pub(super) quorum: usize,
    /// Nodes that answered this probe and can vote.
    pub(super) voting: usize,
    /// Each node's state by its index in `REDIS_URLS`: `ready`, `recovering` (restart guard)
    /// or `unreachable`.
    pub(super) node_states: Vec<&'static str>,
    /// Whether purchases needing the lock answer 503 at once (the loss outlasted
    /// `REDLOCK_QUORUM_LOSS_GRACE_MS`).
    pub(super) failing_fast: bool,
    /// How long fewer than a quorum of nodes have been able to vote, as far as the lock knows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) quorum_lost_ms: Option<u64>,
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
