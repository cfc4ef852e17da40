//! The waiting room setting (issue 17): `waiting_room` on the admin PUT (absent keeps, `null`
//! disables, a body of it alone changes nothing else) and always in the view; bad values are 400
//! naming the field and change nothing. The origin only stores it: the edge runs the room.

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::helpers::{assert_problem, sale, spawn_app};

#[sqlx::test(migrations = "./migrations")]
async fn the_room_is_set_kept_by_a_restock_and_disabled_by_null(pool: PgPool) {
    let app = spawn_app(pool).await;
    // A sale without a room shows `"waiting_room": null`.
    let res = app.put_json("W0", sale(5, json!({}))).await;
    assert_eq!(res.status(), 200);
    let shown: Value = res.json().await.expect("json");
    assert_eq!(shown.get("waiting_room"), Some(&Value::Null), "{shown}");
    assert_eq!(app.view("W0").await["waiting_room"], Value::Null);

    // Without an overbook the view shows the default, 1.5 (issue 36).
    let set = json!({"admit_per_minute": 600, "pass_secs": 120});
    let room = json!({"admit_per_minute": 600, "pass_secs": 120, "overbook": 1.5});
    let res = app
        .put_json("W1", sale(5, json!({"waiting_room": set})))
        .await;
    assert_eq!(res.status(), 200);
    let shown: Value = res.json().await.expect("json");
    assert_eq!(shown["waiting_room"], room);
    assert_eq!(app.view("W1").await["waiting_room"], room);

    // A restock that does not name it keeps it.
    let res = app.put_json("W1", sale(50, json!({}))).await;
    let shown: Value = res.json().await.expect("json");
    assert_eq!(
        (&shown["stock"], &shown["waiting_room"]),
        (&json!(50), &room)
    );

    // A body of the room alone changes the room and nothing else (no restock).
    let faster = json!({"admit_per_minute": 6000, "pass_secs": 30, "overbook": 3.0});
    let res = app.put_json("W1", json!({"waiting_room": faster})).await;
    assert_eq!(res.status(), 200);
    let shown: Value = res.json().await.expect("json");
    assert_eq!(
        (&shown["stock"], &shown["waiting_room"]),
        (&json!(50), &faster)
    );
    assert_eq!(app.view("W1").await["waiting_room"], faster);
    // The bounds are taken as they are.
    for overbook in [json!(1), json!(10.0)] {
        let room = json!({"admit_per_minute": 60, "pass_secs": 30, "overbook": overbook});
        let res = app.put_json("W1", json!({"waiting_room": room})).await;
        assert_eq!(res.status(), 200);
        let shown = app.view("W1").await;
        assert_eq!(
            shown["waiting_room"]["overbook"].as_f64(),
            overbook.as_f64(),
            "{shown}"
        );
    }

    // `null` disables it; the schedule fields are untouched.
    let res = app.put_json("W1", json!({"waiting_room": null})).await;
    assert_eq!(res.status(), 200);
    let after = app.view("W1").await;
    assert_eq!(after["waiting_room"], Value::Null);
    assert_eq!(after["paused"], json!(false));

    // The room on a SKU with no sale: 404, like any schedule-only PUT.
    let res = app.put_json("NOPE", json!({"waiting_room": room})).await;
    assert_problem(res, 404, "unknown_sku").await;
}

#[sqlx::test(migrations = "./migrations")]
async fn bad_room_values_are_400_naming_the_field_and_change_nothing(pool: PgPool) {
    let app = spawn_app(pool).await;
    let room = json!({"admit_per_minute": 600, "pass_secs": 120});
    let res = app
        .put_json("B1", sale(5, json!({"waiting_room": room})))
        .await;
    assert_eq!(res.status(), 200);
    let before = app.view("B1").await;
    for body in [
        json!({"waiting_room": true}),
        json!({"waiting_room": "on"}),
        json!({"waiting_room": {"pass_secs": 60}}),
        json!({"waiting_room": {"admit_per_minute": 60}}),
        json!({"waiting_room": {"admit_per_minute": 0, "pass_secs": 60}}),
        json!({"waiting_room": {"admit_per_minute": 1_000_001, "pass_secs": 60}}),
        json!({"waiting_room": {"admit_per_minute": -5, "pass_secs": 60}}),
        json!({"waiting_room": {"admit_per_minute": 1.5, "pass_secs": 60}}),
        json!({"waiting_room": {"admit_per_minute": 60, "pass_secs": 0}}),
        json!({"waiting_room": {"admit_per_minute": 60, "pass_secs": 86_401}}),
        json!({"waiting_room": {"admit_per_minute": 60, "pass_secs": "60"}}),
        json!({"waiting_room": {"admit_per_minute": 60, "pass_secs": 60, "overbook": 0.99}}),
        json!({"waiting_room": {"admit_per_minute": 60, "pass_secs": 60, "overbook": 10.01}}),
        json!({"waiting_room": {"admit_per_minute": 60, "pass_secs": 60, "overbook": "2"}}),
        json!({"waiting_room": {"admit_per_minute": 60, "pass_secs": 60, "overbook": true}}),
        sale(
            99,
            json!({"waiting_room": {"admit_per_minute": 60, "pass_secs": 0}}),
        ),
    ] {
        let res = app.put_json("B1", body.clone()).await;
        let problem = assert_problem(res, 400, "invalid_request").await;
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains("waiting_room")),
            "{body}: {problem}"
        );
        assert_eq!(app.view("B1").await, before, "{body} changed the sale");
    }
}

