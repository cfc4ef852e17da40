//! Issue 13 item 9b: the lock's Redis keys live in the deployment's one namespace
//! (`REDIS_KEY_PREFIX`): `<prefix>:lock:sku:<SKU>` and `<prefix>:fence:sku:<SKU>`, no second
//! `redlock:` prefix; a deployment upgraded from the old names
//! (`redlock:lock:<prefix>:lock:sku:<SKU>`, `redlock:fence:…`) keeps selling; and fence counters
//! that fell behind the database's fence catch up instead of getting every batch refused.

use std::time::{Duration, Instant};

use redlock::{NodeState, Redlock, RedlockConfig, RedlockMetrics, RetryPolicy};
use sqlx::PgPool;

use crate::helpers::spawn_app;

/// The local Redis every API test shares (keys namespaced per test database).
const LOCAL_REDIS: &str = "redis://127.0.0.1:6379";

async fn redis() -> redis::aio::MultiplexedConnection {
    redis::Client::open(LOCAL_REDIS)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to the local redis")
}

/// Every key matching `pattern`, sorted.
async fn keys(pattern: &str) -> Vec<String> {
    let mut connection = redis().await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query_async(&mut connection)
        .await
        .expect("KEYS");
    keys.sort();
    keys
}

/// Deletes every key of `prefix` (test databases are named after the test, so a key an earlier
/// run left behind — fence counters have no TTL — would otherwise be seen again).
async fn forget(prefix: &str) {
    let stale = keys(&format!("*{prefix}*")).await;
    if !stale.is_empty() {
        let mut connection = redis().await;
        let _: () = redis::cmd("DEL")
            .arg(&stale)
            .query_async(&mut connection)
            .await
            .expect("DEL");
    }
}

async fn get_u64(key: &str) -> Option<u64> {
    let mut connection = redis().await;
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut connection)
        .await
        .expect("GET")
}

async fn db_name(pool: &PgPool) -> String {
    sqlx::query_scalar("SELECT current_database()")
        .fetch_one(pool)
        .await
        .expect("db name")
}

async fn sku_fence(pool: &PgPool, sku: &str) -> i64 {
    sqlx::query_scalar("SELECT fence FROM skus WHERE sku = $1")
        .bind(sku)
        .fetch_one(pool)
        .await
        .expect("sku row")
}

#[sqlx::test(migrations = "./migrations")]
async fn lock_keys_carry_the_deployment_prefix_once(pool: PgPool) {
    let prefix = format!("test:{}", db_name(&pool).await);
    forget(&prefix).await;
    let app = spawn_app(pool.clone()).await;
    app.put_sku("KEYS", 10, 10).await;
    for i in 0..3 {
        let res = app.buy(&format!("u{i}"), &format!("k{i}"), "KEYS", 1).await;
        assert_eq!(res.status(), 201);
    }
    // Every key this deployment made is under its prefix, once; the fence counter is
    // `<prefix>:fence:sku:KEYS` (the lock key itself is gone after the release).
    let everything = keys(&format!("*{prefix}*")).await;
    assert!(
        everything.iter().all(
            |k| k.starts_with(&format!("{prefix}:")) && k.matches(prefix.as_str()).count() == 1
        ),
        "keys outside the deployment's namespace or with the prefix twice: {everything:?}"
    );
    let fence_key = format!("{prefix}:fence:sku:KEYS");
    assert!(everything.contains(&fence_key), "{everything:?}");
    let fence = get_u64(&fence_key).await.expect("fence counter");
    assert_eq!(
        i64::try_from(fence).expect("i64"),
        sku_fence(&pool, "KEYS").await,
        "the counter issued the fence the SKU row last saw"
    );
}

