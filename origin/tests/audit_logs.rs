//! What the origin's logs of a whole sale hold: an audit trail (one event per purchase decision
//! and per batch transaction, linked by batch id and fencing token, under the edge's request id)
//! and never a shopper's id, an idempotency key or a secret in plain text — only their keyed
//! pseudonyms (`LOG_HASH_KEY`).

#[path = "common/processes.rs"]
mod processes;
#[path = "../../redlock/tests/common/redis_nodes.rs"]
mod redis_nodes;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use origin::pseudonym::Pseudonyms;
use processes::{ADMIN_TOKEN, EDGE_SECRET, OriginProcess, database_of, put_sku, signed_purchase};
use serde_json::Value;
use sqlx::PgPool;

const LOG_HASH_KEY: &str = "test-log-hash-key-0123456789";

/// One signed purchase with a request id; returns the status.
async fn buy(
    client: &reqwest::Client,
    base: &str,
    (user, key, request_id): (&str, &str, &str),
    secret: &str,
) -> u16 {
    signed_purchase(client, base, secret, (user, key, "AUDIT"))
        .header("flashgate-request-id", request_id)
        .send()
        .await
        .expect("purchase")
        .status()
        .as_u16()
}

/// The JSON log lines of a file (anything else in it is kept as a string).
fn lines(path: &std::path::Path) -> (String, Vec<Value>) {
    let raw = std::fs::read_to_string(path).expect("read log");
    let parsed = raw
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect();
    (raw, parsed)
}

