//! Per-request limits, enforced in front of every route by `routes::envelope`:
//!
//! - header fields (names + values) above `HTTP_MAX_HEADER_BYTES` → 431 `headers_too_large`
//!   (heads too large even for the HTTP parser's buffer get the parser's bare 431; see `server`);
//! - the body gets a deadline of `HTTP_BODY_READ_TIMEOUT_MS` from now ([`DeadlineBody`]): a body
//!   trickling in slower answers 408 `request_timeout` wherever it is read;
//! - the whole request gets `HTTP_REQUEST_TIMEOUT_MS`: past it the answer is 503 `unavailable`
//!   with `Retry-After` — by then the client has sent everything, so a dependency hung. Purchases
//!   normally answer long before (their own `REQUEST_DEADLINE_MS`).

use std::time::Duration;

use std::future::Future;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, Method, Uri};
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

impl RequestLimits {
    /// 431 `headers_too_large` when the header fields are above `max_header_bytes`.
    pub(crate) fn check_head(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let size = header_bytes(headers);
        if size > self.max_header_bytes {
            return Err(ApiError::new(
                ErrorCode::HeadersTooLarge,
                format!(
                    "request header fields take {size} bytes; at most {} are accepted",
                    self.max_header_bytes
                ),
            ));
        }
        Ok(())
    }

    /// `req` with its body under the body deadline, from now.
    pub(crate) fn with_body_deadline(&self, req: Request) -> Request {
        let timeout = self.body_read_timeout;
        req.map(|b| Body::new(DeadlineBody::new(b, timeout)))
    }

    /// The route's `answer`, or 503 `unavailable` once the request timeout has passed.
    pub(crate) async fn within_request_timeout(
        &self,
        timed: Timed,
        answer: impl Future<Output = Response>,
    ) -> Response {
        match tokio::time::timeout(self.request_timeout, answer).await {
            Ok(res) => res,
            Err(_elapsed) => {
                let Timed { method, uri } = timed;
                tracing::warn!(%method, path = %uri.path(), timeout = ?self.request_timeout, "request not answered in time; answering 503");
                ApiError::new(
                    ErrorCode::Unavailable,
                    "the request could not be answered in time; retry after the Retry-After delay",
                )
                .into_response()
            }
        }
    }
}

/// What the log line of a request timeout names: a clone of the method and of the URI's shared
/// bytes, not a copy of the path.
#[derive(Debug)]
pub(crate) struct Timed {
    method: Method,
    uri: Uri,
}

impl Timed {
    pub(crate) fn of(req: &Request) -> Self {
        Self {
            method: req.method().clone(),
            uri: req.uri().clone(),
        }
    }
}
