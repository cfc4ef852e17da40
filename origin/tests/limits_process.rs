//! Resource bounds of the real `origin` binary, measured from outside: resident memory (VmRSS
//! in `/proc/<pid>/status`), open file descriptors (`/proc/<pid>/fd`) and the sizes of its
//! in-memory tables (`/metrics`), under 10,000 distinct SKUs, users and idempotency keys, and
//! under a thousand connections beyond the connection cap. And what hostile floods cannot take
//! from a running sale: 4,096 silent sockets (its connections), hundreds of concurrent public
//! reads (its database connections).
//!
//! Invariants checked after the sale phases: no oversell, every 201 has exactly one order row,
//! no user above the cap, stock + sold == initial.

#[path = "common/probes.rs"]
mod probes;
#[path = "common/processes.rs"]
mod processes;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use processes::{EDGE_SECRET, OriginProcess, http_client, put_sku, signed_purchase};
use sqlx::PgPool;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MIB: u64 = 1024 * 1024;
/// Concurrent requests of the load phases.
const PARALLEL: usize = 32;
/// Requests per phase.
const N: usize = 10_000;
/// 503s answered and retried (a Redis vote slower than its 40 ms timeout on a busy machine).
static RETRIED_503: AtomicU64 = AtomicU64::new(0);

fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .expect("VmRSS")
        * 1024
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("proc fd")
        .count()
}

/// The value of an unlabelled metric on `/metrics`.
async fn metric(client: &reqwest::Client, base: &str, name: &str) -> f64 {
    let text = probes::scrape_metrics(client, base).await;
    probes::metric_value(&text, name).unwrap_or_else(|| panic!("{name} not exported"))
}

