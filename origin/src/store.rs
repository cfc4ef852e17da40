//! Postgres access: the SKU catalogue and the purchase-batch transaction.
//!
//! [`decide_batch`] is the final guard of the whole system. Inside ONE transaction that holds the
//! SKU row lock it decides a batch of purchase attempts in arrival order — idempotency replay or
//! reuse, unknown SKU, stock, per-user cap — then writes every order, every stored outcome and the
//! stock decrement, and commits. Two origins racing, or a holder whose Redlock lease was lost,
//! still cannot oversell: the row lock serializes them, `CHECK (stock >= 0)` refuses the
//! impossible, and the fencing token refuses a stale lock holder's batch. A batch for a SKU that
//! does not exist sells nothing and is decided without the lease ([`BatchMode::UnknownSkuOnly`]:
//! if the SKU turns out to exist, nothing is decided), so made-up SKUs never reach Redis.
//!
//! One attempt never fails its batch: a key whose order exists but whose stored answer was purged
//! is decided ([`Decision::KeySpent`]) before the write, and a row of the same (user, key) that
//! another transaction (another SKU's batch, another process) commits meanwhile makes the write
//! fail with [`StoreError::Conflict`] — nothing committed, and the retry decides that attempt from
//! the committed row while the others commit.
//!
//! [`sale_state`] (generation and stock by primary key, no lock) and [`buyers`] feed the
//! purchase path's knowledge of which SKUs exist and which are sold out (`purchase::knowledge`).

use std::collections::HashMap;
use std::str::FromStr;
use std::time::{Duration, Instant};

use shared::{
    ErrorCode, IdempotencyKey, Problem, PurchaseRequest, PurchaseResponse, Sku, SkuUpsert, SkuView,
    UserId,
};
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use uuid::Uuid;

use crate::settings::{DatabaseTls, DatabaseTlsSettings};

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

/// How one attempt of a batch was decided.
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
}

/// What a fresh decision was.
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
    /// Units sold by this batch.
    pub units_sold: i64,
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

/// A SKU's sale as of one read: the generation (bumped by every PUT) and the units left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct SaleState {
    pub generation: i64,
    pub stock: i64,
}

/// Errors at the database boundary.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be had (connection, pool timeout, shutdown...): answer 503.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// A concurrent transaction committed a row of the same (user, idempotency key) — a unique
    /// violation of [`PER_ATTEMPT_UNIQUE`] or a stored answer skipped by `ON CONFLICT` — or the
    /// database chose this transaction as a deadlock / serialization victim. Nothing was
    /// committed; a retry sees the committed row and decides that attempt from it.
    #[error("conflicting concurrent transaction; retry")]
    Conflict,
    /// The SKU row carries a newer fencing token: this batch comes from a stale lock holder.
    #[error("stale fencing token {presented} < {current}")]
    StaleFence { presented: i64, current: i64 },
    /// The caller's lease would expire before the commit: rolled back, nothing committed.
    #[error("lease validity ran out before commit; rolled back")]
    LeaseExpired,
    /// [`BatchMode::UnknownSkuOnly`], but the SKU exists (it was just created): nothing decided.
    #[error("sku exists (generation {}); decide under its lease", .0.generation)]
    SkuExists(SaleState),
    /// Anything else is a bug.
    #[error("database error: {0}")]
    Unexpected(#[source] sqlx::Error),
}

