//! The bot defences (issue 28): `proof_of_work` and `network_limits` on the admin PUT (absent
//! keeps, `null` disables, a body of them alone changes nothing else) and always in the view; bad
//! values are 400 naming the field and change nothing; the `skus` checks (migration
//! `bot_defences`) refuse rows the wire could not produce. The origin only stores them: the edge
//! enforces them.

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::helpers::{assert_problem, sale, spawn_app};

/// The SKU's sale generation, straight from the database.
async fn generation(pool: &PgPool, sku: &str) -> i64 {
    sqlx::query_scalar("SELECT generation FROM skus WHERE sku = $1")
        .bind(sku)
        .fetch_one(pool)
        .await
        .expect("generation")
}

#[sqlx::test(migrations = "./migrations")]
async fn the_defences_are_set_kept_by_a_restock_and_disabled_by_null(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    // A sale without them shows both as `null`.
    let res = app.put_json("D0", sale(5, json!({}))).await;
    assert_eq!(res.status(), 200);
    let shown: Value = res.json().await.expect("json");
    assert_eq!(
        (shown.get("proof_of_work"), shown.get("network_limits")),
        (Some(&Value::Null), Some(&Value::Null)),
        "{shown}"
    );
    let view = app.view("D0").await;
    assert_eq!(
        (&view["proof_of_work"], &view["network_limits"]),
        (&Value::Null, &Value::Null)
    );

    // Set on a new SKU: shown in the answer and the view; the window defaults to 3600, an
    // absent bound shows as `null`, an absent algorithm as ALTCHA's v1 (`SHA-256`).
    let put_pow = json!({"min_bits": 10, "max_bits": 18});
    let pow = json!({"min_bits": 10, "max_bits": 18, "algorithm": "SHA-256"});
    let res = app
        .put_json(
            "D1",
            sale(
                5,
                json!({"proof_of_work": put_pow, "network_limits": {"units": 4}}),
            ),
        )
        .await;
    assert_eq!(res.status(), 200);
    let limits = json!({"admissions": null, "units": 4, "window_secs": 3600});
    let shown: Value = res.json().await.expect("json");
    assert_eq!(
        (&shown["proof_of_work"], &shown["network_limits"]),
        (&pow, &limits)
    );
    let view = app.view("D1").await;
    assert_eq!(view, shown);

    // A restock that names neither keeps both.
    let res = app.put_json("D1", sale(50, json!({}))).await;
    assert_eq!(res.status(), 200);
    let shown: Value = res.json().await.expect("json");
    assert_eq!(
        (
            &shown["stock"],
            &shown["proof_of_work"],
            &shown["network_limits"]
        ),
        (&json!(50), &pow, &limits)
    );
    assert_eq!(generation(&pool, "D1").await, 2);

    // A restock may replace one and keep the other.
    let both = json!({"admissions": 20, "units": 2, "window_secs": 600});
    let res = app
        .put_json("D1", sale(40, json!({"network_limits": both})))
        .await;
    assert_eq!(res.status(), 200);
    let view = app.view("D1").await;
    assert_eq!(
        (
            &view["stock"],
            &view["proof_of_work"],
            &view["network_limits"]
        ),
        (&json!(40), &pow, &both)
    );

    // `null` disables each, the other and the rest of the sale untouched.
    let res = app.put_json("D1", json!({"proof_of_work": null})).await;
    assert_eq!(res.status(), 200);
    let view = app.view("D1").await;
    assert_eq!(
        (
            &view["stock"],
            &view["proof_of_work"],
            &view["network_limits"]
        ),
        (&json!(40), &Value::Null, &both)
    );
    let res = app
        .put_json("D1", sale(30, json!({"network_limits": null})))
        .await;
    assert_eq!(res.status(), 200);
    let view = app.view("D1").await;
    assert_eq!(
        (
            &view["stock"],
            &view["proof_of_work"],
            &view["network_limits"]
        ),
        (&json!(30), &Value::Null, &Value::Null)
    );
    // Off is every column null.
    let off: bool = sqlx::query_scalar(
        "SELECT num_nulls(pow_min_bits, pow_max_bits, pow_algorithm, net_admissions, net_units,
                          net_window_secs) = 6
         FROM skus WHERE sku = 'D1'",
    )
    .fetch_one(&pool)
    .await
    .expect("columns");
    assert!(off);
}

