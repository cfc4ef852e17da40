//! Orders after their purchase: reads (`GET /v1/orders/{order_id}`, the expiry sweep) and the
//! transaction that moves an order from one state to another ([`OrderTx`]), reached from the
//! order service (`crate::orders`) — for a return, once it holds the SKU's lease.
//!
//! The transaction exposes its steps (lock the SKU row, lock the orders, write the changes) so
//! that the service decides each transition under the row locks with the one state machine
//! (`orders::state`). Every write that moves units updates, in the same transaction, the books
//! of the order's generation — the `skus` row for the current one, `sku_generations` for an
//! earlier one — whose CHECK keeps `initial_stock = stock + units_out + written_off`, and the
//! user's `user_units`, whose CHECK keeps it non-negative. A return to the current generation's
//! stock bumps the SKU's return epoch; the SKU row's fence refuses a stale lease like a batch.
//! Each transition writes its event in the statement that moves the order (and a stock crossing
//! zero its SKU event in the one that moves the stock): none commits without its event.

use chrono::{DateTime, Utc};
use shared::OrderStatus;
use sqlx::{PgPool, Postgres, Transaction};
use uuid::Uuid;

use super::events::new_event_id;
use super::{SaleState, StoreError};

/// An order as stored.
#[derive(Debug, Clone)]
pub struct OrderRow {
    pub order_id: Uuid,
    pub sku: String,
    pub generation: i64,
    pub user_id: String,
    pub qty: i32,
    pub status: OrderStatus,
    pub expires_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The row as read; `status` is checked by `orders_status_known`.
struct RawOrder {
    order_id: Uuid,
    sku: String,
    generation: i64,
    user_id: String,
    qty: i32,
    status: String,
    expires_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl TryFrom<RawOrder> for OrderRow {
    type Error = StoreError;

    fn try_from(r: RawOrder) -> Result<Self, StoreError> {
        let status = OrderStatus::parse(&r.status).ok_or_else(|| {
            StoreError::Unexpected(sqlx::Error::Decode(
                format!("unknown order status {:?}", r.status).into(),
            ))
        })?;
        Ok(Self {
            order_id: r.order_id,
            sku: r.sku,
            generation: r.generation,
            user_id: r.user_id,
            qty: r.qty,
            status,
            expires_at: r.expires_at,
            created_at: r.created_at,
            updated_at: r.updated_at,
        })
    }
}

fn rows(raw: Vec<RawOrder>) -> Result<Vec<OrderRow>, StoreError> {
    raw.into_iter().map(OrderRow::try_from).collect()
}

/// One order by id, without lock.
pub async fn order(pool: &PgPool, id: Uuid) -> Result<Option<OrderRow>, StoreError> {
    sqlx::query_as!(
        RawOrder,
        "SELECT order_id, sku, generation, user_id, qty, status, expires_at, created_at, updated_at
         FROM orders WHERE order_id = $1",
        id,
    )
    .fetch_optional(pool)
    .await?
    .map(OrderRow::try_from)
    .transpose()
}

/// A hold that is due: its id and SKU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueHold {
    pub order_id: Uuid,
    pub sku: String,
}

/// Holds whose `expires_at` is at least `grace` in the past by the database's clock, oldest
/// first, at most `limit` (the partial index `orders_held_expires_idx`).
pub async fn due_holds(
    pool: &PgPool,
    grace: std::time::Duration,
    limit: i64,
) -> Result<Vec<DueHold>, StoreError> {
    Ok(sqlx::query_as!(
        DueHold,
        "SELECT order_id, sku FROM orders
         WHERE status = 'held' AND expires_at <= now() - make_interval(secs => $1)
         ORDER BY expires_at LIMIT $2",
        grace.as_secs_f64(),
        limit,
    )
    .fetch_all(pool)
    .await?)
}

/// Live holds, and those more than `overdue` past their `expires_at` (a stuck timer).
pub async fn hold_counts(
    pool: &PgPool,
    overdue: std::time::Duration,
) -> Result<(i64, i64), StoreError> {
    let row = sqlx::query!(
        r#"SELECT COUNT(*) AS "active!",
                  COUNT(*) FILTER (WHERE expires_at < now() - make_interval(secs => $1)) AS "overdue!"
         FROM orders WHERE status = 'held'"#,
        overdue.as_secs_f64(),
    )
    .fetch_one(pool)
    .await?;
    Ok((row.active, row.overdue))
}

/// The SKU row as a transition sees it, locked.
#[derive(Debug, Clone, Copy)]
pub struct LockedBooks {
    pub generation: i64,
    pub returns: i64,
    pub stock: i64,
    pub max_per_user: i32,
    pub fence: i64,
}

/// One order's transition, decided by the service.
#[derive(Debug, Clone)]
pub struct Change {
    pub order: OrderRow,
    pub to: OrderStatus,
    /// Units back into the order's generation's stock.
    pub restock: bool,
    /// Units taken again from the current generation's stock (a late payment honoured).
    pub take: bool,
    /// `refunded` only: whether the units went back on sale.
    pub restocked: Option<bool>,
    /// `(source, reference)` of a payment recorded with the transition.
    pub payment: Option<(&'static str, Option<String>)>,
}

impl Change {
    fn qty(&self) -> i64 {
        i64::from(self.order.qty)
    }

