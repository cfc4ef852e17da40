//! The payment provider's events (`payment_events`): the record that makes each event id act at
//! most once. Reached from `payments` (the webhook's service) after the signature is verified and
//! the body parsed: [`begin_event`] records a new event as `pending` (or reports how an earlier
//! delivery of it was decided), the order transition runs through the orders service, and
//! [`finish_event`] writes the result. Checked at compile time like every query of the store.

use std::collections::HashMap;

use sqlx::PgPool;
use uuid::Uuid;

use super::StoreError;
use super::events::new_event_id;

/// What the database knew of an event when a delivery of it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begun {
    /// First delivery: recorded as `pending`; apply it, then [`finish_event`].
    New,
    /// An earlier delivery recorded it but never finished (it answered 503, or its process
    /// died): apply it again — order transitions are idempotent — then [`finish_event`].
    Pending,
    /// Already decided, with this result: answer from it, apply nothing.
    Decided(String),
}

/// Records event `event_id` as `pending` unless it is known; see [`Begun`].
pub async fn begin_event(
    pool: &PgPool,
    event_id: &str,
    event_type: &str,
    order_id: Option<Uuid>,
) -> Result<Begun, StoreError> {
    let inserted = sqlx::query_scalar!(
        r#"INSERT INTO payment_events (event_id, type, order_id, result)
         VALUES ($1, $2, $3, 'pending')
         ON CONFLICT (event_id) DO NOTHING
         RETURNING 1 AS "one!""#,
        event_id,
        event_type,
        order_id,
    )
    .fetch_optional(pool)
    .await?;
    if inserted.is_some() {
        return Ok(Begun::New);
    }
    let result = sqlx::query_scalar!(
        "SELECT result FROM payment_events WHERE event_id = $1",
        event_id,
    )
    .fetch_one(pool)
    .await?;
    Ok(if result == "pending" {
        Begun::Pending
    } else {
        Begun::Decided(result)
    })
}

/// Writes the result of a `pending` event. A concurrent delivery of the same event may have
/// finished it first (with the same result: the transitions are idempotent); then this changes
/// nothing.
pub async fn finish_event(pool: &PgPool, event_id: &str, result: &str) -> Result<(), StoreError> {
    sqlx::query!(
        "UPDATE payment_events SET result = $2, decided_at = now()
         WHERE event_id = $1 AND result = 'pending'",
        event_id,
        result,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Whether a refund of the whole charge of `order_id` has been delivered (in any state but
/// ignored as partial): a payment delivered after it must not make the order paid.
pub async fn refund_recorded(pool: &PgPool, order_id: Uuid) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT EXISTS (
             SELECT 1 FROM payment_events
             WHERE order_id = $1 AND type = 'charge.refunded'
               AND result <> 'ignored_partial_refund'
         ) AS "exists!""#,
        order_id,
    )
    .fetch_one(pool)
    .await?)
}

/// A payment event that names a live hold, waiting for [`pay_live_holds`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LivePayment {
    pub event_id: String,
    pub event_type: String,
    pub order_id: Uuid,
}

/// A hold [`pay_live_holds`] made paid: its order and SKU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaidHold {
    pub order_id: Uuid,
    pub sku: String,
    pub qty: i32,
}

/// Pays, in ONE statement (so one transaction and one round trip), the orders of `payments`
/// that are live holds (`held`) and whose event is new and whose charge was not refunded:
/// `held → paid`, its `order_payments` row, its `order.paid` event (the order's next sequence
/// number) and the payment event recorded `applied` — all committed together, so there is no
/// `pending` record to finish. A payment of a live hold moves no unit:
/// no SKU row, no lease; the order's row lock decides it against a concurrent expiry or
/// cancellation (whichever locks first wins; the other finds the order no longer `held`: the
/// lock re-reads a row a transaction changed meanwhile). Every event id and order must appear
/// once.
///
/// Returns the holds paid, in `payments`' order; every other payment (a known event, an order
/// that is not a live hold or does not exist, a refund recorded first) changed nothing and is
/// decided one by one by the caller.
pub async fn pay_live_holds(
    pool: &PgPool,
    payments: &[LivePayment],
) -> Result<Vec<PaidHold>, StoreError> {
    let event_ids: Vec<&str> = payments.iter().map(|p| p.event_id.as_str()).collect();
    let types: Vec<&str> = payments.iter().map(|p| p.event_type.as_str()).collect();
    let orders: Vec<Uuid> = payments.iter().map(|p| p.order_id).collect();
    let published: Vec<Uuid> = payments.iter().map(|_| new_event_id()).collect();
    // Candidates: new events of orders whose charge was not refunded first. Their orders still
    // `held` are locked in id order (two statements never wait on each other's orders) and
    // paid; a concurrent delivery of the same event may have recorded it `pending` meanwhile:
    // it decides it itself (the order is paid by then: `applied`). Each payment's event rides
    // with its order from `live` on, so no step joins two of the statement's own row sets: a
    // cached (generic) plan guesses them at a few rows and would join them as nested loops,
    // quadratic in the batch (500 payments: 250,000 comparisons per join).
    let paid = sqlx::query_as!(
        PaidHold,
        r#"WITH candidates AS (
               SELECT t.event_id, t.type, t.order_id, t.published
               FROM UNNEST($1::text[], $2::text[], $3::uuid[], $4::uuid[])
                    AS t(event_id, type, order_id, published)
               WHERE NOT EXISTS (SELECT 1 FROM payment_events e WHERE e.event_id = t.event_id)
                 AND NOT EXISTS (
                     SELECT 1 FROM payment_events r
                     WHERE r.order_id = t.order_id AND r.type = 'charge.refunded'
                       AND r.result <> 'ignored_partial_refund')
           ),
           live AS (
               SELECT o.order_id, c.event_id, c.type, c.published
               FROM candidates c JOIN orders o ON o.order_id = c.order_id
               WHERE o.status = 'held'
               ORDER BY o.order_id FOR UPDATE OF o
           ),
           paid AS (
               UPDATE orders o SET status = 'paid', updated_at = clock_timestamp(),
                                   event_seq = o.event_seq + 1
               FROM live WHERE o.order_id = live.order_id
               RETURNING o.order_id, o.sku, o.qty, o.updated_at, o.event_seq, live.event_id,
                         live.type, live.published
           ),
           published AS (
               INSERT INTO events (id, type, at, order_id, sequence, status)
               SELECT published, 'order.paid', updated_at, order_id, event_seq, 'paid' FROM paid
           ),
           recorded AS (
               INSERT INTO order_payments (order_id, source, reference)
               SELECT order_id, 'stripe', event_id FROM paid
               ON CONFLICT (order_id) DO NOTHING
           ),
           applied AS (
               INSERT INTO payment_events (event_id, type, order_id, result, decided_at)
               SELECT event_id, type, order_id, 'applied', now() FROM paid
               ON CONFLICT (event_id) DO NOTHING
           )
           SELECT order_id AS "order_id!", sku AS "sku!", qty AS "qty!" FROM paid"#,
        &event_ids as &[&str],
        &types as &[&str],
        &orders,
        &published,
    )
    .fetch_all(pool)
    .await?;
    let paid_by_order: HashMap<Uuid, PaidHold> =
        paid.into_iter().map(|h| (h.order_id, h)).collect();
    Ok(payments
        .iter()
        .filter_map(|p| paid_by_order.get(&p.order_id).cloned())
        .collect())
}
