//! Which shopper credential a `/v1/*` request carries, first thing on every shopper route
//! (purchases, a shopper's orders), before the token is verified ([`crate::jwt`]).
//!
//! Two carriers:
//! - `Authorization: Bearer <token>` — API clients, and the sale page in a local demo (token from
//!   its URL fragment). When the header is present it alone decides, exactly as before cookies
//!   existed: a cookie sent alongside is ignored.
//! - the `flashgate_session` cookie (HttpOnly, set by the shop on the edge's host) — shoppers'
//!   browsers on the sale page. A browser attaches a cookie to requests that other sites make it
//!   send, so a cookie alone proves nothing about who asked: a cookie request must also carry the
//!   page's `X-Flashgate-CSRF: 1` header (a cross-site page cannot send a custom header without a
//!   CORS preflight, which the edge never grants), and when the browser says where the request
//!   comes from (`Origin`, `Sec-Fetch-Site`), that must be the edge itself. Anything else is
//!   `403 csrf_rejected` and goes no further (no token check, no rate-limit unit, no origin call).
//!
//! No credential at all is the `401 unauthenticated` of a missing token, as before.

use shared::ErrorCode;

use crate::jwt::{self, TokenError};
use crate::reply::Reply;

/// The session cookie the shop sets for the edge's host.
pub const COOKIE_NAME: &str = "flashgate_session";
/// The header the sale page sends with every cookie-authenticated call.
pub const CSRF_HEADER: &str = "x-flashgate-csrf";
/// Its only accepted value.
pub const CSRF_VALUE: &str = "1";
/// Longest cookie value taken as a token (a JWT of the edge is far shorter).
const MAX_TOKEN_LEN: usize = 4096;

/// The request headers that name the credential, as received (`None`: absent).
#[derive(Debug, Clone, Copy, Default)]
pub struct SessionHeaders<'a> {
    pub authorization: Option<&'a str>,
    pub cookie: Option<&'a str>,
    /// `X-Flashgate-CSRF`.
    pub csrf: Option<&'a str>,
    pub origin: Option<&'a str>,
    pub sec_fetch_site: Option<&'a str>,
}

/// The credential of a request that passed the CSRF defence; its token is not verified yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential<'a> {
    /// An `Authorization` header (any scheme: a non-Bearer one is a missing token, as before).
    Header(&'a str),
    /// The `flashgate_session` cookie's value.
    Cookie(&'a str),
    /// Neither.
    Absent,
}

impl<'a> Credential<'a> {
    /// A credential from an `Authorization` header alone (API clients, tests).
    pub fn from_authorization(authorization: Option<&'a str>) -> Self {
        authorization.map_or(Self::Absent, Self::Header)
    }

    /// The token to verify.
    pub fn token(&self) -> Result<&'a str, TokenError> {
        match self {
            Self::Header(value) => jwt::bearer_token(Some(value)),
            Self::Cookie(token) => Ok(token),
            Self::Absent => Err(TokenError::Missing),
        }
    }
}

/// Why a cookie request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CsrfError {
    #[error("a request authenticated by the session cookie must carry `X-Flashgate-CSRF: 1`")]
    MissingHeader,
    #[error("a request authenticated by the session cookie must come from this site")]
    CrossSite,
}

impl CsrfError {
    /// The `403 csrf_rejected` answer.
    pub fn reply(self) -> Reply {
        Reply::problem(ErrorCode::CsrfRejected, self.to_string())
            .with_header("cache-control", "private, no-store")
    }
}

/// Picks the credential of a request to the edge at `self_origin` (`scheme://host[:port]`):
/// `Authorization` when present, else the session cookie under the CSRF defence, else none.
pub fn credential<'a>(
    headers: &SessionHeaders<'a>,
    self_origin: &str,
) -> Result<Credential<'a>, CsrfError> {
    if let Some(authorization) = headers.authorization {
        return Ok(Credential::Header(authorization));
    }
    let Some(token) = headers.cookie.and_then(session_cookie) else {
        return Ok(Credential::Absent);
    };
    if headers.csrf.map(str::trim) != Some(CSRF_VALUE) {
        return Err(CsrfError::MissingHeader);
    }
    let foreign_origin = headers
        .origin
        .is_some_and(|origin| !origin.trim().eq_ignore_ascii_case(self_origin));
    let foreign_site = headers
        .sec_fetch_site
        .is_some_and(|site| !site.trim().eq_ignore_ascii_case("same-origin"));
    if foreign_origin || foreign_site {
        return Err(CsrfError::CrossSite);
    }
    Ok(Credential::Cookie(token))
}

/// The first non-empty `flashgate_session` value of a `Cookie` header (RFC 6265 `name=value`
/// pairs separated by `;`; a value may be DQUOTE-wrapped).
pub fn session_cookie(cookie_header: &str) -> Option<&str> {
    cookie_header.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        if name.trim() != COOKIE_NAME {
            return None;
        }
        let value = value.trim();
        let value = value
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(value);
        (!value.is_empty() && value.len() <= MAX_TOKEN_LEN).then_some(value)
    })
}

