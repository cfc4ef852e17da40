//! Runtime glue shared by the handlers: settings from the environment, the clock, request header
//! access and the conversion of a [`Reply`] into a `worker::Response`.

use worker::{Date, Env, Headers, Request, Response};

use crate::config::{ConfigError, Settings};
use crate::reply::Reply;
use crate::session::{self, CSRF_HEADER, CsrfError, SessionHeaders};
use crate::url_parts;

/// Reads the settings from the Worker's vars and secrets.
pub(crate) fn settings(env: &Env) -> Result<Settings, ConfigError> {
    Settings::from_lookup(|name| env.var(name).ok().map(|v| v.to_string()))
}

/// Now, unix milliseconds. (`std::time::SystemTime` does not work in Workers.)
pub(crate) fn now_ms() -> i64 {
    i64::try_from(Date::now().as_millis()).unwrap_or(i64::MAX)
}

/// Two random 64-bit draws (for request ids: unique, not secret).
pub(crate) fn random_u64_pair() -> [u64; 2] {
    // Math.random has 52+ bits of state per draw; two draws are plenty for an id.
    let draw = || (worker::js_sys::Math::random() * 9_007_199_254_740_992.0) as u64;
    [draw(), draw() ^ Date::now().as_millis()]
}

/// Three random 64-bit words from the platform's CSPRNG (a new trace's ids: 128 bits of trace id,
/// 64 of parent id), or from [`random_u64_pair`] should it fail.
pub(crate) fn random_trace_ids() -> [u64; 3] {
    let mut bytes = [0u8; 24];
    if getrandom::fill(&mut bytes).is_err() {
        let [a, b] = random_u64_pair();
        let [c, _] = random_u64_pair();
        return [a, b, c];
    }
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
        u64::from_le_bytes(w)
    };
    [word(0), word(1), word(2)]
}

/// A request header's value, `None` when absent (or not readable).
pub(crate) fn header(req: &Request, name: &str) -> Option<String> {
    req.headers().get(name).ok().flatten()
}

/// `scheme://host[:port]` of the request, the base of the edge's cache keys.
pub(crate) fn base_url(req: &Request) -> String {
    url_parts::origin(&req.inner().url()).to_owned()
}

/// The decoded query pairs of the request URL.
pub(crate) fn query_pairs(req: &Request) -> Vec<(String, String)> {
    url_parts::form_pairs(url_parts::query(&req.inner().url()))
}

/// Turns a reply into a response.
pub(crate) fn to_response(reply: Reply) -> worker::Result<Response> {
    let headers = Headers::new();
    for (name, value) in &reply.headers {
        headers.set(name, value)?;
    }
    // The edge's clock, which the sale page's countdown runs on (workerd sends no Date itself).
    if reply.header("date").is_none() {
        headers.set(
            "date",
            &crate::http_date::format(now_ms().div_euclid(1_000)),
        )?;
    }
    Ok(Response::builder()
        .with_status(reply.status)
        .with_headers(headers)
        .fixed(reply.body.into_bytes()))
}

/// The headers that carry a shopper's credential ([`crate::session`]), owned.
#[derive(Debug, Default)]
pub(crate) struct SessionParts {
    authorization: Option<String>,
    cookie: Option<String>,
    csrf: Option<String>,
    origin: Option<String>,
    sec_fetch_site: Option<String>,
    /// This edge's own origin, `scheme://host[:port]`.
    self_origin: String,
}

impl SessionParts {
    pub(crate) fn read(req: &Request) -> Self {
        Self {
            authorization: header(req, "authorization"),
            cookie: header(req, "cookie"),
            csrf: header(req, CSRF_HEADER),
            origin: header(req, "origin"),
            sec_fetch_site: header(req, "sec-fetch-site"),
            self_origin: base_url(req),
        }
    }

    /// The shopper this request is from: the credential (or the CSRF refusal), then its token
    /// verified (or `401 unauthenticated`).
    pub(crate) fn shopper(&self, settings: &Settings) -> Result<shared::UserId, Reply> {
        let credential = self.credential().map_err(|e| e.reply())?;
        credential
            .token()
            .and_then(|token| {
                crate::jwt::verify_hs256(
                    token,
                    &settings.session_secrets,
                    &settings.session_rules,
                    now_ms() / 1_000,
                )
            })
            .map(|claims| claims.sub)
            .map_err(session::unauthenticated)
    }

    /// The credential, or the CSRF refusal ([`session::credential`]).
    pub(crate) fn credential(&self) -> Result<session::Credential<'_>, CsrfError> {
        let headers = SessionHeaders {
            authorization: self.authorization.as_deref(),
            cookie: self.cookie.as_deref(),
            csrf: self.csrf.as_deref(),
            origin: self.origin.as_deref(),
            sec_fetch_site: self.sec_fetch_site.as_deref(),
        };
        session::credential(&headers, &self.self_origin)
    }
}
