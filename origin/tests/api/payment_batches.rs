//! `POST /v1/payments/stripe`, part 3: many payments at once. Payments of live holds are paid
//! many per transaction (`payments::batch`); these tests check that doing so gives up nothing:
//! concurrent deliveries (repeats of one event, two events for one order) apply each event
//! once and record one payment per order, and a payment racing its hold's expiry is decided
//! exactly once — paid while live, or expired and then honoured or `refund_due` — with the
//! books balanced.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::helpers::joined;
use crate::payments::{counted, event, spawn};

#[sqlx::test(migrations = "./migrations")]
async fn many_payments_of_live_holds_at_once_apply_each_event_once(pool: PgPool) {
    let app = Arc::new(spawn(pool).await);
    app.put_hold_sku("BULK", 50, 300).await;
    let holds = joined((0..50).map(|i| {
        let app = app.clone();
        tokio::spawn(async move { app.hold(&format!("u{i}"), "BULK").await })
    }))
    .await;
    // Every order paid once by `payment_intent.succeeded`; ten of those delivered twice at the
    // same time; five orders also completed by their Checkout Session (another event).
    let mut deliveries: Vec<(String, Vec<u8>)> = Vec::new();
    for (i, order) in holds.iter().enumerate() {
        let id = format!("evt_bulk_{i}");
        let body = event(&id, "payment_intent.succeeded", order, json!({}));
        if i < 10 {
            deliveries.push((id.clone(), body.clone()));
        }
        deliveries.push((id, body));
        if i < 5 {
            let id = format!("evt_bulk_session_{i}");
            let body = event(
                &id,
                "checkout.session.completed",
                order,
                json!({"object": "checkout.session", "payment_status": "paid"}),
            );
            deliveries.push((id, body));
        }
    }
    let receipts: Vec<(String, Value)> = joined(deliveries.into_iter().map(|(id, body)| {
        let app = app.clone();
        tokio::spawn(async move { (id, app.webhook(&body).await) })
    }))
    .await;
    assert_eq!(receipts.len(), 65);
    for (id, receipt) in &receipts {
        assert_eq!(receipt["event_id"], id.as_str(), "{receipt}");
        assert_eq!(receipt["result"], "applied", "{id}: {receipt}");
    }
    for order in &holds {
        assert_eq!(app.status(order).await, "paid");
    }
    assert_eq!(app.stock("BULK").await, 0, "paying moves no unit");
    let events: Vec<(String, String)> =
        sqlx::query_as("SELECT event_id, result FROM payment_events ORDER BY event_id")
            .fetch_all(&app.pool)
            .await
            .expect("events");
    assert_eq!(events.len(), 55, "each event recorded once");
    assert!(events.iter().all(|(_, r)| r == "applied"), "{events:?}");
    let payments: (i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(*) FILTER (WHERE source = 'stripe' AND reference LIKE 'evt_bulk_%')
         FROM order_payments",
    )
    .fetch_one(&app.pool)
    .await
    .expect("payments");
    assert_eq!(payments, (50, 50), "one payment record per order");
    let text = app.metrics().await;
    assert_eq!(
        counted(&text, "payment_intent.succeeded", "applied")
            + counted(&text, "payment_intent.succeeded", "duplicate"),
        60.0
    );
    let (code, out) = crate::reconcile::run_reconcile(&app.pool).await;
    assert_eq!((code, out.trim()), (0, "reconciliation: ok"));
}

#[sqlx::test(migrations = "./migrations")]
async fn a_payment_racing_its_holds_expiry_is_decided_exactly_once(pool: PgPool) {
    let app = Arc::new(spawn(pool).await);
    app.put_hold_sku("RACE", 30, 1).await;
    let holds = joined((0..30).map(|i| {
        let app = app.clone();
        tokio::spawn(async move { app.hold(&format!("u{i}"), "RACE").await })
    }))
    .await;
    // The payments arrive from just before to well after the holds' expiry (1 s), while other
    // shoppers try to buy the units that come back: each payment finds its hold live (paid),
    // or expired with its unit on sale again (honoured: paid) or sold again (`refund_due`).
    let payments = holds.iter().enumerate().map(|(i, order)| {
        let (app, order) = (app.clone(), order.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(850 + 25 * i as u64)).await;
            let body = event(
                &format!("evt_race_{i}"),
                "payment_intent.succeeded",
                &order,
                json!({}),
            );
            (order, app.webhook(&body).await)
        })
    });
    let rivals = (0..20).map(|i| {
        let app = app.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(1_000 + 40 * i)).await;
            app.buy(&format!("v{i}"), &format!("v{i}-RACE"), "RACE", 1)
                .await
                .status()
                .as_u16()
        })
    });
    let (paid, rivals) = futures::join!(joined(payments), joined(rivals));
    assert!(rivals.iter().all(|s| [201, 409].contains(s)), "{rivals:?}");
    for (order, receipt) in &paid {
        let status = app.status(order).await;
        let want = match receipt["result"].as_str() {
            Some("applied") => "paid",
            Some("refund_due") => "refund_due",
            other => panic!("{order}: unexpected result {other:?} ({receipt})"),
        };
        assert_eq!(status, want, "{order}: {receipt}");
    }
    // Each payment recorded once, with one payment record per order; no event left pending.
    let decided: (i64, i64, i64) = sqlx::query_as(
        "SELECT COUNT(*), COUNT(*) FILTER (WHERE result IN ('applied', 'refund_due')),
                (SELECT COUNT(*) FROM order_payments)
         FROM payment_events",
    )
    .fetch_one(&app.pool)
    .await
    .expect("events");
    assert_eq!(decided, (30, 30, 30));
    // The books: every unit is on sale, or in exactly one held, confirmed or paid order.
    let (stock, units_out, written_off, in_orders): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT s.stock, s.units_out, s.written_off,
                (SELECT COALESCE(SUM(qty), 0)::bigint FROM orders
                 WHERE sku = 'RACE' AND status IN ('held', 'confirmed', 'paid'))
         FROM skus s WHERE s.sku = 'RACE'",
    )
    .fetch_one(&app.pool)
    .await
    .expect("books");
    assert_eq!((units_out, written_off), (in_orders, 0));
    assert_eq!(stock + units_out, 30, "books balanced");
    // Reconciliation finds nothing else than the `refund_due` orders (to be refunded).
    let refund_due = paid
        .iter()
        .filter(|(_, r)| r["result"] == "refund_due")
        .count();
    let expired = crate::helpers::metric(&app.metrics().await, "origin_hold_expiries_total");
    eprintln!(
        "30 payments racing their expiry: {expired} holds expired (the rivals' included), \
         {refund_due} payments refund_due, {} rivals bought",
        rivals.iter().filter(|s| **s == 201).count()
    );
    let (code, out) = crate::reconcile::run_reconcile(&app.pool).await;
    if refund_due == 0 {
        assert_eq!((code, out.trim()), (0, "reconciliation: ok"));
    } else {
        assert_eq!(code, 1, "{out}");
        let lines: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
        let listed = lines.iter().filter(|l| l.contains("is refund_due")).count();
        assert_eq!(listed, refund_due, "{out}");
        assert!(
            out.contains(&format!("reconciliation: {refund_due} discrepancies")),
            "{out}"
        );
        assert_eq!(lines.len(), refund_due + 1, "nothing else: {out}");
    }
}
