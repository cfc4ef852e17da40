//! The purchase-batch transaction: the final guard of the whole system, reached from the per-SKU
//! combiner (`purchase::combiner`) once it holds the SKU's lease. See [`decide_batch`] and the
//! store's module docs for what it guarantees; every statement here is checked at compile time
//! against the migrations (`sqlx::query!`, data in `origin/.sqlx/`).

use std::collections::HashMap;
use std::time::Instant;

use chrono::{DateTime, SubsecRound, Utc};
use shared::{
    Closed, ErrorCode, IdempotencyKey, OrderStatus, Problem, PurchaseRequest, PurchaseResponse,
    Schedule, Sku, UserId,
};
use sqlx::PgPool;
use uuid::Uuid;

use super::{SaleState, StoreError};

/// One purchase attempt, parsed and authenticated.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub user: UserId,
    pub key: IdempotencyKey,
    pub request: PurchaseRequest,
}

/// An answer, byte for byte as it is stored and replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAnswer {
    pub status: u16,
    pub body: String,
}

impl StoredAnswer {
    /// A refusal: the problem+json of `code`, with `detail`.
    fn refusal(code: ErrorCode, detail: String) -> Self {
        let p = Problem::new(code, detail);
        Self {
            status: p.status,
            body: p.to_json(),
        }
    }

    /// `409 sold_out` for a SKU with no unit left — the one place this answer is built, whether a
    /// batch stores it or the process answers it from its knowledge (`purchase::Answer`).
    pub fn sold_out(sku: &Sku) -> Self {
        Self::refusal(ErrorCode::SoldOut, format!("{sku} is sold out"))
    }
}

/// How one attempt of a batch was decided: the store's typed outcome, carried unchanged to the
/// purchase path's answer (`purchase::Answer::decided`), which the route writes and counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Decided by this batch; the answer is now stored with the key.
    Fresh {
        answer: StoredAnswer,
        outcome: Outcome,
    },
    /// The key already had a stored answer for the same request.
    Replay(StoredAnswer),
    /// The key was used before with a different request (422).
    KeyReused,
    /// The key bought an order whose stored answer has been purged (older than
    /// `IDEMPOTENCY_RETENTION_HOURS`): the key is spent, 422 whatever the request, nothing stored.
    KeySpent,
    /// The sale is closed by its schedule at the database's clock (not started, ended, paused):
    /// nothing decided, nothing stored — the same key is decided once the sale is open.
    Closed(Closed),
}

/// What a fresh decision was (the outcome metric's and the audit log's label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Refused(ErrorCode),
}

impl Outcome {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Refused(code) => code.as_str(),
        }
    }
}

/// The result of one committed batch transaction.
#[derive(Debug)]
pub struct BatchResult {
    /// One decision per attempt, in the order given.
    pub decisions: Vec<Decision>,
    /// Units left after the batch; `None` when the SKU does not exist.
    pub remaining: Option<i64>,
    /// The sale generation the batch decided in; `None` when the SKU does not exist.
    pub generation: Option<i64>,
    /// The SKU's return epoch the batch decided in (bumped by every return of units).
    pub returns: Option<i64>,
    /// Units sold by this batch.
    pub units_sold: i64,
    /// The orders this batch created as holds (a SKU with `hold_secs`), and when they expire.
    pub holds: Vec<Uuid>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// Which batches [`decide_batch`] may decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchMode {
    /// Whatever the SKU's state: the caller holds the SKU's lease (or, in tests, no lock at all).
    Sell,
    /// Only if the SKU does not exist — every attempt is then `404 unknown_sku` or a replay —
    /// without the SKU's lease and without waiting for its row; if it exists, nothing is decided
    /// ([`StoreError::SkuExists`]) and the caller takes the lease.
    UnknownSkuOnly,
}

struct LockedSku {
    stock: i64,
    max_per_user: i32,
    generation: i64,
    fence: i64,
    hold_secs: i32,
    returns: i64,
    starts_at: Option<DateTime<Utc>>,
    ends_at: Option<DateTime<Utc>>,
    paused: bool,
    /// The database's clock (the transaction's start), which holds expire by and the schedule is
    /// read with.
    now: DateTime<Utc>,
}

impl LockedSku {
    fn sale_state(&self) -> SaleState {
        SaleState {
            generation: self.generation,
            returns: self.returns,
            stock: self.stock,
        }
    }

    /// Why the sale is closed now by the database's clock, if it is.
    fn closed(&self) -> Option<Closed> {
        let schedule = Schedule {
            starts_at: super::catalogue::timestamp(self.starts_at),
            ends_at: super::catalogue::timestamp(self.ends_at),
            paused: self.paused,
        };
        schedule.closed_at(self.now.timestamp_millis())
    }

    /// When a hold taken now expires: `None` when the SKU has no holds. Whole milliseconds, so
    /// that the stored instant and the one in the 201 (RFC 3339, milliseconds) are the same.
    fn hold_expiry(&self) -> Option<DateTime<Utc>> {
        (self.hold_secs > 0).then(|| {
            self.now.trunc_subsecs(3) + chrono::Duration::seconds(i64::from(self.hold_secs))
        })
    }
}

