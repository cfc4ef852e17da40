//! Faults that need whole processes: Postgres crashing and coming back mid-sale (a private
//! server, so nothing else on the machine notices), and one of two origin processes SIGKILLed
//! mid-sale while clients retry the same Idempotency-Keys through the other.
//!
//! Invariants checked after each: sold == initial − remaining, every 201's order exists exactly
//! once, every order was answered 201 to its client, no (user, key) bought twice.

#[path = "common/processes.rs"]
mod processes;
#[path = "../../redlock/tests/common/redis_nodes.rs"]
mod redis_nodes;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use processes::{EDGE_SECRET, OriginProcess, PrivatePostgres, put_sku, signed_purchase};
use sqlx::PgPool;
use tokio::sync::Mutex;

/// One signed purchase; `Err` on a transport error.
async fn buy(
    client: &reqwest::Client,
    base: &str,
    user: &str,
    key: &str,
    sku: &str,
) -> Result<(u16, serde_json::Value), ()> {
    let res = signed_purchase(client, base, EDGE_SECRET, (user, key, sku))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|_| ())?;
    let status = res.status().as_u16();
    Ok((status, res.json().await.unwrap_or(serde_json::Value::Null)))
}

#[derive(Default, Debug)]
struct Tally {
    /// Final 201 order id per (user, key).
    created: BTreeMap<(String, String), String>,
    statuses: BTreeMap<u16, usize>,
    transport_errors: usize,
}

async fn assert_books(pool: &PgPool, sku: &str, tally: &Tally) {
    let (initial, stock): (i64, i64) =
        sqlx::query_as("SELECT initial_stock, stock FROM skus WHERE sku = $1")
            .bind(sku)
            .fetch_one(pool)
            .await
            .expect("sku");
    let orders: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT order_id::text, user_id, idempotency_key FROM orders WHERE sku = $1",
    )
    .bind(sku)
    .fetch_all(pool)
    .await
    .expect("orders");
    assert_eq!(
        initial - stock,
        orders.len() as i64,
        "sold == initial - remaining"
    );
    let keys: HashSet<(&str, &str)> = orders
        .iter()
        .map(|(_, u, k)| (u.as_str(), k.as_str()))
        .collect();
    assert_eq!(keys.len(), orders.len(), "no (user, key) bought twice");
    let answered: HashSet<&str> = tally.created.values().map(String::as_str).collect();
    let stored: HashSet<&str> = orders.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(
        answered, stored,
        "every 201 has its order and every order was answered 201"
    );
}

