//! Webhooks (issue 34) against real receiving servers (`receiver.rs`): deliveries signed the
//! Standard Webhooks way (checked with the `standardwebhooks` crate) with the event's JSON,
//! per-endpoint types, retries on the schedule (a 500, a timeout, a receiver down for a while, a
//! redirect not followed), `Retry-After` deferring without spending an attempt, `410` and the
//! last retry disabling the endpoint, re-enabling delivering what waited in order, one order's
//! events in order while an earlier one is retried, the in-flight bound, secret rotation, replay.
//! The retry schedule and timeout are shortened for the tests (`WEBHOOK_RETRY_SCHEDULE`,
//! `WEBHOOK_TIMEOUT_MS`).

use std::time::Duration;

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::helpers::{
    ADMIN_TOKEN, Caller, TestApp, assert_problem, created, metric, spawn_app_with,
};
use crate::receiver::{Received, Receiver, Reply};

const SCHEDULE: &str = "0,200ms,300ms,400ms";

pub(crate) async fn hooks_app(pool: PgPool, extra: &[(&str, &str)]) -> TestApp {
    let mut env = vec![
        ("WEBHOOK_RETRY_SCHEDULE", SCHEDULE),
        ("WEBHOOK_TIMEOUT_MS", "500"),
    ];
    env.extend_from_slice(extra);
    spawn_app_with(pool, &env).await
}

