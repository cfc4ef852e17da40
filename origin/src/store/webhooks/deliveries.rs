//! The webhook deliveries' life in the database, off every request path (`events::delivery` and
//! the dispatcher in `events::upkeep`): fanned out from the feed ([`dispatch`]), claimed by one
//! process at a time ([`claim`]), acknowledged or rescheduled ([`record`]), counted for the
//! metrics ([`stats`]).

use chrono::{DateTime, Utc};
use secrecy::SecretSlice;
use sqlx::PgPool;
use uuid::Uuid;

use crate::store::StoreError;
use crate::store::events::Position;

/// Fans the next `max` events of the feed out to the endpoints that want them (one delivery per
/// endpoint and event, due after `first_delay` (0: at once) — or, for an order whose earlier event to that endpoint is
/// still waiting for a retry, not before it), and moves the dispatcher's cursor past them; one
/// pass at a time across processes (the cursor's row lock). `None` when another pass holds it;
/// else (events read, deliveries made).
pub async fn dispatch(
    pool: &PgPool,
    max: i64,
    first_delay: std::time::Duration,
) -> Result<Option<(i64, i64)>, StoreError> {
    let mut tx = pool.begin().await?;
    let Some(cursor) = sqlx::query!("SELECT n, seq FROM webhook_dispatch FOR UPDATE SKIP LOCKED")
        .fetch_optional(&mut *tx)
        .await?
    else {
        return Ok(None);
    };
    let done = sqlx::query!(
        r#"WITH page AS (
               SELECT c.n, e.seq, e.xid, e.type, e.order_id, e.sequence
               FROM event_commits c JOIN events e ON e.xid = c.xid
               WHERE c.n >= $1 AND (c.n > $1 OR e.seq > $2)
               ORDER BY c.n, e.seq LIMIT $3
           ), fanned AS (
               INSERT INTO webhook_deliveries (endpoint_id, n, seq, xid, order_id, order_sequence, next_at)
               SELECT w.id, p.n, p.seq, p.xid, p.order_id, p.sequence,
                      GREATEST(now() + make_interval(secs => $4),
                               (SELECT max(q.next_at) FROM webhook_deliveries q
                                WHERE q.endpoint_id = w.id AND q.order_id = p.order_id))
               FROM page p JOIN webhook_endpoints w
                 ON (w.types IS NULL OR p.type = ANY(w.types))
                AND (p.n > w.start_commit OR (p.n = w.start_commit AND p.seq > w.start_seq))
               ON CONFLICT (endpoint_id, n, seq) DO NOTHING
               RETURNING 1
           ), last AS (
               SELECT n, seq FROM page ORDER BY n DESC, seq DESC LIMIT 1
           ), moved AS (
               UPDATE webhook_dispatch d SET n = last.n, seq = last.seq FROM last
           )
           SELECT (SELECT COUNT(*) FROM page) AS "events!", (SELECT COUNT(*) FROM fanned) AS "deliveries!""#,
        cursor.n,
        cursor.seq,
        max,
        first_delay.as_secs_f64(),
    )
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some((done.events, done.deliveries)))
}

/// A delivery's key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeliveryKey {
    pub endpoint_id: Uuid,
    pub position: Position,
}

/// A delivery this process claimed, with what sending it needs.
#[derive(Debug, Clone)]
pub struct Claimed {
    pub key: DeliveryKey,
    pub order_id: Option<Uuid>,
    pub order_sequence: Option<i32>,
    /// Attempts spent before this one.
    pub attempts: i32,
    pub first_attempt_at: DateTime<Utc>,
    pub url: String,
    /// The key that signs, and the previous one while a rotation's overlap runs.
    pub secret: SecretSlice<u8>,
    pub previous_secret: Option<SecretSlice<u8>>,
}

