//! One Redis node: its long-lived multiplexed connection (redis-rs `ConnectionManager`, which
//! reconnects in the background), running a script on it under a per-node timeout (failures
//! counted in `redlock_node_errors_total{node}`), and its standing ([`crate::standing`]: its
//! circuit breaker and restart recovery window): the node's calls feed it, a background task
//! probes the node while the breaker is open, and breaker transitions are logged and exported
//! (`redlock_node_breaker_*`).

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, Script, ScriptInvocation};

use crate::breaker::Transition;
use crate::config::RedlockConfig;
use crate::error::ConfigError;
use crate::metrics::RedlockMetrics;
use crate::standing::{Seen, Standing};

/// A Redis node taking part in the lock.
pub(crate) struct Node {
    /// Position in the URL list; how the node is named in errors, logs and metrics.
    pub(crate) index: usize,
    /// `index` as a metric label, formatted once.
    label: String,
    /// `host:port` (never credentials): logs and breaker metrics, to find the machine.
    addr: String,
    /// Where this node's errors are counted (shared with the lock).
    metrics: RedlockMetrics,
    /// Cheap to clone; every clone multiplexes over the same TCP connection. Created lazily, so
    /// a node that is down at startup does not stop the lock from being built.
    connection: ConnectionManager,
    /// Circuit breaker and recovery window. A std mutex: held only for a few field updates,
    /// never across an `.await`.
    standing: Mutex<Standing>,
    /// What the breaker's probe runs: the health script, which also starts the restart guard
    /// of a node that came back empty, so its recovery window begins at readmission.
    probe: Arc<ScriptInvocation<'static>>,
    /// Timeout of one probe.
    probe_timeout: Duration,
}

/// Why a call to one node produced no answer. The node then simply does not vote.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NodeError {
    #[error("timed out")]
    Timeout,
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
}

impl Node {
    /// Prepares lazy connections to `clients` (one per node, in order), rejecting two clients
    /// for the same node. No I/O happens here. `probe` is what the breaker's probe runs.
    pub(crate) fn open_all(
        clients: Vec<redis::Client>,
        config: &RedlockConfig,
        metrics: &RedlockMetrics,
        probe: &Arc<ScriptInvocation<'static>>,
    ) -> Result<Vec<Arc<Self>>, ConfigError> {
        if clients.is_empty() {
            return Err(ConfigError::NoNodes);
        }
        let mut seen: Vec<(redis::ConnectionAddr, i64)> = Vec::with_capacity(clients.len());
        let mut nodes = Vec::with_capacity(clients.len());
        for (index, client) in clients.into_iter().enumerate() {
            let info = client.get_connection_info();
            let identity = (info.addr().clone(), info.redis_settings().db());
            if let Some(first) = seen.iter().position(|other| *other == identity) {
                return Err(ConfigError::DuplicateNode { index, first });
            }
            let addr = info.addr().to_string();
            seen.push(identity);
            let manager_config = ConnectionManagerConfig::new()
                .set_connection_timeout(Some(config.connect_timeout))
                // Every call carries its own per-node timeout; see `Node::run`.
                .set_response_timeout(None)
                // Background reconnects: quick first retries, then at most one try per second.
                .set_min_delay(Duration::from_millis(20))
                .set_max_delay(Duration::from_secs(1))
                .set_number_of_retries(4);
            let connection = ConnectionManager::new_lazy_with_config(client, manager_config)
                .map_err(|source| ConfigError::InvalidUrl { index, source })?;
            let label = index.to_string();
            metrics.breaker_known(&label, &addr);
            nodes.push(Arc::new(Self {
                index,
                label,
                addr,
                metrics: metrics.clone(),
                connection,
                standing: Mutex::new(Standing::new(config.breaker())),
                probe: Arc::clone(probe),
                probe_timeout: config.node_timeout_max,
            }));
        }
        Ok(nodes)
    }

    /// Loads `scripts` (`SCRIPT LOAD`) so that first calls skip the `NOSCRIPT` round trip.
    /// Best effort: a node that restarts later pays that round trip once.
    pub(crate) async fn preload(&self, scripts: &[&Script], timeout: Duration) {
        for script in scripts {
            let mut connection = self.connection.clone();
            let loaded = tokio::time::timeout(timeout, script.load_async(&mut connection)).await;
            if !matches!(loaded, Ok(Ok(_))) {
                return;
            }
        }
    }

    /// Runs `invocation` on this node, giving up after `timeout`. A command that was already
    /// written to the socket when the timeout fires still runs on the node; callers account for
    /// that (an acquire that timed out on a node is released there too). The outcome feeds the
    /// node's circuit breaker.
    pub(crate) async fn run<T: FromRedisValue>(
        self: &Arc<Self>,
        invocation: &ScriptInvocation<'_>,
        timeout: Duration,
    ) -> Result<T, NodeError> {
        self.run_seen(invocation, timeout, |_| Seen::Answered).await
    }

