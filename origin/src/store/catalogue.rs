//! The SKU catalogue: the admin `PUT /v1/admin/skus/{sku}` ([`upsert_sku`] for a sale, with any
//! schedule fields; [`update_schedule`] for a body of schedule fields only) and the public view
//! (`GET /v1/skus/{sku}`, [`get_sku`]), which carries the schedule. Reached from `routes::admin`
//! and `routes::skus`.
//!
//! The waiting room (`room_admit_per_minute`, `room_pass_secs`, migration `waiting_room`;
//! `room_overbook_hundredths`, migration `room_overbook`) and the
//! bot defences (`proof_of_work`: `pow_min_bits`, `pow_max_bits`, `pow_algorithm`; `network_limits`:
//! `net_admissions`, `net_units`, `net_window_secs`; migration `bot_defences`) are schedule
//! fields like the others: absent keeps, `null` disables; the edge runs the room and enforces the
//! defences, the origin only stores them and shows them in the view. The mapping between the wire
//! and the columns is in `columns`, which builds the view (one place for every query).
//!
//! Schedule fields follow [`shared::Update`]: absent keeps the stored value (so a restock keeps
//! the schedule), `null` clears it. The merged schedule must have `ends_at` after `starts_at`: the
//! `skus_schedule_order` check refuses anything else ([`CatalogueError::ScheduleOrder`], nothing
//! changes). A schedule change takes the SKU row lock like a purchase batch, so a batch that locks
//! the row after the change commits decides with the new schedule — on every origin process.

use shared::{ScheduleUpdate, Sku, SkuUpsert, SkuView};
use sqlx::PgPool;

use super::{StoreError, events};

mod columns;

pub(crate) use columns::timestamp;
use columns::{ScheduleParams, SkuRow};

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

/// A SKU's sale as stored by [`upsert_sku`].
#[derive(Debug, Clone)]
pub struct UpsertedSku {
    pub view: SkuView,
    /// 1 for a new SKU; every PUT of an existing SKU adds one.
    pub generation: i64,
    /// The SKU's return epoch (unchanged by a PUT).
    pub returns: i64,
}

