//! `POST /v1/payments/stripe`, part 2: deliveries are at-least-once and out of order — each
//! event id applied at most once (also eight concurrent deliveries), failures after the payment,
//! refunds restocking once, a refund before the payment, a failure for a confirmed order, a
//! payment after its hold expired, and reconcile listing an applied event without its order.

use std::time::{Duration, Instant};

use serde_json::json;
use sqlx::PgPool;

use crate::helpers::{TestApp, joined};
use crate::payments::{counted, event, spawn};

#[sqlx::test(migrations = "./migrations")]
async fn a_repeated_event_is_applied_once_even_when_delivered_concurrently(pool: PgPool) {
    let app = std::sync::Arc::new(spawn(pool).await);
    app.put_hold_sku("DUP", 2, 300).await;
    let order = app.hold("alice", "DUP").await;
    let pay = event("evt_dup_pay", "payment_intent.succeeded", &order, json!({}));
    assert_eq!(app.webhook(&pay).await["duplicate"], false);
    let again = app.webhook(&pay).await;
    assert_eq!(
        again,
        json!({"event_id": "evt_dup_pay", "result": "applied", "duplicate": true})
    );
    assert_eq!(app.stock("DUP").await, 1);

    // Eight concurrent deliveries of one refund: the unit comes back once.
    let refund = event(
        "evt_dup_refund",
        "charge.refunded",
        &order,
        json!({"object": "charge", "refunded": true}),
    );
    let tasks = (0..8).map(|_| {
        let (app, refund) = (app.clone(), refund.clone());
        tokio::spawn(async move { app.webhook(&refund).await })
    });
    for receipt in joined(tasks).await {
        assert_eq!(receipt["result"], "applied", "{receipt}");
    }
    assert_eq!(app.status(&order).await, "refunded");
    assert_eq!(app.stock("DUP").await, 2, "restocked exactly once");
    let recorded: (i64, String) = sqlx::query_as(
        "SELECT COUNT(*), MIN(result) FROM payment_events WHERE event_id = 'evt_dup_refund'",
    )
    .fetch_one(&app.pool)
    .await
    .expect("row");
    assert_eq!(recorded, (1, "applied".to_owned()));
    let text = app.metrics().await;
    assert_eq!(counted(&text, "payment_intent.succeeded", "duplicate"), 1.0);
    assert_eq!(
        counted(&text, "charge.refunded", "applied")
            + counted(&text, "charge.refunded", "duplicate"),
        8.0
    );
}

#[sqlx::test(migrations = "./migrations")]
async fn out_of_order_deliveries_never_undo_a_payment_nor_restock_twice(pool: PgPool) {
    let app = spawn(pool).await;
    app.put_hold_sku("OOO", 3, 300).await;

    // A failure delivered after the success: the order stays paid, answered 200.
    let paid = app.hold("alice", "OOO").await;
    app.webhook(&event(
        "evt_a_ok",
        "payment_intent.succeeded",
        &paid,
        json!({}),
    ))
    .await;
    for (id, kind) in [
        ("evt_a_fail", "payment_intent.payment_failed"),
        ("evt_a_cancel", "payment_intent.canceled"),
        ("evt_a_expired", "checkout.session.expired"),
    ] {
        let receipt = app.webhook(&event(id, kind, &paid, json!({}))).await;
        assert_eq!(receipt["result"], "ignored_state", "{kind}: {receipt}");
    }
    assert_eq!(app.status(&paid).await, "paid");
    assert_eq!(app.stock("OOO").await, 2);

    // Two refund events of one order (a second refund of the same charge): restocked once.
    for id in ["evt_a_refund_1", "evt_a_refund_2"] {
        app.webhook(&event(
            id,
            "charge.refunded",
            &paid,
            json!({"refunded": true}),
        ))
        .await;
    }
    assert_eq!(app.status(&paid).await, "refunded");
    assert_eq!(app.stock("OOO").await, 3);

    // A partial refund is not a refund.
    let partly = app.hold("bob", "OOO").await;
    app.webhook(&event(
        "evt_b_ok",
        "payment_intent.succeeded",
        &partly,
        json!({}),
    ))
    .await;
    let receipt = app
        .webhook(&event(
            "evt_b_part",
            "charge.refunded",
            &partly,
            json!({"refunded": false}),
        ))
        .await;
    assert_eq!(receipt["result"], "ignored_partial_refund");
    assert_eq!(app.status(&partly).await, "paid");

    // The refund delivered before the success: the hold is cancelled at once (its unit back on
    // sale) and the success, when it comes, does not make the order paid.
    let early = app.hold("carol", "OOO").await;
    let stock = app.stock("OOO").await;
    let receipt = app
        .webhook(&event(
            "evt_c_refund",
            "charge.refunded",
            &early,
            json!({"refunded": true}),
        ))
        .await;
    assert_eq!(receipt["result"], "applied", "{receipt}");
    assert_eq!(app.status(&early).await, "cancelled");
    assert_eq!(app.stock("OOO").await, stock + 1);
    let receipt = app
        .webhook(&event(
            "evt_c_ok",
            "payment_intent.succeeded",
            &early,
            json!({}),
        ))
        .await;
    assert_eq!(receipt["result"], "already_refunded", "{receipt}");
    assert_eq!(app.status(&early).await, "cancelled");
    assert_eq!(app.stock("OOO").await, stock + 1);

    // A failure while the order is a hold cancels it.
    let failed = app.hold("dave", "OOO").await;
    let receipt = app
        .webhook(&event(
            "evt_d_fail",
            "payment_intent.payment_failed",
            &failed,
            json!({}),
        ))
        .await;
    assert_eq!(receipt["result"], "applied");
    assert_eq!(app.status(&failed).await, "cancelled");
}