/// The unique constraints the batch's write can hit because ANOTHER transaction wrote the same
/// row first (a batch of another SKU, under another lock, with the same (user, key); or, for the
/// random order id, a collision): a per-attempt conflict, retryable, never a bug. SQLSTATE 23505
/// on any other constraint stays [`StoreError::Unexpected`], so a real bug is not retried.
pub const PER_ATTEMPT_UNIQUE: [&str; 3] = [
    "orders_user_key_unique",
    "orders_pkey",
    "idempotency_records_pkey",
];

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        use sqlx::Error as E;
        match &e {
            E::Io(_)
            | E::Tls(_)
            | E::PoolTimedOut
            | E::PoolClosed
            | E::WorkerCrashed
            | E::Protocol(_) => Self::Unavailable(e),
            E::Database(db) => match db.code().as_deref() {
                Some("40001" | "40P01") => Self::Conflict,
                Some("23505")
                    if db
                        .constraint()
                        .is_some_and(|c| PER_ATTEMPT_UNIQUE.contains(&c)) =>
                {
                    Self::Conflict
                }
                // 08: connection exception, 53: insufficient resources, 57: operator intervention.
                Some(c) if c.starts_with("08") || c.starts_with("53") || c.starts_with("57") => {
                    Self::Unavailable(e)
                }
                _ => Self::Unexpected(e),
            },
            _ => Self::Unexpected(e),
        }
    }
}

/// Opens the pool lazily, so the origin starts (and answers 503) while Postgres is down.
pub fn pool(
    url: &str,
    max_connections: u32,
    acquire_timeout: Duration,
) -> Result<PgPool, sqlx::Error> {
    let options = connect_options(url, &DatabaseTlsSettings::default())?;
    Ok(pool_with(options, max_connections, acquire_timeout))
}

/// `url` with the TLS the settings require: `DATABASE_TLS` sets `sslmode` (the settings have
/// already refused a URL asking for less) and `DATABASE_CA_FILE` sets `sslrootcert`.
pub fn connect_options(
    url: &str,
    tls: &DatabaseTlsSettings,
) -> Result<PgConnectOptions, sqlx::Error> {
    let mut options = PgConnectOptions::from_str(url)?;
    match tls.mode {
        // Keep a stricter mode the URL asked for (verify-ca / verify-full).
        None | Some(DatabaseTls::Require)
            if matches!(
                options.get_ssl_mode(),
                PgSslMode::VerifyCa | PgSslMode::VerifyFull
            ) => {}
        None => {}
        Some(DatabaseTls::Require) => options = options.ssl_mode(PgSslMode::Require),
        Some(DatabaseTls::VerifyFull) => options = options.ssl_mode(PgSslMode::VerifyFull),
    }
    if let Some(ca) = &tls.ca_file {
        options = options.ssl_root_cert(ca);
    }
    Ok(options)
}

/// A lazily connecting pool over `options`.
pub fn pool_with(
    options: PgConnectOptions,
    max_connections: u32,
    acquire_timeout: Duration,
) -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(acquire_timeout)
        .connect_lazy_with(options)
}

#[derive(sqlx::FromRow)]
struct SkuRow {
    sku: String,
    name: String,
    price_cents: i64,
    stock: i64,
    max_per_user: i32,
}

impl From<SkuRow> for SkuView {
    fn from(r: SkuRow) -> Self {
        Self {
            sku: r.sku,
            name: r.name,
            price_cents: r.price_cents,
            stock: r.stock,
            max_per_user: r.max_per_user,
        }
    }
}

/// A SKU's sale as stored by [`upsert_sku`].
#[derive(Debug, Clone)]
pub struct UpsertedSku {
    pub view: SkuView,
    /// 1 for a new SKU; every PUT of an existing SKU adds one.
    pub generation: i64,
}

#[derive(sqlx::FromRow)]
struct UpsertedRow {
    #[sqlx(flatten)]
    sku: SkuRow,
    generation: i64,
}

