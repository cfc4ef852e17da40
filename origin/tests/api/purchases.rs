use sqlx::PgPool;

use crate::helpers::{Purchase, assert_problem, spawn_app};

#[sqlx::test(migrations = "./migrations")]
async fn a_purchase_is_created_once_and_replayed_byte_for_byte(pool: PgPool) {
    let app = spawn_app(pool).await;
    app.put_sku("TV", 10, 5).await;

    let first = app.buy("alice", "order-1", "TV", 2).await;
    assert_eq!(first.status(), 201);
    assert_eq!(first.headers()["content-type"], "application/json");
    assert!(first.headers().get("idempotent-replayed").is_none());
    let first_body = first.text().await.expect("body");
    let v: serde_json::Value = serde_json::from_str(&first_body).expect("json");
    assert_eq!(
        (
            v["sku"].as_str(),
            v["qty"].as_i64(),
            v["user"].as_str(),
            v["remaining"].as_i64()
        ),
        (Some("TV"), Some(2), Some("alice"), Some(8))
    );
    assert!(v["order_id"].as_str().is_some_and(|s| !s.is_empty()));

    // Same key, same request, different JSON spelling: a replay, not a second order.
    let again = app
        .send(
            &Purchase::new("alice", "order-1", "TV", 2)
                .body(r#"{ "qty": 2, "sku": "TV", "extra": true }"#),
        )
        .await;
    assert_eq!(again.status(), 201);
    assert_eq!(again.headers()["idempotent-replayed"], "true");
    assert_eq!(again.text().await.expect("body"), first_body);
    // The sf-string form names the same key.
    let sf = app.buy("alice", "\"order-1\"", "TV", 2).await;
    assert_eq!(sf.headers()["idempotent-replayed"], "true");
    assert_eq!(sf.text().await.expect("body"), first_body);

    assert_eq!(app.order_count().await, 1);
    assert_eq!(app.stock("TV").await, 8);
}

#[sqlx::test(migrations = "./migrations")]
async fn reusing_a_key_for_another_request_is_422(pool: PgPool) {
    let app = spawn_app(pool).await;
    app.put_sku("TV", 10, 5).await;
    app.put_sku("RADIO", 10, 5).await;
    assert_eq!(app.buy("alice", "k", "TV", 1).await.status(), 201);
    assert_problem(
        app.buy("alice", "k", "TV", 2).await,
        422,
        "idempotency_key_reused",
    )
    .await;
    assert_problem(
        app.buy("alice", "k", "RADIO", 1).await,
        422,
        "idempotency_key_reused",
    )
    .await;
    assert_eq!(app.stock("TV").await, 9);
    assert_eq!(app.stock("RADIO").await, 10);
}

#[sqlx::test(migrations = "./migrations")]
async fn keys_are_scoped_per_user(pool: PgPool) {
    let app = spawn_app(pool).await;
    app.put_sku("TV", 10, 5).await;
    let a = app
        .buy("alice", "shared-key", "TV", 1)
        .await
        .text()
        .await
        .expect("body");
    let b = app.buy("bob", "shared-key", "TV", 1).await;
    assert_eq!(b.status(), 201);
    assert!(b.headers().get("idempotent-replayed").is_none());
    let b: serde_json::Value = b.json().await.expect("json");
    assert_eq!(b["user"], "bob");
    assert!(!a.contains(b["order_id"].as_str().expect("id")));
    assert_eq!(app.order_count().await, 2);
}

#[sqlx::test(migrations = "./migrations")]
async fn sold_out_purchase_limit_and_unknown_sku_are_stored_and_replayed(pool: PgPool) {
    let app = spawn_app(pool).await;
    app.put_sku("LAST", 3, 2).await;
    assert_eq!(app.buy("alice", "a1", "LAST", 2).await.status(), 201);
    // Cap: alice has 2 of max 2.
    let cap = assert_problem(
        app.buy("alice", "a2", "LAST", 1).await,
        409,
        "purchase_limit",
    )
    .await;
    // Not enough left for 2.
    let short = assert_problem(app.buy("bob", "b1", "LAST", 2).await, 409, "sold_out").await;
    // Unknown SKU.
    let unknown = assert_problem(app.buy("bob", "b2", "GHOST", 1).await, 404, "unknown_sku").await;

    // Replays return the same answers even after the state changed (restock).
    app.put_sku("LAST", 50, 10).await;
    app.put_sku("GHOST", 5, 1).await;
    for (user, key, sku, qty, status, body) in [
        ("alice", "a2", "LAST", 1, 409, cap),
        ("bob", "b1", "LAST", 2, 409, short),
        ("bob", "b2", "GHOST", 1, 404, unknown),
    ] {
        let res = app.buy(user, key, sku, qty).await;
        assert_eq!(res.status(), status);
        assert_eq!(res.headers()["idempotent-replayed"], "true");
        assert_eq!(res.json::<serde_json::Value>().await.expect("json"), body);
    }
    assert_eq!(app.order_count().await, 1);
}

#[sqlx::test(migrations = "./migrations")]
async fn sold_out_comes_before_purchase_limit(pool: PgPool) {
    let app = spawn_app(pool).await;
    app.put_sku("ONE", 1, 1).await;
    assert_eq!(app.buy("alice", "a1", "ONE", 1).await.status(), 201);
    assert_problem(app.buy("alice", "a2", "ONE", 1).await, 409, "sold_out").await;
}

#[sqlx::test(migrations = "./migrations")]
async fn errors_that_are_not_stored_can_be_retried_with_the_same_key(pool: PgPool) {
    let app = spawn_app(pool).await;
    app.put_sku("TV", 10, 5).await;
    // 400 (bad body) with key k, then the same key with a good body succeeds.
    assert_problem(
        app.send(&Purchase::new("alice", "k", "TV", 1).body("{"))
            .await,
        400,
        "invalid_request",
    )
    .await;
    // 401 (bad signature) with key k.
    let mut forged = Purchase::new("alice", "k", "TV", 1);
    forged.secret = "not-the-edge-secret-at-all".into();
    assert_problem(app.send(&forged).await, 401, "bad_signature").await;
    let ok = app.buy("alice", "k", "TV", 1).await;
    assert_eq!(ok.status(), 201);
    assert!(ok.headers().get("idempotent-replayed").is_none());
}
