//! The transactional outbox and its feed (issue 34): every order transition — the purchase
//! batch, pay, cancel, refund (with and without restock), expiry, a late payment, the live-hold
//! payment batch — and every SKU crossing zero stock writes its event in its own commit, and none
//! survives a rollback; `GET /v1/events` pages them oldest first without ever skipping one that
//! commits late (the cursor trap, deterministic and under load); retention and
//! `410 cursor_expired`; `GET /v1/events/{id}`; the contract's 400s and 401s.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::PgPool;
use sqlx::postgres::PgConnection;

use crate::helpers::{
    ADMIN_TOKEN, Caller, TestApp, assert_problem, created, order_view, reconcile, spawn_app,
};
use crate::payments::{self, event};

impl TestApp {
    /// `GET <path>` with the admin token: (status, body).
    pub(crate) async fn admin_get(&self, path: &str) -> reqwest::Response {
        self.client
            .get(format!("{}{path}", self.base))
            .bearer_auth(ADMIN_TOKEN)
            .send()
            .await
            .expect("request")
    }

    /// One page of the feed (`query` is the query string), which must answer 200.
    pub(crate) async fn feed(&self, query: &str) -> Value {
        let res = self.admin_get(&format!("/v1/events?{query}")).await;
        let status = res.status();
        let body = res.text().await.expect("body");
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).expect("json")
    }

    /// Waits until every committed event is numbered (readable in the feed).
    pub(crate) async fn settled(&self) {
        let start = Instant::now();
        loop {
            let waiting: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM event_xacts)")
                .fetch_one(&self.pool)
                .await
                .expect("waiting");
            if !waiting {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "events not numbered"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Every event the feed shows once what committed is numbered, paging `limit` at a time.
    pub(crate) async fn all_events(&self, limit: u32) -> Vec<Value> {
        self.settled().await;
        let mut events = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let query = match &after {
                Some(a) => format!("after={a}&limit={limit}"),
                None => format!("limit={limit}"),
            };
            let page = self.feed(&query).await;
            events.extend(page["data"].as_array().expect("data").iter().cloned());
            after = Some(page["next"].as_str().expect("next").to_owned());
            if page["has_more"] != true {
                return events;
            }
        }
    }

    /// The feed's events of order `id`, in feed order.
    pub(crate) async fn order_events(&self, id: &str) -> Vec<Value> {
        self.all_events(1000)
            .await
            .into_iter()
            .filter(|e| e["data"]["order_id"] == id)
            .collect()
    }
}

/// A position as (xid, seq).
fn position(event: &Value) -> (u64, u64) {
    let p = event["position"].as_str().expect("position");
    let (x, s) = p.split_once('-').expect("xid-seq");
    (x.parse().expect("xid"), s.parse().expect("seq"))
}

/// Asserts the order's events are `types` in order, sequence 1.. without gaps, and the last
/// one's `data` is the order exactly as `GET /v1/orders/{id}` shows it now, plus `sequence`.
async fn assert_history(app: &TestApp, id: &str, types: &[&str]) {
    let events = app.order_events(id).await;
    let got: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().expect("type"))
        .collect();
    assert_eq!(got, types, "events of {id}");
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["data"]["sequence"], i + 1, "{e}");
        assert!(
            e["id"]
                .as_str()
                .is_some_and(|s| s.starts_with("evt_") && s.len() == 36),
            "{e}"
        );
        assert_eq!(e["timestamp"], e["data"]["updated_at"], "{e}");
        let keys: Vec<&str> = e
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys.len(), 5, "id, type, timestamp, position, data: {e}");
    }
    let last = events.last().expect("an event");
    let mut data = last["data"].clone();
    data.as_object_mut().expect("data").remove("sequence");
    let now = order_view(app.order(id, Caller::Shop).await).await;
    assert_eq!(
        data, now,
        "the last event's data is the order as GET shows it"
    );
    // And GET /v1/events/{id} shows the same event.
    let res = app
        .admin_get(&format!("/v1/events/{}", last["id"].as_str().expect("id")))
        .await;
    assert_eq!(res.status(), 200);
    assert_eq!(res.json::<Value>().await.expect("json"), *last);
}