#[sqlx::test(migrations = "./migrations")]
async fn a_body_of_a_defence_alone_changes_only_it(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    let room = json!({"admit_per_minute": 600, "pass_secs": 120});
    let limits = json!({"admissions": 5, "units": null, "window_secs": 60});
    let res = app
        .put_json(
            "S1",
            sale(10, json!({"waiting_room": room, "network_limits": limits})),
        )
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(app.buy("alice", "k1", "S1", 3).await.status(), 201);
    let before = app.view("S1").await;
    assert_eq!(before["stock"], json!(7));

    // The proof of work alone: no new generation, the stock and every other setting untouched.
    let pow = json!({"min_bits": 1, "max_bits": 30, "algorithm": "PBKDF2/SHA-256"});
    let res = app.put_json("S1", json!({"proof_of_work": pow})).await;
    assert_eq!(res.status(), 200);
    let shown: Value = res.json().await.expect("json");
    let mut expected = before.clone();
    expected["proof_of_work"] = pow.clone();
    assert_eq!(shown, expected);
    assert_eq!(app.view("S1").await, expected);
    assert_eq!(generation(&pool, "S1").await, 1);

    // The network limits alone, likewise.
    let wider = json!({"admissions": 1_000_000, "units": 1, "window_secs": 86_400});
    let res = app.put_json("S1", json!({"network_limits": wider})).await;
    assert_eq!(res.status(), 200);
    expected["network_limits"] = wider;
    assert_eq!(app.view("S1").await, expected);
    assert_eq!(generation(&pool, "S1").await, 1);

    // A purchase still sells from the same stock.
    assert_eq!(app.buy("bob", "k1", "S1", 1).await.status(), 201);
    assert_eq!(app.view("S1").await["stock"], json!(6));

    // A defence on a SKU with no sale: 404, like any schedule-only PUT.
    let res = app.put_json("NOPE", json!({"proof_of_work": pow})).await;
    assert_problem(res, 404, "unknown_sku").await;
    let res = app
        .put_json("NOPE", json!({"network_limits": {"units": 1}}))
        .await;
    assert_problem(res, 404, "unknown_sku").await;
}

/// Issue 38: the proof of work's format (`algorithm`): ALTCHA's v1 by default, v2 by name,
/// stored, shown, kept by a restock that does not name the proof of work, and back to v1 when a
/// `proof_of_work` without it replaces the setting.
#[sqlx::test(migrations = "./migrations")]
async fn the_proof_of_works_algorithm_is_stored_shown_and_kept(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    let v2 = json!({"min_bits": 12, "max_bits": 20, "algorithm": "PBKDF2/SHA-256"});
    let res = app
        .put_json("A2", sale(5, json!({"proof_of_work": v2})))
        .await;
    assert_eq!(res.status(), 200);
    let shown: Value = res.json().await.expect("json");
    assert_eq!(shown["proof_of_work"], v2);
    assert_eq!(app.view("A2").await["proof_of_work"], v2);
    let stored: Option<String> =
        sqlx::query_scalar("SELECT pow_algorithm FROM skus WHERE sku = 'A2'")
            .fetch_one(&pool)
            .await
            .expect("column");
    assert_eq!(stored.as_deref(), Some("PBKDF2/SHA-256"));
    // A restock that does not name it keeps it.
    let res = app.put_json("A2", sale(9, json!({}))).await;
    assert_eq!(res.status(), 200);
    assert_eq!(app.view("A2").await["proof_of_work"], v2);
    // A `proof_of_work` without `algorithm` (or with `null`) is v1, stored as NULL.
    for v1 in [
        json!({"min_bits": 12, "max_bits": 20}),
        json!({"min_bits": 12, "max_bits": 20, "algorithm": null}),
        json!({"min_bits": 12, "max_bits": 20, "algorithm": "SHA-256"}),
    ] {
        let res = app.put_json("A2", json!({"proof_of_work": v2})).await;
        assert_eq!(res.status(), 200);
        let res = app.put_json("A2", json!({"proof_of_work": v1})).await;
        assert_eq!(res.status(), 200);
        assert_eq!(
            app.view("A2").await["proof_of_work"],
            json!({"min_bits": 12, "max_bits": 20, "algorithm": "SHA-256"}),
            "{v1}"
        );
        let stored: Option<String> =
            sqlx::query_scalar("SELECT pow_algorithm FROM skus WHERE sku = 'A2'")
                .fetch_one(&pool)
                .await
                .expect("column");
        assert_eq!(stored, None, "{v1}");
    }
}

