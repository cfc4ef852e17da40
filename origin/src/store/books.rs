//! The reconciliation's reads: each query re-derives one of the sale's invariants from the rows
//! and returns only the rows that break it. Off the request path: called by
//! [`crate::reconcile::reconcile`] (`origin reconcile`, and the server's periodic check), which
//! turns these rows into its report. Checked at compile time like every query of the store.

use std::time::Duration;

use sqlx::PgPool;

use super::StoreError;

mod events;

pub(crate) use events::{order_event_mismatches, stuck_deliveries, undispatched, unnumbered};

/// A sale generation whose books do not match its orders: `units_out` (what the CHECK
/// `initial_stock = stock + units_out + written_off` balances) is not the units of its held,
/// confirmed and paid orders.
#[derive(Debug)]
pub(crate) struct StockRow {
    pub(crate) sku: String,
    pub(crate) generation: i64,
    /// Whether it is the SKU's current generation (else replaced by a PUT).
    pub(crate) current: bool,
    pub(crate) initial_stock: i64,
    pub(crate) stock: i64,
    pub(crate) written_off: i64,
    pub(crate) units_in_orders: i64,
}

/// A user holding more units (held, confirmed, paid) of a SKU's current generation than its
/// `max_per_user`.
#[derive(Debug)]
pub(crate) struct CapRow {
    pub(crate) sku: String,
    pub(crate) user_id: String,
    pub(crate) units: i64,
    pub(crate) max_per_user: i32,
}

/// A (SKU, user) whose `user_units` counter differs from the units in the user's orders.
#[derive(Debug)]
pub(crate) struct CounterRow {
    pub(crate) sku: String,
    pub(crate) user_id: String,
    pub(crate) counted: i64,
    pub(crate) in_orders: i64,
}

/// A stored 201 whose order does not exist.
#[derive(Debug)]
pub(crate) struct OrphanAnswer {
    pub(crate) user_id: String,
    pub(crate) idempotency_key: String,
}

/// Sale generations (current and replaced) whose books do not match their orders, by SKU and
/// generation.
pub(crate) async fn stock_mismatches(pool: &PgPool) -> Result<Vec<StockRow>, StoreError> {
    Ok(sqlx::query_as!(
        StockRow,
        r#"WITH books AS (
             SELECT sku, generation, TRUE AS current, initial_stock, stock, units_out, written_off
             FROM skus
             UNION ALL
             SELECT sku, generation, FALSE, initial_stock, stock, units_out, written_off
             FROM sku_generations
         ), taken AS (
             SELECT sku, generation, SUM(qty)::BIGINT AS units FROM orders
             WHERE status IN ('held', 'confirmed', 'paid')
             GROUP BY sku, generation
         )
         SELECT b.sku AS "sku!", b.generation AS "generation!", b.current AS "current!",
                b.initial_stock AS "initial_stock!", b.stock AS "stock!",
                b.written_off AS "written_off!", COALESCE(t.units, 0) AS "units_in_orders!"
         FROM books b LEFT JOIN taken t ON t.sku = b.sku AND t.generation = b.generation
         WHERE b.units_out <> COALESCE(t.units, 0)
            OR b.initial_stock - b.stock - b.written_off <> COALESCE(t.units, 0)
         ORDER BY 1, 2"#,
    )
    .fetch_all(pool)
    .await?)
}

/// Users above a SKU's cap in its current generation, by SKU and user.
pub(crate) async fn above_cap(pool: &PgPool) -> Result<Vec<CapRow>, StoreError> {
    Ok(sqlx::query_as!(
        CapRow,
        r#"SELECT s.sku, o.user_id, SUM(o.qty)::BIGINT AS "units!", s.max_per_user
         FROM orders o JOIN skus s ON s.sku = o.sku AND o.generation = s.generation
         WHERE o.status IN ('held', 'confirmed', 'paid')
         GROUP BY s.sku, o.user_id, s.max_per_user
         HAVING SUM(o.qty) > s.max_per_user
         ORDER BY s.sku, o.user_id"#,
    )
    .fetch_all(pool)
    .await?)
}

/// (SKU, user) counters that disagree with the held, confirmed and paid orders (either side may be missing), by SKU and
/// user.
pub(crate) async fn counter_mismatches(pool: &PgPool) -> Result<Vec<CounterRow>, StoreError> {
    Ok(sqlx::query_as!(
        CounterRow,
        r#"SELECT COALESCE(c.sku, o.sku) AS "sku!", COALESCE(c.user_id, o.user_id) AS "user_id!",
                  COALESCE(c.units, 0) AS "counted!", COALESCE(o.units, 0) AS "in_orders!"
         FROM user_units c
         FULL JOIN (SELECT sku, user_id, SUM(qty)::BIGINT AS units FROM orders
                    WHERE status IN ('held', 'confirmed', 'paid') GROUP BY sku, user_id) o
           ON o.sku = c.sku AND o.user_id = c.user_id
         WHERE COALESCE(c.units, 0) <> COALESCE(o.units, 0)
         ORDER BY 1, 2"#,
    )
    .fetch_all(pool)
    .await?)
}

