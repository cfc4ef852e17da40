//! The SKU catalogue: the admin `PUT /v1/admin/skus/{sku}` ([`upsert_sku`] for a sale, with any
//! schedule fields; [`update_schedule`] for a body of schedule fields only) and the public view
//! (`GET /v1/skus/{sku}`, [`get_sku`]), which carries the schedule. Reached from `routes::admin`
//! and `routes::skus`.
//!
//! The waiting room (`room_admit_per_minute`, `room_pass_secs`, migration `waiting_room`) is a
//! schedule field like the others: absent keeps, `null` disables; the edge runs the room.
//!
//! Schedule fields follow [`shared::Update`]: absent keeps the stored value (so a restock keeps
//! the schedule), `null` clears it. The merged schedule must have `ends_at` after `starts_at`: the
//! `skus_schedule_order` check refuses anything else ([`CatalogueError::ScheduleOrder`], nothing
//! changes). A schedule change takes the SKU row lock like a purchase batch, so a batch that locks
//! the row after the change commits decides with the new schedule — on every origin process.

use chrono::{DateTime, Utc};
use shared::{ScheduleUpdate, Sku, SkuUpsert, SkuView, Timestamp, Update, WaitingRoom};
use sqlx::PgPool;

use super::StoreError;

/// The check that a SKU's `ends_at` is after its `starts_at` (migration `sale_schedule`).
const SCHEDULE_ORDER: &str = "skus_schedule_order";

/// Errors of the admin PUT's writes.
#[derive(Debug, thiserror::Error)]
pub enum CatalogueError {
    /// The schedule the PUT would leave has `ends_at` at or before `starts_at` (the
    /// `skus_schedule_order` check; a stored value counts for a field the body does not name):
    /// nothing changed.
    #[error("ends_at must be after starts_at")]
    ScheduleOrder,
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for CatalogueError {
    fn from(e: sqlx::Error) -> Self {
        match &e {
            sqlx::Error::Database(db)
                if db.code().as_deref() == Some("23514")
                    && db.constraint() == Some(SCHEDULE_ORDER) =>
            {
                Self::ScheduleOrder
            }
            _ => Self::Store(e.into()),
        }
    }
}

/// A stored instant as the wire's [`Timestamp`]. Stored instants came from a `Timestamp`, so
/// they are within its range; anything else (a hand-edited row) reads as no instant.
pub(crate) fn timestamp(at: Option<DateTime<Utc>>) -> Option<Timestamp> {
    at.and_then(|at| Timestamp::from_unix_ms(at.timestamp_millis()))
}

fn instant(at: Timestamp) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(at.unix_ms())
}

/// An [`Update`] as two query parameters: whether to keep the stored value, and the new one.
fn update_params(update: Update<Timestamp>) -> (bool, Option<DateTime<Utc>>) {
    match update {
        Update::Keep => (true, None),
        Update::Clear => (false, None),
        Update::Set(at) => (false, instant(at)),
    }
}

/// A [`WaitingRoom`] update as three query parameters: whether to keep the stored setting, and
/// the new columns (both null: no room).
fn room_params(update: Update<WaitingRoom>) -> (bool, Option<i32>, Option<i32>) {
    let column = |n: u32| i32::try_from(n).ok();
    match update {
        Update::Keep => (true, None, None),
        Update::Clear => (false, None, None),
        Update::Set(room) => (false, column(room.admit_per_minute), column(room.pass_secs)),
    }
}

struct SkuRow {
    sku: String,
    name: String,
    price_cents: i64,
    stock: i64,
    max_per_user: i32,
    starts_at: Option<DateTime<Utc>>,
    ends_at: Option<DateTime<Utc>>,
    paused: bool,
    room_admit_per_minute: Option<i32>,
    room_pass_secs: Option<i32>,
}

impl From<SkuRow> for SkuView {
    fn from(r: SkuRow) -> Self {
        Self {
            sku: r.sku,
            name: r.name,
            price_cents: r.price_cents,
            stock: r.stock,
            max_per_user: r.max_per_user,
            starts_at: timestamp(r.starts_at),
            ends_at: timestamp(r.ends_at),
            paused: r.paused,
            waiting_room: WaitingRoom::from_columns(r.room_admit_per_minute, r.room_pass_secs),
        }
    }
}

/// A SKU's sale as stored by [`upsert_sku`].
#[derive(Debug, Clone)]
pub struct UpsertedSku {
    pub view: SkuView,
    /// 1 for a new SKU; every PUT of an existing SKU adds one.
    pub generation: i64,
    /// The SKU's return epoch (unchanged by a PUT).
    pub returns: i64,
}

struct UpsertRow {
    sku: String,
    name: String,
    price_cents: i64,
    stock: i64,
    max_per_user: i32,
    starts_at: Option<DateTime<Utc>>,
    ends_at: Option<DateTime<Utc>>,
    paused: bool,
    room_admit_per_minute: Option<i32>,
    room_pass_secs: Option<i32>,
    generation: i64,
    returns: i64,
}

