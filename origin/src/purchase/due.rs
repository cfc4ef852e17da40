//! Holds that fell due, waiting to be expired under their SKU's lease — beside the purchase path.
//! The expiry loop (`orders::expiry`) drops the due holds it found (delayed queue or database
//! sweep) here, per SKU ([`DueHolds::deposit`]); whoever of this process holds the SKU's lease
//! next takes them and expires them ([`super::expire`]): the SKU's combiner before its next
//! purchase batch — so a hot sale's expiries ride on the lease its batches already hold, instead
//! of contending with them for it, and the returned units are on sale for that very batch — or,
//! when no batch of this process takes the lease soon, the loop's expirer task, which takes
//! the lease itself.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use shared::Sku;
use uuid::Uuid;

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
    pub(super) fn put_back(&self, sku: &Sku, ids: Vec<Uuid>) {
        if !ids.is_empty() {
            self.lock().due.entry(sku.clone()).or_default().extend(ids);
        }
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