    /// (stock, units_out, written_off, user_units) deltas of this change.
    fn deltas(&self) -> (i64, i64, i64, i64) {
        let q = self.qty();
        let (was, now) = (self.order.status.holds_units(), self.to.holds_units());
        let out = match (was, now) {
            (true, false) => -q,
            (false, true) => q,
            _ => 0,
        };
        let stock = if self.restock {
            q
        } else if self.take {
            -q
        } else {
            0
        };
        // Units leaving `units_out` without going back to stock are written off (a refund
        // without restock); units entering it come from stock (a late payment).
        let written_off = if out < 0 && !self.restock { q } else { 0 };
        (stock, out, written_off, out)
    }
}

/// What a committed transition changed.
#[derive(Debug)]
pub struct Applied {
    /// The orders as they are now, in the order of the changes.
    pub orders: Vec<OrderRow>,
    /// The current generation's sale after the transaction, when it changed its books.
    pub sale: Option<SaleState>,
    /// Seconds from each expired hold's `expires_at` to the transaction's write (expiries only).
    pub expiry_lags: Vec<f64>,
}

/// A transaction moving orders from one state to another; see the module docs.
pub struct OrderTx {
    tx: Transaction<'static, Postgres>,
}

impl std::fmt::Debug for OrderTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OrderTx").finish_non_exhaustive()
    }
}

impl OrderTx {
    pub async fn begin(pool: &PgPool) -> Result<Self, StoreError> {
        Ok(Self {
            tx: pool.begin().await?,
        })
    }

    /// Locks the SKU row (before any order row: the purchase batch's order); refuses a fence
    /// lower than the last one that committed.
    pub async fn lock_sku(
        &mut self,
        sku: &str,
        fence: Option<u64>,
    ) -> Result<Option<LockedBooks>, StoreError> {
        let row = sqlx::query_as!(
            LockedBooks,
            "SELECT generation, returns, stock, max_per_user, fence FROM skus WHERE sku = $1 FOR UPDATE",
            sku,
        )
        .fetch_optional(&mut *self.tx)
        .await?;
        if let (Some(row), Some(presented)) = (&row, fence) {
            let presented = i64::try_from(presented).unwrap_or(i64::MAX);
            if presented < row.fence {
                return Err(StoreError::StaleFence {
                    presented,
                    current: row.fence,
                });
            }
        }
        Ok(row)
    }

    /// Locks the orders `ids` of `sku` (in id order, so two transactions never wait on each
    /// other's orders) and returns them as they are now.
    pub async fn lock_orders(
        &mut self,
        sku: &str,
        ids: &[Uuid],
    ) -> Result<Vec<OrderRow>, StoreError> {
        rows(
            sqlx::query_as!(
                RawOrder,
                "SELECT order_id, sku, generation, user_id, qty, status, expires_at, created_at, updated_at
                 FROM orders WHERE order_id = ANY($1) AND sku = $2
                 ORDER BY order_id FOR UPDATE",
                ids,
                sku,
            )
            .fetch_all(&mut *self.tx)
            .await?,
        )
    }

    /// Locks those of the holds `ids` of `sku` that are still held and due by the database's
    /// clock (the condition is checked again on the locked rows, so a hold paid meanwhile is
    /// not returned), in id order.
    pub async fn lock_due_holds(
        &mut self,
        sku: &str,
        ids: &[Uuid],
    ) -> Result<Vec<OrderRow>, StoreError> {
        rows(
            sqlx::query_as!(
                RawOrder,
                "SELECT order_id, sku, generation, user_id, qty, status, expires_at, created_at, updated_at
                 FROM orders
                 WHERE order_id = ANY($1) AND sku = $2 AND status = 'held' AND expires_at <= now()
                 ORDER BY order_id FOR UPDATE",
                ids,
                sku,
            )
            .fetch_all(&mut *self.tx)
            .await?,
        )
    }

