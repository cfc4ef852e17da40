//! What every combiner of the process shares ([`Context`]): the pool, the SKUs' locks, the sale
//! knowledge, the settings and the holds' queue and expiry, and the steps of deciding a batch —
//! the transaction under a SKU's lease (its guard and fence from [`SkuLease`]), the batch's audit
//! event, and the mapping of store and lock failures to the answers shoppers get. Used by the
//! per-SKU combiners ([`super::combiner`]).

use std::sync::Arc;
use std::time::Instant;

use shared::Sku;
use sqlx::PgPool;
use uuid::Uuid;

use super::answer::{BatchRef, Refusal};
use super::expire::HoldExpiry;
use super::knowledge::SaleKnowledge;
use crate::decision::Attempt;
use crate::hold_queue::{self, HoldQueue};
use crate::lease::{SkuLease, SkuLocks};
use crate::metrics::Metrics;
use crate::settings::PurchaseSettings;
use crate::store::{self, BatchMode, StoreError};
use redlock::RedlockError;

/// Retries of a batch rolled back by a conflict that need not settle anything (a deadlock or
/// serialization victim), on top of the one retry per (user, key) pair a batch is allowed for
/// per-attempt conflicts (see the combiner's `Worker::batch`). Nothing is committed by a conflicting batch.
pub(super) const MAX_CONFLICT_RETRIES: u32 = 3;

/// Everything a combiner needs; shared by all combiners of the process.
#[derive(Debug)]
pub struct Context {
    pub(super) pool: PgPool,
    pub(super) locks: SkuLocks,
    pub(super) knowledge: Arc<SaleKnowledge>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) settings: PurchaseSettings,
    /// The holds' delayed queue: a batch that created holds schedules their expiry there.
    holds: HoldQueue,
    /// Holds that fell due, expired by the next holder of their SKU's lease ([`super::due`]).
    pub(super) expiry: HoldExpiry,
}

impl Context {
    /// Decides on `pool` (the deciders' own, see `app.rs`) under `locks`.
    pub fn new(
        pool: PgPool,
        locks: SkuLocks,
        knowledge: Arc<SaleKnowledge>,
        metrics: Arc<Metrics>,
        settings: PurchaseSettings,
        holds: HoldQueue,
        expiry: HoldExpiry,
    ) -> Self {
        Self {
            pool,
            locks,
            knowledge,
            metrics,
            settings,
            holds,
            expiry,
        }
    }

    /// Decides `attempts` in one transaction under `lease`, with its guard and fence — or,
    /// without a lease, only if the SKU does not exist ([`BatchMode::UnknownSkuOnly`]) — and
    /// writes the batch's audit event.
    pub(super) async fn decide(
        &self,
        sku: &Sku,
        attempts: &[Attempt],
        lease: Option<SkuLease>,
        batch: BatchRef,
    ) -> Result<store::BatchResult, StoreError> {
        let (fence, commit_by, mode) = match lease.map(|l| (l.fence(), l.commit_by())) {
            Some((fence, Ok(by))) => (Some(fence), Some(by), BatchMode::Sell),
            Some((_, Err(e))) => {
                let refused = Err(e);
                audit_batch(sku, batch, attempts.len(), &refused, 0.0);
                return refused;
            }
            None => (None, None, BatchMode::UnknownSkuOnly),
        };
        let started = Instant::now();
        let result = store::decide_batch(&self.pool, sku, attempts, fence, commit_by, mode).await;
        let seconds = started.elapsed().as_secs_f64();
        self.metrics.db_transaction.observe(seconds);
        if let Err(StoreError::Conflict) = result {
            self.metrics.batch_conflicts.inc();
        }
        audit_batch(sku, batch, attempts.len(), &result, seconds);
        if let Ok(res) = &result {
            self.metrics.batch_size.observe(attempts.len() as f64);
            self.metrics
                .units_sold
                .inc_by(u64::try_from(res.units_sold).unwrap_or(0));
            self.schedule_holds(sku, res);
        }
        result
    }

    /// Adds the holds a committed batch created to the delayed queue, off the request path
    /// (a failure only leaves their expiry to the database sweep).
    fn schedule_holds(&self, sku: &Sku, res: &store::BatchResult) {
        let Some(at) = res.expires_at else { return };
        if res.holds.is_empty() {
            return;
        }
        let due = at.timestamp_millis();
        let entries: Vec<(String, i64)> = res
            .holds
            .iter()
            .map(|id| (hold_queue::member(sku.as_str(), *id), due))
            .collect();
        let holds = self.holds.clone();
        tokio::spawn(async move {
            if let Err(e) = holds.schedule(&entries).await {
                tracing::warn!(error = %e, holds = entries.len(), "could not queue hold expiries; the sweep will expire them");
            }
        });
    }

