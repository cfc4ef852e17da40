//! Webhook delivery with whole processes (issue 34): two `origin` binaries on one database share
//! the deliveries without sending any event twice; an origin SIGKILLed while its deliveries are
//! in flight spends no attempt, and once its claims lapse the restarted process (or the other
//! one) delivers every event — at least once, the same `webhook-id` each time.

#[path = "common/probes.rs"]
mod probes;
#[path = "common/processes.rs"]
mod processes;
#[path = "api/receiver.rs"]
mod receiver;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use processes::{ADMIN_TOKEN, EDGE_SECRET, OriginProcess, signed_purchase};
use receiver::{Receiver, Reply};
use serde_json::{Value, json};
use sqlx::PgPool;

const REDIS: &str = "redis://127.0.0.1:6379";

async fn origin(pool: &PgPool) -> OriginProcess {
    OriginProcess::start_on(
        pool,
        REDIS,
        &[
            ("WEBHOOK_TIMEOUT_MS", "1000"),
            ("WEBHOOK_RETRY_SCHEDULE", "0,200ms,500ms,1s"),
        ],
    )
    .await
}

async fn admin(
    client: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Value,
) -> Value {
    let res = client
        .request(method, url)
        .bearer_auth(ADMIN_TOKEN)
        .body(body.to_string())
        .send()
        .await
        .expect("admin request");
    assert!(res.status().is_success(), "{}", res.status());
    res.json().await.unwrap_or_default()
}

async fn sell(client: &reqwest::Client, base: &str, users: std::ops::Range<usize>) {
    for i in users {
        let res = signed_purchase(client, base, EDGE_SECRET, (&format!("u{i}"), "k", "P"))
            .send()
            .await
            .expect("purchase");
        assert_eq!(res.status(), 201);
    }
}

async fn events_committed(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM events")
        .fetch_one(pool)
        .await
        .expect("count")
}

#[sqlx::test(migrations = "./migrations")]
async fn two_origins_share_the_deliveries_and_send_each_event_once(pool: PgPool) {
    let (a, b) = (origin(&pool).await, origin(&pool).await);
    let client = reqwest::Client::new();
    let receiver = Receiver::start().await;
    receiver.always(Reply::Slow(Duration::from_millis(30)));
    let endpoint = admin(
        &client,
        reqwest::Method::POST,
        format!("{}/v1/admin/webhooks", a.base),
        json!({"url": receiver.url()}),
    )
    .await;
    let secret = endpoint["secret"].as_str().expect("secret").to_owned();
    admin(
        &client,
        reqwest::Method::PUT,
        format!("{}/v1/admin/skus/P", b.base),
        json!({"name": "x", "price_cents": 1, "stock": 100, "max_per_user": 5}),
    )
    .await;
    futures::future::join(
        sell(&client, &a.base, 0..20),
        sell(&client, &b.base, 20..40),
    )
    .await;
    let total = events_committed(&pool).await;
    assert_eq!(total, 40);
    let got = receiver
        .wait_for(Duration::from_secs(15), "every event", |r| {
            r.len() as i64 == total
        })
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let all = receiver.received();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for r in &all {
        assert!(r.verifies(&secret));
        *seen.entry(r.id()).or_default() += 1;
    }
    assert_eq!(seen.len() as i64, total);
    assert!(
        seen.values().all(|n| *n == 1),
        "no event sent twice: {seen:?}"
    );
    assert_eq!(got.len(), all.len());
    // Both processes' counters together: each delivery counted once.
    let mut delivered = 0.0;
    for o in [&a, &b] {
        let text = client
            .get(format!("{}/metrics", o.base))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        delivered += text
            .lines()
            .filter(|l| {
                l.starts_with("origin_webhook_deliveries_total{")
                    && l.contains("result=\"delivered\"")
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    assert_eq!(delivered, total as f64);
}

#[sqlx::test(migrations = "./migrations")]
async fn an_origin_killed_mid_delivery_spends_no_attempt_and_nothing_is_left_undelivered(
    pool: PgPool,
) {
    let mut a = origin(&pool).await;
    let client = reqwest::Client::new();
    let receiver = Receiver::start().await;
    // The first requests hang (the origin gives up after 1 s): the kill comes while they are
    // in flight.
    receiver.next(vec![Reply::Slow(Duration::from_secs(5)); 6]);
    let endpoint = admin(
        &client,
        reqwest::Method::POST,
        format!("{}/v1/admin/webhooks", a.base),
        json!({"url": receiver.url()}),
    )
    .await;
    let secret = endpoint["secret"].as_str().expect("secret").to_owned();
    admin(
        &client,
        reqwest::Method::PUT,
        format!("{}/v1/admin/skus/P", a.base),
        json!({"name": "x", "price_cents": 1, "stock": 100, "max_per_user": 5}),
    )
    .await;
    sell(&client, &a.base, 0..6).await;
    let start = Instant::now();
    while receiver.received().len() < 6 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "deliveries never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    a.signal("-KILL");
    let _ = a.child.wait();
    // Claimed, in flight when the process died: no attempt spent.
    let rows: Vec<(i32, bool)> =
        sqlx::query_as("SELECT attempts, claimed_until > now() FROM webhook_deliveries")
            .fetch_all(&pool)
            .await
            .expect("deliveries");
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert!(
        rows.iter()
            .all(|(attempts, claimed)| *attempts == 0 && *claimed),
        "{rows:?}"
    );

    // The process comes back (the claims lapse within 2 s) and delivers everything.
    let _b = origin(&pool).await;
    sell(&client, &_b.base, 6..8).await;
    let acked = receiver
        .wait_for(Duration::from_secs(15), "every event", |r| {
            r.iter()
                .filter(|x| x.status == 200)
                .map(|x| x.id())
                .collect::<std::collections::HashSet<_>>()
                .len()
                == 8
        })
        .await;
    assert!(acked.iter().all(|r| r.verifies(&secret)));
    let start = Instant::now();
    loop {
        let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM webhook_deliveries")
            .fetch_one(&pool)
            .await
            .expect("count");
        if left == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{left} deliveries left"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The hung ones were sent twice (same ids): at least once, deduplicated by the receiver.
    let resent = receiver.received().len() - 8;
    assert_eq!(resent, 6, "the six in flight at the kill were sent again");
}
