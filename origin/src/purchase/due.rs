//! Holds that fell due, waiting to be expired under their SKU's lease — beside the purchase path.
//! The expiry loop (`orders::expiry`) drops the due holds it found (delayed queue or database
//! sweep) here, per SKU ([`DueHolds::deposit`]); whoever of this process holds the SKU's lease
//! next expires them ([`Context::expire_due`]): the SKU's combiner before its next purchase
//! batch — so a hot sale's expiries ride on the lease its batches already hold, instead of
//! contending with them for it, and the returned units are on sale for that very batch — or,
//! when no batch of this process takes the lease soon, the loop's expirer task, which takes
//! the lease itself.
//!
//! [`Context::expire_under`] is the one expiry transaction: under the lease, with the lease
//! guard and the fence, it locks the SKU row and those of the holds that are still held and
//! due by the database's clock, and returns them to stock — each hold exactly once, whoever
//! else (another process, a payment, a cancellation) tries at the same time.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::Instant;

use shared::{OrderStatus, Sku};
use uuid::Uuid;

use super::context::{COMMIT_MARGIN, Context};
use crate::store::StoreError;
use crate::store::orders::{Change, OrderTx};
use redlock::Lease;

/// Due holds per SKU, and which SKUs have an expirer task running. See the module docs.
#[derive(Debug, Default)]
pub struct DueHolds {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    due: HashMap<Sku, HashSet<Uuid>>,
    expirers: HashSet<Sku>,
}

impl DueHolds {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding this lock leaves plain collections behind: still usable.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Adds due holds of `sku`. `true`: no expirer runs for `sku` — the caller starts one
    /// (it is now marked running; it ends with [`DueHolds::retire`]).
    pub fn deposit(&self, sku: &Sku, ids: impl IntoIterator<Item = Uuid>) -> bool {
        let mut inner = self.lock();
        inner.due.entry(sku.clone()).or_default().extend(ids);
        inner.expirers.insert(sku.clone())
    }

    /// Takes every due hold of `sku` (the taker expires them or deposits them back).
    pub fn take(&self, sku: &Sku) -> Vec<Uuid> {
        self.lock()
            .due
            .remove(sku)
            .map(|ids| ids.into_iter().collect())
            .unwrap_or_default()
    }

    /// Whether holds of `sku` are waiting.
    pub fn waiting(&self, sku: &Sku) -> bool {
        self.lock().due.contains_key(sku)
    }

    /// The expirer of `sku` ends if nothing is waiting (`true`); else it goes on.
    pub fn retire(&self, sku: &Sku) -> bool {
        let mut inner = self.lock();
        if inner.due.contains_key(sku) {
            return false;
        }
        inner.expirers.remove(sku);
        true
    }

    /// Puts back holds a failed expiry took.
    fn put_back(&self, sku: &Sku, ids: Vec<Uuid>) {
        if !ids.is_empty() {
            self.lock().due.entry(sku.clone()).or_default().extend(ids);
        }
    }
}

impl Context {
    /// Expires the holds of `sku` waiting in [`DueHolds`], under `lease`; how many expired. On
    /// failure nothing was committed and they wait again (the next holder of the lease, or
    /// the expirer's retry, takes them).
    pub(crate) async fn expire_due(&self, sku: &Sku, lease: &Lease) -> Result<usize, StoreError> {
        let ids = self.due.take(sku);
        if ids.is_empty() {
            return Ok(0);
        }
        match self.expire_under(sku, &ids, lease).await {
            Ok((expired, _)) => Ok(expired),
            Err(e) => {
                self.due.put_back(sku, ids);
                Err(e)
            }
        }
    }

    /// Expires those of `ids` (holds of `sku`) that are still held and due by the database's
    /// clock, in one transaction under `lease`; how many expired, and the ids that were not
    /// expirable (not due, or no longer held).
    pub(crate) async fn expire_under(
        &self,
        sku: &Sku,
        ids: &[Uuid],
        lease: &Lease,
    ) -> Result<(usize, Vec<Uuid>), StoreError> {
        let remaining = lease.remaining();
        if remaining < self.settings.commit_budget {
            return Err(StoreError::LeaseExpired);
        }
        let commit_by = Instant::now() + remaining.saturating_sub(COMMIT_MARGIN);
        let observed_at = Instant::now();
        let mut tx = OrderTx::begin(&self.pool).await?;
        let books = tx.lock_sku(sku.as_str(), Some(lease.fence())).await?;
        let due = tx.lock_due_holds(sku.as_str(), ids).await?;
        let left: Vec<Uuid> = ids
            .iter()
            .filter(|id| !due.iter().any(|r| r.order_id == **id))
            .copied()
            .collect();
        if due.is_empty() {
            return Ok((0, left));
        }
        let changes: Vec<Change> = due
            .into_iter()
            .map(|order| Change {
                order,
                to: OrderStatus::Expired,
                restock: true,
                take: false,
                restocked: None,
                payment: None,
            })
            .collect();
        let applied = tx
            .apply(
                sku.as_str(),
                books,
                Some(lease.fence()),
                &changes,
                Some(commit_by),
            )
            .await?;
        let n = applied.orders.len();
        self.metrics.count_return("expired", n as u64);
        self.metrics.hold_expiries.inc_by(n as u64);
        for lag in &applied.expiry_lags {
            self.metrics.expiry_lag.observe(lag.max(0.0));
        }
        if let Some(sale) = applied.sale {
            self.knowledge
                .learn_state(sku, observed_at, Some(sale), &self.pool)
                .await;
        }
        tracing::info!(
            target: "flashgate::audit",
            event = "holds_expired",
            sku = %sku,
            orders = n,
            fence = lease.fence(),
            "holds expired"
        );
        Ok((n, left))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_expirer_per_sku_until_nothing_waits() {
        let due = DueHolds::default();
        let sku = Sku::parse("SHOE-1").expect("sku");
        let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
        assert!(
            due.deposit(&sku, [a]),
            "the first deposit starts an expirer"
        );
        assert!(!due.deposit(&sku, [b, a]), "one expirer per SKU");
        assert!(!due.retire(&sku), "holds wait: the expirer goes on");
        let mut taken = due.take(&sku);
        taken.sort();
        let mut want = vec![a, b];
        want.sort();
        assert_eq!(taken, want, "each hold once");
        assert!(!due.waiting(&sku));
        assert!(due.retire(&sku));
        assert!(
            due.deposit(&sku, [a]),
            "a new expirer once the last one retired"
        );
    }
}
