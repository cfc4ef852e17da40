//! Work under a SKU's lease — the one place to review for lease safety. Every step that moves a
//! SKU's units (a purchase batch, a hold's expiry, a return, a late payment) runs here, under the
//! SKU's Redlock lease, inside a transaction that locks the SKU row. Three things make a lost
//! lease harmless, and all three are written once, in this file:
//!
//! 1. **The guard** ([`SkuLease::commit_by`]): work starts only with at least `COMMIT_BUDGET_MS`
//!    of the lease's validity left, and its transaction must commit by
//!    `now + remaining − COMMIT_MARGIN` — past that instant it rolls back
//!    ([`StoreError::LeaseExpired`]), because the lease may be gone by the time `COMMIT` lands.
//! 2. **The fence** ([`SkuLease::fence`]): the transaction presents the lease's fencing token,
//!    which the SKU row remembers; a stale holder's transaction commits nothing
//!    ([`StoreError::StaleFence`]). When the row is ahead of the lock's fence counters (keys
//!    renamed, a counter recreated behind the row), the counters are raised to the row's fence
//!    ([`SkuLocks::settle`]), or every later holder would be refused too.
//! 3. **The loop** ([`SkuLocks::run`]): acquire (polling while the lock is contended, until the
//!    caller's deadline), run the work, settle its failure, release — and on
//!    [`StoreError::Conflict`], [`StoreError::StaleFence`] or [`StoreError::LeaseExpired`] (nothing
//!    committed) take the lease again, at most [`MAX_ATTEMPTS`] times while the deadline allows.
//!
//! The order service (`orders`) and the hold expiry run their work through [`SkuLocks::run`].
//! The purchase combiner (`purchase::combiner`) keeps the lease across many batches — it
//! extends it, and gives it up for fairness — so it takes the steps one by one
//! ([`SkuLocks::acquire`], [`SkuLocks::extend`], [`SkuLocks::settle`], [`SkuLocks::release`]) on
//! a [`HeldLease`], and each of its batches takes its fence and deadline from the same
//! [`SkuLease`] ([`HeldLease::terms`]).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shared::Sku;

use crate::metrics::Metrics;
use crate::settings::PurchaseSettings;
use crate::store::StoreError;
use redlock::{Lease, Pause, Redlock, RedlockError, RetryPolicy};

/// A contended holder polls the lock every 1..=POLL_MAX. Contenders per SKU are bounded by the
/// number of origin processes, so polling this often costs little and hands the lock over
/// quickly (a growing back-off would let the yielding holder win again).
pub const POLL_MAX: Duration = Duration::from_millis(4);
/// How a SKU's lock is waited for: polled while the lock is contended, retried while too few
/// nodes could vote — a node slower than its 40 ms timeout for a moment (a CPU-starved host, a
/// slow fsync) must not turn into a 503 for a request that still has most of its deadline.
const LOCK_RETRY: RetryPolicy = RetryPolicy {
    contended: Pause::Uniform {
        min: Duration::from_millis(1),
        max: POLL_MAX,
    },
    unavailable: Pause::Uniform {
        min: Duration::from_millis(5),
        max: Duration::from_millis(20),
    },
};
/// Margin kept between commit and lease expiry for the COMMIT round trip itself.
pub const COMMIT_MARGIN: Duration = Duration::from_millis(20);
/// Leases [`SkuLocks::run`] takes for one piece of work: a conflict, a stale fence or a lease
/// that ran short is retried (within the caller's deadline).
pub const MAX_ATTEMPTS: u32 = 4;

/// The SKUs' locks of this process: how they are taken, extended, settled and released. Cheap to
/// clone.
#[derive(Debug, Clone)]
pub struct SkuLocks {
    lock: Redlock,
    /// `LOCK_TTL_MS`: the lease taken and each extension.
    ttl: Duration,
    /// `COMMIT_BUDGET_MS`: the validity a transaction needs left to start.
    commit_budget: Duration,
    metrics: Arc<Metrics>,
}