#[sqlx::test(migrations = "./migrations")]
async fn a_sales_logs_are_an_audit_trail_without_ids_keys_or_secrets(pool: PgPool) {
    let (_db, url) = database_of(&pool).await;
    let nodes = redis_nodes::RedisNodes::start(3).await;
    let urls = nodes.urls().join(",");
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("origin.log");
    let env = [("LOG_HASH_KEY", LOG_HASH_KEY), ("RUST_LOG", "info")];
    let a = OriginProcess::start_logged(&url, &urls, "audit", &env, &log).await;
    let b = OriginProcess::start_logged(&url, &urls, "audit", &env, &log).await;

    let client = reqwest::Client::new();
    put_sku(&client, &a.base, "AUDIT", 25, 3).await;

    // 12 shoppers × 4 attempts over both processes: 25 created, then purchase_limit and
    // sold_out refusals; every shopper retries one key (a replay).
    let users: Vec<String> = (0..12)
        .map(|i| format!("shopper.{i}-plainid@example.com"))
        .collect();
    let mut first = Vec::new();
    let mut replays = Vec::new();
    for (i, user) in users.iter().enumerate() {
        for j in 0..4 {
            let key = format!("plainkey-{i}-{j}-7f3a");
            first.push((user.clone(), key, format!("req-audit-{i}-{j}")));
        }
        replays.push((
            user.clone(),
            format!("plainkey-{i}-0-7f3a"),
            format!("req-audit-{i}-replay"),
        ));
    }
    let mut statuses: BTreeMap<(String, String), Vec<u16>> = BTreeMap::new();
    // All first attempts at once, then the replays.
    for phase in [&first, &replays] {
        let mut joins = Vec::new();
        for (n, (user, key, rid)) in phase.iter().cloned().enumerate() {
            let client = client.clone();
            let base = if n % 2 == 0 {
                a.base.clone()
            } else {
                b.base.clone()
            };
            joins.push(tokio::spawn(async move {
                let status = buy(&client, &base, (&user, &key, &rid), EDGE_SECRET).await;
                ((user, key), status)
            }));
        }
        for j in joins {
            let (id, status) = j.await.expect("task");
            statuses.entry(id).or_default().push(status);
        }
    }
    let attempts: Vec<_> = first.iter().chain(&replays).collect();
    let created = statuses.values().filter(|s| s[0] == 201).count();
    assert_eq!(created, 25, "{statuses:?}");
    // A forged request naming a user: refused, and its user id must not be logged either.
    let forged = buy(
        &client,
        &a.base,
        ("forged-victim-id", "forged-key-1", "req-audit-forged"),
        "not-the-edge-secret-000",
    )
    .await;
    assert_eq!(forged, 401);

    // Let the processes flush, then stop them.
    tokio::time::sleep(Duration::from_millis(300)).await;
    a.signal("-TERM");
    b.signal("-TERM");
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop((a, b));
    let (raw, events) = lines(&log);

    // Nothing in plain text.
    let mut plain: Vec<String> = users.clone();
    plain.extend(attempts.iter().map(|(_, k, _)| k.clone()));
    plain.extend(
        [
            "forged-victim-id",
            "forged-key-1",
            EDGE_SECRET,
            ADMIN_TOKEN,
            LOG_HASH_KEY,
        ]
        .map(String::from),
    );
    plain.push("plainid".into());
    plain.push("plainkey".into());
    for p in &plain {
        assert!(!raw.contains(p.as_str()), "the logs contain {p:?}");
    }

    // The audit trail: every decision is one event with the pseudonyms, the outcome, the batch
    // and its fence, under the edge's request id; every batch id is a committed batch event.
    let pseudonyms = Pseudonyms::new(LOG_HASH_KEY.as_bytes());
    let decided: Vec<&Value> = events
        .iter()
        .filter(|e| e["event"] == "purchase" && e["message"] == "purchase decided")
        .collect();
    assert_eq!(decided.len(), attempts.len(), "{raw}");
    let batches: HashMap<String, &Value> = events
        .iter()
        .filter(|e| e["event"] == "batch" && e["result"] == "committed")
        .map(|e| (e["batch_id"].as_str().unwrap_or_default().to_owned(), e))
        .collect();
    let mut created_seen = HashSet::new();
    for ((user, key), seen) in &statuses {
        let (u, k) = (
            pseudonyms.user(user).to_string(),
            pseudonyms.key(user, key).to_string(),
        );
        let mine: Vec<&&Value> = decided
            .iter()
            .filter(|e| e["user"] == u.as_str() && e["key"] == k.as_str())
            .collect();
        assert_eq!(mine.len(), seen.len(), "events of {user}/{key}: {mine:?}");
        for e in mine {
            let status = e["status"].as_u64().unwrap_or(0) as u16;
            assert!(seen.contains(&status), "{e}");
            assert_eq!(e["sku"], "AUDIT");
            let request_id = e["spans"]
                .as_array()
                .and_then(|s| s.iter().find_map(|s| s["request_id"].as_str()))
                .unwrap_or_default();
            assert!(request_id.starts_with("req-audit-"), "{e}");
            if e["decided_by"] == "batch" {
                let id = e["batch_id"].as_str().unwrap_or_default();
                let batch = batches
                    .get(id)
                    .unwrap_or_else(|| panic!("no committed batch {id}: {e}"));
                assert_eq!(batch["fence"], e["fence"], "{e} vs {batch}");
                assert_eq!(batch["sku"], "AUDIT");
            }
            if e["outcome"] == "created" {
                created_seen.insert((user.clone(), key.clone()));
            }
        }
    }
    assert_eq!(created_seen.len(), 25);
    let sold: i64 = batches
        .values()
        .map(|b| b["units_sold"].as_i64().unwrap_or(0))
        .sum();
    assert_eq!(
        sold, 25,
        "committed batch events account for every unit sold"
    );

    // Every batch committed under a lease whose acquisition is in the trail too.
    let acquired: HashSet<u64> = events
        .iter()
        .filter(|e| e["op"] == "acquire" && e["result"] == "acquired")
        .filter_map(|e| e["fence"].as_u64())
        .collect();
    for b in batches.values() {
        let fence = b["fence"].as_u64().unwrap_or(0);
        assert!(acquired.contains(&fence), "no lock acquire event for {b}");
    }

    // The operator's way to find a shopper: `origin pseudonym USER KEY`.
    let (user, key) = statuses.keys().next().expect("a shopper");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_origin"))
        .args(["pseudonym", user, key])
        .env("LOG_HASH_KEY", LOG_HASH_KEY)
        .output()
        .expect("origin pseudonym");
    let printed = String::from_utf8_lossy(&out.stdout);
    let want_user = pseudonyms.user(user).to_string();
    assert!(out.status.success());
    assert_eq!(
        printed,
        format!("user {want_user}\nkey {}\n", pseudonyms.key(user, key))
    );
    assert!(raw.contains(&format!("\"user\":\"{want_user}\"")));
}
