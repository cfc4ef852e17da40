//! Per-request limits, enforced in front of every route:
//!
//! - header fields (names + values) above `HTTP_MAX_HEADER_BYTES` → 431 `headers_too_large`
//!   (heads too large even for the HTTP parser's buffer get the parser's bare 431; see `server`);
//! - the body gets a deadline of `HTTP_BODY_READ_TIMEOUT_MS` from now ([`DeadlineBody`]): a body
//!   trickling in slower answers 408 `request_timeout` wherever it is read;
//! - the whole request gets `HTTP_REQUEST_TIMEOUT_MS`: past it the answer is 503 `unavailable`
//!   with `Retry-After` — by then the client has sent everything, so a dependency hung. Purchases
//!   normally answer long before (their own `REQUEST_DEADLINE_MS`).

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use shared::ErrorCode;

use crate::body::DeadlineBody;
use crate::problem::ApiError;
use crate::settings::HttpSettings;

/// The limits the middleware applies (from [`HttpSettings`]).
#[derive(Debug, Clone, Copy)]
pub struct RequestLimits {
    pub max_header_bytes: usize,
    pub body_read_timeout: Duration,
    pub request_timeout: Duration,
}

impl From<&HttpSettings> for RequestLimits {
    fn from(s: &HttpSettings) -> Self {
        Self {
            max_header_bytes: s.max_header_bytes,
            body_read_timeout: s.body_read_timeout,
            request_timeout: s.request_timeout,
        }
    }
}

/// Bytes of the header fields as they count toward the limit: names plus values.
fn header_bytes(headers: &HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum()
}

/// The middleware; see the module docs.
pub(crate) async fn enforce(
    State(limits): State<RequestLimits>,
    req: Request,
    next: Next,
) -> Response {
    let size = header_bytes(req.headers());
    if size > limits.max_header_bytes {
        return ApiError::new(
            ErrorCode::HeadersTooLarge,
            format!(
                "request header fields take {size} bytes; at most {} are accepted",
                limits.max_header_bytes
            ),
        )
        .into_response();
    }
    let req = req.map(|b| Body::new(DeadlineBody::new(b, limits.body_read_timeout)));
    // For the log line of a timeout only: a clone of the method and of the URI's shared bytes,
    // not a copy of the path.
    let method = req.method().clone();
    let uri = req.uri().clone();
    match tokio::time::timeout(limits.request_timeout, next.run(req)).await {
        Ok(res) => res,
        Err(_elapsed) => {
            tracing::warn!(%method, path = %uri.path(), timeout = ?limits.request_timeout, "request not answered in time; answering 503");
            ApiError::new(
                ErrorCode::Unavailable,
                "the request could not be answered in time; retry after the Retry-After delay",
            )
            .into_response()
        }
    }
}