/// Claims, for `ttl`, the due deliveries of the enabled endpoints no other process is claiming
/// for right now, at most `max_in_flight` claimed per endpoint in all (counting every process's
/// unexpired claims), oldest due first; of one (endpoint, order) only the delivery of the lowest
/// sequence waiting. The endpoint rows are locked (`FOR NO KEY UPDATE SKIP LOCKED`) for the
/// claim, so two processes never claim for one endpoint at once.
pub async fn claim(
    pool: &PgPool,
    token: Uuid,
    ttl: std::time::Duration,
    max_in_flight: i32,
) -> Result<Vec<Claimed>, StoreError> {
    let mut tx = pool.begin().await?;
    let endpoints = sqlx::query_scalar!(
        "SELECT id FROM webhook_endpoints WHERE enabled ORDER BY id FOR NO KEY UPDATE SKIP LOCKED"
    )
    .fetch_all(&mut *tx)
    .await?;
    if endpoints.is_empty() {
        return Ok(Vec::new());
    }
    // A new statement, so a snapshot taken with the locks held: it sees every claim another
    // process committed for these endpoints.
    let claimed = sqlx::query!(
        r#"WITH free AS (
               SELECT w.id, w.url, w.secret,
                      CASE WHEN w.previous_until > now() THEN w.previous_secret END AS previous_secret,
                      $3::int - (SELECT COUNT(*) FROM webhook_deliveries d
                                 WHERE d.endpoint_id = w.id
                                   AND d.claimed_until IS NOT NULL
                                   AND d.claimed_until > now())::int AS slots
               FROM webhook_endpoints w WHERE w.id = ANY($1)
           ), picked AS (
               SELECT d.endpoint_id, d.n, d.seq, f.url, f.secret, f.previous_secret
               FROM free f CROSS JOIN LATERAL (
                   SELECT d.endpoint_id, d.n, d.seq FROM webhook_deliveries d
                   WHERE d.endpoint_id = f.id AND d.next_at <= now()
                     AND (d.claimed_until IS NULL OR d.claimed_until <= now())
                     AND (d.order_id IS NULL OR NOT EXISTS (
                         SELECT 1 FROM webhook_deliveries p
                         WHERE p.endpoint_id = d.endpoint_id AND p.order_id = d.order_id
                           AND p.order_sequence < d.order_sequence))
                   ORDER BY d.next_at, d.n, d.seq
                   LIMIT GREATEST(f.slots, 0)
               ) d
           )
           UPDATE webhook_deliveries d
           SET claimed_until = now() + make_interval(secs => $4), claim = $2,
               first_attempt_at = COALESCE(d.first_attempt_at, now())
           FROM picked p
           WHERE d.endpoint_id = p.endpoint_id AND d.n = p.n AND d.seq = p.seq
           RETURNING d.endpoint_id, d.n, d.seq, d.order_id, d.order_sequence, d.attempts,
                     d.first_attempt_at AS "first_attempt_at!", p.url, p.secret,
                     p.previous_secret"#,
        &endpoints,
        token,
        max_in_flight,
        ttl.as_secs_f64(),
    )
    .fetch_all(&mut *tx)
    .await?;
    tx.commit().await?;
    claimed
        .into_iter()
        .map(|r| {
            Ok(Claimed {
                key: DeliveryKey {
                    endpoint_id: r.endpoint_id,
                    position: Position::from_columns(r.n, r.seq)?,
                },
                order_id: r.order_id,
                order_sequence: r.order_sequence,
                attempts: r.attempts,
                first_attempt_at: r.first_attempt_at,
                url: r.url,
                secret: SecretSlice::from(r.secret),
                previous_secret: r.previous_secret.map(SecretSlice::from),
            })
        })
        .collect()
}

/// What became of one attempt.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Acknowledged (2xx): the delivery is done.
    Delivered,
    /// Not acknowledged: try again at `next_at`; `spent` says whether it counts as an attempt
    /// (a `Retry-After` deferral does not).
    Retry {
        next_at: DateTime<Utc>,
        spent: bool,
        error: String,
    },
    /// The endpoint is disabled (`failing`: still failing after the last retry, or `gone`: it
    /// answered 410); the delivery waits, with a fresh schedule, for it to be enabled again.
    Disable { reason: &'static str, error: String },
}

