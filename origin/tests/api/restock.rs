//! A restock reopens the sale at once on every process: two origin "processes" (separate
//! combiners, sold-out knowledge and lock clients) on one database and three real
//! `redis-server` nodes. After `PUT` answers 200 with stock > 0, no purchase anywhere is answered
//! `sold_out` from knowledge of an earlier sale generation — with Redis nodes paused or killed
//! during the PUT, with a late sold-out mark of the earlier sale in Redis — and a stored 201 is
//! always replayed as the 201.

use std::time::Duration;

use reqwest::Response;
use sqlx::PgPool;

use crate::helpers::{TestApp, assert_problem, metric, spawn_app_with};
use crate::redis_nodes::RedisNodes;

/// How long a process trusts what it learned about a SKU, plus a margin.
const PAST_LOCAL_TTL: Duration = Duration::from_millis(1_100);

async fn two_origins(pool: &PgPool, nodes: &RedisNodes) -> (TestApp, TestApp) {
    let urls = nodes.urls().join(",");
    let env = [("REDIS_URLS", urls.as_str())];
    (
        spawn_app_with(pool.clone(), &env).await,
        spawn_app_with(pool.clone(), &env).await,
    )
}

/// Asserts a 201 and returns its body.
async fn assert_created(res: Response, what: &str) -> serde_json::Value {
    let status = res.status();
    let body = res.text().await.expect("body");
    assert_eq!(status, 201, "{what}: {body}");
    serde_json::from_str(&body).expect("json")
}

/// Sells the last unit of `sku` on `a` and makes `b` learn it is sold out: b's second refusal
/// at the latest is given from what b knows (without a transaction). The first may be decided by
/// a batch, if b had freshly seen the SKU on sale.
async fn sell_out_and_teach(a: &TestApp, b: &TestApp, sku: &str, round: u32) {
    assert_created(
        a.buy(&format!("winner{round}"), &format!("w{round}"), sku, 1)
            .await,
        "the last unit",
    )
    .await;
    let before = metric(&b.metrics().await, "origin_sold_out_fast_path_total");
    for late in 0..2 {
        assert_problem(
            b.buy(&format!("late{round}-{late}"), &format!("l{round}"), sku, 1)
                .await,
            409,
            "sold_out",
        )
        .await;
    }
    let after = metric(&b.metrics().await, "origin_sold_out_fast_path_total");
    assert!(after > before, "b answered from its sold-out knowledge");
}

async fn restock(a: &TestApp, sku: &str, stock: i64) {
    let res = a.put_sku(sku, stock, 100).await;
    assert_eq!(res.status(), 200);
    let view: serde_json::Value = res.json().await.expect("json");
    assert_eq!(view["stock"], stock);
}

#[sqlx::test(migrations = "./migrations")]
async fn a_restock_reopens_the_sale_at_once_on_a_process_that_had_learned_sold_out(pool: PgPool) {
    let nodes = RedisNodes::start(3).await;
    let (a, b) = two_origins(&pool, &nodes).await;
    a.put_sku("RE", 1, 100).await;
    sell_out_and_teach(&a, &b, "RE", 0).await;

    restock(&a, "RE", 3).await;
    // The very next purchase on the OTHER process is decided by a batch, not by what it knew.
    let tx_before = metric(&b.metrics().await, "origin_db_transaction_seconds_count");
    let body = assert_created(b.buy("next", "n0", "RE", 1).await, "first after restock").await;
    assert_eq!(body["remaining"], 2);
    let tx_after = metric(&b.metrics().await, "origin_db_transaction_seconds_count");
    assert!(tx_after > tx_before, "decided by a transaction");
}

#[sqlx::test(migrations = "./migrations")]
async fn restocks_reopen_the_sale_while_a_redis_node_is_paused_or_killed(pool: PgPool) {
    let mut nodes = RedisNodes::start(3).await;
    let (a, b) = two_origins(&pool, &nodes).await;
    a.put_sku("NODES", 1, 100).await;

    // Node 0 paused (SIGSTOP) during the restock: it answers nothing until resumed.
    sell_out_and_teach(&a, &b, "NODES", 0).await;
    nodes.pause(0);
    restock(&a, "NODES", 2).await;
    assert_created(b.buy("next0", "n0", "NODES", 1).await, "node 0 paused").await;
    nodes.resume(0);

    // Node 0 killed (SIGKILL) before the restock; the sale goes on with two of three.
    sell_out_and_teach(&a, &b, "NODES", 1).await;
    nodes.kill(0);
    restock(&a, "NODES", 1).await;
    assert_created(b.buy("next1", "n1", "NODES", 1).await, "node 0 killed").await;
}

#[sqlx::test(migrations = "./migrations")]
async fn a_late_sold_out_mark_of_the_previous_sale_does_not_close_the_restocked_sale(pool: PgPool) {
    let nodes = RedisNodes::start(3).await;
    let (a, b) = two_origins(&pool, &nodes).await;
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&pool)
        .await
        .expect("db name");
    a.put_sku("LATE", 1, 100).await;
    sell_out_and_teach(&a, &b, "LATE", 0).await;
    restock(&a, "LATE", 2).await;

    // The previous sale's batch writes its sold-out mark only now, after the restock cleared it,
    // on every node (the key the origin used for it).
    for url in nodes.urls() {
        let mut conn = crate::probes::redis_connection(&url).await;
        let () = redis::cmd("SET")
            .arg(format!("test:{db}:soldout:LATE"))
            .arg("1")
            .arg("EX")
            .arg(86_400)
            .query_async(&mut conn)
            .await
            .expect("SET");
    }
    // Past any local cache: both processes look again.
    tokio::time::sleep(PAST_LOCAL_TTL).await;
    assert_created(b.buy("next", "n0", "LATE", 1).await, "on b").await;
    assert_created(a.buy("next", "n1", "LATE", 1).await, "on a").await;
}

#[sqlx::test(migrations = "./migrations")]
async fn a_buyer_of_the_new_sale_retrying_on_a_process_idle_during_it_gets_the_replay(
    pool: PgPool,
) {
    let nodes = RedisNodes::start(3).await;
    let (a, b) = two_origins(&pool, &nodes).await;
    a.put_sku("GEN", 1, 100).await;
    // Generation 1 sells out; b learns it (and who bought: winner0).
    sell_out_and_teach(&a, &b, "GEN", 0).await;

    // Generation 2 sells out on a while b is idle.
    restock(&a, "GEN", 1).await;
    let original = a.buy("buyer2", "g2", "GEN", 1).await;
    assert_eq!(original.status(), 201);
    let original = original.text().await.expect("body");
    // b's knowledge of generation 1 has aged out; it looks again and finds "sold out".
    tokio::time::sleep(PAST_LOCAL_TTL).await;

    // The buyer of generation 2 retries on b: the replay of the 201, not "sold out".
    let retry = b.buy("buyer2", "g2", "GEN", 1).await;
    assert_eq!(retry.status(), 201, "told sold out, but charged");
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_eq!(retry.text().await.expect("body"), original);
    // So does generation 1's buyer, and a newcomer is told sold out.
    let retry = b.buy("winner0", "w0", "GEN", 1).await;
    assert_eq!(retry.status(), 201);
    assert_eq!(retry.headers()["idempotent-replayed"], "true");
    assert_problem(b.buy("new", "x", "GEN", 1).await, 409, "sold_out").await;
}
