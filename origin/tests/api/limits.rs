//! Hostile clients against the real server on port 0: slow heads (slowloris), slow bodies, idle
//! and silent connections beyond the connection cap (silent ones never push out used ones),
//! oversized heads and bodies, an admin PUT without its token. Each refusal
//! is a clear answer (or, for a client that never finishes its head, a closed connection), other
//! clients keep being served, and nothing is bought or stored.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use origin::metrics::{CloseLabels, Metrics};
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::helpers::{Purchase, TestApp, assert_problem, spawn_app_with};

fn addr(app: &TestApp) -> String {
    app.base.trim_start_matches("http://").to_owned()
}

/// A client that asked once (`GET /healthz`, answered 200) and keeps its connection.
async fn served_connection(app: &TestApp) -> TcpStream {
    let mut s = TcpStream::connect(addr(app)).await.expect("connect");
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    assert_eq!(read_status(&mut s).await, Some(200));
    s
}

fn closed(metrics: &Metrics, reason: &'static str) -> u64 {
    metrics
        .http_closed
        .get_or_create(&CloseLabels { reason })
        .get()
}

/// Reads one answer (head + `content-length` body) from `s` and returns its status; `None` if
/// the connection closes first.
async fn read_status(s: &mut TcpStream) -> Option<u16> {
    read_answer(s).await.map(|(status, _)| status)
}

/// Reads one answer (head + `content-length` body) from `s`: its status and body; `None` if the
/// connection closes first.
async fn read_answer(s: &mut TcpStream) -> Option<(u16, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            if buf.len() >= end + 4 + len {
                let status = head.get(9..12)?.parse().ok()?;
                let body = String::from_utf8_lossy(&buf[end + 4..end + 4 + len]).into_owned();
                return Some((status, body));
            }
        }
        match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Whether the server has closed `s` (EOF or reset) within `within`.
async fn closes_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(within, s.read(&mut byte)).await,
        Ok(Ok(0) | Err(_))
    )
}

