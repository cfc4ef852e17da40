//! Secret rotation without downtime: the origin verifies v2 signatures with the key their `kid`
//! names and v1 signatures against every configured key; a key that is no longer configured is
//! refused; v1 can be turned off; admin tokens rotate the same way. And the real thing: two
//! origin processes rolled one at a time from `[old]` to `[new, old]` to `[new]` while signed
//! shoppers keep buying and the edge switches to the new key in between — no correctly signed
//! request is refused, and the retired key is refused at the end.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use shared::SecretRing;
use shared::signing::{self, SignedParts};
use sqlx::PgPool;
use tokio::sync::RwLock;

use crate::helpers::{ADMIN_TOKEN, Purchase, TestApp, assert_problem, now, spawn_app_with};
use crate::processes::{OriginProcess, database_of};

const OLD: &str = "old-edge-secret-0123456789";
const NEW: &str = "new-edge-secret-9876543210";
const OLD_ADMIN: &str = "old-admin-token-0123456789";
const NEW_ADMIN: &str = "new-admin-token-9876543210";

/// Origin settings with the edge ring `ring` (`kid:secret,…`) instead of the single secret.
fn ring_env(ring: &'static str) -> [(&'static str, &'static str); 2] {
    [("EDGE_SHARED_SECRET", ""), ("EDGE_SHARED_SECRETS", ring)]
}

async fn spawn_with_ring(pool: PgPool, ring: &'static str, extra: &[(&str, &str)]) -> TestApp {
    let mut env = ring_env(ring).to_vec();
    env.extend_from_slice(extra);
    spawn_app_with(pool, &env).await
}

fn purchase(user: &str, key: &str) -> Purchase {
    Purchase::new(user, key, "ROT", 1)
}

/// `origin_edge_signatures_total{scheme,kid}` samples of a `/metrics` text.
fn signature_counts(metrics: &str) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("origin_edge_signatures_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.split_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        out.insert(
            (label("scheme"), label("kid")),
            value.trim().parse().unwrap_or(0),
        );
    }
    out
}

#[sqlx::test(migrations = "./migrations")]
async fn every_configured_key_verifies_v2_by_kid_and_v1_by_trying_them_all(pool: PgPool) {
    let app = spawn_with_ring(
        pool,
        "k2:new-edge-secret-9876543210,k1:old-edge-secret-0123456789",
        &[],
    )
    .await;
    assert_eq!(app.put_sku("ROT", 100, 100).await.status(), 200);

    // The current key and the previous one, in either scheme.
    for (key, p) in [
        (
            "v2-current",
            purchase("alice", "v2-current").signed_v2("k2", NEW),
        ),
        (
            "v2-previous",
            purchase("alice", "v2-previous").signed_v2("k1", OLD),
        ),
        ("v1-current", purchase("alice", "v1-current").signed_v1(NEW)),
        (
            "v1-previous",
            purchase("alice", "v1-previous").signed_v1(OLD),
        ),
    ] {
        let res = app.send(&p).await;
        assert_eq!(res.status(), 201, "{key}: {:?}", res.text().await);
    }

    // An unknown kid, a kid with another key's secret, the single-secret kid the ring does not
    // have, a secret nobody configured: 401 bad_signature, nothing stored.
    for (what, p) in [
        ("unknown kid", purchase("alice", "r1").signed_v2("k3", NEW)),
        (
            "kid k1 with k2's secret",
            purchase("alice", "r2").signed_v2("k1", NEW),
        ),
        (
            "kid k2 with k1's secret",
            purchase("alice", "r3").signed_v2("k2", OLD),
        ),
        (
            "default kid",
            purchase("alice", "r4").signed_v2("default", NEW),
        ),
        (
            "v1, unknown secret",
            purchase("alice", "r5").signed_v1("some-other-secret-0123456789"),
        ),
    ] {
        let body = assert_problem(app.send(&p).await, 401, "bad_signature").await;
        assert!(body["detail"].is_string(), "{what}: {body}");
    }
    let body = assert_problem(
        app.send(&purchase("alice", "r1").signed_v2("k3", NEW))
            .await,
        401,
        "bad_signature",
    )
    .await;
    assert_eq!(
        body["detail"],
        "signature names a key id this server does not hold"
    );

    assert_eq!(app.order_count().await, 4);
    assert_eq!(app.stock("ROT").await, 96);
    let stored: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM idempotency_records")
        .fetch_one(&app.pool)
        .await
        .expect("count");
    assert_eq!(stored, 4, "refused requests store nothing");

    // Operators see which key signs the traffic (when the previous key's count stops growing,
    // it can be removed).
    let counts = signature_counts(&app.metrics().await);
    let expected: BTreeMap<(String, String), u64> = [
        (("v1", "k1"), 1),
        (("v1", "k2"), 1),
        (("v2", "k1"), 1),
        (("v2", "k2"), 1),
    ]
    .into_iter()
    .map(|((s, k), n)| ((s.to_owned(), k.to_owned()), n))
    .collect();
    assert_eq!(counts, expected);
}

