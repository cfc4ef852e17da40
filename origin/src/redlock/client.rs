//! [`Redlock`]: the operations (acquire with retries, extend, release, health), each contacting
//! every node in parallel and deciding as soon as the outcome is known.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::ScriptInvocation;

use super::backoff::Backoff;
use super::config::{RedlockConfig, Ttl};
use super::error::{ConfigError, RedlockError};
use super::lease::Lease;
use super::metrics::{AcquireResult, RedlockMetrics};
use super::node::Node;
use super::scripts::{self, AcquireReply};
use super::tally::{AcquireTally, Answer, Confirmations, Refusal, Vote};

/// A distributed lock over N independent Redis masters. Cheap to clone: clones share the
/// connections and metrics.
#[derive(Clone)]
pub struct Redlock {
    inner: Arc<Inner>,
}

struct Inner {
    nodes: Vec<Node>,
    /// `nodes.len() / 2 + 1`.
    quorum: usize,
    /// Validated once in `connect`.
    config: RedlockConfig,
    metrics: RedlockMetrics,
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

/// The keys an operation on one lock touches.
struct Keys {
    lock: String,
    fence: String,
}

impl Redlock {
    /// Builds the lock over `urls` (one `redis://` URL per independent node). Fails only for an
    /// invalid configuration or URL: connections are made lazily and re-made in the background,
    /// so this succeeds even when some or all nodes are down. A background probe then connects
    /// to every node (and starts the restart guard of nodes that are new or came back empty).
    pub async fn connect(
        urls: &[String],
        config: RedlockConfig,
        metrics: RedlockMetrics,
    ) -> Result<Self, RedlockError> {
        config.validate()?;
        let nodes = Node::open_all(urls, &config)?;
        let quorum = nodes.len() / 2 + 1;
        let redlock = Self {
            inner: Arc::new(Inner {
                nodes,
                quorum,
                config,
                metrics,
            }),
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let warm = redlock.clone();
            // Bounded by the probe timeout; holds a clone only until then.
            runtime.spawn(async move {
                let _ = warm.node_states().await;
            });
        }
        Ok(redlock)
    }

    /// Votes needed: `N / 2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }

    /// Number of nodes.
    pub fn nodes(&self) -> usize {
        self.inner.nodes.len()
    }

    /// The configuration in force.
    pub fn config(&self) -> &RedlockConfig {
        &self.inner.config
    }

    /// Acquires `key` for `ttl`, retrying with decorrelated jitter until
    /// [`RedlockConfig::retry_deadline`] from now. See [`Redlock::acquire_until`].
    pub async fn acquire(&self, key: &str, ttl: Duration) -> Result<Lease, RedlockError> {
        // `retry_deadline` is validated to at most a day, so this cannot overflow in practice;
        // if it did, the call would degrade to a single attempt.
        let deadline = Instant::now()
            .checked_add(self.inner.config.retry_deadline)
            .unwrap_or_else(Instant::now);
        self.acquire_inner(key, ttl, Some(deadline)).await
    }

    /// Acquires `key` for `ttl`, retrying with decorrelated jitter while attempts fail
    /// (contended, unreachable, too little validity) and a next attempt can start before
    /// `deadline`. The last attempt starts before the deadline and takes at most about three
    /// per-node timeouts. On failure returns the last attempt's error.
    pub async fn acquire_until(
        &self,
        key: &str,
        ttl: Duration,
        deadline: Instant,
    ) -> Result<Lease, RedlockError> {
        self.acquire_inner(key, ttl, Some(deadline)).await
    }

    /// One acquire attempt, no retry.
    pub async fn try_acquire(&self, key: &str, ttl: Duration) -> Result<Lease, RedlockError> {
        self.acquire_inner(key, ttl, None).await
    }

    /// Makes `lease` valid for `ttl` from now (compare-and-pexpire on every node). Succeeds only
    /// if a quorum still holds the lease's token and answers within its current validity.
    ///
    /// Errors: [`RedlockError::Lost`] if the lease had expired or a quorum no longer holds it
    /// (its validity is then zero); [`RedlockError::Unreachable`] if too few nodes answered
    /// (the lease keeps its current validity); [`RedlockError::ValidityTooShort`] if the nodes
    /// extended it but the extension took the whole new TTL.
    pub async fn extend(&self, lease: &mut Lease, ttl: Duration) -> Result<(), RedlockError> {
        let ttl = self.inner.config.check_ttl(ttl)?;
        let result = self.extend_inner(lease, ttl).await;
        if let Err(error) = &result {
            self.inner.metrics.extend_failed();
            tracing::debug!(key = lease.key(), %error, "redlock extend failed");
        }
        result
    }

