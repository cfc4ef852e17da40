//! The batch's reads, one statement at its start: the SKU's row locked (`FOR UPDATE`) with what
//! is known of the batch's (user, key) pairs and the units its users already bought
//! ([`open_batch`]) — or, for a SKU believed not to exist, the row without its lock
//! ([`peek_sku`]). What [`decide`](super::decide) decides from.

use std::collections::HashMap;

use chrono::{DateTime, SubsecRound, Utc};
use shared::{Closed, Schedule, Sku};

use crate::decision::StoredAnswer;
use crate::store::{SaleState, StoreError, catalogue};

pub(super) struct LockedSku {
    pub(super) stock: i64,
    pub(super) max_per_user: i32,
    pub(super) generation: i64,
    pub(super) fence: i64,
    pub(super) hold_secs: i32,
    pub(super) returns: i64,
    pub(super) starts_at: Option<DateTime<Utc>>,
    pub(super) ends_at: Option<DateTime<Utc>>,
    pub(super) paused: bool,
    /// The database's clock (the transaction's start), which holds expire by and the schedule is
    /// read with.
    pub(super) now: DateTime<Utc>,
}

impl LockedSku {
    pub(super) fn sale_state(&self) -> SaleState {
        SaleState {
            generation: self.generation,
            returns: self.returns,
            stock: self.stock,
        }
    }

    /// Why the sale is closed now by the database's clock, if it is.
    pub(super) fn closed(&self) -> Option<Closed> {
        let schedule = Schedule {
            starts_at: catalogue::timestamp(self.starts_at),
            ends_at: catalogue::timestamp(self.ends_at),
            paused: self.paused,
        };
        schedule.closed_at(self.now.timestamp_millis())
    }

    /// When a hold taken now expires: `None` when the SKU has no holds. Whole milliseconds, so
    /// that the stored instant and the one in the 201 (RFC 3339, milliseconds) are the same.
    pub(super) fn hold_expiry(&self) -> Option<DateTime<Utc>> {
        (self.hold_secs > 0).then(|| {
            self.now.trunc_subsecs(3) + chrono::Duration::seconds(i64::from(self.hold_secs))
        })
    }
}

/// A (user, key) pair decided before this attempt.
pub(super) enum Prior {
    /// Its stored answer, and the request it answered.
    Answered {
        sku: String,
        qty: i32,
        answer: StoredAnswer,
    },
    /// An order exists, its stored answer was purged.
    Spent,
}

impl Prior {
    /// A pair the database knows: its stored answer's columns, all `None` when only its order
    /// remains (the answer was purged).
    fn from_stored(
        sku: Option<String>,
        qty: Option<i32>,
        status: Option<i16>,
        body: Option<String>,
    ) -> Self {
        match (sku, qty, status, body) {
            (Some(sku), Some(qty), Some(status), Some(body)) => Prior::Answered {
                sku,
                qty,
                answer: StoredAnswer {
                    status: u16::try_from(status).unwrap_or(500),
                    body,
                },
            },
            _ => Prior::Spent,
        }
    }
}

/// What a batch reads before deciding: what is known of its (user, key) pairs, and the units each
/// of its users already bought of the SKU.
pub(super) struct BatchReads {
    pub(super) prior: HashMap<(String, String), Prior>,
    pub(super) bought: HashMap<String, i64>,
}

/// Opens a batch: locks the SKU's row (`FOR UPDATE`) and reads what is known of the batch's
/// (user, key) pairs and the units its users already bought, in ONE statement — one round trip
/// instead of three. See [`lock_and_read`] for when it takes a second.
pub(super) async fn open_batch(
    tx: &mut sqlx::PgConnection,
    sku: &Sku,
    users: &[&str],
    keys: &[&str],
) -> Result<(Option<LockedSku>, BatchReads), StoreError> {
    match lock_and_read(&mut *tx, sku, users, keys).await? {
        (locked, Some(reads)) => Ok((locked, reads)),
        // Read again under the lock: the new statement's snapshot is taken with the lock held,
        // so it sees the row's newest version. Nothing else can then differ.
        (_, None) => match lock_and_read(tx, sku, users, keys).await? {
            (locked, Some(reads)) => Ok((locked, reads)),
            (_, None) => Err(StoreError::Conflict),
        },
    }
}