#[sqlx::test(migrations = "./migrations")]
async fn a_removed_key_is_refused_in_both_schemes(pool: PgPool) {
    let app = spawn_with_ring(pool, "k2:new-edge-secret-9876543210", &[]).await;
    assert_eq!(app.put_sku("ROT", 10, 10).await.status(), 200);
    assert_problem(
        app.send(&purchase("alice", "a").signed_v2("k1", OLD)).await,
        401,
        "bad_signature",
    )
    .await;
    assert_problem(
        app.send(&purchase("alice", "b").signed_v1(OLD)).await,
        401,
        "bad_signature",
    )
    .await;
    assert_eq!(app.order_count().await, 0);
    // The same keys, correctly signed, still buy (a 401 stores nothing).
    for key in ["a", "b"] {
        let res = app.send(&purchase("alice", key).signed_v2("k2", NEW)).await;
        assert_eq!(res.status(), 201);
    }
    assert_eq!(app.stock("ROT").await, 8);
}

#[sqlx::test(migrations = "./migrations")]
async fn v1_can_be_turned_off(pool: PgPool) {
    let app = spawn_with_ring(
        pool,
        "k2:new-edge-secret-9876543210",
        &[("ACCEPT_SIGNATURE_V1", "false")],
    )
    .await;
    assert_eq!(app.put_sku("ROT", 10, 10).await.status(), 200);
    let body = assert_problem(
        app.send(&purchase("alice", "a").signed_v1(NEW)).await,
        401,
        "bad_signature",
    )
    .await;
    assert_eq!(
        body["detail"],
        "v1 signatures are no longer accepted; sign with v2"
    );
    let res = app.send(&purchase("alice", "a").signed_v2("k2", NEW)).await;
    assert_eq!(res.status(), 201);
    assert_eq!(app.order_count().await, 1);
}

/// Why v2 exists, shown end to end: a v1 signature for user `a` with key `b.c` is also a valid
/// signature for user `a.b` with key `c`, so whoever captures it can buy as `a.b` (within 300 s).
/// The same capture of a v2 signature is refused, and so is the v1 replay once v1 is off.
#[sqlx::test(migrations = "./migrations")]
async fn a_captured_v1_signature_replays_as_another_user_and_v2_does_not(pool: PgPool) {
    let lenient = spawn_app_with(pool.clone(), &[]).await;
    assert_eq!(lenient.put_sku("ROT", 10, 10).await.status(), 200);
    let strict = spawn_app_with(pool, &[("ACCEPT_SIGNATURE_V1", "false")]).await;

    let captured = |kid: Option<&str>| {
        let mut p = purchase("a", "b.c");
        p.kid = kid.map(str::to_owned);
        let signature = p.header_value();
        let mut replay = purchase("a.b", "c");
        replay.signature = Some(signature);
        replay
    };
    // v1: the origin cannot tell the replay from a real request of `a.b`.
    let res = lenient.send(&captured(None)).await;
    assert_eq!(res.status(), 201, "the documented v1 weakness");
    let order: serde_json::Value = res.json().await.expect("json");
    assert_eq!(order["user"], "a.b");
    // v2: the boundary is signed.
    assert_problem(
        lenient.send(&captured(Some("default"))).await,
        401,
        "bad_signature",
    )
    .await;
    assert_problem(strict.send(&captured(None)).await, 401, "bad_signature").await;
    assert_eq!(lenient.order_count().await, 1);
}

