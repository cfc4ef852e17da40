//! `origin reconcile` finds corrupted books (and only then exits non-zero).

use std::process::Command;

use sqlx::PgPool;

use crate::helpers::{assert_problem, spawn_app};

pub(crate) async fn run_reconcile(pool: &PgPool) -> (i32, String) {
    let (_, url) = crate::processes::database_of(pool).await;
    let out = Command::new(env!("CARGO_BIN_EXE_origin"))
        .arg("reconcile")
        .env("DATABASE_URL", url.clone())
        .env("RUST_LOG", "error")
        .output()
        .expect("run origin reconcile");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[sqlx::test(migrations = "./migrations")]
async fn reconcile_passes_a_clean_sale_and_reports_each_corruption(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.put_sku("REC", 10, 2).await;
    for (user, key) in [("alice", "a1"), ("bob", "b1"), ("bob", "b2")] {
        assert_eq!(app.buy(user, key, "REC", 1).await.status(), 201);
    }
    assert_problem(app.buy("bob", "b3", "REC", 1).await, 409, "purchase_limit").await;
    let (code, out) = run_reconcile(&pool).await;
    assert_eq!((code, out.trim()), (0, "reconciliation: ok"));

    // Corrupt the books on purpose: a lost decrement, and an order moved to another user (above
    // the cap, and out of step with the per-user counters).
    // (The books' CHECK keeps `initial = stock + units_out + written_off`: the counter moves with
    // the stock, and only the orders disagree.)
    sqlx::query("UPDATE skus SET stock = stock + 1, units_out = units_out - 1 WHERE sku = 'REC'")
        .execute(&pool)
        .await
        .expect("corrupt stock");
    sqlx::query("UPDATE orders SET user_id = 'bob' WHERE user_id = 'alice'")
        .execute(&pool)
        .await
        .expect("corrupt owner");
    let (code, out) = run_reconcile(&pool).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("sku REC: 10 on sale - 8 remaining = 2 but orders hold 3 units"),
        "{out}"
    );
    assert!(
        out.contains("a user holds 3 units above the cap 2 (user bob)"),
        "{out}"
    );
    // Moving the order also left both users' cap counters disagreeing with their orders.
    assert!(
        out.contains(
            "sku REC: the per-user counter says 2 units but the user's orders hold 3 (user bob)"
        ),
        "{out}"
    );
    assert!(
        out.contains(
            "sku REC: the per-user counter says 1 units but the user's orders hold 0 (user alice)"
        ),
        "{out}"
    );
    assert!(out.contains("reconciliation: 4 discrepancies"), "{out}");
}

#[sqlx::test(migrations = "./migrations")]
async fn the_server_exports_discrepancies_for_alerting(pool: PgPool) {
    let app =
        crate::helpers::spawn_app_with(pool.clone(), &[("RECONCILE_INTERVAL_SECS", "1")]).await;
    app.put_sku("GAUGE", 5, 5).await;
    assert_eq!(app.buy("alice", "a1", "GAUGE", 1).await.status(), 201);
    let gauge = |text: String| {
        text.lines()
            .find(|l| l.starts_with("origin_reconcile_discrepancies "))
            .map(str::to_owned)
    };
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(
        gauge(app.metrics().await).as_deref(),
        Some("origin_reconcile_discrepancies 0")
    );
    sqlx::query("UPDATE skus SET stock = stock - 1, units_out = units_out + 1 WHERE sku = 'GAUGE'")
        .execute(&pool)
        .await
        .expect("corrupt");
    let start = std::time::Instant::now();
    loop {
        if gauge(app.metrics().await).as_deref() == Some("origin_reconcile_discrepancies 1") {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(10),
            "gauge never showed the discrepancy"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

#[sqlx::test(migrations = "./migrations")]
async fn reconcile_refuses_an_invalid_retention_instead_of_assuming_24_hours(pool: PgPool) {
    // The retention decides which orders must still have their stored answer: a value the server
    // would refuse must not be silently replaced by 24 h here.
    let (_, url) = crate::processes::database_of(&pool).await;
    for bad in ["12", "a day", "-1"] {
        let out = Command::new(env!("CARGO_BIN_EXE_origin"))
            .arg("reconcile")
            .env("DATABASE_URL", url.clone())
            .env("IDEMPOTENCY_RETENTION_HOURS", bad)
            .env("RUST_LOG", "error")
            .output()
            .expect("run origin reconcile");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {stderr}");
        assert!(
            stderr.contains("IDEMPOTENCY_RETENTION_HOURS"),
            "{bad:?}: {stderr}"
        );
    }
    let (code, out) = run_reconcile(&pool).await;
    assert_eq!((code, out.trim()), (0, "reconciliation: ok"));
}