impl TestApp {
    /// `method path` with the admin token and a JSON body.
    pub(crate) async fn admin(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> reqwest::Response {
        let url = format!("{}{path}", self.base);
        let req = match method {
            "POST" => self.client.post(url),
            "PATCH" => self.client.patch(url),
            "DELETE" => self.client.delete(url),
            _ => self.client.get(url),
        };
        let req = req.bearer_auth(ADMIN_TOKEN);
        let req = match body {
            Some(b) => req.body(b.to_string()),
            None => req,
        };
        req.send().await.expect("request")
    }

    /// Registers an endpoint; the 201's body (with its `secret`).
    pub(crate) async fn endpoint(&self, body: Value) -> Value {
        let res = self.admin("POST", "/v1/admin/webhooks", Some(body)).await;
        let status = res.status();
        let text = res.text().await.expect("body");
        assert_eq!(status, 201, "{text}");
        serde_json::from_str(&text).expect("json")
    }

    pub(crate) async fn endpoint_view(&self, id: &str) -> Value {
        let res = self
            .admin("GET", &format!("/v1/admin/webhooks/{id}"), None)
            .await;
        assert_eq!(res.status(), 200);
        res.json().await.expect("json")
    }

    /// Waits until the endpoint has `pending` deliveries waiting (the origin records an
    /// acknowledgement just after the receiver sent it).
    pub(crate) async fn wait_pending(&self, id: &str, pending: i64) {
        let start = std::time::Instant::now();
        loop {
            let view = self.endpoint_view(id).await;
            if view["pending"] == pending {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "pending never {pending}: {view}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Buys one unit of `sku` as `user`; the order id.
    pub(crate) async fn order_of(&self, user: &str, sku: &str) -> String {
        let body = created(self.buy(user, &format!("{user}-{sku}"), sku, 1).await).await;
        body["order_id"].as_str().expect("id").to_owned()
    }
}

/// The feed's event with this id.
fn in_feed<'a>(feed: &'a [Value], id: &str) -> &'a Value {
    feed.iter()
        .find(|e| e["id"] == id)
        .unwrap_or_else(|| panic!("{id} not in the feed"))
}

fn ids(received: &[Received]) -> Vec<String> {
    received.iter().map(Received::id).collect()
}

#[sqlx::test(migrations = "./migrations")]
async fn deliveries_are_signed_standard_webhooks_of_the_feeds_events_filtered_per_endpoint(
    pool: PgPool,
) {
    let app = hooks_app(pool, &[]).await;
    let (all, paid_only) = (Receiver::start().await, Receiver::start().await);
    let a = app
        .endpoint(json!({"url": all.url(), "description": "everything"}))
        .await;
    let b = app
        .endpoint(json!({"url": paid_only.url(), "types": ["order.paid"]}))
        .await;
    for e in [&a, &b] {
        assert!(
            e["secret"]
                .as_str()
                .is_some_and(|s| s.starts_with("whsec_")),
            "{e}"
        );
        assert_eq!(e["enabled"], true);
    }
    assert_eq!(a["types"], json!(["*"]));
    assert_eq!(b["types"], json!(["order.paid"]));
    let (secret_a, secret_b) = (
        a["secret"].as_str().expect("s"),
        b["secret"].as_str().expect("s"),
    );

    app.put_sku_holds("W", 2, 5, 600).await;
    let first = app.order_of("alice", "W").await;
    let second = app.order_of("bob", "W").await;
    assert_eq!(
        app.order_action(&first, "pay", "", Caller::Shop)
            .await
            .status(),
        200
    );
    // created ×2, sold_out, paid.
    let got = all
        .wait_for(Duration::from_secs(10), "4 events", |r| r.len() == 4)
        .await;
    let feed = app.all_events(100).await;
    assert_eq!(feed.len(), 4);
    for r in &got {
        assert!(
            r.verifies(secret_a),
            "the reference library verifies {}",
            r.id()
        );
        assert!(!r.verifies(secret_b), "not under another endpoint's secret");
        let event = in_feed(&feed, &r.id());
        assert_eq!(&r.json(), event, "the body is the feed's event");
        assert_eq!(r.headers["content-type"], "application/json");
        let ts: i64 = r.headers["webhook-timestamp"]
            .to_str()
            .expect("ts")
            .parse()
            .expect("ts");
        assert!((ts - crate::helpers::now()).abs() < 30);
        let sig = r.headers["webhook-signature"].to_str().expect("sig");
        assert!(sig.starts_with("v1,") && !sig.contains(' '), "{sig}");
    }
    let paid = paid_only
        .wait_for(Duration::from_secs(10), "the payment", |r| r.len() == 1)
        .await;
    assert!(paid[0].verifies(secret_b));
    assert_eq!(paid[0].json()["type"], "order.paid");
    assert_eq!(paid[0].json()["data"]["order_id"], first);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        paid_only.received().len(),
        1,
        "nothing else went to the payment endpoint"
    );
    let _ = second;

    // The endpoint's view: nothing pending, never failing; the secret is never shown again.
    app.wait_pending(a["id"].as_str().expect("id"), 0).await;
    let view = app.endpoint_view(a["id"].as_str().expect("id")).await;
    assert_eq!(
        (view["pending"].clone(), view["failing_since"].clone()),
        (json!(0), Value::Null)
    );
    assert!(view.get("secret").is_none(), "{view}");
    let list: Value = app
        .admin("GET", "/v1/admin/webhooks", None)
        .await
        .json()
        .await
        .expect("json");
    assert_eq!(list["data"].as_array().expect("data").len(), 2);
    assert!(!list.to_string().contains("whsec_"));
    let text = app.metrics().await;
    let delivered = format!(
        "origin_webhook_deliveries_total{{endpoint=\"{}\",result=\"delivered\"}}",
        a["id"].as_str().expect("id")
    );
    assert_eq!(metric(&text, &delivered), 4.0, "{text}");
}

#[sqlx::test(migrations = "./migrations")]
async fn a_failing_receiver_is_retried_and_an_orders_next_event_waits_for_the_acknowledgement(
    pool: PgPool,
) {
    let app = hooks_app(pool, &[]).await;
    let receiver = Receiver::start().await;
    app.endpoint(json!({"url": receiver.url(), "types": ["order.created", "order.paid"]}))
        .await;
    app.put_sku_holds("R", 10, 5, 600).await;
    // Every delivery of alice's order's first event fails twice (500, then a timeout).
    receiver.when(
        |e| e["type"] == "order.created" && e["data"]["user"] == "alice",
        vec![Reply::Status(500), Reply::Slow(Duration::from_millis(700))],
    );
    let alice = app.order_of("alice", "R").await;
    app.settled().await;
    let created_id = app.order_events(&alice).await[0]["id"]
        .as_str()
        .expect("id")
        .to_owned();
    // Meanwhile: alice pays, and other orders come and go.
    assert_eq!(
        app.order_action(&alice, "pay", "", Caller::Shop)
            .await
            .status(),
        200
    );
    let bob = app.order_of("bob", "R").await;
    let got = receiver
        .wait_for(
            Duration::from_secs(10),
            "alice's two events and bob's",
            |r| {
                r.len() >= 3
                    && r.iter().any(|x| {
                        x.json()["data"]["order_id"] == alice && x.json()["type"] == "order.paid"
                    })
            },
        )
        .await;
    let all = receiver.received();
    let alices: Vec<(String, u16)> = all
        .iter()
        .filter(|r| r.json()["data"]["order_id"] == alice)
        .map(|r| (r.json()["type"].as_str().expect("t").to_owned(), r.status))
        .collect();
    // The same event (same webhook-id) three times; the payment only after its acknowledgement.
    assert_eq!(
        alices,
        [
            ("order.created".to_owned(), 500),
            ("order.created".to_owned(), 200),
            ("order.created".to_owned(), 200),
            ("order.paid".to_owned(), 200),
        ],
        "{all:?}"
    );
    let tries: Vec<&Received> = all.iter().filter(|r| r.id() == created_id).collect();
    assert!(
        tries[1].at - tries[0].at >= Duration::from_millis(180),
        "the schedule's 200 ms (±10 %)"
    );
    // Bob's order was not held back by alice's retries.
    let bob_at = got
        .iter()
        .position(|r| r.json()["data"]["order_id"] == bob)
        .expect("bob");
    let alice_done = got
        .iter()
        .rposition(|r| r.id() == created_id)
        .expect("alice");
    assert!(
        bob_at < alice_done,
        "another order's event went first: {:?}",
        ids(&got)
    );
    let text = app.metrics().await;
    assert!(
        text.contains("result=\"failed\"") && text.contains("result=\"timeout\""),
        "{text}"
    );
}

#[sqlx::test(migrations = "./migrations")]
async fn retry_after_defers_without_spending_an_attempt_and_redirects_are_not_followed(
    pool: PgPool,
) {
    // The deferrals spend no attempt: only the redirect does.
    let app = hooks_app(pool, &[("WEBHOOK_RETRY_SCHEDULE", "0,150ms,2s")]).await;
    let receiver = Receiver::start().await;
    let elsewhere = Receiver::start().await;
    let endpoint = app.endpoint(json!({"url": receiver.url()})).await;
    receiver.next(vec![
        // An hour's Retry-After is capped by the schedule's next step (150 ms).
        Reply::RetryAfter(503, 3600),
        Reply::RetryAfter(429, 3600),
        Reply::RetryAfter(503, 3600),
        Reply::Redirect(elsewhere.url()),
    ]);
    assert_eq!(app.put_sku("D", 5, 5).await.status(), 200);
    app.order_of("alice", "D").await;
    let got = receiver
        .wait_for(Duration::from_secs(5), "the event", |r| r.len() == 1)
        .await;
    let tries = receiver.received();
    assert_eq!(
        tries.iter().map(|r| r.status).collect::<Vec<_>>(),
        [503, 429, 503, 302, 200],
        "three deferrals, then one attempt spent on the redirect, then the next"
    );
    assert!(tries.iter().all(|r| r.id() == got[0].id()));
    assert!(
        tries[4].at - tries[0].at < Duration::from_secs(3),
        "capped by the schedule"
    );
    assert!(
        elsewhere.received().is_empty(),
        "the redirect was not followed"
    );
    app.wait_pending(endpoint["id"].as_str().expect("id"), 0)
        .await;
    let view = app
        .endpoint_view(endpoint["id"].as_str().expect("id"))
        .await;
    assert_eq!(view["enabled"], true);
    assert_eq!(
        view["failing_since"],
        Value::Null,
        "acknowledged since: {view}"
    );
    assert!(
        view["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("302")),
        "{view}"
    );
    let text = app.metrics().await;
    let id = endpoint["id"].as_str().expect("id");
    assert_eq!(
        metric(
            &text,
            &format!("origin_webhook_deliveries_total{{endpoint=\"{id}\",result=\"deferred\"}}")
        ),
        3.0
    );
}

#[sqlx::test(migrations = "./migrations")]
async fn gone_disables_the_endpoint_its_deliveries_wait_and_reenabling_sends_them_in_order(
    pool: PgPool,
) {
    let app = hooks_app(pool, &[]).await;
    let receiver = Receiver::start().await;
    let endpoint = app.endpoint(json!({"url": receiver.url()})).await;
    let id = endpoint["id"].as_str().expect("id").to_owned();
    receiver.next(vec![Reply::Status(410)]);
    app.put_sku_holds("G", 10, 5, 600).await;
    let alice = app.order_of("alice", "G").await;
    let start = std::time::Instant::now();
    loop {
        if app.endpoint_view(&id).await["enabled"] == false {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "not disabled");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let view = app.endpoint_view(&id).await;
    assert_eq!(view["disabled_reason"], "gone");
    // While disabled, events wait.
    assert_eq!(
        app.order_action(&alice, "pay", "", Caller::Shop)
            .await
            .status(),
        200
    );
    app.order_of("bob", "G").await;
    app.settled().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.received().len(), 1, "only the 410");
    assert_eq!(app.endpoint_view(&id).await["pending"], 3);
    let text = app.metrics().await;
    assert_eq!(
        metric(
            &text,
            "origin_webhook_endpoints_disabled_total{reason=\"gone\"}"
        ),
        1.0
    );

    let res = app
        .admin(
            "PATCH",
            &format!("/v1/admin/webhooks/{id}"),
            Some(json!({"enabled": true})),
        )
        .await;
    assert_eq!(res.status(), 200);
    let got = receiver
        .wait_for(Duration::from_secs(5), "the three", |r| r.len() == 3)
        .await;
    let alice_types: Vec<Value> = got
        .iter()
        .filter(|r| r.json()["data"]["order_id"] == alice)
        .map(|r| r.json()["type"].clone())
        .collect();
    assert_eq!(alice_types, [json!("order.created"), json!("order.paid")]);
    let view = app.endpoint_view(&id).await;
    assert_eq!(
        (view["enabled"].clone(), view["disabled_reason"].clone()),
        (json!(true), Value::Null)
    );
    app.wait_pending(&id, 0).await;
}

#[sqlx::test(migrations = "./migrations")]
async fn an_endpoint_still_failing_after_the_last_retry_is_disabled_and_a_receiver_back_gets_it_all(
    pool: PgPool,
) {
    let app = hooks_app(pool, &[("WEBHOOK_RETRY_SCHEDULE", "0,100ms,100ms")]).await;
    let mut receiver = Receiver::start().await;
    let endpoint = app.endpoint(json!({"url": receiver.url()})).await;
    let id = endpoint["id"].as_str().expect("id").to_owned();
    // Down: connections refused.
    receiver.down();
    assert_eq!(app.put_sku("F", 5, 5).await.status(), 200);
    app.order_of("alice", "F").await;
    let start = std::time::Instant::now();
    let view = loop {
        let view = app.endpoint_view(&id).await;
        if view["enabled"] == false {
            break view;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "not disabled: {view}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(view["disabled_reason"], "failing");
    assert!(view["failing_since"].is_string(), "{view}");
    let error = view["last_error"].as_str().expect("last error");
    assert!(
        error.contains("could not be reached") && error.contains("after 3 attempts"),
        "{error}"
    );
    assert_eq!(view["pending"], 1);
    let text = app.metrics().await;
    assert_eq!(
        metric(
            &text,
            "origin_webhook_endpoints_disabled_total{reason=\"failing\"}"
        ),
        1.0
    );
    // The endpoint gauges are read from the database every 2 s.
    let start = std::time::Instant::now();
    let gauge = format!("origin_webhook_endpoint_enabled{{endpoint=\"{id}\"}}");
    while metric(&app.metrics().await, &gauge) != 0.0 {
        assert!(start.elapsed() < Duration::from_secs(5), "{gauge} still 1");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Back up, re-enabled: the waiting event is delivered, and the next ones.
    receiver.up().await;
    app.admin(
        "PATCH",
        &format!("/v1/admin/webhooks/{id}"),
        Some(json!({"enabled": true})),
    )
    .await;
    app.order_of("bob", "F").await;
    receiver
        .wait_for(Duration::from_secs(5), "both orders", |r| r.len() == 2)
        .await;
}

#[sqlx::test(migrations = "./migrations")]
async fn a_receiver_down_for_a_while_gets_every_event_once_it_is_back(pool: PgPool) {
    let app = hooks_app(
        pool,
        &[("WEBHOOK_RETRY_SCHEDULE", "0,100ms,200ms,400ms,800ms,1s,1s")],
    )
    .await;
    let mut receiver = Receiver::start().await;
    app.endpoint(json!({"url": receiver.url()})).await;
    receiver.down();
    assert_eq!(app.put_sku("B", 20, 20).await.status(), 200);
    for u in ["a", "b", "c", "d", "e"] {
        app.order_of(u, "B").await;
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    receiver.up().await;
    let got = receiver
        .wait_for(Duration::from_secs(10), "five events", |r| r.len() == 5)
        .await;
    let unique: std::collections::HashSet<String> = ids(&got).into_iter().collect();
    assert_eq!(unique.len(), 5);
}

#[sqlx::test(migrations = "./migrations")]
async fn deliveries_run_concurrently_across_orders_within_the_in_flight_bound(pool: PgPool) {
    let app = hooks_app(pool, &[("WEBHOOK_MAX_IN_FLIGHT", "3")]).await;
    let receiver = Receiver::start().await;
    receiver.always(Reply::Slow(Duration::from_millis(150)));
    app.endpoint(json!({"url": receiver.url()})).await;
    assert_eq!(app.put_sku("C", 50, 50).await.status(), 200);
    for i in 0..12 {
        app.order_of(&format!("u{i}"), "C").await;
    }
    receiver
        .wait_for(Duration::from_secs(10), "twelve events", |r| r.len() == 12)
        .await;
    assert_eq!(
        receiver.max_in_flight(),
        3,
        "concurrent, and never above WEBHOOK_MAX_IN_FLIGHT"
    );
}

#[sqlx::test(migrations = "./migrations")]
async fn a_rotated_secret_signs_beside_the_previous_one_and_replay_resends_the_same_ids(
    pool: PgPool,
) {
    let app = hooks_app(pool, &[]).await;
    let receiver = Receiver::start().await;
    let endpoint = app.endpoint(json!({"url": receiver.url()})).await;
    let id = endpoint["id"].as_str().expect("id").to_owned();
    let old = endpoint["secret"].as_str().expect("secret").to_owned();
    assert_eq!(app.put_sku("K", 10, 10).await.status(), 200);
    app.order_of("alice", "K").await;
    let first = receiver
        .wait_for(Duration::from_secs(5), "one", |r| r.len() == 1)
        .await;
    assert!(first[0].verifies(&old));

    let res = app
        .admin(
            "POST",
            &format!("/v1/admin/webhooks/{id}/rotate-secret"),
            None,
        )
        .await;
    assert_eq!(res.status(), 200);
    let rotated: Value = res.json().await.expect("json");
    let new = rotated["secret"].as_str().expect("secret").to_owned();
    assert_ne!(new, old);
    let expires = rotated["previous_secret_expires_at"]
        .as_str()
        .expect("expiry");
    let expires = chrono::DateTime::parse_from_rfc3339(expires).expect("rfc3339");
    let hours = (expires.timestamp() - crate::helpers::now()) as f64 / 3600.0;
    assert!((23.9..=24.0).contains(&hours), "{hours}");
    app.order_of("bob", "K").await;
    let got = receiver
        .wait_for(Duration::from_secs(5), "two", |r| r.len() == 2)
        .await;
    let sig = got[1].headers["webhook-signature"].to_str().expect("sig");
    assert_eq!(sig.split(' ').count(), 2, "both secrets sign: {sig}");
    assert!(got[1].verifies(&new) && got[1].verifies(&old));

    // Replay after a cursor and by time: the same ids again.
    let feed = app.all_events(100).await;
    let res = app
        .admin(
            "POST",
            &format!("/v1/admin/webhooks/{id}/replay"),
            Some(json!({"after": "0-0"})),
        )
        .await;
    assert_eq!(res.status(), 202);
    assert_eq!(
        res.json::<Value>().await.expect("json")["replayed"],
        feed.len()
    );
    let again = receiver
        .wait_for(Duration::from_secs(5), "the replay", |r| {
            r.len() == 2 + feed.len()
        })
        .await;
    let replayed: Vec<String> = ids(&again[2..]);
    let originals: Vec<String> = feed
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_owned())
        .collect();
    assert_eq!(replayed, originals);
    app.wait_pending(&id, 0).await;
    let since = feed[1]["timestamp"].as_str().expect("ts");
    let res = app
        .admin(
            "POST",
            &format!("/v1/admin/webhooks/{id}/replay"),
            Some(json!({"since": since})),
        )
        .await;
    assert_eq!(res.json::<Value>().await.expect("json")["replayed"], 1);

    // Bad replays.
    for body in [
        json!({}),
        json!({"after": "0-0", "since": since}),
        json!({"after": "x"}),
        json!({"since": "yesterday"}),
        json!({"since": since, "until": since}),
    ] {
        let res = app
            .admin(
                "POST",
                &format!("/v1/admin/webhooks/{id}/replay"),
                Some(body.clone()),
            )
            .await;
        assert_problem(res, 400, "invalid_request").await;
    }
    let unknown = uuid::Uuid::now_v7();
    let res = app
        .admin(
            "POST",
            &format!("/v1/admin/webhooks/{unknown}/replay"),
            Some(json!({"after": "0-0"})),
        )
        .await;
    assert_problem(res, 404, "webhook_not_found").await;
}

#[sqlx::test(migrations = "./migrations")]
async fn the_endpoints_api_refuses_bad_input_and_needs_the_admin_token(pool: PgPool) {
    let app = hooks_app(pool.clone(), &[]).await;
    for body in [
        json!({"url": "not a url"}),
        json!({"url": "http://shop.example/hooks"}),
        json!({"url": "ftp://shop.example/hooks"}),
        json!({"url": "https://user:pw@shop.example/hooks"}),
        json!({"url": "https://shop.example/hooks", "types": ["order.shipped"]}),
        json!({"url": "https://shop.example/hooks", "types": []}),
        json!({"url": "https://shop.example/hooks", "type": ["order.paid"]}),
        json!({"url": "https://shop.example/hooks", "description": "x".repeat(1025)}),
        json!({"types": ["order.paid"]}),
        json!({"url": format!("https://shop.example/{}", "x".repeat(20_000))}),
    ] {
        let res = app
            .admin("POST", "/v1/admin/webhooks", Some(body.clone()))
            .await;
        let problem = assert_problem(res, 400, "invalid_request").await;
        assert!(problem["detail"].is_string(), "{body}");
    }
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM webhook_endpoints")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(count, 0, "nothing was created");

    let res = app
        .client
        .post(format!("{}/v1/admin/webhooks", app.base))
        .body(json!({"url": "https://shop.example/hooks"}).to_string())
        .send()
        .await
        .expect("req");
    assert_problem(res, 401, "unauthorized").await;

    // http:// is fine with WEBHOOK_ALLOW_HTTP.
    let dev = hooks_app(pool.clone(), &[("WEBHOOK_ALLOW_HTTP", "true")]).await;
    let e = dev
        .endpoint(json!({"url": "http://shop.example/hooks"}))
        .await;
    let id = e["id"].as_str().expect("id");

    // PATCH, GET, DELETE.
    let res = app
        .admin(
            "PATCH",
            &format!("/v1/admin/webhooks/{id}"),
            Some(json!({"types": ["sku.sold_out"], "description": null, "enabled": false})),
        )
        .await;
    assert_eq!(res.status(), 200);
    let view: Value = res.json().await.expect("json");
    assert_eq!(
        (
            view["types"].clone(),
            view["enabled"].clone(),
            view["disabled_reason"].clone()
        ),
        (json!(["sku.sold_out"]), json!(false), json!("manual"))
    );
    let res = app
        .admin(
            "PATCH",
            &format!("/v1/admin/webhooks/{id}"),
            Some(json!({"url": "http://shop.example/x"})),
        )
        .await;
    assert_problem(res, 400, "invalid_request").await;
    assert_problem(
        app.admin("GET", "/v1/admin/webhooks/nope", None).await,
        400,
        "invalid_request",
    )
    .await;
    assert_eq!(
        app.admin("DELETE", &format!("/v1/admin/webhooks/{id}"), None)
            .await
            .status(),
        204
    );
    assert_problem(
        app.admin("GET", &format!("/v1/admin/webhooks/{id}"), None)
            .await,
        404,
        "webhook_not_found",
    )
    .await;
    assert_problem(
        app.admin("DELETE", &format!("/v1/admin/webhooks/{id}"), None)
            .await,
        404,
        "webhook_not_found",
    )
    .await;
}

#[sqlx::test(migrations = "./migrations")]
async fn reconcile_reports_events_left_unnumbered_unsent_or_out_of_their_schedule(pool: PgPool) {
    // No origin runs: the rows are set up as a stalled deployment would leave them.
    let sql = |q: &'static str| sqlx::raw_sql(q).execute(&pool);
    sql("INSERT INTO events (id, type, at, sku, stock) VALUES (gen_random_uuid(), 'sku.sold_out', now() - interval '2 hours', 'A', 0)")
        .await
        .expect("event");
    let numbered = origin::store::events::number(&pool, 100)
        .await
        .expect("number");
    assert!(numbered.is_some_and(|n| n.len() == 1));
    // An event whose transaction never got its number (it waits in event_xacts).
    sql("BEGIN;
         INSERT INTO events (id, type, at, sku, stock) VALUES (gen_random_uuid(), 'sku.sold_out', now(), 'B', 0);
         UPDATE event_xacts SET registered_at = now() - interval '10 minutes';
         COMMIT;")
        .await
        .expect("unnumbered");
    let (code, out) = crate::helpers::reconcile(&pool).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("1 committed transactions' events wait for their commit number"),
        "{out}"
    );
    assert!(
        out.contains("1 events older than an hour were never fanned out"),
        "{out}"
    );

    // Fanned out to an enabled endpoint, then nobody sends it: out of its schedule.
    sql("INSERT INTO webhook_endpoints (id, url, secret, start_commit, start_seq)
         VALUES (gen_random_uuid(), 'https://shop.example/h', decode(repeat('ab', 32), 'hex'), 0, 0)")
        .await
        .expect("endpoint");
    origin::store::webhooks::dispatch(&pool, 100, Duration::ZERO)
        .await
        .expect("dispatch");
    sql("UPDATE webhook_deliveries SET next_at = now() - interval '20 minutes'")
        .await
        .expect("age");
    sqlx::query("DELETE FROM event_xacts")
        .execute(&pool)
        .await
        .expect("number it");
    let (code, out) = crate::helpers::reconcile(&pool).await;
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("is undelivered and out of its retry schedule"),
        "{out}"
    );
    assert!(out.contains("reconciliation: 1 discrepancies"), "{out}");
}