/// A deployment that ran on the old key names (`redlock:lock:<prefix>:lock:sku:<SKU>` and its
/// fence counter `redlock:fence:<prefix>:lock:sku:<SKU>`) committed batches up to some fence;
/// the SKU row keeps the highest. The upgraded origin locks under the new names, whose fence
/// counter does not exist yet — it must still issue fences above the row's (the counter's
/// floor is the wall clock in microseconds, above every fence ever issued), or every batch
/// would be refused as stale. And it shares the nodes' restart-guard markers with the old
/// version (`redlock:node:*`), so the upgrade does not start a recovery window on the nodes.
#[sqlx::test(migrations = "./migrations")]
async fn a_deployment_upgraded_from_the_old_lock_key_names_keeps_selling(pool: PgPool) {
    let prefix = format!("test:{}", db_name(&pool).await);
    forget(&prefix).await;
    // The old origin: the lock's own `redlock:` prefix around the origin's prefixed key. It has
    // used the nodes (their restart-guard markers exist) when the upgraded origin starts.
    let old = Redlock::connect(
        &[LOCAL_REDIS.to_owned()],
        RedlockConfig::default(),
        RedlockMetrics::default(),
    )
    .await
    .expect("old lock");
    let ready_by = Instant::now() + Duration::from_secs(30);
    while old.node_states().await != [NodeState::Ready] {
        assert!(Instant::now() < ready_by, "the local redis never voted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The upgraded origin starts next to it: ready at once, not after the 10 s restart-guard
    // window that markers of its own would have cost.
    let started = Instant::now();
    let upgraded = spawn_app(pool.clone()).await;
    let ready_in = started.elapsed();
    assert!(
        ready_in < Duration::from_secs(5),
        "the upgraded origin took {ready_in:?} to be ready"
    );
    upgraded.put_sku("UPG", 100, 100).await;

    // The old origin sells on meanwhile (rolling upgrade): its batches record their fences.
    let old_key = format!("{prefix}:lock:sku:UPG");
    let mut old_fence = 0;
    for _ in 0..200 {
        let lease = old
            .acquire(
                &old_key,
                Duration::from_secs(2),
                &RetryPolicy::jittered(Duration::from_millis(5), Duration::from_millis(100)),
                Instant::now() + Duration::from_secs(2),
            )
            .await
            .expect("old lock");
        old_fence = lease.fence();
        // What the old origin's batch under this lease recorded on the SKU row.
        sqlx::query("UPDATE skus SET fence = GREATEST(fence, $1) WHERE sku = 'UPG'")
            .bind(i64::try_from(old_fence).expect("i64"))
            .execute(&pool)
            .await
            .expect("record the fence");
        old.release(lease).await.expect("release");
    }
    let old_counter = format!("redlock:fence:{old_key}");
    assert_eq!(
        get_u64(&old_counter).await,
        Some(old_fence),
        "the old layout"
    );

    // Then the upgraded origin sells, under the new key names.
    for i in 0..20 {
        let res = upgraded
            .buy(&format!("u{i}"), &format!("k{i}"), "UPG", 1)
            .await;
        assert_eq!(res.status(), 201, "purchase {i} after the upgrade");
    }
    assert_eq!(upgraded.stock("UPG").await, 80);
    let new_fence = sku_fence(&pool, "UPG").await;
    assert!(
        new_fence > i64::try_from(old_fence).expect("i64"),
        "the new counter issues fences above the old ones: {new_fence} <= {old_fence}"
    );

    // The old counter stays behind (harmless, one small key per SKU).
    forget(&prefix).await;
}

/// The SKU row's fence is far ahead of the SKU's fence counters — what a rollback across the
/// key rename leaves (the row holds fences issued meanwhile by counters under the other names),
/// or an origin whose clock ran an hour ahead when it created a counter. The first batch is
/// refused as stale; the origin then raises the counters to the row's fence and the next lease
/// commits. Before, every batch was refused and every purchase answered 503, for as long as the
/// counters needed to catch up one acquisition at a time (here: an hour's worth of µs).
#[sqlx::test(migrations = "./migrations")]
async fn fence_counters_behind_the_database_catch_up_instead_of_refusing_every_batch(pool: PgPool) {
    let prefix = format!("test:{}", db_name(&pool).await);
    forget(&prefix).await;
    let app = spawn_app(pool.clone()).await;
    app.put_sku("BEHIND", 100, 100).await;
    assert_eq!(app.buy("u0", "k0", "BEHIND", 1).await.status(), 201);
    let hour_ahead = sku_fence(&pool, "BEHIND").await + 3_600_000_000;
    sqlx::query("UPDATE skus SET fence = $1 WHERE sku = 'BEHIND'")
        .bind(hour_ahead)
        .execute(&pool)
        .await
        .expect("move the row's fence ahead");

    for i in 1..=20 {
        let res = app
            .buy(&format!("u{i}"), &format!("k{i}"), "BEHIND", 1)
            .await;
        assert_eq!(res.status(), 201, "purchase {i} with the counters behind");
    }
    assert_eq!(app.stock("BEHIND").await, 79);
    assert!(
        sku_fence(&pool, "BEHIND").await > hour_ahead,
        "batches commit with fences above the row's again"
    );
    let counter = get_u64(&format!("{prefix}:fence:sku:BEHIND"))
        .await
        .expect("counter");
    assert!(
        i64::try_from(counter).expect("i64") > hour_ahead,
        "the counter caught up: {counter}"
    );
    forget(&prefix).await;
}
