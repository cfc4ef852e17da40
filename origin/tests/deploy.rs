//! The deployment files against the real origin:
//!
//! - `deploy/prometheus/alerts.yml` has the alerts operations rely on, each with an expression,
//!   a `for`, a severity and a summary/description (this is the check that remains where
//!   `promtool` cannot be had; scripts/check-deploy.sh runs promtool where it can);
//! - `deploy/grafana/lock-health.json` covers the lock-health metrics and names the provisioned
//!   datasource;
//! - every metric named by a PromQL expression of the dashboard or of the alerts is exported by a
//!   live origin at `GET /metrics` (a fresh database, the local Redis), with the right suffix
//!   (`x_bucket` only for a histogram `x`, `x_total` only for a counter `x`), and every label a
//!   selector or a grouping names exists on that metric's series.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use origin::{Application, Settings};
use serde_json::Value;
use shared::signing::{self, SignedParts};
use sqlx::PgPool;

const EDGE_SECRET: &str = "deploy-test-edge-secret-0123456789";
const ADMIN_TOKEN: &str = "deploy-test-admin-token-0123456789";
const WEBHOOK_SECRET: &str = "whsec_deploy_test_0123456789";

/// Labels Prometheus adds to every scraped series (target labels) or that histograms carry.
const IMPLICIT_LABELS: [&str; 3] = ["instance", "job", "le"];