/// Migration `waiting_room_pairs`: the check refuses a row with one of the room's two columns set
/// and the other null (the first check let it through: its expression was NULL). Fails on the
/// migrations before it.
#[sqlx::test(migrations = "./migrations")]
async fn the_database_refuses_half_a_waiting_room(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    assert_eq!(app.put_json("HALF", sale(5, json!({}))).await.status(), 200);
    for set in [
        "room_admit_per_minute = 60, room_pass_secs = NULL",
        "room_admit_per_minute = NULL, room_pass_secs = 60",
        "room_admit_per_minute = 0, room_pass_secs = 60",
        "room_admit_per_minute = 60, room_pass_secs = 86401",
    ] {
        let e = sqlx::query(&format!("UPDATE skus SET {set} WHERE sku = 'HALF'"))
            .execute(&pool)
            .await
            .expect_err(set);
        let db = e.as_database_error().expect("a database error");
        assert_eq!(
            (db.code().as_deref(), db.constraint()),
            (Some("23514"), Some("skus_waiting_room")),
            "{set}"
        );
    }
    sqlx::query(
        "UPDATE skus SET room_admit_per_minute = 60, room_pass_secs = 30 WHERE sku = 'HALF'",
    )
    .execute(&pool)
    .await
    .expect("a whole room");
    assert_eq!(
        app.view("HALF").await["waiting_room"],
        json!({"admit_per_minute": 60, "pass_secs": 30, "overbook": 1.5})
    );
}

/// Migration `room_overbook`: the overbook is stored in hundredths, 100..=1000, only with a room.
#[sqlx::test(migrations = "./migrations")]
async fn the_database_keeps_the_overbook_in_range(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    assert_eq!(app.put_json("OB", sale(5, json!({}))).await.status(), 200);
    for set in [
        "room_admit_per_minute = 60, room_pass_secs = 30, room_overbook_hundredths = 99",
        "room_admit_per_minute = 60, room_pass_secs = 30, room_overbook_hundredths = 1001",
        "room_overbook_hundredths = 150",
    ] {
        let e = sqlx::query(&format!("UPDATE skus SET {set} WHERE sku = 'OB'"))
            .execute(&pool)
            .await
            .expect_err(set);
        let db = e.as_database_error().expect("a database error");
        assert_eq!(
            (db.code().as_deref(), db.constraint()),
            (Some("23514"), Some("skus_room_overbook")),
            "{set}"
        );
    }
    let room = json!({"admit_per_minute": 60, "pass_secs": 30, "overbook": 2.25});
    let res = app.put_json("OB", json!({"waiting_room": room})).await;
    assert_eq!(res.status(), 200);
    let stored: Option<i32> =
        sqlx::query_scalar("SELECT room_overbook_hundredths FROM skus WHERE sku = 'OB'")
            .fetch_one(&pool)
            .await
            .expect("column");
    assert_eq!(stored, Some(225));
    assert_eq!(app.view("OB").await["waiting_room"], room);
}

/// Issue 36: the view shows the units in held orders (`held`), from which a sold-out waiting room
/// tells its line whether units may come back; paying or cancelling a hold takes it off.
#[sqlx::test(migrations = "./migrations")]
async fn the_view_shows_the_units_held(pool: PgPool) {
    use crate::helpers::{Caller, created};
    let app = spawn_app(pool).await;
    app.put_sku_holds("H", 5, 5, 600).await;
    assert_eq!(app.view("H").await["held"], json!(0));
    let first = created(app.buy("u", "k1", "H", 2).await).await;
    let second = created(app.buy("v", "k2", "H", 1).await).await;
    let view = app.view("H").await;
    assert_eq!(
        (&view["stock"], &view["held"]),
        (&json!(2), &json!(3)),
        "{view}"
    );
    let id = |o: &Value| o["order_id"].as_str().expect("id").to_owned();
    let paid = app.order_action(&id(&first), "pay", "", Caller::Shop).await;
    assert_eq!(paid.status(), 200);
    let cancelled = app
        .order_action(&id(&second), "cancel", "", Caller::Shop)
        .await;
    assert_eq!(cancelled.status(), 200);
    let view = app.view("H").await;
    assert_eq!(
        (&view["stock"], &view["held"]),
        (&json!(3), &json!(0)),
        "{view}"
    );
    // Confirmed at once (no holds): nothing held.
    app.put_sku("C", 5, 5).await;
    assert_eq!(app.buy("u", "k3", "C", 1).await.status(), 201);
    assert_eq!(app.view("C").await["held"], json!(0));
}