#[sqlx::test(migrations = "./migrations")]
async fn bad_defence_values_are_400_naming_the_field_and_change_nothing(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    let res = app
        .put_json(
            "B1",
            sale(
                5,
                json!({"proof_of_work": {"min_bits": 8, "max_bits": 16},
                       "network_limits": {"units": 2}}),
            ),
        )
        .await;
    assert_eq!(res.status(), 200);
    let before = app.view("B1").await;
    for (body, field) in [
        (json!({"proof_of_work": true}), "proof_of_work"),
        (json!({"proof_of_work": 12}), "proof_of_work"),
        (
            json!({"proof_of_work": {"max_bits": 16}}),
            "proof_of_work.min_bits",
        ),
        (
            json!({"proof_of_work": {"min_bits": 8}}),
            "proof_of_work.max_bits",
        ),
        (
            json!({"proof_of_work": {"min_bits": 0, "max_bits": 16}}),
            "proof_of_work.min_bits",
        ),
        (
            json!({"proof_of_work": {"min_bits": 8, "max_bits": 31}}),
            "proof_of_work.max_bits",
        ),
        (
            json!({"proof_of_work": {"min_bits": 17, "max_bits": 16}}),
            "proof_of_work.max_bits",
        ),
        (
            json!({"proof_of_work": {"min_bits": "8", "max_bits": 16}}),
            "proof_of_work.min_bits",
        ),
        (
            json!({"proof_of_work": {"min_bits": 8.5, "max_bits": 16}}),
            "proof_of_work.min_bits",
        ),
        (
            json!({"proof_of_work": {"min_bits": 8, "max_bits": 16, "algorithm": "ARGON2ID"}}),
            "proof_of_work.algorithm",
        ),
        (
            json!({"proof_of_work": {"min_bits": 8, "max_bits": 16, "algorithm": 2}}),
            "proof_of_work.algorithm",
        ),
        (json!({"network_limits": "on"}), "network_limits"),
        (json!({"network_limits": {}}), "network_limits"),
        (
            json!({"network_limits": {"admissions": null, "units": null}}),
            "network_limits",
        ),
        (
            json!({"network_limits": {"units": 0}}),
            "network_limits.units",
        ),
        (
            json!({"network_limits": {"units": 1_000_001}}),
            "network_limits.units",
        ),
        (
            json!({"network_limits": {"admissions": -1}}),
            "network_limits.admissions",
        ),
        (
            json!({"network_limits": {"units": 2, "window_secs": 0}}),
            "network_limits.window_secs",
        ),
        (
            json!({"network_limits": {"units": 2, "window_secs": 86_401}}),
            "network_limits.window_secs",
        ),
        (
            json!({"network_limits": {"units": "2"}}),
            "network_limits.units",
        ),
        // In a sale body too: the sale is not replaced.
        (
            sale(99, json!({"proof_of_work": {"min_bits": 8, "max_bits": 0}})),
            "proof_of_work.max_bits",
        ),
        (
            sale(99, json!({"network_limits": {"admissions": 0}})),
            "network_limits.admissions",
        ),
    ] {
        let res = app.put_json("B1", body.clone()).await;
        let problem = assert_problem(res, 400, "invalid_request").await;
        assert!(
            problem["detail"]
                .as_str()
                .is_some_and(|d| d.contains(field)),
            "{body}: {problem}"
        );
        assert_eq!(app.view("B1").await, before, "{body} changed the sale");
    }
    assert_eq!(generation(&pool, "B1").await, 1);
}

