//! Orders after their purchase: payments, cancellations, refunds and hold expiries — the other
//! direction of stock. Reached from `routes::orders` (the shop backend's admin calls and the
//! shopper's edge-signed reads and cancellations), from the payment webhook, and from the expiry
//! loop ([`expiry`]).
//!
//! [`OrderService::apply`] decides an action with the one state machine ([`state::plan`]): first
//! on the order as read (a repeat or a refusal answers at once), then again under the row locks
//! of the transaction that applies it (`store::orders::OrderTx`), where the answer is final — so
//! concurrent actions on one order are decided once, and a repeat changes nothing.
//!
//! A step that moves units (a return, a late payment, a refund without restock) is serialized
//! with the SKU's purchase batches exactly like one: it runs under the SKU's lease
//! ([`SkuLocks::run`], the one place of the lease's safety argument): its transaction locks the
//! SKU row, carries the lease's fencing token (a stale holder commits nothing) and rolls back if
//! the lease may have expired by commit time.
//! A payment of a live hold moves no unit and takes only the order's row lock.
//!
//! A return to the current generation's stock bumps the SKU's return epoch, which reopens the
//! sale in every process's knowledge (`purchase::knowledge`): this process learns it at once,
//! and a cancellation or refund answers only [`LOCAL_TTL`] after its commit, when no process can
//! still answer `sold_out` from what it knew before.

pub mod expiry;
pub mod state;

use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use redlock::RedlockError;
use shared::{OrderStatus, OrderView, Sku, UserId};
use sqlx::PgPool;
use uuid::Uuid;

use crate::hold_queue::{self, HoldQueue};
use crate::lease::{LeaseWork, SkuLease, SkuLocks};
use crate::metrics::Metrics;
use crate::purchase::expire::HoldExpiry;
use crate::purchase::knowledge::{LOCAL_TTL, SaleKnowledge};
use crate::store::StoreError;
use crate::store::orders::{self as store, Applied, Change, OrderRow, OrderTx};
pub use state::{OrderAction, PaymentSource, Plan, ReturnReason, Step};

/// Plans of one action: a state that moved between the read and the locks is planned again
/// (the lease's own retries are [`SkuLocks::run`]'s).
const MAX_PLANS: u32 = 4;

/// Who asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requester {
    /// The shop backend (admin token) or the payment provider's verified webhook: any order.
    Shop,
    /// A shopper, through the edge's signature: their own orders only (another's is not found).
    Shopper(UserId),
}

