//! What the holder of a lease does with it: extend it ([`Redlock::extend`]), raise its key's
//! fence counters past a fence a store has seen ([`Redlock::raise_fence`]) and release it
//! ([`Redlock::release`]) — each a compare-and-act on every node, audited.

use std::time::{Duration, Instant};

use super::fanout::{Stragglers, answer_any, answer_one};
use super::{Redlock, error_result};
use crate::audit::AuditEvent;
use crate::config::Ttl;
use crate::error::RedlockError;
use crate::lease::Lease;
use crate::scripts;

impl Redlock {
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
}