/// Alerts that must exist: (name, severity, fragments the expression must contain).
const REQUIRED_ALERTS: [(&str, &str, &[&str]); 11] = [
    (
        "FlashgateLockAcquireFailures",
        "warning",
        &["redlock_acquire_total", r#"result!="acquired""#],
    ),
    (
        "FlashgateLockLatencyP99High",
        "warning",
        &["histogram_quantile(0.99", "redlock_acquire_seconds_bucket"],
    ),
    (
        "FlashgateBooksOutOfBalance",
        "critical",
        &["origin_reconcile_discrepancies", "> 0"],
    ),
    (
        "FlashgatePurchase5xxRate",
        "critical",
        &[
            "origin_purchases_total",
            r#"outcome=~"unavailable|internal""#,
            "origin_purchase_requests_total",
        ],
    ),
    (
        "FlashgateLockQuorumUnreachable",
        "critical",
        &[r#"redlock_acquire_total{result="unreachable"}"#, "> 0"],
    ),
    ("FlashgateRequestsShed", "warning", &["origin_shed_total"]),
    (
        "FlashgateWebhookSignatureFailures",
        "warning",
        &["origin_webhook_signature_failures_total"],
    ),
    (
        "FlashgatePaymentEventsFailing",
        "warning",
        &["origin_payment_events_total", "unavailable"],
    ),
    (
        "FlashgateHoldExpiryLagging",
        "warning",
        &[
            "histogram_quantile(0.99",
            "origin_hold_expiry_lag_seconds_bucket",
            "> 2",
        ],
    ),
    (
        "FlashgateHoldsStuck",
        "critical",
        &["origin_holds_overdue", "> 0"],
    ),
    (
        "FlashgateRefundDue",
        "warning",
        &["origin_refund_due_total", "> 0"],
    ),
];

/// What the Lock Health dashboard must show, as the series it queries.
const DASHBOARD_MUST_QUERY: [&str; 20] = [
    "redlock_acquire_total",
    "redlock_acquire_seconds_bucket",
    "redlock_node_errors_total",
    "redlock_extend_failures_total",
    "redlock_release_validity_remaining_seconds_bucket",
    "origin_purchases_total",
    "origin_batch_size_bucket",
    "origin_queue_depth",
    "origin_lock_wait_seconds_bucket",
    "origin_shed_total",
    "origin_sold_out_fast_path_total",
    "origin_db_transaction_seconds_bucket",
    "origin_reconcile_discrepancies",
    "origin_payment_events_total",
    "origin_webhook_signature_failures_total",
    "origin_holds_active",
    "origin_holds_overdue",
    "origin_hold_expiry_lag_seconds_bucket",
    "origin_returns_total",
    "origin_refund_due_total",
];

fn repo_file(relative: &str) -> String {
    let path: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn yaml_file(relative: &str) -> Value {
    serde_norway::from_str(&repo_file(relative))
        .unwrap_or_else(|e| panic!("{relative} is not valid YAML: {e}"))
}

fn json_file(relative: &str) -> Value {
    serde_json::from_str(&repo_file(relative))
        .unwrap_or_else(|e| panic!("{relative} is not valid JSON: {e}"))
}

fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Every rule of a Prometheus rule file.
fn rules(file: &Value) -> Vec<&Value> {
    file["groups"]
        .as_array()
        .expect("rule file has groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("group has rules"))
        .collect()
}

/// A Prometheus duration such as `5m`, `1h30m`, `0s`.
fn is_prometheus_duration(s: &str) -> bool {
    let mut rest = s;
    if rest.is_empty() {
        return false;
    }
    while !rest.is_empty() {
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if digits == 0 {
            return false;
        }
        rest = &rest[digits..];
        let Some(unit) = ["ms", "s", "m", "h", "d", "w", "y"]
            .into_iter()
            .find(|u| rest.starts_with(u))
        else {
            return false;
        };
        rest = &rest[unit.len()..];
    }
    true
}

/// The PromQL expressions of the alert rules.
fn alert_exprs() -> Vec<(String, String)> {
    let file = yaml_file("deploy/prometheus/alerts.yml");
    rules(&file)
        .into_iter()
        .map(|r| {
            let name = str_field(r, "alert")
                .or_else(|| str_field(r, "record"))
                .unwrap_or("?");
            let expr = str_field(r, "expr").unwrap_or("");
            (format!("alerts.yml {name}"), expr.to_owned())
        })
        .collect()
}

/// The PromQL expressions of the dashboard: every panel target and every templating query.
fn dashboard_exprs(dashboard: &Value) -> Vec<(String, String)> {
    fn walk(v: &Value, title: &str, out: &mut Vec<(String, String)>) {
        match v {
            Value::Object(map) => {
                let title = str_field(v, "title").unwrap_or(title).to_owned();
                for (k, child) in map {
                    match (k.as_str(), child) {
                        ("expr", Value::String(e)) => {
                            out.push((format!("lock-health.json panel {title:?}"), e.clone()));
                        }
                        _ => walk(child, &title, out),
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|i| walk(i, title, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], "", &mut out);
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let name = str_field(var, "name").unwrap_or("?");
        let queries = [
            var.get("definition"),
            var.get("query"),
            var.get("query").and_then(|q| q.get("query")),
        ];
        for q in queries.into_iter().flatten().filter_map(Value::as_str) {
            out.push((format!("lock-health.json variable ${name}"), q.to_owned()));
        }
    }
    out
}

/// A metric (or label) name referenced by a PromQL expression, with the label names of the
/// selector that follows it.
#[derive(Debug, PartialEq)]
struct Selector {
    metric: String,
    labels: Vec<String>,
}

/// What one PromQL expression names: the `origin_*`/`redlock_*` metrics with their selector
/// labels, and the labels of `by`/`without`/`on`/`ignoring` clauses. String literals and
/// comments are skipped; identifiers are `[a-zA-Z_:][a-zA-Z0-9_:]*`.
#[derive(Debug, Default)]
struct Referenced {
    selectors: Vec<Selector>,
    grouping: Vec<String>,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Index just past the string literal that starts at `i` (`"…"`, `'…'` or `` `…` ``).
fn skip_string(chars: &[char], i: usize) -> usize {
    let quote = chars[i];
    let mut j = i + 1;
    while j < chars.len() && chars[j] != quote {
        if chars[j] == '\\' && quote != '`' {
            j += 1;
        }
        j += 1;
    }
    j + 1
}

fn skip_space(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() && chars[i].is_whitespace() {
        i += 1;
    }
    i
}

fn read_ident(chars: &[char], i: usize) -> (String, usize) {
    let mut j = i;
    while j < chars.len() && is_ident_char(chars[j]) {
        j += 1;
    }
    (chars[i..j].iter().collect(), j)
}

/// Label names of the `{…}` matcher list that starts at `i`; returns them and the index past `}`.
fn matcher_labels(chars: &[char], mut i: usize) -> (Vec<String>, usize) {
    let mut labels = Vec::new();
    i += 1; // '{'
    loop {
        i = skip_space(chars, i);
        match chars.get(i) {
            None => return (labels, i),
            Some('}') => return (labels, i + 1),
            Some(',') => i += 1,
            Some('"' | '\'' | '`') => i = skip_string(chars, i),
            Some(&c) if is_ident_start(c) => {
                let (name, j) = read_ident(chars, i);
                labels.push(name);
                i = skip_space(chars, j);
                // operator, then the value
                while i < chars.len() && matches!(chars[i], '=' | '!' | '~') {
                    i += 1;
                }
                i = skip_space(chars, i);
                if matches!(chars.get(i), Some('"' | '\'' | '`')) {
                    i = skip_string(chars, i);
                }
            }
            Some(_) => i += 1,
        }
    }
}

fn referenced(expr: &str) -> Referenced {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Referenced::default();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if matches!(c, '"' | '\'' | '`') {
            i = skip_string(&chars, i);
        } else if c == '#' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c.is_ascii_digit() || c == '$' {
            // a number, a duration, or a Grafana variable: not a name
            i += 1;
            while i < chars.len() && is_ident_char(chars[i]) {
                i += 1;
            }
        } else if is_ident_start(c) {
            let (name, j) = read_ident(&chars, i);
            let k = skip_space(&chars, j);
            i = j;
            if matches!(name.as_str(), "by" | "without" | "on" | "ignoring")
                && chars.get(k) == Some(&'(')
            {
                let mut m = k + 1;
                while m < chars.len() && chars[m] != ')' {
                    if is_ident_start(chars[m]) {
                        let (label, n) = read_ident(&chars, m);
                        out.grouping.push(label);
                        m = n;
                    } else {
                        m += 1;
                    }
                }
                i = m + 1;
            } else if name.starts_with("origin_") || name.starts_with("redlock_") {
                let (labels, next) = if chars.get(k) == Some(&'{') {
                    matcher_labels(&chars, k)
                } else {
                    (Vec::new(), j)
                };
                out.selectors.push(Selector {
                    metric: name,
                    labels,
                });
                i = next;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// What a Prometheus text exposition exports: series names (those a family's type implies,
/// whether or not a sample exists yet) and, per series name, the label names of its samples.
#[derive(Debug, Default)]
struct Exposition {
    names: BTreeSet<String>,
    labels: BTreeMap<String, BTreeSet<String>>,
}

fn parse_exposition(text: &str) -> Exposition {
    let mut out = Exposition::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (Some(family), Some(kind)) = (parts.next(), parts.next()) else {
                continue;
            };
            let suffixes: &[&str] = match kind {
                "counter" if family.ends_with("_total") => &[""],
                "counter" => &["_total"],
                "histogram" | "gaugehistogram" => &["_bucket", "_sum", "_count"],
                "summary" => &["", "_sum", "_count"],
                "info" => &["_info"],
                _ => &[""],
            };
            for s in suffixes {
                out.names.insert(format!("{family}{s}"));
            }
        } else if !line.starts_with('#') && !line.trim().is_empty() {
            let chars: Vec<char> = line.chars().collect();
            let (name, j) = read_ident(&chars, 0);
            let labels = if chars.get(j) == Some(&'{') {
                matcher_labels(&chars, j).0
            } else {
                Vec::new()
            };
            out.names.insert(name.clone());
            out.labels.entry(name).or_default().extend(labels);
        }
    }
    out
}

/// Every problem with the metrics and labels `exprs` name, checked against `exposition`.
fn problems(exprs: &[(String, String)], exposition: &Exposition) -> Vec<String> {
    let mut problems = Vec::new();
    for (where_, expr) in exprs {
        let refs = referenced(expr);
        let mut known_labels: BTreeSet<&str> = IMPLICIT_LABELS.into_iter().collect();
        let mut all_have_samples = true;
        for sel in &refs.selectors {
            if !exposition.names.contains(&sel.metric) {
                problems.push(format!(
                    "{where_}: {} is not exported by the origin (expr: {expr})",
                    sel.metric
                ));
                continue;
            }
            let Some(labels) = exposition.labels.get(&sel.metric) else {
                // Declared, no series yet (e.g. a labelled family nothing has counted).
                all_have_samples = false;
                continue;
            };
            known_labels.extend(labels.iter().map(String::as_str));
            for label in &sel.labels {
                if !labels.contains(label) && !IMPLICIT_LABELS.contains(&label.as_str()) {
                    problems.push(format!(
                        "{where_}: {} has no label {label:?} (it has {labels:?})",
                        sel.metric
                    ));
                }
            }
        }
        if all_have_samples {
            for label in &refs.grouping {
                if !known_labels.contains(label.as_str()) {
                    problems.push(format!(
                        "{where_}: grouping label {label:?} is on none of its metrics (expr: {expr})"
                    ));
                }
            }
        }
    }
    problems
}

#[test]
fn alert_rules_have_what_operations_need() {
    let file = yaml_file("deploy/prometheus/alerts.yml");
    let all = rules(&file);
    let mut seen = BTreeSet::new();
    for rule in &all {
        let name = str_field(rule, "alert").expect("every rule of alerts.yml is an alert");
        assert!(seen.insert(name), "alert {name} defined twice");
        let expr = str_field(rule, "expr").unwrap_or("");
        assert!(!expr.trim().is_empty(), "{name}: empty expr");
        let for_ = str_field(rule, "for").unwrap_or_else(|| panic!("{name}: no `for`"));
        assert!(is_prometheus_duration(for_), "{name}: bad `for` {for_:?}");
        let severity = str_field(&rule["labels"], "severity").unwrap_or("");
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{name}: severity {severity:?}"
        );
        for key in ["summary", "description"] {
            let text = str_field(&rule["annotations"], key).unwrap_or("");
            assert!(!text.trim().is_empty(), "{name}: no annotations.{key}");
        }
    }
    for (name, severity, fragments) in REQUIRED_ALERTS {
        let rule = all
            .iter()
            .find(|r| str_field(r, "alert") == Some(name))
            .unwrap_or_else(|| panic!("alerts.yml has no {name}"));
        assert_eq!(
            str_field(&rule["labels"], "severity"),
            Some(severity),
            "{name}"
        );
        let expr = str_field(rule, "expr").unwrap_or("");
        for f in fragments {
            assert!(
                expr.contains(f),
                "{name}: expr does not contain {f:?}: {expr}"
            );
        }
    }
    let quorum = all
        .iter()
        .find(|r| str_field(r, "alert") == Some("FlashgateLockQuorumUnreachable"))
        .expect("quorum alert");
    assert_eq!(str_field(quorum, "for"), Some("1m"));

    // Prometheus loads these rules and scrapes both origins; the unit tests load them too.
    let prom = yaml_file("deploy/prometheus/prometheus.yml");
    assert_eq!(prom["rule_files"], serde_json::json!(["alerts.yml"]));
    let targets: BTreeSet<&str> = prom["scrape_configs"]
        .as_array()
        .expect("scrape_configs")
        .iter()
        .flat_map(|c| c["static_configs"].as_array().into_iter().flatten())
        .flat_map(|s| s["targets"].as_array().into_iter().flatten())
        .filter_map(Value::as_str)
        .collect();
    assert!(
        targets.contains("origin-1:8080") && targets.contains("origin-2:8080"),
        "{targets:?}"
    );
    let unit = yaml_file("deploy/prometheus/alerts.test.yml");
    assert_eq!(unit["rule_files"], serde_json::json!(["alerts.yml"]));
}

#[test]
fn dashboard_covers_lock_health_on_the_provisioned_datasource() {
    let dashboard = json_file("deploy/grafana/lock-health.json");
    assert_eq!(dashboard["title"], "Flashgate — Lock Health");
    let datasources = yaml_file("deploy/grafana/provisioning/datasources/prometheus.yml");
    let uids: BTreeSet<&str> = datasources["datasources"]
        .as_array()
        .expect("datasources")
        .iter()
        .filter_map(|d| str_field(d, "uid"))
        .collect();
    let panels = dashboard["panels"].as_array().expect("panels");
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        let title = str_field(panel, "title").unwrap_or("?");
        let uid = str_field(&panel["datasource"], "uid").unwrap_or("");
        assert!(
            uids.contains(uid),
            "panel {title:?}: datasource {uid:?} is not provisioned ({uids:?})"
        );
        let targets = panel["targets"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default();
        assert!(
            !targets.is_empty()
                && targets
                    .iter()
                    .all(|t| str_field(t, "expr").is_some_and(|e| !e.is_empty())),
            "panel {title:?} has no query"
        );
    }
    let named: BTreeSet<String> = dashboard_exprs(&dashboard)
        .iter()
        .flat_map(|(_, e)| referenced(e).selectors)
        .map(|s| s.metric)
        .collect();
    for metric in DASHBOARD_MUST_QUERY {
        assert!(named.contains(metric), "no panel queries {metric}");
    }
    let provider = yaml_file("deploy/grafana/provisioning/dashboards/flashgate.yml");
    assert_eq!(provider["providers"][0]["type"], "file");
}

/// The checker itself: a typo, a wrong suffix or an unknown label must be caught.
#[test]
fn metric_check_rejects_typos_wrong_suffixes_and_labels() {
    let exposition = parse_exposition(
        "# HELP redlock_acquire Calls.\n\
         # TYPE redlock_acquire counter\n\
         redlock_acquire_total{result=\"acquired\"} 1\n\
         # TYPE redlock_node_errors counter\n\
         # TYPE redlock_acquire_seconds histogram\n\
         redlock_acquire_seconds_sum 0.1\n\
         redlock_acquire_seconds_count 1\n\
         redlock_acquire_seconds_bucket{le=\"0.5\"} 1\n\
         # TYPE origin_queue_depth gauge\n\
         origin_queue_depth 0\n\
         # EOF\n",
    );
    let check = |expr: &str| problems(&[("t".to_owned(), expr.to_owned())], &exposition);
    // Fine: counter with _total, histogram _bucket, gauge as is, declared family, grouping
    // labels that exist, names inside strings ignored.
    for ok in [
        r#"sum by (result) (rate(redlock_acquire_total{result!="acquired", instance=~"$instance"}[$__rate_interval]))"#,
        "histogram_quantile(0.99, sum by (le, instance) (rate(redlock_acquire_seconds_bucket[5m]))) > 0.1",
        "origin_queue_depth / 1e-9",
        "sum by (node) (rate(redlock_node_errors_total[5m]))",
        r#"label_values(origin_queue_depth, instance)"#,
        r#"up{job="origin_typo_in_a_string"}"#,
    ] {
        assert_eq!(check(ok), Vec::<String>::new(), "{ok}");
    }
    for bad in [
        "rate(redlock_acquire_totl[5m])",
        "rate(redlock_acquire[5m])",
        "redlock_acquire_seconds",
        "origin_queue_depth_bucket",
        "origin_queue_depth_total",
        r#"redlock_acquire_total{reslt="acquired"}"#,
        "sum by (outcome) (rate(redlock_acquire_total[5m]))",
    ] {
        assert!(!check(bad).is_empty(), "not caught: {bad}");
    }
    assert!(is_prometheus_duration("1h30m") && is_prometheus_duration("0s"));
    assert!(
        !is_prometheus_duration("5")
            && !is_prometheus_duration("m5")
            && !is_prometheus_duration("")
    );
}

fn now() -> i64 {
    shared::Timestamp::now().unix_secs()
}

#[sqlx::test(migrations = "./migrations")]
async fn every_metric_in_dashboard_and_alerts_is_exported_by_a_live_origin(pool: PgPool) {
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&pool)
        .await
        .expect("db name");
    let env: BTreeMap<&str, String> = [
        ("DATABASE_URL", "postgres://unused-in-tests".to_owned()),
        // Three Redlock nodes: two independent keyspaces (databases 0 and 1) of the local Redis
        // and one node nothing listens on, so that a quorum answers and the per-node error
        // series (`redlock_node_errors_total{node="2"}`) exists too.
        (
            "REDIS_URLS",
            "redis://127.0.0.1:6379/0,redis://127.0.0.1:6379/1,redis://127.0.0.1:1/0".to_owned(),
        ),
        ("LISTEN_ADDR", "127.0.0.1:0".to_owned()),
        ("EDGE_SHARED_SECRET", EDGE_SECRET.to_owned()),
        ("ADMIN_TOKEN", ADMIN_TOKEN.to_owned()),
        ("RUN_MIGRATIONS", "false".to_owned()),
        ("REDIS_KEY_PREFIX", format!("test-deploy:{db}")),
        ("PAYMENT_WEBHOOK_SECRETS", WEBHOOK_SECRET.to_owned()),
    ]
    .into_iter()
    .collect();
    let settings = Settings::from_lookup(|k| env.get(k).cloned()).expect("valid settings");
    let app = Application::build_with_pool(settings, pool)
        .await
        .expect("app builds");
    let base = format!("http://127.0.0.1:{}", app.port());
    tokio::spawn(app.run_until(std::future::pending()));
    let client = reqwest::Client::new();

    // Ready once Postgres and the Redlock quorum answer (a Redis node seen for the first time
    // stays out of the quorum for one lock TTL).
    let start = Instant::now();
    loop {
        let ready = client
            .get(format!("{base}/readyz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200);
        if ready {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "origin not ready within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // One sale and one purchase, so that the labelled series exist.
    let res = client
        .put(format!("{base}/v1/admin/skus/DEPLOY-1"))
        .header("authorization", format!("Bearer {ADMIN_TOKEN}"))
        .body(r#"{"name":"Deploy check","price_cents":100,"stock":5,"max_per_user":2}"#)
        .send()
        .await
        .expect("admin put");
    assert_eq!(res.status(), 200, "{:?}", res.text().await);
    let body = br#"{"sku":"DEPLOY-1","qty":1}"#;
    let parts = SignedParts {
        method: "POST",
        path: "/v1/purchases",
        user: "deploy-user",
        idempotency_key: "deploy-key-1",
        body,
    };
    let res = client
        .post(format!("{base}/v1/purchases"))
        .header("flashgate-user", "deploy-user")
        .header("idempotency-key", "deploy-key-1")
        .header(
            "flashgate-signature",
            signing::sign(&shared::SecretRing::single(EDGE_SECRET), now(), &parts),
        )
        .body(body.to_vec())
        .send()
        .await
        .expect("purchase");
    assert_eq!(res.status(), 201, "{:?}", res.text().await);

    // A payment event (of a type the origin ignores) and a delivery with a forged signature:
    // the webhook's labelled series.
    let event = br#"{"id":"evt_deploy_1","type":"customer.created","data":{"object":{}}}"#;
    for (signature, status) in [
        (
            origin::payments::signature::sign(WEBHOOK_SECRET, now(), event),
            200,
        ),
        (
            origin::payments::signature::sign("whsec_forged_0123456789", now(), event),
            400,
        ),
    ] {
        let res = client
            .post(format!("{base}/v1/payments/stripe"))
            .header("stripe-signature", signature)
            .body(event.to_vec())
            .send()
            .await
            .expect("webhook");
        assert_eq!(res.status(), status, "{:?}", res.text().await);
    }

    let res = client
        .get(format!("{base}/metrics"))
        .send()
        .await
        .expect("metrics");
    assert_eq!(res.status(), 200);
    let text = res.text().await.expect("metrics text");
    let exposition = parse_exposition(&text);
    // The labelled series the purchase created, and the exposition the check relies on.
    assert!(
        text.contains(r#"redlock_acquire_total{result="acquired"}"#),
        "{text}"
    );
    assert!(
        text.contains(r#"origin_purchases_total{outcome="created"}"#),
        "{text}"
    );

    let dashboard = json_file("deploy/grafana/lock-health.json");
    let mut exprs = dashboard_exprs(&dashboard);
    exprs.extend(alert_exprs());
    let named: BTreeSet<String> = exprs
        .iter()
        .flat_map(|(_, e)| referenced(e).selectors)
        .map(|s| s.metric)
        .collect();
    assert!(
        named.len() >= DASHBOARD_MUST_QUERY.len(),
        "too few metrics found: {named:?}"
    );
    let mut problems = problems(&exprs, &exposition);
    // Every family named has series in this exposition (the purchase and the dead node create
    // the labelled ones), so a name is checked against real samples, not only a `# TYPE` line.
    problems.extend(
        named
            .iter()
            .filter(|m| exposition.names.contains(*m) && !exposition.labels.contains_key(*m))
            .map(|m| format!("{m}: declared but no series in the live exposition")),
    );
    assert!(
        problems.is_empty(),
        "queries name what the origin does not export:\n{}\n\nexported: {:?}",
        problems.join("\n"),
        exposition.names
    );
}