/// Why an order action was not applied.
#[derive(Debug, thiserror::Error)]
pub enum OrderError {
    /// No such order — or not the shopper's own (404 `order_not_found`).
    #[error("no such order")]
    NotFound,
    /// The state machine refuses the action in `current` (409 `order_state`).
    #[error("the order is {current}")]
    State { current: OrderStatus },
    /// The SKU's lease cannot be had (503 with `Retry-After`).
    #[error("sku lock: {0}")]
    Lock(#[from] RedlockError),
    /// The order kept changing under the action (503 with `Retry-After`: retry).
    #[error("the order kept changing; retry")]
    KeptChanging,
    /// The database's verdict: 503 with `Retry-After` when it cannot be had or nothing was
    /// committed for a reason a retry may fix, else a bug (500; logged); see
    /// [`OrderError::is_unavailable`].
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl OrderError {
    /// A dependency or a race that a retry may get past (503 with `Retry-After`) — not a refusal
    /// of the action, nor a bug (500).
    pub fn is_unavailable(&self) -> bool {
        match self {
            Self::Lock(_) | Self::KeptChanging => true,
            Self::Store(e) => !matches!(e, StoreError::Unexpected(_) | StoreError::SkuExists(_)),
            Self::NotFound | Self::State { .. } => false,
        }
    }
}

impl LeaseWork for OrderError {
    fn store_error(&self) -> Option<&StoreError> {
        match self {
            Self::Store(e) => Some(e),
            _ => None,
        }
    }
}

/// An RFC 3339 UTC instant with milliseconds (the 201's `expires_at` format).
pub fn rfc3339(at: DateTime<Utc>) -> String {
    at.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// The wire view of a stored order.
pub fn view(row: &OrderRow) -> OrderView {
    OrderView {
        order_id: row.order_id.to_string(),
        sku: row.sku.clone(),
        qty: u32::try_from(row.qty).unwrap_or(0),
        user: row.user_id.clone(),
        status: row.status,
        expires_at: row.expires_at.map(rfc3339),
        created_at: rfc3339(row.created_at),
        updated_at: rfc3339(row.updated_at),
    }
}

/// What one attempt at a transition did.
enum Attempted {
    /// Committed.
    Done {
        step: Step,
        before: OrderRow,
        applied: Applied,
        observed_at: Instant,
    },
    /// The order was found in another state under the locks (or needs the lease): plan again.
    Moved(OrderRow),
}

/// Applies order actions; cheap to clone.
#[derive(Debug, Clone)]
pub struct OrderService {
    /// The deciders' pool (the purchase batches').
    pool: PgPool,
    locks: SkuLocks,
    expiry: HoldExpiry,
    knowledge: Arc<SaleKnowledge>,
    metrics: Arc<Metrics>,
    /// The holds' delayed queue: a hold paid or returned leaves it.
    holds: HoldQueue,
    /// `REQUEST_DEADLINE_MS`: how long an action may wait for its SKU's lease.
    request_deadline: Duration,
}

impl OrderService {
    pub fn new(
        pool: PgPool,
        locks: SkuLocks,
        expiry: HoldExpiry,
        knowledge: Arc<SaleKnowledge>,
        metrics: Arc<Metrics>,
        holds: HoldQueue,
        request_deadline: Duration,
    ) -> Self {
        Self {
            pool,
            locks,
            expiry,
            knowledge,
            metrics,
            holds,
            request_deadline,
        }
    }

    /// The order `id` as `requester` may see it.
    pub async fn get(&self, id: Uuid, requester: &Requester) -> Result<OrderView, OrderError> {
        Ok(view(&self.load(id, requester).await?))
    }

    async fn load(&self, id: Uuid, requester: &Requester) -> Result<OrderRow, OrderError> {
        let row = store::order(&self.pool, id)
            .await?
            .ok_or(OrderError::NotFound)?;
        match requester {
            Requester::Shopper(user) if user.as_str() != row.user_id => Err(OrderError::NotFound),
            _ => Ok(row),
        }
    }

    /// Applies `action` to order `order_id` for `requester`; the order as it is afterwards. A
    /// repeat of an action already applied answers the same and changes nothing. A shopper may
    /// only cancel. A return to the current sale answers [`LOCAL_TTL`] after its commit (see the
    /// module docs).
    pub async fn apply(
        &self,
        order_id: Uuid,
        action: OrderAction,
        requester: Requester,
    ) -> Result<OrderView, OrderError> {
        if matches!(requester, Requester::Shopper(_)) && action != OrderAction::Cancel {
            return Err(OrderError::NotFound);
        }
        let deadline = Instant::now() + self.request_deadline;
        let mut row = self.load(order_id, &requester).await?;
        for _ in 0..MAX_PLANS {
            let step = match state::plan(row.status, &action) {
                Plan::Repeat => return Ok(view(&row)),
                Plan::Refuse => {
                    return Err(OrderError::State {
                        current: row.status,
                    });
                }
                Plan::Move(step) => step,
            };
            let attempted = if step.needs_lease() {
                let sku = Sku::parse(&row.sku).map_err(|e| {
                    OrderError::Store(StoreError::Unexpected(sqlx::Error::Decode(e.into())))
                })?;
                self.locks
                    .run(&sku, deadline, |lease| {
                        self.transact(&row, &action, Some(lease))
                    })
                    .await?
            } else {
                self.transact(&row, &action, None).await?
            };
            match attempted {
                Attempted::Moved(now) => row = now,
                Attempted::Done {
                    step,
                    before,
                    applied,
                    observed_at,
                } => {
                    let after = self.after(step, &before, &applied, observed_at).await;
                    if after.reopened {
                        // Every process's knowledge from before the commit is stale by then.
                        tokio::time::sleep(LOCAL_TTL.saturating_sub(observed_at.elapsed())).await;
                    }
                    return applied.orders.first().map(view).ok_or(OrderError::Store(
                        StoreError::Unexpected(sqlx::Error::RowNotFound),
                    ));
                }
            }
        }
        Err(OrderError::KeptChanging)
    }

    /// One transaction applying `action` to `row`'s order, decided under its locks.
    async fn transact(
        &self,
        row: &OrderRow,
        action: &OrderAction,
        lease: Option<SkuLease>,
    ) -> Result<Attempted, OrderError> {
        let commit_by = lease.map(SkuLease::commit_by).transpose()?;
        let fence = lease.map(SkuLease::fence);
        let observed_at = Instant::now();
        let mut tx = OrderTx::begin(&self.pool).await?;
        let books = match lease {
            Some(_) => tx.lock_sku(&row.sku, fence).await?,
            None => None,
        };
        let locked = tx
            .lock_orders(&row.sku, &[row.order_id])
            .await?
            .pop()
            .ok_or(OrderError::NotFound)?;
        let step = match state::plan(locked.status, action) {
            Plan::Move(step) if lease.is_some() || !step.needs_lease() => step,
            _ => return Ok(Attempted::Moved(locked)),
        };
        let payment = match action {
            OrderAction::Pay { source } if step.records_payment() => {
                Some((source.label(), source.reference().map(str::to_owned)))
            }
            _ => None,
        };
        let mut change = Change {
            order: locked.clone(),
            to: locked.status,
            restock: false,
            take: false,
            restocked: None,
            payment,
        };
        match step {
            Step::Pay => change.to = OrderStatus::Paid,
            Step::LatePay => {
                let books = books.ok_or(OrderError::NotFound)?;
                let qty = i64::from(locked.qty);
                let held = tx.user_units(&locked.sku, &locked.user_id).await?;
                let can_take = locked.generation == books.generation
                    && books.stock >= qty
                    && held + qty <= i64::from(books.max_per_user);
                change.to = if can_take {
                    change.take = true;
                    OrderStatus::Paid
                } else {
                    OrderStatus::RefundDue
                };
            }
            Step::Return { to, reason } => {
                if reason == ReturnReason::Expired {
                    let due = locked.expires_at.map(|at| tx.is_past(at));
                    let due = match due {
                        Some(check) => check.await?,
                        None => false,
                    };
                    if !due {
                        return Err(OrderError::State {
                            current: locked.status,
                        });
                    }
                }
                change.to = to;
                change.restock = true;
                change.restocked = (to == OrderStatus::Refunded).then_some(true);
            }
            Step::WriteOff | Step::Settle => {
                change.to = OrderStatus::Refunded;
                change.restocked = Some(false);
            }
        }
        let applied = tx
            .apply(&locked.sku, books, fence, &[change], commit_by)
            .await?;
        Ok(Attempted::Done {
            step,
            before: locked,
            applied,
            observed_at,
        })
    }

    /// After a committed transition: metrics, knowledge, the hold queue, the audit event.
    async fn after(
        &self,
        step: Step,
        before: &OrderRow,
        applied: &Applied,
        observed_at: Instant,
    ) -> After {
        let Some(now) = applied.orders.first() else {
            return After { reopened: false };
        };
        match step {
            Step::Return { reason, .. } => {
                self.metrics.count_return(reason.label(), 1);
                if reason == ReturnReason::Expired {
                    self.metrics.hold_expiries.inc();
                    for lag in &applied.expiry_lags {
                        self.metrics.expiry_lag.observe(lag.max(0.0));
                    }
                }
            }
            Step::LatePay if now.status == OrderStatus::RefundDue => {
                self.metrics.refund_due.inc();
            }
            _ => {}
        }
        let reopened = matches!(step, Step::Return { .. }) && applied.sale.is_some();
        if let (Some(sale), Ok(sku)) = (applied.sale, Sku::parse(&now.sku)) {
            self.knowledge
                .learn_state(&sku, observed_at, Some(sale), &self.pool)
                .await;
        }
        if before.status == OrderStatus::Held {
            let member = hold_queue::member(&now.sku, now.order_id);
            let holds = self.holds.clone();
            tokio::spawn(async move {
                if let Err(e) = holds.remove(&[member]).await {
                    tracing::debug!(error = %e, "could not remove a hold from the delayed queue");
                }
            });
        }
        tracing::info!(
            target: "flashgate::audit",
            event = "order",
            order_id = %now.order_id,
            sku = %now.sku,
            from = %before.status,
            to = %now.status,
            qty = now.qty,
            "order transition"
        );
        After { reopened }
    }
}

impl OrderService {
    /// After holds were paid outside [`OrderService::apply`] (the payments' combiner,
    /// `payments::batch`, in one transaction): their delayed-queue entries are spent, and each
    /// transition is audited like one of `apply`.
    pub fn paid_live(&self, paid: &[crate::store::payments::PaidHold]) {
        if paid.is_empty() {
            return;
        }
        let members: Vec<String> = paid
            .iter()
            .map(|p| hold_queue::member(&p.sku, p.order_id))
            .collect();
        let holds = self.holds.clone();
        tokio::spawn(async move {
            if let Err(e) = holds.remove(&members).await {
                tracing::debug!(error = %e, "could not remove paid holds from the delayed queue");
            }
        });
        for p in paid {
            tracing::info!(
                target: "flashgate::audit",
                event = "order",
                order_id = %p.order_id,
                sku = %p.sku,
                from = %OrderStatus::Held,
                to = %OrderStatus::Paid,
                qty = p.qty,
                "order transition"
            );
        }
    }
}

/// What the caller of a transition still has to do.
struct After {
    /// Units went back into the current sale: answer only after [`LOCAL_TTL`].
    reopened: bool,
}
