//! Health, readiness, metrics, unknown routes, and dependency failure.

use sqlx::PgPool;

use crate::helpers::{assert_problem, settings, spawn_app};

#[sqlx::test(migrations = "./migrations")]
async fn health_ready_and_metrics(pool: PgPool) {
    let app = spawn_app(pool).await;
    let health = app
        .client
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .expect("req");
    assert_eq!(health.status(), 200);
    let ready = app
        .client
        .get(format!("{}/readyz", app.base))
        .send()
        .await
        .expect("req");
    assert_eq!(ready.status(), 200);
    app.put_sku("M", 5, 5).await;
    assert_eq!(app.buy("alice", "k", "M", 1).await.status(), 201);
    let res = app
        .client
        .get(format!("{}/metrics", app.base))
        .send()
        .await
        .expect("req");
    assert_eq!(
        res.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok()),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8"),
        "the exposition is OpenMetrics (it ends with # EOF) and must say so"
    );
    assert!(res.text().await.expect("text").ends_with("# EOF\n"));
    let text = app.metrics().await;
    assert!(text.contains("origin_purchase_requests_total 1"), "{text}");
    assert!(
        text.contains(r#"origin_purchases_total{outcome="created"} 1"#),
        "{text}"
    );
    assert!(
        text.contains("origin_purchase_duration_seconds_count 1"),
        "{text}"
    );
}

#[sqlx::test(migrations = "./migrations")]
async fn unknown_routes_and_methods_are_problems(pool: PgPool) {
    let app = spawn_app(pool).await;
    let res = app
        .client
        .get(format!("{}/nope", app.base))
        .send()
        .await
        .expect("req");
    assert_problem(res, 404, "not_found").await;
    let res = app
        .client
        .delete(format!("{}/v1/purchases", app.base))
        .send()
        .await
        .expect("req");
    assert_problem(res, 405, "method_not_allowed").await;
}

#[sqlx::test(migrations = "./migrations")]
async fn database_down_is_503_with_retry_after_and_readyz_503(pool: PgPool) {
    // A pool pointing at a port where no Postgres listens.
    let dead = origin::store::pool(
        "postgres://postgres@127.0.0.1:1/nothing",
        2,
        std::time::Duration::from_millis(500),
    )
    .expect("lazy pool");
    let db: (String,) = sqlx::query_as("SELECT current_database()")
        .fetch_one(&pool)
        .await
        .expect("db");
    let app = origin::Application::build_with_pool(settings(&db.0, &[]), dead)
        .await
        .expect("builds while db is down");
    let base = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until(std::future::pending()));
    let client = reqwest::Client::new();

    let ready = client
        .get(format!("{base}/readyz"))
        .send()
        .await
        .expect("req");
    assert_eq!(ready.status(), 503);
    let p = crate::helpers::Purchase::new("alice", "k", "TV", 1);
    let res = client
        .post(format!("{base}/v1/purchases"))
        .header("flashgate-user", "alice")
        .header("idempotency-key", "k")
        .header("flashgate-signature", p.header_value())
        .body(p.body.clone())
        .send()
        .await
        .expect("req");
    assert_eq!(res.headers()["retry-after"], "1");
    assert_problem(res, 503, "unavailable").await;
    let res = client
        .get(format!("{base}/v1/skus/TV"))
        .send()
        .await
        .expect("req");
    assert_eq!(res.headers()["retry-after"], "1");
    assert_problem(res, 503, "unavailable").await;
}

#[sqlx::test(migrations = "./migrations")]
async fn the_edges_request_id_is_echoed_and_one_is_made_otherwise(pool: PgPool) {
    let app = spawn_app(pool).await;
    let res = app
        .client
        .get(format!("{}/healthz", app.base))
        .header("flashgate-request-id", "edge-req-42")
        .send()
        .await
        .expect("req");
    assert_eq!(res.headers()["flashgate-request-id"], "edge-req-42");
    let res = app
        .client
        .get(format!("{}/healthz", app.base))
        .send()
        .await
        .expect("req");
    let made = res.headers()["flashgate-request-id"]
        .to_str()
        .expect("ascii");
    assert_eq!(made.len(), 36, "a uuid: {made}");
}

#[sqlx::test(migrations = "./migrations")]
async fn every_answer_is_no_store_and_names_its_request_even_when_refused_before_the_route(
    pool: PgPool,
) {
    let app = spawn_app(pool).await;
    app.put_sku("ENV", 5, 5).await;
    let purchase = app.buy("alice", "k-env", "ENV", 1).await;
    let unknown_route = app
        .client
        .get(format!("{}/no/such/route", app.base))
        .header("flashgate-request-id", "edge-req-404")
        .send()
        .await
        .expect("req");
    // Refused by the per-request limits, before any route runs.
    let oversized = app
        .client
        .get(format!("{}/healthz", app.base))
        .header("flashgate-request-id", "edge-req-431")
        .header("x-pad", "p".repeat(20 * 1024))
        .send()
        .await
        .expect("req");
    for (what, res, id) in [
        ("a purchase", &purchase, None),
        ("an unknown route", &unknown_route, Some("edge-req-404")),
        ("oversized header fields", &oversized, Some("edge-req-431")),
    ] {
        assert_eq!(res.headers()["cache-control"], "no-store", "{what}");
        let echoed = res.headers()["flashgate-request-id"]
            .to_str()
            .expect("ascii");
        match id {
            Some(id) => assert_eq!(echoed, id, "{what}"),
            None => assert_eq!(echoed.len(), 36, "{what}: a uuid, {echoed}"),
        }
    }
    assert_eq!(purchase.status(), 201);
    assert_problem(unknown_route, 404, "not_found").await;
    assert_problem(oversized, 431, "headers_too_large").await;
}

/// The served OpenAPI description matches the committed `docs/openapi.json`. After an API change,
/// regenerate it with `UPDATE_OPENAPI=1 cargo test -p origin --test api openapi`.
#[sqlx::test(migrations = "./migrations")]
async fn openapi_is_served_and_matches_the_committed_copy(pool: PgPool) {
    let app = spawn_app(pool).await;
    let res = app
        .client
        .get(format!("{}/openapi.json", app.base))
        .send()
        .await
        .expect("req");
    assert_eq!(res.status(), 200);
    let served = res.text().await.expect("body");
    let doc: serde_json::Value = serde_json::from_str(&served).expect("json");
    assert!(
        doc["openapi"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.1")),
        "{}",
        doc["openapi"]
    );
    for path in [
        "/v1/purchases",
        "/v1/skus/{sku}",
        "/v1/admin/skus/{sku}",
        "/healthz",
        "/readyz",
        "/metrics",
        "/v1/payments/stripe",
    ] {
        assert!(doc["paths"][path].is_object(), "missing {path}");
    }
    let committed = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/openapi.json");
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(committed, format!("{served}\n")).expect("write docs/openapi.json");
    }
    let on_disk = std::fs::read_to_string(committed).expect("docs/openapi.json exists");
    assert_eq!(
        on_disk.trim_end(),
        served,
        "docs/openapi.json is stale: regenerate it (see the test's doc comment)"
    );
}