    /// Releases `lease` (compare-and-delete on every node: never deletes another holder's lock).
    ///
    /// Errors: [`RedlockError::Lost`] if the lease's validity had already run out (the protected
    /// work may have overlapped another holder's); [`RedlockError::Unreachable`] if fewer than a
    /// quorum of nodes answered (the lock then expires by its TTL there). Either way, every
    /// reachable node has dropped the lease's token.
    pub async fn release(&self, lease: Lease) -> Result<(), RedlockError> {
        let remaining = lease.remaining();
        self.inner.metrics.released(remaining.as_secs_f64());
        let keys = self.keys(lease.key());
        let timeout = self.inner.config.node_timeout(lease.ttl());
        let mut invocation = scripts::RELEASE.prepare_invoke();
        invocation.key(&keys.lock).arg(lease.token());
        let confirmations = self
            .confirm(
                self.all_nodes(),
                self.inner.quorum,
                &invocation,
                timeout,
                answer_any,
            )
            .await;
        if remaining.is_zero() {
            Err(RedlockError::Lost)
        } else if confirmations.answered() < self.inner.quorum {
            Err(self.unreachable(confirmations.answered()))
        } else {
            Ok(())
        }
    }

    /// Whether a quorum of nodes answers and can vote (not in restart recovery), within
    /// [`RedlockConfig::node_timeout_max`]. For readiness probes.
    pub async fn quorum_reachable(&self) -> bool {
        let invocation = self.health_invocation();
        let timeout = self.inner.config.node_timeout_max;
        let confirmations = self
            .confirm(
                self.all_nodes(),
                self.inner.quorum,
                &invocation,
                timeout,
                |reply: i64| {
                    if reply == 0 { Answer::Yes } else { Answer::No }
                },
            )
            .await;
        confirmations.yes() >= self.inner.quorum
    }