/// One signed purchase of one unit, retried with the same key after a 503 (as the edge and any
/// client may: 503 is never stored): (final status, code or order id, 503s retried).
async fn buy(
    client: &reqwest::Client,
    base: &str,
    user: &str,
    key: &str,
    sku: &str,
) -> (u16, String, u32) {
    let mut retried = 0;
    loop {
        let res = signed_purchase(client, base, EDGE_SECRET, (user, key, sku))
            .send()
            .await
            .expect("no transport error");
        let status = res.status().as_u16();
        if status == 503 && retried < 10 {
            assert!(
                res.headers().contains_key("retry-after"),
                "503 carries Retry-After"
            );
            retried += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        let v: serde_json::Value = res.json().await.expect("json answer");
        let what = if status == 201 {
            v["order_id"].as_str().expect("order id").to_owned()
        } else {
            v["code"].as_str().expect("problem code").to_owned()
        };
        return (status, what, retried);
    }
}

/// Runs `n` purchases `(user, key, sku)` made by `make`, PARALLEL at a time; returns the final
/// answers counted by "status code" and the order ids of the 201s. 503s retried along the way
/// are added to `RETRIED_503`.
async fn run_phase(
    client: &reqwest::Client,
    base: &str,
    n: usize,
    make: impl Fn(usize) -> (String, String, String),
) -> (BTreeMap<String, usize>, Vec<String>) {
    let answers: Vec<(u16, String, u32)> = futures::stream::iter((0..n).map(make))
        .map(|(user, key, sku)| async move { buy(client, base, &user, &key, &sku).await })
        .buffer_unordered(PARALLEL)
        .collect()
        .await;
    let mut counts = BTreeMap::new();
    let mut orders = Vec::new();
    for (status, what, retried) in answers {
        RETRIED_503.fetch_add(u64::from(retried), Ordering::Relaxed);
        if status == 201 {
            orders.push(what);
            *counts.entry("201".to_owned()).or_insert(0) += 1;
        } else {
            *counts.entry(format!("{status} {what}")).or_insert(0) += 1;
        }
    }
    (counts, orders)
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
}

#[sqlx::test(migrations = "./migrations")]
async fn ten_thousand_distinct_skus_users_and_keys_keep_memory_bounded(pool: PgPool) {
    let origin = OriginProcess::start_on(&pool, "redis://127.0.0.1:6379", &[]).await;
    let pid = origin.child.id();
    let base = origin.base.clone();
    let client = http_client(PARALLEL, Duration::from_secs(30));

    // Warm up (allocator arenas, the database pool, Redis connections), then wait for the
    // warm-up's combiners to retire, and take the baseline.
    let (warm, _) = run_phase(&client, &base, 1000, |i| {
        (format!("warm{i}"), format!("w{i}"), format!("WARM-{i}"))
    })
    .await;
    assert_eq!(warm, counts(&[("404 unknown_sku", 1000)]));
    wait_for_tables_to_drain(&client, &base).await;
    let (rss0, fds0) = (rss_bytes(pid), open_fds(pid));

    // A: 10,000 purchases of 10,000 distinct unknown SKUs by 10,000 distinct users.
    let started = Instant::now();
    let (a, _) = run_phase(&client, &base, N, |i| {
        (format!("user{i}"), format!("a{i}"), format!("NOPE-{i}"))
    })
    .await;
    assert_eq!(
        a,
        counts(&[("404 unknown_sku", N)]),
        "every answer a clear 404"
    );
    let combiners_after_a = metric(&client, &base, "origin_combiners").await;
    let rss_a = rss_bytes(pid);
    // A combiner whose SKU does not exist exits once answered: at most those still deciding.
    assert!(
        combiners_after_a <= (2 * PARALLEL) as f64,
        "{combiners_after_a} combiners alive after 10,000 unknown SKUs"
    );

    // B: a SKU sells out, then one user hammers it with 10,000 distinct keys.
    put_sku(&client, &base, "GONE", 50, 1000).await;
    let (b1, gone_orders) = run_phase(&client, &base, 50, |i| {
        (format!("early{i}"), format!("g{i}"), "GONE".into())
    })
    .await;
    assert_eq!(b1, counts(&[("201", 50)]));
    let (b, _) = run_phase(&client, &base, N, |i| {
        ("hammer".into(), format!("h{i}"), "GONE".into())
    })
    .await;
    assert_eq!(
        b,
        counts(&[("409 sold_out", N)]),
        "every answer a clear 409"
    );
    let rss_b = rss_bytes(pid);

    // C: 10,000 distinct users, one unit each, for 5,000 units with a cap of 1.
    put_sku(&client, &base, "WIDE", 5000, 1).await;
    let (c, wide_orders) = run_phase(&client, &base, N, |i| {
        (format!("user{i}"), format!("c{i}"), "WIDE".into())
    })
    .await;
    assert_eq!(c, counts(&[("201", 5000), ("409 sold_out", 5000)]));
    let load_time = started.elapsed();
    let rss_c = rss_bytes(pid);

    // The in-memory tables drain: idle combiners retire, nothing stays in flight.
    let drained_in = wait_for_tables_to_drain(&client, &base).await;
    let (rss1, fds1) = (rss_bytes(pid), open_fds(pid));
    eprintln!(
        "limits_process: {} requests in {load_time:.1?}; RSS baseline {:.1} MiB, after A {:.1}, \
         after B {:.1}, after C {:.1}, end {:.1} MiB; fds {fds0} -> {fds1}; combiners after A \
         {combiners_after_a}, tables drained {drained_in:.1?} after the load; {} 503s retried",
        3 * N + 50,
        rss0 as f64 / MIB as f64,
        rss_a as f64 / MIB as f64,
        rss_b as f64 / MIB as f64,
        rss_c as f64 / MIB as f64,
        rss1 as f64 / MIB as f64,
        RETRIED_503.load(Ordering::Relaxed),
    );
    let peak = rss_a.max(rss_b).max(rss_c).max(rss1);
    assert!(
        peak < rss0 + 64 * MIB,
        "RSS grew from {rss0} to {peak} bytes (bound: +64 MiB)"
    );
    assert!(
        fds1 <= fds0 + 8,
        "open file descriptors grew from {fds0} to {fds1}"
    );

    // The books.
    let mut all = gone_orders.clone();
    all.extend(wide_orders.iter().cloned());
    check_books(&pool, &all, &[("GONE", 50, 1000), ("WIDE", 5000, 1)]).await;
}

/// Waits until `/metrics` shows no combiner and no attempt in flight; returns how long it took.
async fn wait_for_tables_to_drain(client: &reqwest::Client, base: &str) -> Duration {
    let start = Instant::now();
    loop {
        let combiners = metric(client, base, "origin_combiners").await;
        let in_flight = metric(client, base, "origin_purchases_in_flight").await;
        if combiners == 0.0 && in_flight == 0.0 {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "still {combiners} combiners and {in_flight} attempts in flight after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// No oversell, stock + sold == initial, no user above the cap, every 201 has exactly one order
/// row and every order was answered 201.
async fn check_books(pool: &PgPool, order_ids: &[String], skus: &[(&str, i64, i64)]) {
    let distinct: HashSet<&String> = order_ids.iter().collect();
    assert_eq!(
        distinct.len(),
        order_ids.len(),
        "no order id answered twice"
    );
    let found: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM orders WHERE order_id::text = ANY($1)")
            .bind(order_ids)
            .fetch_one(pool)
            .await
            .expect("count");
    let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders")
        .fetch_one(pool)
        .await
        .expect("count");
    assert_eq!(
        found as usize,
        order_ids.len(),
        "every 201 has its order row"
    );
    assert_eq!(total, found, "every order was answered 201");
    for (sku, initial, cap) in skus {
        let (stock, sold): (i64, i64) = sqlx::query_as(
            "SELECT s.stock, COALESCE((SELECT SUM(qty) FROM orders o WHERE o.sku = s.sku), 0)::BIGINT FROM skus s WHERE s.sku = $1",
        )
        .bind(sku)
        .fetch_one(pool)
        .await
        .expect("stock");
        assert_eq!(stock + sold, *initial, "{sku}: stock + sold == initial");
        assert!(stock >= 0 && sold <= *initial, "{sku}: no oversell");
        let max_user: i64 = sqlx::query_scalar(
            "SELECT COALESCE(MAX(n), 0)::BIGINT FROM (SELECT SUM(qty) AS n FROM orders WHERE sku = $1 GROUP BY user_id) t",
        )
        .bind(sku)
        .fetch_one(pool)
        .await
        .expect("max per user");
        assert!(
            max_user <= *cap,
            "{sku}: a user holds {max_user} > cap {cap}"
        );
    }
}

#[sqlx::test(migrations = "./migrations")]
async fn a_thousand_connections_beyond_the_cap_hold_no_memory(pool: PgPool) {
    let origin = OriginProcess::start_on(
        &pool,
        "redis://127.0.0.1:6379",
        &[("HTTP_MAX_CONNECTIONS", "64")],
    )
    .await;
    let pid = origin.child.id();
    let addr = origin.base.trim_start_matches("http://").to_owned();
    let client = http_client(0, Duration::from_secs(10));
    let (rss0, fds0) = (rss_bytes(pid), open_fds(pid));

    // 1,000 clients connect and send nothing. The kernel queues them (the listen backlog is
    // deep enough): none waits for a SYN retransmission, whose first retry comes after 1 s.
    let mut silent = Vec::new();
    let mut slowest_connect = Duration::ZERO;
    for _ in 0..1000 {
        let started = Instant::now();
        silent.push(TcpStream::connect(&addr).await.expect("connect"));
        slowest_connect = slowest_connect.max(started.elapsed());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss_silent, fds_silent) = (rss_bytes(pid), open_fds(pid));
    drop(silent);

    // 1,000 clients each ask once and keep their connection: idle ones make room for new ones.
    let mut kept = Vec::new();
    for _ in 0..1000 {
        let started = Instant::now();
        let mut s = TcpStream::connect(&addr).await.expect("connect");
        slowest_connect = slowest_connect.max(started.elapsed());
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .expect("write");
        kept.push(s);
    }
    // Every one of them is answered (the server works through the backlog)...
    let mut answered = 0;
    for s in &mut kept {
        let mut buf = [0u8; 12];
        if tokio::time::timeout(Duration::from_secs(20), s.read_exact(&mut buf))
            .await
            .is_ok_and(|r| r.is_ok())
            && &buf == b"HTTP/1.1 200"
        {
            answered += 1;
        }
    }
    let (rss_kept, fds_kept) = (rss_bytes(pid), open_fds(pid));
    // ...and a new client is served at once.
    let started = Instant::now();
    let res = client
        .get(format!("{}/healthz", origin.base))
        .send()
        .await
        .expect("served");
    assert_eq!(res.status(), 200);
    let new_client_wait = started.elapsed();
    let open = metric(&client, &origin.base, "origin_http_connections").await;
    drop(kept);
    eprintln!(
        "limits_process: cap 64; RSS {:.1} MiB -> {:.1} (1,000 silent) -> {:.1} (1,000 kept); \
         fds {fds0} -> {fds_silent} -> {fds_kept}; {answered}/1000 answered; new client served \
         in {new_client_wait:.1?}; {open} connections open; slowest connect {slowest_connect:.1?}",
        rss0 as f64 / MIB as f64,
        rss_silent as f64 / MIB as f64,
        rss_kept as f64 / MIB as f64,
    );
    assert_eq!(answered, 1000, "every kept connection was answered");
    assert!(
        slowest_connect < Duration::from_millis(900),
        "a connect took {slowest_connect:?}: a SYN was dropped (listen backlog too short)"
    );
    // The listener, the sockets of at most 64 connections, one accepted socket waiting for a
    // slot, and a little slack for database and Redis connections.
    for (what, fds) in [("silent", fds_silent), ("kept", fds_kept)] {
        assert!(
            fds <= fds0 + 64 + 1 + 4,
            "{what}: open file descriptors {fds0} -> {fds} with a cap of 64"
        );
    }
    for (what, rss) in [("silent", rss_silent), ("kept", rss_kept)] {
        assert!(
            rss < rss0 + 16 * MIB,
            "{what}: RSS {rss0} -> {rss} bytes (bound: +16 MiB)"
        );
    }
    assert!(
        new_client_wait < Duration::from_secs(1),
        "{new_client_wait:?}"
    );
    assert!(open <= 64.0, "{open} connections open");
}

/// Raises this process's soft open-files limit to at least `want` (children inherit it), up to
/// the hard limit; panics with a clear message if the hard limit is lower.
fn raise_fd_limit(want: u64) {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut lim = getrlimit(Resource::Nofile);
    if lim.current.is_none_or(|cur| cur >= want) {
        return;
    }
    assert!(
        lim.maximum.is_none_or(|max| max >= want),
        "this test needs {want} open files; the hard limit is {:?} (raise `ulimit -Hn`)",
        lim.maximum
    );
    lim.current = Some(want);
    setrlimit(Resource::Nofile, lim).expect("raise the open-files limit");
}

/// The value of a labelled counter on `/metrics` (0 if not exported yet).
async fn labelled(client: &reqwest::Client, base: &str, series: &str) -> f64 {
    let text = probes::scrape_metrics(client, base).await;
    probes::metric_value(&text, series).unwrap_or(0.0)
}

/// One purchase attempt, never retried: its status (0 for a transport error or timeout) and
/// how long it took.
async fn attempt(
    client: &reqwest::Client,
    base: &str,
    (user, key, sku): (&str, &str, &str),
) -> (u16, Duration) {
    let started = Instant::now();
    let status = match signed_purchase(client, base, EDGE_SECRET, (user, key, sku))
        .send()
        .await
    {
        Ok(res) => {
            let status = res.status().as_u16();
            if status == 503 {
                assert!(
                    res.headers().contains_key("retry-after"),
                    "503 carries Retry-After"
                );
            }
            let _ = res.bytes().await;
            status
        }
        Err(e) => {
            static SHOWN: AtomicUsize = AtomicUsize::new(0);
            if SHOWN.fetch_add(1, Ordering::Relaxed) < 3 {
                eprintln!("purchase transport error: {e:?}");
            }
            0
        }
    };
    (status, started.elapsed())
}

/// Latency percentile `p` (0..=100) of `sorted`.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[(sorted.len() * p / 100).min(sorted.len() - 1)]
}

/// Runs `n` one-unit purchases of `sku` by distinct users, `parallel` at a time, on `client`'s
/// keep-alive connections: answers counted by status ("0" = transport error or timeout), and
/// the sorted latencies.
async fn sale(
    client: &reqwest::Client,
    base: &str,
    sku: &str,
    tag: &str,
    n: usize,
    parallel: usize,
) -> (BTreeMap<u16, usize>, Vec<Duration>) {
    let answers: Vec<(u16, Duration)> = futures::stream::iter(0..n)
        .map(|i| async move {
            let (user, key) = (format!("{tag}-u{i}"), format!("{tag}-k{i}"));
            attempt(client, base, (&user, &key, sku)).await
        })
        .buffer_unordered(parallel)
        .collect()
        .await;
    let mut counts = BTreeMap::new();
    let mut latencies = Vec::with_capacity(n);
    for (status, took) in answers {
        *counts.entry(status).or_insert(0) += 1;
        latencies.push(took);
    }
    latencies.sort();
    (counts, latencies)
}

/// One hostile socket, again and again until `stop`: connect, then say nothing (or, if
/// `trickle`, one byte of a head per second) until the server closes it, then reconnect.
async fn hostile_socket(
    addr: String,
    trickle: bool,
    stop: Arc<AtomicBool>,
    connected: Arc<AtomicUsize>,
    closed_by_server: Arc<AtomicUsize>,
) {
    let head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut first = true;
    while !stop.load(Ordering::Relaxed) {
        let Ok(Ok(mut s)) =
            tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(&addr)).await
        else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        if first {
            connected.fetch_add(1, Ordering::Relaxed);
            first = false;
        }
        let mut sent = 0;
        let mut byte = [0u8; 1];
        loop {
            if stop.load(Ordering::Relaxed) {
                return;
            }
            match tokio::time::timeout(Duration::from_secs(1), s.read(&mut byte)).await {
                Err(_) => {} // still open
                Ok(Ok(0) | Err(_)) => {
                    closed_by_server.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                Ok(Ok(_)) => {} // an answer: it never sends a whole head, so none comes
            }
            if trickle && sent < head.len() {
                if s.write_all(&head[sent..=sent]).await.is_err() {
                    closed_by_server.fetch_add(1, Ordering::Relaxed);
                    break;
                }
                sent += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[sqlx::test(migrations = "./migrations")]
async fn four_thousand_silent_sockets_cannot_push_a_running_sale_out(pool: PgPool) {
    const SILENT: usize = 4096;
    const SALE: usize = 3000;
    const SALE_PARALLEL: usize = 32;
    raise_fd_limit(2 * SILENT as u64 + 2048);
    // The default connection cap (4,096) and header timeout (10 s).
    let origin = OriginProcess::start_on(&pool, "redis://127.0.0.1:6379", &[]).await;
    let base = origin.base.clone();
    let addr = base.trim_start_matches("http://").to_owned();
    // The sale's clients on keep-alive connections, as the edge's connection pool keeps them.
    let client = http_client(SALE_PARALLEL, Duration::from_secs(20));
    put_sku(&client, &base, "CALM", 1_000_000, 1000).await;
    let (warm, _) = sale(&client, &base, "CALM", "warm", 200, SALE_PARALLEL).await;
    assert_eq!(warm, BTreeMap::from([(201, 200)]), "warm-up");
    let (quiet, quiet_lat) = sale(&client, &base, "CALM", "quiet", SALE, SALE_PARALLEL).await;

    // The flood: 4,096 sockets from one peer, half silent, half trickling a head; each reconnects
    // when the server closes it.
    let stop = Arc::new(AtomicBool::new(false));
    let connected = Arc::new(AtomicUsize::new(0));
    let closed_by_server = Arc::new(AtomicUsize::new(0));
    let flood: Vec<_> = (0..SILENT)
        .map(|i| {
            tokio::spawn(hostile_socket(
                addr.clone(),
                i % 2 == 1,
                stop.clone(),
                connected.clone(),
                closed_by_server.clone(),
            ))
        })
        .collect();
    let started = Instant::now();
    while connected.load(Ordering::Relaxed) < SILENT && started.elapsed() < Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let flood_up = started.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The sale goes on meanwhile.
    let (loud, loud_lat) = sale(&client, &base, "CALM", "loud", SALE, SALE_PARALLEL).await;
    stop.store(true, Ordering::Relaxed);
    for t in flood {
        t.abort();
    }
    let evicted = labelled(
        &client,
        &base,
        r#"origin_http_connections_closed_total{reason="evicted"}"#,
    )
    .await;
    let reclaimed = labelled(
        &client,
        &base,
        r#"origin_http_connections_closed_total{reason="reclaimed"}"#,
    )
    .await;
    let show = |counts: &BTreeMap<u16, usize>, lat: &[Duration]| {
        format!(
            "{counts:?}, p50 {:.1?}, p99 {:.1?}, max {:.1?}",
            percentile(lat, 50),
            percentile(lat, 99),
            lat.last().copied().unwrap_or_default()
        )
    };
    eprintln!(
        "limits_process: {SALE} purchases ({SALE_PARALLEL} at a time, keep-alive) without a flood: \
         {}; with {SILENT} silent/trickling sockets ({} connected in {flood_up:.1?}, {} closed by \
         the server): {}; connections evicted {evicted}, reclaimed {reclaimed}",
        show(&quiet, &quiet_lat),
        connected.load(Ordering::Relaxed),
        closed_by_server.load(Ordering::Relaxed),
        show(&loud, &loud_lat),
    );
    assert_eq!(quiet, BTreeMap::from([(201, SALE)]), "without the flood");
    assert_eq!(
        loud,
        BTreeMap::from([(201, SALE)]),
        "with the flood: every purchase 201 (0 = transport error: connection closed or timed out)"
    );
    let slowest = loud_lat.last().copied().unwrap_or_default();
    assert!(
        slowest < Duration::from_secs(5),
        "a purchase took {slowest:?} during the flood (the header timeout is 10 s)"
    );
    assert_eq!(
        reclaimed, 0.0,
        "no connection that completed a request was closed to make room"
    );
}

#[sqlx::test(migrations = "./migrations")]
async fn a_flood_of_public_reads_cannot_take_the_purchases_database_connections(pool: PgPool) {
    const READERS: usize = 300;
    const SALE: usize = 2000;
    let origin = OriginProcess::start_on(
        &pool,
        "redis://127.0.0.1:6379",
        &[
            ("DB_MAX_CONNECTIONS", "4"),
            ("DB_READ_MAX_CONNECTIONS", "1"),
            ("DB_ACQUIRE_TIMEOUT_MS", "250"),
            // The readers saturate the machine: a generous deadline, so that a purchase answers
            // 503 only when it finds no database connection within DB_ACQUIRE_TIMEOUT_MS.
            ("REQUEST_DEADLINE_MS", "10000"),
        ],
    )
    .await;
    let base = origin.base.clone();
    let client = http_client(16, Duration::from_secs(20));
    put_sku(&client, &base, "READ", 1_000_000, 1000).await;

    // Hundreds of concurrent anonymous readers, each on its own keep-alive connection.
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..READERS)
        .map(|i| {
            let (base, stop) = (base.clone(), stop.clone());
            tokio::spawn(async move {
                let reader = http_client(1, Duration::from_secs(20));
                let path = ["/v1/skus/READ", "/readyz", "/metrics"][i % 3];
                let mut seen: BTreeMap<String, usize> = BTreeMap::new();
                while !stop.load(Ordering::Relaxed) {
                    let what = match reader.get(format!("{base}{path}")).send().await {
                        Ok(res) => {
                            let status = res.status().as_u16();
                            let retry_after = res.headers().contains_key("retry-after");
                            let _ = res.bytes().await;
                            match status {
                                503 if retry_after => "503".to_owned(),
                                503 => "503 without Retry-After".to_owned(),
                                other => other.to_string(),
                            }
                        }
                        Err(_) => "transport error".to_owned(),
                    };
                    *seen.entry(format!("{path} {what}")).or_insert(0) += 1;
                }
                seen
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (bought, lat) = sale(&client, &base, "READ", "read", SALE, 16).await;
    stop.store(true, Ordering::Relaxed);
    let mut reads: BTreeMap<String, usize> = BTreeMap::new();
    for r in readers {
        for (k, v) in r.await.expect("reader") {
            *reads.entry(k).or_insert(0) += v;
        }
    }
    eprintln!(
        "limits_process: {SALE} purchases (16 at a time) beside {READERS} concurrent readers: \
         {bought:?}, p50 {:.1?}, p99 {:.1?}, max {:.1?}; reads {reads:?}",
        percentile(&lat, 50),
        percentile(&lat, 99),
        lat.last().copied().unwrap_or_default()
    );
    assert_eq!(
        bought,
        BTreeMap::from([(201, SALE)]),
        "every purchase 201 (503 = no database connection left for it)"
    );
    for (what, n) in &reads {
        let status = what.split(' ').nth(1).unwrap_or_default();
        assert!(
            ["200", "503"].contains(&status) && !what.ends_with("without Retry-After"),
            "{n} reads answered {what}"
        );
    }
    for path in ["/v1/skus/READ", "/readyz", "/metrics"] {
        assert!(
            reads.get(&format!("{path} 200")).is_some_and(|n| *n > 0),
            "some {path} reads answered 200: {reads:?}"
        );
    }
}