/// GETs `/healthz` on a fresh connection every 100 ms until `stop`; returns (answered 200, other).
fn keep_asking(base: String, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<(u32, u32)> {
    tokio::spawn(async move {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(5))
            .build()
            .expect("client");
        let (mut ok, mut other) = (0, 0);
        while !stop.load(Ordering::Relaxed) {
            match client.get(format!("{base}/healthz")).send().await {
                Ok(r) if r.status() == 200 => ok += 1,
                _ => other += 1,
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (ok, other)
    })
}

/// Samples the open-connections gauge every 5 ms until [`PeakWatch::peak`].
struct PeakWatch {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<i64>,
}

impl PeakWatch {
    fn start(app: &TestApp) -> Self {
        let (metrics, stop) = (app.metrics.clone(), Arc::new(AtomicBool::new(false)));
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let max = AtomicI64::new(0);
                while !stop.load(Ordering::Relaxed) {
                    max.fetch_max(metrics.http_connections.get(), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                max.load(Ordering::Relaxed)
            }
        });
        Self { stop, task }
    }

    /// Stops sampling; the most connections seen open at once.
    async fn peak(self) -> i64 {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.expect("task")
    }
}

/// A new client's `GET /healthz` (waiting up to `timeout`): its status and how long it took.
async fn new_client_healthz(app: &TestApp, timeout: Duration) -> (u16, Duration) {
    let started = Instant::now();
    let res = reqwest::Client::new()
        .get(format!("{}/healthz", app.base))
        .timeout(timeout)
        .send()
        .await
        .expect("served");
    (res.status().as_u16(), started.elapsed())
}

async fn nothing_stored(app: &TestApp) {
    assert_eq!(app.order_count().await, 0, "no order");
    let records: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_records")
        .fetch_one(&app.pool)
        .await
        .expect("count");
    assert_eq!(records, 0, "no stored outcome");
}

#[sqlx::test(migrations = "./migrations")]
async fn a_slowloris_head_is_cut_off_while_other_clients_are_served(pool: PgPool) {
    let app = spawn_app_with(pool, &[("HTTP_HEADER_READ_TIMEOUT_MS", "1000")]).await;
    let stop = Arc::new(AtomicBool::new(false));
    let others = keep_asking(app.base.clone(), stop.clone());

    // One byte every 200 ms: the head never completes, and trickling does not extend the limit.
    let mut slow = TcpStream::connect(addr(&app)).await.expect("connect");
    let started = Instant::now();
    let mut silent = TcpStream::connect(addr(&app)).await.expect("connect");
    let head =
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut cut_after = None;
    for byte in head.iter() {
        if slow.write_all(&[*byte]).await.is_err() {
            cut_after = Some(started.elapsed());
            break;
        }
        if closes_within(&mut slow, Duration::from_millis(200)).await {
            cut_after = Some(started.elapsed());
            break;
        }
    }
    let cut_after = cut_after.expect("the slow head was cut off before it completed");
    eprintln!("limits: slowloris head cut off after {cut_after:.2?} (limit 1 s)");
    assert!(
        cut_after >= Duration::from_millis(900) && cut_after < Duration::from_millis(2500),
        "cut off after {cut_after:?}, the limit is 1 s"
    );
    // A connection that never sends anything is cut off the same way.
    assert!(
        closes_within(&mut silent, Duration::from_secs(2)).await,
        "silent connection closed"
    );
    stop.store(true, Ordering::Relaxed);
    let (ok, other) = others.await.expect("task");
    eprintln!("limits: meanwhile {ok} other requests answered 200, {other} not");
    assert!(ok >= 8, "other clients kept being served: {ok} answered");
    assert_eq!(other, 0, "no other client was refused");
    assert!(closed(&app.metrics, "header_timeout") >= 2);
}

#[sqlx::test(migrations = "./migrations")]
async fn a_slow_body_is_408_and_nothing_is_stored(pool: PgPool) {
    let app = spawn_app_with(
        pool,
        &[
            ("HTTP_BODY_READ_TIMEOUT_MS", "1000"),
            ("HTTP_REQUEST_TIMEOUT_MS", "5000"),
        ],
    )
    .await;
    assert_eq!(app.put_sku("SLOW", 5, 5).await.status(), 200);
    let p = Purchase::new("alice", "k-slow", "SLOW", 1);
    let head = format!(
        "POST /v1/purchases HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nFlashgate-User: alice\r\nIdempotency-Key: k-slow\r\nFlashgate-Signature: {}\r\n\r\n",
        p.body.len(),
        p.header_value()
    );
    let mut s = TcpStream::connect(addr(&app)).await.expect("connect");
    s.write_all(head.as_bytes()).await.expect("head");
    let started = Instant::now();
    let trickle = {
        let body = p.body.clone();
        let (mut rd, mut wr) = s.into_split();
        let writer = tokio::spawn(async move {
            for byte in body {
                if wr.write_all(&[byte]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(400)).await;
            }
        });
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), rd.read_to_end(&mut buf)).await;
        writer.abort();
        String::from_utf8_lossy(&buf).into_owned()
    };
    let elapsed = started.elapsed();
    eprintln!("limits: slow body answered 408 after {elapsed:.2?} (limit 1 s)");
    assert!(trickle.starts_with("HTTP/1.1 408"), "{trickle}");
    let lower = trickle.to_lowercase();
    assert!(
        lower.contains("content-type: application/problem+json"),
        "{trickle}"
    );
    assert!(lower.contains("connection: close"), "{trickle}");
    assert!(trickle.contains(r#""code":"request_timeout""#), "{trickle}");
    assert!(
        elapsed >= Duration::from_millis(900) && elapsed < Duration::from_secs(3),
        "answered after {elapsed:?}, the limit is 1 s"
    );
    nothing_stored(&app).await;
    assert_eq!(app.stock("SLOW").await, 5);
    // 408 is not stored: the same key, sent promptly, buys.
    assert_eq!(app.send(&p).await.status(), 201);
}

#[sqlx::test(migrations = "./migrations")]
async fn idle_keepalive_connections_make_room_at_the_cap(pool: PgPool) {
    let app = spawn_app_with(pool, &[("HTTP_MAX_CONNECTIONS", "4")]).await;
    let peak = PeakWatch::start(&app);
    // Four clients each ask once and keep their connection open, idle.
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(served_connection(&app).await);
        // Distinct idle-since milliseconds, so "longest idle" is well defined.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // A fifth client is served at once: the longest-idle connection is closed to make room.
    let (status, waited) = new_client_healthz(&app, Duration::from_secs(5)).await;
    assert_eq!(status, 200);
    eprintln!("limits: 4 idle connections at a cap of 4; a new client served in {waited:.1?}");
    assert!(waited < Duration::from_millis(800), "took {waited:?}");
    assert!(
        closes_within(&mut idle[0], Duration::from_secs(1)).await,
        "the longest-idle connection was closed"
    );
    assert!(closed(&app.metrics, "reclaimed") >= 1);
    let peak = peak.peak().await;
    assert!(peak <= 4, "at most 4 connections open at once, saw {peak}");
}

#[sqlx::test(migrations = "./migrations")]
async fn silent_connections_at_the_cap_make_room_oldest_first(pool: PgPool) {
    // The default header timeout (10 s): every close seen here is an eviction.
    let app = spawn_app_with(pool, &[("HTTP_MAX_CONNECTIONS", "4")]).await;
    let peak = PeakWatch::start(&app);
    // The test client keeps one connection, used and idle: one of the four slots.
    assert_eq!(app.get_sku("NONE").await.status(), 404);
    // Eight clients connect and say nothing: each one beyond the cap pushes out the oldest.
    let mut silent = Vec::new();
    for _ in 0..8 {
        silent.push(TcpStream::connect(addr(&app)).await.expect("connect"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(app.metrics.http_connections.get(), 4, "the cap holds");
    // A real client is served at once: the oldest silent connection makes room.
    let (status, waited) = new_client_healthz(&app, Duration::from_secs(10)).await;
    eprintln!("limits: 8 silent connections at a cap of 4; a new client served after {waited:.2?}");
    assert_eq!(status, 200);
    assert!(
        waited < Duration::from_secs(2),
        "waited {waited:?}: the header timeout is 10 s"
    );
    for (i, s) in silent.iter_mut().enumerate().take(6) {
        assert!(
            closes_within(s, Duration::from_secs(1)).await,
            "silent connection {i} (of the oldest six) evicted"
        );
    }
    for (i, s) in silent.iter_mut().enumerate().skip(6) {
        assert!(
            !closes_within(s, Duration::from_millis(100)).await,
            "silent connection {i} (of the newest two) still open"
        );
    }
    assert_eq!(closed(&app.metrics, "evicted"), 6);
    assert_eq!(closed(&app.metrics, "header_timeout"), 0);
    assert_eq!(
        closed(&app.metrics, "reclaimed"),
        0,
        "the used connection was kept"
    );
    assert_eq!(app.get_sku("NONE").await.status(), 404);
    let peak = peak.peak().await;
    assert!(peak <= 4, "at most 4 connections open at once, saw {peak}");
}

#[sqlx::test(migrations = "./migrations")]
async fn oversized_heads_are_431_and_change_nothing(pool: PgPool) {
    let app = spawn_app_with(pool, &[]).await;
    assert_eq!(app.put_sku("HEAD", 5, 5).await.status(), 200);
    let p = Purchase::new("alice", "k-head", "HEAD", 1);
    let purchase = |pad: Option<(usize, usize)>| {
        let mut req = app
            .client
            .post(format!("{}/v1/purchases", app.base))
            .header("flashgate-user", "alice")
            .header("idempotency-key", "k-head")
            .header("flashgate-signature", p.header_value())
            .body(p.body.clone());
        if let Some((fields, bytes)) = pad {
            for i in 0..fields {
                req = req.header(format!("x-pad-{i}"), "p".repeat(bytes));
            }
        }
        req
    };

    // Above HTTP_MAX_HEADER_BYTES (16 KiB) but within the parser's buffer: 431 problem+json.
    let res = purchase(Some((1, 20 * 1024))).send().await.expect("answer");
    assert_problem(res, 431, "headers_too_large").await;
    // A 64 KiB value: the parser itself refuses the head, 431 without a body.
    let res = purchase(Some((1, 64 * 1024))).send().await.expect("answer");
    assert_eq!(res.status(), 431);
    // 500 header fields: 431 from the parser too.
    let res = purchase(Some((500, 8))).send().await.expect("answer");
    assert_eq!(res.status(), 431);
    // Any route, e.g. a 20 KiB cookie on a SKU view.
    let res = app
        .client
        .get(format!("{}/v1/skus/HEAD", app.base))
        .header("cookie", "c".repeat(20 * 1024))
        .send()
        .await
        .expect("answer");
    assert_problem(res, 431, "headers_too_large").await;

    nothing_stored(&app).await;
    assert_eq!(app.stock("HEAD").await, 5);
    // Not stored: the same key with a normal head buys.
    assert_eq!(purchase(None).send().await.expect("answer").status(), 201);
}

#[sqlx::test(migrations = "./migrations")]
async fn a_huge_body_is_413_and_the_answer_reaches_the_client(pool: PgPool) {
    let app = spawn_app_with(pool, &[]).await;
    assert_eq!(app.put_sku("BODY", 5, 5).await.status(), 200);
    // 4 MiB, declared up front: refused before it is read, while the client is still sending;
    // the client gets the 413 (not a reset), and the connection is not reused.
    let huge = format!(
        r#"{{"sku":"BODY","qty":1,"pad":"{}"}}"#,
        "x".repeat(4 << 20)
    );
    let res = app
        .send(&Purchase::new("alice", "k-body", "BODY", 1).body(huge))
        .await;
    assert_problem(res, 413, "payload_too_large").await;
    nothing_stored(&app).await;
    assert_eq!(app.stock("BODY").await, 5);
}

#[sqlx::test(migrations = "./migrations")]
async fn silent_connections_at_the_cap_never_push_out_used_ones(pool: PgPool) {
    // The default header timeout (10 s): nothing here is cut off by it.
    let app = spawn_app_with(pool, &[("HTTP_MAX_CONNECTIONS", "8")]).await;
    let peak = PeakWatch::start(&app);
    // Two clients (like the edge's pooled connections) ask once and keep their connections.
    let mut used = Vec::new();
    for _ in 0..2 {
        used.push(served_connection(&app).await);
    }
    // A flood from one peer: 64 connections that send nothing, or one byte of a head.
    let mut flood = Vec::new();
    for i in 0..64 {
        let mut s = TcpStream::connect(addr(&app)).await.expect("connect");
        if i % 2 == 1 {
            s.write_all(b"G").await.expect("write");
        }
        flood.push(s);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The used connections are still open and are answered at once...
    for (i, s) in used.iter_mut().enumerate() {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        let status = tokio::time::timeout(Duration::from_secs(3), read_status(s)).await;
        assert_eq!(
            status,
            Ok(Some(200)),
            "used connection {i} was closed or not served during the flood"
        );
    }
    // ...and a new client is served at once: the oldest silent connection makes room.
    let (status, waited) = new_client_healthz(&app, Duration::from_secs(5)).await;
    assert_eq!(status, 200);
    eprintln!(
        "limits: 2 used + 64 silent connections at a cap of 8; a new client served in {waited:.1?}"
    );
    assert!(
        waited < Duration::from_secs(2),
        "waited {waited:?}: the header timeout is 10 s"
    );
    assert!(
        closes_within(&mut flood[0], Duration::from_secs(1)).await,
        "the oldest silent connection was closed"
    );
    assert!(closed(&app.metrics, "evicted") >= 57, "silent ones evicted");
    assert_eq!(closed(&app.metrics, "reclaimed"), 0, "no used one closed");
    let peak = peak.peak().await;
    assert!(peak <= 8, "at most 8 connections open at once, saw {peak}");
}

#[sqlx::test(migrations = "./migrations")]
async fn an_admin_put_without_the_token_is_401_before_its_body_arrives(pool: PgPool) {
    // The default body read timeout (10 s): reading the body first would answer 408 after it.
    let app = spawn_app_with(pool, &[]).await;
    for auth in ["", "Authorization: Bearer wrong-token-wrong-token\r\n"] {
        let mut s = TcpStream::connect(addr(&app)).await.expect("connect");
        let head = format!(
            "PUT /v1/admin/skus/NOBODY HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n{auth}\r\n"
        );
        s.write_all(head.as_bytes()).await.expect("head");
        // The body never comes.
        let started = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(15), read_answer(&mut s))
            .await
            .expect("answered within 15 s")
            .expect("an answer, not a closed connection");
        let waited = started.elapsed();
        eprintln!(
            "limits: admin PUT {:?} with a body that never arrives: {} after {waited:.2?}",
            auth.trim(),
            answer.0
        );
        assert_eq!(answer.0, 401, "{answer:?}");
        assert!(answer.1.contains(r#""code":"unauthorized""#), "{answer:?}");
        assert!(
            waited < Duration::from_secs(5),
            "answered after {waited:?}: the token is checked before the body is read"
        );
    }
    assert_eq!(app.get_sku("NOBODY").await.status(), 404, "nothing stored");
}