/// Creates or replaces a SKU's sale. Earlier orders keep counting toward `max_per_user`. The
/// generation it replaces moves to `sku_generations` with its books, in the same transaction,
/// under the SKU row lock (so no batch or return can move units between the two). Schedule
/// fields the body does not name keep their stored values. A replacement whose stock crosses
/// zero writes `sku.back_on_sale` (or `sku.sold_out`) in the same transaction; a new SKU none.
pub async fn upsert_sku(
    pool: &PgPool,
    sku: &Sku,
    sale: &SkuUpsert,
) -> Result<UpsertedSku, CatalogueError> {
    let hold_secs = sale
        .hold_secs
        .map_or(0, |h| i32::try_from(h).unwrap_or(i32::MAX));
    let p = ScheduleParams::new(&sale.schedule());
    loop {
        let mut tx = pool.begin().await?;
        // The replaced generation's stock, when there is one.
        let archived = sqlx::query_scalar!(
            "INSERT INTO sku_generations (sku, generation, initial_stock, stock, units_out, written_off)
             SELECT sku, generation, initial_stock, stock, units_out, written_off
             FROM skus WHERE sku = $1 FOR UPDATE
             RETURNING stock",
            sku.as_str(),
        )
        .fetch_optional(&mut *tx)
        .await?;
        let row = if archived.is_some() {
            sqlx::query_as!(
                SkuRow,
                "UPDATE skus SET
                     name = $2, price_cents = $3, initial_stock = $4, stock = $4, max_per_user = $5,
                     hold_secs = $6, units_out = 0, written_off = 0, generation = generation + 1,
                     starts_at = CASE WHEN $7 THEN starts_at ELSE $8 END,
                     ends_at = CASE WHEN $9 THEN ends_at ELSE $10 END,
                     paused = COALESCE($11, paused),
                     room_admit_per_minute = CASE WHEN $12 THEN room_admit_per_minute ELSE $13 END,
                     room_pass_secs = CASE WHEN $12 THEN room_pass_secs ELSE $14 END,
                     room_overbook_hundredths =
                         CASE WHEN $12 THEN room_overbook_hundredths ELSE $22 END,
                     pow_min_bits = CASE WHEN $15 THEN pow_min_bits ELSE $16 END,
                     pow_max_bits = CASE WHEN $15 THEN pow_max_bits ELSE $17 END,
                     pow_algorithm = CASE WHEN $15 THEN pow_algorithm ELSE $23 END,
                     net_admissions = CASE WHEN $18 THEN net_admissions ELSE $19 END,
                     net_units = CASE WHEN $18 THEN net_units ELSE $20 END,
                     net_window_secs = CASE WHEN $18 THEN net_window_secs ELSE $21 END,
                     updated_at = now()
                 WHERE sku = $1
                 RETURNING sku, name, price_cents, stock, max_per_user, starts_at, ends_at, paused,
                           room_admit_per_minute, room_pass_secs, room_overbook_hundredths, pow_min_bits,
                           pow_max_bits, pow_algorithm, net_admissions, net_units, net_window_secs, generation,
                           returns, (SELECT COALESCE(SUM(o.qty), 0) FROM orders o
                            WHERE o.sku = skus.sku AND o.generation = skus.generation
                              AND o.status = 'held')::bigint AS \"held!\"",
                sku.as_str(),
                &sale.name,
                sale.price_cents,
                sale.stock,
                sale.max_per_user,
                hold_secs,
                p.keep_starts,
                p.starts_at,
                p.keep_ends,
                p.ends_at,
                p.paused,
                p.keep_room,
                p.room.0,
                p.room.1,
                p.keep_pow,
                p.pow.0,
                p.pow.1,
                p.keep_net,
                p.net.0,
                p.net.1,
                p.net.2,
                p.room.2,
                p.pow.2,
            )
            .fetch_optional(&mut *tx)
            .await?
        } else {
            // A new SKU; another PUT creating it at the same moment makes this one retry as a
            // replacement. "Keep" is "none" for a new SKU (the keep flags' columns are null).
            sqlx::query_as!(
                SkuRow,
                "INSERT INTO skus (sku, name, price_cents, initial_stock, stock, max_per_user, hold_secs,
                                   starts_at, ends_at, paused, room_admit_per_minute, room_pass_secs,
                                   pow_min_bits, pow_max_bits, net_admissions, net_units, net_window_secs,
                                   room_overbook_hundredths, pow_algorithm)
                 VALUES ($1, $2, $3, $4, $4, $5, $6, $7, $8, COALESCE($9, false), $10, $11,
                         $12, $13, $14, $15, $16, $17, $18)
                 ON CONFLICT (sku) DO NOTHING
                 RETURNING sku, name, price_cents, stock, max_per_user, starts_at, ends_at, paused,
                           room_admit_per_minute, room_pass_secs, room_overbook_hundredths, pow_min_bits,
                           pow_max_bits, pow_algorithm, net_admissions, net_units, net_window_secs, generation,
                           returns, (SELECT COALESCE(SUM(o.qty), 0) FROM orders o
                            WHERE o.sku = skus.sku AND o.generation = skus.generation
                              AND o.status = 'held')::bigint AS \"held!\"",
                sku.as_str(),
                &sale.name,
                sale.price_cents,
                sale.stock,
                sale.max_per_user,
                hold_secs,
                p.starts_at,
                p.ends_at,
                p.paused,
                p.room.0,
                p.room.1,
                p.pow.0,
                p.pow.1,
                p.net.0,
                p.net.1,
                p.net.2,
                p.room.2,
                p.pow.2,
            )
            .fetch_optional(&mut *tx)
            .await?
        };
        let Some(row) = row else {
            tx.rollback().await?;
            continue;
        };
        if let Some(before) = archived {
            // A restock of a sold-out sale (or a PUT of 0 units) is a SKU event.
            events::sku_crossing(&mut tx, sku.as_str(), before, row.stock).await?;
        }
        tx.commit().await?;
        let (generation, returns) = (row.generation, row.returns);
        return Ok(UpsertedSku {
            view: row.into(),
            generation,
            returns,
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
    let p = ScheduleParams::new(change);
    let row = sqlx::query_as!(
        SkuRow,
        "UPDATE skus SET
             starts_at = CASE WHEN $2 THEN starts_at ELSE $3 END,
             ends_at = CASE WHEN $4 THEN ends_at ELSE $5 END,
             paused = COALESCE($6, paused),
             room_admit_per_minute = CASE WHEN $7 THEN room_admit_per_minute ELSE $8 END,
             room_pass_secs = CASE WHEN $7 THEN room_pass_secs ELSE $9 END,
             room_overbook_hundredths = CASE WHEN $7 THEN room_overbook_hundredths ELSE $17 END,
             pow_min_bits = CASE WHEN $10 THEN pow_min_bits ELSE $11 END,
             pow_max_bits = CASE WHEN $10 THEN pow_max_bits ELSE $12 END,
             pow_algorithm = CASE WHEN $10 THEN pow_algorithm ELSE $18 END,
             net_admissions = CASE WHEN $13 THEN net_admissions ELSE $14 END,
             net_units = CASE WHEN $13 THEN net_units ELSE $15 END,
             net_window_secs = CASE WHEN $13 THEN net_window_secs ELSE $16 END,
             updated_at = now()
         WHERE sku = $1
         RETURNING sku, name, price_cents, stock, max_per_user, starts_at, ends_at, paused,
                   room_admit_per_minute, room_pass_secs, room_overbook_hundredths, pow_min_bits,
                   pow_max_bits, pow_algorithm, net_admissions, net_units, net_window_secs, generation, returns,
                   (SELECT COALESCE(SUM(o.qty), 0) FROM orders o
                            WHERE o.sku = skus.sku AND o.generation = skus.generation
                              AND o.status = 'held')::bigint AS \"held!\"",
        sku.as_str(),
        p.keep_starts,
        p.starts_at,
        p.keep_ends,
        p.ends_at,
        p.paused,
        p.keep_room,
        p.room.0,
        p.room.1,
        p.keep_pow,
        p.pow.0,
        p.pow.1,
        p.keep_net,
        p.net.0,
        p.net.1,
        p.net.2,
        p.room.2,
        p.pow.2,
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Into::into))
}

/// The current view of a SKU, `None` when there is no sale for it. Its `held` (units in held
/// orders of the current generation) is what a sold-out waiting room's `may_return` comes from.
pub async fn get_sku(pool: &PgPool, sku: &Sku) -> Result<Option<SkuView>, StoreError> {
    let row = sqlx::query_as!(
        SkuRow,
        "SELECT sku, name, price_cents, stock, max_per_user, starts_at, ends_at, paused,
                room_admit_per_minute, room_pass_secs, room_overbook_hundredths, pow_min_bits,
                pow_max_bits, pow_algorithm, net_admissions, net_units, net_window_secs, generation, returns,
                (SELECT COALESCE(SUM(o.qty), 0) FROM orders o
                            WHERE o.sku = skus.sku AND o.generation = skus.generation
                              AND o.status = 'held')::bigint AS \"held!\"
         FROM skus WHERE sku = $1",
        sku.as_str(),
    )
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Into::into))
}