#[sqlx::test(migrations = "./migrations")]
async fn admin_tokens_rotate(pool: PgPool) {
    let sale = r#"{"name":"R","price_cents":1,"stock":5,"max_per_user":1}"#;
    let both = spawn_app_with(
        pool.clone(),
        &[
            ("ADMIN_TOKEN", ""),
            (
                "ADMIN_TOKENS",
                "new-admin-token-9876543210, old-admin-token-0123456789",
            ),
        ],
    )
    .await;
    for token in [NEW_ADMIN, OLD_ADMIN] {
        let res = both.put_sku_raw("R1", Some(token), sale.into()).await;
        assert_eq!(res.status(), 200, "{token}");
    }
    for wrong in [
        ADMIN_TOKEN,
        "",
        "new-admin-token-9876543210,old-admin-token-0123456789",
    ] {
        assert_problem(
            both.put_sku_raw("R2", Some(wrong), sale.into()).await,
            401,
            "unauthorized",
        )
        .await;
    }

    // The old token retired: refused, and nothing changes.
    let new_only = spawn_app_with(pool, &[("ADMIN_TOKEN", ""), ("ADMIN_TOKENS", NEW_ADMIN)]).await;
    assert_problem(
        new_only
            .put_sku_raw(
                "R1",
                Some(OLD_ADMIN),
                r#"{"name":"R","price_cents":1,"stock":99,"max_per_user":1}"#.into(),
            )
            .await,
        401,
        "unauthorized",
    )
    .await;
    assert_eq!(new_only.stock("R1").await, 5);
    assert_problem(new_only.get_sku("R2").await, 404, "unknown_sku").await;
    let res = new_only
        .put_sku_raw("R2", Some(NEW_ADMIN), sale.into())
        .await;
    assert_eq!(res.status(), 200);
}

#[sqlx::test(migrations = "./migrations")]
async fn the_origin_refuses_to_start_with_both_forms_of_a_secret(pool: PgPool) {
    let (_, url) = database_of(&pool).await;
    for (extra, names) in [
        (
            [("EDGE_SHARED_SECRETS", "k2:new-edge-secret-9876543210")],
            "EDGE_SHARED_SECRETS / EDGE_SHARED_SECRET",
        ),
        (
            [("ADMIN_TOKENS", "new-admin-token-9876543210")],
            "ADMIN_TOKENS / ADMIN_TOKEN",
        ),
    ] {
        let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_origin"))
            .env("DATABASE_URL", &url)
            .env("REDIS_URLS", "redis://127.0.0.1:6379")
            .env("LISTEN_ADDR", "127.0.0.1:0")
            .env("EDGE_SHARED_SECRET", OLD)
            .env("ADMIN_TOKEN", OLD_ADMIN)
            .envs(extra)
            .kill_on_drop(true)
            .output();
        let out = tokio::time::timeout(Duration::from_secs(30), out)
            .await
            .expect("exits promptly")
            .expect("runs");
        assert!(!out.status.success());
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains(names), "{text}");
        assert!(
            text.contains("not both") || text.contains("exactly one"),
            "{text}"
        );
        for secret in [OLD, NEW, OLD_ADMIN, NEW_ADMIN] {
            assert!(!text.contains(secret), "a secret was printed: {text}");
        }
    }
}

