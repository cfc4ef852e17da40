//! `PUT /v1/admin/skus/{sku}`: create or replace a SKU's sale (admin token required). Checks
//! in order: admin token (before any body byte is read), body size and deadline, SKU, body.
//!
//! A body naming only schedule fields (`starts_at`, `ends_at`, `paused`, `waiting_room`,
//! `proof_of_work`, `network_limits`) changes the schedule of an existing SKU and nothing else
//! (404 `unknown_sku` if there is none); any other body is a sale and starts a new sale
//! generation, keeping the schedule fields it does not name.
//!
//! Every sale PUT starts a new sale generation. A restock (an existing SKU, stock > 0) answers only
//! [`LOCAL_TTL`] after its commit: by then no origin process can still trust what it knew of an
//! earlier generation (`purchase::knowledge`), so after the 200 no purchase anywhere is answered
//! `sold_out` from the previous sale — whatever the state of Redis, which plays no part.

use std::time::Instant;

use axum::Json;
use axum::extract::State;
use shared::{ErrorCode, ScheduleUpdate, Sku, SkuPut, SkuUpsert, SkuView};

use super::AppState;
use super::extract::{AdminToken, Checked};
use super::refusals::SkuPutRefusals;
use super::skus::store_error;
use crate::problem::ApiError;
use crate::purchase::knowledge::LOCAL_TTL;
use crate::store::{self, CatalogueError, SaleState};

/// Create or replace a SKU's sale, or change its schedule. Earlier orders keep counting toward
/// `max_per_user`.
///
/// Schedule fields (`starts_at`, `ends_at`: RFC 3339; `paused`: bool) are optional: absent keeps
/// the stored value (a restock keeps the schedule), `null` clears a date. A body with only
/// schedule fields changes the schedule of an existing SKU and nothing else (no restock, no wait);
/// `404 unknown_sku` when there is no such SKU. Purchases before `starts_at` answer
/// `409 not_started`, from `ends_at` on `409 sale_ended`, while paused `409 sale_paused`.
///
/// `waiting_room` (`{"admit_per_minute": 1..=1000000, "pass_secs": 1..=86400}`) is optional
/// too: absent keeps it, `null` disables it. The origin only stores it and shows it in the view;
/// the edge runs the room (`POST /v1/queue/{sku}`) and refuses purchases without its pass.
///
/// The bot defences are optional in the same way (absent keeps, `null` disables), stored by the
/// origin, shown in the view and enforced by the edge: `proof_of_work` (`{"min_bits": 1..=30,
/// "max_bits": min_bits..=30, "algorithm": "SHA-256" (ALTCHA v1, the default) |
/// "PBKDF2/SHA-256" (ALTCHA's proof of work v2)}`: a solved challenge to join the room, or to buy
/// from a sale without one) and `network_limits` (`{"admissions": 1..=1000000, "units": 1..=1000000,
/// "window_secs": 1..=86400}`, either bound may be absent or `null` but not both, the window 3600
/// by default: per network per window, at most `admissions` room joins and `units` units).
///
/// A restock (an existing SKU, stock > 0) answers about one second after it is stored: once it
/// answers, every origin process sells from the new stock.
#[utoipa::path(
    put, path = "/v1/admin/skus/{sku}", tag = "admin",
    params(("sku" = String, Path, description = "1..=64 of [A-Za-z0-9._-]")),
    request_body(content = shared::SkuUpsert, description = "The sale, with optional schedule fields; or a body of schedule fields only (`starts_at`, `ends_at`, `paused`, `waiting_room`, `proof_of_work`, `network_limits`), which changes only the schedule of an existing SKU"),
    security(("admin_token" = [])),
    responses((status = 200, body = shared::SkuView), SkuPutRefusals)
)]
pub(crate) async fn put_sku(
    State(app): State<AppState>,
    _: AdminToken,
    Checked(sku, put): Checked<Sku, SkuPut>,
) -> Result<Json<SkuView>, ApiError> {
    let view = match put {
        SkuPut::Sale(sale) => replace_sale(&app, &sku, &sale).await?,
        SkuPut::Schedule(change) => change_schedule(&app, &sku, &change).await?,
    };
    Ok(Json(view))
}

/// A new sale generation: stored, learnt by this process, and — a restock — answered once every
/// process sells from it.
async fn replace_sale(app: &AppState, sku: &Sku, sale: &SkuUpsert) -> Result<SkuView, ApiError> {
    let observed_at = Instant::now();
    let upserted = store::upsert_sku(&app.pool, sku, sale)
        .await
        .map_err(admin_store_error)?;
    let (view, generation) = (upserted.view, upserted.generation);
    let state = SaleState {
        generation,
        returns: upserted.returns,
        stock: view.stock,
    };
    app.purchases
        .knowledge()
        .learn_state(sku, observed_at, Some(state), &app.pool)
        .await;
    tracing::info!(sku = %sku, generation, stock = view.stock, max_per_user = view.max_per_user, starts_at = ?view.starts_at, ends_at = ?view.ends_at, paused = view.paused, waiting_room = ?view.waiting_room, proof_of_work = ?view.proof_of_work, network_limits = ?view.network_limits, "sku sale replaced");
    if generation > 1 && view.stock > 0 {
        // A restock reopens the sale everywhere: wait out every process's knowledge of the
        // earlier generation (see the module docs). A new SKU has no earlier generation.
        tokio::time::sleep(LOCAL_TTL).await;
    }
    Ok(view)
}

/// The schedule alone: no new generation, so nothing any process knows of the stock changes;
/// batches read the schedule under the row lock.
async fn change_schedule(
    app: &AppState,
    sku: &Sku,
    change: &ScheduleUpdate,
) -> Result<SkuView, ApiError> {
    match store::update_schedule(&app.pool, sku, change).await {
        Ok(Some(view)) => {
            tracing::info!(sku = %sku, starts_at = ?view.starts_at, ends_at = ?view.ends_at, paused = view.paused, waiting_room = ?view.waiting_room, proof_of_work = ?view.proof_of_work, network_limits = ?view.network_limits, "sku schedule changed");
            Ok(view)
        }
        Ok(None) => Err(ApiError::new(
            ErrorCode::UnknownSku,
            format!(
                "there is no sale for sku {sku}; PUT the sale (name, price_cents, stock, max_per_user) first"
            ),
        )),
        Err(e) => Err(admin_store_error(e)),
    }
}

/// A store error of the admin PUT: a schedule whose end is not after its start is the admin's
/// mistake (400, nothing changed).
fn admin_store_error(e: CatalogueError) -> ApiError {
    match e {
        CatalogueError::ScheduleOrder => ApiError::new(
            ErrorCode::InvalidRequest,
            "field `ends_at`: must be after starts_at (the stored value counts when the body does not name it)",
        ),
        CatalogueError::Store(e) => store_error(e),
    }
}
