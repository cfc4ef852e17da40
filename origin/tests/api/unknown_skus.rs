//! Purchases of SKUs that do not exist are answered (and stored) `404 unknown_sku` without
//! touching the SKU lock: shopper input never creates a Redis key, so with `noeviction` nodes
//! cannot be filled by purchases of made-up SKUs.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use sqlx::PgPool;

use crate::helpers::{TestApp, assert_problem, spawn_app_with};
use crate::redis_nodes::RedisNodes;

/// Distinct unknown SKUs bought.
const N: usize = 10_000;
/// Purchases in flight at a time.
const PARALLEL: usize = 32;
/// The origin's default `LOCK_TTL_MS`: any lock key expires within it.
const LOCK_TTL: Duration = Duration::from_millis(2_000);

/// Reads a metric's value from the text exposition.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

async fn dbsizes(nodes: &RedisNodes) -> Vec<i64> {
    let mut sizes = Vec::new();
    for url in nodes.urls() {
        let client = redis::Client::open(url.as_str()).expect("client");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let size: i64 = redis::cmd("DBSIZE")
            .query_async(&mut conn)
            .await
            .expect("DBSIZE");
        sizes.push(size);
    }
    sizes
}

/// One purchase, retried with the same key after a 503 (never stored; any client may):
/// "status code" of the final answer.
async fn buy(app: &TestApp, user: &str, key: &str, sku: &str) -> String {
    for _ in 0..10 {
        let res = app.buy(user, key, sku, 1).await;
        let status = res.status().as_u16();
        if status == 503 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let body: serde_json::Value = res.json().await.expect("json");
        return format!("{status} {}", body["code"].as_str().unwrap_or("-"));
    }
    "503 (10 times)".to_owned()
}

#[sqlx::test(migrations = "./migrations")]
async fn ten_thousand_unknown_skus_create_no_redis_key(pool: PgPool) {
    let nodes = RedisNodes::start(3).await;
    let urls = nodes.urls().join(",");
    let app = spawn_app_with(pool.clone(), &[("REDIS_URLS", urls.as_str())]).await;
    // A real sale first, so the baseline holds everything a sale leaves (its fence counter).
    app.put_sku("REAL", 10, 10).await;
    assert_eq!(app.buy("u", "k", "REAL", 1).await.status(), 201);
    tokio::time::sleep(LOCK_TTL).await;
    let baseline = dbsizes(&nodes).await;
    let locks_before = metric(&app.metrics().await, "origin_lock_acquisitions_total");

    let started = Instant::now();
    let answers: Vec<String> = futures::stream::iter(0..N)
        .map(|i| {
            let app = &app;
            async move {
                buy(
                    app,
                    &format!("user{i}"),
                    &format!("k{i}"),
                    &format!("NOPE-{i}"),
                )
                .await
            }
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    let took = started.elapsed();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for a in answers {
        *counts.entry(a).or_default() += 1;
    }
    let right_after = dbsizes(&nodes).await;
    eprintln!(
        "{N} unknown SKUs in {took:.1?}: {counts:?}; DBSIZE before {baseline:?}, right after {right_after:?}"
    );
    assert_eq!(
        counts,
        BTreeMap::from([("404 unknown_sku".to_owned(), N)]),
        "every answer a stored 404"
    );
    // Every node is back at its baseline within the lock TTL (it should not have moved at all).
    let deadline = Instant::now() + LOCK_TTL + Duration::from_secs(1);
    let mut sizes = dbsizes(&nodes).await;
    while sizes != baseline && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        sizes = dbsizes(&nodes).await;
    }
    assert_eq!(sizes, baseline, "DBSIZE per node after {N} unknown SKUs");
    let locks_after = metric(&app.metrics().await, "origin_lock_acquisitions_total");
    assert_eq!(
        locks_after, locks_before,
        "no lock taken for an unknown SKU"
    );

    // The 404 is stored: the same key replays it.
    let replay = app.buy("user7", "k7", "NOPE-7", 1).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_problem(replay, 404, "unknown_sku").await;
}

#[sqlx::test(migrations = "./migrations")]
async fn a_sku_created_right_after_being_unknown_sells_normally(pool: PgPool) {
    let nodes = RedisNodes::start(3).await;
    let urls = nodes.urls().join(",");
    let env = [("REDIS_URLS", urls.as_str())];
    let a = spawn_app_with(pool.clone(), &env).await;
    let b = spawn_app_with(pool.clone(), &env).await;
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