/// The statement of [`open_batch`]: the locked row, and the reads when they are current.
///
/// What is known of a pair is its stored answer, or — when that was purged after the retention —
/// the order itself (`orders_user_key_unique` is permanent): a pair whose order exists never
/// reaches the write, where it would violate the constraint and roll back the whole batch. The
/// units are the `user_units` counter, bumped by the batch's write in the same transaction.
///
/// Each pair and each buyer is ONE index probe (`LATERAL … LIMIT 1`: a subquery the planner
/// cannot flatten into a join), so the reads cost in proportion to the batch, never to the
/// tables. Written as joins, the planner's custom plan for a 500-pair batch (the first five
/// executions of each pooled connection's prepared statement) hashed ALL of
/// `idempotency_records` and `orders` instead — 26 ms at 30,000 orders, growing with every sale;
/// `user_id = ANY($2)` compared every counter of the SKU with every user of the batch
/// (docs/bench/diary.md, "Per-batch reads").
///
/// The reads see the statement's snapshot, taken when it started — before the row lock was
/// granted. Another transaction of the same SKU (a batch of a process whose lease was lost) may
/// have committed in between: the lock then returns the row's newest version, while the reads
/// may miss that batch's answers and units. Every batch rewrites the SKU's row, so the statement
/// compares the locked version (`xmin`) with the one its snapshot sees, and the reads are `None`
/// when they differ.
async fn lock_and_read(
    tx: &mut sqlx::PgConnection,
    sku: &Sku,
    users: &[&str],
    keys: &[&str],
) -> Result<(Option<LockedSku>, Option<BatchReads>), StoreError> {
    // The reads are aggregated into arrays, so that the whole answer is one row.
    let row = sqlx::query!(
        r#"WITH locked AS MATERIALIZED (
             SELECT stock, max_per_user, generation, fence, hold_secs, returns, starts_at, ends_at,
                    paused, xmin AS version
             FROM skus WHERE sku = $1 FOR UPDATE
         )
         SELECT l.stock AS "stock?", l.max_per_user AS "max_per_user?",
                l.generation AS "generation?", l.fence AS "fence?", l.hold_secs AS "hold_secs?",
                l.returns AS "returns?", l.starts_at, l.ends_at, l.paused AS "paused?",
                now() AS "now!",
                l.version IS NOT DISTINCT FROM (SELECT s.xmin FROM skus s WHERE s.sku = $1)
                    AS "settled!",
                p.users AS "prior_users!", p.keys AS "prior_keys!",
                p.skus AS "prior_skus!: Vec<Option<String>>",
                p.qtys AS "prior_qtys!: Vec<Option<i32>>",
                p.statuses AS "prior_statuses!: Vec<Option<i16>>",
                p.bodies AS "prior_bodies!: Vec<Option<String>>",
                u.users AS "bought_users!", u.units AS "bought_units!"
         FROM (SELECT 1) AS one
         LEFT JOIN locked l ON true
         CROSS JOIN LATERAL (
             SELECT COALESCE(array_agg(b.user_id), '{}') AS users,
                    COALESCE(array_agg(b.idempotency_key), '{}') AS keys,
                    COALESCE(array_agg(r.sku), '{}') AS skus,
                    COALESCE(array_agg(r.qty), '{}') AS qtys,
                    COALESCE(array_agg(r.status), '{}') AS statuses,
                    COALESCE(array_agg(r.body), '{}') AS bodies
             FROM UNNEST($2::text[], $3::text[]) AS b(user_id, idempotency_key)
             LEFT JOIN LATERAL (
                 SELECT r.sku, r.qty, r.status, r.body FROM idempotency_records r
                 WHERE r.user_id = b.user_id AND r.idempotency_key = b.idempotency_key
                 LIMIT 1
             ) r ON true
             LEFT JOIN LATERAL (
                 SELECT true AS found FROM orders o
                 WHERE o.user_id = b.user_id AND o.idempotency_key = b.idempotency_key
                 LIMIT 1
             ) o ON r.sku IS NULL
             WHERE r.sku IS NOT NULL OR o.found
         ) p
         CROSS JOIN LATERAL (
             SELECT COALESCE(array_agg(b.user_id), '{}') AS users,
                    COALESCE(array_agg(c.units), '{}') AS units
             FROM UNNEST($2::text[]) AS b(user_id)
             CROSS JOIN LATERAL (
                 SELECT units FROM user_units WHERE sku = $1 AND user_id = b.user_id LIMIT 1
             ) c
         ) u"#,
        sku.as_str(),
        users as &[&str],
        keys as &[&str],
    )
    .fetch_one(&mut *tx)
    .await?;
    let locked = match (
        row.stock,
        row.max_per_user,
        row.generation,
        row.fence,
        row.hold_secs,
        row.returns,
        row.paused,
    ) {
        (
            Some(stock),
            Some(max_per_user),
            Some(generation),
            Some(fence),
            Some(hold_secs),
            Some(returns),
            Some(paused),
        ) => Some(LockedSku {
            stock,
            max_per_user,
            generation,
            fence,
            hold_secs,
            returns,
            starts_at: row.starts_at,
            ends_at: row.ends_at,
            paused,
            now: row.now,
        }),
        _ => None,
    };
    if !row.settled {
        return Ok((locked, None));
    }
    let prior = row
        .prior_users
        .into_iter()
        .zip(row.prior_keys)
        .zip(row.prior_skus)
        .zip(row.prior_qtys)
        .zip(row.prior_statuses)
        .zip(row.prior_bodies)
        .map(|(((((user, key), sku), qty), status), body)| {
            ((user, key), Prior::from_stored(sku, qty, status, body))
        })
        .collect();
    let bought = row.bought_users.into_iter().zip(row.bought_units).collect();
    Ok((locked, Some(BatchReads { prior, bought })))
}

/// The SKU's row without its lock (`BatchMode::UnknownSkuOnly`): an existing row is not decided
/// then, and may be locked by the lease holder's batch.
pub(super) async fn peek_sku(
    tx: &mut sqlx::PgConnection,
    sku: &Sku,
) -> Result<Option<LockedSku>, StoreError> {
    Ok(sqlx::query_as!(
        LockedSku,
        r#"SELECT stock, max_per_user, generation, fence, hold_secs, returns, starts_at,
                          ends_at, paused, now() AS "now!"
                   FROM skus WHERE sku = $1"#,
        sku.as_str(),
    )
    .fetch_optional(&mut *tx)
    .await?)
}
