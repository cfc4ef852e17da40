//! Orders after the purchase (issue 15): holds in the 201, every transition of the state machine
//! and its 409s, repeats, the allowance given back, shoppers limited to their own orders, expiry
//! and late payments, the sale reopened on every process after a return, and returns racing
//! purchase batches — on the real app, Postgres and Redis.

use std::time::{Duration, Instant};

use futures::future::join_all;
use sqlx::PgPool;

use crate::helpers::{
    Caller, TestApp, assert_problem, created, metric, order_view, reconcile, spawn_app,
    spawn_app_with,
};

async fn assert_books_balance(pool: &PgPool) {
    let (code, out) = reconcile(pool).await;
    assert_eq!((code, out.trim()), (0, "reconciliation: ok"));
}

/// Polls the order until it is `status` (at most `within`); returns how long it took.
async fn wait_status(app: &TestApp, id: &str, status: &str, within: Duration) -> Duration {
    let start = Instant::now();
    loop {
        if app.status_of(id).await == status {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < within,
            "order {id} not {status} within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[sqlx::test(migrations = "./migrations")]
async fn a_purchase_is_a_hold_with_expires_at_on_a_sku_with_holds_and_replays_byte_for_byte(
    pool: PgPool,
) {
    let app = spawn_app(pool.clone()).await;
    assert_eq!(app.put_sku_holds("HOLD", 5, 5, 600).await.status(), 200);
    assert_eq!(app.put_sku("PLAIN", 5, 5).await.status(), 200);

    let res = app.buy("alice", "k1", "HOLD", 2).await;
    assert_eq!(res.status(), 201);
    let first = res.text().await.expect("body");
    let body: serde_json::Value = serde_json::from_str(&first).expect("json");
    assert_eq!(body["status"], "held", "{body}");
    assert_eq!(body["remaining"], 3);
    let expires_at = body["expires_at"].as_str().expect("expires_at");
    assert!(expires_at.ends_with('Z'), "RFC 3339 UTC: {expires_at}");
    let at = chrono::DateTime::parse_from_rfc3339(expires_at).expect("rfc 3339");
    let in_secs = (at.timestamp_millis() - chrono::Utc::now().timestamp_millis()) / 1000;
    assert!((590..=600).contains(&in_secs), "expires in {in_secs} s");

    let replay = app.buy("alice", "k1", "HOLD", 2).await;
    assert_eq!(replay.headers()["idempotent-replayed"], "true");
    assert_eq!(replay.text().await.expect("body"), first, "byte for byte");

    let order = order_view(
        app.order(body["order_id"].as_str().expect("id"), Caller::Shop)
            .await,
    )
    .await;
    assert_eq!(order["status"], "held");
    assert_eq!(order["expires_at"], expires_at);
    assert_eq!(
        (order["qty"].as_i64(), order["user"].as_str()),
        (Some(2), Some("alice"))
    );

    let plain = created(app.buy("alice", "k2", "PLAIN", 1).await).await;
    assert_eq!(plain["status"], "confirmed");
    assert!(plain.get("expires_at").is_none(), "{plain}");
    let order = order_view(
        app.order(plain["order_id"].as_str().expect("id"), Caller::Shop)
            .await,
    )
    .await;
    assert_eq!(order["status"], "confirmed");
    assert!(order.get("expires_at").is_none(), "{order}");

    // hold_secs is checked: out of range is a 400 that changes nothing.
    for bad in ["86401", "-1", "1.5", "\"60\""] {
        let res = app
            .put_sku_raw(
                "HOLD",
                Some(crate::helpers::ADMIN_TOKEN),
                format!(
                    r#"{{"name":"x","price_cents":1,"stock":1,"max_per_user":1,"hold_secs":{bad}}}"#
                ),
            )
            .await;
        assert_problem(res, 400, "invalid_request").await;
    }
    assert_eq!(app.stock("HOLD").await, 3);
    assert_books_balance(&pool).await;
}

#[sqlx::test(migrations = "./migrations")]
async fn every_transition_its_refusals_and_its_repeats(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.put_sku_holds("T", 10, 10, 600).await;
    app.put_sku("C", 10, 10).await;
    let buy = |sku: &'static str, key: &'static str| {
        let app = &app;
        async move {
            created(app.buy("u", key, sku, 1).await).await["order_id"]
                .as_str()
                .expect("id")
                .to_owned()
        }
    };
    let act = |id: String, action: &'static str, body: &'static str| {
        let app = &app;
        async move { app.order_action(&id, action, body, Caller::Shop).await }
    };
    let refund_restock = r#"{"restock":true}"#;
    let refund_keep = r#"{"restock":false}"#;

    // held → paid → refunded (restock); repeats answer the same and change nothing.
    let h1 = buy("T", "h1").await;
    let paid = order_view(act(h1.clone(), "pay", "").await).await;
    assert_eq!(paid["status"], "paid");
    assert_eq!(
        order_view(act(h1.clone(), "pay", "").await).await,
        paid,
        "repeat"
    );
    let refused = assert_problem(act(h1.clone(), "cancel", "").await, 409, "order_state").await;
    assert_eq!(refused["current"], "paid", "{refused}");
    assert_eq!(app.stock("T").await, 9);
    let refunded = order_view(act(h1.clone(), "refund", refund_restock).await).await;
    assert_eq!(refunded["status"], "refunded");
    assert_eq!(app.stock("T").await, 10, "restocked");
    assert_eq!(
        order_view(act(h1.clone(), "refund", refund_keep).await).await,
        refunded,
        "a repeat (whatever its restock) changes nothing"
    );
    assert_eq!(app.stock("T").await, 10);
    for action in ["pay", "cancel"] {
        let p = assert_problem(act(h1.clone(), action, "").await, 409, "order_state").await;
        assert_eq!(p["current"], "refunded");
    }

    // held → cancelled; nothing else after it.
    let h2 = buy("T", "h2").await;
    let p = assert_problem(
        act(h2.clone(), "refund", refund_restock).await,
        409,
        "order_state",
    )
    .await;
    assert_eq!(p["current"], "held", "a hold is cancelled, not refunded");
    let cancelled = order_view(act(h2.clone(), "cancel", "").await).await;
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(
        order_view(act(h2.clone(), "cancel", "").await).await,
        cancelled
    );
    assert_eq!(app.stock("T").await, 10);
    let p = assert_problem(act(h2.clone(), "pay", "").await, 409, "order_state").await;
    assert_eq!(p["current"], "cancelled");

    // confirmed → cancelled; confirmed → refunded without restock (written off).
    let c1 = buy("C", "c1").await;
    let p = assert_problem(act(c1.clone(), "pay", "").await, 409, "order_state").await;
    assert_eq!(p["current"], "confirmed");
    assert_eq!(
        order_view(act(c1.clone(), "cancel", "").await).await["status"],
        "cancelled"
    );
    assert_eq!(app.stock("C").await, 10);
    let c2 = buy("C", "c2").await;
    assert_eq!(
        order_view(act(c2.clone(), "refund", refund_keep).await).await["status"],
        "refunded"
    );
    assert_eq!(app.books("C").await, (10, 9, 0, 1), "one unit written off");
    let c3 = buy("C", "c3").await;
    assert_eq!(
        order_view(act(c3.clone(), "refund", refund_restock).await).await["status"],
        "refunded"
    );
    assert_eq!(app.books("C").await, (10, 9, 0, 1));

    // Bad input: 4xx problems that change nothing.
    assert_problem(
        act("not-a-uuid".into(), "cancel", "").await,
        400,
        "invalid_request",
    )
    .await;
    assert_problem(
        app.order("12345", Caller::Shop).await,
        400,
        "invalid_request",
    )
    .await;
    let unknown = uuid::Uuid::now_v7().to_string();
    assert_problem(
        act(unknown.clone(), "pay", "").await,
        404,
        "order_not_found",
    )
    .await;
    assert_problem(
        app.order(&unknown, Caller::Shop).await,
        404,
        "order_not_found",
    )
    .await;
    let c4 = buy("C", "c4").await;
    for bad in ["", "{}", r#"{"restock":"yes"}"#, "[true]"] {
        assert_problem(act(c4.clone(), "refund", bad).await, 400, "invalid_request").await;
    }
    assert_problem(
        app.order_action(&c4, "cancel", "", Caller::Anonymous).await,
        401,
        "unauthorized",
    )
    .await;
    assert_eq!(app.status_of(&c4).await, "confirmed");
    assert_books_balance(&pool).await;
}

#[sqlx::test(migrations = "./migrations")]
async fn a_return_gives_the_users_allowance_back(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.put_sku_holds("CAP", 10, 2, 600).await;
    let first = created(app.buy("u", "k1", "CAP", 2).await).await;
    assert_problem(app.buy("u", "k2", "CAP", 1).await, 409, "purchase_limit").await;
    let id = first["order_id"].as_str().expect("id");
    order_view(app.order_action(id, "cancel", "", Caller::Shop).await).await;
    created(app.buy("u", "k3", "CAP", 2).await).await;
    assert_problem(app.buy("u", "k4", "CAP", 1).await, 409, "purchase_limit").await;
    assert_books_balance(&pool).await;
}

#[sqlx::test(migrations = "./migrations")]
async fn shoppers_see_and_cancel_only_their_own_orders_through_the_edge_signature(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.put_sku_holds("MINE", 5, 5, 600).await;
    let order = created(app.buy("alice", "a1", "MINE", 1).await).await;
    let id = order["order_id"].as_str().expect("id");

    let seen = order_view(app.order(id, Caller::Shopper("alice")).await).await;
    assert_eq!(
        (seen["user"].as_str(), seen["status"].as_str()),
        (Some("alice"), Some("held"))
    );
    assert_problem(
        app.order(id, Caller::Shopper("bob")).await,
        404,
        "order_not_found",
    )
    .await;
    assert_problem(
        app.order_action(id, "cancel", "", Caller::Shopper("bob"))
            .await,
        404,
        "order_not_found",
    )
    .await;
    // Paying and refunding are the shop's: a shopper's signature is not enough.
    assert_problem(
        app.order_action(id, "pay", "", Caller::Shopper("alice"))
            .await,
        401,
        "unauthorized",
    )
    .await;
    assert_problem(app.order(id, Caller::Anonymous).await, 401, "unauthorized").await;
    // A signature over another path (another order) does not verify.
    let forged = app
        .client
        .get(format!("{}/v1/orders/{id}", app.base))
        .header("flashgate-user", "alice")
        .header("flashgate-signature", "t=1,v1=00")
        .send()
        .await
        .expect("request");
    assert_problem(forged, 401, "bad_signature").await;
    assert_eq!(app.status_of(id).await, "held");

    let cancelled = order_view(
        app.order_action(id, "cancel", "", Caller::Shopper("alice"))
            .await,
    )
    .await;
    assert_eq!(cancelled["status"], "cancelled");
    assert_eq!(app.stock("MINE").await, 5);
    assert_books_balance(&pool).await;
}

#[sqlx::test(migrations = "./migrations")]
async fn an_unpaid_hold_expires_and_a_late_payment_takes_a_unit_again_or_is_refund_due(
    pool: PgPool,
) {
    let app = spawn_app(pool.clone()).await;
    app.put_sku_holds("LATE", 1, 5, 1).await;
    let alice = created(app.buy("alice", "a1", "LATE", 1).await).await;
    let alice = alice["order_id"].as_str().expect("id").to_owned();
    assert_problem(app.buy("bob", "b0", "LATE", 1).await, 409, "sold_out").await;
    let took = wait_status(&app, &alice, "expired", Duration::from_secs(4)).await;
    assert!(
        took <= Duration::from_millis(3_200),
        "expired {took:?} after the purchase"
    );
    assert_eq!(app.stock("LATE").await, 1, "the unit is back");
    assert!(metric(&app.metrics().await, "origin_hold_expiries_total") >= 1.0);
    let p = assert_problem(
        app.order_action(&alice, "cancel", "", Caller::Shop).await,
        409,
        "order_state",
    )
    .await;
    assert_eq!(p["current"], "expired");

    // Paid late, a unit is still there: taken again.
    let paid = order_view(app.order_action(&alice, "pay", "", Caller::Shop).await).await;
    assert_eq!(paid["status"], "paid");
    assert_eq!(app.stock("LATE").await, 0);

    // Paid late after someone else took the unit: refund_due, listed by reconcile until refunded.
    app.put_sku_holds("LATE2", 1, 5, 1).await;
    let bob = created(app.buy("bob", "b1", "LATE2", 1).await).await;
    let bob = bob["order_id"].as_str().expect("id").to_owned();
    wait_status(&app, &bob, "expired", Duration::from_secs(4)).await;
    let carol = created(app.buy("carol", "c1", "LATE2", 1).await).await;
    order_view(
        app.order_action(
            carol["order_id"].as_str().expect("id"),
            "pay",
            "",
            Caller::Shop,
        )
        .await,
    )
    .await;
    let due = order_view(app.order_action(&bob, "pay", "", Caller::Shop).await).await;
    assert_eq!(due["status"], "refund_due");
    assert_eq!(
        order_view(app.order_action(&bob, "pay", "", Caller::Shop).await).await,
        due
    );
    assert_eq!(metric(&app.metrics().await, "origin_refund_due_total"), 1.0);
    let (code, out) = reconcile(&pool).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains(&format!("order {bob} is refund_due")), "{out}");
    let refunded = order_view(
        app.order_action(&bob, "refund", r#"{"restock":false}"#, Caller::Shop)
            .await,
    )
    .await;
    assert_eq!(refunded["status"], "refunded");
    assert_eq!(
        app.books("LATE2").await,
        (1, 0, 1, 0),
        "nothing written off: no unit was held"
    );
    assert_books_balance(&pool).await;
}

async fn teach_sold_out(a: &TestApp, b: &TestApp, sku: &str, round: u32) -> String {
    let last = created(a.buy(&format!("w{round}"), "w", sku, 1).await).await;
    let before = metric(&b.metrics().await, "origin_sold_out_fast_path_total");
    for late in 0..2 {
        assert_problem(
            b.buy(&format!("late{round}-{late}"), "l", sku, 1).await,
            409,
            "sold_out",
        )
        .await;
    }
    let after = metric(&b.metrics().await, "origin_sold_out_fast_path_total");
    assert!(after > before, "b answered from its sold-out knowledge");
    last["order_id"].as_str().expect("id").to_owned()
}

#[sqlx::test(migrations = "./migrations")]
async fn after_a_return_no_process_answers_sold_out_from_what_it_knew(pool: PgPool) {
    let (a, b) = (spawn_app(pool.clone()).await, spawn_app(pool.clone()).await);
    a.put_sku_holds("RO", 1, 100, 600).await;

    // A cancellation answers once every process sells the unit again.
    let id = teach_sold_out(&a, &b, "RO", 0).await;
    order_view(a.order_action(&id, "cancel", "", Caller::Shop).await).await;
    created(b.buy("next0", "n", "RO", 1).await).await;

    // So does a refund with restock (of a paid hold).
    let id = {
        let held = b.buy("next0", "n", "RO", 1).await; // the replay of the 201 above
        created(held).await["order_id"]
            .as_str()
            .expect("id")
            .to_owned()
    };
    order_view(a.order_action(&id, "pay", "", Caller::Shop).await).await;
    for late in 0..2 {
        assert_problem(
            b.buy(&format!("late-r{late}"), "l", "RO", 1).await,
            409,
            "sold_out",
        )
        .await;
    }
    order_view(
        a.order_action(&id, "refund", r#"{"restock":true}"#, Caller::Shop)
            .await,
    )
    .await;
    created(b.buy("next1", "n", "RO", 1).await).await;
    assert_books_balance(&pool).await;
}

#[sqlx::test(migrations = "./migrations")]
async fn an_expiry_reopens_the_sale_on_every_process_within_local_ttl(pool: PgPool) {
    let (a, b) = (spawn_app(pool.clone()).await, spawn_app(pool.clone()).await);
    a.put_sku_holds("EXP", 1, 100, 1).await;
    let id = teach_sold_out(&a, &b, "EXP", 0).await;
    wait_status(&a, &id, "expired", Duration::from_secs(4)).await;
    // Bounded by LOCAL_TTL (1 s) after the expiry's commit.
    tokio::time::sleep(Duration::from_millis(1_050)).await;
    created(b.buy("after", "x", "EXP", 1).await).await;
    assert_books_balance(&pool).await;
}

#[sqlx::test(migrations = "./migrations")]
async fn returns_racing_purchase_batches_never_oversell_and_keep_the_books(pool: PgPool) {
    let urls = "redis://127.0.0.1:6379";
    let (a, b) = (
        spawn_app_with(pool.clone(), &[("REDIS_URLS", urls)]).await,
        spawn_app_with(pool.clone(), &[("REDIS_URLS", urls)]).await,
    );
    a.put_sku_holds("RACE", 20, 100, 600).await;
    // Twenty holds, then twenty cancellations racing sixty more purchases on both processes.
    let mut first = Vec::new();
    for i in 0..20 {
        first.push(
            created(a.buy(&format!("u{i}"), "k", "RACE", 1).await).await["order_id"]
                .as_str()
                .expect("id")
                .to_owned(),
        );
    }
    let cancels = first.iter().map(|id| {
        let (app, id) = (if id.len() % 2 == 0 { &a } else { &b }, id.clone());
        async move {
            app.order_action(&id, "cancel", "", Caller::Shop)
                .await
                .status()
                .as_u16()
        }
    });
    let buys = (0..60).map(|i| {
        let app = if i % 2 == 0 { &a } else { &b };
        async move {
            app.buy(&format!("v{i}"), "k", "RACE", 1)
                .await
                .status()
                .as_u16()
        }
    });
    let (cancelled, bought) = tokio::join!(join_all(cancels), join_all(buys));
    assert!(cancelled.iter().all(|s| *s == 200), "{cancelled:?}");
    let sold = bought.iter().filter(|s| **s == 201).count();
    assert!(bought.iter().all(|s| *s == 201 || *s == 409), "{bought:?}");
    assert!(sold <= 20, "never more than the 20 returned units: {sold}");
    let (initial, stock, out, written_off) = a.books("RACE").await;
    assert_eq!((initial, written_off), (20, 0));
    assert_eq!(out, sold as i64, "held units are exactly the new sales");
    assert_eq!(stock, 20 - sold as i64);
    assert_books_balance(&pool).await;
}

#[sqlx::test(migrations = "./migrations")]
async fn a_return_of_a_replaced_sale_goes_back_to_that_sale_not_the_current_one(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.put_sku_holds("GEN", 3, 10, 600).await;
    let old = created(app.buy("u", "k1", "GEN", 2).await).await;
    let old = old["order_id"].as_str().expect("id").to_owned();
    // A new sale of 5 units (generation 2); the old hold still counts toward the cap.
    app.put_sku_holds("GEN", 5, 3, 600).await;
    assert_problem(app.buy("u", "k2", "GEN", 2).await, 409, "purchase_limit").await;
    order_view(app.order_action(&old, "cancel", "", Caller::Shop).await).await;
    assert_eq!(
        app.stock("GEN").await,
        5,
        "the current sale is not restocked"
    );
    let archived: (i64, i64, i64) = sqlx::query_as(
        "SELECT initial_stock, stock, units_out FROM sku_generations WHERE sku = 'GEN' AND generation = 1",
    )
    .fetch_one(&pool)
    .await
    .expect("generation 1");
    assert_eq!(archived, (3, 3, 0), "generation 1 got its units back");
    created(app.buy("u", "k3", "GEN", 2).await).await;
    assert_books_balance(&pool).await;
}