    /// Every node's state, probed in parallel within [`RedlockConfig::node_timeout_max`].
    pub async fn node_states(&self) -> Vec<NodeState> {
        let invocation = self.health_invocation();
        let timeout = self.inner.config.node_timeout_max;
        let metrics = &self.inner.metrics;
        let probes = self.inner.nodes.iter().map(|node| {
            let invocation = &invocation;
            async move {
                match node.run::<i64>(invocation, timeout, metrics).await {
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

    /// Attempts until one succeeds or the next could not start before `deadline` (`None`: a
    /// single attempt).
    async fn acquire_inner(
        &self,
        key: &str,
        ttl: Duration,
        deadline: Option<Instant>,
    ) -> Result<Lease, RedlockError> {
        let started = Instant::now();
        if key.is_empty() {
            return Err(ConfigError::EmptyKey.into());
        }
        let ttl = self.inner.config.check_ttl(ttl)?;
        let keys = self.keys(key);
        let config = &self.inner.config;
        let mut backoff = Backoff::new(config.retry_base_delay, config.retry_max_delay);
        let result = loop {
            let attempt = self.attempt(key, &keys, ttl).await;
            let Err(error) = attempt else { break attempt };
            let Some(deadline) = deadline else {
                break Err(error);
            };
            let pause = backoff.next_delay(&mut rand::rng());
            match Instant::now().checked_add(pause) {
                Some(resume) if resume < deadline => {}
                _ => break Err(error),
            }
            tracing::trace!(key, %error, ?pause, "redlock attempt failed; retrying");
            tokio::time::sleep(pause).await;
        };
        let outcome = match &result {
            Ok(_) => AcquireResult::acquired,
            Err(RedlockError::Contended) => AcquireResult::contended,
            Err(RedlockError::ValidityTooShort) => AcquireResult::validity_too_short,
            Err(_) => AcquireResult::unreachable,
        };
        self.inner
            .metrics
            .acquire_finished(outcome, started.elapsed().as_secs_f64());
        result
    }

    /// One attempt: SET NX on every node in parallel, decide at the first moment a quorum is
    /// certain or impossible, settle the fence, check validity; on failure release whatever was
    /// acquired before returning.
    async fn attempt(&self, key: &str, keys: &Keys, ttl: Ttl) -> Result<Lease, RedlockError> {
        let inner = &*self.inner;
        inner.metrics.attempt();
        let token = format!("{:032x}", rand::random::<u128>());
        let timeout = inner.config.node_timeout(ttl.duration);
        let marker = self.marker_keys();
        let mut invocation = scripts::ACQUIRE.prepare_invoke();
        invocation
            .key(&keys.lock)
            .key(&keys.fence)
            .key(&marker.0)
            .key(&marker.1)
            .arg(&token)
            .arg(ttl.millis)
            .arg(inner.config.recovery_millis())
            .arg(fence_floor());

        let start = Instant::now();
        let mut tally = AcquireTally::new(inner.nodes.len(), inner.quorum);
        {
            let mut votes: FuturesUnordered<_> = inner
                .nodes
                .iter()
                .map(|node| {
                    let invocation = &invocation;
                    async move {
                        let vote = match node
                            .run::<(i64, i64)>(invocation, timeout, &inner.metrics)
                            .await
                        {
                            Ok(reply) => match AcquireReply::decode(reply) {
                                Some(AcquireReply::Granted { fence }) => Vote::Granted(fence),
                                Some(AcquireReply::Held) => Vote::Held,
                                Some(AcquireReply::Recovering) => Vote::Recovering,
                                None => {
                                    tracing::warn!(
                                        node = node.index,
                                        ?reply,
                                        "unexpected redlock acquire reply"
                                    );
                                    Vote::Failed
                                }
                            },
                            Err(_) => Vote::Failed,
                        };
                        (node.index, vote)
                    }
                })
                .collect();
            while let Some((index, vote)) = votes.next().await {
                tally.record(index, vote);
                if tally.outcome().is_some() {
                    // Nodes still in flight are dropped: their command, if sent, still runs,
                    // and they are covered by the release below or by the lease's release.
                    break;
                }
            }
        }
        if let Err(refusal) = tally.final_outcome() {
            self.release_where(keys, &token, timeout, |index| tally.may_hold(index))
                .await;
            return Err(match refusal {
                Refusal::Contended => RedlockError::Contended,
                Refusal::Unreachable { available } => self.unreachable(available),
            });
        }

        let (fence, agreeing) = tally.fence();
        if agreeing < inner.quorum {
            // The granting nodes disagree on the counter: raise the laggards to the quorum's
            // fence, and count only nodes that still hold our lock while at it.
            let mut raise = scripts::RAISE_FENCE.prepare_invoke();
            raise
                .key(&keys.lock)
                .key(&keys.fence)
                .arg(&token)
                .arg(fence);
            let targets = (0..inner.nodes.len()).filter(|index| !tally.granted_with(*index, fence));
            let needed = inner.quorum - agreeing;
            let confirmations = self
                .confirm(targets, needed, &raise, timeout, |reply: i64| {
                    if reply == 1 { Answer::Yes } else { Answer::No }
                })
                .await;
            if confirmations.outcome() != Some(true) {
                self.release_where(keys, &token, timeout, |_| true).await;
                return Err(if self.validity_left(start, ttl).is_none() {
                    RedlockError::ValidityTooShort
                } else {
                    self.unreachable(agreeing + confirmations.yes())
                });
            }
        }

        match self.validity_left(start, ttl) {
            Some((expires_at, _)) => Ok(Lease::new(
                key.to_owned(),
                token,
                fence,
                ttl.duration,
                expires_at,
            )),
            None => {
                self.release_where(keys, &token, timeout, |_| true).await;
                Err(RedlockError::ValidityTooShort)
            }
        }
    }

    async fn extend_inner(&self, lease: &mut Lease, ttl: Ttl) -> Result<(), RedlockError> {
        let inner = &*self.inner;
        let start = Instant::now();
        let old_expiry = lease.expires_at();
        if lease.remaining().is_zero() {
            return Err(RedlockError::Lost);
        }
        let keys = self.keys(lease.key());
        let timeout = inner.config.node_timeout(ttl.duration);
        let mut invocation = scripts::EXTEND.prepare_invoke();
        invocation
            .key(&keys.lock)
            .arg(lease.token())
            .arg(ttl.millis);
        let confirmations = self
            .confirm(
                self.all_nodes(),
                inner.quorum,
                &invocation,
                timeout,
                |reply: i64| {
                    if reply == 1 { Answer::Yes } else { Answer::No }
                },
            )
            .await;
        let now = Instant::now();
        if confirmations.outcome() == Some(true) {
            if now >= old_expiry {
                // The quorum answered, but after the lease had run out: too late to count.
                lease.set_expires_at(now);
                return Err(RedlockError::Lost);
            }
            return match self.validity_left(start, ttl) {
                Some((expires_at, _)) => {
                    lease.extended(ttl.duration, expires_at);
                    Ok(())
                }
                None => Err(RedlockError::ValidityTooShort),
            };
        }
        let refused = confirmations.answered() - confirmations.yes();
        if refused > inner.nodes.len() - inner.quorum || now >= old_expiry {
            // A quorum no longer has our token: the lease is gone. Drop what is left of it so
            // others need not wait for the TTL.
            lease.set_expires_at(now);
            self.release_where(&keys, lease.token(), timeout, |_| true)
                .await;
            return Err(RedlockError::Lost);
        }
        Err(self.unreachable(confirmations.answered()))
    }

    /// `(expires_at, validity)` for an attempt that started at `start`: validity is
    /// `ttl − elapsed − drift`, computed without underflow; `None` if it is not above
    /// `min_validity`.
    fn validity_left(&self, start: Instant, ttl: Ttl) -> Option<(Instant, Duration)> {
        let config = &self.inner.config;
        let horizon = ttl.duration.checked_sub(config.drift(ttl.duration))?;
        let expires_at = start.checked_add(horizon)?;
        let validity = expires_at.checked_duration_since(Instant::now())?;
        (validity > config.min_validity).then_some((expires_at, validity))
    }

    /// Compare-and-delete of `token` on the nodes selected by `select`, waiting for all of them
    /// (each bounded by `timeout`).
    async fn release_where(
        &self,
        keys: &Keys,
        token: &str,
        timeout: Duration,
        select: impl Fn(usize) -> bool,
    ) {
        let mut invocation = scripts::RELEASE.prepare_invoke();
        invocation.key(&keys.lock).arg(token);
        let targets: Vec<usize> = (0..self.inner.nodes.len())
            .filter(|index| select(*index))
            .collect();
        let asked = targets.len();
        // Needing every answer makes `confirm` wait for all of them.
        self.confirm(targets, asked, &invocation, timeout, answer_any)
            .await;
    }

    /// Runs `invocation` on `targets` in parallel until `needed` answers map to `Answer::Yes`
    /// or that becomes impossible. Unfinished calls are dropped (a command already sent still
    /// runs on its node).
    async fn confirm<T: redis::FromRedisValue>(
        &self,
        targets: impl IntoIterator<Item = usize>,
        needed: usize,
        invocation: &ScriptInvocation<'_>,
        timeout: Duration,
        judge: impl Fn(T) -> Answer,
    ) -> Confirmations {
        let inner = &*self.inner;
        let calls: FuturesUnordered<_> = targets
            .into_iter()
            .filter_map(|index| inner.nodes.get(index))
            .map(|node| node.run::<T>(invocation, timeout, &inner.metrics))
            .collect();
        let mut confirmations = Confirmations::new(calls.len(), needed);
        decide(calls, |result| {
            confirmations.record(result.map_or(Answer::Failed, &judge));
            confirmations.outcome().is_some()
        })
        .await;
        confirmations
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

    /// The per-node incarnation marker and recovery flag of the restart guard.
    fn marker_keys(&self) -> (String, String) {
        let prefix = &self.inner.config.key_prefix;
        (
            format!("{prefix}node:incarnation"),
            format!("{prefix}node:recovering"),
        )
    }

    fn health_invocation(&self) -> ScriptInvocation<'static> {
        let (marker, recovering) = self.marker_keys();
        let mut invocation = scripts::HEALTH.prepare_invoke();
        invocation
            .key(marker)
            .key(recovering)
            .arg(self.inner.config.recovery_millis());
        invocation
    }
}

/// Polls `calls` until `on_result` says the outcome is decided or all are done.
async fn decide<F: Future>(
    mut calls: FuturesUnordered<F>,
    mut on_result: impl FnMut(F::Output) -> bool,
) {
    while let Some(result) = calls.next().await {
        if on_result(result) {
            return;
        }
    }
}

/// Any reply counts as an answer (release: deleted or already gone).
fn answer_any(_: i64) -> Answer {
    Answer::Yes
}

/// Floor of a fence counter that does not exist yet on a node: microseconds since the Unix
/// epoch on this machine (0 if the clock reads before 1970).
fn fence_floor() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
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