/// A (user, key) pair decided before this attempt.
enum Prior {
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

/// A new order and stored outcome, written at the end of the batch.
struct NewRecord {
    user: String,
    key: String,
    qty: i32,
    status: i16,
    body: String,
    order_id: Option<Uuid>,
}

/// What a batch reads before deciding: what is known of its (user, key) pairs, and the units each
/// of its users already bought of the SKU.
struct BatchReads {
    prior: HashMap<(String, String), Prior>,
    bought: HashMap<String, i64>,
}

/// Opens a batch: locks the SKU's row (`FOR UPDATE`) and reads what is known of the batch's
/// (user, key) pairs and the units its users already bought, in ONE statement — one round trip
/// instead of three. See [`lock_and_read`] for when it takes a second.
async fn open_batch(
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
/// (docs/benchmarks.md, "Per-batch reads").
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

/// Milliseconds since the Unix epoch by this process's clock (0 before it).
fn unix_millis_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A new order's id: a UUIDv7 of the batch's millisecond (time-ordered, so a sale's orders go to
/// the right of the primary key), its random bits drawn from the thread's CSPRNG where
/// `Uuid::now_v7` asks the kernel (`getrandom`) once per id. Ids of one millisecond are in no
/// order among themselves; nothing depends on it (locks are taken in id order, whatever it is).
fn new_order_id(millis: u64) -> Uuid {
    uuid::Builder::from_unix_timestamp_millis(millis, &rand::random()).into_uuid()
}

/// A fresh refusal: the answer to store, and its outcome.
fn refusal(code: ErrorCode, detail: String) -> (StoredAnswer, Outcome) {
    (StoredAnswer::refusal(code, detail), Outcome::Refused(code))
}

/// Decides `attempts` (all for `sku`) in arrival order in one transaction; see the module docs.
/// `fence` is the Redlock fencing token of the caller's lease (`None` without a lock) and
/// `commit_by` the instant after which the lease may be gone: past it, the transaction rolls back
/// instead of committing ([`StoreError::LeaseExpired`]). `mode` says whether the batch may sell.
///
/// Four round trips whatever the batch's size: `BEGIN`, one statement that locks the SKU's row
/// and reads what the batch needs ([`open_batch`]), one that writes everything, `COMMIT`.
pub async fn decide_batch(
    pool: &PgPool,
    sku: &Sku,
    attempts: &[Attempt],
    fence: Option<u64>,
    commit_by: Option<Instant>,
    mode: BatchMode,
) -> Result<BatchResult, StoreError> {
    let mut tx = pool.begin().await?;
    // Array parameters are borrowed, not copied: `as &[&str]` tells `query!` the Rust type of a
    // `text[]` parameter (its check knows only `&[String]`); the SQL's `::text[]` fixes the type.
    let users: Vec<&str> = attempts.iter().map(|a| a.user.as_str()).collect();
    let keys: Vec<&str> = attempts.iter().map(|a| a.key.as_str()).collect();

    let (locked, reads) = match mode {
        BatchMode::Sell => open_batch(&mut tx, sku, &users, &keys).await?,
        BatchMode::UnknownSkuOnly => {
            // Not the row lock first: an existing row is not decided here, and may be locked by
            // the lease holder's batch. Only a SKU created since this read is waited for.
            let row = sqlx::query_as!(
                LockedSku,
                r#"SELECT stock, max_per_user, generation, fence, hold_secs, returns, starts_at,
                          ends_at, paused, now() AS "now!"
                   FROM skus WHERE sku = $1"#,
                sku.as_str(),
            )
            .fetch_optional(&mut *tx)
            .await?;
            match row {
                Some(row) => return Err(StoreError::SkuExists(row.sale_state())),
                None => open_batch(&mut tx, sku, &users, &keys).await?,
            }
        }
    };
    if let (Some(row), BatchMode::UnknownSkuOnly) = (&locked, mode) {
        return Err(StoreError::SkuExists(row.sale_state()));
    }
    let fence = fence.map(|f| i64::try_from(f).unwrap_or(i64::MAX));
    if let (Some(row), Some(presented)) = (&locked, fence) {
        if presented < row.fence {
            return Err(StoreError::StaleFence {
                presented,
                current: row.fence,
            });
        }
    }
    let BatchReads {
        prior: mut known,
        mut bought,
    } = reads;

    // `known`: (user, key) -> what decided it, grown with this batch's own decisions so
    // duplicates inside the batch are decided once. `bought`: units per user, grown likewise.

    let mut stock = locked.as_ref().map_or(0, |r| r.stock);
    let expires_at = locked.as_ref().and_then(LockedSku::hold_expiry);
    let (status, expires_at_text) = match expires_at {
        Some(at) => (
            OrderStatus::Held,
            Some(at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)),
        ),
        None => (OrderStatus::Confirmed, None),
    };
    // Checked after the replay lookup and before stock and the cap: a closed sale decides nothing.
    let closed = locked.as_ref().and_then(LockedSku::closed);
    let mut decisions = Vec::with_capacity(attempts.len());
    let mut new_records: Vec<NewRecord> = Vec::new();
    let batch_millis = unix_millis_now();
    for attempt in attempts {
        let qty = i32::try_from(attempt.request.qty.get()).unwrap_or(i32::MAX);
        let id = (
            attempt.user.as_str().to_owned(),
            attempt.key.as_str().to_owned(),
        );
        match known.get(&id) {
            Some(Prior::Answered {
                sku: stored_sku,
                qty: stored_qty,
                answer,
            }) => {
                let same = stored_sku == attempt.request.sku.as_str() && *stored_qty == qty;
                decisions.push(if same {
                    Decision::Replay(answer.clone())
                } else {
                    Decision::KeyReused
                });
                continue;
            }
            Some(Prior::Spent) => {
                decisions.push(Decision::KeySpent);
                continue;
            }
            None => {}
        }
        if let Some(closed) = closed {
            decisions.push(Decision::Closed(closed));
            continue;
        }
        let (answer, outcome, order_id) = match &locked {
            None => {
                let (a, o) = refusal(
                    ErrorCode::UnknownSku,
                    format!("there is no sale for sku {sku}"),
                );
                (a, o, None)
            }
            Some(_) if stock < i64::from(qty) => {
                let answer = if stock == 0 {
                    StoredAnswer::sold_out(sku)
                } else {
                    StoredAnswer::refusal(
                        ErrorCode::SoldOut,
                        format!("{sku} has {stock} units left; {qty} requested"),
                    )
                };
                (answer, Outcome::Refused(ErrorCode::SoldOut), None)
            }
            Some(row)
                if bought.get(id.0.as_str()).copied().unwrap_or(0) + i64::from(qty)
                    > i64::from(row.max_per_user) =>
            {
                let already = bought.get(id.0.as_str()).copied().unwrap_or(0);
                let detail = format!(
                    "each user may buy at most {} units of {sku}; you bought {already} and asked for {qty}",
                    row.max_per_user
                );
                let (a, o) = refusal(ErrorCode::PurchaseLimit, detail);
                (a, o, None)
            }
            Some(_) => {
                stock -= i64::from(qty);
                *bought.entry(id.0.clone()).or_default() += i64::from(qty);
                let order_id = new_order_id(batch_millis);
                let body = PurchaseResponse {
                    order_id: order_id.to_string(),
                    sku: sku.to_string(),
                    qty: attempt.request.qty.get(),
                    user: attempt.user.to_string(),
                    remaining: stock,
                    status: Some(status),
                    expires_at: expires_at_text.clone(),
                };
                let body = serde_json::to_string(&body)
                    .map_err(|e| StoreError::Unexpected(sqlx::Error::Encode(Box::new(e))))?;
                (
                    StoredAnswer { status: 201, body },
                    Outcome::Created,
                    Some(order_id),
                )
            }
        };
        new_records.push(NewRecord {
            user: id.0.clone(),
            key: id.1.clone(),
            qty,
            status: i16::try_from(answer.status).unwrap_or(500),
            body: answer.body.clone(),
            order_id,
        });
        known.insert(
            id,
            Prior::Answered {
                sku: sku.to_string(),
                qty,
                answer: answer.clone(),
            },
        );
        decisions.push(Decision::Fresh { answer, outcome });
    }

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
         )
         UPDATE skus SET stock = stock - $8, units_out = units_out + $8,
                         fence = GREATEST(fence, $3), updated_at = now()
         WHERE sku = $1 AND $9"#,
        sku.as_str(),
        locked.as_ref().map_or(0, |r| r.generation),
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
    )
    .execute(&mut *tx)
    .await?;
    if commit_by.is_some_and(|by| Instant::now() >= by) {
        tx.rollback().await?;
        return Err(StoreError::LeaseExpired);
    }
    tx.commit().await?;
    Ok(BatchResult {
        decisions,
        remaining: locked.as_ref().map(|_| stock),
        generation: locked.as_ref().map(|r| r.generation),
        returns: locked.as_ref().map(|r| r.returns),
        units_sold,
        holds: if expires_at.is_some() {
            order_ids
        } else {
            Vec::new()
        },
        expires_at,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_ids_are_distinct_version_7_uuids_of_the_batch_millisecond() {
        let millis = 1_796_000_000_123;
        let ids: std::collections::HashSet<Uuid> =
            (0..1000).map(|_| new_order_id(millis)).collect();
        assert_eq!(ids.len(), 1000);
        for id in ids {
            assert_eq!(id.get_version_num(), 7);
            assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
            let (secs, nanos) = id.get_timestamp().expect("a v7 timestamp").to_unix();
            assert_eq!(secs * 1000 + u64::from(nanos) / 1_000_000, millis);
        }
    }
}
