//! Hold expiry with whole processes (issue 15): two `origin` binaries on one database and one
//! `redis-server` of their own (the delayed queue's node and the lock's), one SIGKILLed in the
//! middle of a sale; and an origin that was down while holds fell due. The database is the truth:
//! every hold expires exactly once, within 2 s of its `expires_at`, its units back on sale, and
//! `origin reconcile` finds the books balanced.

#[path = "common/probes.rs"]
mod probes;
#[path = "common/processes.rs"]
mod processes;
#[path = "../../redlock/tests/common/redis_nodes.rs"]
mod redis_nodes;

use std::time::{Duration, Instant};

use futures::future::join_all;
use processes::{ADMIN_TOKEN, EDGE_SECRET, OriginProcess, database_of, signed_purchase};
use redis_nodes::RedisNodes;
use sqlx::PgPool;

async fn put_sale(client: &reqwest::Client, base: &str, sku: &str, stock: i64, hold_secs: i64) {
    let res = client
        .put(format!("{base}/v1/admin/skus/{sku}"))
        .bearer_auth(ADMIN_TOKEN)
        .body(format!(
            r#"{{"name":"x","price_cents":1,"stock":{stock},"max_per_user":100,"hold_secs":{hold_secs}}}"#
        ))
        .send()
        .await
        .expect("put sku");
    assert_eq!(res.status(), 200);
}

/// Buys one unit; (status, order id of a 201).
async fn buy(client: &reqwest::Client, base: &str, user: &str, sku: &str) -> (u16, Option<String>) {
    let res = signed_purchase(client, base, EDGE_SECRET, (user, "k", sku))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("purchase");
    let status = res.status().as_u16();
    let body: serde_json::Value = res.json().await.unwrap_or_default();
    (status, body["order_id"].as_str().map(str::to_owned))
}

