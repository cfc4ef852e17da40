//! The edge's routes, matched on method and path without the runtime.

use shared::ErrorCode;

use crate::reply::Reply;

/// A matched route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Healthz,
    /// `POST /v1/purchases`.
    Purchase,
    /// `GET /v1/skus/{sku}` with the raw (unvalidated) path segment.
    SkuView(String),
    /// `GET /warmup?sku=…`.
    Warmup,
    /// Known path, other method; `Allow` lists the methods.
    MethodNotAllowed(&'static str),
    NotFound,
}

/// Matches `method` (upper case) and `path` (no query string).
pub fn route(method: &str, path: &str) -> Route {
    let read = matches!(method, "GET" | "HEAD");
    match path {
        "/healthz" => {
            if read {
                Route::Healthz
            } else {
                Route::MethodNotAllowed("GET, HEAD")
            }
        }
        "/v1/purchases" => {
            if method == "POST" {
                Route::Purchase
            } else {
                Route::MethodNotAllowed("POST")
            }
        }
        "/warmup" => {
            if read {
                Route::Warmup
            } else {
                Route::MethodNotAllowed("GET, HEAD")
            }
        }
        _ => match path.strip_prefix("/v1/skus/") {
            Some(sku) if !sku.is_empty() && !sku.contains('/') => {
                if read {
                    Route::SkuView(sku.to_owned())
                } else {
                    Route::MethodNotAllowed("GET, HEAD")
                }
            }
            _ => Route::NotFound,
        },
    }
}

/// The answer of the routes that need no I/O.
pub fn static_reply(route: &Route) -> Option<Reply> {
    match route {
        Route::Healthz => {
            Some(Reply::json(200, r#"{"status":"ok"}"#).with_header("cache-control", "no-store"))
        }
        Route::MethodNotAllowed(allow) => Some(
            Reply::problem(
                ErrorCode::MethodNotAllowed,
                "method not allowed on this path",
            )
            .with_header("allow", *allow),
        ),
        Route::NotFound => Some(Reply::problem(ErrorCode::NotFound, "no such route")),
        Route::Purchase | Route::SkuView(_) | Route::Warmup => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_match() {
        assert_eq!(route("GET", "/healthz"), Route::Healthz);
        assert_eq!(route("POST", "/v1/purchases"), Route::Purchase);
        assert_eq!(
            route("GET", "/v1/purchases"),
            Route::MethodNotAllowed("POST")
        );
        assert_eq!(route("GET", "/v1/skus/A-1"), Route::SkuView("A-1".into()));
        assert_eq!(
            route("DELETE", "/v1/skus/A-1"),
            Route::MethodNotAllowed("GET, HEAD")
        );
        assert_eq!(route("GET", "/v1/skus/"), Route::NotFound);
        assert_eq!(route("GET", "/v1/skus/a/b"), Route::NotFound);
        assert_eq!(route("GET", "/warmup"), Route::Warmup);
        assert_eq!(route("GET", "/"), Route::NotFound);
        assert_eq!(route("PUT", "/v1/admin/skus/A"), Route::NotFound);
    }

    #[test]
    fn static_replies() {
        assert_eq!(static_reply(&Route::Healthz).map(|r| r.status), Some(200));
        let r = static_reply(&Route::MethodNotAllowed("POST")).expect("reply");
        assert_eq!((r.status, r.header("allow")), (405, Some("POST")));
        assert_eq!(static_reply(&Route::NotFound).map(|r| r.status), Some(404));
        assert_eq!(static_reply(&Route::Purchase), None);
    }
}
