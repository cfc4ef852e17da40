//! Responses as plain data. Every handler produces a [`Reply`]; only the runtime adapter turns it
//! into a `worker::Response`, so the status, headers and bodies the edge sends are testable natively.

use shared::headers::{IDEMPOTENT_REPLAYED, PROBLEM_JSON};
use shared::{ErrorCode, Problem};

/// `Content-Type` of the JSON bodies that are not problems.
pub const JSON: &str = "application/json";

/// A response the edge sends: status, headers (lower-case names) and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// A JSON body with the given status.
    pub fn json(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            headers: vec![("content-type".into(), JSON.into())],
            body: body.into(),
        }
    }

    /// An `application/problem+json` answer for `code`.
    pub fn problem(code: ErrorCode, detail: impl Into<String>) -> Self {
        Self::from_problem(&Problem::new(code, detail))
    }

    /// An `application/problem+json` answer carrying `problem` (with its extension members).
    pub fn from_problem(problem: &Problem) -> Self {
        Self {
            status: problem.status,
            headers: vec![("content-type".into(), PROBLEM_JSON.into())],
            body: problem.to_json(),
        }
    }

    /// 503 `unavailable` with `Retry-After`, for a dependency (origin, Durable Object) that cannot
    /// be had. `detail` must be safe for clients: never an error's `Display`.
    pub fn unavailable(detail: impl Into<String>, retry_after_secs: u64) -> Self {
        Self::problem(ErrorCode::Unavailable, detail)
            .with_header("retry-after", retry_after_secs.max(1).to_string())
    }

    /// A stored outcome replayed for the same user, key and request.
    pub fn replay(status: u16, body: impl Into<String>) -> Self {
        Self::stored(status, body).with_header(IDEMPOTENT_REPLAYED, "true")
    }

    /// A stored purchase outcome (201 JSON or a problem), with the content type its status implies.
    pub fn stored(status: u16, body: impl Into<String>) -> Self {
        let content_type = if (200..300).contains(&status) {
            JSON
        } else {
            PROBLEM_JSON
        };
        Self {
            status,
            headers: vec![("content-type".into(), content_type.into())],
            body: body.into(),
        }
    }

    /// Adds (or replaces) a header.
    #[must_use]
    pub fn with_header(mut self, name: &str, value: impl Into<String>) -> Self {
        let name = name.to_ascii_lowercase();
        self.headers.retain(|(n, _)| *n != name);
        self.headers.push((name, value.into()));
        self
    }

    /// The value of a header, if set.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The problem `code` of this reply's body, if it is a problem.
    pub fn code(&self) -> Option<ErrorCode> {
        problem_code(self.body.as_bytes())
    }
}

/// The `code` member of a problem+json body, if the body is one with a known code.
pub fn problem_code(body: &[u8]) -> Option<ErrorCode> {
    #[derive(serde::Deserialize)]
    struct CodeOnly {
        code: ErrorCode,
    }
    serde_json::from_slice::<CodeOnly>(body)
        .ok()
        .map(|c| c.code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_reply_carries_status_type_and_code() {
        let r = Reply::problem(ErrorCode::IdempotencyInFlight, "wait");
        assert_eq!(r.status, 409);
        assert_eq!(r.header("Content-Type"), Some(PROBLEM_JSON));
        assert_eq!(r.code(), Some(ErrorCode::IdempotencyInFlight));
    }

    #[test]
    fn unavailable_always_has_a_positive_retry_after() {
        let r = Reply::unavailable("origin down", 0);
        assert_eq!((r.status, r.header("retry-after")), (503, Some("1")));
    }

    #[test]
    fn replay_marks_the_header_and_keeps_the_body() {
        let r = Reply::replay(201, r#"{"order_id":"o"}"#);
        assert_eq!(r.header(IDEMPOTENT_REPLAYED), Some("true"));
        assert_eq!(r.header("content-type"), Some(JSON));
        assert_eq!(r.body, r#"{"order_id":"o"}"#);
        assert_eq!(
            Reply::replay(409, "{}").header("content-type"),
            Some(PROBLEM_JSON)
        );
    }

    #[test]
    fn with_header_replaces_case_insensitively() {
        let r = Reply::json(200, "{}")
            .with_header("Retry-After", "1")
            .with_header("retry-after", "2");
        assert_eq!(
            r.headers.iter().filter(|(n, _)| n == "retry-after").count(),
            1
        );
        assert_eq!(r.header("RETRY-AFTER"), Some("2"));
    }

    #[test]
    fn problem_code_ignores_non_problems() {
        assert_eq!(problem_code(br#"{"order_id":"x"}"#), None);
        assert_eq!(problem_code(b"garbage"), None);
        assert_eq!(
            problem_code(br#"{"code":"sold_out"}"#),
            Some(ErrorCode::SoldOut)
        );
    }
}
