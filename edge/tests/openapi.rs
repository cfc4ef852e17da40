//! The edge's OpenAPI description: the committed `docs/openapi-edge.json` (which the Worker
//! serves at `GET /openapi.json`) is what the generator in `edge::openapi` produces. After an API
//! change, regenerate it with `UPDATE_OPENAPI=1 cargo test -p edge --test openapi` (the served
//! copy is embedded at build time, so run the tests once more without it to check).

use edge::routes::{Route, route, static_reply};

const COMMITTED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi-edge.json");

#[test]
fn the_committed_description_is_the_generated_one() {
    let generated = edge::openapi::json();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(COMMITTED, format!("{generated}\n")).expect("write");
    }
    let on_disk = std::fs::read_to_string(COMMITTED).expect("docs/openapi-edge.json exists");
    assert_eq!(
        on_disk.trim_end(),
        generated,
        "docs/openapi-edge.json is stale: regenerate it (see this file's doc comment)"
    );
}

#[test]
fn the_description_covers_every_route_and_is_openapi_3_1() {
    let doc: serde_json::Value = serde_json::from_str(&edge::openapi::json()).expect("json");
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        doc["openapi"]
    );
    for (method, path) in [
        ("post", "/v1/purchases"),
        ("get", "/v1/challenge"),
        ("get", "/v1/orders/{order_id}"),
        ("post", "/v1/orders/{order_id}/cancel"),
        ("get", "/v1/skus/{sku}"),
        ("post", "/v1/queue/{sku}"),
        ("get", "/v1/queue/{sku}"),
        ("get", "/v1/queue/{sku}/stats"),
        ("get", "/sale/{sku}"),
        ("get", "/sale-worker.js"),
        ("get", "/warmup"),
        ("get", "/healthz"),
        ("get", "/readyz"),
        ("get", "/openapi.json"),
    ] {
        assert!(doc["paths"][path][method].is_object(), "{method} {path}");
        let concrete = path
            .replace("{sku}", "SKU-1")
            .replace("{order_id}", "0192f1c2-7b3a-7c4d-9e8f-0123456789ab");
        assert_ne!(
            route(&method.to_uppercase(), &concrete),
            Route::NotFound,
            "{path} is documented but not routed"
        );
    }
    assert_eq!(
        doc["paths"].as_object().map(|p| p.len()),
        Some(13),
        "a route was added without documenting it, or the other way round"
    );
}

#[test]
fn the_edge_serves_the_committed_copy() {
    let reply = static_reply(&route("GET", "/openapi.json")).expect("static");
    assert_eq!(reply.status, 200);
    let served: serde_json::Value = serde_json::from_str(&reply.body).expect("json");
    let on_disk: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(COMMITTED).expect("read")).expect("json");
    assert_eq!(served, on_disk);
    assert_eq!(
        reply.header("content-type"),
        Some("application/json"),
        "{:?}",
        reply.headers
    );
}
