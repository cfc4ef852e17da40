//! The webhook receiver examples of docs/api.md — docs/examples/webhooks/receiver.py (PyPI
//! `standardwebhooks`) and receiver.mjs (npm `standardwebhooks`) — run for real as the receivers
//! of a live origin: every event verified by the reference library, deduplicated (a replay brings
//! nothing twice), each order's events in sequence, and a forged delivery refused.
//!
//! The libraries come from `scripts/webhook-consumers.sh` (into .tools/webhooks). Without them
//! these tests say so and pass, unless FLASHGATE_WEBHOOK_CONSUMERS=required (scripts/test.sh sets
//! it after installing them): then their absence fails.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sqlx::PgPool;

use crate::helpers::{Caller, TestApp};
use crate::webhooks::hooks_app;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// .tools/webhooks, when both libraries are installed there.
fn tools() -> Option<PathBuf> {
    let dir = repo().join(".tools/webhooks");
    let ready = dir.join("venv/bin/python").exists()
        && dir
            .join("node_modules/standardwebhooks/package.json")
            .exists();
    if ready {
        return Some(dir);
    }
    let required = std::env::var("FLASHGATE_WEBHOOK_CONSUMERS").is_ok_and(|v| v == "required");
    assert!(
        !required,
        "the Standard Webhooks libraries are not in .tools/webhooks: run scripts/webhook-consumers.sh"
    );
    eprintln!("SKIPPED: run scripts/webhook-consumers.sh to test the receiver examples");
    None
}

/// The example's process, and for Node the directory its script was copied into (removed on
/// drop).
struct Example {
    child: Child,
    _copied: Option<tempfile::TempDir>,
}

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

enum Language {
    Python,
    Node,
}

/// Starts the example on `port` with `secret`, appending what it applies to `events`.
async fn start(
    tools: &std::path::Path,
    language: Language,
    port: u16,
    secret: &str,
    events: &std::path::Path,
) -> Example {
    let examples = repo().join("docs/examples/webhooks");
    let (mut command, copied) = match language {
        Language::Python => {
            let mut c = Command::new(tools.join("venv/bin/python"));
            c.arg(examples.join("receiver.py"));
            (c, None)
        }
        Language::Node => {
            // Below its node_modules, as `npm ci` in its own directory would have it.
            let dir = tempfile::tempdir_in(tools).expect("a directory beside node_modules");
            let script = dir.path().join("receiver.mjs");
            std::fs::copy(examples.join("receiver.mjs"), &script).expect("copy the example");
            let mut c = Command::new("node");
            c.arg(script);
            (c, Some(dir))
        }
    };
    let child = command
        .arg(port.to_string())
        .arg(events)
        .env("WEBHOOK_SECRET", secret)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the example receiver");
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the example never listened"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Example {
        child,
        _copied: copied,
    }
}

fn applied(events: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(events)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

async fn the_example_receives_every_event_once(pool: PgPool, language: Language) {
    let Some(tools) = tools() else { return };
    let app: TestApp = hooks_app(pool, &[]).await;
    let port = crate::processes::free_port();
    let endpoint = app
        .endpoint(json!({"url": format!("http://127.0.0.1:{port}/hooks")}))
        .await;
    let id = endpoint["id"].as_str().expect("id").to_owned();
    let dir = tempfile::tempdir().expect("tempdir");
    let events = dir.path().join("events.jsonl");
    let _example = start(
        &tools,
        language,
        port,
        endpoint["secret"].as_str().expect("secret"),
        &events,
    )
    .await;

    app.put_sku_holds("X", 10, 5, 600).await;
    let orders: Vec<String> =
        futures::future::join_all(["a", "b", "c"].map(|u| app.order_of(u, "X"))).await;
    assert_eq!(
        app.order_action(&orders[0], "pay", "", Caller::Shop)
            .await
            .status(),
        200
    );
    assert_eq!(
        app.order_action(&orders[1], "cancel", "", Caller::Shop)
            .await
            .status(),
        200
    );
    let feed = app.all_events(100).await;
    assert_eq!(feed.len(), 5);
    // Everything again: the example deduplicates.
    let res = app
        .admin(
            "POST",
            &format!("/v1/admin/webhooks/{id}/replay"),
            Some(json!({"after": "0-0"})),
        )
        .await;
    assert_eq!(res.status(), 202);

    let start = Instant::now();
    loop {
        let view = app.endpoint_view(&id).await;
        if view["pending"] == 0 && applied(&events).len() >= feed.len() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "not all delivered: {view}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let got = applied(&events);
    assert_eq!(got.len(), feed.len(), "each event once: {got:?}");
    let by_id: HashMap<&str, &Value> = got
        .iter()
        .map(|e| (e["id"].as_str().expect("id"), e))
        .collect();
    for event in &feed {
        assert_eq!(
            by_id.get(event["id"].as_str().expect("id")),
            Some(&event),
            "as the feed has it"
        );
    }
    let mut last: HashMap<&str, u64> = HashMap::new();
    for e in got.iter().filter(|e| e["data"]["order_id"].is_string()) {
        let (order, seq) = (
            e["data"]["order_id"].as_str().expect("o"),
            e["data"]["sequence"].as_u64().expect("s"),
        );
        assert_eq!(
            seq,
            last.get(order).copied().unwrap_or(0) + 1,
            "in sequence: {got:?}"
        );
        last.insert(order, seq);
    }

    // A delivery signed with another secret is refused by the library.
    let forged = app
        .client
        .post(format!("http://127.0.0.1:{port}/hooks"))
        .header("webhook-id", "evt_forged")
        .header("webhook-timestamp", crate::helpers::now().to_string())
        .header("webhook-signature", "v1,bm90IGEgc2lnbmF0dXJl")
        .body(feed[0].to_string())
        .send()
        .await
        .expect("forged");
    assert_eq!(forged.status(), 400);
    assert_eq!(applied(&events).len(), feed.len());
}

#[sqlx::test(migrations = "./migrations")]
async fn the_python_example_receives_every_event_once_verified_and_in_sequence(pool: PgPool) {
    the_example_receives_every_event_once(pool, Language::Python).await;
}

#[sqlx::test(migrations = "./migrations")]
async fn the_node_example_receives_every_event_once_verified_and_in_sequence(pool: PgPool) {
    the_example_receives_every_event_once(pool, Language::Node).await;
}
