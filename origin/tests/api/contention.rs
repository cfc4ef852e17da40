//! Bounded contention: batched decisions, several processes, the sold-out fast path, the lease
//! guard and load shedding.

use std::sync::Arc;
use std::time::{Duration, Instant};

use origin::purchase::{Attempt, Decision, Outcome};
use origin::store::{self, BatchMode, StoreError};
use shared::{ErrorCode, IdempotencyKey, PurchaseRequest, Quantity, Sku, UserId};
use sqlx::PgPool;

use crate::helpers::{TestApp, assert_problem, joined, metric, spawn_app, spawn_app_with};

fn attempt(user: &str, key: &str, sku: &str, qty: i64) -> Attempt {
    Attempt {
        user: UserId::parse(user).expect("user"),
        key: IdempotencyKey::parse(key).expect("key"),
        request: PurchaseRequest {
            sku: Sku::parse(sku).expect("sku"),
            qty: Quantity::new(qty).expect("qty"),
        },
    }
}

fn status(d: &Decision) -> String {
    match d {
        Decision::Fresh {
            outcome: Outcome::Created,
            ..
        } => "created".into(),
        Decision::Fresh {
            outcome: Outcome::Refused(code),
            ..
        } => code.as_str().into(),
        Decision::Replay(a) => format!("replay {}", a.status),
        Decision::KeyReused => "reused".into(),
        Decision::KeySpent => "spent".into(),
        Decision::Closed(closed) => closed.code().as_str().into(),
    }
}

#[sqlx::test(migrations = "./migrations")]
async fn one_batch_decides_mixed_outcomes_in_arrival_order(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.put_sku("MIX", 5, 3).await;
    let sku = Sku::parse("MIX").expect("sku");
    let batch = [
        attempt("alice", "a1", "MIX", 2),  // created, 3 left
        attempt("alice", "a1", "MIX", 2),  // same key, same request inside the batch: decided once
        attempt("alice", "a1", "MIX", 1),  // same key, other request
        attempt("alice", "a2", "MIX", 2),  // alice would hold 4 > cap 3
        attempt("bob", "b1", "MIX", 3),    // created, 0 left
        attempt("carol", "c1", "MIX", 1),  // sold out
        attempt("carol", "c2", "NOPE", 1), // (a different SKU in a batch is never queued; the store still answers per row)
    ];
    let res = store::decide_batch(&pool, &sku, &batch[..6], None, None, BatchMode::Sell)
        .await
        .expect("batch commits");
    let got: Vec<String> = res.decisions.iter().map(status).collect();
    assert_eq!(
        got,
        [
            "created",
            "replay 201",
            "reused",
            "purchase_limit",
            "created",
            "sold_out"
        ]
    );
    assert_eq!((res.remaining, res.units_sold), (Some(0), 5));
    // The duplicate replays the very same order.
    let (Decision::Fresh { answer, .. }, Decision::Replay(replay)) =
        (&res.decisions[0], &res.decisions[1])
    else {
        panic!("unexpected decisions");
    };
    assert_eq!(answer, replay);
    let orders: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders")
        .fetch_one(&pool)
        .await
        .expect("count");
    let records: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_records")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!((orders, records), (2, 4), "2 orders; a1, a2, b1, c1 stored");
    // Over HTTP the stored answers replay.
    assert_problem(
        app.buy("alice", "a2", "MIX", 2).await,
        409,
        "purchase_limit",
    )
    .await;
    let _ = &batch[6];
}

#[sqlx::test(migrations = "./migrations")]
async fn a_stale_fencing_token_commits_nothing(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.put_sku("F", 10, 10).await;
    let sku = Sku::parse("F").expect("sku");
    store::decide_batch(
        &pool,
        &sku,
        &[attempt("u", "k1", "F", 1)],
        Some(7),
        None,
        BatchMode::Sell,
    )
    .await
    .expect("fence 7 commits");
    let stale = store::decide_batch(
        &pool,
        &sku,
        &[attempt("u", "k2", "F", 1)],
        Some(6),
        None,
        BatchMode::Sell,
    )
    .await;
    assert!(
        matches!(
            stale,
            Err(StoreError::StaleFence {
                presented: 6,
                current: 7
            })
        ),
        "{stale:?}"
    );
    store::decide_batch(
        &pool,
        &sku,
        &[attempt("u", "k3", "F", 1)],
        Some(7),
        None,
        BatchMode::Sell,
    )
    .await
    .expect("same fence still ok");
    assert_eq!(app.stock("F").await, 8);
    let k2: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_records WHERE idempotency_key = 'k2'")
            .fetch_one(&pool)
            .await
            .expect("count");
    assert_eq!(k2, 0);
}