/// The container and Kubernetes convention: every secret from a file named by `NAME_FILE`, none
/// in the process environment; the real binary starts, admits the admin token and verifies the
/// edge's signature read from those files.
#[sqlx::test(migrations = "./migrations")]
async fn the_binary_reads_its_secrets_from_files(pool: PgPool) {
    let (db, url) = database_of(&pool).await;
    let dir = tempfile::tempdir().expect("tempdir");
    let file = |name: &str, contents: String| {
        let path = dir.path().join(name);
        std::fs::write(&path, contents).expect("write secret file");
        path
    };
    let port = crate::processes::free_port();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_origin"));
    for secret in [
        "DATABASE_URL",
        "REDIS_URLS",
        "EDGE_SHARED_SECRETS",
        "EDGE_SHARED_SECRET",
        "ADMIN_TOKENS",
        "ADMIN_TOKEN",
        "LOG_HASH_KEY",
    ] {
        cmd.env_remove(secret);
    }
    cmd.env(
        "DATABASE_URL_FILE",
        file("database_url", format!("{url}\n")),
    )
    .env(
        "REDIS_URLS_FILE",
        file("redis_urls", "redis://127.0.0.1:6379\n".into()),
    )
    .env("EDGE_SHARED_SECRET_FILE", file("edge", format!("{OLD}\n")))
    .env("ADMIN_TOKEN_FILE", file("admin", format!("{OLD_ADMIN}\n")))
    .env(
        "LOG_HASH_KEY_FILE",
        file("hash", "log-hash-key-in-a-file-0123".into()),
    )
    .env("LISTEN_ADDR", format!("127.0.0.1:{port}"))
    .env("REDIS_KEY_PREFIX", format!("test:{db}"))
    .env("RUN_MIGRATIONS", "false")
    .env("RECONCILE_INTERVAL_SECS", "0")
    .env("RUST_LOG", "warn")
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null());
    let origin = OriginProcess {
        child: cmd.spawn().expect("start origin"),
        base: format!("http://127.0.0.1:{port}"),
    };
    origin.wait_ready(Duration::from_secs(30)).await;
    let client = reqwest::Client::new();
    let sale = r#"{"name":"Files","price_cents":100,"stock":3,"max_per_user":2}"#;
    let res = client
        .put(format!("{}/v1/admin/skus/FILES-1", origin.base))
        .bearer_auth(OLD_ADMIN)
        .body(sale)
        .send()
        .await
        .expect("admin put");
    assert_eq!(res.status(), 200, "the admin token from the file");
    let res =
        crate::processes::signed_purchase(&client, &origin.base, OLD, ("ann", "ann-1", "FILES-1"))
            .send()
            .await
            .expect("purchase");
    assert_eq!(
        res.status(),
        201,
        "signed with the edge secret from the file"
    );
}

// ---------------------------------------------------------------------------------------------
// Rotation under load

