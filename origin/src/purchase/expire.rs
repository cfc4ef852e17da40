//! Expiring the due holds of a SKU under its lease — beside the purchase path, on the lease
//! holder's turn. [`HoldExpiry::expire_due`] takes what waits in [`DueHolds`] for the SKU: the
//! combiner calls it before each purchase batch, the expiry loop's expirer task (`orders`) when
//! no batch holds the lease.
//!
//! [`HoldExpiry::expire_under`] is the one expiry transaction: under the lease, with its guard
//! and fence ([`SkuLease`]), it locks the SKU row and those of the holds that are still held and
//! due by the database's clock, and returns them to stock — each hold exactly once, whoever
//! else (another process, a payment, a cancellation) tries at the same time.

use std::sync::Arc;
use std::time::Instant;

use shared::{OrderStatus, Sku};
use sqlx::PgPool;
use uuid::Uuid;

use super::due::DueHolds;
use super::knowledge::SaleKnowledge;
use crate::lease::SkuLease;
use crate::metrics::Metrics;
use crate::store::StoreError;
use crate::store::orders::{Change, OrderTx};

/// Expires due holds under their SKU's lease. Cheap to clone.
#[derive(Debug, Clone)]
pub struct HoldExpiry {
    pool: PgPool,
    knowledge: Arc<SaleKnowledge>,
    metrics: Arc<Metrics>,
    due: Arc<DueHolds>,
}

impl HoldExpiry {
    pub fn new(pool: PgPool, knowledge: Arc<SaleKnowledge>, metrics: Arc<Metrics>) -> Self {
        Self {
            pool,
            knowledge,
            metrics,
            due: Arc::default(),
        }
    }

    /// The holds that fell due, per SKU, waiting for the next holder of its lease.
    pub fn due(&self) -> &DueHolds {
        &self.due
    }

    /// Expires the holds of `sku` waiting in [`DueHolds`], under its `lease`; how many
    /// expired. On failure nothing was committed and they wait again (the next holder of the
    /// lease, or the expirer's retry, takes them).
    pub async fn expire_due(&self, sku: &Sku, lease: SkuLease) -> Result<usize, StoreError> {
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
    /// clock, in one transaction under `sku`'s `lease`; how many expired, and the ids that were
    /// not expirable (not due, or no longer held).
    pub async fn expire_under(
        &self,
        sku: &Sku,
        ids: &[Uuid],
        lease: SkuLease,
    ) -> Result<(usize, Vec<Uuid>), StoreError> {
        let commit_by = lease.commit_by()?;
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
