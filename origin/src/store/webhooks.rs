//! The webhook endpoints (`webhook_endpoints`): the admin API's writes and reads
//! (`routes::webhooks` through `events::endpoints`), a replay's new deliveries; the deliveries'
//! own life (dispatch, claims, outcomes) is `deliveries`. Checked at compile time like every
//! query of the store.

mod deliveries;

use chrono::{DateTime, Utc};
use sqlx::PgPool;
use uuid::Uuid;

use super::StoreError;
use super::events::{PageError, Position};
pub use deliveries::{
    Claimed, DeliveryKey, EndpointStats, Outcome, acknowledge, claim, dispatch, record, stats,
};

/// An endpoint as the admin API shows it.
#[derive(Debug, Clone)]
pub struct EndpointRow {
    pub id: Uuid,
    pub url: String,
    /// `None`: every type.
    pub types: Option<Vec<String>>,
    pub description: Option<String>,
    pub enabled: bool,
    pub disabled_reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub failing_since: Option<DateTime<Utc>>,
    pub last_error: Option<String>,
    pub last_error_at: Option<DateTime<Utc>>,
    /// Until when the previous secret still signs (after a rotation).
    pub previous_until: Option<DateTime<Utc>>,
    /// Deliveries not yet acknowledged, and when the oldest of them was made.
    pub pending: i64,
    pub oldest_pending: Option<DateTime<Utc>>,
}

/// A new endpoint's fields.
#[derive(Debug)]
pub struct NewEndpoint<'a> {
    pub id: Uuid,
    pub url: &'a str,
    pub types: Option<&'a [String]>,
    pub description: Option<&'a str>,
    /// The HMAC key (32 bytes).
    pub secret: &'a [u8],
}

/// Creates an endpoint that receives the events the dispatcher fans out from now on: its start
/// is the dispatcher's cursor, read under the dispatcher's lock (so no pass runs between the
/// read and the commit: none can fan an event out before the endpoint exists and after its
/// start).
pub async fn create(pool: &PgPool, new: NewEndpoint<'_>) -> Result<EndpointRow, StoreError> {
    let mut tx = pool.begin().await?;
    let start = sqlx::query!("SELECT n, seq FROM webhook_dispatch FOR UPDATE")
        .fetch_one(&mut *tx)
        .await?;
    sqlx::query!(
        "INSERT INTO webhook_endpoints (id, url, types, description, secret, start_commit, start_seq)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        new.id,
        new.url,
        new.types,
        new.description,
        new.secret,
        start.n,
        start.seq,
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    get(pool, new.id)
        .await?
        .ok_or(StoreError::Unexpected(sqlx::Error::RowNotFound))
}

/// Every endpoint (`id` absent), or one, oldest first.
async fn endpoints(pool: &PgPool, id: Option<Uuid>) -> Result<Vec<EndpointRow>, StoreError> {
    Ok(sqlx::query_as!(
        EndpointRow,
        r#"SELECT w.id, w.url, w.types, w.description, w.enabled, w.disabled_reason,
                  w.created_at, w.updated_at,
                  (SELECT min(d.first_attempt_at) FROM webhook_deliveries d
                   WHERE d.endpoint_id = w.id AND d.last_error IS NOT NULL) AS failing_since,
                  w.last_error, w.last_error_at,
                  CASE WHEN w.previous_until > now() THEN w.previous_until END AS previous_until,
                  (SELECT COUNT(*) FROM webhook_deliveries d WHERE d.endpoint_id = w.id) AS "pending!",
                  (SELECT min(d.created_at) FROM webhook_deliveries d WHERE d.endpoint_id = w.id)
                      AS oldest_pending
           FROM webhook_endpoints w
           WHERE $1::uuid IS NULL OR w.id = $1
           ORDER BY w.created_at, w.id"#,
        id,
    )
    .fetch_all(pool)
    .await?)
}

/// Every endpoint, oldest first.
pub async fn list(pool: &PgPool) -> Result<Vec<EndpointRow>, StoreError> {
    endpoints(pool, None).await
}

/// One endpoint.
pub async fn get(pool: &PgPool, id: Uuid) -> Result<Option<EndpointRow>, StoreError> {
    Ok(endpoints(pool, Some(id)).await?.pop())
}

/// A PATCH: each `Some` replaces the stored value (`types: Some(None)` = every type).
#[derive(Debug, Default)]
pub struct EndpointPatch<'a> {
    pub url: Option<&'a str>,
    pub types: Option<Option<&'a [String]>>,
    pub description: Option<Option<&'a str>>,
    pub enabled: Option<bool>,
}