#[sqlx::test(migrations = "./migrations")]
async fn a_failure_never_cancels_a_confirmed_order(pool: PgPool) {
    let app = spawn(pool).await;
    app.put_sku("CONF", 2, 2).await;
    let order = app.hold("alice", "CONF").await;
    assert_eq!(app.status(&order).await, "confirmed");
    let receipt = app
        .webhook(&event(
            "evt_conf_fail",
            "payment_intent.payment_failed",
            &order,
            json!({}),
        ))
        .await;
    assert_eq!(receipt["result"], "ignored_state");
    assert_eq!(app.status(&order).await, "confirmed");
}

#[sqlx::test(migrations = "./migrations")]
async fn a_payment_after_its_hold_expired_is_honoured_or_refund_due(pool: PgPool) {
    let app = spawn(pool).await;
    app.put_hold_sku("LATE", 1, 1).await;
    let order = app.hold("alice", "LATE").await;
    wait_for_status(&app, &order, "expired").await;
    // The unit is back on sale and nobody took it: the late payment takes it again.
    let receipt = app
        .webhook(&event(
            "evt_late_1",
            "payment_intent.succeeded",
            &order,
            json!({}),
        ))
        .await;
    assert_eq!(receipt["result"], "applied", "{receipt}");
    assert_eq!(app.status(&order).await, "paid");
    assert_eq!(app.stock("LATE").await, 0);

    // This time someone else bought the returned unit first: the payment cannot be honoured.
    app.put_hold_sku("LATE2", 1, 1).await;
    let order = app.hold("bob", "LATE2").await;
    wait_for_status(&app, &order, "expired").await;
    let _other = app.hold("carol", "LATE2").await;
    let receipt = app
        .webhook(&event(
            "evt_late_2",
            "payment_intent.succeeded",
            &order,
            json!({}),
        ))
        .await;
    assert_eq!(receipt["result"], "refund_due", "{receipt}");
    assert_eq!(app.status(&order).await, "refund_due");
    let text = app.metrics().await;
    assert_eq!(
        counted(&text, "payment_intent.succeeded", "refund_due"),
        1.0
    );
}

pub(crate) async fn wait_for_status(app: &TestApp, order: &str, want: &str) {
    let start = Instant::now();
    loop {
        if app.status(order).await == want {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "order {order} never became {want}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[sqlx::test(migrations = "./migrations")]
async fn reconcile_lists_an_applied_event_whose_order_does_not_exist(pool: PgPool) {
    let app = spawn(pool.clone()).await;
    app.put_hold_sku("REC", 2, 300).await;
    let order = app.hold("alice", "REC").await;
    app.webhook(&event(
        "evt_rec_ok",
        "payment_intent.succeeded",
        &order,
        json!({}),
    ))
    .await;
    app.webhook(&event(
        "evt_rec_other",
        "customer.created",
        &order,
        json!({}),
    ))
    .await;
    let (code, out) = crate::reconcile::run_reconcile(&pool).await;
    assert_eq!((code, out.trim()), (0, "reconciliation: ok"));
    // An event recorded as applied to an order this database never had (a restore from an
    // older backup, a manual edit).
    sqlx::query(
        "INSERT INTO payment_events (event_id, type, order_id, result)
         VALUES ('evt_ghost', 'payment_intent.succeeded', gen_random_uuid(), 'applied')",
    )
    .execute(&pool)
    .await
    .expect("corrupt");
    let (code, out) = crate::reconcile::run_reconcile(&pool).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(
            "payment event evt_ghost (payment_intent.succeeded) is recorded applied but its order"
        ) && out.contains("does not exist"),
        "{out}"
    );
    assert!(out.contains("reconciliation: 1 discrepancies"), "{out}");
}
