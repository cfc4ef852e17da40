//! Shopper input never creates a Redis key: the real `origin` binary, three `redis-server`
//! nodes of its own, and 10,000 purchases of 10,000 distinct SKUs that do not exist. Each is
//! answered (and stored) `404 unknown_sku` without the SKU's lock, so no node gains a key — with
//! the lock taken first, every node kept a fence counter per made-up SKU, without a TTL, and
//! under `noeviction` a full node answers every sale 503.

#[path = "common/probes.rs"]
mod probes;
#[path = "common/processes.rs"]
mod processes;
#[path = "../../redlock/tests/common/redis_nodes.rs"]
mod redis_nodes;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use processes::{EDGE_SECRET, OriginProcess, http_client, put_sku, signed_purchase};
use redis_nodes::RedisNodes;
use sqlx::PgPool;

/// Distinct unknown SKUs bought.
const N: usize = 10_000;
/// Purchases in flight at a time.
const PARALLEL: usize = 32;
/// The origin's default `LOCK_TTL_MS`: any lock key expires within it.
const LOCK_TTL: Duration = Duration::from_millis(2_000);

/// Keys and `used_memory` bytes of every node.
async fn redis_sizes(nodes: &RedisNodes) -> Vec<(i64, i64)> {
    let mut sizes = Vec::new();
    for url in nodes.urls() {
        let mut conn = probes::redis_connection(&url).await;
        let keys = probes::dbsize(&mut conn).await;
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut conn)
            .await
            .expect("INFO");
        let used = info
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        sizes.push((keys, used));
    }
    sizes
}

fn keys(sizes: &[(i64, i64)]) -> Vec<i64> {
    sizes.iter().map(|(k, _)| *k).collect()
}

async fn metric(client: &reqwest::Client, base: &str, name: &str) -> f64 {
    let text = probes::scrape_metrics(client, base).await;
    probes::metric_value(&text, name).unwrap_or(0.0)
}

/// One purchase, retried with the same key after a 503 (never stored; any client may):
/// (status, code, idempotent-replayed) of the final answer.
async fn buy(
    client: &reqwest::Client,
    base: &str,
    (user, key, sku): (&str, &str, &str),
) -> (u16, String, bool) {
    for _ in 0..10 {
        let res = signed_purchase(client, base, EDGE_SECRET, (user, key, sku))
            .send()
            .await
            .expect("no transport error");
        let status = res.status().as_u16();
        if status == 503 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let replayed = res.headers().contains_key("idempotent-replayed");
        let body: serde_json::Value = res.json().await.expect("json");
        let code = body["code"].as_str().unwrap_or("-").to_owned();
        return (status, code, replayed);
    }
    (503, "10 times".to_owned(), false)
}

#[sqlx::test(migrations = "./migrations")]
async fn ten_thousand_unknown_skus_leave_every_redis_node_as_it_was(pool: PgPool) {
    let nodes = RedisNodes::start(3).await;
    let origin = OriginProcess::start_on(&pool, &nodes.urls().join(","), &[]).await;
    let base = origin.base.clone();
    let client = http_client(PARALLEL, Duration::from_secs(30));
    // A real sale first, so the baseline holds what a sale leaves (its fence counter).
    put_sku(&client, &base, "REAL", 10, 10).await;
    assert_eq!(buy(&client, &base, ("u", "k", "REAL")).await.0, 201);
    tokio::time::sleep(LOCK_TTL).await;
    let baseline = redis_sizes(&nodes).await;
    let locks_before = metric(&client, &base, "origin_lock_acquisitions_total").await;

    let started = Instant::now();
    let answers: Vec<(u16, String, bool)> = futures::stream::iter(0..N)
        .map(|i| {
            let client = &client;
            let base = base.as_str();
            async move {
                let (user, key, sku) = (format!("user{i}"), format!("k{i}"), format!("NOPE-{i}"));
                buy(client, base, (&user, &key, &sku)).await
            }
        })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    let took = started.elapsed();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (status, code, _) in answers {
        *counts.entry(format!("{status} {code}")).or_default() += 1;
    }
    let right_after = redis_sizes(&nodes).await;
    eprintln!(
        "unknown_skus_process: {N} unknown SKUs in {took:.1?}: {counts:?}; Redis (keys, used_memory) per node before {baseline:?}, right after {right_after:?}"
    );
    assert_eq!(
        counts,
        BTreeMap::from([("404 unknown_sku".to_owned(), N)]),
        "every answer a stored 404"
    );
    // Every node back at its baseline within the lock TTL (it should not move at all).
    let deadline = Instant::now() + LOCK_TTL + Duration::from_secs(1);
    let mut sizes = redis_sizes(&nodes).await;
    while keys(&sizes) != keys(&baseline) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        sizes = redis_sizes(&nodes).await;
    }
    assert_eq!(
        keys(&sizes),
        keys(&baseline),
        "DBSIZE per node after {N} unknown SKUs"
    );
    let locks_after = metric(&client, &base, "origin_lock_acquisitions_total").await;
    assert_eq!(
        locks_after, locks_before,
        "no lock taken for an unknown SKU"
    );

    // The 404 is stored: the same key replays it.
    let replay = buy(&client, &base, ("user7", "k7", "NOPE-7")).await;
    assert_eq!(replay, (404, "unknown_sku".to_owned(), true));
}