    /// Units `user` holds of `sku` (the per-user cap's counter).
    pub async fn user_units(&mut self, sku: &str, user: &str) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar!(
            "SELECT units FROM user_units WHERE sku = $1 AND user_id = $2",
            sku,
            user,
        )
        .fetch_optional(&mut *self.tx)
        .await?
        .unwrap_or(0))
    }

    /// Whether the database's clock is past `at` (an expiry decides by the database's clock).
    pub async fn is_past(&mut self, at: DateTime<Utc>) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar!(r#"SELECT now() >= $1 AS "past!""#, at)
            .fetch_one(&mut *self.tx)
            .await?)
    }

    /// Writes `changes` (all of `sku`; `current` is the locked SKU row, if it was locked) with
    /// their books, and commits — unless `commit_by` has passed (the lease may be gone): then
    /// nothing is committed ([`StoreError::LeaseExpired`]).
    pub async fn apply(
        mut self,
        sku: &str,
        current: Option<LockedBooks>,
        fence: Option<u64>,
        changes: &[Change],
        commit_by: Option<std::time::Instant>,
    ) -> Result<Applied, StoreError> {
        let ids: Vec<Uuid> = changes.iter().map(|c| c.order.order_id).collect();
        let statuses: Vec<&str> = changes.iter().map(|c| c.to.as_str()).collect();
        let restocked: Vec<Option<bool>> = changes.iter().map(|c| c.restocked).collect();
        let event_ids: Vec<Uuid> = changes.iter().map(|_| new_event_id()).collect();
        // With its event: `order.<status>`, the order's next sequence number, its `updated_at`.
        let updated = rows(
            sqlx::query_as!(
                RawOrder,
                r#"WITH updated AS (
                       UPDATE orders o SET status = t.s, restocked = t.r,
                                           updated_at = clock_timestamp(),
                                           event_seq = o.event_seq + 1
                       FROM UNNEST($1::uuid[], $2::text[], $3::bool[], $4::uuid[]) AS t(id, s, r, e)
                       WHERE o.order_id = t.id
                       RETURNING o.order_id, o.sku, o.generation, o.user_id, o.qty, o.status,
                                 o.expires_at, o.created_at, o.updated_at, o.event_seq, t.e
                   ), published AS (
                       INSERT INTO events (id, type, at, order_id, sequence, status)
                       SELECT e, 'order.' || status, updated_at, order_id, event_seq, status
                       FROM updated
                   )
                   SELECT order_id AS "order_id!", sku AS "sku!", generation AS "generation!",
                          user_id AS "user_id!", qty AS "qty!", status AS "status!", expires_at,
                          created_at AS "created_at!", updated_at AS "updated_at!"
                   FROM updated"#,
                &ids,
                &statuses as &[&str],
                &restocked as &[Option<bool>],
                &event_ids,
            )
            .fetch_all(&mut *self.tx)
            .await?,
        )?;
        if updated.len() != changes.len() {
            return Err(StoreError::Unexpected(sqlx::Error::RowNotFound));
        }
        let expiry_lags = sqlx::query_scalar!(
            r#"SELECT EXTRACT(EPOCH FROM clock_timestamp() - o.expires_at)::float8 AS "lag!"
               FROM orders o WHERE o.order_id = ANY($1) AND o.status = 'expired'"#,
            &ids,
        )
        .fetch_all(&mut *self.tx)
        .await?;

        // Books, per generation: the current one on the SKU row, earlier ones archived.
        let mut by_generation: std::collections::BTreeMap<i64, (i64, i64, i64)> =
            std::collections::BTreeMap::new();
        let mut by_user: std::collections::BTreeMap<&str, i64> = std::collections::BTreeMap::new();
        for c in changes {
            let (stock, out, written_off, user) = c.deltas();
            let g = by_generation.entry(c.order.generation).or_default();
            g.0 += stock;
            g.1 += out;
            g.2 += written_off;
            *by_user.entry(c.order.user_id.as_str()).or_default() += user;
        }
        let current_generation = current.map(|c| c.generation);
        let mut sale = None;
        if let Some(generation) = current_generation {
            if let Some(&(stock, out, written_off)) = by_generation.get(&generation) {
                if (stock, out, written_off) != (0, 0, 0) {
                    // With the SKU event of a stock that leaves 0 (a return) or reaches it.
                    let row = sqlx::query_as!(
                        SaleState,
                        r#"WITH moved AS (
                               UPDATE skus SET stock = stock + $3, units_out = units_out + $4,
                                               written_off = written_off + $5,
                                               returns = returns + CASE WHEN $3 > 0 THEN 1 ELSE 0 END,
                                               fence = GREATEST(fence, $6), updated_at = now()
                               WHERE sku = $1 AND generation = $2
                               RETURNING generation, returns, stock
                           ), published AS (
                               INSERT INTO events (id, type, at, sku, stock)
                               SELECT $7, CASE WHEN stock = 0 THEN 'sku.sold_out'
                                               ELSE 'sku.back_on_sale' END,
                                      clock_timestamp(), $1, stock
                               FROM moved WHERE (stock = 0) <> (stock - $3 = 0)
                           )
                           SELECT generation AS "generation!", returns AS "returns!",
                                  stock AS "stock!"
                           FROM moved"#,
                        sku,
                        generation,
                        stock,
                        out,
                        written_off,
                        fence.map_or(0, |f| i64::try_from(f).unwrap_or(i64::MAX)),
                        new_event_id(),
                    )
                    .fetch_one(&mut *self.tx)
                    .await?;
                    sale = Some(row);
                }
            }
        }
        let earlier: Vec<(i64, (i64, i64, i64))> = by_generation
            .into_iter()
            .filter(|(g, d)| Some(*g) != current_generation && *d != (0, 0, 0))
            .collect();
        if !earlier.is_empty() {
            if current_generation.is_none() {
                // Units cannot move without the SKU row lock (the caller's bug).
                return Err(StoreError::Unexpected(sqlx::Error::RowNotFound));
            }
            let gens: Vec<i64> = earlier.iter().map(|(g, _)| *g).collect();
            let stock: Vec<i64> = earlier.iter().map(|(_, d)| d.0).collect();
            let out: Vec<i64> = earlier.iter().map(|(_, d)| d.1).collect();
            let written_off: Vec<i64> = earlier.iter().map(|(_, d)| d.2).collect();
            let done = sqlx::query!(
                "UPDATE sku_generations g SET stock = g.stock + t.s, units_out = g.units_out + t.o,
                                             written_off = g.written_off + t.w
                 FROM UNNEST($2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[]) AS t(gen, s, o, w)
                 WHERE g.sku = $1 AND g.generation = t.gen",
                sku,
                &gens,
                &stock,
                &out,
                &written_off,
            )
            .execute(&mut *self.tx)
            .await?;
            if done.rows_affected() != gens.len() as u64 {
                return Err(StoreError::Unexpected(sqlx::Error::RowNotFound));
            }
        }
        let users: Vec<&str> = by_user
            .iter()
            .filter(|(_, d)| **d != 0)
            .map(|(u, _)| *u)
            .collect();
        let user_deltas: Vec<i64> = by_user.values().copied().filter(|d| *d != 0).collect();
        if !users.is_empty() {
            sqlx::query!(
                "UPDATE user_units c SET units = c.units + t.d
                 FROM UNNEST($2::text[], $3::bigint[]) AS t(u, d)
                 WHERE c.sku = $1 AND c.user_id = t.u",
                sku,
                &users as &[&str],
                &user_deltas,
            )
            .execute(&mut *self.tx)
            .await?;
        }
        let payments: Vec<&Change> = changes.iter().filter(|c| c.payment.is_some()).collect();
        if !payments.is_empty() {
            let pay_ids: Vec<Uuid> = payments.iter().map(|c| c.order.order_id).collect();
            let sources: Vec<&str> = payments
                .iter()
                .filter_map(|c| c.payment.as_ref().map(|p| p.0))
                .collect();
            let references: Vec<Option<&str>> = payments
                .iter()
                .map(|c| c.payment.as_ref().and_then(|p| p.1.as_deref()))
                .collect();
            sqlx::query!(
                "INSERT INTO order_payments (order_id, source, reference)
                 SELECT * FROM UNNEST($1::uuid[], $2::text[], $3::text[])
                 ON CONFLICT (order_id) DO NOTHING",
                &pay_ids,
                &sources as &[&str],
                &references as &[Option<&str>],
            )
            .execute(&mut *self.tx)
            .await?;
        }
        super::commit_within(self.tx, commit_by).await?;
        // In the order of the changes.
        let mut orders = Vec::with_capacity(changes.len());
        for c in changes {
            if let Some(row) = updated.iter().find(|r| r.order_id == c.order.order_id) {
                orders.push(row.clone());
            }
        }
        Ok(Applied {
            orders,
            sale,
            expiry_lags,
        })
    }
}
