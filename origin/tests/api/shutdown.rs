//! SIGTERM under load: the real `origin` binary stops accepting, finishes what it accepted, and
//! exits; every purchase that committed was answered 201 to its client.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use sqlx::PgPool;

use crate::helpers::{ADMIN_TOKEN, EDGE_SECRET, Purchase, wait_ready};

#[sqlx::test(migrations = "./migrations")]
async fn sigterm_under_load_loses_no_answer(pool: PgPool) {
    let (db, url) = crate::processes::database_of(&pool).await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("port")
        .local_addr()
        .expect("addr")
        .port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_origin"))
        .env("DATABASE_URL", url.clone())
        .env("REDIS_URLS", "redis://127.0.0.1:6379")
        .env("REDIS_KEY_PREFIX", format!("test:{db}"))
        .env("LISTEN_ADDR", format!("127.0.0.1:{port}"))
        .env("EDGE_SHARED_SECRET", EDGE_SECRET)
        .env("ADMIN_TOKEN", ADMIN_TOKEN)
        .env_remove("EDGE_SHARED_SECRETS")
        .env_remove("ADMIN_TOKENS")
        .env("RUN_MIGRATIONS", "false")
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start origin");
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::new();
    wait_ready(&client, &base).await;
    let res = client
        .put(format!("{base}/v1/admin/skus/TERM"))
        .bearer_auth(ADMIN_TOKEN)
        .body(r#"{"name":"t","price_cents":1,"stock":100000,"max_per_user":100000}"#)
        .send()
        .await
        .expect("put");
    assert_eq!(res.status(), 200);

    // 40 shoppers buying in a loop; SIGTERM lands in the middle.
    let client = Arc::new(client);
    let stop_at = Instant::now() + Duration::from_secs(5);
    let shoppers = (0..40).map(|s| {
        let client = client.clone();
        let base = base.clone();
        tokio::spawn(async move {
            let mut created = Vec::new();
            let mut other = 0;
            for i in 0.. {
                if Instant::now() > stop_at {
                    break;
                }
                let p = Purchase::new(&format!("s{s}"), &format!("k{s}-{i}"), "TERM", 1);
                let sent = client
                    .post(format!("{base}/v1/purchases"))
                    .header("flashgate-user", format!("s{s}"))
                    .header("idempotency-key", format!("k{s}-{i}"))
                    .header("flashgate-signature", p.header_value())
                    .body(p.body.clone())
                    .send()
                    .await;
                match sent {
                    Ok(res) if res.status() == 201 => {
                        let v: serde_json::Value = res.json().await.expect("201 body");
                        created.push(v["order_id"].as_str().expect("id").to_owned());
                    }
                    Ok(res) => {
                        assert!(res.status() != 500, "no 500 during shutdown");
                        other += 1;
                    }
                    Err(_) => break, // connection refused/closed: the server is gone
                }
            }
            (created, other)
        })
    });
    let shoppers: Vec<_> = shoppers.collect();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(term.success());
    let results = join_all(shoppers).await;
    let deadline = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "origin did not exit after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "clean exit: {status:?}");

    let answered: Vec<String> = results
        .into_iter()
        .flat_map(|r| r.expect("task").0)
        .collect();
    assert!(!answered.is_empty(), "load ran before the signal");
    let orders: Vec<String> = sqlx::query_scalar("SELECT order_id::text FROM orders")
        .fetch_all(&pool)
        .await
        .expect("orders");
    let mut a = answered.clone();
    let mut o = orders.clone();
    a.sort();
    o.sort();
    assert_eq!(
        a, o,
        "every committed order was answered 201, and nothing else committed"
    );
}