#[sqlx::test(migrations = "./migrations")]
async fn a_batch_that_waited_for_the_row_decides_from_what_the_holder_committed(pool: PgPool) {
    // Two transactions of one SKU at once: a process whose lease was lost still commits while the
    // new holder's batch waits for the row. The waiting batch's statement started before that
    // commit, so its snapshot does not hold the answer and the unit the first batch stored; it
    // must decide from them all the same: the same key replayed, the cap (1) applied.
    let app = spawn_app(pool.clone()).await;
    app.put_sku("RACE", 10, 1).await;
    let sku = Sku::parse("RACE").expect("sku");
    let holder = hold_sku_row(&pool, "RACE").await;
    let batch = |attempts: Vec<Attempt>| {
        let (pool, sku) = (pool.clone(), sku.clone());
        tokio::spawn(async move {
            store::decide_batch(&pool, &sku, &attempts, None, None, BatchMode::Sell).await
        })
    };
    let first = batch(vec![attempt("u", "k1", "RACE", 1)]);
    wait_until("the first batch waits for the row", || async {
        lock_waiters(&pool).await == 1
    })
    .await;
    let second = batch(vec![
        attempt("u", "k1", "RACE", 1),
        attempt("u", "k2", "RACE", 1),
    ]);
    wait_until("the second batch waits behind it", || async {
        lock_waiters(&pool).await == 2
    })
    .await;
    holder.rollback().await.expect("release the row");
    let first = first.await.expect("join").expect("first batch commits");
    let second = second.await.expect("join").expect("second batch commits");
    assert_eq!(
        first.decisions.iter().map(status).collect::<Vec<_>>(),
        ["created"]
    );
    assert_eq!(
        second.decisions.iter().map(status).collect::<Vec<_>>(),
        ["replay 201", "purchase_limit"]
    );
    let (Decision::Fresh { answer, .. }, Decision::Replay(replayed)) =
        (&first.decisions[0], &second.decisions[0])
    else {
        unreachable!("asserted above");
    };
    assert_eq!(
        replayed, answer,
        "the replay is the stored answer, byte for byte"
    );
    assert_eq!(app.stock("RACE").await, 9);
}

#[sqlx::test(migrations = "./migrations")]
async fn a_commit_past_the_lease_deadline_rolls_back(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.put_sku("L", 10, 10).await;
    let sku = Sku::parse("L").expect("sku");
    let past = std::time::Instant::now();
    let res = store::decide_batch(
        &pool,
        &sku,
        &[attempt("u", "k", "L", 1)],
        Some(1),
        Some(past),
        BatchMode::Sell,
    )
    .await;
    assert!(matches!(res, Err(StoreError::LeaseExpired)), "{res:?}");
    assert_eq!(app.stock("L").await, 10);
}

/// Locks `sku`'s row in a transaction of the test's own, so every batch for it blocks until the
/// returned transaction is rolled back: the way to make attempts queue up behind a holder.
pub(crate) async fn hold_sku_row(
    pool: &PgPool,
    sku: &str,
) -> sqlx::Transaction<'static, sqlx::Postgres> {
    let mut tx = pool.begin().await.expect("tx");
    sqlx::query("SELECT 1 FROM skus WHERE sku = $1 FOR UPDATE")
        .bind(sku)
        .execute(&mut *tx)
        .await
        .expect("row lock");
    tx
}