/// Creates or replaces a SKU's sale. Earlier orders keep counting toward `max_per_user`.
pub async fn upsert_sku(
    pool: &PgPool,
    sku: &Sku,
    sale: &SkuUpsert,
) -> Result<UpsertedSku, StoreError> {
    let row: UpsertedRow = sqlx::query_as(
        "INSERT INTO skus (sku, name, price_cents, initial_stock, stock, max_per_user)
         VALUES ($1, $2, $3, $4, $4, $5)
         ON CONFLICT (sku) DO UPDATE SET
             name = EXCLUDED.name, price_cents = EXCLUDED.price_cents,
             initial_stock = EXCLUDED.initial_stock, stock = EXCLUDED.stock,
             max_per_user = EXCLUDED.max_per_user, generation = skus.generation + 1, updated_at = now()
         RETURNING sku, name, price_cents, stock, max_per_user, generation",
    )
    .bind(sku.as_str())
    .bind(&sale.name)
    .bind(sale.price_cents)
    .bind(sale.stock)
    .bind(sale.max_per_user)
    .fetch_one(pool)
    .await?;
    Ok(UpsertedSku {
        view: row.sku.into(),
        generation: row.generation,
    })
}

/// A SKU's generation and stock by primary key, without any lock (`None`: no such SKU).
pub async fn sale_state(pool: &PgPool, sku: &Sku) -> Result<Option<SaleState>, StoreError> {
    let row = sqlx::query_as("SELECT generation, stock FROM skus WHERE sku = $1")
        .bind(sku.as_str())
        .fetch_optional(pool)
        .await?;
    Ok(row)
}

/// The (user, key) pairs holding a stored 201 for `sku`, of every generation.
pub async fn buyers(pool: &PgPool, sku: &Sku) -> Result<Vec<(String, String)>, StoreError> {
    let rows = sqlx::query_as(
        "SELECT user_id, idempotency_key FROM idempotency_records WHERE sku = $1 AND status = 201",
    )
    .bind(sku.as_str())
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// The current view of a SKU, `None` when there is no sale for it.
pub async fn get_sku(pool: &PgPool, sku: &Sku) -> Result<Option<SkuView>, StoreError> {
    let row: Option<SkuRow> = sqlx::query_as(
        "SELECT sku, name, price_cents, stock, max_per_user FROM skus WHERE sku = $1",
    )
    .bind(sku.as_str())
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Into::into))
}

