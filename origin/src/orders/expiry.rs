//! Hold expiry, off the request path: the loop (one per origin process) and its transaction
//! ([`OrderService::expire`]). Holds not paid by their `expires_at` become `expired` and their
//! units go back on sale.
//!
//! Two sources of due holds feed [`OrderService::expire`], which decides each hold exactly once
//! in the database (under the SKU's lease, on the locked row, by the database's clock — whoever
//! else tries, a hold expires once):
//! - the delayed queue ([`crate::hold_queue`]): every [`MOVE_EVERY`] the mover pops the entries due by
//!   the queue node's clock — each entry goes to one process — and expires them, grouped by SKU;
//! - the database sweep, the truth: every [`SWEEP_EVERY`] (and at once at startup) it reads the
//!   holds more than [`SWEEP_GRACE`] past due (partial index `orders_held_expires_idx`) and
//!   expires them. It catches whatever the queue lost — an entry whose `ZADD` failed, a node
//!   that lost its data, a process that crashed between a pop and its commit, a restart while
//!   holds fell due — so a lost entry only delays an expiry by at most
//!   `SWEEP_GRACE + SWEEP_EVERY` (plus the expiry itself).
//!
//! Every few seconds it also exports the number of live and stuck holds (`origin_holds_active`,
//! `origin_holds_overdue`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures::future::join_all;
use shared::Sku;
use uuid::Uuid;

use super::{OrderError, OrderService, ReturnReason, Work, Worked};
use crate::hold_queue::{self, HoldQueue, parse_member};
use crate::store::orders::{self as store, Change, OrderTx};
use redlock::Lease;
use shared::OrderStatus;

/// How often the mover pops due entries.
pub const MOVE_EVERY: Duration = Duration::from_millis(100);
/// How often the database sweep runs.
pub const SWEEP_EVERY: Duration = Duration::from_millis(500);
/// The sweep leaves holds this recently due to the mover (processes do not race for them).
pub const SWEEP_GRACE: Duration = Duration::from_millis(500);
/// Most holds taken per pop or sweep.
const LIMIT: usize = 1000;
/// How often the hold gauges are refreshed.
const GAUGES_EVERY: Duration = Duration::from_secs(5);
/// A hold this far past due is stuck (`origin_holds_overdue`, reconciliation).
pub const OVERDUE: Duration = Duration::from_secs(60);

/// Runs the loop until aborted.
pub async fn run(service: OrderService, queue: HoldQueue) {
    let mut tick = tokio::time::interval(MOVE_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_sweep: Option<tokio::time::Instant> = None;
    let mut last_gauges: Option<tokio::time::Instant> = None;
    loop {
        tick.tick().await;
        match queue.pop_due(LIMIT).await {
            Ok(members) if !members.is_empty() => {
                let due: Vec<(Sku, Uuid)> =
                    members.iter().filter_map(|m| parse_member(m)).collect();
                expire_all(&service, due).await;
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(error = %e, "hold queue pop failed; the sweep covers it"),
        }
        if last_sweep.is_none_or(|t| t.elapsed() >= SWEEP_EVERY) {
            last_sweep = Some(tokio::time::Instant::now());
            sweep(&service, &queue).await;
        }
        if last_gauges.is_none_or(|t| t.elapsed() >= GAUGES_EVERY) {
            last_gauges = Some(tokio::time::Instant::now());
            match store::hold_counts(&service.ctx.pool, OVERDUE).await {
                Ok((active, overdue)) => {
                    service.ctx.metrics.holds_active.set(active);
                    service.ctx.metrics.holds_overdue.set(overdue);
                }
                Err(e) => tracing::debug!(error = %e, "could not count holds"),
            }
        }
    }
}

/// One database sweep: expires holds past due by more than the grace.
async fn sweep(service: &OrderService, queue: &HoldQueue) {
    let due = match store::due_holds(&service.ctx.pool, SWEEP_GRACE, LIMIT as i64).await {
        Ok(due) => due,
        Err(e) => {
            tracing::warn!(error = %e, "hold sweep could not read the database");
            return;
        }
    };
    if due.is_empty() {
        return;
    }
    tracing::info!(
        holds = due.len(),
        "hold sweep found holds past due (the delayed queue missed them)"
    );
    let members: Vec<String> = due
        .iter()
        .map(|d| hold_queue::member(&d.sku, d.order_id))
        .collect();
    let due: Vec<(Sku, Uuid)> = due
        .into_iter()
        .filter_map(|d| Some((Sku::parse(&d.sku).ok()?, d.order_id)))
        .collect();
    expire_all(service, due).await;
    // Their queue entries, if any, are spent.
    if let Err(e) = queue.remove(&members).await {
        tracing::debug!(error = %e, "could not remove swept holds from the delayed queue");
    }
}

/// Expires `due` holds, one transaction per SKU, the SKUs concurrently.
async fn expire_all(service: &OrderService, due: Vec<(Sku, Uuid)>) {
    let mut by_sku: HashMap<Sku, Vec<Uuid>> = HashMap::new();
    for (sku, id) in due {
        by_sku.entry(sku).or_default().push(id);
    }
    join_all(by_sku.into_iter().map(|(sku, ids)| {
        let service = service.clone();
        async move {
            if let Err(e) = service.expire(&sku, &ids).await {
                tracing::warn!(sku = %sku, holds = ids.len(), error = %e, "holds not expired yet; retried by the sweep");
            }
        }
    }))
    .await;
}

/// The expiry transaction.
impl OrderService {
    /// Expires the holds `ids` of `sku` that are due by the database's clock, in one
    /// transaction under the SKU's lease; returns the ids that were not (yet) expirable — not
    /// due, or no longer held. Each hold is expired exactly once, whoever else tries.
    pub async fn expire(&self, sku: &Sku, ids: &[Uuid]) -> Result<Vec<Uuid>, OrderError> {
        let deadline = Instant::now() + self.ctx.settings.request_deadline;
        match self
            .under_lease(sku.as_str(), deadline, Work::Expire(sku, ids))
            .await?
        {
            Worked::Expired(left) => Ok(left),
            Worked::Transacted(_) => Ok(Vec::new()),
        }
    }

    pub(super) async fn expire_under(
        &self,
        sku: &Sku,
        ids: &[Uuid],
        lease: &Lease,
    ) -> Result<Vec<Uuid>, OrderError> {
        let commit_by = self.commit_by(lease)?;
        let observed_at = Instant::now();
        let mut tx = OrderTx::begin(&self.ctx.pool).await?;
        let books = tx.lock_sku(sku.as_str(), Some(lease.fence())).await?;
        let due = tx.lock_due_holds(sku.as_str(), ids).await?;
        let left: Vec<Uuid> = ids
            .iter()
            .filter(|id| !due.iter().any(|r| r.order_id == **id))
            .copied()
            .collect();
        if due.is_empty() {
            return Ok(left);
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
        let ctx = &self.ctx;
        ctx.metrics
            .count_return(ReturnReason::Expired.label(), n as u64);
        ctx.metrics.hold_expiries.inc_by(n as u64);
        for lag in &applied.expiry_lags {
            ctx.metrics.expiry_lag.observe(lag.max(0.0));
        }
        if let Some(sale) = applied.sale {
            ctx.knowledge
                .learn_state(sku, observed_at, Some(sale), &ctx.pool)
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
        Ok(left)
    }
}