    /// Decides `attempts` for a SKU believed not to exist, without its lease, retrying a batch
    /// that lost a race on an idempotency key. `Ok(None)`: the SKU exists (now known here); take
    /// the lease.
    pub(super) async fn decide_unknown(
        &self,
        sku: &Sku,
        attempts: &[Attempt],
    ) -> Result<Option<(store::BatchResult, BatchRef)>, StoreError> {
        let mut conflicts = 0;
        loop {
            let batch = BatchRef {
                id: Uuid::now_v7(),
                fence: 0,
            };
            let observed_at = Instant::now();
            match self.decide(sku, attempts, None, batch).await {
                Ok(result) => {
                    self.knowledge
                        .learn_batch(sku, observed_at, &result, &self.pool)
                        .await;
                    return Ok(Some((result, batch)));
                }
                Err(StoreError::SkuExists(state)) => {
                    self.knowledge
                        .learn_state(sku, observed_at, Some(state), &self.pool)
                        .await;
                    return Ok(None);
                }
                Err(StoreError::Conflict) if conflicts < MAX_CONFLICT_RETRIES => conflicts += 1,
                Err(e) => return Err(e),
            }
        }
    }
}

/// One `flashgate::audit` batch event at `$level` (tracing needs the level as a constant, so
/// each arm of [`audit_batch`] names its own) with the fields every batch event carries.
macro_rules! batch_event {
    ($level:ident, $sku:expr, $batch:expr, $size:expr, $tx_ms:expr, $result:expr, $($rest:tt)+) => {
        tracing::$level!(
            target: "flashgate::audit",
            event = "batch",
            result = $result,
            sku = %$sku,
            batch_id = %$batch.id,
            fence = $batch.fence,
            size = $size,
            tx_ms = $tx_ms,
            $($rest)+
        )
    };
}

/// The audit event of one batch transaction: committed or not, and why. Together with the
/// per-attempt `purchase decided` events (same `batch_id`) and the Redlock lease events (same
/// `fence`), an incident can be replayed from the logs.
fn audit_batch(
    sku: &Sku,
    batch: BatchRef,
    size: usize,
    result: &Result<store::BatchResult, StoreError>,
    seconds: f64,
) {
    let tx_ms = seconds * 1000.0;
    match result {
        Ok(res) => batch_event!(
            info,
            sku,
            batch,
            size,
            tx_ms,
            "committed",
            units_sold = res.units_sold,
            remaining = res.remaining,
            "batch committed"
        ),
        Err(e @ StoreError::Unexpected(_)) => batch_event!(
            error, sku, batch, size, tx_ms, batch_error_label(e),
            error = %e, "batch failed"
        ),
        // Not a fault: a SKU believed unknown was created meanwhile; decided under its lease.
        Err(e @ StoreError::SkuExists(_)) => batch_event!(
            info,
            sku,
            batch,
            size,
            tx_ms,
            batch_error_label(e),
            "batch not committed"
        ),
        Err(e) => batch_event!(
            warn, sku, batch, size, tx_ms, batch_error_label(e),
            error = %e, "batch not committed"
        ),
    }
}

/// Logs a lock acquisition that failed. A known quorum loss is logged once by the lock when it
/// starts (and its end when it ends); a warning per refused batch would flood the log for as long
/// as it lasts.
pub(super) fn log_lock_failure(sku: &Sku, e: &RedlockError) {
    if matches!(e, RedlockError::QuorumLost { .. }) {
        tracing::debug!(sku = %sku, error = %e, "sku lock refused: known quorum loss");
    } else {
        tracing::warn!(sku = %sku, error = %e, "could not acquire sku lock");
    }
}

fn batch_error_label(e: &StoreError) -> &'static str {
    match e {
        StoreError::Unavailable(_) => "unavailable",
        StoreError::Conflict => "conflict",
        StoreError::StaleFence { .. } => "stale_fence",
        StoreError::LeaseExpired => "lease_expired",
        StoreError::SkuExists(_) => "sku_exists",
        StoreError::Unexpected(_) => "failed",
    }
}

/// The answer to attempts whose batch failed for good: 503 when the database could not be had,
/// a conflict did not settle or the lease was lost (retrying may help), 500 for a bug (logged by
/// `audit_batch`).
pub(super) fn store_refusal(e: &StoreError) -> Refusal {
    match e {
        StoreError::Unavailable(_)
        | StoreError::Conflict
        | StoreError::StaleFence { .. }
        | StoreError::LeaseExpired => Refusal::Unavailable,
        StoreError::Unexpected(_) | StoreError::SkuExists(_) => Refusal::Internal,
    }
}

/// The answer to attempts whose SKU lease could not be had by their deadline: a lock still
/// contended is load (shed), anything else a lost dependency.
pub(super) fn lock_refusal(e: &RedlockError) -> Refusal {
    if matches!(e, RedlockError::Contended) {
        Refusal::Overloaded
    } else {
        Refusal::Unavailable
    }
}
