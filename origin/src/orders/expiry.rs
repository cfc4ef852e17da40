//! Hold expiry, off the request path: the loop (one per origin process). Holds not paid by their
//! `expires_at` become `expired` and their units go back on sale.
//!
//! Two sources of due holds feed the SKU's waiting list (`purchase::due`), from which the next
//! holder of the SKU's lease in this process expires them in one transaction (each hold exactly
//! once, decided in the database on the locked row by the database's clock, whoever else
//! tries): the SKU's combiner before its next purchase batch — a hot sale's expiries ride on the
//! lease its batches hold rather than waiting for a turn between them — or else, [`HANDOFF`]
//! later, the SKU's expirer task, which takes the lease itself:
//! - the delayed queue ([`crate::hold_queue`]): every [`MOVE_EVERY`] the mover pops the entries
//!   due by the queue node's clock — each entry goes to one process;
//! - the database sweep, the truth: every [`SWEEP_EVERY`] (and at once at startup) it reads the
//!   holds more than [`SWEEP_GRACE`] past due (partial index `orders_held_expires_idx`). It
//!   catches whatever the queue lost — an entry whose `ZADD` failed, a node that lost its data, a
//!   process that crashed between a pop and its commit, a restart while holds fell due — so a
//!   lost entry only delays an expiry by at most `SWEEP_GRACE + SWEEP_EVERY` (plus the expiry
//!   itself).
//!
//! Neither waits for an expiry: the loop keeps its pace while an expirer waits for the lease.
//!
//! Every few seconds it also exports the number of live and stuck holds (`origin_holds_active`,
//! `origin_holds_overdue`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use shared::Sku;
use uuid::Uuid;

use super::{OrderError, OrderService};
use crate::hold_queue::{self, HoldQueue, parse_member};
use crate::store::orders as store;

/// How often the mover pops due entries.
pub const MOVE_EVERY: Duration = Duration::from_millis(100);
/// How often the database sweep runs.
pub const SWEEP_EVERY: Duration = Duration::from_millis(500);
/// The sweep leaves holds this recently due to the mover (processes do not race for them).
pub const SWEEP_GRACE: Duration = Duration::from_millis(500);
/// How long due holds wait for this process's combiner of their SKU (which expires them under
/// the lease of its next batch) before the SKU's expirer takes the lease itself.
pub const HANDOFF: Duration = Duration::from_millis(30);
/// An expirer whose expiry failed (the lease or the database could not be had) tries again
/// after this.
const RETRY_AFTER_FAILURE: Duration = Duration::from_millis(500);
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
                expire_all(&service, due);
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
            match store::hold_counts(&service.pool, OVERDUE).await {
                Ok((active, overdue)) => {
                    service.metrics.holds_active.set(active);
                    service.metrics.holds_overdue.set(overdue);
                }
                Err(e) => tracing::debug!(error = %e, "could not count holds"),
            }
        }
    }
}

/// One database sweep: expires holds past due by more than the grace.
async fn sweep(service: &OrderService, queue: &HoldQueue) {
    let due = match store::due_holds(&service.pool, SWEEP_GRACE, LIMIT as i64).await {
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
    expire_all(service, due);
    // Their queue entries, if any, are spent.
    if let Err(e) = queue.remove(&members).await {
        tracing::debug!(error = %e, "could not remove swept holds from the delayed queue");
    }
}

/// Hands `due` holds to their SKUs' waiting lists, starting an expirer for a SKU without one.
fn expire_all(service: &OrderService, due: Vec<(Sku, Uuid)>) {
    let mut by_sku: HashMap<Sku, Vec<Uuid>> = HashMap::new();
    for (sku, id) in due {
        by_sku.entry(sku).or_default().push(id);
    }
    for (sku, ids) in by_sku {
        if service.expiry.due().deposit(&sku, ids) {
            tokio::spawn(expirer(service.clone(), sku));
        }
    }
}

/// The expirer of one SKU: while holds of it wait, gives this process's combiner [`HANDOFF`]
/// to take them with its next batch, then takes the lease and expires what is left. Ends when
/// nothing waits.
async fn expirer(service: OrderService, sku: Sku) {
    loop {
        tokio::time::sleep(HANDOFF).await;
        if service.expiry.due().retire(&sku) {
            return;
        }
        let deadline = Instant::now() + service.request_deadline;
        let expired = service
            .locks
            .run(&sku, deadline, async |lease| {
                Ok::<_, OrderError>(service.expiry.expire_due(&sku, lease).await?)
            })
            .await;
        if let Err(e) = expired {
            tracing::warn!(sku = %sku, error = %e, "due holds not expired yet; retrying");
            tokio::time::sleep(RETRY_AFTER_FAILURE).await;
        }
    }
}

/// Expiry on demand.
impl OrderService {
    /// Expires the holds `ids` of `sku` that are due by the database's clock, in one
    /// transaction under the SKU's lease; returns the ids that were not (yet) expirable — not
    /// due, or no longer held. Each hold is expired exactly once, whoever else tries.
    pub async fn expire(&self, sku: &Sku, ids: &[Uuid]) -> Result<Vec<Uuid>, OrderError> {
        let deadline = Instant::now() + self.request_deadline;
        let (_, left) = self
            .locks
            .run(sku, deadline, async |lease| {
                self.expiry
                    .expire_under(sku, ids, lease)
                    .await
                    .map_err(OrderError::from)
            })
            .await?;
        Ok(left)
    }
}
