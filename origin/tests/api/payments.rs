//! `POST /v1/payments/stripe`: Stripe's signature (the whole matrix, each refusal changing
//! nothing and counted), the event ids applied at most once, out-of-order deliveries, unknown
//! types and orders answered 2xx and counted, a late payment after its hold expired, and a
//! signed payment end to end (hold → webhook → `GET /v1/orders/{id}` says paid).

use std::time::{Duration, Instant};

use origin::payments::signature::sign;
use reqwest::Response;
use serde_json::{Value, json};
use sqlx::PgPool;

use crate::helpers::{Caller, TestApp, assert_problem, joined, metric, now, spawn_app_with};

const SECRET: &str = "whsec_test_current_0123456789abcdef";
const OLD_SECRET: &str = "whsec_test_previous_0123456789abcdef";

async fn spawn(pool: PgPool) -> TestApp {
    spawn_app_with(
        pool,
        &[("PAYMENT_WEBHOOK_SECRETS", &format!("{SECRET},{OLD_SECRET}"))],
    )
    .await
}

/// A Stripe event body naming `order` in its object's metadata.
fn event(id: &str, kind: &str, order: &str, extra: Value) -> Vec<u8> {
    let mut object =
        json!({"id": "obj_1", "object": "payment_intent", "metadata": {"order_id": order}});
    if let (Some(o), Some(e)) = (object.as_object_mut(), extra.as_object()) {
        o.extend(e.clone());
    }
    serde_json::to_vec(&json!({
        "id": id, "object": "event", "api_version": "2024-06-20", "created": now(),
        "livemode": false, "pending_webhooks": 1, "type": kind,
        "data": {"object": object},
    }))
    .expect("json")
}

impl TestApp {
    async fn webhook_raw(&self, signature: Option<&str>, body: &[u8]) -> Response {
        let mut req = self
            .client
            .post(format!("{}/v1/payments/stripe", self.base))
            .header("content-type", "application/json")
            .body(body.to_vec());
        if let Some(s) = signature {
            req = req.header("stripe-signature", s);
        }
        req.send().await.expect("request")
    }

    /// Delivers `body` signed like Stripe with the current secret; the 200 receipt.
    async fn webhook(&self, body: &[u8]) -> Value {
        let res = self
            .webhook_raw(Some(&sign(SECRET, now(), body)), body)
            .await;
        assert_eq!(res.status(), 200, "{:?}", res.text().await);
        res.json().await.expect("receipt")
    }

    async fn put_hold_sku(&self, sku: &str, stock: i64, hold_secs: i64) {
        let res = self.put_sku_holds(sku, stock, 5, hold_secs).await;
        assert_eq!(res.status(), 200);
    }

    /// Buys one unit; the order id of the 201.
    async fn hold(&self, user: &str, sku: &str) -> String {
        let res = self.buy(user, &format!("{user}-{sku}"), sku, 1).await;
        assert_eq!(res.status(), 201);
        let body: Value = res.json().await.expect("json");
        body["order_id"].as_str().expect("order id").to_owned()
    }

    async fn order_view(&self, id: &str) -> Value {
        let res = self.order(id, Caller::Shop).await;
        assert_eq!(res.status(), 200);
        res.json().await.expect("json")
    }

    async fn status(&self, id: &str) -> String {
        self.order_view(id).await["status"]
            .as_str()
            .expect("status")
            .to_owned()
    }

    async fn events_recorded(&self) -> i64 {
        sqlx::query_scalar("SELECT COUNT(*) FROM payment_events")
            .fetch_one(&self.pool)
            .await
            .expect("count")
    }
}