/// Applies `patch`; `None` when there is no such endpoint. Enabling a disabled endpoint gives
/// its waiting deliveries a fresh schedule, due at once (in order); disabling keeps them.
pub async fn update(
    pool: &PgPool,
    id: Uuid,
    patch: EndpointPatch<'_>,
) -> Result<Option<EndpointRow>, StoreError> {
    let mut tx = pool.begin().await?;
    let was = sqlx::query_scalar!(
        "SELECT enabled FROM webhook_endpoints WHERE id = $1 FOR UPDATE",
        id
    )
    .fetch_optional(&mut *tx)
    .await?;
    let Some(was_enabled) = was else {
        return Ok(None);
    };
    let (keep_types, types) = match patch.types {
        None => (true, None),
        Some(types) => (false, types),
    };
    let (keep_description, description) = match patch.description {
        None => (true, None),
        Some(d) => (false, d),
    };
    sqlx::query!(
        "UPDATE webhook_endpoints SET
             url = COALESCE($2, url),
             types = CASE WHEN $3 THEN types ELSE $4 END,
             description = CASE WHEN $5 THEN description ELSE $6 END,
             enabled = COALESCE($7, enabled),
             disabled_reason = CASE WHEN COALESCE($7, enabled) THEN NULL
                                    WHEN $7 = false AND enabled THEN 'manual'
                                    ELSE disabled_reason END,
             disabled_at = CASE WHEN COALESCE($7, enabled) THEN NULL
                                WHEN $7 = false AND enabled THEN now()
                                ELSE disabled_at END,
             updated_at = now()
         WHERE id = $1",
        id,
        patch.url,
        keep_types,
        types,
        keep_description,
        description,
        patch.enabled,
    )
    .execute(&mut *tx)
    .await?;
    if patch.enabled == Some(true) && !was_enabled {
        sqlx::query!(
            "UPDATE webhook_deliveries SET attempts = 0, first_attempt_at = NULL, next_at = now(),
                                           claimed_until = NULL, claim = NULL
             WHERE endpoint_id = $1",
            id,
        )
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    get(pool, id).await
}

/// Deletes an endpoint and its waiting deliveries; whether it existed.
pub async fn delete(pool: &PgPool, id: Uuid) -> Result<bool, StoreError> {
    let done = sqlx::query!("DELETE FROM webhook_endpoints WHERE id = $1", id)
        .execute(pool)
        .await?;
    Ok(done.rows_affected() == 1)
}

/// Makes `secret` the endpoint's key; the current one keeps signing beside it for `overlap`.
/// `None` when there is no such endpoint.
pub async fn rotate(
    pool: &PgPool,
    id: Uuid,
    secret: &[u8],
    overlap: std::time::Duration,
) -> Result<Option<EndpointRow>, StoreError> {
    let done = sqlx::query!(
        "UPDATE webhook_endpoints SET previous_secret = secret, secret = $2,
                previous_until = now() + make_interval(secs => $3), updated_at = now()
         WHERE id = $1",
        id,
        secret,
        overlap.as_secs_f64(),
    )
    .execute(pool)
    .await?;
    if done.rows_affected() == 0 {
        return Ok(None);
    }
    get(pool, id).await
}

/// Which events a replay re-delivers.
#[derive(Debug, Clone, Copy)]
pub enum ReplayRange {
    /// Those after this position.
    After(Position),
    /// Those made in `[since, until)` (`until` absent: up to now).
    Between {
        since: DateTime<Utc>,
        until: Option<DateTime<Utc>>,
    },
}

/// Queues the kept events of `range` (of the endpoint's types) for delivery to endpoint `id`
/// again, due at once with a fresh schedule — but an event already waiting keeps its place.
/// `None` when there is no such endpoint; else how many deliveries were queued.
pub async fn replay(pool: &PgPool, id: Uuid, range: ReplayRange) -> Result<Option<u64>, PageError> {
    let mut tx = pool.begin().await?;
    let exists = sqlx::query_scalar!(
        "SELECT true AS \"x!\" FROM webhook_endpoints WHERE id = $1 FOR NO KEY UPDATE",
        id
    )
    .fetch_optional(&mut *tx)
    .await?;
    if exists.is_none() {
        return Ok(None);
    }
    let horizon = super::events::horizon(pool).await?;
    let (after, since, until) = match range {
        ReplayRange::After(after) if after < horizon => {
            return Err(PageError::CursorExpired { after, horizon });
        }
        ReplayRange::After(after) => (after, None, None),
        ReplayRange::Between { since, until } => (horizon, Some(since), until),
    };
    let queued = sqlx::query!(
        "INSERT INTO webhook_deliveries (endpoint_id, n, seq, xid, order_id, order_sequence)
         SELECT w.id, c.n, e.seq, e.xid, e.order_id, e.sequence
         FROM webhook_endpoints w
         JOIN event_commits c ON c.n >= $2
         JOIN events e ON e.xid = c.xid
         WHERE w.id = $1 AND (c.n > $2 OR e.seq > $3)
           AND (w.types IS NULL OR e.type = ANY(w.types))
           AND ($4::timestamptz IS NULL OR e.at >= $4)
           AND ($5::timestamptz IS NULL OR e.at < $5)
         ON CONFLICT (endpoint_id, n, seq) DO NOTHING",
        id,
        after.commit_i64(),
        after.seq_i64(),
        since,
        until,
    )
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Some(queued.rows_affected()))
}