/// The `401 unauthenticated` answer for a token that does not verify.
pub fn unauthenticated(e: TokenError) -> Reply {
    Reply::problem(ErrorCode::Unauthenticated, e.detail()).with_header("www-authenticate", "Bearer")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SELF: &str = "https://shop.example";

    fn cookie_request<'a>(cookie: &'a str) -> SessionHeaders<'a> {
        SessionHeaders {
            cookie: Some(cookie),
            csrf: Some("1"),
            origin: Some(SELF),
            sec_fetch_site: Some("same-origin"),
            ..SessionHeaders::default()
        }
    }

    #[test]
    fn the_authorization_header_wins_and_needs_no_csrf_header() {
        let h = SessionHeaders {
            authorization: Some("Bearer a.b.c"),
            cookie: Some("flashgate_session=x.y.z"),
            origin: Some("https://evil.example"),
            sec_fetch_site: Some("cross-site"),
            ..SessionHeaders::default()
        };
        let c = credential(&h, SELF).expect("bearer");
        assert_eq!(c, Credential::Header("Bearer a.b.c"));
        assert_eq!(c.token(), Ok("a.b.c"));
        // A non-Bearer header is a missing token, even with a cookie beside it (as before).
        let h = SessionHeaders {
            authorization: Some("Basic Zm9v"),
            ..cookie_request("flashgate_session=x.y.z")
        };
        assert_eq!(
            credential(&h, SELF).expect("header").token(),
            Err(TokenError::Missing)
        );
    }

    #[test]
    fn a_same_origin_cookie_request_with_the_header_is_accepted() {
        let c =
            credential(&cookie_request("a=1; flashgate_session=x.y.z; b=2"), SELF).expect("cookie");
        assert_eq!(c, Credential::Cookie("x.y.z"));
        assert_eq!(c.token(), Ok("x.y.z"));
        // Browsers that send neither Origin nor Sec-Fetch-Site: the header alone suffices.
        let h = SessionHeaders {
            cookie: Some("flashgate_session=\"x.y.z\""),
            csrf: Some("1"),
            ..SessionHeaders::default()
        };
        assert_eq!(credential(&h, SELF), Ok(Credential::Cookie("x.y.z")));
    }

    #[test]
    fn a_cookie_request_without_the_defence_is_rejected() {
        let base = cookie_request("flashgate_session=x.y.z");
        for (h, want) in [
            (
                SessionHeaders { csrf: None, ..base },
                CsrfError::MissingHeader,
            ),
            (
                SessionHeaders {
                    csrf: Some("0"),
                    ..base
                },
                CsrfError::MissingHeader,
            ),
            (
                SessionHeaders {
                    origin: Some("https://evil.example"),
                    ..base
                },
                CsrfError::CrossSite,
            ),
            (
                SessionHeaders {
                    origin: Some("null"),
                    ..base
                },
                CsrfError::CrossSite,
            ),
            (
                SessionHeaders {
                    sec_fetch_site: Some("same-site"),
                    ..base
                },
                CsrfError::CrossSite,
            ),
            (
                SessionHeaders {
                    sec_fetch_site: Some("cross-site"),
                    origin: None,
                    ..base
                },
                CsrfError::CrossSite,
            ),
        ] {
            assert_eq!(credential(&h, SELF), Err(want), "{h:?}");
        }
        let r = CsrfError::MissingHeader.reply();
        assert_eq!((r.status, r.code()), (403, Some(ErrorCode::CsrfRejected)));
        assert_eq!(
            r.header("content-type"),
            Some(shared::headers::PROBLEM_JSON)
        );
    }

    #[test]
    fn no_credential_is_a_missing_token() {
        for cookie in [None, Some("other=1"), Some("flashgate_session="), Some("")] {
            let h = SessionHeaders {
                cookie,
                ..SessionHeaders::default()
            };
            let c = credential(&h, SELF).expect("absent");
            assert_eq!(c, Credential::Absent, "{cookie:?}");
            assert_eq!(c.token(), Err(TokenError::Missing));
        }
        let r = unauthenticated(TokenError::Missing);
        assert_eq!(
            (r.status, r.header("www-authenticate")),
            (401, Some("Bearer"))
        );
    }

    #[test]
    fn cookie_parsing() {
        assert_eq!(session_cookie("flashgate_session=t"), Some("t"));
        assert_eq!(
            session_cookie(" x=1 ;flashgate_session = t ; y=2"),
            Some("t")
        );
        assert_eq!(session_cookie("flashgate_session_x=t"), None);
        assert_eq!(session_cookie("xflashgate_session=t"), None);
        assert_eq!(
            session_cookie("flashgate_session=; flashgate_session=t2"),
            Some("t2")
        );
        assert_eq!(session_cookie("garbage"), None);
        let long = format!("flashgate_session={}", "a".repeat(MAX_TOKEN_LEN + 1));
        assert_eq!(session_cookie(&long), None);
    }
}
