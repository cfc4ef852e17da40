//! The reconciliation's reads of the outbox: orders whose events do not tell their story (the
//! last event is not the order's state, or the sequence has a gap), committed events left
//! without a commit number or never fanned out to the webhook endpoints, and deliveries to an
//! enabled endpoint that nobody is sending. Off the request path, like the rest of `super`.

use sqlx::PgPool;

use crate::store::StoreError;

/// An order whose kept events disagree with it.
#[derive(Debug)]
pub(crate) struct OrderEventsRow {
    pub(crate) order_id: String,
    pub(crate) status: String,
    /// The order's count of events (`orders.event_seq`).
    pub(crate) event_seq: i32,
    /// Its events kept, their lowest and highest sequence, and the status and sequence of the
    /// last one in feed (position) order.
    pub(crate) kept: i64,
    pub(crate) first: Option<i32>,
    pub(crate) highest: Option<i32>,
    pub(crate) last_sequence: Option<i32>,
    pub(crate) last_status: Option<String>,
}

/// Orders whose events break the outbox's promises: the last event (in position order; one not
/// numbered yet is the newest) is not
/// the order's state or its count, the kept sequence numbers have a gap, or events are missing
/// that the retention did not purge (an order made after the last purged event must still have
/// its sequence 1; one whose events were all purged must have changed before the purge).
pub(crate) async fn order_event_mismatches(
    pool: &PgPool,
) -> Result<Vec<OrderEventsRow>, StoreError> {
    Ok(sqlx::query_as!(
        OrderEventsRow,
        r#"WITH kept AS (
               SELECT e.order_id, COUNT(*) AS n, MIN(e.sequence) AS lo, MAX(e.sequence) AS hi,
                      (array_agg(e.sequence ORDER BY c.n DESC NULLS FIRST, e.xid DESC, e.seq DESC))[1]
                          AS last_sequence,
                      (array_agg(e.status ORDER BY c.n DESC NULLS FIRST, e.xid DESC, e.seq DESC))[1]
                          AS last_status
               FROM events e LEFT JOIN event_commits c ON c.xid = e.xid
               WHERE e.order_id IS NOT NULL GROUP BY e.order_id
           ), horizon AS (SELECT purged_before FROM event_horizon)
           SELECT o.order_id::text AS "order_id!", o.status, o.event_seq,
                  COALESCE(k.n, 0) AS "kept!", k.lo AS first, k.hi AS highest,
                  k.last_sequence, k.last_status
           FROM orders o
           LEFT JOIN kept k ON k.order_id = o.order_id
           CROSS JOIN horizon h
           WHERE CASE
               WHEN k.n IS NULL THEN
                   o.event_seq > 0 AND NOT COALESCE(o.updated_at <= h.purged_before, false)
               ELSE
                   k.last_status IS DISTINCT FROM o.status
                   OR k.last_sequence IS DISTINCT FROM o.event_seq
                   OR k.hi <> o.event_seq
                   OR k.hi - k.lo + 1 <> k.n
                   OR (k.lo <> 1 AND NOT COALESCE(o.created_at <= h.purged_before, false))
           END
           ORDER BY o.created_at"#,
    )
    .fetch_all(pool)
    .await?)
}

/// Committed transactions waiting for their commit number longer than `older_than` (no
/// sequencer runs): how many, and the oldest's age in seconds.
pub(crate) async fn unnumbered(
    pool: &PgPool,
    older_than: std::time::Duration,
) -> Result<(i64, i64), StoreError> {
    let row = sqlx::query!(
        r#"SELECT COUNT(*) AS "n!",
                  COALESCE(EXTRACT(EPOCH FROM now() - min(registered_at))::bigint, 0) AS "oldest!"
           FROM event_xacts WHERE registered_at < now() - make_interval(secs => $1)"#,
        older_than.as_secs_f64(),
    )
    .fetch_one(pool)
    .await?;
    Ok((row.n, row.oldest))
}

/// Numbered events older than `older_than` that the webhook dispatcher has not fanned out yet:
/// how many, and the oldest's age in seconds.
pub(crate) async fn undispatched(
    pool: &PgPool,
    older_than: std::time::Duration,
) -> Result<(i64, i64), StoreError> {
    let row = sqlx::query!(
        r#"SELECT COUNT(*) AS "n!",
                  COALESCE(EXTRACT(EPOCH FROM now() - min(e.at))::bigint, 0) AS "oldest!"
           FROM webhook_dispatch w
           JOIN event_commits c ON c.n >= w.n
           JOIN events e ON e.xid = c.xid
           WHERE (c.n > w.n OR e.seq > w.seq) AND e.at < now() - make_interval(secs => $1)"#,
        older_than.as_secs_f64(),
    )
    .fetch_one(pool)
    .await?;
    Ok((row.n, row.oldest))
}

/// A delivery to an enabled endpoint that is out of its retry schedule.
#[derive(Debug)]
pub(crate) struct StuckDeliveryRow {
    pub(crate) endpoint_id: String,
    pub(crate) event_id: uuid::Uuid,
    pub(crate) age_secs: i64,
}

/// Deliveries of events older than `older_than` to enabled endpoints that nobody is sending: not
/// claimed, due more than `overdue` ago, and not waiting behind an earlier event of the same
/// order (that one is in its schedule or reported itself).
pub(crate) async fn stuck_deliveries(
    pool: &PgPool,
    older_than: std::time::Duration,
    overdue: std::time::Duration,
) -> Result<Vec<StuckDeliveryRow>, StoreError> {
    Ok(sqlx::query_as!(
        StuckDeliveryRow,
        r#"SELECT d.endpoint_id::text AS "endpoint_id!", e.id AS event_id,
                  EXTRACT(EPOCH FROM now() - e.at)::bigint AS "age_secs!"
           FROM webhook_deliveries d
           JOIN webhook_endpoints w ON w.id = d.endpoint_id AND w.enabled
           JOIN events e ON e.xid = d.xid AND e.seq = d.seq
           WHERE e.at < now() - make_interval(secs => $1)
             AND (d.claimed_until IS NULL OR d.claimed_until < now())
             AND d.next_at < now() - make_interval(secs => $2)
             AND NOT EXISTS (
                 SELECT 1 FROM webhook_deliveries p
                 WHERE p.endpoint_id = d.endpoint_id AND p.order_id = d.order_id
                   AND p.order_sequence < d.order_sequence)
           ORDER BY e.at LIMIT 100"#,
        older_than.as_secs_f64(),
        overdue.as_secs_f64(),
    )
    .fetch_all(pool)
    .await?)
}
