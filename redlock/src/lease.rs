//! [`Lease`]: proof of holding a lock, with its fencing token and its validity measured on the
//! monotonic clock.

use std::fmt;
use std::time::{Duration, Instant};

/// A held lock. Obtained from [`Redlock::acquire`](crate::Redlock::acquire); give it back with
/// [`Redlock::release`](crate::Redlock::release). Dropping it without releasing leaves the lock
/// on the nodes until its TTL runs out (nothing breaks, others just wait longer).
///
/// Not `Clone`: one lease, one holder.
#[must_use = "a lease that is dropped stays locked until its TTL runs out; release it"]
pub struct Lease {
    /// The caller's key (without the configured prefix).
    key: String,
    /// Random per-acquisition value stored on the nodes; release and extend compare it.
    token: String,
    /// Fencing token: strictly greater than every earlier holder's of this key.
    fence: u64,
    /// TTL of the last acquire or extend (per-node timeouts of later calls derive from it).
    ttl: Duration,
    /// End of validity, on the monotonic clock: attempt start + TTL − drift.
    expires_at: Instant,
    /// Whether the acquire waited for another holder.
    contended: bool,
}

impl Lease {
    pub(crate) fn new(
        key: String,
        token: String,
        fence: u64,
        ttl: Duration,
        expires_at: Instant,
    ) -> Self {
        Self {
            key,
            token,
            fence,
            ttl,
            expires_at,
            contended: false,
        }
    }

    /// Records that an attempt of the acquire that returned this lease found the lock held by
    /// another holder.
    pub(crate) fn after_contention(mut self, contended: bool) -> Self {
        self.contended = contended;
        self
    }

    /// Whether the acquire that returned this lease had to wait for another holder (an attempt
    /// of it was refused as [`RedlockError::Contended`](crate::RedlockError::Contended)).
    pub fn contended(&self) -> bool {
        self.contended
    }

    /// The locked key, as passed to `acquire`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The fencing token. It strictly increases across successive holders of the same key, so
    /// a store that remembers the highest token it has seen can reject a stale holder's writes
    /// (see the module docs for the exact guarantee).
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// Validity left (zero once expired). Work under the lease must finish within it.
    pub fn remaining(&self) -> Duration {
        self.expires_at.saturating_duration_since(Instant::now())
    }

    /// When the validity ends, on the monotonic clock.
    pub(crate) fn expires_at(&self) -> Instant {
        self.expires_at
    }

    pub(crate) fn token(&self) -> &str {
        &self.token
    }

    /// TTL of the last successful acquire or extend.
    pub(crate) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Marks the lease lost: no validity left from `now` on.
    pub(crate) fn mark_lost(&mut self, now: Instant) {
        self.expires_at = self.expires_at.min(now);
    }

    /// Records a successful extend.
    pub(crate) fn extended(&mut self, ttl: Duration, expires_at: Instant) {
        self.ttl = ttl;
        self.expires_at = expires_at;
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token is left out: whoever knows it can release someone else's lock.
        f.debug_struct("Lease")
            .field("key", &self.key)
            .field("fence", &self.fence)
            .field("remaining", &self.remaining())
            .field("contended", &self.contended)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remaining_saturates_and_debug_hides_the_token() {
        let past = Instant::now()
            .checked_sub(Duration::from_secs(1))
            .unwrap_or_else(Instant::now);
        let lease = Lease::new(
            "sku:1".into(),
            "secret-token".into(),
            7,
            Duration::from_secs(1),
            past,
        );
        assert_eq!(lease.remaining(), Duration::ZERO);
        let debug = format!("{lease:?}");
        assert!(debug.contains("sku:1") && debug.contains('7'), "{debug}");
        assert!(!debug.contains("secret-token"), "{debug}");
    }
}
