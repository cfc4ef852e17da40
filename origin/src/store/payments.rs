//! The payment provider's events (`payment_events`): the record that makes each event id act at
//! most once. Reached from `payments` (the webhook's service) after the signature is verified and
//! the body parsed: [`begin_event`] records a new event as `pending` (or reports how an earlier
//! delivery of it was decided), the order transition runs through the orders service, and
//! [`finish_event`] writes the result. Checked at compile time like every query of the store.

use sqlx::PgPool;
use uuid::Uuid;

use super::StoreError;

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