fn counted(text: &str, kind: &str, result: &str) -> f64 {
    metric(
        text,
        &format!(r#"origin_payment_events_total{{type="{kind}",result="{result}"}}"#),
    )
}

#[sqlx::test(migrations = "./migrations")]
async fn a_signed_payment_makes_the_hold_paid(pool: PgPool) {
    let app = spawn(pool).await;
    app.put_hold_sku("PAY", 3, 300).await;
    let order = app.hold("alice", "PAY").await;
    assert_eq!(app.status(&order).await, "held");
    let body = event(
        "evt_paid_1",
        "checkout.session.completed",
        &order,
        json!({"object": "checkout.session", "payment_status": "paid"}),
    );
    let receipt = app.webhook(&body).await;
    assert_eq!(
        receipt,
        json!({"event_id": "evt_paid_1", "result": "applied", "duplicate": false})
    );
    let view = app.order_view(&order).await;
    assert_eq!(view["status"], "paid", "{view}");
    assert_eq!(app.stock("PAY").await, 2, "a paid hold keeps its unit");
    let text = app.metrics().await;
    assert_eq!(counted(&text, "checkout.session.completed", "applied"), 1.0);
}

#[sqlx::test(migrations = "./migrations")]
async fn the_signature_matrix_refuses_every_bad_delivery_and_changes_nothing(pool: PgPool) {
    let app = spawn(pool).await;
    app.put_hold_sku("SIG", 3, 300).await;
    let order = app.hold("alice", "SIG").await;
    let body = event("evt_sig", "payment_intent.succeeded", &order, json!({}));
    let t = now();
    let v1 = |secret: &str, t: i64, body: &[u8]| {
        sign(secret, t, body)
            .split_once(",v1=")
            .map(|(_, s)| s.to_owned())
            .expect("v1")
    };
    let mut tampered = body.clone();
    let last = tampered.len() - 2;
    tampered[last] = b' ';
    let refused: Vec<(&str, Option<String>, &[u8], &str)> = vec![
        (
            "wrong secret",
            Some(sign("whsec_someone_else_0123456789", t, &body)),
            &body,
            "mismatch",
        ),
        (
            "tampered body",
            Some(sign(SECRET, t, &body)),
            &tampered,
            "mismatch",
        ),
        ("missing header", None, &body, "missing"),
        (
            "malformed header",
            Some(format!("v1={}", v1(SECRET, t, &body))),
            &body,
            "malformed",
        ),
        (
            "garbage header",
            Some("hello".to_owned()),
            &body,
            "malformed",
        ),
        (
            "t too old",
            Some(sign(SECRET, t - 301, &body)),
            &body,
            "too_old",
        ),
        (
            "t in the future",
            Some(sign(SECRET, t + 301, &body)),
            &body,
            "in_future",
        ),
        (
            "v0 only",
            Some(format!("t={t},v0={}", v1(SECRET, t, &body))),
            &body,
            "no_v1",
        ),
    ];
    for (case, header, sent, _) in &refused {
        let res = app.webhook_raw(header.as_deref(), sent).await;
        assert_problem(res, 400, "webhook_signature").await;
        assert_eq!(app.events_recorded().await, 0, "{case}: nothing recorded");
        assert_eq!(app.status(&order).await, "held", "{case}: nothing changed");
    }
    let text = app.metrics().await;
    for reason in [
        "mismatch",
        "missing",
        "malformed",
        "too_old",
        "in_future",
        "no_v1",
    ] {
        let want = refused.iter().filter(|r| r.3 == reason).count() as f64;
        assert_eq!(
            metric(
                &text,
                &format!(r#"origin_webhook_signature_failures_total{{reason="{reason}"}}"#)
            ),
            want,
            "{reason}"
        );
    }

    // Accepted: several v1 (Stripe mid-rotation) of which one is valid, the secret being
    // retired (second in the list), a timestamp at the edge of the tolerance.
    let several = format!(
        "t={t},v1={},v1={},v0={}",
        "ab".repeat(32),
        v1(SECRET, t, &body),
        "cd".repeat(32)
    );
    let res = app.webhook_raw(Some(&several), &body).await;
    assert_eq!(res.status(), 200);
    assert_eq!(app.status(&order).await, "paid");
    let other = app.hold("bob", "SIG").await;
    let body = event("evt_sig_old", "payment_intent.succeeded", &other, json!({}));
    let res = app
        .webhook_raw(Some(&sign(OLD_SECRET, now() - 290, &body)), &body)
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(app.status(&other).await, "paid");
}

#[sqlx::test(migrations = "./migrations")]
async fn without_secrets_the_webhook_is_not_found(pool: PgPool) {
    let app = crate::helpers::spawn_app(pool).await;
    let body = event("evt_x", "payment_intent.succeeded", "x", json!({}));
    let res = app
        .webhook_raw(Some(&sign(SECRET, now(), &body)), &body)
        .await;
    assert_problem(res, 404, "not_found").await;
}

#[sqlx::test(migrations = "./migrations")]
async fn a_signed_body_that_is_not_an_event_is_400_and_a_huge_one_413(pool: PgPool) {
    let app = spawn(pool).await;
    for body in [&b"[]"[..], b"{\"type\":\"x\"}", b"not json"] {
        let res = app
            .webhook_raw(Some(&sign(SECRET, now(), body)), body)
            .await;
        assert_problem(res, 400, "invalid_request").await;
    }
    let huge = vec![b' '; 300 * 1024];
    let res = app
        .webhook_raw(Some(&sign(SECRET, now(), &huge)), &huge)
        .await;
    assert_problem(res, 413, "payload_too_large").await;
    assert_eq!(app.events_recorded().await, 0);
}

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
async fn unknown_types_and_orders_are_answered_200_and_counted(pool: PgPool) {
    let app = spawn(pool).await;
    let nobody = "0190b1a2-3c4d-7e5f-8a9b-0c1d2e3f4a5b";
    let cases = [
        (
            event("evt_u1", "customer.created", nobody, json!({})),
            "ignored_type",
        ),
        (
            event("evt_u2", "payment_intent.succeeded", nobody, json!({})),
            "unknown_order",
        ),
        (
            event(
                "evt_u3",
                "payment_intent.succeeded",
                "not-an-order",
                json!({}),
            ),
            "unknown_order",
        ),
        (
            event(
                "evt_u4",
                "checkout.session.completed",
                nobody,
                json!({"payment_status": "unpaid"}),
            ),
            "ignored_unpaid",
        ),
    ];
    for (body, result) in &cases {
        let receipt = app.webhook(body).await;
        assert_eq!(receipt["result"], *result, "{receipt}");
    }
    let text = app.metrics().await;
    assert_eq!(counted(&text, "other", "ignored_type"), 1.0);
    assert_eq!(
        counted(&text, "payment_intent.succeeded", "unknown_order"),
        2.0
    );
    assert_eq!(
        counted(&text, "checkout.session.completed", "ignored_unpaid"),
        1.0
    );
    assert_eq!(app.events_recorded().await, 4);
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

#[sqlx::test(migrations = "./migrations")]
async fn a_database_outage_is_503_with_retry_after_and_records_nothing(pool: PgPool) {
    let dead = origin::store::pool(
        "postgres://postgres@127.0.0.1:1/nothing",
        2,
        Duration::from_millis(300),
    )
    .expect("lazy pool");
    let db: (String,) = sqlx::query_as("SELECT current_database()")
        .fetch_one(&pool)
        .await
        .expect("db");
    let settings = crate::helpers::settings(&db.0, &[("PAYMENT_WEBHOOK_SECRETS", SECRET)]);
    let app = origin::Application::build_with_pool(settings, dead)
        .await
        .expect("builds while the database is down");
    let base = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until(std::future::pending()));
    let body = event(
        "evt_down",
        "payment_intent.succeeded",
        "0190b1a2-3c4d-7e5f-8a9b-0c1d2e3f4a5b",
        json!({}),
    );
    let res = reqwest::Client::new()
        .post(format!("{base}/v1/payments/stripe"))
        .header("stripe-signature", sign(SECRET, now(), &body))
        .body(body)
        .send()
        .await
        .expect("request");
    assert_eq!(res.headers()["retry-after"], "1");
    assert_problem(res, 503, "unavailable").await;
}

async fn wait_for_status(app: &TestApp, order: &str, want: &str) {
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

#[sqlx::test(migrations = "./migrations")]
async fn deliveries_beyond_their_turns_wait_then_answer_503_and_a_retry_is_applied(pool: PgPool) {
    // One turn, a short wait: a cancellation holds its turn until the sale has reopened
    // everywhere (about a second after its commit), so a second delivery meanwhile waits 200 ms
    // and is refused with 503 — Stripe retries it — instead of taking another connection.
    let app = spawn_app_with(
        pool,
        &[
            ("PAYMENT_WEBHOOK_SECRETS", SECRET),
            ("PAYMENT_WEBHOOK_MAX_CONCURRENCY", "1"),
            ("DB_ACQUIRE_TIMEOUT_MS", "200"),
        ],
    )
    .await;
    let app = std::sync::Arc::new(app);
    app.put_hold_sku("TURN", 3, 300).await;
    let cancelled = app.hold("alice", "TURN").await;
    let paid = app.hold("bob", "TURN").await;
    let cancel = event(
        "evt_turn_cancel",
        "payment_intent.canceled",
        &cancelled,
        json!({}),
    );
    let first = {
        let app = app.clone();
        tokio::spawn(async move { app.webhook(&cancel).await })
    };
    // The cancellation has committed: it now holds the only turn for about a second.
    let start = Instant::now();
    while sqlx::query_scalar::<_, String>("SELECT status FROM orders WHERE order_id = $1::uuid")
        .bind(&cancelled)
        .fetch_one(&app.pool)
        .await
        .expect("status")
        != "cancelled"
    {
        assert!(start.elapsed() < Duration::from_secs(10), "never cancelled");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let pay = event("evt_turn_pay", "payment_intent.succeeded", &paid, json!({}));
    let res = app
        .webhook_raw(Some(&sign(SECRET, now(), &pay)), &pay)
        .await;
    assert_eq!(res.headers()["retry-after"], "1");
    assert_problem(res, 503, "unavailable").await;
    assert_eq!(
        app.status(&paid).await,
        "held",
        "the refused delivery changed nothing"
    );
    assert_eq!(first.await.expect("first")["result"], "applied");
    // Stripe's retry of the same event is applied.
    assert_eq!(app.webhook(&pay).await["result"], "applied");
    assert_eq!(app.status(&paid).await, "paid");
}
