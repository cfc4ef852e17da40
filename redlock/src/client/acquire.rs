//! Acquiring a lease ([`Redlock::acquire`]): the retry loop under the caller's policy and
//! deadline, and one attempt — the acquire script on every node at once, decided the moment a
//! quorum is certain or impossible, the fence settled across the granting nodes, the validity
//! checked, and a failed attempt's partial acquisition released before the next.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use futures::stream::FuturesUnordered;

use super::fanout::{Stragglers, answer_any, answer_one};
use super::{Keys, Redlock, error_result};
use crate::audit::{AuditEvent, NodeList};
use crate::config::Ttl;
use crate::error::{ConfigError, RedlockError};
use crate::lease::Lease;
use crate::metrics::AcquireResult;
use crate::retry::{Failure, RetryPolicy, Waits};
use crate::scripts::{self, AcquireReply};
use crate::standing::Seen;
use crate::tally::{AcquireTally, Refusal, Vote};

impl Redlock {
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

/// Floor of a fence counter that does not exist yet on a node: microseconds since the Unix
/// epoch on this machine (0 if the clock reads before 1970).
fn fence_floor() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}
