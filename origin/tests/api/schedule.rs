//! The sale schedule (issue 16): `starts_at`, `ends_at` and `paused` on the admin PUT and the
//! view; purchases before the start, after the end and while paused are `409 not_started` /
//! `sale_ended` / `sale_paused` with their `Retry-After` and instants, decided by the database's
//! clock in the batch transaction, never stored with the key; a pause stops a second origin
//! process at once; a restock keeps the schedule; bad values change nothing.

use std::time::Duration;

use reqwest::Response;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::helpers::{EDGE_SECRET, assert_problem, created, sale, spawn_app};
use crate::processes::{OriginProcess, http_client, signed_purchase};

/// RFC 3339 of now plus `secs` (whole seconds, UTC).
fn in_secs(secs: i64) -> String {
    let at = chrono::Utc::now() + chrono::Duration::seconds(secs);
    at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn retry_after(res: &Response) -> Option<u64> {
    res.headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

#[sqlx::test(migrations = "./migrations")]
async fn before_the_start_not_started_then_the_same_key_buys_at_the_start(pool: PgPool) {
    let app = spawn_app(pool).await;
    let starts_at = in_secs(3);
    let res = app
        .put_json("S1", sale(10, json!({"starts_at": starts_at})))
        .await;
    assert_eq!(res.status(), 200);
    let view: Value = res.json().await.expect("json");
    assert_eq!(
        (&view["starts_at"], &view["ends_at"], &view["paused"]),
        (&json!(starts_at), &Value::Null, &json!(false))
    );
    assert_eq!(app.view("S1").await["starts_at"], json!(starts_at));

    let res = app.buy("alice", "k1", "S1", 1).await;
    let after = retry_after(&res).expect("Retry-After");
    assert!((1..=3).contains(&after), "Retry-After {after}");
    let body = assert_problem(res, 409, "not_started").await;
    assert_eq!(body["starts_at"], json!(starts_at));
    // Not stored with the key, nothing sold: a retry is not a replay.
    let again = app.buy("alice", "k1", "S1", 1).await;
    assert!(again.headers().get("idempotent-replayed").is_none());
    assert_problem(again, 409, "not_started").await;
    assert_eq!(app.order_count().await, 0);

    // At the start (by the database's clock), the same key buys.
    tokio::time::sleep(Duration::from_secs(after)).await;
    let bought = created(app.buy("alice", "k1", "S1", 1).await).await;
    assert_eq!(bought["remaining"], 9);
    assert_eq!(app.order_count().await, 1);
}

#[sqlx::test(migrations = "./migrations")]
async fn after_the_end_sale_ended_but_a_key_that_bought_still_replays(pool: PgPool) {
    let app = spawn_app(pool).await;
    let ends_at = in_secs(2);
    let res = app
        .put_json(
            "E1",
            sale(10, json!({"starts_at": null, "ends_at": ends_at})),
        )
        .await;
    assert_eq!(res.status(), 200);
    created(app.buy("bob", "bought", "E1", 1).await).await;
    tokio::time::sleep(Duration::from_millis(2_100)).await;

    let res = app.buy("bob", "late", "E1", 1).await;
    assert_eq!(retry_after(&res), None, "nothing to wait for");
    let body = assert_problem(res, 409, "sale_ended").await;
    assert_eq!(body["ends_at"], json!(ends_at));
    assert!(body.get("starts_at").is_none());
    // The key that bought before the end still gets its 201.
    let replay = app.buy("bob", "bought", "E1", 1).await;
    assert_eq!(replay.status(), 201);
    assert_eq!(replay.headers()["idempotent-replayed"], "true");

    // Clearing the end (a schedule-only PUT) reopens the sale; the refused key was not stored.
    let res = app.put_json("E1", json!({"ends_at": null})).await;
    assert_eq!(res.status(), 200);
    let view: Value = res.json().await.expect("json");
    assert_eq!(
        (view["ends_at"].clone(), view["stock"].clone()),
        (Value::Null, json!(9))
    );
    created(app.buy("bob", "late", "E1", 1).await).await;
}

#[sqlx::test(migrations = "./migrations")]
async fn a_pause_stops_a_second_origin_process_at_once_and_an_unpause_reopens_it(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    let other = OriginProcess::start_on(&pool, "redis://127.0.0.1:6379", &[]).await;
    let client = http_client(4, Duration::from_secs(10));
    assert_eq!(app.put_json("P1", sale(10, json!({}))).await.status(), 200);
    // The other process has sold (so it knows the SKU is on sale) before the pause.
    let res = signed_purchase(&client, &other.base, EDGE_SECRET, ("u1", "a", "P1"))
        .send()
        .await
        .expect("send");
    assert_eq!(res.status(), 201);

    // A schedule-only PUT: no restock, no wait, the stock stays.
    let res = app.put_json("P1", json!({"paused": true})).await;
    assert_eq!(res.status(), 200);
    let view: Value = res.json().await.expect("json");
    assert_eq!(
        (view["paused"].clone(), view["stock"].clone()),
        (json!(true), json!(9))
    );

    // At once, on the other process too.
    let res = signed_purchase(&client, &other.base, EDGE_SECRET, ("u2", "b", "P1"))
        .send()
        .await
        .expect("send");
    assert_eq!(retry_after(&res), Some(shared::PAUSED_RETRY_AFTER_SECS));
    assert_problem(res, 409, "sale_paused").await;
    let res = app.buy("u3", "c", "P1", 1).await;
    assert_eq!(retry_after(&res), Some(shared::PAUSED_RETRY_AFTER_SECS));
    assert_problem(res, 409, "sale_paused").await;
    // The paused answers are counted by outcome.
    assert!(app.metrics().await.contains(r#"outcome="sale_paused""#));

    // Unpaused: the same keys buy, on both processes.
    let res = app.put_json("P1", json!({"paused": false})).await;
    assert_eq!(res.status(), 200);
    let res = signed_purchase(&client, &other.base, EDGE_SECRET, ("u2", "b", "P1"))
        .send()
        .await
        .expect("send");
    assert_eq!(res.status(), 201);
    created(app.buy("u3", "c", "P1", 1).await).await;
    assert_eq!(app.order_count().await, 3);
}

#[sqlx::test(migrations = "./migrations")]
async fn a_restock_keeps_the_schedule_unless_it_names_it(pool: PgPool) {
    let app = spawn_app(pool).await;
    let (starts_at, ends_at) = (in_secs(3_600), in_secs(7_200));
    let put = app
        .put_json(
            "R1",
            sale(
                0,
                json!({"starts_at": starts_at, "ends_at": ends_at, "paused": true}),
            ),
        )
        .await;
    assert_eq!(put.status(), 200);
    let res = app.put_json("R1", sale(50, json!({}))).await;
    assert_eq!(res.status(), 200);
    let view: Value = res.json().await.expect("json");
    assert_eq!(
        (
            &view["stock"],
            &view["starts_at"],
            &view["ends_at"],
            &view["paused"]
        ),
        (&json!(50), &json!(starts_at), &json!(ends_at), &json!(true))
    );
    // Naming a field changes that field only; null clears a date.
    let res = app
        .put_json("R1", sale(50, json!({"starts_at": null, "paused": false})))
        .await;
    let view: Value = res.json().await.expect("json");
    assert_eq!(
        (&view["starts_at"], &view["ends_at"], &view["paused"]),
        (&Value::Null, &json!(ends_at), &json!(false))
    );
    // Offsets are accepted and shown in UTC.
    let res = app
        .put_json("R1", json!({"starts_at": "2026-12-01T11:00:00.5+01:00"}))
        .await;
    let view: Value = res.json().await.expect("json");
    assert_eq!(view["starts_at"], "2026-12-01T10:00:00.500Z");
}

#[sqlx::test(migrations = "./migrations")]
async fn bad_schedule_values_are_400_and_change_nothing(pool: PgPool) {
    let app = spawn_app(pool).await;
    let (starts_at, ends_at) = (in_secs(3_600), in_secs(7_200));
    let put = app
        .put_json(
            "B1",
            sale(5, json!({"starts_at": starts_at, "ends_at": ends_at})),
        )
        .await;
    assert_eq!(put.status(), 200);
    let before = app.view("B1").await;
    for body in [
        json!({"starts_at": "tomorrow"}),
        json!({"starts_at": 1_796_119_200}),
        json!({"ends_at": "2026-12-01T10:00:00"}),
        json!({"paused": "yes"}),
        json!({"paused": null}),
        // The end before the start, in one body…
        json!({"starts_at": in_secs(100), "ends_at": in_secs(50)}),
        // …or against the stored start (the database's check).
        json!({"ends_at": in_secs(60)}),
        json!({"starts_at": in_secs(9_000)}),
        sale(99, json!({"ends_at": in_secs(60)})),
        sale(99, json!({"starts_at": "2026-02-30T10:00:00Z"})),
    ] {
        let res = app.put_json("B1", body.clone()).await;
        let problem = assert_problem(res, 400, "invalid_request").await;
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("starts_at")
                    || d.contains("ends_at")
                    || d.contains("paused")),
            "{body}: {problem}"
        );
        assert_eq!(app.view("B1").await, before, "{body} changed the sale");
    }
    // A schedule-only PUT of a SKU with no sale.
    let res = app.put_json("NOPE", json!({"paused": true})).await;
    assert_problem(res, 404, "unknown_sku").await;
    assert_problem(app.get_sku("NOPE").await, 404, "unknown_sku").await;
}
