//! What the edge caches, under which keys and for how long.
//!
//! Two kinds of entries per SKU live in the Cache API (which is **per data center**: a warmup
//! primes the data center that served it, and each data center fills its own cache on misses):
//! - the public SKU view (`GET /v1/skus/{sku}`), `max-age = SKU_CACHE_TTL_SECS`, short because
//!   `stock` moves during a sale;
//! - the SKU facts of the shields ([`crate::shield::SkuFacts`]), kept `SKU_FACTS_TTL_SECS`;
//! - the mark that a SKU is unknown to the origin (its `GET /v1/skus/{sku}` was 404), kept
//!   `SKU_MISSING_TTL_SECS` (a few seconds): repeated views of a name that does not exist cost
//!   one origin query per data center and period instead of one each. A warmup that finds the SKU
//!   removes the mark; otherwise a SKU created meanwhile shows up when the mark expires.
//!
//! Keys live under a reserved path of the edge's own host, so they can never collide with a URL a
//! client could request and be served from the cache by accident.

use shared::{Sku, SkuView};

/// Response header saying whether a SKU view came from the cache.
pub const CACHE_STATUS_HEADER: &str = "flashgate-cache";

/// Cache key of a SKU's public view.
pub fn view_key(base: &str, sku: &Sku) -> String {
    format!(
        "{}/__flashgate/cache/v1/sku-view/{sku}",
        base.trim_end_matches('/')
    )
}

/// Cache key of a SKU's shield facts.
/// The Cache API key of a waiting room's published state (`crate::room::admission::RoomState`),
/// kept one second.
pub fn room_state_key(base: &str, sku: &Sku) -> String {
    format!(
        "{}/__flashgate/cache/v1/room-state/{sku}",
        base.trim_end_matches('/')
    )
}

pub fn facts_key(base: &str, sku: &Sku) -> String {
    format!(
        "{}/__flashgate/cache/v1/sku-facts/{sku}",
        base.trim_end_matches('/')
    )
}

/// Cache key of the mark that a SKU is unknown to the origin.
pub fn missing_key(base: &str, sku: &Sku) -> String {
    format!(
        "{}/__flashgate/cache/v1/sku-missing/{sku}",
        base.trim_end_matches('/')
    )
}

/// `Cache-Control` of a cached entry (and of the SKU view sent to clients) kept `ttl_secs`.
pub fn cache_control(ttl_secs: u32) -> String {
    format!("public, max-age={ttl_secs}")
}

/// Parses an origin `200` body as the view of `sku`; a body for another SKU or of another shape is
/// not cached (and is treated as the origin misbehaving).
pub fn parse_view(sku: &Sku, body: &[u8]) -> Option<SkuView> {
    serde_json::from_slice::<SkuView>(body)
        .ok()
        .filter(|v| v.sku == sku.as_str())
}

/// What to do with an origin answer to `GET /v1/skus/{sku}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OriginView {
    /// 200 with a valid view: serve it, cache it, learn from it.
    Found(SkuView),
    /// 404: pass on, and remember for `SKU_MISSING_TTL_SECS` (the SKU may be created any moment,
    /// so only briefly).
    Missing,
    /// Anything else: the origin cannot be had (503 to the client).
    Unavailable,
}

/// Classifies an origin answer to `GET /v1/skus/{sku}`.
pub fn classify_view(sku: &Sku, status: u16, body: &[u8]) -> OriginView {
    match status {
        200 => parse_view(sku, body).map_or(OriginView::Unavailable, OriginView::Found),
        404 => OriginView::Missing,
        _ => OriginView::Unavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sku(s: &str) -> Sku {
        Sku::parse(s).expect("valid sku")
    }

    #[test]
    fn keys_are_reserved_and_distinct() {
        let a = sku("A");
        assert_eq!(
            view_key("https://edge.example/", &a),
            "https://edge.example/__flashgate/cache/v1/sku-view/A"
        );
        assert_ne!(view_key("https://e", &a), facts_key("https://e", &a));
        assert_eq!(
            missing_key("https://edge.example/", &a),
            "https://edge.example/__flashgate/cache/v1/sku-missing/A"
        );
        assert_ne!(missing_key("https://e", &a), view_key("https://e", &a));
        assert_ne!(missing_key("https://e", &a), facts_key("https://e", &a));
    }

    #[test]
    fn origin_views_are_classified() {
        let a = sku("A");
        let body = br#"{"sku":"A","name":"Shoe","price_cents":100,"stock":3,"max_per_user":2}"#;
        assert!(matches!(classify_view(&a, 200, body), OriginView::Found(v) if v.stock == 3));
        assert_eq!(classify_view(&sku("B"), 200, body), OriginView::Unavailable);
        assert_eq!(classify_view(&a, 200, b"{}"), OriginView::Unavailable);
        assert_eq!(classify_view(&a, 404, b""), OriginView::Missing);
        assert_eq!(classify_view(&a, 503, b""), OriginView::Unavailable);
        assert_eq!(cache_control(5), "public, max-age=5");
    }
}