/// Creates or replaces a SKU's sale. Earlier orders keep counting toward `max_per_user`. The
/// generation it replaces moves to `sku_generations` with its books, in the same transaction,
/// under the SKU row lock (so no batch or return can move units between the two). Schedule
/// fields the body does not name keep their stored values.
pub async fn upsert_sku(
    pool: &PgPool,
    sku: &Sku,
    sale: &SkuUpsert,
) -> Result<UpsertedSku, CatalogueError> {
    let hold_secs = sale
        .hold_secs
        .map_or(0, |h| i32::try_from(h).unwrap_or(i32::MAX));
    let (keep_starts, starts_at) = update_params(sale.starts_at);
    let (keep_ends, ends_at) = update_params(sale.ends_at);
    let (keep_room, room_rate, room_pass) = room_params(sale.waiting_room);
    loop {
        let mut tx = pool.begin().await?;
        let archived = sqlx::query!(
            "INSERT INTO sku_generations (sku, generation, initial_stock, stock, units_out, written_off)
             SELECT sku, generation, initial_stock, stock, units_out, written_off
             FROM skus WHERE sku = $1 FOR UPDATE",
            sku.as_str(),
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        let row = if archived == 1 {
            sqlx::query_as!(
                UpsertRow,
                "UPDATE skus SET
                     name = $2, price_cents = $3, initial_stock = $4, stock = $4, max_per_user = $5,
                     hold_secs = $6, units_out = 0, written_off = 0, generation = generation + 1,
                     starts_at = CASE WHEN $7 THEN starts_at ELSE $8 END,
                     ends_at = CASE WHEN $9 THEN ends_at ELSE $10 END,
                     paused = COALESCE($11, paused),
                     room_admit_per_minute = CASE WHEN $12 THEN room_admit_per_minute ELSE $13 END,
                     room_pass_secs = CASE WHEN $12 THEN room_pass_secs ELSE $14 END,
                     updated_at = now()
                 WHERE sku = $1
                 RETURNING sku, name, price_cents, stock, max_per_user, starts_at, ends_at, paused,
                           room_admit_per_minute, room_pass_secs, generation, returns",
                sku.as_str(),
                &sale.name,
                sale.price_cents,
                sale.stock,
                sale.max_per_user,
                hold_secs,
                keep_starts,
                starts_at,
                keep_ends,
                ends_at,
                sale.paused,
                keep_room,
                room_rate,
                room_pass,
            )
            .fetch_optional(&mut *tx)
            .await?
        } else {
            // A new SKU; another PUT creating it at the same moment makes this one retry as a
            // replacement. "Keep" is "none" for a new SKU.
            sqlx::query_as!(
                UpsertRow,
                "INSERT INTO skus (sku, name, price_cents, initial_stock, stock, max_per_user, hold_secs,
                                   starts_at, ends_at, paused, room_admit_per_minute, room_pass_secs)
                 VALUES ($1, $2, $3, $4, $4, $5, $6, $7, $8, COALESCE($9, false), $10, $11)
                 ON CONFLICT (sku) DO NOTHING
                 RETURNING sku, name, price_cents, stock, max_per_user, starts_at, ends_at, paused,
                           room_admit_per_minute, room_pass_secs, generation, returns",
                sku.as_str(),
                &sale.name,
                sale.price_cents,
                sale.stock,
                sale.max_per_user,
                hold_secs,
                starts_at,
                ends_at,
                sale.paused,
                room_rate,
                room_pass,
            )
            .fetch_optional(&mut *tx)
            .await?
        };
        let Some(row) = row else {
            tx.rollback().await?;
            continue;
        };
        tx.commit().await?;
        return Ok(UpsertedSku {
            view: SkuView {
                sku: row.sku,
                name: row.name,
                price_cents: row.price_cents,
                stock: row.stock,
                max_per_user: row.max_per_user,
                starts_at: timestamp(row.starts_at),
                ends_at: timestamp(row.ends_at),
                paused: row.paused,
                waiting_room: WaitingRoom::from_columns(
                    row.room_admit_per_minute,
                    row.room_pass_secs,
                ),
            },
            generation: row.generation,
            returns: row.returns,
        });
    }
}

/// Changes only the schedule of an existing SKU (a PUT whose body names only schedule fields):
/// no new generation, stock and books untouched. `None` when there is no such SKU.
pub async fn update_schedule(
    pool: &PgPool,
    sku: &Sku,
    change: &ScheduleUpdate,
) -> Result<Option<SkuView>, CatalogueError> {
    let (keep_starts, starts_at) = update_params(change.starts_at);
    let (keep_ends, ends_at) = update_params(change.ends_at);
    let (keep_room, room_rate, room_pass) = room_params(change.waiting_room);
    let row = sqlx::query_as!(
        SkuRow,
        "UPDATE skus SET
             starts_at = CASE WHEN $2 THEN starts_at ELSE $3 END,
             ends_at = CASE WHEN $4 THEN ends_at ELSE $5 END,
             paused = COALESCE($6, paused),
             room_admit_per_minute = CASE WHEN $7 THEN room_admit_per_minute ELSE $8 END,
             room_pass_secs = CASE WHEN $7 THEN room_pass_secs ELSE $9 END,
             updated_at = now()
         WHERE sku = $1
         RETURNING sku, name, price_cents, stock, max_per_user, starts_at, ends_at, paused,
                   room_admit_per_minute, room_pass_secs",
        sku.as_str(),
        keep_starts,
        starts_at,
        keep_ends,
        ends_at,
        change.paused,
        keep_room,
        room_rate,
        room_pass,
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Into::into))
}

/// The current view of a SKU, `None` when there is no sale for it.
pub async fn get_sku(pool: &PgPool, sku: &Sku) -> Result<Option<SkuView>, StoreError> {
    let row = sqlx::query_as!(
        SkuRow,
        "SELECT sku, name, price_cents, stock, max_per_user, starts_at, ends_at, paused,
                room_admit_per_minute, room_pass_secs
         FROM skus WHERE sku = $1",
        sku.as_str(),
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Into::into))
}
