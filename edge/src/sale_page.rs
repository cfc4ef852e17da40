//! `GET /sale/{sku}`: the shopper's sale page, served by the edge from the Worker itself (no
//! I/O: the page asks the edge's own API for the SKU and buys through it).
//!
//! One HTML document with its CSS and JavaScript inline (one request in the seconds around the
//! start, no third-party request of any kind), embedded at build time from `sale_page/page.*`.
//! The inline `<style>` and `<script>` are allowed by their SHA-256 in a strict
//! `Content-Security-Policy` (`default-src 'none'`, no `'unsafe-inline'`, only `connect-src 'self'`,
//! Trusted Types required, no framing); the hashes are computed from the embedded text once per
//! instance, so they can never drift from what is served. The document is the same for every
//! SKU and shopper (the SKU is read from the path by the script, the session from the HttpOnly
//! cookie or, in a local demo, the URL fragment), so it may be cached briefly.

use std::sync::OnceLock;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest, Sha256};
use shared::{ErrorCode, Sku};

use crate::reply::Reply;

/// The path prefix of the page.
pub const PREFIX: &str = "/sale/";

const HTML: &str = include_str!("sale_page/page.html");
const CSS: &str = include_str!("sale_page/page.css");
const JS: &str = include_str!("sale_page/page.js");

/// Where the style and the script go in `page.html`.
const STYLE_MARK: &str = "<!--STYLE-->";
const SCRIPT_MARK: &str = "<!--SCRIPT-->";

/// `Cache-Control` of the page: identical for everyone, so browsers and the CDN may keep it a
/// minute (a deploy reaches every shopper within that).
pub const CACHE_CONTROL: &str = "public, max-age=60";

/// The assembled page and its policy, built once per Worker instance.
#[derive(Debug)]
struct Page {
    html: String,
    csp: String,
}

fn page() -> &'static Page {
    static PAGE: OnceLock<Page> = OnceLock::new();
    PAGE.get_or_init(|| Page {
        html: HTML
            .replacen(STYLE_MARK, &format!("<style>{CSS}</style>"), 1)
            .replacen(SCRIPT_MARK, &format!("<script>{JS}</script>"), 1),
        csp: content_security_policy(CSS, JS),
    })
}

/// `'sha256-<base64>'` of an inline element's text.
pub fn csp_hash(text: &str) -> String {
    format!(
        "'sha256-{}'",
        STANDARD.encode(Sha256::digest(text.as_bytes()))
    )
}

/// The page's policy: nothing but its own inline style and script (by hash) and calls to the
/// edge itself.
pub fn content_security_policy(css: &str, js: &str) -> String {
    format!(
        "default-src 'none'; script-src {}; style-src {}; connect-src 'self'; img-src 'self'; \
         base-uri 'none'; form-action 'none'; frame-ancestors 'none'; \
         require-trusted-types-for 'script'; trusted-types 'none'",
        csp_hash(js),
        csp_hash(css)
    )
}

/// The answer to `GET /sale/{raw_sku}`: the page, or 400 `invalid_request` for a malformed SKU.
pub fn reply(raw_sku: &str) -> Reply {
    if Sku::parse(raw_sku).is_err() {
        return Reply::problem(
            ErrorCode::InvalidRequest,
            shared::DomainError::InvalidSku.to_string(),
        );
    }
    let page = page();
    Reply {
        status: 200,
        headers: vec![("content-type".into(), "text/html; charset=utf-8".into())],
        body: page.html.clone(),
    }
    .with_header("content-security-policy", page.csp.as_str())
    .with_header("x-content-type-options", "nosniff")
    .with_header("x-frame-options", "DENY")
    .with_header("referrer-policy", "no-referrer")
    .with_header("cross-origin-opener-policy", "same-origin")
    .with_header("cache-control", CACHE_CONTROL)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text between the first `open` tag and its closing tag.
    fn element<'a>(html: &'a str, open: &str, close: &str) -> &'a str {
        let start = html.find(open).expect("open tag") + open.len();
        let end = start + html[start..].find(close).expect("close tag");
        &html[start..end]
    }

    #[test]
    fn the_page_is_html_under_a_strict_policy() {
        let r = reply("DEMO-1");
        assert_eq!(r.status, 200);
        assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
        assert_eq!(r.header("x-content-type-options"), Some("nosniff"));
        assert_eq!(r.header("cache-control"), Some(CACHE_CONTROL));
        let csp = r.header("content-security-policy").expect("csp");
        assert!(csp.starts_with("default-src 'none';"), "{csp}");
        assert!(csp.contains("connect-src 'self';"), "{csp}");
        assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
        assert!(!csp.contains("unsafe"), "{csp}");
        assert!(!csp.contains("http"), "no other host is allowed: {csp}");
    }

    #[test]
    fn the_policy_allows_exactly_the_served_style_and_script() {
        let r = reply("A");
        let csp = r.header("content-security-policy").expect("csp");
        let script = element(&r.body, "<script>", "</script>");
        let style = element(&r.body, "<style>", "</style>");
        assert_eq!(script, JS);
        assert_eq!(style, CSS);
        assert!(
            csp.contains(&format!("script-src {};", csp_hash(script))),
            "{csp}"
        );
        assert!(
            csp.contains(&format!("style-src {};", csp_hash(style))),
            "{csp}"
        );
        assert_eq!(r.body.matches("<script").count(), 1, "one script, inline");
        assert!(!r.body.contains(STYLE_MARK) && !r.body.contains(SCRIPT_MARK));
    }

    #[test]
    fn the_page_makes_no_third_party_request_and_has_no_inline_handlers() {
        let body = reply("A").body;
        for needle in [
            "http://",
            "https://",
            "//cdn",
            " style=",
            " onclick=",
            " onload=",
        ] {
            assert!(!body.contains(needle), "{needle}");
        }
        // The script never parses HTML (Trusted Types are required: it would throw).
        assert!(!JS.contains("innerHTML") && !JS.contains("outerHTML"));
    }

    #[test]
    fn a_known_hash() {
        // echo -n 'alert(1)' | openssl dgst -sha256 -binary | base64
        assert_eq!(
            csp_hash("alert(1)"),
            "'sha256-bhHHL3z2vDgxUt0W3dWQOrprscmda2Y5pLsLg4GF+pI='"
        );
    }

    #[test]
    fn a_malformed_sku_is_refused() {
        for raw in ["a b", "%3Cscript%3E", &"x".repeat(65)] {
            let r = reply(raw);
            assert_eq!((r.status, r.code()), (400, Some(ErrorCode::InvalidRequest)));
        }
    }
}
