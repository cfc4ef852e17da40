use sqlx::PgPool;

use crate::helpers::{assert_problem, spawn_app};

#[sqlx::test(migrations = "./migrations")]
async fn put_creates_and_get_shows_the_sale(pool: PgPool) {
    let app = spawn_app(pool).await;
    let res = app.put_sku("SHOE-1", 10, 2).await;
    assert_eq!(res.status(), 200);
    let body: serde_json::Value = res.json().await.expect("json");
    assert_eq!(
        body,
        serde_json::json!({"sku":"SHOE-1","name":"Item SHOE-1","price_cents":1999,"stock":10,"held":0,"max_per_user":2,
                           "starts_at":null,"ends_at":null,"paused":false,"waiting_room":null,
                           "proof_of_work":null,"network_limits":null})
    );
    let got: serde_json::Value = app.get_sku("SHOE-1").await.json().await.expect("json");
    assert_eq!(got, body);
    assert_problem(app.get_sku("NOPE").await, 404, "unknown_sku").await;
    assert_problem(app.get_sku("bad%20sku").await, 400, "invalid_request").await;
}

#[sqlx::test(migrations = "./migrations")]
async fn admin_needs_the_token_and_changes_nothing_without_it(pool: PgPool) {
    let app = spawn_app(pool).await;
    let body = r#"{"name":"X","price_cents":1,"stock":5,"max_per_user":1}"#.to_owned();
    assert_problem(
        app.put_sku_raw("X", None, body.clone()).await,
        401,
        "unauthorized",
    )
    .await;
    assert_problem(
        app.put_sku_raw("X", Some("wrong-token-wrong-token"), body.clone())
            .await,
        401,
        "unauthorized",
    )
    .await;
    assert_problem(
        app.put_sku_raw("X", Some(""), body).await,
        401,
        "unauthorized",
    )
    .await;
    assert_problem(app.get_sku("X").await, 404, "unknown_sku").await;
}

#[sqlx::test(migrations = "./migrations")]
async fn invalid_admin_bodies_are_400(pool: PgPool) {
    let app = spawn_app(pool).await;
    let token = Some(crate::helpers::ADMIN_TOKEN);
    for body in [
        "nope",
        "{}",
        r#"{"name":"X","price_cents":-1,"stock":5,"max_per_user":1}"#,
        r#"{"name":"X","price_cents":1,"stock":-5,"max_per_user":1}"#,
        r#"{"name":"X","price_cents":1,"stock":5,"max_per_user":0}"#,
        r#"{"name":"X","price_cents":1,"stock":"5","max_per_user":1}"#,
        r#"{"name":"","price_cents":1,"stock":5,"max_per_user":1}"#,
    ] {
        assert_problem(
            app.put_sku_raw("X", token, body.to_owned()).await,
            400,
            "invalid_request",
        )
        .await;
    }
    assert_problem(app.get_sku("X").await, 404, "unknown_sku").await;
}

#[sqlx::test(migrations = "./migrations")]
async fn replacing_a_sale_keeps_earlier_orders_toward_the_cap(pool: PgPool) {
    let app = spawn_app(pool).await;
    app.put_sku("CAP", 5, 2).await;
    assert_eq!(app.buy("alice", "k1", "CAP", 2).await.status(), 201);
    let res = app.put_sku("CAP", 100, 3).await;
    let view: serde_json::Value = res.json().await.expect("json");
    assert_eq!(
        (view["stock"].as_i64(), view["max_per_user"].as_i64()),
        (Some(100), Some(3))
    );
    assert_eq!(app.buy("alice", "k2", "CAP", 1).await.status(), 201);
    crate::helpers::assert_problem(
        app.buy("alice", "k3", "CAP", 1).await,
        409,
        "purchase_limit",
    )
    .await;
    assert_eq!(app.stock("CAP").await, 99);
}