fn sku_events(events: &[Value], sku: &str) -> Vec<(String, i64)> {
    events
        .iter()
        .filter(|e| {
            e["data"]["sku"] == sku && e["type"].as_str().is_some_and(|t| t.starts_with("sku."))
        })
        .map(|e| {
            (
                e["type"].as_str().expect("type").to_owned(),
                e["data"]["stock"].as_i64().expect("stock"),
            )
        })
        .collect()
}

async fn wait_status(app: &TestApp, id: &str, status: &str) {
    let start = Instant::now();
    while app.status_of(id).await != status {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{id} not {status}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[sqlx::test(migrations = "./migrations")]
async fn every_transition_writes_its_event_and_the_feed_shows_the_order_as_get_does(pool: PgPool) {
    let app = payments::spawn(pool.clone()).await;
    app.put_hold_sku("H", 3, 600).await;
    assert_eq!(app.put_sku("C", 2, 5).await.status(), 200);

    // The purchase batch: order.created (held), then pay, then refund with restock.
    let paid = app.hold("alice", "H").await;
    assert_history(&app, &paid, &["order.created"]).await;
    assert_eq!(app.order_events(&paid).await[0]["data"]["status"], "held");
    assert_eq!(
        app.order_action(&paid, "pay", "", Caller::Shop)
            .await
            .status(),
        200
    );
    assert_history(&app, &paid, &["order.created", "order.paid"]).await;
    let refund = app
        .order_action(&paid, "refund", r#"{"restock":true}"#, Caller::Shop)
        .await;
    assert_eq!(refund.status(), 200);
    assert_history(
        &app,
        &paid,
        &["order.created", "order.paid", "order.refunded"],
    )
    .await;

    // A hold cancelled by its shopper; a hold paid by the payment provider (the live-hold batch).
    let cancelled = app.hold("bob", "H").await;
    assert_eq!(
        app.order_action(&cancelled, "cancel", "", Caller::Shopper("bob"))
            .await
            .status(),
        200
    );
    assert_history(&app, &cancelled, &["order.created", "order.cancelled"]).await;
    let webhook = app.hold("carol", "H").await;
    let receipt = app
        .webhook(&event(
            "evt_pay_1",
            "payment_intent.succeeded",
            &webhook,
            json!({}),
        ))
        .await;
    assert_eq!(receipt["result"], "applied");
    assert_history(&app, &webhook, &["order.created", "order.paid"]).await;

    // Confirmed orders: refunded without restock; the last unit sells the SKU out, a
    // cancellation puts it back on sale.
    let c1 = created(app.buy("dave", "c1", "C", 1).await).await;
    let c1 = c1["order_id"].as_str().expect("id").to_owned();
    assert_eq!(
        app.order_events(&c1).await[0]["data"]["status"],
        "confirmed"
    );
    let c2 = created(app.buy("erin", "c2", "C", 1).await).await;
    let c2 = c2["order_id"].as_str().expect("id").to_owned();
    let res = app
        .order_action(&c1, "refund", r#"{"restock":false}"#, Caller::Shop)
        .await;
    assert_eq!(res.status(), 200);
    assert_history(&app, &c1, &["order.created", "order.refunded"]).await;
    assert_eq!(
        app.order_action(&c2, "cancel", "", Caller::Shop)
            .await
            .status(),
        200
    );
    assert_history(&app, &c2, &["order.created", "order.cancelled"]).await;
    let all = app.all_events(1000).await;
    assert_eq!(
        sku_events(&all, "C"),
        [
            ("sku.sold_out".to_owned(), 0),
            ("sku.back_on_sale".to_owned(), 1)
        ],
        "the batch that sold the last unit, then the cancellation"
    );

    // Expiry, then a late payment that takes the unit again.
    app.put_hold_sku("E", 1, 1).await;
    let late = app.hold("frank", "E").await;
    wait_status(&app, &late, "expired").await;
    assert_history(&app, &late, &["order.created", "order.expired"]).await;
    assert_eq!(
        app.order_action(&late, "pay", "", Caller::Shop)
            .await
            .status(),
        200
    );
    assert_history(
        &app,
        &late,
        &["order.created", "order.expired", "order.paid"],
    )
    .await;
    let all = app.all_events(1000).await;
    assert_eq!(
        sku_events(&all, "E"),
        [
            ("sku.sold_out".to_owned(), 0),
            ("sku.back_on_sale".to_owned(), 1),
            ("sku.sold_out".to_owned(), 0),
        ],
        "bought, expired, taken again by the late payment"
    );

    // A restock of a sold-out sale is back on sale; a repeat of an action writes nothing.
    assert_eq!(
        app.order_action(&webhook, "pay", "", Caller::Shop)
            .await
            .status(),
        200
    );
    assert_history(&app, &webhook, &["order.created", "order.paid"]).await;
    assert_eq!(app.put_sku("C", 0, 5).await.status(), 200);
    assert_eq!(app.put_sku("C", 4, 5).await.status(), 200);
    let all = app.all_events(1000).await;
    assert_eq!(
        sku_events(&all, "C")[2..],
        [
            ("sku.sold_out".to_owned(), 0),
            ("sku.back_on_sale".to_owned(), 4)
        ]
    );

    // Positions strictly increase; ids are unique; the feed and reconcile agree.
    let positions: Vec<(u64, u64)> = all.iter().map(position).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");
    let ids: HashSet<&str> = all.iter().map(|e| e["id"].as_str().expect("id")).collect();
    assert_eq!(ids.len(), all.len());
    let (code, out) = reconcile(&pool).await;
    assert_eq!((code, out.trim()), (0, "reconciliation: ok"));
}

#[sqlx::test(migrations = "./migrations")]
async fn a_late_payment_without_a_unit_is_refund_due_then_refunded_each_with_its_event(
    pool: PgPool,
) {
    let app = spawn_app(pool.clone()).await;
    app.put_sku_holds("L", 1, 5, 1).await;
    let res = created(app.buy("alice", "a", "L", 1).await).await;
    let id = res["order_id"].as_str().expect("id").to_owned();
    wait_status(&app, &id, "expired").await;
    // Someone else takes the returned unit first.
    created(app.buy("bob", "b", "L", 1).await).await;
    assert_eq!(
        app.order_action(&id, "pay", "", Caller::Shop)
            .await
            .status(),
        200
    );
    assert_eq!(app.status_of(&id).await, "refund_due");
    assert_history(
        &app,
        &id,
        &["order.created", "order.expired", "order.refund_due"],
    )
    .await;
    let res = app
        .order_action(&id, "refund", r#"{"restock":false}"#, Caller::Shop)
        .await;
    assert_eq!(res.status(), 200);
    assert_history(
        &app,
        &id,
        &[
            "order.created",
            "order.expired",
            "order.refund_due",
            "order.refunded",
        ],
    )
    .await;
}

/// Installs a trigger that makes the next matching statement fail after it wrote its rows.
async fn fail_on(pool: &PgPool, table: &str, when: &str) {
    sqlx::raw_sql(&format!(
        "CREATE OR REPLACE FUNCTION test_fail() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN RAISE EXCEPTION 'test failure'; END $$;
         CREATE TRIGGER test_fail AFTER INSERT OR UPDATE ON {table}
             FOR EACH ROW WHEN ({when}) EXECUTE FUNCTION test_fail();"
    ))
    .execute(pool)
    .await
    .expect("trigger");
}

async fn no_failure(pool: &PgPool, table: &str) {
    sqlx::raw_sql(&format!("DROP TRIGGER test_fail ON {table}"))
        .execute(pool)
        .await
        .expect("drop trigger");
}

#[sqlx::test(migrations = "./migrations")]
async fn no_event_survives_a_rollback_and_no_change_commits_without_its_event(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.put_sku_holds("R", 5, 5, 600).await;
    let id = created(app.buy("alice", "a", "R", 1).await).await["order_id"]
        .as_str()
        .expect("id")
        .to_owned();

    // The event's write fails: the cancellation rolls back whole — the order stays held, the
    // unit stays taken, no event.
    fail_on(&pool, "events", "NEW.type = 'order.cancelled'").await;
    let res = app.order_action(&id, "cancel", "", Caller::Shop).await;
    assert!(res.status().is_server_error(), "{}", res.status());
    assert_eq!(app.status_of(&id).await, "held");
    assert_eq!(app.stock("R").await, 4);
    no_failure(&pool, "events").await;

    // The order's write fails after the event was written in the same statement: no event.
    fail_on(&pool, "orders", "NEW.status = 'paid'").await;
    let res = app.order_action(&id, "pay", "", Caller::Shop).await;
    assert!(res.status().is_server_error(), "{}", res.status());
    no_failure(&pool, "orders").await;
    assert_eq!(app.status_of(&id).await, "held");

    // A purchase batch whose stored answers cannot be written: no order, no event.
    fail_on(&pool, "idempotency_records", "NEW.user_id = 'bob'").await;
    let res = app.buy("bob", "b", "R", 1).await;
    assert!(res.status().is_server_error(), "{}", res.status());
    no_failure(&pool, "idempotency_records").await;

    let events = app.all_events(100).await;
    let types: Vec<&str> = events
        .iter()
        .map(|e| e["type"].as_str().expect("type"))
        .collect();
    assert_eq!(
        types,
        ["order.created"],
        "only alice's purchase committed: {events:?}"
    );
    let (orders, stored): (i64, i64) =
        sqlx::query_as("SELECT (SELECT COUNT(*) FROM orders), (SELECT COUNT(*) FROM events)")
            .fetch_one(&pool)
            .await
            .expect("counts");
    assert_eq!((orders, stored), (1, 1));
    // Now it goes through, with its event.
    assert_eq!(
        app.order_action(&id, "cancel", "", Caller::Shop)
            .await
            .status(),
        200
    );
    assert_history(&app, &id, &["order.created", "order.cancelled"]).await;
}

/// Writes a SKU event numbered `seq` in `conn`'s open transaction, as the store's statements
/// do (the number is given explicitly to set the trap deterministically).
async fn write_event(conn: &mut PgConnection, sku: &str, seq: i64) {
    sqlx::query(
        "INSERT INTO events (seq, id, type, at, sku, stock)
         VALUES ($2, gen_random_uuid(), 'sku.sold_out', now(), $1, 0)",
    )
    .bind(sku)
    .bind(seq)
    .execute(&mut *conn)
    .await
    .expect("event");
}

#[sqlx::test(migrations = "./migrations")]
async fn the_feed_never_skips_an_event_that_commits_after_a_later_numbered_one(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    // LATE takes the smaller sequence number and stays open; EARLY takes a larger one and
    // commits first.
    let mut late = pool.begin().await.expect("begin");
    write_event(&mut late, "LATE", 1_000_001).await;
    let mut early = pool.begin().await.expect("begin");
    write_event(&mut early, "EARLY", 1_000_002).await;
    early.commit().await.expect("commit");

    app.settled().await;
    let page = app.feed("").await;
    let data = page["data"].as_array().expect("data");
    assert_eq!(data.len(), 1, "{page}");
    assert_eq!(data[0]["data"]["sku"], "EARLY");
    let next = page["next"].as_str().expect("next").to_owned();
    assert_eq!(data[0]["position"], next);

    late.commit().await.expect("commit");
    // What a cursor over the sequence alone would read now: nothing — it passed LATE's number.
    let naive: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events WHERE seq > 1000002")
        .fetch_one(&pool)
        .await
        .expect("naive");
    assert_eq!(naive, 0, "a sequence cursor after EARLY never sees LATE");

    // The feed's cursor does: LATE's commit number is larger than EARLY's.
    app.settled().await;
    let page = app.feed(&format!("after={next}")).await;
    let data = page["data"].as_array().expect("data");
    assert_eq!(data.len(), 1, "{page}");
    assert_eq!(data[0]["data"]["sku"], "LATE");
    assert!(position(&data[0]) > position(&json!({"position": next})));
}

#[sqlx::test(migrations = "./migrations")]
async fn the_feed_paged_while_batches_commit_misses_nothing_and_repeats_nothing(pool: PgPool) {
    let app = std::sync::Arc::new(spawn_app(pool.clone()).await);
    let skus = ["P1", "P2", "P3"];
    for sku in skus {
        assert_eq!(app.put_sku(sku, 10_000, 10_000).await.status(), 200);
    }
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A consumer paging with small pages as fast as it can while purchases commit.
    let reader = {
        let (base, client, done) = (app.base.clone(), app.client.clone(), done.clone());
        tokio::spawn(async move {
            let mut seen: Vec<Value> = Vec::new();
            let mut after = String::new();
            loop {
                let finished = done.load(std::sync::atomic::Ordering::SeqCst);
                let url = match after.as_str() {
                    "" => format!("{base}/v1/events?limit=7"),
                    a => format!("{base}/v1/events?limit=7&after={a}"),
                };
                let page: Value = client
                    .get(url)
                    .bearer_auth(ADMIN_TOKEN)
                    .send()
                    .await
                    .expect("page")
                    .json()
                    .await
                    .expect("json");
                seen.extend(page["data"].as_array().expect("data").iter().cloned());
                after = page["next"].as_str().expect("next").to_owned();
                if finished && page["has_more"] == false {
                    return seen;
                }
            }
        })
    };
    let buyers: Vec<_> = (0..24)
        .map(|w| {
            let app = app.clone();
            let sku = skus[w % skus.len()];
            tokio::spawn(async move {
                for i in 0..25 {
                    let res = app
                        .buy(&format!("u{w}"), &format!("k{w}-{i}"), sku, 1)
                        .await;
                    assert_eq!(res.status(), 201);
                }
            })
        })
        .collect();
    crate::helpers::joined(buyers).await;
    app.settled().await;
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let seen = reader.await.expect("reader");
    let ids: Vec<&str> = seen.iter().map(|e| e["id"].as_str().expect("id")).collect();
    let unique: HashSet<&str> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "no event twice");
    app.settled().await;
    let stored: Vec<String> =
        sqlx::query_scalar("SELECT 'evt_' || replace(id::text, '-', '') FROM events")
            .fetch_all(&pool)
            .await
            .expect("ids");
    assert_eq!(stored.len(), 24 * 25);
    let stored: HashSet<&str> = stored.iter().map(String::as_str).collect();
    assert_eq!(unique, stored, "every committed event was read");
    let positions: Vec<(u64, u64)> = seen.iter().map(position).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "oldest first");
    // Per order, per SKU: the feed's order is the commit order of each SKU's batches.
    let mut per_sku: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for e in &seen {
        per_sku
            .entry(e["data"]["sku"].as_str().expect("sku").to_owned())
            .or_default()
            .push(1);
    }
    assert_eq!(per_sku.values().map(Vec::len).sum::<usize>(), 600);
}

#[sqlx::test(migrations = "./migrations")]
async fn pages_filters_and_single_events_follow_the_contract(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    assert_eq!(app.put_sku("F", 3, 5).await.status(), 200);
    let mut orders = Vec::new();
    for u in ["a", "b", "c"] {
        let body = created(app.buy(u, "k", "F", 1).await).await;
        orders.push(body["order_id"].as_str().expect("id").to_owned());
    }
    assert_eq!(
        app.order_action(&orders[0], "cancel", "", Caller::Shop)
            .await
            .status(),
        200
    );
    // created ×3, sold_out, cancelled, back_on_sale.
    let all = app.all_events(1000).await;
    assert_eq!(all.len(), 6, "{all:?}");

    let first = app.feed("limit=2").await;
    assert_eq!(first["data"].as_array().expect("data").len(), 2);
    assert_eq!(first["has_more"], true);
    assert_eq!(first["next"], first["data"][1]["position"]);
    let rest = app
        .feed(&format!(
            "after={}&limit=1000",
            first["next"].as_str().expect("next")
        ))
        .await;
    assert_eq!(rest["data"].as_array().expect("data").len(), 4);
    assert_eq!(rest["has_more"], false);
    assert_eq!(rest["next"], all[5]["position"]);

    // A filter: only those types; when nothing more of them is left, `next` moves to the newest
    // event anyway (the cursor of a filtered consumer does not age out).
    let sold = app.feed("type=sku.sold_out&type=order.cancelled").await;
    let types: Vec<&str> = sold["data"]
        .as_array()
        .expect("data")
        .iter()
        .map(|e| e["type"].as_str().expect("t"))
        .collect();
    assert_eq!(types, ["sku.sold_out", "order.cancelled"]);
    assert_eq!(sold["next"], all[5]["position"]);
    let empty = app
        .feed(&format!(
            "after={}",
            all[5]["position"].as_str().expect("p")
        ))
        .await;
    assert_eq!(empty["data"], json!([]));
    assert_eq!(
        (empty["next"].clone(), empty["has_more"].clone()),
        (all[5]["position"].clone(), json!(false))
    );

    // Bad input: 400 invalid_request; no token: 401; an unknown event: 404.
    for query in [
        "after=1",
        "after=x-1",
        "limit=0",
        "limit=1001",
        "type=order.shipped",
        "page=2",
    ] {
        let res = app.admin_get(&format!("/v1/events?{query}")).await;
        assert_problem(res, 400, "invalid_request").await;
    }
    let res = app
        .client
        .get(format!("{}/v1/events", app.base))
        .send()
        .await
        .expect("req");
    assert_problem(res, 401, "unauthorized").await;
    let res = app
        .client
        .get(format!(
            "{}/v1/events/{}",
            app.base,
            all[0]["id"].as_str().expect("id")
        ))
        .bearer_auth("not-the-token-0123456789")
        .send()
        .await
        .expect("req");
    assert_problem(res, 401, "unauthorized").await;
    assert_problem(
        app.admin_get("/v1/events/evt_nope").await,
        400,
        "invalid_request",
    )
    .await;
    let unknown = format!("/v1/events/evt_{}", uuid::Uuid::now_v7().simple());
    assert_problem(app.admin_get(&unknown).await, 404, "event_not_found").await;
}

#[sqlx::test(migrations = "./migrations")]
async fn purged_events_expire_older_cursors_with_410_and_the_feed_restarts_at_the_oldest_kept(
    pool: PgPool,
) {
    let app = spawn_app(pool.clone()).await;
    assert_eq!(app.put_sku("OLD", 10, 10).await.status(), 200);
    for i in 0..4 {
        created(app.buy("a", &format!("k{i}"), "OLD", 1).await).await;
    }
    let all = app.all_events(100).await;
    assert_eq!(all.len(), 4);
    // The first three are older than the retention.
    let old: Vec<String> = all[..3]
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_owned())
        .collect();
    sqlx::query("UPDATE events SET at = now() - interval '31 days' WHERE 'evt_' || replace(id::text, '-', '') = ANY($1)")
        .bind(&old)
        .execute(&pool)
        .await
        .expect("age");
    // (Their orders made then, too: what the retention purges is that old.)
    sqlx::query("UPDATE orders o SET created_at = e.at, updated_at = e.at FROM events e WHERE e.order_id = o.order_id AND e.at < now() - interval '30 days'")
        .execute(&pool)
        .await
        .expect("age orders");
    let purged =
        origin::store::events::purge(&pool, chrono::Utc::now() - chrono::Duration::days(30))
            .await
            .expect("purge");
    assert_eq!(purged, 3);

    // A cursor below what was purged: 410. The last purged position itself, or none: the rest.
    let res = app
        .admin_get(&format!(
            "/v1/events?after={}",
            all[0]["position"].as_str().expect("p")
        ))
        .await;
    let problem = assert_problem(res, 410, "cursor_expired").await;
    assert!(
        problem["detail"]
            .as_str()
            .expect("detail")
            .contains("purged"),
        "{problem}"
    );
    let from_start = app.feed("").await;
    assert_eq!(from_start["data"].as_array().expect("data").len(), 1);
    assert_eq!(from_start["data"][0]["id"], all[3]["id"]);
    let from_last_purged = app
        .feed(&format!(
            "after={}",
            all[2]["position"].as_str().expect("p")
        ))
        .await;
    assert_eq!(from_last_purged["data"][0]["id"], all[3]["id"]);
    let res = app
        .admin_get(&format!(
            "/v1/events/{}",
            all[0]["id"].as_str().expect("id")
        ))
        .await;
    assert_problem(res, 404, "event_not_found").await;
    // Reconcile knows the first events of these orders were purged, not lost.
    let (code, out) = reconcile(&pool).await;
    assert_eq!((code, out.trim()), (0, "reconciliation: ok"));
}

#[sqlx::test(migrations = "./migrations")]
async fn reconcile_reports_an_order_whose_events_do_not_tell_its_story(pool: PgPool) {
    let app = spawn_app(pool.clone()).await;
    app.put_sku_holds("STORY", 5, 5, 600).await;
    let mut ids = Vec::new();
    for u in ["a", "b", "c"] {
        let body = created(app.buy(u, "k", "STORY", 1).await).await;
        ids.push(body["order_id"].as_str().expect("id").to_owned());
    }
    assert_eq!(
        app.order_action(&ids[0], "pay", "", Caller::Shop)
            .await
            .status(),
        200
    );
    app.settled().await;
    let (code, out) = reconcile(&pool).await;
    assert_eq!((code, out.trim()), (0, "reconciliation: ok"));

    // A lost first event (a gap the retention did not make), a change without its event, and
    // an event without its change.
    sqlx::query("DELETE FROM events WHERE order_id = $1::uuid AND sequence = 1")
        .bind(&ids[0])
        .execute(&pool)
        .await
        .expect("lose an event");
    sqlx::query("UPDATE orders SET status = 'confirmed' WHERE order_id = $1::uuid")
        .bind(&ids[1])
        .execute(&pool)
        .await
        .expect("silent change");
    sqlx::query(
        "INSERT INTO events (id, type, at, order_id, sequence, status)
         VALUES (gen_random_uuid(), 'order.paid', now(), $1::uuid, 2, 'paid')",
    )
    .bind(&ids[2])
    .execute(&pool)
    .await
    .expect("phantom event");
    app.settled().await;
    let (code, out) = reconcile(&pool).await;
    assert_eq!(code, 1, "{out}");
    for expected in [
        format!(
            "order {} is paid after 2 events, but its events kept (1, sequence 2 to 2) end with sequence 2 (paid)",
            ids[0]
        ),
        format!(
            "order {} is confirmed after 1 events, but its events kept (1, sequence 1 to 1) end with sequence 1 (held)",
            ids[1]
        ),
        format!(
            "order {} is held after 1 events, but its events kept (2, sequence 1 to 2) end with sequence 2 (paid)",
            ids[2]
        ),
    ] {
        assert!(out.contains(&expected), "{expected}\n{out}");
    }
    assert!(out.contains("reconciliation: 3 discrepancies"), "{out}");
}
