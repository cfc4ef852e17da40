//! Hostile idempotency keys: one shopper's key can never fail the other shoppers decided with it.
//!
//! - a key reused after its stored answer was purged (its order is permanent) is answered 422
//!   and the rest of its batch commits;
//! - the same (user, key) raced through two SKUs on two processes is decided once: one 201, one
//!   422, never a 5xx, one order.

use std::sync::Arc;
use std::time::Duration;

use origin::store;
use sqlx::PgPool;

use crate::contention::{hold_sku_row, lock_waiters, wait_until};
use crate::helpers::{TestApp, assert_problem, joined, metric, spawn_app, spawn_app_with};

/// Buys in a task; yields (status, `code` of a problem or "" for a 201).
fn buy(
    app: &Arc<TestApp>,
    user: String,
    key: String,
    sku: &'static str,
    qty: i64,
) -> tokio::task::JoinHandle<(u16, String)> {
    let app = app.clone();
    tokio::spawn(async move {
        let res = app.buy(&user, &key, sku, qty).await;
        let status = res.status().as_u16();
        let body: serde_json::Value = res.json().await.expect("json body");
        (status, body["code"].as_str().unwrap_or("").to_owned())
    })
}

#[sqlx::test(migrations = "./migrations")]
async fn a_key_reused_after_its_answer_was_purged_fails_only_itself(pool: PgPool) {
    let app = Arc::new(spawn_app(pool.clone()).await);
    app.put_sku("DROP", 100, 5).await;
    // A client with fixed keys (like the README's `order-1`) bought once, more than a retention
    // ago: its stored answer is purged, its order stays.
    assert_eq!(app.buy("fixed", "order-1", "DROP", 1).await.status(), 201);
    sqlx::query("UPDATE idempotency_records SET created_at = now() - interval '25 hours'")
        .execute(&pool)
        .await
        .expect("age the stored answer");
    let purged = store::purge_idempotency(&pool, Duration::from_secs(24 * 3600))
        .await
        .expect("purge");
    assert_eq!(purged, 1);
    let batches_before = metric(&app.metrics().await, "origin_batch_size_count");

    // 49 shoppers and the reuser queue behind a held SKU row. The first shopper's batch may be
    // taken alone (and block); everyone else, the reuser included, is queued by then and decided
    // in the next batch.
    let blocker = hold_sku_row(&pool, "DROP").await;
    let mut shoppers = vec![buy(&app, "shopper0".into(), "k".into(), "DROP", 1)];
    wait_until("the first batch waits for the row", || async {
        lock_waiters(&pool).await == 1
    })
    .await;
    shoppers.extend((1..49).map(|i| buy(&app, format!("shopper{i}"), "k".into(), "DROP", 1)));
    // The same request as before, with the same key: nothing the client did differently.
    let reuser = buy(&app, "fixed".into(), "order-1".into(), "DROP", 1);
    wait_until("all 50 purchases are queued", || async {
        app.metrics.queue_depth.get() == 50
    })
    .await;
    blocker.rollback().await.expect("release the row");

    let shoppers = joined(shoppers).await;
    let reuser = joined(vec![reuser]).await;
    assert!(
        shoppers.iter().all(|(s, _)| *s == 201),
        "every other shopper bought: {shoppers:?}"
    );
    assert_eq!(
        reuser,
        [(422, "idempotency_key_reused".to_owned())],
        "the reuser alone is refused"
    );
    let batches = metric(&app.metrics().await, "origin_batch_size_count") - batches_before;
    assert!(
        batches <= 2.0,
        "the reuser was decided together with at least 48 others ({batches} batches)"
    );
    assert_eq!(app.stock("DROP").await, 100 - 1 - 49);
    assert_eq!(
        app.order_count().await,
        50,
        "the first order and 49 new ones"
    );

    // Deterministic: the key stays spent, whatever the request now is; nothing is stored for it.
    for (sku, qty) in [("DROP", 1), ("DROP", 2), ("OTHER", 1)] {
        let res = app.buy("fixed", "order-1", sku, qty).await;
        let body = assert_problem(res, 422, "idempotency_key_reused").await;
        assert!(
            body["detail"]
                .as_str()
                .is_some_and(|d| d.contains("expired")),
            "{body}"
        );
    }
    let stored: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM idempotency_records WHERE user_id = 'fixed' AND idempotency_key = 'order-1'",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(stored, 0);
}