/// Records the outcome of the attempt of `key` claimed with `token` (nothing, when the claim
/// lapsed and another process took the delivery). A retry also holds back the later deliveries
/// of the same order to the endpoint until then (they would only wait behind it). The error is
/// written on the endpoint (its `last_error`) when `note` — the caller writes it at most a few
/// times a second, so that a failing endpoint's row is not a hot row its claims wait on — and
/// always when it is disabled.
pub async fn record(
    pool: &PgPool,
    key: DeliveryKey,
    token: Uuid,
    outcome: &Outcome,
    note: bool,
) -> Result<(), StoreError> {
    let (n, seq) = (key.position.commit_i64(), key.position.seq_i64());
    let mut tx = pool.begin().await?;
    match outcome {
        Outcome::Delivered => {
            sqlx::query!(
                "DELETE FROM webhook_deliveries
                 WHERE endpoint_id = $1 AND n = $2 AND seq = $3 AND claim = $4",
                key.endpoint_id,
                n,
                seq,
                token,
            )
            .execute(&mut *tx)
            .await?;
        }
        Outcome::Retry {
            next_at,
            spent,
            error,
        } => {
            sqlx::query!(
                "WITH retried AS (
                     UPDATE webhook_deliveries
                     SET attempts = attempts + CASE WHEN $5 THEN 1 ELSE 0 END, next_at = $6,
                         claimed_until = NULL, claim = NULL, last_error = $7
                     WHERE endpoint_id = $1 AND n = $2 AND seq = $3 AND claim = $4
                     RETURNING order_id, order_sequence
                 )
                 UPDATE webhook_deliveries d SET next_at = GREATEST(d.next_at, $6)
                 FROM retried r
                 WHERE d.endpoint_id = $1 AND d.order_id = r.order_id
                   AND d.order_sequence > r.order_sequence",
                key.endpoint_id,
                n,
                seq,
                token,
                spent,
                next_at,
                error,
            )
            .execute(&mut *tx)
            .await?;
            if note {
                failing(&mut tx, key.endpoint_id, error).await?;
            }
        }
        Outcome::Disable { reason, error } => {
            sqlx::query!(
                "UPDATE webhook_deliveries
                 SET attempts = 0, next_at = now(), claimed_until = NULL, claim = NULL,
                     last_error = $5
                 WHERE endpoint_id = $1 AND n = $2 AND seq = $3 AND claim = $4",
                key.endpoint_id,
                n,
                seq,
                token,
                error,
            )
            .execute(&mut *tx)
            .await?;
            failing(&mut tx, key.endpoint_id, error).await?;
            sqlx::query!(
                "UPDATE webhook_endpoints
                 SET enabled = false, disabled_reason = $2, disabled_at = now(), updated_at = now()
                 WHERE id = $1 AND enabled",
                key.endpoint_id,
                reason,
            )
            .execute(&mut *tx)
            .await?;
        }
    }
    tx.commit().await?;
    Ok(())
}

/// Records many acknowledged deliveries (each under its claim token) in one statement: they are
/// done (deleted). A delivery whose claim lapsed (another process took it) is left alone.
pub async fn acknowledge(pool: &PgPool, done: &[(DeliveryKey, Uuid)]) -> Result<(), StoreError> {
    let endpoints: Vec<Uuid> = done.iter().map(|(k, _)| k.endpoint_id).collect();
    let commits: Vec<i64> = done.iter().map(|(k, _)| k.position.commit_i64()).collect();
    let seqs: Vec<i64> = done.iter().map(|(k, _)| k.position.seq_i64()).collect();
    let tokens: Vec<Uuid> = done.iter().map(|(_, t)| *t).collect();
    sqlx::query!(
        "DELETE FROM webhook_deliveries d
         USING UNNEST($1::uuid[], $2::bigint[], $3::bigint[], $4::uuid[]) AS t(e, n, seq, claim)
         WHERE d.endpoint_id = t.e AND d.n = t.n AND d.seq = t.seq AND d.claim = t.claim",
        &endpoints,
        &commits,
        &seqs,
        &tokens,
    )
    .execute(pool)
    .await?;
    Ok(())
}

/// Notes a failed attempt on the endpoint: its last error. (Since when it fails is read from its
/// waiting deliveries.)
async fn failing(
    tx: &mut sqlx::PgConnection,
    endpoint: Uuid,
    error: &str,
) -> Result<(), StoreError> {
    sqlx::query!(
        "UPDATE webhook_endpoints SET last_error = $2, last_error_at = now() WHERE id = $1",
        endpoint,
        error,
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// An endpoint's numbers for the metrics.
#[derive(Debug, Clone)]
pub struct EndpointStats {
    pub id: Uuid,
    pub enabled: bool,
    pub pending: i64,
    /// Seconds since the oldest waiting delivery was made (0 when none waits).
    pub oldest_secs: f64,
}

/// Every endpoint's numbers.
pub async fn stats(pool: &PgPool) -> Result<Vec<EndpointStats>, StoreError> {
    Ok(sqlx::query_as!(
        EndpointStats,
        r#"SELECT w.id, w.enabled, COUNT(d.endpoint_id) AS "pending!",
                  COALESCE(EXTRACT(EPOCH FROM now() - min(d.created_at))::float8, 0) AS "oldest_secs!"
           FROM webhook_endpoints w LEFT JOIN webhook_deliveries d ON d.endpoint_id = w.id
           GROUP BY w.id, w.enabled"#,
    )
    .fetch_all(pool)
    .await?)
}
