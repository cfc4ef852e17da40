//! What this process knows about each SKU's sale, for two shortcuts of the purchase path:
//! [`PurchaseService::submit`](super::PurchaseService::submit) and the combiner answer
//! `409 sold_out` for a sold-out SKU without the lock or a transaction (the sold-out fast path),
//! and the combiner decides attempts for a SKU that does not exist without taking the SKU's
//! Redlock lease (so made-up SKUs never create Redis keys).
//!
//! **The database is the truth; Redis plays no part.** A process learns a SKU's state from its
//! own batches (`store::decide_batch` returns the generation and the units left) or by a
//! primary-key read without lock (`store::sale_state`): at most once per [`LOCAL_TTL`] per SKU,
//! and again ([`SaleKnowledge::check_fresh`]) when a combiner got the SKU's lease only after
//! another process had held it (that process may have sold the last unit meanwhile).
//!
//! **Every piece of knowledge is tied to the SKU's sale [`Epoch`]** — its generation (bumped by
//! every PUT) and its return epoch (bumped by every transaction that puts units back into the
//! generation's stock: an expiry, a cancellation, a refund with restock) — and to the instant
//! *before* it was observed, and is trusted for [`LOCAL_TTL`] from that instant. Within one epoch
//! stock only falls. Knowledge of an earlier state (an older epoch, or "on sale" after "sold out"
//! in the same epoch) never replaces fresh knowledge of a later one, and a buyer set belongs to
//! the epoch it was loaded for: a later sold-out epoch loads it again.
//!
//! **Why a restock reopens the sale on every process at once.** The admin PUT bumps the
//! generation and, when it restocks an existing SKU, answers only [`LOCAL_TTL`] after its commit
//! (`routes::admin`). Knowledge of an earlier generation was observed before that commit — a
//! batch's row lock, or a read's snapshot, precedes the PUT's update of the row — so on every
//! process it is past its [`LOCAL_TTL`] by the time the PUT answers, even if it was recorded late.
//!
//! **Why a return reopens the sale on every process.** A return bumps the return epoch in the
//! transaction that puts the units back, and the process that made it learns the new epoch at
//! once. Every other process's "sold out" was observed before that commit, so it is stale at the
//! latest [`LOCAL_TTL`] after the commit: a cancellation or a refund with restock answers only
//! then (`orders`), so once it has answered no process answers `sold_out` from a mark; an expiry
//! has no one to answer, and reopens the sale everywhere within [`LOCAL_TTL`] of its commit.
//!
//! Sold-out answers given from this knowledge are never stored. So that retries of purchases that
//! DID succeed still get their replay, "sold out" carries the set of (user, key) pairs holding a
//! stored 201 for the SKU (of every generation), loaded after the sell-out was observed — when no
//! 201 of that generation can be added any more; those attempts take the normal path.
//!
//! Memory: at most [`MAX_SKUS`] SKUs are remembered.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shared::{IdempotencyKey, Sku, UserId};
use sqlx::PgPool;

use crate::store::{self, BatchResult, SaleState, StoreError};

/// How long a process trusts what it observed about a SKU; also how long the admin PUT of an
/// existing SKU waits before answering.
pub const LOCAL_TTL: Duration = Duration::from_millis(1000);
/// Most SKUs remembered; past it, stale entries and then unknown SKUs are forgotten first.
pub const MAX_SKUS: usize = 10_000;

/// (user, key) pairs with a stored 201 for a sold-out SKU.
pub type Buyers = HashSet<(String, String)>;

/// Which stretch of a SKU's sale a state belongs to: within one epoch stock only falls. Later
/// epochs compare greater (a later generation; within one, more returns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch {
    pub generation: i64,
    pub returns: i64,
}

impl From<SaleState> for Epoch {
    fn from(s: SaleState) -> Self {
        Self {
            generation: s.generation,
            returns: s.returns,
        }
    }
}

/// What is known about a SKU's sale.
#[derive(Debug, Clone)]
pub enum Sale {
    /// There is no such SKU.
    Unknown,
    /// On sale in `epoch`, with `units` left when observed: within one epoch stock only falls,
    /// so no batch of the epoch can sell more (0: not known — the SKU was seen sold out but its
    /// buyers could not be loaded, so batches refuse its attempts).
    OnSale { epoch: Epoch, units: i64 },
    /// Sold out in `epoch`. `buyers` hold a stored 201 and are not answered from this.
    SoldOut { epoch: Epoch, buyers: Arc<Buyers> },
}

