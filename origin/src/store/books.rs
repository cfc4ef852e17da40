//! The reconciliation's reads: each query re-derives one of the sale's invariants from the rows
//! and returns only the rows that break it. Off the request path: called by
//! [`crate::reconcile::reconcile`] (`origin reconcile`, and the server's periodic check), which
//! turns these rows into its report. Checked at compile time like every query of the store.

use std::time::Duration;

use sqlx::PgPool;

use super::StoreError;

/// A SKU whose `initial_stock - stock` differs from the units in its current generation's orders.
#[derive(Debug)]
pub(crate) struct StockRow {
    pub(crate) sku: String,
    pub(crate) initial_stock: i64,
    pub(crate) stock: i64,
    pub(crate) units_in_orders: i64,
}

/// A user holding more units of a SKU's current generation than its `max_per_user`.
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

/// SKUs whose stock does not add up in their current generation, by SKU.
pub(crate) async fn stock_mismatches(pool: &PgPool) -> Result<Vec<StockRow>, StoreError> {
    Ok(sqlx::query_as!(
        StockRow,
        r#"SELECT s.sku, s.initial_stock, s.stock,
                  COALESCE(SUM(o.qty), 0)::BIGINT AS "units_in_orders!"
         FROM skus s LEFT JOIN orders o ON o.sku = s.sku AND o.generation = s.generation
         GROUP BY s.sku, s.initial_stock, s.stock
         HAVING s.initial_stock - s.stock <> COALESCE(SUM(o.qty), 0)
         ORDER BY s.sku"#,
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
         GROUP BY s.sku, o.user_id, s.max_per_user
         HAVING SUM(o.qty) > s.max_per_user
         ORDER BY s.sku, o.user_id"#,
    )
    .fetch_all(pool)
    .await?)
}

/// (SKU, user) counters that disagree with the orders (either side may be missing), by SKU and
/// user.
pub(crate) async fn counter_mismatches(pool: &PgPool) -> Result<Vec<CounterRow>, StoreError> {
    Ok(sqlx::query_as!(
        CounterRow,
        r#"SELECT COALESCE(c.sku, o.sku) AS "sku!", COALESCE(c.user_id, o.user_id) AS "user_id!",
                  COALESCE(c.units, 0) AS "counted!", COALESCE(o.units, 0) AS "in_orders!"
         FROM user_units c
         FULL JOIN (SELECT sku, user_id, SUM(qty)::BIGINT AS units FROM orders GROUP BY sku, user_id) o
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