/// Runs `rounds` races of one (user, key) bought on SKU LEFT through `a` and on SKU RIGHT through
/// `b` at the same instant — both SKU rows are held by one transaction while the purchases queue,
/// and released together — and checks each round; returns the conflicts both apps retried.
/// With `innocents`, each SKU also has a shopper queued with the racer (single-flight only).
async fn race(
    pool: &PgPool,
    a: Arc<TestApp>,
    b: Arc<TestApp>,
    rounds: usize,
    innocents: bool,
) -> f64 {
    a.put_sku("LEFT", 10_000, 100).await;
    a.put_sku("RIGHT", 10_000, 100).await;
    for round in 0..rounds {
        let key = format!("race-{round}");
        let mut blocker = pool.begin().await.expect("tx");
        sqlx::query("SELECT 1 FROM skus WHERE sku IN ('LEFT', 'RIGHT') FOR UPDATE")
            .execute(&mut *blocker)
            .await
            .expect("row locks");
        let mut others = Vec::new();
        if innocents {
            // A first batch per SKU, taken alone: the racer and an innocent shopper queue behind
            // it and are decided together in the next batch.
            others.push(buy(&a, format!("plug-l{round}"), "k".into(), "LEFT", 1));
            others.push(buy(&b, format!("plug-r{round}"), "k".into(), "RIGHT", 1));
            wait_until("both first batches wait for their rows", || async {
                lock_waiters(pool).await == 2
            })
            .await;
            others.push(buy(&a, format!("left{round}"), "k".into(), "LEFT", 1));
            others.push(buy(&b, format!("right{round}"), "k".into(), "RIGHT", 1));
        }
        let racers = vec![
            buy(&a, "racer".into(), key.clone(), "LEFT", 1),
            buy(&b, "racer".into(), key.clone(), "RIGHT", 1),
        ];
        if innocents {
            wait_until("both racers are queued", || async {
                a.metrics.queue_depth.get() == 3 && b.metrics.queue_depth.get() == 3
            })
            .await;
        } else {
            wait_until("both racers wait for their rows", || async {
                lock_waiters(pool).await == 2
            })
            .await;
        }
        blocker.rollback().await.expect("release the rows");

        let mut racers = joined(racers).await;
        racers.sort();
        assert!(
            racers == [(201, String::new()), (422, "idempotency_key_reused".into())]
                || racers == [(201, String::new()), (409, "idempotency_in_flight".into())],
            "round {round}: one purchase, one refusal, no 5xx: {racers:?}"
        );
        let others = joined(others).await;
        assert!(
            others.iter().all(|(s, _)| *s == 201),
            "round {round}: the other shoppers bought: {others:?}"
        );
        let orders: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM orders WHERE user_id = 'racer' AND idempotency_key = $1",
        )
        .bind(&key)
        .fetch_one(pool)
        .await
        .expect("count");
        assert_eq!(orders, 1, "round {round}: one order for the key");
    }
    metric(&a.metrics().await, "origin_batch_conflicts_total")
        + metric(&b.metrics().await, "origin_batch_conflicts_total")
}

#[sqlx::test(migrations = "./migrations")]
async fn one_key_raced_through_two_skus_on_two_processes_is_decided_once(pool: PgPool) {
    // Two origin "processes" (separate combiners, in-flight gates and lock clients) on one
    // database. A long hold keeps each combiner on its lease between batches, so both second
    // batches start as soon as the first ones commit.
    let settings = [("LOCK_MAX_HOLD_MS", "1000")];
    let a = Arc::new(spawn_app_with(pool.clone(), &settings).await);
    let b = Arc::new(spawn_app_with(pool.clone(), &settings).await);
    let conflicts = race(&pool, a, b, 30, true).await;
    assert!(
        conflicts >= 1.0,
        "the race was hit: batches rolled back by the other process's commit ({conflicts})"
    );
}

/// The same race when every attempt takes a lease and a transaction of its own (the bench's
/// `baseline` target: `BATCH_MAX=1`, `LOCK_MAX_HOLD_MS=0`).
#[sqlx::test(migrations = "./migrations")]
async fn one_key_raced_through_two_skus_in_batches_of_one_is_decided_once(pool: PgPool) {
    let settings = [("BATCH_MAX", "1"), ("LOCK_MAX_HOLD_MS", "0")];
    let a = Arc::new(spawn_app_with(pool.clone(), &settings).await);
    let b = Arc::new(spawn_app_with(pool.clone(), &settings).await);
    let conflicts = race(&pool, a, b, 15, false).await;
    assert!(
        conflicts >= 1.0,
        "the race was hit: transactions rolled back by the other process's commit ({conflicts})"
    );
}