/// A SKU's lease as the work under it sees it: the fencing token its transaction presents, and
/// the guard that gives that transaction its deadline. A copy taken from the [`HeldLease`] when
/// the work starts.
#[derive(Debug, Clone, Copy)]
pub struct SkuLease {
    fence: u64,
    /// When the lease's validity ends, on the monotonic clock.
    expires_at: Instant,
    commit_budget: Duration,
}

impl SkuLease {
    /// The fencing token the transaction presents to the SKU row.
    pub fn fence(self) -> u64 {
        self.fence
    }

    /// The lease guard: the instant by which a transaction starting now must commit —
    /// `now + remaining − COMMIT_MARGIN` — or [`StoreError::LeaseExpired`] when less than the
    /// commit budget is left (nothing is started).
    pub fn commit_by(self) -> Result<Instant, StoreError> {
        let now = Instant::now();
        let remaining = self.expires_at.saturating_duration_since(now);
        if remaining < self.commit_budget {
            return Err(StoreError::LeaseExpired);
        }
        Ok(now + remaining.saturating_sub(COMMIT_MARGIN))
    }
}

/// A SKU's lease, held: released by [`SkuLocks::release`] (or, dropped, it stays locked until its
/// TTL runs out).
#[derive(Debug)]
pub struct HeldLease {
    sku: Sku,
    lease: Lease,
    commit_budget: Duration,
}

impl HeldLease {
    /// The lease as the work under it sees it, now.
    pub fn terms(&self) -> SkuLease {
        SkuLease {
            fence: self.lease.fence(),
            expires_at: Instant::now() + self.lease.remaining(),
            commit_budget: self.commit_budget,
        }
    }

    /// Less than the commit budget is left: no transaction may start (extend the lease first).
    pub fn running_low(&self) -> bool {
        self.terms().commit_by().is_err()
    }

    /// Whether the acquire had to wait for another holder (who may have changed the SKU).
    pub fn contended(&self) -> bool {
        self.lease.contended()
    }
}

impl SkuLocks {
    pub fn new(lock: Redlock, settings: &PurchaseSettings, metrics: Arc<Metrics>) -> Self {
        Self {
            lock,
            ttl: settings.lock_ttl,
            commit_budget: settings.commit_budget,
            metrics,
        }
    }

    /// The SKU's lock resource, `sku:<SKU>`: the lock stores it as
    /// `<REDIS_KEY_PREFIX>:lock:sku:<SKU>` (and its fence counter as
    /// `<REDIS_KEY_PREFIX>:fence:sku:<SKU>`), and audits it under this name.
    fn key(sku: &Sku) -> String {
        format!("sku:{sku}")
    }

