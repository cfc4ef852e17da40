//! Correctness under concurrency: the last item, same-key storms, the per-user cap.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::join_all;
use sqlx::PgPool;

use crate::helpers::{TestApp, spawn_app};

async fn statuses(
    app: &Arc<TestApp>,
    requests: Vec<(String, String, i64)>,
    sku: &str,
) -> HashMap<String, usize> {
    let futs = requests.into_iter().map(|(user, key, qty)| {
        let app = app.clone();
        let sku = sku.to_owned();
        tokio::spawn(async move {
            let res = app.buy(&user, &key, &sku, qty).await;
            let status = res.status().as_u16();
            let body: serde_json::Value = res.json().await.expect("json");
            if status == 201 {
                "201".to_owned()
            } else {
                format!("{status} {}", body["code"].as_str().unwrap_or("?"))
            }
        })
    });
    let mut counts = HashMap::new();
    for r in join_all(futs).await {
        *counts.entry(r.expect("task")).or_insert(0) += 1;
    }
    counts
}

#[sqlx::test(migrations = "./migrations")]
async fn last_item_goes_to_exactly_one_of_200_shoppers(pool: PgPool) {
    let app = Arc::new(spawn_app(pool).await);
    app.put_sku("LAST", 1, 1).await;
    let reqs = (0..200)
        .map(|i| (format!("user{i}"), format!("key{i}"), 1))
        .collect();
    let counts = statuses(&app, reqs, "LAST").await;
    assert_eq!(counts.get("201"), Some(&1), "{counts:?}");
    assert_eq!(counts.get("409 sold_out"), Some(&199), "{counts:?}");
    assert_eq!(app.stock("LAST").await, 0);
    assert_eq!(app.order_count().await, 1);
}

#[sqlx::test(migrations = "./migrations")]
async fn fifty_identical_requests_make_one_order(pool: PgPool) {
    let app = Arc::new(spawn_app(pool).await);
    app.put_sku("TV", 100, 5).await;
    let reqs = (0..50)
        .map(|_| ("alice".to_owned(), "same-key".to_owned(), 1))
        .collect();
    let counts = statuses(&app, reqs, "TV").await;
    let created = counts.get("201").copied().unwrap_or(0);
    let in_flight = counts
        .get("409 idempotency_in_flight")
        .copied()
        .unwrap_or(0);
    assert!(
        created >= 1 && created + in_flight == 50,
        "only 201 (first or replay) and in-flight 409s: {counts:?}"
    );
    assert_eq!(app.order_count().await, 1);
    assert_eq!(app.stock("TV").await, 99);
    // Every 201 is the same order.
    let replay: serde_json::Value = app
        .buy("alice", "same-key", "TV", 1)
        .await
        .json()
        .await
        .expect("json");
    let order_id: String = sqlx::query_scalar("SELECT order_id::text FROM orders")
        .fetch_one(&app.pool)
        .await
        .expect("order");
    assert_eq!(replay["order_id"], order_id);
}

#[sqlx::test(migrations = "./migrations")]
async fn max_per_user_holds_under_concurrency(pool: PgPool) {
    let app = Arc::new(spawn_app(pool).await);
    app.put_sku("CAP", 1000, 3).await;
    // 5 users x 20 parallel attempts with distinct keys each.
    let reqs = (0..100)
        .map(|i| (format!("user{}", i % 5), format!("key{i}"), 1))
        .collect();
    let counts = statuses(&app, reqs, "CAP").await;
    assert_eq!(counts.get("201"), Some(&15), "{counts:?}");
    assert_eq!(counts.get("409 purchase_limit"), Some(&85), "{counts:?}");
    let max: i64 = sqlx::query_scalar(
        "SELECT MAX(s)::BIGINT FROM (SELECT SUM(qty) AS s FROM orders GROUP BY user_id) t",
    )
    .fetch_one(&app.pool)
    .await
    .expect("max");
    assert_eq!(max, 3);
    assert_eq!(app.stock("CAP").await, 985);
}
