//! Postgres access — the store layer, at the bottom of every request path: the SKU catalogue
//! (admin `PUT`/`GET`), the purchase-batch transaction (`batch`, reached through the combiner),
//! the sale state the purchase path's knowledge reads, and the reconciliation's queries
//! (`books`). Every SQL statement of the origin lives in this module and its children, written
//! with `sqlx::query!`/`query_as!` so that it is checked at compile time against the migrations
//! (`origin/migrations/`); the checked descriptions are committed in `origin/.sqlx/` and builds
//! use them offline (`SQLX_OFFLINE=true`, set in `.cargo/config.toml`). After changing a query or
//! a migration, run `scripts/sqlx-prepare.sh`; `scripts/test.sh` fails when `.sqlx/` is stale.
//!
//! [`decide_batch`] is the final guard of the whole system. Inside ONE transaction that holds the
//! SKU row lock it decides a batch of purchase attempts in arrival order — idempotency replay or
//! reuse, unknown SKU, the schedule (by the database clock; a closed sale decides and stores
//! nothing), stock, per-user cap — then writes every order, every stored outcome and the
//! stock decrement, and commits. Two origins racing, or a holder whose Redlock lease was lost,
//! still cannot oversell: the row lock serializes them, `CHECK (stock >= 0)` refuses the
//! impossible, and the fencing token refuses a stale lock holder's batch. A batch for a SKU that
//! does not exist sells nothing and is decided without the lease ([`BatchMode::UnknownSkuOnly`]:
//! if the SKU turns out to exist, nothing is decided), so made-up SKUs never reach Redis.
//!
//! One attempt never fails its batch: a key whose order exists but whose stored answer was purged
//! is decided (`Decision::KeySpent`) before the write, and a row of the same (user, key) that
//! another transaction (another SKU's batch, another process) commits meanwhile makes the write
//! fail with [`StoreError::Conflict`] — nothing committed, and the retry decides that attempt from
//! the committed row while the others commit.
//!
//! The catalogue (`catalogue`): the admin `PUT` — a sale with its schedule, or the schedule
//! alone — and the public view, which carries the schedule.
//!
//! [`sale_state`] (generation and stock by primary key, no lock) and [`buyers`] feed the
//! purchase path's knowledge of which SKUs exist and which are sold out (`purchase::knowledge`).

use std::str::FromStr;
use std::time::Duration;

use shared::Sku;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgSslMode};

use crate::settings::{DatabaseTls, DatabaseTlsSettings};

mod batch;
pub(crate) mod books;
mod catalogue;
pub mod events;
pub mod orders;
pub mod payments;
pub mod webhooks;

pub use batch::{BatchMode, BatchResult, decide_batch};
pub use catalogue::{CatalogueError, UpsertedSku, get_sku, update_schedule, upsert_sku};

/// A SKU's sale as of one read: the generation (bumped by every PUT), the return epoch (bumped
/// by every transaction that puts units back into the generation's stock) and the units left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SaleState {
    pub generation: i64,
    pub returns: i64,
    pub stock: i64,
}

/// Errors at the database boundary.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database cannot be had (connection, pool timeout, shutdown...): answer 503.
    #[error("database unavailable: {0}")]
    Unavailable(#[source] sqlx::Error),
    /// A concurrent transaction committed a row of the same (user, idempotency key) — a unique
    /// violation of [`PER_ATTEMPT_UNIQUE`] — or the database chose this transaction as a
    /// deadlock / serialization victim. Nothing was committed; a retry sees the committed row and
    /// decides that attempt from it.
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

/// Commits `tx` unless `commit_by` (the instant after which the caller's lease may be gone, from
/// `lease::SkuLease::commit_by`) has passed: then rolls it back and nothing is committed
/// ([`StoreError::LeaseExpired`]). Every transaction that moves units under a lease ends here.
pub(crate) async fn commit_within(
    tx: sqlx::Transaction<'_, sqlx::Postgres>,
    commit_by: Option<std::time::Instant>,
) -> Result<(), StoreError> {
    if commit_by.is_some_and(|by| std::time::Instant::now() >= by) {
        tx.rollback().await?;
        return Err(StoreError::LeaseExpired);
    }
    tx.commit().await?;
    Ok(())
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

/// A SKU's generation, return epoch and stock by primary key, without any lock (`None`: no such SKU).
pub async fn sale_state(pool: &PgPool, sku: &Sku) -> Result<Option<SaleState>, StoreError> {
    let row = sqlx::query_as!(
        SaleState,
        "SELECT generation, returns, stock FROM skus WHERE sku = $1",
        sku.as_str(),
    )
    .fetch_optional(pool)
    .await?;
    Ok(row)
}

/// The (user, key) pairs holding a stored 201 for `sku`, of every generation.
pub async fn buyers(pool: &PgPool, sku: &Sku) -> Result<Vec<(String, String)>, StoreError> {
    let rows = sqlx::query!(
        "SELECT user_id, idempotency_key FROM idempotency_records WHERE sku = $1 AND status = 201",
        sku.as_str(),
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.user_id, r.idempotency_key))
        .collect())
}

/// Deletes stored outcomes older than `retention`; returns how many.
pub async fn purge_idempotency(pool: &PgPool, retention: Duration) -> Result<u64, StoreError> {
    let secs = i64::try_from(retention.as_secs()).unwrap_or(i64::MAX) as f64;
    let done = sqlx::query!(
        "DELETE FROM idempotency_records WHERE created_at < now() - make_interval(secs => $1)",
        secs,
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// `SELECT 1`, for readiness.
pub async fn ping(pool: &PgPool) -> Result<(), StoreError> {
    sqlx::query!("SELECT 1 AS one").fetch_one(pool).await?;
    Ok(())
}
