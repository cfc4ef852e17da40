//! The Redis event stream (issue 34): every event of the feed appended once, in position order,
//! its position as the entry ID and its JSON as the feed's; a stream Redis that dies (and comes
//! back empty) is filled again, two origins appending add nothing twice, Redis itself refuses a
//! repeated ID, and the stream is trimmed to the feed's retention — against a real
//! `redis-server` started for the test.

use std::time::{Duration, Instant};

use serde_json::Value;
use sqlx::PgPool;

use crate::helpers::{Caller, TestApp, created, spawn_app_with};
use crate::redis_nodes::RedisNodes;

const KEY: &str = "shop:events";

async fn stream_app(pool: PgPool, nodes: &RedisNodes) -> TestApp {
    spawn_app_with(
        pool,
        &[
            ("EVENTS_STREAM_URL", &nodes.url(0)),
            ("EVENTS_STREAM_KEY", KEY),
        ],
    )
    .await
}

/// Every entry of the stream: (entry ID, fields).
async fn entries(nodes: &RedisNodes) -> Vec<(String, Vec<(String, String)>)> {
    let client = redis::Client::open(nodes.url(0)).expect("client");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    redis::cmd("XRANGE")
        .arg(KEY)
        .arg("-")
        .arg("+")
        .query_async(&mut c)
        .await
        .expect("xrange")
}

/// Waits until the stream holds as many entries as the feed has events; returns both.
async fn caught_up(
    app: &TestApp,
    nodes: &RedisNodes,
) -> (Vec<Value>, Vec<(String, Vec<(String, String)>)>) {
    let feed = app.all_events(1000).await;
    let start = Instant::now();
    loop {
        let stream = entries(nodes).await;
        if stream.len() >= feed.len() {
            return (feed, stream);
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the stream has {} of {} events",
            stream.len(),
            feed.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The stream is exactly the feed: each event once, in order, ID = position, same JSON.
fn assert_same(feed: &[Value], stream: &[(String, Vec<(String, String)>)]) {
    assert_eq!(stream.len(), feed.len(), "each event once");
    for (event, (id, fields)) in feed.iter().zip(stream) {
        assert_eq!(event["position"], id.as_str());
        let field = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("field {name} of {id}"))
        };
        assert_eq!(event["id"], field("id").as_str());
        assert_eq!(event["type"], field("type").as_str());
        let body: Value = serde_json::from_str(&field("event")).expect("event json");
        assert_eq!(&body, event);
    }
}

async fn sell(app: &TestApp, sku: &str, users: std::ops::Range<usize>) -> Vec<String> {
    let mut ids = Vec::new();
    for i in users {
        let body = created(app.buy(&format!("u{i}"), &format!("k{i}"), sku, 1).await).await;
        ids.push(body["order_id"].as_str().expect("id").to_owned());
    }
    ids
}

#[sqlx::test(migrations = "./migrations")]
async fn the_stream_has_every_event_once_and_is_filled_again_after_its_redis_died(pool: PgPool) {
    let mut nodes = RedisNodes::start(1).await;
    let app = stream_app(pool.clone(), &nodes).await;
    app.put_sku_holds("S", 40, 100, 600).await;
    let ids = sell(&app, "S", 0..20).await;
    for id in &ids[..10] {
        assert_eq!(
            app.order_action(id, "pay", "", Caller::Shop).await.status(),
            200
        );
    }
    assert_eq!(
        app.order_action(&ids[10], "cancel", "", Caller::Shop)
            .await
            .status(),
        200
    );
    let (feed, stream) = caught_up(&app, &nodes).await;
    assert_eq!(feed.len(), 31);
    assert_same(&feed, &stream);

    // Redis itself refuses an entry ID it has already: what makes a repeated append harmless.
    let client = redis::Client::open(nodes.url(0)).expect("client");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let again: redis::RedisResult<String> = redis::cmd("XADD")
        .arg(KEY)
        .arg(&stream[5].0)
        .arg("id")
        .arg("x")
        .query_async(&mut c)
        .await;
    let refusal = again.expect_err("a repeated ID is refused").to_string();
    assert!(refusal.contains("equal or smaller"), "{refusal}");

    // The stream's Redis dies (no persistence: it comes back empty) while the sale goes on:
    // the events wait in Postgres, and the whole feed is appended again, once.
    nodes.kill(0);
    sell(&app, "S", 20..30).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    nodes.restart(0).await;
    let (feed, stream) = caught_up(&app, &nodes).await;
    assert_eq!(feed.len(), 41);
    assert_same(&feed, &stream);
}

#[sqlx::test(migrations = "./migrations")]
async fn two_origins_append_each_event_once_and_the_stream_follows_the_retention(pool: PgPool) {
    let nodes = RedisNodes::start(1).await;
    let a = stream_app(pool.clone(), &nodes).await;
    let b = stream_app(pool.clone(), &nodes).await;
    a.put_sku("T", 100, 100).await;
    let sales = futures::future::join(sell(&a, "T", 0..15), sell(&b, "T", 15..30)).await;
    assert_eq!(sales.0.len() + sales.1.len(), 30);
    let (feed, stream) = caught_up(&a, &nodes).await;
    assert_same(&feed, &stream);

    // The retention purges the first ten events: the stream drops them too.
    let old: Vec<String> = feed[..10]
        .iter()
        .map(|e| e["id"].as_str().expect("id").to_owned())
        .collect();
    sqlx::query("UPDATE events SET at = now() - interval '31 days' WHERE 'evt_' || replace(id::text, '-', '') = ANY($1)")
        .bind(&old)
        .execute(&pool)
        .await
        .expect("age");
    let purged =
        origin::store::events::purge(&pool, chrono::Utc::now() - chrono::Duration::days(30))
            .await
            .expect("purge");
    assert_eq!(purged, 10);
    let start = Instant::now();
    loop {
        let stream = entries(&nodes).await;
        if stream.len() == 20 {
            assert_eq!(
                stream[0].0,
                feed[10]["position"].as_str().expect("position")
            );
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "not trimmed: {}",
            stream.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