/// Polls until no order of `sku` is held (at most `within`).
async fn wait_no_holds(pool: &PgPool, sku: &str, within: Duration) {
    let start = Instant::now();
    loop {
        let held: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE sku = $1 AND status = 'held'")
                .bind(sku)
                .fetch_one(pool)
                .await
                .expect("count");
        if held == 0 {
            return;
        }
        assert!(start.elapsed() < within, "{held} holds of {sku} still held");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Seconds from `expires_at` to the expiry's write, of every expired order of `sku` (of `ids`
/// only, if given).
async fn expiry_lags(pool: &PgPool, sku: &str, ids: Option<&[String]>) -> Vec<f64> {
    sqlx::query_scalar(
        "SELECT EXTRACT(EPOCH FROM updated_at - expires_at)::float8 FROM orders
         WHERE sku = $1 AND status = 'expired' AND ($2::text[] IS NULL OR order_id::text = ANY($2))
         ORDER BY 1",
    )
    .bind(sku)
    .bind(ids)
    .fetch_all(pool)
    .await
    .expect("lags")
}

async fn assert_reconciled(pool: &PgPool) {
    let (_, url) = database_of(pool).await;
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_origin"))
        .arg("reconcile")
        .env("DATABASE_URL", url)
        .env("RUST_LOG", "error")
        .output()
        .expect("reconcile");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        (out.status.code(), stdout.trim()),
        (Some(0), "reconciliation: ok")
    );
}

#[sqlx::test(migrations = "./migrations")]
async fn holds_expire_exactly_once_within_2s_across_processes_with_one_killed_mid_sale(
    pool: PgPool,
) {
    let nodes = RedisNodes::start(1).await;
    let urls = nodes.urls().join(",");
    let mut a = OriginProcess::start_on(&pool, &urls, &[]).await;
    let b = OriginProcess::start_on(&pool, &urls, &[]).await;
    let client = processes::http_client(64, Duration::from_secs(10));
    put_sale(&client, &a.base, "EXP", 40, 3).await;

    // Forty holds of 3 s through both processes; A dies with its share queued for expiry.
    let first = join_all((0..40).map(|i| {
        let (client, base) = (&client, if i % 2 == 0 { &a.base } else { &b.base });
        async move { buy(client, base, &format!("u{i}"), "EXP").await }
    }))
    .await;
    assert!(first.iter().all(|(s, _)| *s == 201), "{first:?}");
    a.child.kill().expect("SIGKILL a");
    let _ = a.child.wait();

    // The sale goes on through B: shoppers keep trying while the holds fall due, and buy every
    // unit that comes back.
    let started = Instant::now();
    let mut second = Vec::new();
    let mut attempts = 0;
    while second.len() < 40 && started.elapsed() < Duration::from_secs(12) {
        // A new shopper per attempt: a refused one's key keeps its stored `sold_out`.
        let round = join_all((0..8).map(|i| {
            let (client, base, n) = (&client, &b.base, attempts + i);
            async move { buy(client, base, &format!("v{n}"), "EXP").await }
        }))
        .await;
        attempts += 8;
        second.extend(round.into_iter().filter(|(s, _)| *s == 201));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(second.len(), 40, "every expired unit was sold again");

    let first_ids: Vec<String> = first.into_iter().filter_map(|(_, id)| id).collect();
    let statuses: Vec<String> =
        sqlx::query_scalar("SELECT status FROM orders WHERE order_id::text = ANY($1)")
            .bind(&first_ids)
            .fetch_all(&pool)
            .await
            .expect("statuses");
    assert_eq!(statuses.len(), 40);
    assert!(statuses.iter().all(|s| s == "expired"), "{statuses:?}");
    let lags = expiry_lags(&pool, "EXP", Some(&first_ids)).await;
    assert_eq!(lags.len(), 40);
    eprintln!(
        "expiry lag of the 40 holds (A killed): min {:.3} s, max {:.3} s",
        lags[0], lags[39]
    );
    assert!(
        lags.iter().all(|l| *l <= 2.0),
        "every expiry within 2 s of expires_at: {lags:?}"
    );
    let (stock, out): (i64, i64) =
        sqlx::query_as("SELECT stock, units_out FROM skus WHERE sku = 'EXP'")
            .fetch_one(&pool)
            .await
            .expect("books");
    assert_eq!((stock, out), (0, 40), "each unit returned exactly once");
    // Let the second round's holds expire too (B alone).
    wait_no_holds(&pool, "EXP", Duration::from_secs(8)).await;
    let lags = expiry_lags(&pool, "EXP", None).await;
    assert!(lags.iter().all(|l| *l <= 2.0), "{lags:?}");
    assert_reconciled(&pool).await;
    drop(b);
}

#[sqlx::test(migrations = "./migrations")]
async fn holds_that_fell_due_while_the_origin_was_down_expire_within_2s_of_its_restart(
    pool: PgPool,
) {
    let nodes = RedisNodes::start(1).await;
    let urls = nodes.urls().join(",");
    let mut origin = OriginProcess::start_on(&pool, &urls, &[]).await;
    let client = processes::http_client(16, Duration::from_secs(10));
    put_sale(&client, &origin.base, "DOWN", 10, 1).await;
    for i in 0..10 {
        assert_eq!(
            buy(&client, &origin.base, &format!("u{i}"), "DOWN").await.0,
            201
        );
    }
    origin.child.kill().expect("SIGKILL");
    let _ = origin.child.wait();
    // The holds fall due while no origin runs, and the delayed queue loses its entries: only
    // the database knows.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let mut conn = probes::redis_connection(&nodes.url(0)).await;
    let _: () = redis::cmd("FLUSHALL")
        .query_async(&mut conn)
        .await
        .expect("flush");

    let restarted = OriginProcess::start_on(&pool, &urls, &[]).await;
    let ready = Instant::now();
    wait_no_holds(&pool, "DOWN", Duration::from_secs(2)).await;
    let took = ready.elapsed();
    eprintln!("10 holds due while down: all expired {took:?} after the restarted origin was ready");
    assert!(took <= Duration::from_secs(2), "{took:?}");
    let stock: i64 = sqlx::query_scalar("SELECT stock FROM skus WHERE sku = 'DOWN'")
        .fetch_one(&pool)
        .await
        .expect("stock");
    assert_eq!(stock, 10);
    assert_eq!(buy(&client, &restarted.base, "after", "DOWN").await.0, 201);
    assert_reconciled(&pool).await;
}
