//! Purchases of SKUs that do not exist are answered (and stored) `404 unknown_sku` without
//! touching the SKU lock (the 10,000-SKU test against the real binary is
//! `tests/unknown_skus_process.rs`); a SKU created right after being unknown sells normally.

use sqlx::PgPool;

use crate::helpers::{assert_problem, metric, spawn_app_with};
use crate::redis_nodes::RedisNodes;

async fn dbsizes(nodes: &RedisNodes) -> Vec<i64> {
    crate::probes::dbsizes(&nodes.urls()).await
}

#[sqlx::test(migrations = "./migrations")]
async fn a_sku_created_right_after_being_unknown_sells_normally(pool: PgPool) {
    let nodes = RedisNodes::start(3).await;
    let urls = nodes.urls().join(",");
    let env = [("REDIS_URLS", urls.as_str())];
    let a = spawn_app_with(pool.clone(), &env).await;
    let b = spawn_app_with(pool.clone(), &env).await;
    // Made-up SKUs: stored 404s, no lock taken, no Redis key created.
    let sizes = dbsizes(&nodes).await;
    let locks = metric(&b.metrics().await, "origin_lock_acquisitions_total");
    for i in 0..50 {
        let sku = format!("MADE-UP-{i}");
        assert_problem(
            b.buy("u0", &format!("m{i}"), &sku, 1).await,
            404,
            "unknown_sku",
        )
        .await;
    }
    assert_eq!(dbsizes(&nodes).await, sizes, "no Redis key created");
    let locks_now = metric(&b.metrics().await, "origin_lock_acquisitions_total");
    assert_eq!(locks_now, locks, "no lock taken");
    // b learns that NEW does not exist...
    assert_problem(b.buy("u1", "k1", "NEW", 1).await, 404, "unknown_sku").await;
    // ...and the SKU is created on a moment later: b sells it at once, under the lock.
    assert_eq!(a.put_sku("NEW", 2, 1).await.status(), 200);
    let locks_before = metric(&b.metrics().await, "origin_lock_acquisitions_total");
    let res = b.buy("u2", "k2", "NEW", 1).await;
    assert_eq!(res.status(), 201);
    let body: serde_json::Value = res.json().await.expect("json");
    assert_eq!(body["remaining"], 1);
    let locks_after = metric(&b.metrics().await, "origin_lock_acquisitions_total");
    assert_eq!(
        locks_after,
        locks_before + 1.0,
        "sold under the SKU's lease"
    );
    // The cap holds, and the earlier attempt keeps its stored answer.
    assert_problem(b.buy("u2", "k3", "NEW", 1).await, 409, "purchase_limit").await;
    let replay = b.buy("u1", "k1", "NEW", 1).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_problem(replay, 404, "unknown_sku").await;
    assert_eq!(a.stock("NEW").await, 1);
}

#[sqlx::test(migrations = "./migrations")]
async fn in_batches_of_one_unknown_skus_take_no_lock_either(pool: PgPool) {
    let nodes = RedisNodes::start(3).await;
    let urls = nodes.urls().join(",");
    let app = spawn_app_with(
        pool.clone(),
        &[("REDIS_URLS", urls.as_str()), ("BATCH_MAX", "1")],
    )
    .await;
    let sizes = dbsizes(&nodes).await;
    for i in 0..20 {
        let sku = format!("MADE-UP-{i}");
        assert_problem(
            app.buy("u", &format!("m{i}"), &sku, 1).await,
            404,
            "unknown_sku",
        )
        .await;
    }
    assert_eq!(dbsizes(&nodes).await, sizes, "no Redis key created");
    assert_eq!(
        metric(&app.metrics().await, "origin_lock_acquisitions_total"),
        0.0
    );
    // Created after being unknown: the stored 404 still replays, and it sells under the lock.
    assert_eq!(app.put_sku("MADE-UP-0", 1, 1).await.status(), 200);
    let replay = app.buy("u", "m0", "MADE-UP-0", 1).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_problem(replay, 404, "unknown_sku").await;
    assert_eq!(app.buy("u", "n0", "MADE-UP-0", 1).await.status(), 201);
    assert_eq!(
        metric(&app.metrics().await, "origin_lock_acquisitions_total"),
        2.0,
        "the replay and the sale, each under the lock"
    );
    assert_problem(app.buy("v", "n1", "MADE-UP-0", 1).await, 409, "sold_out").await;
}
