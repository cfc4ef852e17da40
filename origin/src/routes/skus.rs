//! `GET /v1/skus/{sku}`: the public view of a sale, read within the public reads' share of the
//! database pool (`reads`).

use axum::Json;
use axum::extract::{Path, State};
use shared::{ErrorCode, Sku, SkuView};

use super::AppState;
use super::refusals::SkuGetRefusals;
use crate::problem::ApiError;
use crate::store::{self, StoreError};

/// The public view of a sale (`stock` = units remaining).
#[utoipa::path(
    get, path = "/v1/skus/{sku}", tag = "catalogue",
    params(("sku" = String, Path, description = "1..=64 of [A-Za-z0-9._-]")),
    responses((status = 200, body = shared::SkuView), SkuGetRefusals)
)]
pub(crate) async fn get(
    State(app): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<SkuView>, ApiError> {
    let sku = Sku::parse(&raw)?;
    let _slot = app.reads.enter().await?;
    match store::get_sku(&app.pool, &sku).await {
        Ok(Some(view)) => Ok(Json(view)),
        Ok(None) => Err(ApiError::new(
            ErrorCode::UnknownSku,
            format!("there is no sale for sku {sku}"),
        )),
        Err(e) => Err(store_error(e)),
    }
}

/// Maps a store error outside the purchase path.
pub(super) fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::Unexpected(e) => ApiError::internal(&e),
        other => ApiError::unavailable(&other),
    }
}
