//! One Redis node: parsing its URL, its long-lived multiplexed connection (redis-rs
//! `ConnectionManager`, which reconnects in the background), running a script on it under a
//! per-node timeout (failures counted in `redlock_node_errors_total{node}`), and a circuit
//! breaker that lets acquires skip a node that just timed out or dropped its connection until a
//! background probe sees it answer again.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, Script, ScriptInvocation};

use super::config::RedlockConfig;
use super::error::ConfigError;
use super::metrics::RedlockMetrics;

/// A Redis node taking part in the lock.
pub(crate) struct Node {
    /// Position in the URL list; the only way the node is named in errors, logs and metrics.
    pub(crate) index: usize,
    /// `index` as a metric label, formatted once.
    label: String,
    /// Where this node's errors are counted (shared with the lock).
    metrics: RedlockMetrics,
    /// Cheap to clone; every clone multiplexes over the same TCP connection. Created lazily, so
    /// a node that is down at startup does not stop the lock from being built.
    connection: ConnectionManager,
    /// A std mutex: held only for a few field updates, never across an `.await`.
    breaker: Mutex<Breaker>,
}

/// Minimum time between two background probes of a suspect node.
const PROBE_INTERVAL: Duration = Duration::from_millis(100);

/// Circuit breaker state of one node.
///
/// Why: a paused or black-holed node makes every acquire wait a full per-node timeout before
/// it can be decided, and under contention every contender then sits on its partial grants for
/// that long, which turns into split votes over and over. Skipping a suspect node is always
/// safe (a vote not asked for is a "no"); it only costs availability if the node was fine.
#[derive(Debug, Default)]
struct Breaker {
    /// Last call timed out or hit a connection error, and no call has succeeded since.
    suspect: bool,
    /// A background probe is running.
    probing: bool,
    /// When the last probe started.
    last_probe: Option<Instant>,
}

/// Why a call to one node produced no answer. The node then simply does not vote.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NodeError {
    #[error("timed out")]
    Timeout,
    #[error(transparent)]
    Redis(#[from] redis::RedisError),
}

impl NodeError {
    /// Whether this says the node is unavailable (as opposed to e.g. a script error).
    fn is_unavailability(&self) -> bool {
        match self {
            Self::Timeout => true,
            Self::Redis(error) => {
                error.is_io_error()
                    || error.is_timeout()
                    || error.is_connection_dropped()
                    || error.is_connection_refusal()
            }
        }
    }
}

impl Node {
    /// Parses every URL (rejecting duplicates) and prepares lazy connections. No I/O happens
    /// here.
    pub(crate) fn open_all(
        urls: &[String],
        config: &RedlockConfig,
        metrics: &RedlockMetrics,
    ) -> Result<Vec<Arc<Self>>, ConfigError> {
        if urls.is_empty() {
            return Err(ConfigError::NoNodes);
        }
        let mut seen: Vec<(redis::ConnectionAddr, i64)> = Vec::with_capacity(urls.len());
        let mut nodes = Vec::with_capacity(urls.len());
        for (index, url) in urls.iter().enumerate() {
            let client = redis::Client::open(url.as_str())
                .map_err(|source| ConfigError::InvalidUrl { index, source })?;
            let info = client.get_connection_info();
            let identity = (info.addr().clone(), info.redis_settings().db());
            if let Some(first) = seen.iter().position(|other| *other == identity) {
                return Err(ConfigError::DuplicateNode { index, first });
            }
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
            nodes.push(Arc::new(Self {
                index,
                label: index.to_string(),
                metrics: metrics.clone(),
                connection,
                breaker: Mutex::new(Breaker::default()),
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
    /// that (an acquire that timed out on a node is released there too).
    pub(crate) async fn run<T: FromRedisValue>(
        &self,
        invocation: &ScriptInvocation<'_>,
        timeout: Duration,
    ) -> Result<T, NodeError> {
        let mut connection = self.connection.clone();
        let call = invocation.invoke_async(&mut connection);
        let error = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(value)) => {
                self.note(true);
                return Ok(value);
            }
            Ok(Err(error)) => NodeError::Redis(error),
            Err(_elapsed) => NodeError::Timeout,
        };
        if error.is_unavailability() {
            self.note(false);
        }
        self.metrics.node_error(&self.label);
        tracing::debug!(node = self.index, %error, "redlock node call failed");
        Err(error)
    }

    /// Whether the node recently timed out or lost its connection (acquires skip it).
    pub(crate) fn is_suspect(&self) -> bool {
        self.breaker().suspect
    }

    /// Starts a background `PING` of a suspect node, unless one ran within `PROBE_INTERVAL`; a
    /// successful call (this probe or any other) clears the suspicion.
    pub(crate) fn probe_if_due(self: &Arc<Self>, timeout: Duration) {
        let now = Instant::now();
        {
            let mut breaker = self.breaker();
            let recent = breaker
                .last_probe
                .is_some_and(|at| now.saturating_duration_since(at) < PROBE_INTERVAL);
            if !breaker.suspect || breaker.probing || recent {
                return;
            }
            breaker.probing = true;
            breaker.last_probe = Some(now);
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.breaker().probing = false;
            return;
        };
        let node = Arc::clone(self);
        runtime.spawn(async move {
            let mut connection = node.connection.clone();
            let command = redis::cmd("PING");
            let ping = command.query_async::<String>(&mut connection);
            let healthy = matches!(tokio::time::timeout(timeout, ping).await, Ok(Ok(_)));
            let mut breaker = node.breaker();
            breaker.probing = false;
            if healthy {
                breaker.suspect = false;
            }
        });
    }

    fn note(&self, healthy: bool) {
        self.breaker().suspect = !healthy;
    }

    fn breaker(&self) -> std::sync::MutexGuard<'_, Breaker> {
        // The state is a few flags, valid whatever a panicking holder left half-done.
        self.breaker.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl fmt::Debug for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Not the connection: its Debug would print the URL's password.
        f.debug_struct("Node")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}
