//! `PUT /v1/admin/skus/{sku}`: create or replace a SKU's sale (admin token required). Checks
//! in order: admin token (before any body byte is read), body size and deadline, SKU, body.
//!
//! Every PUT starts a new sale generation. A restock (an existing SKU, stock > 0) answers only
//! [`LOCAL_TTL`] after its commit: by then no origin process can still trust what it knew of an
//! earlier generation (`purchase::knowledge`), so after the 200 no purchase anywhere is answered
//! `sold_out` from the previous sale — whatever the state of Redis, which plays no part.

use std::time::Instant;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use shared::{Sku, SkuUpsert, SkuView};

use super::AppState;
use super::skus::store_error;
use crate::problem::ApiError;
use crate::purchase::knowledge::LOCAL_TTL;
use crate::store::SaleState;
use crate::{auth, body, store};

/// Create or replace a SKU's sale. Earlier orders keep counting toward `max_per_user`.
///
/// A restock (an existing SKU, stock > 0) answers about one second after it is stored: once it
/// answers, every origin process sells from the new stock.
#[utoipa::path(
    put, path = "/v1/admin/skus/{sku}", tag = "admin",
    params(("sku" = String, Path, description = "1..=64 of [A-Za-z0-9._-]")),
    request_body = shared::SkuUpsert,
    security(("admin_token" = [])),
    responses(
        (status = 200, body = shared::SkuView),
        (status = 400, description = "`invalid_request`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 401, description = "`unauthorized`: checked before the body is read, so it comes at once", body = shared::Problem, content_type = "application/problem+json"),
        (status = 408, description = "`request_timeout`: the body did not arrive within `HTTP_BODY_READ_TIMEOUT_MS` (not stored)", body = shared::Problem, content_type = "application/problem+json"),
        (status = 413, description = "`payload_too_large`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 431, description = "`headers_too_large`: header fields above `HTTP_MAX_HEADER_BYTES`", body = shared::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`unavailable`", body = shared::Problem, content_type = "application/problem+json"),
    )
)]
pub(crate) async fn put_sku(
    State(app): State<AppState>,
    Path(raw): Path<String>,
    headers: HeaderMap,
    request: Body,
) -> Result<Json<SkuView>, ApiError> {
    // The token first: a caller without it gets its 401 at once, without the server waiting
    // for (or reading) a body it would refuse anyway.
    auth::require_admin(&headers, &app.credentials.admin_tokens)?;
    let bytes = body::read_limited(request).await?;
    let sku = Sku::parse(&raw)?;
    let sale = SkuUpsert::from_json(&bytes)?;
    let observed_at = Instant::now();
    let upserted = store::upsert_sku(&app.pool, &sku, &sale)
        .await
        .map_err(store_error)?;
    let (view, generation) = (upserted.view, upserted.generation);
    let state = SaleState {
        generation,
        returns: upserted.returns,
        stock: view.stock,
    };
    app.purchases
        .knowledge()
        .learn_state(&sku, observed_at, Some(state), &app.pool)
        .await;
    tracing::info!(sku = %sku, generation, stock = view.stock, max_per_user = view.max_per_user, "sku sale replaced");
    if generation > 1 && view.stock > 0 {
        // A restock reopens the sale everywhere: wait out every process's knowledge of the
        // earlier generation (see the module docs). A new SKU has no earlier generation.
        tokio::time::sleep(LOCAL_TTL).await;
    }
    Ok(Json(view))
}