#[tokio::test]
async fn postgres_crash_mid_sale_gives_503s_then_recovers_with_no_lost_or_phantom_order() {
    let mut pg = PrivatePostgres::start().await;
    let admin = sqlx::PgPool::connect(&pg.url("postgres"))
        .await
        .expect("connect");
    sqlx::query("CREATE DATABASE flashgate")
        .execute(&admin)
        .await
        .expect("create db");
    admin.close().await;
    let origin = OriginProcess::start(
        &pg.url("flashgate"),
        "redis://127.0.0.1:6379",
        &format!("test:pgcrash:{}", uuid::Uuid::new_v4()),
        &[("DB_ACQUIRE_TIMEOUT_MS", "500")],
        true,
    )
    .await;
    put_sku(
        &reqwest::Client::new(),
        &origin.base,
        "PG",
        1_000_000,
        100_000,
    )
    .await;

    let tally = Arc::new(Mutex::new(Tally::default()));
    let client = reqwest::Client::new();
    let stop = Instant::now() + Duration::from_secs(7);
    let shoppers = (0..20).map(|s| {
        let (tally, client, base) = (tally.clone(), client.clone(), origin.base.clone());
        tokio::spawn(async move {
            let user = format!("s{s}");
            for i in 0.. {
                let key = format!("k{i}");
                // Retry the same key until a definitive answer (or the test's end).
                loop {
                    let r = buy(&client, &base, &user, &key, "PG").await;
                    let mut t = tally.lock().await;
                    match r {
                        Ok((201, body)) => {
                            *t.statuses.entry(201).or_default() += 1;
                            let id = body["order_id"].as_str().expect("order id").to_owned();
                            if let Some(prev) =
                                t.created.insert((user.clone(), key.clone()), id.clone())
                            {
                                assert_eq!(prev, id, "a replay returns the same order");
                            }
                            break;
                        }
                        Ok((status, body)) => {
                            assert_ne!(status, 500, "no 500: {body}");
                            *t.statuses.entry(status).or_default() += 1;
                            assert_eq!(status, 503, "only 201 or 503 expected: {body}");
                        }
                        Err(()) => t.transport_errors += 1,
                    }
                    drop(t);
                    if Instant::now() > stop + Duration::from_secs(20) {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                if Instant::now() > stop {
                    return;
                }
            }
        })
    });
    let shoppers: Vec<_> = shoppers.collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    pg.crash();
    tokio::time::sleep(Duration::from_millis(2000)).await;
    pg.resume().await;
    for s in join_all(shoppers).await {
        s.expect("shopper");
    }
    let tally = tally.lock().await;
    assert!(
        tally.statuses.get(&503).copied().unwrap_or(0) > 0,
        "the outage was seen as 503s: {tally:?}"
    );
    assert!(
        tally.created.len() > 40,
        "the sale ran before and after the outage: {}",
        tally.created.len()
    );
    let pool = sqlx::PgPool::connect(&pg.url("flashgate"))
        .await
        .expect("connect after restart");
    assert_books(&pool, "PG", &tally).await;
    // Readiness follows the database.
    assert_eq!(
        reqwest::get(format!("{}/readyz", origin.base))
            .await
            .expect("readyz")
            .status(),
        200
    );
}

#[sqlx::test(migrations = "./migrations")]
async fn an_origin_killed_mid_sale_loses_nothing_when_clients_retry_through_the_other(
    pool: PgPool,
) {
    let nodes = redis_nodes::RedisNodes::start(3).await;
    let (db, url) = processes::database_of(&pool).await;
    let urls = nodes.urls().join(",");
    let prefix = format!("test:{db}");
    let env = [("RUN_MIGRATIONS", "false"), ("REQUEST_DEADLINE_MS", "5000")];
    let a = OriginProcess::start(&url, &urls, &prefix, &env, true).await;
    let b = OriginProcess::start(&url, &urls, &prefix, &env, true).await;
    put_sku(&reqwest::Client::new(), &a.base, "KILL", 1_000_000, 100_000).await;

    let tally = Arc::new(Mutex::new(Tally::default()));
    let client = reqwest::Client::new();
    let (a_base, b_base) = (a.base.clone(), b.base.clone());
    let stop = Instant::now() + Duration::from_secs(4);
    let shoppers: Vec<_> = (0..30)
        .map(|s| {
            let (tally, client, a_base, b_base) = (
                tally.clone(),
                client.clone(),
                a_base.clone(),
                b_base.clone(),
            );
            tokio::spawn(async move {
                let user = format!("s{s}");
                for i in 0.. {
                    let key = format!("k{i}");
                    // First try through A; on a transport error or 503, the same key through B.
                    let mut target = a_base.clone();
                    loop {
                        let r = buy(&client, &target, &user, &key, "KILL").await;
                        let mut t = tally.lock().await;
                        match r {
                            Ok((201, body)) => {
                                *t.statuses.entry(201).or_default() += 1;
                                let id = body["order_id"].as_str().expect("id").to_owned();
                                if let Some(prev) =
                                    t.created.insert((user.clone(), key.clone()), id.clone())
                                {
                                    assert_eq!(prev, id);
                                }
                                break;
                            }
                            Ok((status, body)) => {
                                assert!(
                                    status == 503 || status == 409,
                                    "unexpected {status}: {body}"
                                );
                                *t.statuses.entry(status).or_default() += 1;
                            }
                            Err(()) => t.transport_errors += 1,
                        }
                        drop(t);
                        target = b_base.clone();
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    if Instant::now() > stop {
                        return;
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    a.signal("-KILL");
    for s in join_all(shoppers).await {
        s.expect("shopper");
    }
    let tally = tally.lock().await;
    assert!(
        tally.transport_errors > 0,
        "the kill was felt by clients: {tally:?}"
    );
    assert_books(&pool, "KILL", &tally).await;
    drop(b);
}

#[sqlx::test(migrations = "./migrations")]
async fn an_origin_paused_past_its_lease_commits_nothing_stale(pool: PgPool) {
    let nodes = redis_nodes::RedisNodes::start(3).await;
    let (db, url) = processes::database_of(&pool).await;
    let urls = nodes.urls().join(",");
    let prefix = format!("test:{db}");
    let env = [
        ("RUN_MIGRATIONS", "false"),
        ("REQUEST_DEADLINE_MS", "15000"),
        ("LOCK_TTL_MS", "1000"),
    ];
    let a = OriginProcess::start(&url, &urls, &prefix, &env, true).await;
    let b = OriginProcess::start(&url, &urls, &prefix, &env, true).await;
    put_sku(&reqwest::Client::new(), &a.base, "PAUSE", 10, 100_000).await;

    // Hold the SKU row so A's batch transaction waits inside the database, lease in hand.
    let mut blocker = pool.begin().await.expect("tx");
    sqlx::query("SELECT 1 FROM skus WHERE sku = 'PAUSE' FOR UPDATE")
        .execute(&mut *blocker)
        .await
        .expect("lock row");
    let client = reqwest::Client::new();
    let send = |base: String, user: &'static str| {
        let client = client.clone();
        tokio::spawn(async move { buy(&client, &base, user, "k", "PAUSE").await })
    };
    let from_a: Vec<_> = ["a1", "a2", "a3"]
        .into_iter()
        .map(|u| send(a.base.clone(), u))
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.signal("-STOP");
    // Longer than the lease: A's lock is gone, B takes over with a newer fencing token.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let from_b: Vec<_> = ["b1", "b2", "b3"]
        .into_iter()
        .map(|u| send(b.base.clone(), u))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The row goes to A's (paused) transaction first; then A wakes up far past its lease.
    blocker.rollback().await.expect("release row");
    tokio::time::sleep(Duration::from_millis(500)).await;
    a.signal("-CONT");

    let answers: Vec<_> = join_all(from_a.into_iter().chain(from_b)).await;
    // A's first batch was not committed: its lease had run out while it was paused.
    let metrics = reqwest::get(format!("{}/metrics", a.base))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let refused = [
        "origin_lease_expired_batches_total ",
        "origin_stale_fence_total ",
    ]
    .iter()
    .filter_map(|m| metrics.lines().find(|l| l.starts_with(m)))
    .filter_map(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
    .sum::<f64>();
    assert!(refused >= 1.0, "the stale batch was refused:\n{metrics}");
    let mut ids = HashSet::new();
    for answer in answers {
        let (status, body) = answer.expect("task").expect("answered");
        assert_eq!(status, 201, "{body}");
        assert!(
            ids.insert(body["order_id"].as_str().expect("id").to_owned()),
            "one order per attempt"
        );
    }
    let (stock, orders): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT stock FROM skus WHERE sku = 'PAUSE'), (SELECT COUNT(*) FROM orders)",
    )
    .fetch_one(&pool)
    .await
    .expect("books");
    assert_eq!(
        (stock, orders),
        (4, 6),
        "no oversell, nothing committed twice"
    );
    // Every order was committed under a lease newer than any before it.
    let fences: Vec<i64> = sqlx::query_scalar("SELECT fence FROM orders ORDER BY created_at")
        .fetch_all(&pool)
        .await
        .expect("fences");
    assert!(
        fences.windows(2).all(|w| w[0] <= w[1]),
        "fences never go back: {fences:?}"
    );
}
