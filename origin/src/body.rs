//! Reading request bodies with a hard size limit, so an oversized or endless body is a 413
//! problem+json (checked before anything else) and never unbounded memory.

use axum::body::Body;
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use shared::ErrorCode;

use crate::problem::ApiError;

/// Largest accepted request body: 16 KiB.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// Reads the whole body, refusing more than [`MAX_BODY_BYTES`] with 413 `payload_too_large`.
pub async fn read_limited(body: Body) -> Result<Bytes, ApiError> {
    match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Err(ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("request body is larger than {MAX_BODY_BYTES} bytes"),
        )),
        Err(_) => Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "request body could not be read",
        )),
    }
}
