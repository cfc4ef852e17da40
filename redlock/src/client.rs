//! [`Redlock`]: the operations (acquire with retries, extend, release, health), each contacting
//! every node in parallel and deciding as soon as the outcome is known.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use redis::{FromRedisValue, ScriptInvocation};

use crate::audit::{AuditEvent, AuditSink, NodeList, TracingAudit};
use crate::config::{RedlockConfig, Ttl};
use crate::error::{ConfigError, RedlockError};
use crate::lease::Lease;
use crate::metrics::{AcquireResult, RedlockMetrics};
use crate::node::Node;
use crate::retry::{Failure, RetryPolicy, Waits};
use crate::scripts::{self, AcquireReply};
use crate::standing::{Seen, quorum_lost_since};
use crate::tally::{AcquireTally, Answer, Confirmations, Refusal, Vote};

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

/// The keys an operation on one lock touches.
struct Keys {
    lock: String,
    fence: String,
}

/// What happens to node calls still in flight once an outcome is decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stragglers {
    /// Drop them: a command already sent still runs on its node; one not yet sent never will.
    Drop,
    /// Let them run to completion (or their timeout) in a background task, so that e.g. a
    /// release reaches every reachable node without the caller waiting for the slowest.
    Finish,
    /// Wait for them too (each is bounded by its timeout).
    Await,
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

    /// Acquires `key` for `ttl`. Attempts fail as contended, unreachable or with too little
    /// validity; after each, `policy` says how long to pause before the next
    /// ([`RetryPolicy::ONCE`]: no retry), and retrying stops when the next attempt could not
    /// start before `deadline`. The last attempt starts before the deadline and takes at most
    /// about three per-node timeouts. On failure returns the last attempt's error. A known
    /// quorum loss ([`RedlockError::QuorumLost`], see [`Redlock::quorum_status`]) ends it at
    /// once, before or between attempts: retrying cannot help. [`Lease::contended`] tells whether
    /// an attempt found the lock held by another.
    pub async fn acquire(
        &self,
        key: &str,
        ttl: Duration,
        policy: &RetryPolicy,
        deadline: Instant,
    ) -> Result<Lease, RedlockError> {
        let started = Instant::now();
        let mut attempts = 0_u32;
        let mut granted = Vec::new();
        let mut contended = false;
        let result = self
            .acquire_attempts(
                key,
                ttl,
                policy,
                deadline,
                &mut attempts,
                &mut granted,
                &mut contended,
            )
            .await;
        self.audit.record(&AuditEvent {
            op: "acquire",
            resource: key,
            result: match &result {
                Ok(_) => "acquired",
                Err(error) => error_result(error),
            },
            fence: result.as_ref().ok().map(Lease::fence),
            attempts: Some(attempts),
            granted: Some(NodeList(&granted)),
            validity: result.as_ref().ok().map(Lease::remaining),
            elapsed: started.elapsed(),
        });
        result.map(|lease| lease.after_contention(contended))
    }

    /// Makes `lease` valid for `ttl` from now (compare-and-pexpire on every node). Succeeds only
    /// if a quorum still holds the lease's token and confirms within its current validity. The
    /// fence does not change.
    ///
    /// Errors: [`RedlockError::Lost`] if the lease had expired or a quorum no longer holds it
    /// (its validity is then zero); [`RedlockError::Unreachable`] if too few nodes answered
    /// (the lease keeps its current validity); [`RedlockError::ValidityTooShort`] if the nodes
    /// extended it but the extension took the whole new TTL.
    pub async fn extend(&self, lease: &mut Lease, ttl: Duration) -> Result<(), RedlockError> {
        let started = Instant::now();
        let result = match self.inner.config.check_ttl(ttl) {
            Ok(ttl) => self.extend_inner(lease, ttl).await,
            Err(error) => Err(error.into()),
        };
        if let Err(error) = &result {
            self.inner.metrics.extend_failed();
            tracing::debug!(key = lease.key(), %error, "redlock extend failed");
        }
        self.audit_lease("extend", lease, &result, "extended", lease.fence(), started);
        result
    }

    /// Raises the fence counter of `lease`'s key to at least `at_least` on every node that
    /// answers, so that the next holder's fence exceeds it. Never lowers a counter, so it is
    /// always safe. For a store that refused `lease`'s fence as stale because it has seen a
    /// higher one that these counters did not issue — counters under other key names (an
    /// upgrade that renamed them, a rollback), or a counter recreated by a client whose clock
    /// ran behind: without this, every later fence would be refused too. Ordinary stale
    /// holders (a lease that outlived its validity) are refused too, and raising the counters
    /// to a fence they already passed changes nothing.
    ///
    /// Errors: [`RedlockError::Unreachable`] if fewer than a quorum of nodes ran the raise (it
    /// may then take more than one call for the next fence to exceed `at_least`).
    pub async fn raise_fence(&self, lease: &Lease, at_least: u64) -> Result<(), RedlockError> {
        let started = Instant::now();
        let keys = self.keys(lease.key());
        let mut invocation = scripts::RAISE_FENCE.prepare_invoke();
        invocation
            .key(&keys.lock)
            .key(&keys.fence)
            .arg(lease.token())
            .arg(at_least);
        let confirmations = self
            .confirm(
                self.admitted_nodes(),
                self.inner.quorum,
                invocation,
                self.inner.config.node_timeout(lease.ttl()),
                answer_any,
                Stragglers::Finish,
            )
            .await;
        let result = if confirmations.answered() < self.inner.quorum {
            Err(self.unreachable(confirmations.answered()))
        } else {
            Ok(())
        };
        self.audit_lease("raise_fence", lease, &result, "raised", at_least, started);
        result
    }

    /// Releases `lease` (compare-and-delete on every node: never deletes another holder's lock).
    /// Returns once a quorum answered; the other nodes get the delete in the background.
    ///
    /// Errors: [`RedlockError::Lost`] if the lease's validity had already run out (the protected
    /// work may have overlapped another holder's); [`RedlockError::Unreachable`] if fewer than a
    /// quorum of nodes answered (the lock then expires by its TTL there).
    pub async fn release(&self, lease: Lease) -> Result<(), RedlockError> {
        let started = Instant::now();
        let remaining = lease.remaining();
        self.inner.metrics.released(remaining.as_secs_f64());
        let keys = self.keys(lease.key());
        // Not the TTL-derived timeout: a release has no validity to protect, and one given up
        // too early leaves the lock blocked until its TTL. Only a quorum is waited for.
        let timeout = self.inner.config.node_timeout_max;
        let mut invocation = scripts::RELEASE.prepare_invoke();
        invocation.key(&keys.lock).arg(lease.token());
        let confirmations = self
            .confirm(
                self.admitted_nodes(),
                self.inner.quorum,
                invocation,
                timeout,
                answer_any,
                Stragglers::Finish,
            )
            .await;
        let result = if remaining.is_zero() {
            Err(RedlockError::Lost)
        } else if confirmations.answered() < self.inner.quorum {
            Err(self.unreachable(confirmations.answered()))
        } else {
            Ok(())
        };
        self.audit.record(&AuditEvent {
            op: "release",
            resource: lease.key(),
            result: match &result {
                Ok(()) => "released",
                Err(error) => error_result(error),
            },
            fence: Some(lease.fence()),
            attempts: None,
            granted: None,
            validity: Some(remaining),
            elapsed: started.elapsed(),
        });
        result
    }

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
    async fn warm_up(&self) {
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

    /// The audit event of an extend or fence raise on `lease`.
    fn audit_lease(
        &self,
        op: &'static str,
        lease: &Lease,
        result: &Result<(), RedlockError>,
        done: &'static str,
        fence: u64,
        started: Instant,
    ) {
        self.audit.record(&AuditEvent {
            op,
            resource: lease.key(),
            result: match result {
                Ok(()) => done,
                Err(error) => error_result(error),
            },
            fence: Some(fence),
            attempts: None,
            granted: None,
            validity: Some(lease.remaining()),
            elapsed: started.elapsed(),
        });
    }

    /// The retry loop of [`Redlock::acquire`], counting attempts, keeping the nodes that
    /// granted the last one and noting whether any attempt was contended.
    #[allow(clippy::too_many_arguments)] // the loop's three out-parameters feed the audit event
    async fn acquire_attempts(
        &self,
        key: &str,
        ttl: Duration,
        policy: &RetryPolicy,
        deadline: Instant,
        attempts: &mut u32,
        granted: &mut Vec<usize>,
        contended: &mut bool,
    ) -> Result<Lease, RedlockError> {
        let started = Instant::now();
        if key.is_empty() {
            return Err(ConfigError::EmptyKey.into());
        }
        let ttl = self.inner.config.check_ttl(ttl)?;
        policy.validate()?;
        let keys = self.keys(key);
        let mut waits = Waits::new(policy);
        let result = loop {
            if let Some(lost) = self.known_quorum_loss() {
                granted.clear();
                break Err(lost);
            }
            *attempts += 1;
            let attempt = self.attempt(key, &keys, ttl, granted).await;
            let Err(error) = attempt else { break attempt };
            let failure = match error {
                RedlockError::Contended => {
                    *contended = true;
                    Failure::Contended
                }
                RedlockError::Unreachable { .. } | RedlockError::ValidityTooShort => {
                    Failure::Unavailable
                }
                _ => break Err(error),
            };
            let Some(pause) = waits.next_delay(failure, &mut rand::rng()) else {
                break Err(error);
            };
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

    /// [`RedlockError::QuorumLost`] if acquires are to fail at once (see
    /// [`Redlock::quorum_status`]).
    fn known_quorum_loss(&self) -> Option<RedlockError> {
        let status = self.quorum_status();
        status.failing_fast.then(|| RedlockError::QuorumLost {
            voting: status.voting,
            nodes: status.nodes,
            quorum: status.quorum,
            lost_for: status.lost_for.unwrap_or_default(),
        })
    }

    /// One attempt: the acquire script on every node in parallel, decided the moment a quorum is
    /// certain or impossible; then the fence is settled and validity checked. A failed attempt
    /// releases whatever it acquired before returning.
    async fn attempt(
        &self,
        key: &str,
        keys: &Keys,
        ttl: Ttl,
        granted: &mut Vec<usize>,
    ) -> Result<Lease, RedlockError> {
        let inner = &*self.inner;
        inner.metrics.attempt();
        let token = format!("{:032x}", rand::random::<u128>());
        let timeout = inner.config.node_timeout(ttl.duration);
        let (marker, recovering) = self.marker_keys();
        let mut invocation = scripts::ACQUIRE.prepare_invoke();
        invocation
            .key(&keys.lock)
            .key(&keys.fence)
            .key(marker)
            .key(recovering)
            .arg(&token)
            .arg(ttl.millis)
            .arg(inner.config.recovery_millis())
            .arg(fence_floor());

        let skip = self.nodes_to_skip();
        let start = Instant::now();
        let mut tally = AcquireTally::new(inner.nodes.len(), inner.quorum);
        {
            let (invocation, skip) = (&invocation, &skip);
            let mut votes: FuturesUnordered<_> = inner
                .nodes
                .iter()
                .map(|node| async move {
                    if skip.contains(&node.index) {
                        return (node.index, Vote::Skipped);
                    }
                    let reply = node.run_seen(invocation, timeout, |reply: &(i64, i64)| {
                        match AcquireReply::decode(*reply) {
                            Some(AcquireReply::Recovering { remaining_ms }) => {
                                Seen::Recovering(Duration::from_millis(remaining_ms))
                            }
                            Some(_) => Seen::Voting,
                            None => Seen::Answered,
                        }
                    });
                    let vote = match reply.await {
                        Ok(reply) => vote_from(node.index, reply),
                        Err(_) => Vote::Failed,
                    };
                    (node.index, vote)
                })
                .collect();
            while let Some((index, vote)) = votes.next().await {
                tally.record(index, vote);
                if tally.outcome().is_some() {
                    // Calls still in flight are dropped. If their command was sent it still
                    // runs; such nodes are released below (failure) or with the lease.
                    break;
                }
            }
        }
        granted.clear();
        granted.extend(self.all_nodes().filter(|index| tally.granted_by(*index)));
        if let Err(refusal) = tally.final_outcome() {
            self.clean_up(keys, &token, timeout, &tally).await;
            return Err(match refusal {
                Refusal::Contended => RedlockError::Contended,
                Refusal::Unreachable { available } => self.unreachable(available),
            });
        }

        let (fence, agreeing) = tally.fence();
        if agreeing < inner.quorum {
            // The granting nodes disagree on the counter: raise the others to the quorum's
            // fence, counting only nodes that still hold our lock while at it.
            let mut raise = scripts::RAISE_FENCE.prepare_invoke();
            raise
                .key(&keys.lock)
                .key(&keys.fence)
                .arg(&token)
                .arg(fence);
            let targets = self
                .all_nodes()
                .filter(|index| !tally.granted_with(*index, fence) && !skip.contains(index));
            let confirmations = self
                .confirm(
                    targets,
                    inner.quorum - agreeing,
                    raise,
                    timeout,
                    answer_one,
                    Stragglers::Drop,
                )
                .await;
            if confirmations.outcome() != Some(true) {
                self.clean_up(keys, &token, timeout, &tally).await;
                return Err(if self.validity_left(start, ttl).is_none() {
                    RedlockError::ValidityTooShort
                } else {
                    self.unreachable(agreeing + confirmations.yes())
                });
            }
        }

        match self.validity_left(start, ttl) {
            Some(expires_at) => Ok(Lease::new(
                key.to_owned(),
                token,
                fence,
                ttl.duration,
                expires_at,
            )),
            None => {
                self.clean_up(keys, &token, timeout, &tally).await;
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
                self.admitted_nodes(),
                inner.quorum,
                invocation,
                timeout,
                answer_one,
                Stragglers::Drop,
            )
            .await;
        let now = Instant::now();
        if confirmations.outcome() == Some(true) {
            if now >= old_expiry {
                // A quorum confirmed, but only after the lease had run out: too late to count.
                lease.mark_lost(now);
                return Err(RedlockError::Lost);
            }
            return match self.validity_left(start, ttl) {
                Some(expires_at) => {
                    lease.extended(ttl.duration, expires_at);
                    Ok(())
                }
                None => Err(RedlockError::ValidityTooShort),
            };
        }
        let refused = confirmations.answered() - confirmations.yes();
        if refused > inner.nodes.len() - inner.quorum || now >= old_expiry {
            // A quorum no longer has our token: the lease is gone. Drop what is left of it so
            // that others need not wait for the TTL.
            lease.mark_lost(now);
            self.release_in_background(
                &keys,
                lease.token(),
                timeout,
                self.admitted_nodes().into_iter(),
            );
            return Err(RedlockError::Lost);
        }
        Err(self.unreachable(confirmations.answered()))
    }

    /// End of validity of an operation that started at `start`, as of now.
    fn validity_left(&self, start: Instant, ttl: Ttl) -> Option<Instant> {
        self.inner.config.validity_end(start, ttl, Instant::now())
    }

    /// Releases a failed attempt's partial acquisition before the caller retries: nodes that
    /// granted are waited for (they answer fast, they just did); nodes that may hold it but
    /// failed or did not answer in time get the release in the background, so a paused node does
    /// not delay the retry by another timeout.
    async fn clean_up(&self, keys: &Keys, token: &str, timeout: Duration, tally: &AcquireTally) {
        let uncertain = self
            .all_nodes()
            .filter(|index| tally.may_hold(*index) && !tally.granted_by(*index));
        self.release_in_background(keys, token, timeout, uncertain);
        let granted: Vec<usize> = self
            .all_nodes()
            .filter(|index| tally.granted_by(*index))
            .collect();
        let every = granted.len();
        let mut invocation = scripts::RELEASE.prepare_invoke();
        invocation.key(&keys.lock).arg(token);
        self.confirm(
            granted,
            every,
            invocation,
            timeout,
            answer_any,
            Stragglers::Await,
        )
        .await;
    }

    /// Sends compare-and-delete of `token` to `targets` without waiting for answers.
    fn release_in_background(
        &self,
        keys: &Keys,
        token: &str,
        timeout: Duration,
        targets: impl Iterator<Item = usize>,
    ) {
        let invocation = Arc::new({
            let mut invocation = scripts::RELEASE.prepare_invoke();
            invocation.key(&keys.lock).arg(token);
            invocation
        });
        let calls: FuturesUnordered<_> = targets
            .filter_map(|index| self.inner.nodes.get(index).cloned())
            .map(|node| {
                let invocation = Arc::clone(&invocation);
                async move { node.run::<i64>(&invocation, timeout).await }
            })
            .collect();
        if !calls.is_empty() {
            tokio::spawn(drain(calls));
        }
    }

    /// Runs `invocation` on `targets` in parallel until `needed` answers are judged
    /// [`Answer::Yes`], or that has become impossible.
    async fn confirm<T: FromRedisValue + Send + 'static>(
        &self,
        targets: impl IntoIterator<Item = usize>,
        needed: usize,
        invocation: ScriptInvocation<'static>,
        timeout: Duration,
        judge: impl Fn(T) -> Answer,
        stragglers: Stragglers,
    ) -> Confirmations {
        let invocation = Arc::new(invocation);
        let mut calls: FuturesUnordered<_> = targets
            .into_iter()
            .filter_map(|index| self.inner.nodes.get(index).cloned())
            .map(|node| {
                let invocation = Arc::clone(&invocation);
                async move { node.run::<T>(&invocation, timeout).await }
            })
            .collect();
        let mut confirmations = Confirmations::new(calls.len(), needed);
        while confirmations.outcome().is_none() {
            let Some(result) = calls.next().await else {
                break;
            };
            confirmations.record(result.map_or(Answer::Failed, &judge));
        }
        match stragglers {
            Stragglers::Drop => {}
            Stragglers::Finish if calls.is_empty() => {}
            Stragglers::Finish => {
                tokio::spawn(drain(calls));
            }
            Stragglers::Await => while calls.next().await.is_some() {},
        }
        confirmations
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

/// Runs node calls to completion, ignoring results (each is bounded by its timeout, and errors
/// are counted by the node).
async fn drain<F: Future>(mut calls: FuturesUnordered<F>) {
    while calls.next().await.is_some() {}
}

/// Maps an acquire script reply to a vote (an unexpected reply counts as a failed node).
fn vote_from(node: usize, reply: (i64, i64)) -> Vote {
    match AcquireReply::decode(reply) {
        Some(AcquireReply::Granted { fence }) => Vote::Granted(fence),
        Some(AcquireReply::Held) => Vote::Held,
        Some(AcquireReply::Recovering { .. }) => Vote::Recovering,
        None => {
            tracing::warn!(node, ?reply, "unexpected redlock acquire reply");
            Vote::Failed
        }
    }
}

/// Any reply counts (release: deleted, or already gone).
fn answer_any(_: i64) -> Answer {
    Answer::Yes
}

/// `1` is yes, anything else no (extend, fence raise).
fn answer_one(reply: i64) -> Answer {
    if reply == 1 { Answer::Yes } else { Answer::No }
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
