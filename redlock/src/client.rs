//! [`Redlock`]: the handle on the lock — its nodes, quorum, configuration and metrics, built once
//! by [`Redlock::connect`] — and what every operation shares: which nodes to contact, the keys of
//! a lock, the validity left. The operations, each contacting every node in parallel and deciding
//! as soon as the outcome is known, are in the files below: `acquire` (with retries), `held`
//! (extend, raise the fence, release a lease), `health` (quorum status and node probes), over
//! `fanout` (one script run on many nodes at once).

mod acquire;
mod fanout;
mod health;
mod held;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use redis::ScriptInvocation;

use crate::audit::{AuditSink, TracingAudit};
use crate::config::{RedlockConfig, Ttl};
use crate::error::{ConfigError, RedlockError};
use crate::metrics::RedlockMetrics;
use crate::node::Node;
use crate::scripts;
pub use health::{NodeState, QuorumStatus};

/// A distributed lock over N independent Redis masters. Cheap to clone: clones share the
/// connections and metrics.
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
    /// Where this handle's audit events go ([`Redlock::with_audit`]).
    audit: Arc<dyn AuditSink>,
}

struct Inner {
    /// In URL order; a node's index is its name everywhere.
    nodes: Vec<Arc<Node>>,
    /// `nodes.len() / 2 + 1`.
    quorum: usize,
    /// Validated once in `connect`.
    config: RedlockConfig,
    metrics: RedlockMetrics,
    /// Whether acquires are being refused for a known quorum loss (as of the last check), so
    /// that the change is logged and exported once.
    failing_fast: AtomicBool,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Keep `redlock_quorum_lost` a count of live clients.
        if *self.failing_fast.get_mut() {
            self.metrics.quorum_loss_changed(false);
        }
    }
}

/// The keys an operation on one lock touches.
struct Keys {
    lock: String,
    fence: String,
}

impl Redlock {
    /// Builds the lock over `urls` (one `redis://` or `rediss://` URL per independent node;
    /// TLS then verifies against the system's roots — for a private CA or client certificates
    /// build the clients yourself and use [`Redlock::connect_clients`]). Fails only for an
    /// invalid configuration or URL: connections are made lazily and re-made in the background,
    /// so this succeeds even when some or all nodes are down. A background task then connects to
    /// every node, loads the scripts and starts the restart guard of nodes that are new or came
    /// back empty.
    pub async fn connect(
        urls: &[String],
        config: RedlockConfig,
        metrics: RedlockMetrics,
    ) -> Result<Self, RedlockError> {
        let clients = urls
            .iter()
            .enumerate()
            .map(|(index, url)| {
                redis::Client::open(url.as_str())
                    .map_err(|source| ConfigError::InvalidUrl { index, source })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::connect_clients(clients, config, metrics).await
    }

    /// Like [`Redlock::connect`], over already built clients (one per node, in order), e.g.
    /// `redis::Client::build_with_tls` ones.
    pub async fn connect_clients(
        clients: Vec<redis::Client>,
        config: RedlockConfig,
        metrics: RedlockMetrics,
    ) -> Result<Self, RedlockError> {
        config.validate()?;
        let probe = Arc::new(health_invocation(&config));
        let nodes = Node::open_all(clients, &config, &metrics, &probe)?;
        let quorum = nodes.len() / 2 + 1;
        let redlock = Self {
            inner: Arc::new(Inner {
                nodes,
                quorum,
                config,
                metrics,
                failing_fast: AtomicBool::new(false),
            }),
            audit: Arc::new(TracingAudit),
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let warm = redlock.clone();
            // Bounded by the probe timeouts; holds a clone only until then.
            runtime.spawn(async move { warm.warm_up().await });
        }
        Ok(redlock)
    }

    /// A handle on the same lock whose calls send their audit events to `sink` (by default
    /// [`TracingAudit`], target `redlock::audit`). Cheap: the connections are shared.
    pub fn with_audit(&self, sink: impl AuditSink) -> Self {
        Self {
            inner: Arc::clone(&self.inner),
            audit: Arc::new(sink),
        }
    }

    /// End of validity of an operation that started at `start`, as of now.
    fn validity_left(&self, start: Instant, ttl: Ttl) -> Option<Instant> {
        self.inner.config.validity_end(start, ttl, Instant::now())
    }

    /// Nodes whose circuit breaker is open, which operations do not contact: all of them as
    /// long as the other nodes can still make a quorum on their own, none otherwise. Skipping
    /// then could only turn every attempt into a certain failure, and a machine-wide stall,
    /// which fails every node at once, would become an outage for a whole back-off; contacting
    /// them costs at most one per-node timeout while the lock is unavailable anyway.
    fn nodes_to_skip(&self) -> Vec<usize> {
        let open: Vec<usize> = self
            .inner
            .nodes
            .iter()
            .filter(|node| !node.is_admitted())
            .map(|node| node.index)
            .collect();
        if self.inner.nodes.len() - open.len() >= self.inner.quorum {
            open
        } else {
            Vec::new()
        }
    }

    /// Every node except those [`Redlock::nodes_to_skip`] leaves out.
    fn admitted_nodes(&self) -> Vec<usize> {
        let skip = self.nodes_to_skip();
        self.all_nodes()
            .filter(|index| !skip.contains(index))
            .collect()
    }

    fn all_nodes(&self) -> std::ops::Range<usize> {
        0..self.inner.nodes.len()
    }

    fn unreachable(&self, available: usize) -> RedlockError {
        RedlockError::Unreachable {
            available,
            nodes: self.inner.nodes.len(),
            quorum: self.inner.quorum,
        }
    }

    fn keys(&self, key: &str) -> Keys {
        let prefix = &self.inner.config.key_prefix;
        Keys {
            lock: format!("{prefix}lock:{key}"),
            fence: format!("{prefix}fence:{key}"),
        }
    }

    fn marker_keys(&self) -> (String, String) {
        marker_keys(&self.inner.config)
    }

    fn health_invocation(&self) -> ScriptInvocation<'static> {
        health_invocation(&self.inner.config)
    }
}

/// The per-node incarnation marker and recovery flag of the restart guard.
fn marker_keys(config: &RedlockConfig) -> (String, String) {
    let prefix = &config.node_key_prefix;
    (
        format!("{prefix}node:incarnation"),
        format!("{prefix}node:recovering"),
    )
}

/// The health script's call: replies 0 when the node can vote, else the ms left in its
/// recovery window (which it starts on a node that is new or came back empty).
fn health_invocation(config: &RedlockConfig) -> ScriptInvocation<'static> {
    let (marker, recovering) = marker_keys(config);
    let mut invocation = scripts::HEALTH.prepare_invoke();
    invocation
        .key(marker)
        .key(recovering)
        .arg(config.recovery_millis());
    invocation
}

/// The audit `result` of a failed call.
fn error_result(error: &RedlockError) -> &'static str {
    match error {
        RedlockError::Contended => "contended",
        RedlockError::Unreachable { .. } => "unreachable",
        RedlockError::QuorumLost { .. } => "quorum_lost",
        RedlockError::ValidityTooShort => "validity_too_short",
        RedlockError::Lost => "lost",
        RedlockError::InvalidConfig(_) => "invalid",
    }
}

impl fmt::Debug for Redlock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // No URLs: they may carry passwords.
        f.debug_struct("Redlock")
            .field("nodes", &self.inner.nodes.len())
            .field("quorum", &self.inner.quorum)
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}
