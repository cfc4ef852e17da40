//! `GET /v1/skus/{sku}`: the public view of a sale.

use axum::Json;
use axum::extract::{Path, State};
use shared::{ErrorCode, Sku, SkuView};

use super::AppState;
use crate::problem::ApiError;
use crate::store::{self, StoreError};

pub(super) async fn get(
    State(app): State<AppState>,
    Path(raw): Path<String>,
) -> Result<Json<SkuView>, ApiError> {
    let sku = Sku::parse(&raw)?;
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