/// The SQLSTATE and constraint `sql` fails with (`None`: it succeeded).
async fn refusal(pool: &PgPool, sql: &str) -> Option<(String, String)> {
    match sqlx::query(sql).execute(pool).await {
        Ok(_) => None,
        Err(sqlx::Error::Database(e)) => Some((
            e.code().map(|c| c.into_owned()).unwrap_or_default(),
            e.constraint().unwrap_or_default().to_owned(),
        )),
        Err(e) => panic!("{sql}: {e}"),
    }
}

#[sqlx::test(migrations = "./migrations")]
async fn the_database_refuses_invalid_defence_rows(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    assert_eq!(app.put_sku("CHK", 10, 5).await.status(), 200);
    let update = |set: &str| format!("UPDATE skus SET {set} WHERE sku = 'CHK'");
    let insert = |columns: &str, values: &str| {
        format!(
            "INSERT INTO skus (sku, name, price_cents, initial_stock, stock, max_per_user, {columns})
             VALUES ('CHK-NEW', 'x', 1, 1, 1, 1, {values})"
        )
    };
    let pow = "skus_proof_of_work";
    let net = "skus_network_limits";
    for (sql, constraint) in [
        // One of the proof-of-work pair without the other.
        (update("pow_min_bits = 4, pow_max_bits = NULL"), pow),
        (update("pow_min_bits = NULL, pow_max_bits = 4"), pow),
        (update("pow_min_bits = 0, pow_max_bits = 4"), pow),
        (update("pow_min_bits = 5, pow_max_bits = 4"), pow),
        (update("pow_min_bits = 4, pow_max_bits = 31"), pow),
        (update("pow_min_bits = -1, pow_max_bits = -1"), pow),
        (insert("pow_min_bits", "8"), pow),
        (insert("pow_max_bits", "8"), pow),
        // An algorithm nobody issues, or one without the bounds (issue 38).
        (
            update("pow_min_bits = 4, pow_max_bits = 8, pow_algorithm = 'MD5'"),
            "skus_pow_algorithm",
        ),
        (
            update("pow_algorithm = 'PBKDF2/SHA-256'"),
            "skus_pow_algorithm",
        ),
        // A window without a bound, a bound without a window, out-of-range values.
        (update("net_window_secs = 60"), net),
        (update("net_units = 5"), net),
        (update("net_admissions = 5"), net),
        (update("net_units = 5, net_window_secs = 0"), net),
        (update("net_units = 5, net_window_secs = 86401"), net),
        (update("net_units = 0, net_window_secs = 60"), net),
        (
            update("net_admissions = 1000001, net_window_secs = 60"),
            net,
        ),
        (
            update("net_admissions = 5, net_units = -1, net_window_secs = 60"),
            net,
        ),
        (insert("net_units", "5"), net),
        (insert("net_window_secs", "60"), net),
    ] {
        assert_eq!(
            refusal(&pool, &sql).await,
            Some(("23514".to_owned(), constraint.to_owned())),
            "{sql}"
        );
    }
    let view = app.view("CHK").await;
    assert_eq!(
        (&view["proof_of_work"], &view["network_limits"]),
        (&Value::Null, &Value::Null)
    );

    // What the wire can say is accepted, and the view reads it back.
    for sql in [
        update("pow_min_bits = 30, pow_max_bits = 30"),
        update("pow_min_bits = 1, pow_max_bits = 30"),
        update("pow_algorithm = 'PBKDF2/SHA-256'"),
        update("pow_algorithm = NULL"),
        update("net_units = 7, net_window_secs = 60"),
        update("net_admissions = 1000000, net_units = NULL, net_window_secs = 86400"),
        update("net_admissions = 1, net_units = 1, net_window_secs = 1"),
        update("pow_min_bits = NULL, pow_max_bits = NULL"),
        update("net_admissions = 3, net_units = NULL, net_window_secs = 600"),
    ] {
        assert_eq!(refusal(&pool, &sql).await, None, "{sql}");
    }
    let view = app.view("CHK").await;
    assert_eq!(
        (&view["proof_of_work"], &view["network_limits"]),
        (
            &Value::Null,
            &json!({"admissions": 3, "units": null, "window_secs": 600})
        )
    );
}