impl Sale {
    /// Which state is later: a later epoch; within one, stock only falls, so "sold out" comes
    /// after "on sale". A SKU is never deleted, so "unknown" comes before any sale.
    fn order(&self) -> (Epoch, u8) {
        match self {
            Self::Unknown => (Epoch::default(), 0),
            Self::OnSale { epoch, .. } => (*epoch, 1),
            Self::SoldOut { epoch, .. } => (*epoch, 2),
        }
    }
}

#[derive(Debug, Clone)]
struct Entry {
    /// An instant before the observation began.
    observed_at: Instant,
    sale: Sale,
}

impl Entry {
    fn is_fresh(&self) -> bool {
        self.observed_at.elapsed() < LOCAL_TTL
    }
}

/// This process's knowledge of SKU sales. Cheap to share (`Arc`).
#[derive(Debug, Default)]
pub struct SaleKnowledge {
    local: Mutex<HashMap<Sku, Entry>>,
}

impl SaleKnowledge {
    pub fn new() -> Self {
        Self::default()
    }

    fn local(&self) -> std::sync::MutexGuard<'_, HashMap<Sku, Entry>> {
        self.local.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Fresh knowledge, without any I/O.
    pub fn fresh(&self, sku: &Sku) -> Option<Sale> {
        self.local()
            .get(sku)
            .filter(|e| e.is_fresh())
            .map(|e| e.sale.clone())
    }

    /// The buyers of `sku` if it is freshly known to be sold out; no I/O.
    pub fn cached(&self, sku: &Sku) -> Option<Arc<Buyers>> {
        match self.fresh(sku) {
            Some(Sale::SoldOut { buyers, .. }) => Some(buyers),
            _ => None,
        }
    }

    /// The most units `sku` can have left if it is freshly known to be on sale: what was last
    /// observed of its stock in the current epoch (stock only falls within one); no I/O. `None`
    /// when nothing fresh bounds it.
    pub fn units_left_at_most(&self, sku: &Sku) -> Option<i64> {
        match self.fresh(sku) {
            Some(Sale::OnSale { units, .. }) if units > 0 => Some(units),
            _ => None,
        }
    }

    /// Whether `user`'s attempt with `key` may be answered `sold_out` from this knowledge.
    pub fn answers(buyers: &Buyers, user: &UserId, key: &IdempotencyKey) -> bool {
        !buyers.contains(&(user.as_str().to_owned(), key.as_str().to_owned()))
    }

    /// Fresh knowledge of `sku`, else what the database says now (one primary-key read, plus the
    /// buyers when it is newly sold out). An error when the database cannot be read.
    pub async fn check(&self, sku: &Sku, pool: &PgPool) -> Result<Sale, StoreError> {
        match self.fresh(sku) {
            Some(sale) => Ok(sale),
            None => self.check_fresh(sku, pool).await,
        }
    }

    /// What the database says now, even when this process's knowledge is fresh: for a combiner
    /// that just waited for another process's lease.
    pub async fn check_fresh(&self, sku: &Sku, pool: &PgPool) -> Result<Sale, StoreError> {
        let observed_at = Instant::now();
        let state = store::sale_state(pool, sku).await?;
        Ok(self.learn_state(sku, observed_at, state, pool).await)
    }

    /// Learns from a committed batch; `observed_at` is an instant before the batch began.
    pub async fn learn_batch(
        &self,
        sku: &Sku,
        observed_at: Instant,
        result: &BatchResult,
        pool: &PgPool,
    ) {
        let state = match (result.generation, result.returns, result.remaining) {
            (Some(generation), Some(returns), Some(stock)) => Some(SaleState {
                generation,
                returns,
                stock,
            }),
            _ => None,
        };
        self.learn_state(sku, observed_at, state, pool).await;
    }