/// Deletes stored outcomes older than `retention`; returns how many.
pub async fn purge_idempotency(pool: &PgPool, retention: Duration) -> Result<u64, StoreError> {
    let secs = i64::try_from(retention.as_secs()).unwrap_or(i64::MAX);
    let done = sqlx::query(
        "DELETE FROM idempotency_records WHERE created_at < now() - make_interval(secs => $1)",
    )
    .bind(secs as f64)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// `SELECT 1`, for readiness.
pub async fn ping(pool: &PgPool) -> Result<(), StoreError> {
    sqlx::query("SELECT 1").execute(pool).await?;
    Ok(())
}

#[derive(sqlx::FromRow)]
struct LockedSku {
    stock: i64,
    max_per_user: i32,
    generation: i64,
    fence: i64,
}

/// What the database already knows of a (user, key) pair of the batch: its stored answer, or
/// only its order (the answer was purged). Pairs it knows nothing of have no row.
#[derive(sqlx::FromRow)]
struct PriorRow {
    user_id: String,
    idempotency_key: String,
    sku: Option<String>,
    qty: Option<i32>,
    status: Option<i16>,
    body: Option<String>,
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

impl PriorRow {
    fn into_entry(self) -> ((String, String), Prior) {
        let Self {
            user_id,
            idempotency_key,
            sku,
            qty,
            status,
            body,
        } = self;
        let prior = match (sku, qty, status, body) {
            (Some(sku), Some(qty), Some(status), Some(body)) => Prior::Answered {
                sku,
                qty,
                answer: StoredAnswer {
                    status: u16::try_from(status).unwrap_or(500),
                    body,
                },
            },
            _ => Prior::Spent,
        };
        ((user_id, idempotency_key), prior)
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

fn refusal(code: ErrorCode, detail: String) -> (StoredAnswer, Outcome) {
    let p = Problem::new(code, detail);
    (
        StoredAnswer {
            status: p.status,
            body: p.to_json(),
        },
        Outcome::Refused(code),
    )
}

/// Decides `attempts` (all for `sku`) in arrival order in one transaction; see the module docs.
/// `fence` is the Redlock fencing token of the caller's lease (`None` without a lock) and
/// `commit_by` the instant after which the lease may be gone: past it, the transaction rolls back
/// instead of committing ([`StoreError::LeaseExpired`]). `mode` says whether the batch may sell.
pub async fn decide_batch(
    pool: &PgPool,
    sku: &Sku,
    attempts: &[Attempt],
    fence: Option<u64>,
    commit_by: Option<Instant>,
    mode: BatchMode,
) -> Result<BatchResult, StoreError> {
    let mut tx = pool.begin().await?;

    let locked: Option<LockedSku> = sqlx::query_as(match mode {
        BatchMode::Sell => {
            "SELECT stock, max_per_user, generation, fence FROM skus WHERE sku = $1 FOR UPDATE"
        }
        // No row lock: a missing row locks nothing anyway, and an existing one is not decided here.
        BatchMode::UnknownSkuOnly => {
            "SELECT stock, max_per_user, generation, fence FROM skus WHERE sku = $1"
        }
    })
    .bind(sku.as_str())
    .fetch_optional(&mut *tx)
    .await?;
    if let (Some(row), BatchMode::UnknownSkuOnly) = (&locked, mode) {
        return Err(StoreError::SkuExists(SaleState {
            generation: row.generation,
            stock: row.stock,
        }));
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

    // What is known of these (user, key) pairs: the stored answer, or — when it was purged after
    // the retention — the order itself (`orders_user_key_unique` is permanent). Both by their
    // unique indexes, in this transaction: a pair whose order exists never reaches the write
    // below, where it would violate the constraint and roll back the whole batch.
    let users: Vec<&str> = attempts.iter().map(|a| a.user.as_str()).collect();
    let keys: Vec<&str> = attempts.iter().map(|a| a.key.as_str()).collect();
    let prior: Vec<PriorRow> = sqlx::query_as(
        "SELECT b.user_id, b.idempotency_key, r.sku, r.qty, r.status, r.body
         FROM UNNEST($1::text[], $2::text[]) AS b(user_id, idempotency_key)
         LEFT JOIN idempotency_records r
           ON r.user_id = b.user_id AND r.idempotency_key = b.idempotency_key
         WHERE r.user_id IS NOT NULL
            OR EXISTS (SELECT 1 FROM orders o
                       WHERE o.user_id = b.user_id AND o.idempotency_key = b.idempotency_key)",
    )
    .bind(&users)
    .bind(&keys)
    .fetch_all(&mut *tx)
    .await?;
    // (user, key) -> what decided it, grown with this batch's own decisions so duplicates inside
    // the batch are decided once.
    let mut known: HashMap<(String, String), Prior> =
        prior.into_iter().map(PriorRow::into_entry).collect();

    // Units each user already bought of this SKU (all generations): the `user_units` counter,
    // bumped by the write statement below in this same transaction.
    let mut bought: HashMap<String, i64> = if locked.is_some() {
        sqlx::query_as::<_, (String, i64)>(
            "SELECT user_id, units FROM user_units WHERE sku = $1 AND user_id = ANY($2)",
        )
        .bind(sku.as_str())
        .bind(&users)
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect()
    } else {
        HashMap::new()
    };

    let mut stock = locked.as_ref().map_or(0, |r| r.stock);
    let mut decisions = Vec::with_capacity(attempts.len());
    let mut new_records: Vec<NewRecord> = Vec::new();
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
        let (answer, outcome, order_id) = match &locked {
            None => {
                let (a, o) = refusal(
                    ErrorCode::UnknownSku,
                    format!("there is no sale for sku {sku}"),
                );
                (a, o, None)
            }
            Some(_) if stock < i64::from(qty) => {
                let detail = if stock == 0 {
                    format!("{sku} is sold out")
                } else {
                    format!("{sku} has {stock} units left; {qty} requested")
                };
                let (a, o) = refusal(ErrorCode::SoldOut, detail);
                (a, o, None)
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
                let order_id = Uuid::now_v7();
                let body = PurchaseResponse {
                    order_id: order_id.to_string(),
                    sku: sku.to_string(),
                    qty: attempt.request.qty.get(),
                    user: attempt.user.to_string(),
                    remaining: stock,
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
    // counters, the stock decrement with the fencing token, and the stored answers. Foreign keys
    // are checked at the end of the statement, when the orders exist.
    let stored: i64 = sqlx::query_scalar(
        "WITH new_orders AS (
             INSERT INTO orders (order_id, sku, generation, user_id, qty, idempotency_key, fence)
             SELECT o, $1, $2, u, q, k, $3 FROM UNNEST($4::uuid[], $5::text[], $6::int[], $7::text[]) AS t(o, u, q, k)
         ), counted AS (
             INSERT INTO user_units (sku, user_id, units)
             SELECT $1, u, SUM(q) FROM UNNEST($5::text[], $6::int[]) AS t(u, q) GROUP BY u
             ON CONFLICT (sku, user_id) DO UPDATE SET units = user_units.units + EXCLUDED.units
         ), sold AS (
             UPDATE skus SET stock = stock - $8, fence = GREATEST(fence, $3), updated_at = now()
             WHERE sku = $1 AND $9
         ), stored AS (
             INSERT INTO idempotency_records (user_id, idempotency_key, sku, qty, status, body, order_id)
             SELECT u, k, $1, q, s, b, o
             FROM UNNEST($10::text[], $11::text[], $12::int[], $13::smallint[], $14::text[], $15::uuid[]) AS t(u, k, q, s, b, o)
             ON CONFLICT DO NOTHING
             RETURNING 1
         )
         SELECT COUNT(*) FROM stored",
    )
    .bind(sku.as_str())
    .bind(locked.as_ref().map_or(0, |r| r.generation))
    .bind(fence.unwrap_or(0))
    .bind(orders.iter().filter_map(|r| r.order_id).collect::<Vec<_>>())
    .bind(orders.iter().map(|r| r.user.as_str()).collect::<Vec<_>>())
    .bind(orders.iter().map(|r| r.qty).collect::<Vec<_>>())
    .bind(orders.iter().map(|r| r.key.as_str()).collect::<Vec<_>>())
    .bind(units_sold)
    .bind(locked.is_some())
    .bind(new_records.iter().map(|r| r.user.as_str()).collect::<Vec<_>>())
    .bind(new_records.iter().map(|r| r.key.as_str()).collect::<Vec<_>>())
    .bind(new_records.iter().map(|r| r.qty).collect::<Vec<_>>())
    .bind(new_records.iter().map(|r| r.status).collect::<Vec<_>>())
    .bind(new_records.iter().map(|r| r.body.as_str()).collect::<Vec<_>>())
    .bind(new_records.iter().map(|r| r.order_id).collect::<Vec<_>>())
    .fetch_one(&mut *tx)
    .await?;
    if usize::try_from(stored).ok() != Some(new_records.len()) {
        // Another transaction stored one of these keys meanwhile (same key, other SKU) and has
        // committed (`ON CONFLICT` waits for it): the retry sees its answer.
        return Err(StoreError::Conflict);
    }
    if commit_by.is_some_and(|by| Instant::now() >= by) {
        tx.rollback().await?;
        return Err(StoreError::LeaseExpired);
    }
    tx.commit().await?;
    Ok(BatchResult {
        decisions,
        remaining: locked.as_ref().map(|_| stock),
        generation: locked.map(|r| r.generation),
        units_sold,
    })
}