    /// [`Node::run`], where `seen` reads from the reply what it says about the node's ability
    /// to vote (recovering or not), recorded together with the breaker's bookkeeping.
    pub(crate) async fn run_seen<T: FromRedisValue>(
        self: &Arc<Self>,
        invocation: &ScriptInvocation<'_>,
        timeout: Duration,
        seen: impl FnOnce(&T) -> Seen,
    ) -> Result<T, NodeError> {
        let started = Instant::now();
        let mut connection = self.connection.clone();
        let call = invocation.invoke_async(&mut connection);
        let error = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(value)) => {
                let moved = self.standing().on_answer(seen(&value), Instant::now());
                self.apply(moved);
                return Ok(value);
            }
            Ok(Err(error)) => NodeError::Redis(error),
            Err(_elapsed) => NodeError::Timeout,
        };
        let moved = self
            .standing()
            .on_failure(started, Instant::now(), &mut rand::rng());
        self.apply(moved);
        self.metrics.node_error(&self.label);
        tracing::debug!(node = self.index, %error, "redlock node call failed");
        Err(error)
    }

    /// Runs the health script (`invocation`, the probe's): `Ok(0)` when the node can vote, else
    /// the ms left in its recovery window.
    pub(crate) async fn health(
        self: &Arc<Self>,
        invocation: &ScriptInvocation<'_>,
        timeout: Duration,
    ) -> Result<i64, NodeError> {
        self.run_seen(invocation, timeout, |ms: &i64| health_seen(*ms))
            .await
    }

    /// Whether the breaker is closed, i.e. operations contact the node.
    pub(crate) fn is_admitted(&self) -> bool {
        self.standing().breaker().is_closed()
    }

    /// Since when the node has been unable to vote (breaker open, or in its recovery window);
    /// `None` if it can vote at `now`.
    pub(crate) fn out_since(&self, now: Instant) -> Option<Instant> {
        self.standing().out_since(now)
    }

    /// Logs and exports a breaker transition; an opening starts the background prober.
    fn apply(self: &Arc<Self>, transition: Option<Transition>) {
        let Some(transition) = transition else {
            return;
        };
        match transition {
            Transition::Opened { failures, backoff } => {
                self.metrics.breaker_moved(&self.label, &self.addr, true);
                tracing::warn!(
                    node = self.index,
                    addr = %self.addr,
                    failures,
                    backoff_ms = millis(backoff),
                    "redlock node circuit breaker opened: the node is skipped until a probe sees it answer"
                );
                let episode = self.standing().breaker().episode();
                self.spawn_prober(episode);
            }
            Transition::Reopened { backoff } => {
                tracing::debug!(
                    node = self.index,
                    addr = %self.addr,
                    backoff_ms = millis(backoff),
                    "redlock node probe failed; circuit breaker stays open"
                );
            }
            Transition::Closed { out_for } => {
                self.metrics.breaker_moved(&self.label, &self.addr, false);
                tracing::info!(
                    node = self.index,
                    addr = %self.addr,
                    out_for_ms = millis(out_for),
                    "redlock node circuit breaker closed: the node is readmitted"
                );
            }
        }
    }

    /// Probes the node each time the open breaker's back-off runs out, until the breaker closes
    /// or opens anew (another episode, another prober). Holds only a weak reference, so a
    /// dropped lock stops its probers.
    fn spawn_prober(self: &Arc<Self>, episode: u64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let weak: Weak<Self> = Arc::downgrade(self);
        runtime.spawn(async move {
            loop {
                let wait = {
                    let Some(node) = weak.upgrade() else { return };
                    let standing = node.standing();
                    let breaker = standing.breaker();
                    if breaker.episode() != episode {
                        return;
                    }
                    match breaker.wait_for_probe(Instant::now()) {
                        Some(wait) => wait,
                        None => return,
                    }
                };
                tokio::time::sleep(wait).await;
                let Some(node) = weak.upgrade() else { return };
                {
                    let mut standing = node.standing();
                    let breaker = standing.breaker();
                    if breaker.episode() != episode || breaker.is_closed() {
                        return;
                    }
                    if !standing.start_probe(Instant::now()) {
                        continue;
                    }
                }
                let answer = node.probe_once().await;
                let moved =
                    node.standing()
                        .probe_finished(answer, Instant::now(), &mut rand::rng());
                node.apply(moved);
            }
        });
    }

    /// One probe: the health script within the probe timeout; what the node said, `None` if
    /// it did not answer. Not counted as a node error (it is the breaker's business, and would
    /// make a dead node's error count grow forever).
    async fn probe_once(&self) -> Option<Seen> {
        let mut connection = self.connection.clone();
        let call = self.probe.invoke_async::<i64>(&mut connection);
        match tokio::time::timeout(self.probe_timeout, call).await {
            Ok(Ok(ms)) => Some(health_seen(ms)),
            _ => None,
        }
    }

    fn standing(&self) -> MutexGuard<'_, Standing> {
        // The state is a few fields, valid whatever a panicking holder left half-done.
        self.standing.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a health script reply (0, or the ms of recovery left) says about the node.
fn health_seen(recovering_ms: i64) -> Seen {
    match u64::try_from(recovering_ms) {
        Ok(ms) if ms > 0 => Seen::Recovering(Duration::from_millis(ms)),
        _ => Seen::Voting,
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl Drop for Node {
    fn drop(&mut self) {
        // Keep `redlock_node_breaker_open` a count of live clients skipping the node.
        if !self.is_admitted() {
            self.metrics.breaker_dropped(&self.label, &self.addr);
        }
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the connection: its Debug would print the URL's password.
        f.debug_struct("Node")
            .field("index", &self.index)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}
