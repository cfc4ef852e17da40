//! The origin's HTTP error type: every refusal becomes an RFC 9457 `application/problem+json`
//! response with a stable `code` (from `shared`). 5xx causes go to the log, never to the client.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use shared::headers::PROBLEM_JSON;
use shared::{Closed, ErrorCode, Problem};

/// Seconds a client should wait before retrying a 503.
pub const RETRY_AFTER_SECS: u64 = 1;

/// An error answer of the HTTP API.
#[derive(Debug)]
pub struct ApiError {
    code: ErrorCode,
    detail: String,
    /// `order_state` only: the order's current state.
    current: Option<String>,
    /// A sale closed by its schedule: the problem's `starts_at`/`ends_at` and `Retry-After`.
    closed: Option<Closed>,
}

impl ApiError {
    pub fn new(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self {
            code,
            detail: detail.into(),
            current: None,
            closed: None,
        }
    }

    /// This error with the problem's `current` member (the order's state, for `order_state`).
    pub fn with_current(mut self, current: impl Into<String>) -> Self {
        self.current = Some(current.into());
        self
    }

    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// 503 `unavailable`; the cause is logged here, the client sees a generic detail.
    pub fn unavailable(cause: &dyn std::fmt::Display) -> Self {
        tracing::warn!(error = %cause, "dependency unavailable");
        Self::new(
            ErrorCode::Unavailable,
            "a dependency is unavailable; retry after the Retry-After delay",
        )
    }

    /// The problem this error answers with.
    pub fn problem(&self) -> Problem {
        if let Some(closed) = self.closed {
            return closed.problem();
        }
        let mut problem = Problem::new(self.code, self.detail.clone());
        problem.current.clone_from(&self.current);
        problem
    }

    /// 500 `internal`: a bug. The cause is logged, never sent.
    pub fn internal(cause: &dyn std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "internal error");
        Self::new(ErrorCode::Internal, "internal error")
    }
}

/// Builds a problem+json response with the given body (already serialized).
pub fn problem_response(status: u16, body: String) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut res = (status, body).into_response();
    res.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
    if status == StatusCode::SERVICE_UNAVAILABLE {
        res.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(RETRY_AFTER_SECS));
    }
    if status == StatusCode::REQUEST_TIMEOUT {
        // The rest of a slow body may still be on its way: this connection cannot carry another
        // request (RFC 9110 §15.5.9).
        res.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    res
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let problem = self.problem();
        let mut res = problem_response(problem.status, problem.to_json());
        if let Some(secs) = self.closed.and_then(Closed::retry_after_secs) {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        res
    }
}

/// `409 not_started` / `sale_ended` / `sale_paused`: the problem of [`Closed::problem`] (with
/// `starts_at` / `ends_at`) and, but for an ended sale, `Retry-After`.
impl From<Closed> for ApiError {
    fn from(closed: Closed) -> Self {
        let problem = closed.problem();
        Self {
            code: problem.code,
            detail: problem.detail,
            current: None,
            closed: Some(closed),
        }
    }
}

impl From<shared::wire::BodyError> for ApiError {
    fn from(e: shared::wire::BodyError) -> Self {
        Self::new(ErrorCode::InvalidRequest, e.to_string())
    }
}

impl From<shared::DomainError> for ApiError {
    fn from(e: shared::DomainError) -> Self {
        Self::new(ErrorCode::InvalidRequest, e.to_string())
    }
}
