//! What the lock knows of its quorum ([`QuorumStatus`], from the nodes' circuit breakers and
//! recovery windows, no node contacted) and what its nodes answer to a health probe
//! ([`NodeState`]) — off the acquire path, for readiness probes, and at startup
//! ([`Redlock::warm_up`]); an acquire asks [`Redlock::quorum_status`] before each attempt to fail
//! fast on a known quorum loss.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use super::Redlock;
use crate::scripts;
use crate::standing::quorum_lost_since;
use crate::tally::{Answer, Confirmations};

/// What the lock knows of its quorum, from its nodes' circuit breakers and the recovery
/// windows they reported ([`Redlock::quorum_status`]). No node is contacted to build it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct QuorumStatus {
    /// Configured nodes.
    pub nodes: usize,
    /// Votes needed.
    pub quorum: usize,
    /// Nodes able to vote: circuit breaker closed and not in a restart recovery window.
    pub voting: usize,
    /// How long fewer than a quorum have been able to vote; `None` while a quorum can.
    pub lost_for: Option<Duration>,
    /// Whether acquires fail at once with [`RedlockError::QuorumLost`]: the loss has lasted
    /// [`RedlockConfig::quorum_loss_grace`] or longer.
    pub failing_fast: bool,
}

/// What a node said to a health probe ([`Redlock::node_states`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeState {
    /// Answering and able to vote.
    Ready,
    /// Answering, but it came back empty and will not vote for `remaining` more (restart
    /// guard; see the module docs).
    Recovering {
        /// Time left in the recovery window, as the node counts it.
        remaining: Duration,
    },
    /// No answer within the timeout.
    Unreachable,
}

impl NodeState {
    /// The state's name: `ready`, `recovering` or `unreachable` (for readiness reports).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Ready => "ready",
            Self::Recovering { .. } => "recovering",
            Self::Unreachable => "unreachable",
        }
    }
}

impl Redlock {
    /// Whether a quorum of nodes answers and can vote (is not in its restart recovery window),
    /// probed within [`RedlockConfig::node_timeout_max`]. For readiness probes. What the nodes
    /// answer also feeds their circuit breakers (an answer readmits a node) and
    /// [`Redlock::quorum_status`].
    pub async fn quorum_reachable(&self) -> bool {
        let invocation = self.health_invocation();
        let timeout = self.inner.config.node_timeout_max;
        let mut probes: FuturesUnordered<_> = self
            .inner
            .nodes
            .iter()
            .map(|node| {
                let invocation = &invocation;
                async move { node.health(invocation, timeout).await }
            })
            .collect();
        let mut confirmations = Confirmations::new(probes.len(), self.inner.quorum);
        while confirmations.outcome().is_none() {
            let Some(result) = probes.next().await else {
                break;
            };
            confirmations.record(match result {
                Ok(0) => Answer::Yes,
                Ok(_) => Answer::No,
                Err(_) => Answer::Failed,
            });
        }
        confirmations.yes() >= self.inner.quorum
    }

    /// What the lock knows of its quorum right now, without contacting any node: how many
    /// nodes can vote, and whether (and for how long) fewer than a quorum have been able to.
    /// While `failing_fast`, acquires fail at once with [`RedlockError::QuorumLost`]. Also
    /// refreshes `redlock_quorum_lost`.
    pub fn quorum_status(&self) -> QuorumStatus {
        let inner = &*self.inner;
        let now = Instant::now();
        let out: Vec<Option<Instant>> = inner.nodes.iter().map(|n| n.out_since(now)).collect();
        let voting = out.iter().filter(|since| since.is_none()).count();
        let lost_for = quorum_lost_since(out, inner.nodes.len(), inner.quorum)
            .map(|since| now.saturating_duration_since(since));
        let failing_fast = lost_for.is_some_and(|lost| lost >= inner.config.quorum_loss_grace);
        let status = QuorumStatus {
            nodes: inner.nodes.len(),
            quorum: inner.quorum,
            voting,
            lost_for,
            failing_fast,
        };
        // Read first: every acquire passes here, and a write per call would bounce the cache
        // line between cores for nothing.
        if inner.failing_fast.load(Ordering::Relaxed) != failing_fast
            && inner.failing_fast.swap(failing_fast, Ordering::Relaxed) != failing_fast
        {
            inner.metrics.quorum_loss_changed(failing_fast);
            if failing_fast {
                tracing::warn!(
                    voting,
                    nodes = status.nodes,
                    quorum = status.quorum,
                    lost_for_ms = lost_for.map(|lost| lost.as_millis()),
                    "redlock quorum lost for longer than the grace: acquires fail at once until probes readmit enough nodes"
                );
            } else {
                tracing::info!(
                    voting,
                    nodes = status.nodes,
                    quorum = status.quorum,
                    "redlock quorum back: acquires contact the nodes again"
                );
            }
        }
        status
    }

    /// Every node's state, probed in parallel within [`RedlockConfig::node_timeout_max`].
    pub async fn node_states(&self) -> Vec<NodeState> {
        let invocation = self.health_invocation();
        let timeout = self.inner.config.node_timeout_max;
        let probes = self.inner.nodes.iter().map(|node| {
            let invocation = &invocation;
            async move {
                match node.health(invocation, timeout).await {
                    Ok(0) => NodeState::Ready,
                    Ok(ms) => NodeState::Recovering {
                        remaining: Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
                    },
                    Err(_) => NodeState::Unreachable,
                }
            }
        });
        futures::future::join_all(probes).await
    }

    /// Connects to every node, loads the scripts, and starts the restart guard on fresh nodes.
    pub(super) async fn warm_up(&self) {
        let timeout = self.inner.config.node_timeout_max;
        let all = [
            &*scripts::ACQUIRE,
            &*scripts::RAISE_FENCE,
            &*scripts::RELEASE,
            &*scripts::EXTEND,
            &*scripts::HEALTH,
        ];
        let preload = self
            .inner
            .nodes
            .iter()
            .map(|node| node.preload(&all, timeout));
        futures::future::join_all(preload).await;
        let _ = self.node_states().await;
    }
}