/// The origins traffic is spread over: what a load balancer does during a rolling restart
/// (a replica is taken out of the pool, drained, replaced, and put back).
struct Balancer {
    live: RwLock<Vec<(usize, String, &'static str)>>,
    next: AtomicUsize,
}

impl Balancer {
    async fn pick(&self) -> (usize, String, &'static str) {
        let live = self.live.read().await;
        let i = self.next.fetch_add(1, Ordering::Relaxed) % live.len();
        live[i].clone()
    }
}

/// One answer of the load: the key that signed it, the ring of the origin that answered.
#[derive(Debug)]
struct Answer {
    status: u16,
    kid: String,
    ring: &'static str,
    order_id: Option<String>,
    body: String,
}

async fn start_origin(url: &str, prefix: &str, ring: &'static str) -> OriginProcess {
    let mut env = ring_env(ring).to_vec();
    env.push(("RUN_MIGRATIONS", "false"));
    OriginProcess::start(url, "redis://127.0.0.1:6379", prefix, &env, true).await
}

/// Replaces slot `slot`'s origin by one configured with `ring`, the way a rolling deploy does:
/// out of the balancer, a drain pause, SIGTERM (graceful), start, ready, back in.
async fn roll(
    balancer: &Balancer,
    origins: &mut [Option<OriginProcess>],
    slot: usize,
    url: &str,
    prefix: &str,
    ring: &'static str,
    label: &'static str,
) {
    balancer.live.write().await.retain(|(s, _, _)| *s != slot);
    tokio::time::sleep(Duration::from_millis(300)).await;
    if let Some(mut old) = origins[slot].take() {
        let status = old.terminate().await;
        assert!(status.success(), "origin {slot} exited with {status}");
    }
    let fresh = start_origin(url, prefix, ring).await;
    balancer
        .live
        .write()
        .await
        .push((slot, fresh.base.clone(), label));
    origins[slot] = Some(fresh);
}

#[sqlx::test(migrations = "./migrations")]
async fn rolling_a_secret_rotation_under_load_refuses_no_correctly_signed_request(pool: PgPool) {
    const RING_OLD: &str = "k1:old-edge-secret-0123456789";
    const RING_BOTH: &str = "k2:new-edge-secret-9876543210,k1:old-edge-secret-0123456789";
    const RING_NEW: &str = "k2:new-edge-secret-9876543210";
    let (db, url) = database_of(&pool).await;
    let prefix = format!("test:{db}");

    let mut origins = vec![
        Some(start_origin(&url, &prefix, RING_OLD).await),
        Some(start_origin(&url, &prefix, RING_OLD).await),
    ];
    let balancer = Arc::new(Balancer {
        live: RwLock::new(
            origins
                .iter()
                .enumerate()
                .filter_map(|(i, o)| o.as_ref().map(|o| (i, o.base.clone(), "old")))
                .collect(),
        ),
        next: AtomicUsize::new(0),
    });
    let client = reqwest::Client::new();
    let base0 = balancer.pick().await.1;
    let res = client
        .put(format!("{base0}/v1/admin/skus/ROT"))
        .bearer_auth(ADMIN_TOKEN)
        .body(r#"{"name":"r","price_cents":1,"stock":1000000,"max_per_user":1000000}"#)
        .send()
        .await
        .expect("put");
    assert_eq!(res.status(), 200);

    // The edge's signing ring; it starts with the old key only.
    let edge = Arc::new(RwLock::new(SecretRing::parse(RING_OLD, 16).expect("ring")));
    let stop = Arc::new(AtomicBool::new(false));
    let shoppers: Vec<_> = (0..12)
        .map(|s| {
            let (balancer, edge, stop, client) =
                (balancer.clone(), edge.clone(), stop.clone(), client.clone());
            tokio::spawn(async move {
                let user = format!("shopper-{s}");
                let body = br#"{"sku":"ROT","qty":1}"#.to_vec();
                let mut answers = Vec::new();
                let mut transport_errors = 0u32;
                for n in 0.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let key = format!("k-{s}-{n}");
                    // Retry the same key until it is decided (a transport error while an origin
                    // restarts is retried on another one, signed again, as the edge would).
                    loop {
                        let (_, base, ring) = balancer.pick().await;
                        let (kid, signature) = {
                            let edge = edge.read().await;
                            let parts = SignedParts {
                                method: "POST",
                                path: "/v1/purchases",
                                user: &user,
                                idempotency_key: &key,
                                body: &body,
                            };
                            (
                                edge.current().0.to_string(),
                                signing::sign(&edge, now(), &parts),
                            )
                        };
                        let sent = client
                            .post(format!("{base}/v1/purchases"))
                            .header("flashgate-user", &user)
                            .header("idempotency-key", &key)
                            .header("flashgate-signature", signature)
                            .body(body.clone())
                            .timeout(Duration::from_secs(10))
                            .send()
                            .await;
                        match sent {
                            Ok(res) => {
                                let status = res.status().as_u16();
                                let text = res.text().await.unwrap_or_default();
                                let order_id = (status == 201)
                                    .then(|| serde_json::from_str::<serde_json::Value>(&text).ok())
                                    .flatten()
                                    .and_then(|v| v["order_id"].as_str().map(str::to_owned));
                                let decided = status != 503;
                                answers.push(Answer {
                                    status,
                                    kid,
                                    ring,
                                    order_id,
                                    body: text,
                                });
                                if decided {
                                    break;
                                }
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                            Err(_) => {
                                transport_errors += 1;
                                tokio::time::sleep(Duration::from_millis(20)).await;
                            }
                        }
                    }
                }
                (answers, transport_errors)
            })
        })
        .collect();

    let phase = Duration::from_millis(1500);
    tokio::time::sleep(phase).await;
    // 1. Every origin learns the new key, keeping the old one.
    for slot in 0..2 {
        roll(
            &balancer,
            &mut origins,
            slot,
            &url,
            &prefix,
            RING_BOTH,
            "both",
        )
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(phase).await;
    // 2. The edge signs with the new key (old first → new first; the old key stays for a while).
    *edge.write().await = SecretRing::parse(RING_BOTH, 16).expect("ring");
    tokio::time::sleep(phase).await;
    // 3. Every origin drops the old key.
    for slot in 0..2 {
        roll(
            &balancer,
            &mut origins,
            slot,
            &url,
            &prefix,
            RING_NEW,
            "new",
        )
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    tokio::time::sleep(phase).await;
    stop.store(true, Ordering::Relaxed);

    let mut answers = Vec::new();
    let mut transport_errors = 0;
    for s in shoppers {
        let (a, t) = s.await.expect("shopper");
        answers.extend(a);
        transport_errors += t;
    }

    // No correctly signed request was refused, and none failed.
    let refused: Vec<(&str, &str, &str)> = answers
        .iter()
        .filter(|a| a.status == 401)
        .map(|a| (a.kid.as_str(), a.ring, a.body.as_str()))
        .collect();
    assert!(refused.is_empty(), "401s during the rotation: {refused:#?}");
    let statuses: BTreeMap<u16, usize> = answers.iter().fold(BTreeMap::new(), |mut m, a| {
        *m.entry(a.status).or_default() += 1;
        m
    });
    // Every key ended in a 201. On the way, the only other answer allowed is the origin's own
    // "503, retry the same key" (a Redis vote that timed out on a loaded machine, nothing to do
    // with signatures); it is retried, as the edge's shopper would.
    let others: Vec<(u16, &str, &str)> = answers
        .iter()
        .filter(|a| a.status != 201 && a.status != 503)
        .map(|a| (a.status, a.ring, a.body.as_str()))
        .collect();
    assert!(others.is_empty(), "unexpected answers: {others:#?}");
    // The rotation really overlapped with the traffic: each key was accepted by the rings it
    // had to be accepted by.
    let seen: BTreeSet<(&str, &str)> = answers
        .iter()
        .filter(|a| a.status == 201)
        .map(|a| (a.kid.as_str(), a.ring))
        .collect();
    for pair in [("k1", "old"), ("k1", "both"), ("k2", "both"), ("k2", "new")] {
        assert!(seen.contains(&pair), "no traffic for {pair:?}: {seen:?}");
    }
    // The books: one order per 201, stock down by as many.
    let ids: HashSet<&str> = answers
        .iter()
        .filter_map(|a| a.order_id.as_deref())
        .collect();
    assert_eq!(ids.len(), statuses.get(&201).copied().unwrap_or(0));
    let orders: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(orders as usize, ids.len());
    let stock: i64 = sqlx::query_scalar("SELECT stock FROM skus WHERE sku = 'ROT'")
        .fetch_one(&pool)
        .await
        .expect("stock");
    assert_eq!(stock, 1_000_000 - orders);
    eprintln!(
        "rotation under load: {} purchases, 0 refused, {} × 503 and {transport_errors} transport errors retried, {seen:?}",
        ids.len(),
        statuses.get(&503).copied().unwrap_or(0)
    );

    // At the end, traffic signed with the retired key is refused by every origin, in either
    // scheme; the new key buys.
    for origin in origins.iter().flatten() {
        let send = |p: Purchase| {
            let client = client.clone();
            let base = origin.base.clone();
            async move {
                client
                    .post(format!("{base}/v1/purchases"))
                    .header("flashgate-user", p.user.clone().unwrap_or_default())
                    .header("idempotency-key", p.key.clone().unwrap_or_default())
                    .header("flashgate-signature", p.header_value())
                    .body(p.body.clone())
                    .send()
                    .await
                    .expect("request")
            }
        };
        let key = format!("final-{}", origin.base);
        assert_problem(
            send(purchase("late", &key).signed_v2("k1", OLD)).await,
            401,
            "bad_signature",
        )
        .await;
        assert_problem(
            send(purchase("late", &key).signed_v1(OLD)).await,
            401,
            "bad_signature",
        )
        .await;
        assert_eq!(
            send(purchase("late", &key).signed_v2("k2", NEW))
                .await
                .status(),
            201
        );
    }
}