    /// Runs `work` under `sku`'s lease, taken until `deadline`; see the module docs. The work's
    /// error tells, through [`LeaseWork`], whether a new lease may help; a lease that cannot be
    /// had is the error's too.
    pub async fn run<T, E, F>(
        &self,
        sku: &Sku,
        deadline: Instant,
        mut work: impl FnMut(SkuLease) -> F,
    ) -> Result<T, E>
    where
        E: LeaseWork + From<RedlockError>,
        F: Future<Output = Result<T, E>>,
    {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let held = self.acquire(sku, deadline).await?;
            let result = work(held.terms()).await;
            if let Some(e) = result.as_ref().err().and_then(LeaseWork::store_error) {
                self.settle(&held, e).await;
            }
            let _ = self.release(held).await;
            match result {
                Err(e)
                    if attempts < MAX_ATTEMPTS
                        && Instant::now() < deadline
                        && e.store_error().is_some_and(wants_new_lease) => {}
                other => return other,
            }
        }
    }

    /// Acquires the SKU's lease, retrying until `deadline`, the caller's budget. A quorum loss
    /// the lock already knows about (fewer than a quorum of nodes unable to vote for longer than
    /// `REDLOCK_QUORUM_LOSS_GRACE_MS`) is [`RedlockError::QuorumLost`], returned at once:
    /// retrying cannot help, so the caller answers 503 now rather than at its deadline.
    pub async fn acquire(&self, sku: &Sku, deadline: Instant) -> Result<HeldLease, RedlockError> {
        let started = Instant::now();
        let result = self
            .lock
            .acquire(&Self::key(sku), self.ttl, &LOCK_RETRY, deadline)
            .await;
        self.metrics
            .lock_wait
            .observe(started.elapsed().as_secs_f64());
        let lease = result?;
        self.metrics.lock_acquisitions.inc();
        Ok(HeldLease {
            sku: sku.clone(),
            lease,
            commit_budget: self.commit_budget,
        })
    }

    /// Extends `held` by the lock's TTL; the lease is lost when this fails.
    pub async fn extend(&self, held: &mut HeldLease) -> Result<(), RedlockError> {
        self.lock.extend(&mut held.lease, self.ttl).await
    }

    /// Releases `held` (an error only means some node keeps the key until its TTL).
    pub async fn release(&self, held: HeldLease) -> Result<(), RedlockError> {
        self.lock.release(held.lease).await
    }

    /// After a transaction under `held` failed with `e`: counts a stale fence or a lease that
    /// ran short, and raises the SKU's fence counters to the row's fence after a stale fence, so
    /// the next lease's fence is above it. A holder that merely outlived its lease changes
    /// nothing by this (the counters are past that fence already); counters that fell behind the
    /// row — renamed keys after an upgrade or a rollback, a counter recreated by a machine whose
    /// clock ran behind — would otherwise get every later transaction refused too, forever.
    pub async fn settle(&self, held: &HeldLease, e: &StoreError) {
        match e {
            StoreError::StaleFence { current, .. } => {
                self.metrics.stale_fence.inc();
                self.catch_up_fence(held, *current).await;
            }
            StoreError::LeaseExpired => {
                self.metrics.lease_expired.inc();
            }
            _ => {}
        }
    }

    async fn catch_up_fence(&self, held: &HeldLease, current: i64) {
        let Ok(current) = u64::try_from(current) else {
            return;
        };
        let sku = &held.sku;
        match self.lock.raise_fence(&held.lease, current).await {
            Ok(()) => tracing::info!(
                sku = %sku,
                presented = held.lease.fence(),
                current,
                "batch refused as stale: the sku's fence counters were raised to the row's fence"
            ),
            Err(e) => {
                tracing::warn!(sku = %sku, error = %e, "could not raise the sku's fence counters")
            }
        }
    }
}

/// What the work under a lease may fail with: [`LeaseWork::store_error`] is the database's
/// verdict, if the failure was one ([`SkuLocks::run`] settles it, and retries what a new lease
/// may fix).
pub trait LeaseWork {
    fn store_error(&self) -> Option<&StoreError>;
}

/// Nothing was committed, and a new lease may help: a conflicting transaction (the retry reads
/// its committed row), a stale fence, a lease that ran short.
fn wants_new_lease(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::Conflict | StoreError::StaleFence { .. } | StoreError::LeaseExpired
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(left: Duration) -> SkuLease {
        SkuLease {
            fence: 7,
            expires_at: Instant::now() + left,
            commit_budget: Duration::from_millis(250),
        }
    }

    #[test]
    fn the_guard_refuses_below_the_budget_and_keeps_the_margin_before_expiry() {
        assert!(matches!(
            lease(Duration::from_millis(200)).commit_by(),
            Err(StoreError::LeaseExpired)
        ));
        let l = lease(Duration::from_millis(1000));
        let by = l.commit_by().expect("enough left");
        // Commit by expiry − COMMIT_MARGIN: never later, and (the call took microseconds) not
        // much earlier.
        assert!(by <= l.expires_at - COMMIT_MARGIN);
        assert!(by + Duration::from_millis(50) > l.expires_at - COMMIT_MARGIN);
        assert_eq!(l.fence(), 7);
    }

    #[test]
    fn only_what_commits_nothing_and_a_new_lease_may_fix_is_retried() {
        assert!(wants_new_lease(&StoreError::Conflict));
        assert!(wants_new_lease(&StoreError::LeaseExpired));
        assert!(wants_new_lease(&StoreError::StaleFence {
            presented: 1,
            current: 2
        }));
        assert!(!wants_new_lease(&StoreError::Unexpected(
            sqlx::Error::RowNotFound
        )));
        assert!(!wants_new_lease(&StoreError::Unavailable(
            sqlx::Error::PoolTimedOut
        )));
    }
}
