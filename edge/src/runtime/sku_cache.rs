//! The Cache API (per data center) holding SKU views and shield facts. Cache failures never fail
//! a request: a miss is assumed and the origin decides.

use worker::{Cache, Headers, Response};

use crate::cache_policy::cache_control;
use crate::shield::SkuFacts;

/// The cached body under `key`, if any.
pub(crate) async fn get_text(key: &str) -> Option<String> {
    let mut response = Cache::default().get(key, true).await.ok().flatten()?;
    if response.status_code() != 200 {
        return None;
    }
    response.text().await.ok()
}

/// Caches `body` (JSON) under `key` for `ttl_secs`.
pub(crate) async fn put_json(key: &str, body: &str, ttl_secs: u32) {
    let stored = async {
        let headers = Headers::new();
        headers.set("content-type", "application/json")?;
        headers.set("cache-control", &cache_control(ttl_secs))?;
        let response = Response::builder()
            .with_status(200)
            .with_headers(headers)
            .fixed(body.as_bytes().to_vec());
        Cache::default().put(key, response).await
    };
    if let Err(e) = stored.await {
        worker::console_warn!("cache put {key} failed: {e}");
    }
}

/// Removes the entry under `key`, if any.
pub(crate) async fn delete(key: &str) {
    if let Err(e) = Cache::default().delete(key, true).await {
        worker::console_warn!("cache delete {key} failed: {e}");
    }
}

/// The shield facts under `key` (nothing known on a miss).
pub(crate) async fn get_facts(key: &str) -> SkuFacts {
    get_text(key)
        .await
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}

/// Stores shield facts under `key` for `ttl_secs`.
pub(crate) async fn put_facts(key: &str, facts: &SkuFacts, ttl_secs: u32) {
    match serde_json::to_string(facts) {
        Ok(body) => put_json(key, &body, ttl_secs).await,
        Err(e) => worker::console_error!("serializing sku facts failed: {e}"),
    }
}