/// Stored 201s whose order does not exist.
pub(crate) async fn answers_without_order(pool: &PgPool) -> Result<Vec<OrphanAnswer>, StoreError> {
    Ok(sqlx::query_as!(
        OrphanAnswer,
        "SELECT r.user_id, r.idempotency_key FROM idempotency_records r
         LEFT JOIN orders o ON o.order_id = r.order_id
         WHERE r.status = 201 AND o.order_id IS NULL",
    )
    .fetch_all(pool)
    .await?)
}

/// Ids of orders younger than `retention` without their stored 201, oldest first.
pub(crate) async fn orders_without_answer(
    pool: &PgPool,
    retention: Duration,
) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT o.order_id::text AS "order_id!" FROM orders o
         LEFT JOIN idempotency_records r ON r.order_id = o.order_id
         WHERE r.order_id IS NULL AND o.created_at > now() - make_interval(secs => $1)
         ORDER BY o.created_at"#,
        retention.as_secs_f64(),
    )
    .fetch_all(pool)
    .await?)
}

/// An order, by id and SKU.
#[derive(Debug)]
pub(crate) struct OrderRef {
    pub(crate) order_id: String,
    pub(crate) sku: String,
}

/// Orders paid after their hold expired when no unit could be taken: the money must go back.
pub(crate) async fn refund_due(pool: &PgPool) -> Result<Vec<OrderRef>, StoreError> {
    Ok(sqlx::query_as!(
        OrderRef,
        r#"SELECT order_id::text AS "order_id!", sku FROM orders WHERE status = 'refund_due'
         ORDER BY created_at"#,
    )
    .fetch_all(pool)
    .await?)
}

/// Paid orders without their payment record (an API `pay` call or a payment provider's event).
pub(crate) async fn paid_without_payment(pool: &PgPool) -> Result<Vec<OrderRef>, StoreError> {
    Ok(sqlx::query_as!(
        OrderRef,
        r#"SELECT o.order_id::text AS "order_id!", o.sku FROM orders o
         LEFT JOIN order_payments p ON p.order_id = o.order_id
         WHERE o.status = 'paid' AND p.order_id IS NULL
         ORDER BY o.created_at"#,
    )
    .fetch_all(pool)
    .await?)
}

/// Holds more than `overdue` past their `expires_at`: the expiry timer is stuck.
pub(crate) async fn stuck_holds(
    pool: &PgPool,
    overdue: Duration,
) -> Result<Vec<OrderRef>, StoreError> {
    Ok(sqlx::query_as!(
        OrderRef,
        r#"SELECT order_id::text AS "order_id!", sku FROM orders
         WHERE status = 'held' AND expires_at < now() - make_interval(secs => $1)
         ORDER BY expires_at"#,
        overdue.as_secs_f64(),
    )
    .fetch_all(pool)
    .await?)
}

/// A payment event recorded as having acted on an order that does not exist.
#[derive(Debug)]
pub(crate) struct EventWithoutOrder {
    pub(crate) event_id: String,
    pub(crate) event_type: String,
    pub(crate) result: String,
    pub(crate) order_id: Option<String>,
}

/// Payment events that acted on an order (`applied`, `refund_due`, `already_refunded`) whose
/// order does not exist, by event id.
pub(crate) async fn events_without_order(
    pool: &PgPool,
) -> Result<Vec<EventWithoutOrder>, StoreError> {
    Ok(sqlx::query_as!(
        EventWithoutOrder,
        r#"SELECT e.event_id, e.type AS event_type, e.result, e.order_id::text AS order_id
         FROM payment_events e LEFT JOIN orders o ON o.order_id = e.order_id
         WHERE e.result IN ('applied', 'refund_due', 'already_refunded') AND o.order_id IS NULL
         ORDER BY e.event_id"#,
    )
    .fetch_all(pool)
    .await?)
}

/// Ids of payment events still `pending` `older_than` after they arrived (a delivery that
/// failed half-way and was never retried), oldest first.
pub(crate) async fn stuck_events(
    pool: &PgPool,
    older_than: Duration,
) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar!(
        "SELECT event_id FROM payment_events
         WHERE result = 'pending' AND received_at < now() - make_interval(secs => $1)
         ORDER BY received_at",
        older_than.as_secs_f64(),
    )
    .fetch_all(pool)
    .await?)
}
