//! The batch's write, one statement at its end: the new orders, the per-user counters, the
//! stock decrement under the fencing token, the stored answers of what `super::decide`
//! decided and the new orders' `order.created` events (with `sku.sold_out` when the batch takes
//! the last unit), all in one round trip.

use chrono::{DateTime, Utc};
use shared::{OrderStatus, Sku};
use uuid::Uuid;

use super::read::LockedSku;
use crate::store::StoreError;
use crate::store::events::new_event_id;

/// A new order and stored outcome, written at the end of the batch.
pub(super) struct NewRecord {
    pub(super) user: String,
    pub(super) key: String,
    pub(super) qty: i32,
    pub(super) status: i16,
    pub(super) body: String,
    pub(super) order_id: Option<Uuid>,
}

/// What [`write`] wrote.
pub(super) struct Written {
    /// Units the new orders took.
    pub(super) units_sold: i64,
    /// The new orders' ids, in the order of the records.
    pub(super) order_ids: Vec<Uuid>,
}

/// Writes `new_records` for `sku` in `tx`: the orders (as `status`, expiring at `expires_at`)
/// under `fence`, and every stored answer. Nothing is written to the SKU row without one
/// (`locked` is `None`), but the answers are still stored.
pub(super) async fn write(
    tx: &mut sqlx::PgConnection,
    sku: &Sku,
    locked: Option<&LockedSku>,
    fence: Option<i64>,
    new_records: &[NewRecord],
    status: OrderStatus,
    expires_at: Option<DateTime<Utc>>,
) -> Result<Written, StoreError> {
    let orders: Vec<&NewRecord> = new_records
        .iter()
        .filter(|r| r.order_id.is_some())
        .collect();
    let units_sold: i64 = orders.iter().map(|r| i64::from(r.qty)).sum();
    // Every write of the batch in one statement (one round trip): the orders, the per-user
    // counters, the stock decrement with the fencing token, and the stored answers. References
    // are checked at the end of the statement, when the orders exist. The stored answers are a
    // plain insert (no `ON CONFLICT`, whose speculative insertion costs a probe and a WAL record
    // more per row): a (user, key) stored meanwhile by another SKU's batch is a unique violation
    // of `idempotency_records_pkey`, `StoreError::Conflict`, and the retry answers it. The
    // counters stay an upsert: one probe of the primary key per buyer whatever the plan, where
    // an `UPDATE … FROM UNNEST` may be planned as a hash join over every counter of the SKU.
    // The events: one `order.created` per order (its sequence 1, at the orders' `created_at`,
    // the transaction's `now()`), and `sku.sold_out` when the batch took the last unit — one
    // more multi-row INSERT in the same statement, no other round trip. Their positions come
    // from the column defaults (the transaction's id, the events sequence): nothing here is
    // shared with another SKU's batch.
    let sold_out = locked
        .filter(|row| units_sold > 0 && row.stock == units_sold)
        .map(|_| new_event_id());
    let event_ids: Vec<Uuid> = orders.iter().map(|_| new_event_id()).collect();
    // The statement's array parameters, one element per order / per new record.
    let order_ids: Vec<Uuid> = orders.iter().filter_map(|r| r.order_id).collect();
    let order_users: Vec<&str> = orders.iter().map(|r| r.user.as_str()).collect();
    let order_qtys: Vec<i32> = orders.iter().map(|r| r.qty).collect();
    let order_keys: Vec<&str> = orders.iter().map(|r| r.key.as_str()).collect();
    let record_users: Vec<&str> = new_records.iter().map(|r| r.user.as_str()).collect();
    let record_keys: Vec<&str> = new_records.iter().map(|r| r.key.as_str()).collect();
    let record_qtys: Vec<i32> = new_records.iter().map(|r| r.qty).collect();
    let record_statuses: Vec<i16> = new_records.iter().map(|r| r.status).collect();
    let record_bodies: Vec<&str> = new_records.iter().map(|r| r.body.as_str()).collect();
    // `None` for a refusal: no order (the `CHECK` ties a NULL order id to a non-201 status).
    let record_orders: Vec<Option<Uuid>> = new_records.iter().map(|r| r.order_id).collect();
    sqlx::query!(
        r#"WITH new_orders AS (
             INSERT INTO orders (order_id, sku, generation, user_id, qty, idempotency_key, fence, status, expires_at)
             SELECT o, $1, $2, u, q, k, $3, $16, $17 FROM UNNEST($4::uuid[], $5::text[], $6::int[], $7::text[]) AS t(o, u, q, k)
         ), counted AS (
             INSERT INTO user_units (sku, user_id, units)
             SELECT $1, u, SUM(q) FROM UNNEST($5::text[], $6::int[]) AS t(u, q) GROUP BY u
             ON CONFLICT (sku, user_id) DO UPDATE SET units = user_units.units + EXCLUDED.units
         ), stored AS (
             INSERT INTO idempotency_records (user_id, idempotency_key, sku, qty, status, body, order_id)
             SELECT u, k, $1, q, s, b, o
             FROM UNNEST($10::text[], $11::text[], $12::int[], $13::smallint[], $14::text[], $15::uuid[]) AS t(u, k, q, s, b, o)
         ), published AS (
             INSERT INTO events (id, type, at, order_id, sequence, status, sku, stock)
             SELECT e, 'order.created', now(), o, 1, $16, NULL, NULL
             FROM UNNEST($18::uuid[], $4::uuid[]) AS t(e, o)
             UNION ALL
             SELECT $19, 'sku.sold_out', now(), NULL, NULL, NULL, $1, 0 WHERE $19::uuid IS NOT NULL
         )
         UPDATE skus SET stock = stock - $8, units_out = units_out + $8,
                         fence = GREATEST(fence, $3), updated_at = now()
         WHERE sku = $1 AND $9"#,
        sku.as_str(),
        locked.map_or(0, |r| r.generation),
        fence.unwrap_or(0),
        &order_ids,
        &order_users as &[&str],
        &order_qtys,
        &order_keys as &[&str],
        units_sold,
        locked.is_some(),
        &record_users as &[&str],
        &record_keys as &[&str],
        &record_qtys,
        &record_statuses,
        &record_bodies as &[&str],
        &record_orders as &[Option<Uuid>],
        status.as_str(),
        expires_at,
        &event_ids,
        sold_out,
    )
    .execute(&mut *tx)
    .await?;
    Ok(Written {
        units_sold,
        order_ids,
    })
}