/// Polls `done` every 10 ms for up to 20 s (a loaded machine is slow, never this slow).
pub(crate) async fn wait_until<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !done().await {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// `n` shoppers `{who}0…` each buying one unit of `sku` with a key of their own, at once; each
/// task gives the status and the problem's `code` ("" for a 201).
fn spawn_buys(
    app: &Arc<TestApp>,
    n: usize,
    who: &str,
    sku: &str,
) -> Vec<tokio::task::JoinHandle<(u16, String)>> {
    (0..n)
        .map(|i| {
            let (app, user, sku) = (app.clone(), format!("{who}{i}"), sku.to_owned());
            tokio::spawn(async move {
                let res = app.buy(&user, &format!("k-{user}"), &sku, 1).await;
                let status = res.status().as_u16();
                let body: serde_json::Value = res.json().await.expect("json");
                (status, body["code"].as_str().unwrap_or("").to_owned())
            })
        })
        .collect()
}

/// Transactions of this test's database waiting for a lock (a batch blocked on a held SKU row).
pub(crate) async fn lock_waiters(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .fetch_one(pool)
    .await
    .expect("pg_stat_activity")
}

async fn buy_all(apps: &[Arc<TestApp>], n: usize, sku: &str, users: usize) -> Vec<u16> {
    let futs = (0..n).map(|i| {
        let app = apps[i % apps.len()].clone();
        let sku = sku.to_owned();
        tokio::spawn(async move {
            app.buy(&format!("user{}", i % users), &format!("key{i}"), &sku, 1)
                .await
                .status()
                .as_u16()
        })
    });
    joined(futs).await
}

#[sqlx::test(migrations = "./migrations")]
async fn the_combiner_batches_and_two_processes_never_oversell(pool: PgPool) {
    // Two origin "processes" (separate combiners, sold-out knowledge and lock clients) on one
    // database.
    let a = Arc::new(spawn_app(pool.clone()).await);
    let b = Arc::new(spawn_app(pool.clone()).await);
    a.put_sku("HOT", 150, 2).await;
    let statuses = buy_all(&[a.clone(), b.clone()], 400, "HOT", 100).await;
    let created = statuses.iter().filter(|s| **s == 201).count();
    assert_eq!(created, 150, "{statuses:?}");
    assert!(
        statuses.iter().all(|s| *s == 201 || *s == 409),
        "only 201 and 409: {statuses:?}"
    );
    assert_eq!(a.stock("HOT").await, 0);
    let (units, max_user): (i64, i64) =
        sqlx::query_as("SELECT SUM(qty)::BIGINT, MAX(s)::BIGINT FROM (SELECT user_id, SUM(qty) AS s, SUM(qty) AS qty FROM orders GROUP BY user_id) t")
            .fetch_one(&pool)
            .await
            .expect("sums");
    assert_eq!((units, max_user), (150, 2));
    // Batching: fewer transactions and lock acquisitions than purchases.
    let (ma, mb) = (a.metrics().await, b.metrics().await);
    let transactions =
        metric(&ma, "origin_batch_size_count") + metric(&mb, "origin_batch_size_count");
    let locks = metric(&ma, "origin_lock_acquisitions_total")
        + metric(&mb, "origin_lock_acquisitions_total");
    assert!(
        transactions > 0.0 && transactions < 150.0,
        "transactions {transactions}"
    );
    assert!(locks < 150.0, "lock acquisitions {locks}");
}

#[sqlx::test(migrations = "./migrations")]
async fn a_busy_process_hands_the_lock_over_between_batches(pool: PgPool) {
    // Two processes; A has a long queue, B one shopper. With LOCK_MAX_HOLD_MS=0 a holder with
    // work left gives the lock up after each batch and pauses, so B is decided after one of A's
    // batches, not after A's whole queue.
    let settings = [("BATCH_MAX", "2"), ("LOCK_MAX_HOLD_MS", "0")];
    let a = Arc::new(spawn_app_with(pool.clone(), &settings).await);
    let b = Arc::new(spawn_app_with(pool.clone(), &settings).await);
    a.put_sku("TURN", 100, 100).await;
    // Hold the SKU row: A's first batch (under A's lease) waits, the rest of A's queue builds up.
    let blocker = hold_sku_row(&pool, "TURN").await;
    let a_buys: Vec<_> = (0..40)
        .map(|i| {
            let a = a.clone();
            tokio::spawn(async move {
                let res = a.buy(&format!("a{i}"), &format!("ka{i}"), "TURN", 1).await;
                res.json::<serde_json::Value>().await.expect("json")
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b_buy = {
        let b = b.clone();
        tokio::spawn(async move {
            let res = b.buy("b", "kb", "TURN", 1).await;
            res.json::<serde_json::Value>().await.expect("json")
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    blocker.rollback().await.expect("release row");

    let b_body = b_buy.await.expect("task");
    let a_bodies: Vec<serde_json::Value> = joined(a_buys).await;
    assert!(
        a_bodies.iter().all(|v| v["order_id"].is_string()),
        "{a_bodies:?}"
    );
    // `remaining` says when B was served: 99 after its own unit if first, 59 if last.
    let b_remaining = b_body["remaining"].as_i64().expect("B bought");
    let a_after_b = a_bodies
        .iter()
        .filter(|v| v["remaining"].as_i64().unwrap_or(0) < b_remaining)
        .count();
    assert!(
        a_after_b >= 20,
        "B was served after {} of A's 40 purchases",
        40 - a_after_b
    );
    let yields = metric(&a.metrics().await, "origin_lock_yields_total");
    assert!(yields >= 1.0, "A gave the lock up {yields} times");
    assert_eq!(a.stock("TURN").await, 59);
}

#[sqlx::test(migrations = "./migrations")]
async fn a_queue_that_waited_for_the_lock_is_answered_from_a_fresh_read_of_the_sku(pool: PgPool) {
    // B's shoppers queue while A holds the lock and sells the last unit. When B gets the lock it
    // reads the SKU row again (its own "not sold out" is a moment old) and answers from it: no
    // transaction, nothing stored.
    let a = Arc::new(spawn_app(pool.clone()).await);
    let b = Arc::new(spawn_app(pool.clone()).await);
    a.put_sku("LAST", 1, 1).await;
    let blocker = hold_sku_row(&pool, "LAST").await;
    let a_buy = {
        let a = a.clone();
        tokio::spawn(async move { a.buy("winner", "kw", "LAST", 1).await.status().as_u16() })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let b_buys = spawn_buys(&b, 10, "b", "LAST");
    tokio::time::sleep(Duration::from_millis(300)).await;
    blocker.rollback().await.expect("release row");

    assert_eq!(a_buy.await.expect("task"), 201);
    let answers: Vec<(u16, String)> = joined(b_buys).await;
    assert!(
        answers.iter().all(|(s, c)| *s == 409 && c == "sold_out"),
        "{answers:?}"
    );
    let mb = b.metrics().await;
    assert_eq!(metric(&mb, "origin_sold_out_fast_path_total"), 10.0);
    assert_eq!(
        metric(&mb, "origin_db_transaction_seconds_count"),
        0.0,
        "B ran no transaction"
    );
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_records")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(stored, 1, "only the winner's 201 is stored");
}

#[sqlx::test(migrations = "./migrations")]
async fn the_batch_that_meets_the_last_unit_decides_only_the_attempts_it_can_sell_to(pool: PgPool) {
    // 21 shoppers queue for the last unit while another holder has the SKU's lease (its key is
    // set in Redis by the test). When the lease is free, the combiner knows one unit at most is
    // left: its batch decides the first attempt alone, and the other 20 are answered sold_out
    // from the sell-out that batch observed — one transaction, one stored answer, instead of a
    // batch that decides (and stores) 20 refusals beside the sale.
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&pool)
        .await
        .expect("db name");
    let app = Arc::new(spawn_app(pool.clone()).await);
    app.put_sku("LAST", 1, 1).await;
    let before = app.metrics().await;
    let lock_key = format!("test:{db}:lock:sku:LAST");
    let mut redis = redis::Client::open("redis://127.0.0.1:6379")
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the local redis");
    let _: () = redis::cmd("SET")
        .arg(&lock_key)
        .arg("another-holder")
        .arg("PX")
        .arg(20_000)
        .query_async(&mut redis)
        .await
        .expect("SET");
    let buys = spawn_buys(&app, 21, "u", "LAST");
    wait_until("all 21 attempts are queued", || {
        let app = app.clone();
        async move { metric(&app.metrics().await, "origin_queue_depth") == 21.0 }
    })
    .await;
    let _: () = redis::cmd("DEL")
        .arg(&lock_key)
        .query_async(&mut redis)
        .await
        .expect("DEL");

    let answers: Vec<(u16, String)> = joined(buys).await;
    assert_eq!(
        answers.iter().filter(|(s, _)| *s == 201).count(),
        1,
        "{answers:?}"
    );
    assert_eq!(
        answers
            .iter()
            .filter(|(s, c)| *s == 409 && c == "sold_out")
            .count(),
        20,
        "{answers:?}"
    );
    let after = app.metrics().await;
    let delta = |name: &str| metric(&after, name) - metric(&before, name);
    assert_eq!(
        delta("origin_db_transaction_seconds_count"),
        1.0,
        "one batch"
    );
    assert_eq!(delta("origin_sold_out_fast_path_total"), 20.0);
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_records")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(stored, 1, "only the buyer's 201 is stored");
    assert_eq!(app.stock("LAST").await, 0);
}

#[sqlx::test(migrations = "./migrations")]
async fn after_sell_out_no_process_takes_the_lock_or_the_database(pool: PgPool) {
    let a = Arc::new(spawn_app(pool.clone()).await);
    let b = Arc::new(spawn_app(pool.clone()).await);
    a.put_sku("GONE", 1, 1).await;
    assert_eq!(a.buy("winner", "w", "GONE", 1).await.status(), 201);
    // Both processes now answer from what they know (b learns it by one read of the SKU row).
    let before = (a.metrics().await, b.metrics().await);
    for i in 0..20 {
        let app = if i % 2 == 0 { &a } else { &b };
        assert_problem(
            app.buy(&format!("late{i}"), &format!("k{i}"), "GONE", 1)
                .await,
            409,
            "sold_out",
        )
        .await;
    }
    let after = (a.metrics().await, b.metrics().await);
    for (name, x, y) in [("a", &before.0, &after.0), ("b", &before.1, &after.1)] {
        assert_eq!(
            metric(x, "origin_lock_acquisitions_total"),
            metric(y, "origin_lock_acquisitions_total"),
            "{name} took a lock"
        );
        assert_eq!(
            metric(x, "origin_db_transaction_seconds_count"),
            metric(y, "origin_db_transaction_seconds_count"),
            "{name} used the db"
        );
        assert_eq!(
            metric(y, "origin_sold_out_fast_path_total")
                - metric(x, "origin_sold_out_fast_path_total"),
            10.0,
            "{name}"
        );
    }
    // Fast-path answers are not stored; the winner's retry still gets its order.
    let replay = b.buy("winner", "w", "GONE", 1).await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_records")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(stored, 1);

    // A restock reopens the sale everywhere as soon as the PUT has answered.
    a.put_sku("GONE", 5, 1).await;
    assert_eq!(b.buy("late1", "k1", "GONE", 1).await.status(), 201);
    assert_eq!(a.buy("late0", "k0", "GONE", 1).await.status(), 201);
}

/// `origin_purchases_total{outcome=…}` of one answer.
fn outcome_count(text: &str, outcome: &str) -> f64 {
    metric(
        text,
        &format!("origin_purchases_total{{outcome=\"{outcome}\"}}"),
    )
}

#[sqlx::test(migrations = "./migrations")]
async fn every_answer_is_counted_under_the_code_it_carries_and_sold_out_reads_the_same_everywhere(
    pool: PgPool,
) {
    let app = spawn_app(pool.clone()).await;
    app.put_sku("LBL", 2, 1).await;
    assert_eq!(app.buy("alice", "a1", "LBL", 1).await.status(), 201);
    let replay = app.buy("alice", "a1", "LBL", 1).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_problem(
        app.buy("alice", "a1", "LBL", 2).await,
        422,
        "idempotency_key_reused",
    )
    .await;
    assert_problem(
        app.buy("alice", "a2", "LBL", 1).await,
        409,
        "purchase_limit",
    )
    .await;
    assert_problem(
        app.buy("nobody", "n1", "NOSUCH", 1).await,
        404,
        "unknown_sku",
    )
    .await;
    // Another process sells the last unit and stores a sold-out refusal after it; this process
    // still believes the sale is open.
    let sku = Sku::parse("LBL").expect("sku");
    let res = store::decide_batch(
        &pool,
        &sku,
        &[
            attempt("bob", "b1", "LBL", 1),
            attempt("carol", "c1", "LBL", 1),
        ],
        None,
        None,
        BatchMode::Sell,
    )
    .await
    .expect("batch commits");
    let Decision::Fresh { answer: stored, .. } = &res.decisions[1] else {
        panic!("{:?}", res.decisions)
    };
    assert_eq!(stored.status, 409);
    // Dave's attempt is refused by a batch (or from a read of the SKU), Erin's from what the
    // process then knows: the shopper reads the same answer whichever decided it.
    for (user, key) in [("dave", "d1"), ("erin", "e1")] {
        let res = app.buy(user, key, "LBL", 1).await;
        assert_eq!(res.status(), 409);
        assert_eq!(res.text().await.expect("body"), stored.body, "{user}");
    }

    let text = app.metrics().await;
    for (outcome, count) in [
        ("created", 1.0),
        ("replayed", 1.0),
        ("idempotency_key_reused", 1.0),
        ("purchase_limit", 1.0),
        ("unknown_sku", 1.0),
        ("sold_out", 2.0),
        ("unknown", 0.0),
    ] {
        assert_eq!(outcome_count(&text, outcome), count, "{outcome}\n{text}");
    }
}

#[sqlx::test(migrations = "./migrations")]
async fn a_lease_too_short_to_commit_commits_nothing_and_answers_503(pool: PgPool) {
    // Validity right after acquiring is at most ttl - drift (300 - 5 ms) < the 299 ms budget.
    let app = spawn_app_with(
        pool,
        &[
            ("LOCK_TTL_MS", "300"),
            ("COMMIT_BUDGET_MS", "299"),
            ("REQUEST_DEADLINE_MS", "800"),
        ],
    )
    .await;
    app.put_sku("SHORT", 10, 10).await;
    let res = app.buy("u", "k", "SHORT", 1).await;
    assert_eq!(res.headers()["retry-after"], "1");
    assert_problem(res, 503, "unavailable").await;
    assert_eq!(app.stock("SHORT").await, 10);
    assert_eq!(app.order_count().await, 0);
}

#[sqlx::test(migrations = "./migrations")]
async fn a_full_queue_and_a_passed_deadline_shed_with_503(pool: PgPool) {
    let app = Arc::new(
        spawn_app_with(
            pool.clone(),
            &[
                ("QUEUE_CAPACITY", "4"),
                ("BATCH_MAX", "2"),
                ("REQUEST_DEADLINE_MS", "1000"),
            ],
        )
        .await,
    );
    app.put_sku("JAM", 100, 100).await;
    // Hold the SKU row so the combiner's transaction blocks: everything else has to queue.
    let blocker = hold_sku_row(&pool, "JAM").await;
    let futs: Vec<_> = (0..30)
        .map(|i| {
            let app = app.clone();
            tokio::spawn(async move {
                let res = app.buy(&format!("u{i}"), &format!("k{i}"), "JAM", 1).await;
                let retry_after = res.headers().get("retry-after").is_some();
                let body: serde_json::Value = res.json().await.expect("json");
                (
                    body["status"].as_u64().unwrap_or(201),
                    body["code"].as_str().unwrap_or("").to_owned(),
                    retry_after,
                )
            })
        })
        .collect();
    // Shorter than the lease (2 s), longer than the request deadline (1 s).
    tokio::time::sleep(Duration::from_millis(1300)).await;
    blocker.rollback().await.expect("release row");
    let results: Vec<_> = joined(futs).await;
    let created = results.iter().filter(|r| r.0 == 201).count();
    let shed = results
        .iter()
        .filter(|r| r.0 == 503 && r.1 == "unavailable" && r.2)
        .count();
    assert_eq!(created + shed, 30, "{results:?}");
    assert!(
        shed >= 20,
        "most requests were shed (queue 4, deadline passed): {results:?}"
    );
    assert!(
        created >= 1,
        "the blocked batch still commits once the row is free: {results:?}"
    );
    let metrics = app.metrics().await;
    assert_eq!(metric(&metrics, "origin_shed_total") as usize, shed);
    assert_eq!(app.stock("JAM").await, 100 - created as i64);
    // Shed requests stored nothing: their keys work now.
    let retry = results.iter().position(|r| r.0 == 503).expect("one shed");
    assert_eq!(
        app.buy(&format!("u{retry}"), &format!("k{retry}"), "JAM", 1)
            .await
            .status(),
        201
    );
}

#[test]
fn error_codes_used_here_exist() {
    assert_eq!(ErrorCode::Unavailable.status(), 503);
}