    /// Learns `state` (`None`: no such SKU), observed at `observed_at`; returns what is known
    /// now. Loads the buyers when the SKU is sold out in a generation whose buyers are not known
    /// yet; if they cannot be loaded, only "on sale" is learned (attempts then take the normal
    /// path, which refuses them in a transaction).
    pub async fn learn_state(
        &self,
        sku: &Sku,
        observed_at: Instant,
        state: Option<SaleState>,
        pool: &PgPool,
    ) -> Sale {
        let sale = match state {
            None => Sale::Unknown,
            Some(state) if state.stock > 0 => Sale::OnSale {
                epoch: state.into(),
                units: state.stock,
            },
            Some(state) => {
                let epoch = Epoch::from(state);
                match self.buyers_of(sku, epoch) {
                    Some(buyers) => Sale::SoldOut { epoch, buyers },
                    None => match store::buyers(pool, sku).await {
                        Ok(rows) => {
                            tracing::info!(sku = %sku, generation = epoch.generation, returns = epoch.returns, "sku sold out; fast path on");
                            Sale::SoldOut {
                                epoch,
                                buyers: Arc::new(rows.into_iter().collect()),
                            }
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "could not load buyers of a sold-out sku; fast path stays off");
                            Sale::OnSale { epoch, units: 0 }
                        }
                    },
                }
            }
        };
        self.learn(sku, observed_at, sale)
    }

    /// The buyers already loaded for `sku` sold out in `epoch` (complete: no 201 can be added
    /// to a sold-out epoch; a return starts a new one).
    fn buyers_of(&self, sku: &Sku, epoch: Epoch) -> Option<Arc<Buyers>> {
        match self.local().get(sku).map(|e| &e.sale) {
            Some(Sale::SoldOut { epoch: e, buyers }) if *e == epoch => Some(buyers.clone()),
            _ => None,
        }
    }

    /// Records `sale`, observed at `observed_at`, unless fresh knowledge of a later state is
    /// held; returns what is known now.
    pub fn learn(&self, sku: &Sku, observed_at: Instant, sale: Sale) -> Sale {
        let mut local = self.local();
        if let Some(known) = local.get_mut(sku) {
            let (old, new) = (known.sale.order(), sale.order());
            if known.is_fresh() && old > new {
                return known.sale.clone();
            }
            if old == new {
                // The same state seen again: keep the loaded buyers, take the later instant
                // and, on sale, the fewer units (stock only falls within the epoch).
                known.observed_at = known.observed_at.max(observed_at);
                if let (Sale::OnSale { units: held, .. }, Sale::OnSale { units: seen, .. }) =
                    (&mut known.sale, &sale)
                {
                    *held = (*held).min(*seen);
                }
            } else {
                *known = Entry { observed_at, sale };
            }
            return known.sale.clone();
        }
        if local.len() >= MAX_SKUS {
            // Bounded memory under many distinct SKUs: forgetting is always safe (the next
            // attempt reads the database), so drop what is stale, then unknown SKUs, then all.
            local.retain(|_, e| e.is_fresh() && !matches!(e.sale, Sale::Unknown));
            if local.len() >= MAX_SKUS {
                local.clear();
            }
        }
        local.insert(
            sku.clone(),
            Entry {
                observed_at,
                sale: sale.clone(),
            },
        );
        sale
    }

    /// SKUs remembered (for tests and metrics).
    pub fn len(&self) -> usize {
        self.local().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sku(s: &str) -> Sku {
        Sku::parse(s).expect("sku")
    }

    fn epoch(generation: i64) -> Epoch {
        Epoch {
            generation,
            returns: 0,
        }
    }

    fn on_sale(generation: i64) -> Sale {
        on_sale_with(generation, 10)
    }

    fn on_sale_with(generation: i64, units: i64) -> Sale {
        Sale::OnSale {
            epoch: epoch(generation),
            units,
        }
    }

    fn sold_out(generation: i64, buyers: &[(&str, &str)]) -> Sale {
        Sale::SoldOut {
            epoch: epoch(generation),
            buyers: Arc::new(
                buyers
                    .iter()
                    .map(|(u, k)| ((*u).to_owned(), (*k).to_owned()))
                    .collect(),
            ),
        }
    }

    #[test]
    fn knowledge_is_trusted_for_local_ttl_from_before_its_observation() {
        let k = SaleKnowledge::new();
        let a = sku("A");
        k.learn(&a, Instant::now(), sold_out(1, &[]));
        assert!(k.cached(&a).is_some());
        // Recorded late: observed more than LOCAL_TTL ago, so never used.
        let b = sku("B");
        let long_ago = Instant::now()
            .checked_sub(LOCAL_TTL + Duration::from_millis(1))
            .expect("instant");
        k.learn(&b, long_ago, sold_out(1, &[]));
        assert!(k.cached(&b).is_none());
        assert!(k.fresh(&b).is_none());
    }

    #[test]
    fn a_late_sold_out_of_an_earlier_generation_never_overwrites_a_later_sale() {
        let k = SaleKnowledge::new();
        let a = sku("A");
        k.learn(&a, Instant::now(), on_sale(2));
        // Generation 1's sell-out arrives late (even with a fresh instant): ignored.
        let now = k.learn(&a, Instant::now(), sold_out(1, &[]));
        assert!(
            matches!(now, Sale::OnSale { epoch, .. } if epoch == self::epoch(2)),
            "{now:?}"
        );
        assert!(k.cached(&a).is_none());
        // Within a generation, "on sale" seen late does not reopen a sold-out sale.
        k.learn(&a, Instant::now(), sold_out(2, &[("u", "k")]));
        k.learn(&a, Instant::now(), on_sale(2));
        let buyers = k.cached(&a).expect("still sold out");
        assert!(buyers.contains(&("u".to_owned(), "k".to_owned())));
        // A SKU never disappears: "unknown" seen late changes nothing.
        k.learn(&a, Instant::now(), Sale::Unknown);
        assert!(k.cached(&a).is_some());
        // A later generation replaces it, buyers and all.
        k.learn(&a, Instant::now(), on_sale(3));
        assert!(k.cached(&a).is_none());
    }

    #[test]
    fn buyers_belong_to_their_generation() {
        let k = SaleKnowledge::new();
        let a = sku("A");
        k.learn(&a, Instant::now(), sold_out(1, &[("u1", "k1")]));
        assert!(k.buyers_of(&a, epoch(1)).is_some());
        assert!(
            k.buyers_of(&a, epoch(2)).is_none(),
            "generation 2 loads its own"
        );
    }

    #[test]
    fn a_return_reopens_a_sold_out_generation_and_its_buyers_load_again() {
        let k = SaleKnowledge::new();
        let a = sku("A");
        k.learn(&a, Instant::now(), sold_out(1, &[("u", "k")]));
        let returned = Epoch {
            generation: 1,
            returns: 1,
        };
        // "On sale" after a return is later than "sold out" before it.
        let now = k.learn(
            &a,
            Instant::now(),
            Sale::OnSale {
                epoch: returned,
                units: 1,
            },
        );
        assert!(matches!(now, Sale::OnSale { .. }), "{now:?}");
        assert!(k.cached(&a).is_none());
        // A late "sold out" of the epoch before the return changes nothing.
        k.learn(&a, Instant::now(), sold_out(1, &[]));
        assert!(k.cached(&a).is_none());
        // Sold out again after the return: its buyers are not the earlier epoch's.
        assert!(k.buyers_of(&a, epoch(1)).is_none());
        assert!(k.buyers_of(&a, returned).is_none());
    }

    #[test]
    fn stale_knowledge_of_a_later_state_gives_way() {
        let k = SaleKnowledge::new();
        let a = sku("A");
        let long_ago = Instant::now().checked_sub(LOCAL_TTL * 2).expect("instant");
        k.learn(&a, long_ago, on_sale(5));
        // Stale: whatever the database says now is taken.
        let now = k.learn(&a, Instant::now(), Sale::Unknown);
        assert!(matches!(now, Sale::Unknown));
    }

    #[test]
    fn memory_is_bounded() {
        let k = SaleKnowledge::new();
        for i in 0..(3 * MAX_SKUS) {
            k.learn(&sku(&format!("NOPE-{i}")), Instant::now(), Sale::Unknown);
            assert!(k.len() <= MAX_SKUS);
        }
        // Sold-out knowledge survives a flood of unknown SKUs.
        let hot = sku("HOT");
        k.learn(&hot, Instant::now(), sold_out(1, &[]));
        for i in 0..MAX_SKUS {
            k.learn(&sku(&format!("MORE-{i}")), Instant::now(), Sale::Unknown);
        }
        assert!(k.cached(&hot).is_some());
        assert!(k.len() <= MAX_SKUS);
    }

    #[test]
    fn the_units_left_are_the_fewest_seen_in_the_epoch_and_only_while_fresh() {
        let k = SaleKnowledge::new();
        let a = sku("A");
        assert_eq!(k.units_left_at_most(&a), None, "nothing known");
        k.learn(&a, Instant::now(), on_sale_with(1, 7));
        assert_eq!(k.units_left_at_most(&a), Some(7));
        // A late observation of more units in the same epoch does not raise the bound.
        k.learn(&a, Instant::now(), on_sale_with(1, 9));
        assert_eq!(k.units_left_at_most(&a), Some(7));
        k.learn(&a, Instant::now(), on_sale_with(1, 3));
        assert_eq!(k.units_left_at_most(&a), Some(3));
        // A later epoch (a restock or a return) may have more.
        k.learn(&a, Instant::now(), on_sale_with(2, 50));
        assert_eq!(k.units_left_at_most(&a), Some(50));
        // Sold out, unknown units, or stale: no bound.
        k.learn(&a, Instant::now(), sold_out(2, &[]));
        assert_eq!(k.units_left_at_most(&a), None);
        let b = sku("B");
        k.learn(&b, Instant::now(), on_sale_with(1, 0));
        assert_eq!(k.units_left_at_most(&b), None);
        let c = sku("C");
        let long_ago = Instant::now()
            .checked_sub(LOCAL_TTL * 2)
            .expect("an instant in the past");
        k.learn(&c, long_ago, on_sale_with(1, 4));
        assert_eq!(k.units_left_at_most(&c), None);
    }
}
