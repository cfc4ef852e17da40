//! Every malformed or forged request gets the right 4xx and changes nothing.

use sqlx::PgPool;

use crate::helpers::{ADMIN_TOKEN, Caller, Purchase, assert_problem, now, spawn_app};

#[sqlx::test(migrations = "./migrations")]
async fn bad_input_matrix_is_refused_and_stock_is_unchanged(pool: PgPool) {
    let app = spawn_app(pool).await;
    app.put_sku("HOT", 10, 10).await;
    let ok = || Purchase::new("alice", "key-1", "HOT", 1);
    let long_sku = "S".repeat(10_000);

    let mut cases: Vec<(&str, Purchase, u16, &str)> = vec![
        (
            "malformed json",
            ok().body("{\"sku\":"),
            400,
            "invalid_request",
        ),
        ("not an object", ok().body("[1]"), 400, "invalid_request"),
        ("empty body", ok().body(""), 400, "invalid_request"),
        (
            "qty 0",
            ok().body(r#"{"sku":"HOT","qty":0}"#),
            400,
            "invalid_request",
        ),
        (
            "qty -1",
            ok().body(r#"{"sku":"HOT","qty":-1}"#),
            400,
            "invalid_request",
        ),
        (
            "qty 101",
            ok().body(r#"{"sku":"HOT","qty":101}"#),
            400,
            "invalid_request",
        ),
        (
            "qty 1e30",
            ok().body(r#"{"sku":"HOT","qty":1e30}"#),
            400,
            "invalid_request",
        ),
        (
            "qty 1e400",
            ok().body(r#"{"sku":"HOT","qty":1e400}"#),
            400,
            "invalid_request",
        ),
        (
            "qty 1.5",
            ok().body(r#"{"sku":"HOT","qty":1.5}"#),
            400,
            "invalid_request",
        ),
        (
            "qty string",
            ok().body(r#"{"sku":"HOT","qty":"1"}"#),
            400,
            "invalid_request",
        ),
        (
            "sku number",
            ok().body(r#"{"sku":7,"qty":1}"#),
            400,
            "invalid_request",
        ),
        (
            "sku missing",
            ok().body(r#"{"qty":1}"#),
            400,
            "invalid_request",
        ),
        (
            "sku bad chars",
            ok().body(r#"{"sku":"HO T","qty":1}"#),
            400,
            "invalid_request",
        ),
        (
            "sku 10 KB",
            ok().body(format!(r#"{{"sku":"{long_sku}","qty":1}}"#)),
            400,
            "invalid_request",
        ),
        (
            "body over 16 KiB",
            ok().body(format!(
                r#"{{"sku":"HOT","qty":1,"pad":"{}"}}"#,
                "x".repeat(17_000)
            )),
            413,
            "payload_too_large",
        ),
    ];
    let mut missing_key = ok();
    missing_key.key = None;
    cases.push(("missing key", missing_key, 400, "missing_idempotency_key"));
    for bad_key in ["", "a b", "\"broken", &"k".repeat(256)] {
        let mut p = ok();
        p.key = Some(bad_key.to_owned());
        cases.push(("malformed key", p, 400, "invalid_request"));
    }
    let mut missing_user = ok();
    missing_user.user = None;
    cases.push(("missing user", missing_user, 401, "bad_signature"));
    let mut bad_user = ok();
    bad_user.user = Some("al ice".into());
    cases.push(("malformed user", bad_user, 401, "bad_signature"));
    let mut swapped_user = ok();
    swapped_user.signed_user = Some("mallory".into());
    cases.push((
        "user swapped after signing",
        swapped_user,
        401,
        "bad_signature",
    ));
    let mut tampered_body = ok();
    tampered_body.signed_body = Some(br#"{"sku":"HOT","qty":2}"#.to_vec());
    cases.push((
        "body tampered after signing",
        tampered_body,
        401,
        "bad_signature",
    ));
    let mut expired = ok();
    expired.t = now() - 301;
    cases.push(("expired timestamp", expired, 401, "bad_signature"));
    let mut future = ok();
    future.t = now() + 400;
    cases.push(("timestamp from the future", future, 401, "bad_signature"));
    let mut wrong_secret = ok();
    wrong_secret.secret = "some-other-secret-entirely".into();
    cases.push(("wrong secret", wrong_secret, 401, "bad_signature"));
    let good_sig = ok().header_value();
    let mut tampered_ts = ok();
    tampered_ts.signature = Some(good_sig.replacen("t=", "t=1", 1));
    cases.push(("timestamp tampered", tampered_ts, 401, "bad_signature"));
    let mut flipped = ok();
    let mut sig = good_sig.clone();
    let last = if sig.ends_with('0') { '1' } else { '0' };
    sig.pop();
    sig.push(last);
    flipped.signature = Some(sig);
    cases.push(("signature bit flipped", flipped, 401, "bad_signature"));
    for garbage in ["", "garbage", "t=1,v1=zz", "v1=abc,t=1"] {
        let mut p = ok();
        p.signature = Some(garbage.into());
        cases.push(("garbage signature", p, 401, "bad_signature"));
    }

    for (name, p, status, code) in cases {
        let res = app.send(&p).await;
        assert_eq!(res.status().as_u16(), status, "case {name}");
        assert_problem(res, status, code).await;
    }
    assert_eq!(app.stock("HOT").await, 10);
    assert_eq!(app.order_count().await, 0);
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_records")
        .fetch_one(&app.pool)
        .await
        .expect("count");
    assert_eq!(stored, 0, "refused requests store nothing");
    // The key refused above is still usable.
    assert_eq!(app.buy("alice", "key-1", "HOT", 1).await.status(), 201);
}

#[sqlx::test(migrations = "./migrations")]
async fn missing_signature_header_is_401(pool: PgPool) {
    let app = spawn_app(pool).await;
    let res = app
        .client
        .post(format!("{}/v1/purchases", app.base))
        .header("flashgate-user", "alice")
        .header("idempotency-key", "k")
        .body(r#"{"sku":"A","qty":1}"#)
        .send()
        .await
        .expect("request");
    assert_problem(res, 401, "bad_signature").await;
}

/// A request wrong in two ways gets the refusal of the check the contract makes first
/// (docs/api.md): the order of the extractors in each handler's signature. Swapping two checks
/// fails here.
#[sqlx::test(migrations = "./migrations")]
async fn two_faults_are_refused_by_the_check_the_contract_makes_first(pool: PgPool) {
    let app = spawn_app(pool).await;
    app.put_sku("HOT", 10, 10).await;
    let big = format!(r#"{{"sku":"HOT","qty":1,"pad":"{}"}}"#, "x".repeat(17_000));
    let ok = || Purchase::new("alice", "key-1", "HOT", 1);

    // Purchases: cap → signature → key → body.
    let mut p = ok().body(big.clone());
    p.secret = "some-other-secret-entirely".into();
    assert_problem(app.send(&p).await, 413, "payload_too_large").await;
    let mut p = ok();
    p.secret = "some-other-secret-entirely".into();
    p.key = None;
    assert_problem(app.send(&p).await, 401, "bad_signature").await;
    let mut p = ok().body("{");
    p.key = None;
    assert_problem(app.send(&p).await, 400, "missing_idempotency_key").await;

    // The shop's order routes: token → cap → order id → body.
    let url = |id: &str, action: &str| format!("{}/v1/orders/{id}/{action}", app.base);
    let post = |url: String, token: Option<&str>, body: String| {
        let mut req = app.client.post(url).body(body);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        req.send()
    };
    let unknown = uuid::Uuid::now_v7().to_string();
    let res = post(url("not-a-uuid", "pay"), None, big.clone()).await;
    assert_problem(res.expect("answer"), 401, "unauthorized").await;
    let res = post(url("not-a-uuid", "pay"), Some(ADMIN_TOKEN), big.clone()).await;
    assert_problem(res.expect("answer"), 413, "payload_too_large").await;
    let res = post(url("not-a-uuid", "refund"), Some(ADMIN_TOKEN), "[".into()).await;
    let p = assert_problem(res.expect("answer"), 400, "invalid_request").await;
    assert!(
        p["detail"].as_str().is_some_and(|d| d.contains("UUID")),
        "{p}"
    );
    let res = post(url(&unknown, "refund"), Some(ADMIN_TOKEN), "[".into()).await;
    let p = assert_problem(res.expect("answer"), 400, "invalid_request").await;
    assert!(
        p["detail"].as_str().is_some_and(|d| !d.contains("UUID")),
        "{p}"
    );

    // A shopper's order route: signature → order id.
    let res = app
        .client
        .post(url("not-a-uuid", "cancel"))
        .header("flashgate-user", "alice")
        .header("flashgate-signature", "t=1,v1=00")
        .send()
        .await;
    assert_problem(res.expect("answer"), 401, "bad_signature").await;
    let res = app
        .order_action("not-a-uuid", "cancel", "", Caller::Shopper("alice"))
        .await;
    assert_problem(res, 400, "invalid_request").await;

    // The admin PUT: token → cap → SKU → body.
    let res = app.put_sku_raw("bad sku", None, big.clone()).await;
    assert_problem(res, 401, "unauthorized").await;
    let res = app.put_sku_raw("bad sku", Some(ADMIN_TOKEN), big).await;
    assert_problem(res, 413, "payload_too_large").await;
    let res = app
        .put_sku_raw("bad%20sku", Some(ADMIN_TOKEN), "[".into())
        .await;
    let p = assert_problem(res, 400, "invalid_request").await;
    assert!(
        p["detail"].as_str().is_some_and(|d| d.contains("sku")),
        "{p}"
    );
    assert_eq!(app.stock("HOT").await, 10);
}
