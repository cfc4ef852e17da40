//! `bench holds`: a flash sale of holds that expire, paid by signed Stripe-style webhooks.
//!
//! One private cluster (M origins over N Redis nodes, `PAYMENT_WEBHOOK_SECRETS` set), two sales
//! in the same run, one after the other:
//!
//! 1. the hot SKU without holds (`bench compare`'s combiner sale, [`sale::run`]): the throughput
//!    to beat;
//! 2. the same SKU shape with `hold_secs`: every 201 is a hold. A share (`--abandon`, 30 %) of
//!    the holds is abandoned; the rest are paid by a `payment_intent.succeeded` event sent by the
//!    bench to `POST /v1/payments/stripe`, signed as Stripe signs (`Stripe-Signature`, HMAC-SHA256
//!    of `"{t}.{body}"`), after a random delay of up to `--pay-within-ms`. Shoppers keep buying —
//!    a `sold_out` while holds are outstanding only means "not yet" — until every unit is paid.
//!
//! Measured and checked: every abandoned hold expired and its unit was sold again before the
//! sale ended (units paid == stock; 201s == stock + expired holds), the expiry lag (from each
//! expired order's `expires_at` to the write of its expiry, in the database; and the origins'
//! `origin_hold_expiry_lag_seconds` histogram), no oversell, the books balanced at every sample
//! taken during the sale (`initial_stock = stock + units in held, confirmed and paid orders`,
//! read in one statement every `--sample-ms`), and the hot-SKU throughput with holds (the
//! `stock`-th 201 over its time) against the sale without holds.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use hdrhistogram::Histogram;
use hmac::{Hmac, Mac};
use rand::Rng;
use sha2::Sha256;
use shared::SecretRing;
use shared::signing::{self, SignedParts};
use tokio::sync::Mutex;

use crate::cluster::{self, Cluster, Server};
use crate::sale::{self, SaleResult};
use crate::{SaleArgs, books};

/// The signing secret the cluster's origins accept (`PAYMENT_WEBHOOK_SECRETS`).
pub(crate) const WEBHOOK_SECRET: &str = cluster::WEBHOOK_SECRET;

#[derive(Args, Debug)]
pub(crate) struct HoldsArgs {
    /// Concurrent shoppers.
    #[arg(long, short = 'c', default_value_t = 500)]
    concurrency: usize,
    /// Units on sale (both sales).
    #[arg(long, default_value_t = 10_000)]
    stock: i64,
    /// `hold_secs` of the SKU of the second sale.
    #[arg(long, default_value_t = 3)]
    hold_secs: u64,
    /// Share of the holds left unpaid (0..1).
    #[arg(long, default_value_t = 0.3)]
    abandon: f64,
    /// A paid hold is paid after a uniform random delay of up to this.
    #[arg(long, default_value_t = 1000)]
    pay_within_ms: u64,
    /// Stop a sale after this long even if not every unit is paid (seconds).
    #[arg(long, default_value_t = 120)]
    max_seconds: u64,
    /// How often the books are sampled during the holds sale.
    #[arg(long, default_value_t = 100)]
    sample_ms: u64,
    /// Origin processes.
    #[arg(long, default_value_t = 2)]
    origins: usize,
    /// Independent Redis nodes.
    #[arg(long, default_value_t = 3)]
    redis_nodes: usize,
    /// The origin binary (build it with `cargo build --release -p origin`).
    #[arg(long, default_value = "target/release/origin")]
    origin_bin: PathBuf,
    /// Postgres server URL (a fresh database is created per run).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    postgres: String,
}

/// What the holds sale measured.
#[derive(Debug, Default)]
struct HoldsResult {
    elapsed: Duration,
    created: u64,
    /// When the `stock`-th 201 came (the first pass over the stock).
    first_pass_at: Option<Duration>,
    abandoned: u64,
    paid: u64,
    webhooks: u64,
    webhook_retries: u64,
    webhook_latency: Option<Histogram<u64>>,
    purchase_latency: Option<Histogram<u64>>,
    statuses: BTreeMap<String, u64>,
    samples: u64,
    violations: Vec<String>,
    expired: i64,
    orders_by_status: BTreeMap<String, i64>,
    lag_p50: Option<f64>,
    lag_p99: Option<f64>,
    lag_max: Option<f64>,
    metric_lag_p99: Option<f64>,
}

struct Shared {
    client: reqwest::Client,
    targets: Vec<String>,
    ring: SecretRing,
    sku: String,
    stock: u64,
    abandon: f64,
    pay_within: Duration,
    start: Instant,
    stop: AtomicBool,
    created: AtomicU64,
    first_pass_micros: AtomicU64,
    abandoned: AtomicU64,
    paid: AtomicU64,
    webhooks: AtomicU64,
    webhook_retries: AtomicU64,
    purchase_latency: Mutex<Histogram<u64>>,
    webhook_latency: Mutex<Histogram<u64>>,
    statuses: Mutex<BTreeMap<String, u64>>,
    payers: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// `Stripe-Signature` for `body` at `t`, as Stripe computes it.
pub(crate) fn stripe_signature(secret: &str, t: i64, body: &[u8]) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|_| unreachable!("any key length"));
    mac.update(t.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("t={t},v1={}", hex_lower(&mac.finalize().into_bytes()))
}

fn hex_lower(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Runs `bench holds`; `Ok(true)` when every check passed.
pub(crate) async fn run(args: &HoldsArgs, command_line: &str) -> anyhow::Result<bool> {
    anyhow::ensure!(args.origins > 0, "--origins must be at least 1");
    anyhow::ensure!(
        (0.0..1.0).contains(&args.abandon),
        "--abandon must be in [0, 1)"
    );
    let server = Server::Origin {
        bin: &args.origin_bin,
        single_flight: true,
        redis_nodes: args.redis_nodes,
    };
    eprintln!(
        "== starting {} origin(s) over {} Redis node(s)",
        args.origins, args.redis_nodes
    );
    let cluster = Cluster::start(server, &args.postgres, args.origins).await?;
    let outcome = measure(args, &cluster).await;
    let passed = outcome.as_ref().is_ok_and(|(_, _, ok)| *ok);
    cluster.stop(passed).await;
    let (plain, holds, ok) = outcome?;
    print_report(args, command_line, &plain, &holds);
    Ok(ok)
}

async fn measure(
    args: &HoldsArgs,
    cluster: &Cluster,
) -> anyhow::Result<(SaleResult, HoldsResult, bool)> {
    let ring = SecretRing::single(cluster::EDGE_SECRET);
    let auth = sale::Auth::Edge(ring.clone());
    let sale_args = SaleArgs {
        concurrency: args.concurrency,
        stock: args.stock,
        max_per_user: 1_000_000,
        max_seconds: args.max_seconds,
        sku: None,
        out_dir: std::env::temp_dir(),
        label: "no-holds".into(),
        cold_connections: false,
        samples_csv: false,
    };
    let endpoints = sale::Endpoints {
        targets: &cluster.origin_urls,
        admin_url: &cluster.origin_urls[0],
        admin_token: cluster::ADMIN_TOKEN,
        auth: &auth,
        database_url: &cluster.database_url,
        books: sale::Books::Origin,
    };
    eprintln!("== sale 1: the hot SKU without holds");
    let plain = sale::run(&sale_args, &endpoints, Some("no holds"), None).await?;
    eprintln!("== sale 2: the same with hold_secs = {}", args.hold_secs);
    let holds = holds_sale(args, cluster, ring).await?;
    let ok = plain.invariants.ok() && holds.violations.is_empty();
    if !plain.invariants.ok() {
        for v in &plain.invariants.violations {
            eprintln!("VIOLATION (no holds): {v}");
        }
    }
    for v in &holds.violations {
        eprintln!("VIOLATION (holds): {v}");
    }
    Ok((plain, holds, ok))
}

async fn holds_sale(
    args: &HoldsArgs,
    cluster: &Cluster,
    ring: SecretRing,
) -> anyhow::Result<HoldsResult> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency * 2)
        .timeout(Duration::from_secs(30))
        .build()?;
    let sku = format!("HOLDS-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let res = client
        .put(format!("{}/v1/admin/skus/{sku}", cluster.origin_urls[0]))
        .bearer_auth(cluster::ADMIN_TOKEN)
        .json(&serde_json::json!({"name": "Benchmark hold", "price_cents": 100, "stock": args.stock, "max_per_user": 1_000_000, "hold_secs": args.hold_secs}))
        .send()
        .await
        .context("creating the hold SKU")?;
    anyhow::ensure!(
        res.status().is_success(),
        "creating the hold SKU: {} {}",
        res.status(),
        res.text().await.unwrap_or_default()
    );
    let generation = books::current_generation(&cluster.database_url, &sku).await?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&cluster.database_url)
        .await
        .context("connecting for the samples")?;
    let lag_before = scrape_lag(&client, &cluster.origin_urls).await;

    let shared = Arc::new(Shared {
        client,
        targets: cluster.origin_urls.clone(),
        ring,
        sku: sku.clone(),
        stock: u64::try_from(args.stock).unwrap_or(0),
        abandon: args.abandon,
        pay_within: Duration::from_millis(args.pay_within_ms),
        start: Instant::now(),
        stop: AtomicBool::new(false),
        created: AtomicU64::new(0),
        first_pass_micros: AtomicU64::new(0),
        abandoned: AtomicU64::new(0),
        paid: AtomicU64::new(0),
        webhooks: AtomicU64::new(0),
        webhook_retries: AtomicU64::new(0),
        purchase_latency: Mutex::new(Histogram::new(3)?),
        webhook_latency: Mutex::new(Histogram::new(3)?),
        statuses: Mutex::new(BTreeMap::new()),
        payers: Mutex::new(Vec::new()),
    });
    // The books, sampled during the whole sale.
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn(sample_books(
        pool.clone(),
        sku.clone(),
        generation,
        Duration::from_millis(args.sample_ms),
        sampling.clone(),
    ));
    let shoppers: Vec<_> = (0..args.concurrency)
        .map(|i| tokio::spawn(shopper(shared.clone(), i)))
        .collect();
    let all = futures::future::join_all(shoppers);
    tokio::pin!(all);
    let deadline = tokio::time::sleep(Duration::from_secs(args.max_seconds));
    tokio::pin!(deadline);
    tokio::select! {
        _ = &mut all => {}
        () = &mut deadline => {
            shared.stop.store(true, Ordering::Relaxed);
            eprintln!("time cap reached; stopping shoppers");
            all.await;
        }
    }
    let payers = std::mem::take(&mut *shared.payers.lock().await);
    futures::future::join_all(payers).await;
    let elapsed = shared.start.elapsed();
    sampling.store(false, Ordering::Relaxed);
    let (samples, mut violations) = sampler.await.context("the sampler")??;
    let lag_after = scrape_lag(&shared.client, &cluster.origin_urls).await;

    let rows: Vec<(String, i64, i64)> = sqlx::query_as(
        "SELECT status, COUNT(*), COALESCE(SUM(qty), 0)::BIGINT FROM orders
         WHERE sku = $1 AND generation = $2 GROUP BY status ORDER BY status",
    )
    .bind(&sku)
    .bind(generation)
    .fetch_all(&pool)
    .await?;
    let orders_by_status: BTreeMap<String, i64> =
        rows.iter().map(|(s, n, _)| (s.clone(), *n)).collect();
    let units = |status: &str| {
        rows.iter()
            .find(|(s, _, _)| s == status)
            .map_or(0, |(_, _, u)| *u)
    };
    let expired = *orders_by_status.get("expired").unwrap_or(&0);
    let created = shared.created.load(Ordering::Relaxed);
    let abandoned = shared.abandoned.load(Ordering::Relaxed);
    let paid = shared.paid.load(Ordering::Relaxed);
    let stock = args.stock;
    let (initial, left): (i64, i64) =
        sqlx::query_as("SELECT initial_stock, stock FROM skus WHERE sku = $1")
            .bind(&sku)
            .fetch_one(&pool)
            .await?;
    if units("paid") != stock || left != 0 || initial != stock {
        violations.push(format!(
            "not every unit was paid before the sale ended: {} paid of {stock}, {left} left on sale",
            units("paid")
        ));
    }
    if units("paid") > stock {
        violations.push(format!("oversell: {} units paid of {stock}", units("paid")));
    }
    if u64::try_from(expired).unwrap_or(0) != abandoned || units("held") != 0 {
        violations.push(format!(
            "{abandoned} holds abandoned, {expired} expired, {} still held",
            units("held")
        ));
    }
    if i64::try_from(created).unwrap_or(-1) != stock + expired {
        violations.push(format!(
            "{created} holds created, want the stock {stock} + the {expired} expired units sold again"
        ));
    }
    for bad in ["cancelled", "refunded", "refund_due", "confirmed"] {
        if units(bad) != 0 {
            violations.push(format!("{} units in {bad} orders", units(bad)));
        }
    }
    let lag: (Option<f64>, Option<f64>, Option<f64>) = sqlx::query_as(
        "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY l), percentile_cont(0.99) WITHIN GROUP (ORDER BY l), MAX(l)
         FROM (SELECT EXTRACT(EPOCH FROM updated_at - expires_at)::float8 AS l FROM orders
               WHERE sku = $1 AND generation = $2 AND status = 'expired') t",
    )
    .bind(&sku)
    .bind(generation)
    .fetch_one(&pool)
    .await?;
    let metric_lag_p99 = match (lag_before, lag_after) {
        (Some(b), Some(a)) => histogram_quantile(0.99, &diff(&a, &b)),
        _ => None,
    };
    let statuses = std::mem::take(&mut *shared.statuses.lock().await);
    let purchase_latency = shared.purchase_latency.lock().await.clone();
    let webhook_latency = shared.webhook_latency.lock().await.clone();
    let first = shared.first_pass_micros.load(Ordering::Relaxed);
    Ok(HoldsResult {
        elapsed,
        created,
        first_pass_at: (first > 0).then(|| Duration::from_micros(first)),
        abandoned,
        paid,
        webhooks: shared.webhooks.load(Ordering::Relaxed),
        webhook_retries: shared.webhook_retries.load(Ordering::Relaxed),
        webhook_latency: Some(webhook_latency),
        purchase_latency: Some(purchase_latency),
        statuses,
        samples,
        violations,
        expired,
        orders_by_status,
        lag_p50: lag.0,
        lag_p99: lag.1,
        lag_max: lag.2,
        metric_lag_p99,
    })
}

/// Samples the books of the sale's generation until `running` turns false; the number of
/// samples and every unbalanced one.
async fn sample_books(
    pool: sqlx::PgPool,
    sku: String,
    generation: i64,
    every: Duration,
    running: Arc<AtomicBool>,
) -> anyhow::Result<(u64, Vec<String>)> {
    let mut samples = 0;
    let mut violations = Vec::new();
    let mut tick = tokio::time::interval(every);
    while running.load(Ordering::Relaxed) {
        tick.tick().await;
        // One statement: one snapshot of the SKU row and its orders.
        let (initial, stock, live, written_off): (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT s.initial_stock, s.stock,
                    (SELECT COALESCE(SUM(qty), 0)::BIGINT FROM orders o
                     WHERE o.sku = s.sku AND o.generation = $2
                       AND o.status IN ('held', 'confirmed', 'paid')),
                    s.written_off
             FROM skus s WHERE s.sku = $1",
        )
        .bind(&sku)
        .bind(generation)
        .fetch_one(&pool)
        .await?;
        samples += 1;
        if initial != stock + live + written_off || stock < 0 || live > initial {
            violations.push(format!(
                "sample {samples}: initial {initial} != stock {stock} + held/confirmed/paid {live} + written off {written_off}"
            ));
        }
    }
    Ok((samples, violations))
}

/// One shopper: buys one unit at a time with a fresh key; each 201 is abandoned or handed to a
/// payer. A `sold_out` while units are still unpaid waits and tries again (held units come
/// back when they expire).
async fn shopper(s: Arc<Shared>, i: usize) {
    let user = format!("holder-{i}");
    let target = &s.targets[i % s.targets.len()];
    let body = format!(r#"{{"sku":"{}","qty":1}}"#, s.sku);
    while !s.stop.load(Ordering::Relaxed) && s.paid.load(Ordering::Relaxed) < s.stock {
        let key = uuid::Uuid::new_v4().to_string();
        loop {
            if s.stop.load(Ordering::Relaxed) {
                return;
            }
            let parts = SignedParts {
                method: "POST",
                path: "/v1/purchases",
                user: &user,
                idempotency_key: &key,
                body: body.as_bytes(),
            };
            let req = s
                .client
                .post(format!("{target}/v1/purchases"))
                .header("idempotency-key", &key)
                .header("flashgate-user", &user)
                .header(
                    "flashgate-signature",
                    signing::sign(&s.ring, now_unix(), &parts),
                )
                .body(body.clone());
            let t0 = Instant::now();
            let result = req.send().await;
            let _ = s.purchase_latency.lock().await.record(micros(t0.elapsed()));
            let (status, retry_after, json) = match result {
                Ok(res) => {
                    let status = res.status().as_u16();
                    let retry_after = res
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.parse::<u64>().ok());
                    let json: serde_json::Value =
                        res.json().await.unwrap_or(serde_json::Value::Null);
                    (status, retry_after, json)
                }
                Err(_) => (0, None, serde_json::Value::Null),
            };
            let label = match status {
                0 => "transport error".to_owned(),
                201 => "201".to_owned(),
                _ => format!("{status} {}", json["code"].as_str().unwrap_or("?")),
            };
            *s.statuses.lock().await.entry(label).or_insert(0) += 1;
            match status {
                201 => {
                    let n = s.created.fetch_add(1, Ordering::Relaxed) + 1;
                    if n == s.stock {
                        s.first_pass_micros
                            .store(micros(s.start.elapsed()), Ordering::Relaxed);
                    }
                    let Some(order) = json["order_id"].as_str().map(str::to_owned) else {
                        return;
                    };
                    if rand::rng().random_bool(s.abandon) {
                        s.abandoned.fetch_add(1, Ordering::Relaxed);
                    } else {
                        let payer = tokio::spawn(pay(s.clone(), order));
                        s.payers.lock().await.push(payer);
                    }
                    break;
                }
                503 | 429 | 0 => {
                    let wait = retry_after.map_or(Duration::from_millis(200), Duration::from_secs);
                    tokio::time::sleep(wait).await;
                }
                409 if json["code"] == "idempotency_in_flight" => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                // Sold out for now: holds still open may expire and put units back.
                409 if json["code"] == "sold_out" => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    break;
                }
                _ => return,
            }
        }
    }
}

/// Pays `order` after a random delay, with a signed `payment_intent.succeeded`, retrying what
/// was not answered 2xx as Stripe does (sooner).
async fn pay(s: Arc<Shared>, order: String) {
    let delay = rand::rng().random_range(0..=s.pay_within.as_millis() as u64);
    tokio::time::sleep(Duration::from_millis(delay)).await;
    let n = s.webhooks.fetch_add(1, Ordering::Relaxed);
    let body = serde_json::to_vec(&serde_json::json!({
        "id": format!("evt_bench_{}", uuid::Uuid::new_v4().simple()),
        "object": "event",
        "type": "payment_intent.succeeded",
        "created": now_unix(),
        "livemode": false,
        "data": {"object": {"id": format!("pi_bench_{n}"), "object": "payment_intent", "metadata": {"order_id": order}}},
    }))
    .unwrap_or_default();
    let target = &s.targets[usize::try_from(n).unwrap_or(0) % s.targets.len()];
    // Like Stripe, retry what was not answered 2xx (a 503, a transport error, an answer cut
    // short), backing off: `Retry-After`, doubled per attempt, at most 8 s.
    let mut backoff = Duration::from_secs(1);
    loop {
        let t0 = Instant::now();
        let res = s
            .client
            .post(format!("{target}/v1/payments/stripe"))
            .header("content-type", "application/json")
            .header(
                "stripe-signature",
                stripe_signature(WEBHOOK_SECRET, now_unix(), &body),
            )
            .body(body.clone())
            .send()
            .await;
        let _ = s.webhook_latency.lock().await.record(micros(t0.elapsed()));
        let answered = match res {
            Ok(r) if r.status().is_success() => r.json::<serde_json::Value>().await.ok(),
            Ok(r) if r.status().as_u16() != 503 => {
                *s.statuses
                    .lock()
                    .await
                    .entry(format!("webhook {}", r.status()))
                    .or_insert(0) += 1;
                return;
            }
            _ => None,
        };
        match answered {
            Some(receipt) if receipt["result"] == "applied" => {
                s.paid.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Some(receipt) => {
                *s.statuses
                    .lock()
                    .await
                    .entry(format!("webhook {}", receipt["result"]))
                    .or_insert(0) += 1;
                return;
            }
            None => {
                s.webhook_retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(8));
            }
        }
    }
}

/// `origin_hold_expiry_lag_seconds` buckets (upper bound, cumulative count), summed over the
/// origins; `None` when a target does not export it.
async fn scrape_lag(client: &reqwest::Client, targets: &[String]) -> Option<Vec<(f64, f64)>> {
    let mut total: Vec<(f64, f64)> = Vec::new();
    for t in targets {
        let text = client
            .get(format!("{t}/metrics"))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        for line in text.lines() {
            let Some(rest) = line.strip_prefix("origin_hold_expiry_lag_seconds_bucket{le=\"")
            else {
                continue;
            };
            let Some((le, value)) = rest.split_once("\"} ") else {
                continue;
            };
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            let value: f64 = value.split_whitespace().next()?.parse().ok()?;
            match total.iter_mut().find(|(b, _)| *b == le) {
                Some((_, v)) => *v += value,
                None => total.push((le, value)),
            }
        }
    }
    total.sort_by(|a, b| a.0.total_cmp(&b.0));
    (!total.is_empty()).then_some(total)
}

fn diff(after: &[(f64, f64)], before: &[(f64, f64)]) -> Vec<(f64, f64)> {
    after
        .iter()
        .map(|(le, v)| {
            let b = before
                .iter()
                .find(|(l, _)| l == le)
                .map_or(0.0, |(_, b)| *b);
            (*le, v - b)
        })
        .collect()
}

/// Prometheus' `histogram_quantile` over cumulative buckets (linear within a bucket).
fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(prev.0);
            }
            let within = (rank - prev.1) / (count - prev.1).max(f64::MIN_POSITIVE);
            return Some(prev.0 + (le - prev.0) * within);
        }
        prev = (le, count);
    }
    None
}

fn per_sec(n: i64, d: Option<Duration>) -> f64 {
    match d {
        Some(d) if d > Duration::ZERO => n as f64 / d.as_secs_f64(),
        _ => 0.0,
    }
}

fn ms(h: Option<&Histogram<u64>>, q: f64) -> String {
    h.filter(|h| !h.is_empty()).map_or("-".into(), |h| {
        format!("{:.1}", h.value_at_quantile(q) as f64 / 1000.0)
    })
}

fn print_report(args: &HoldsArgs, command_line: &str, plain: &SaleResult, r: &HoldsResult) {
    let plain_rate = per_sec(args.stock, plain.sell_out_at);
    let holds_rate = per_sec(args.stock, r.first_pass_at);
    let secs = |d: Option<f64>| d.map_or("-".into(), |s| format!("{s:.3}"));
    println!("# bench holds");
    println!("command: {command_line}");
    println!(
        "cluster: {} origin(s), {} Redis node(s); {} shoppers; stock {}; hold_secs {}; {:.0} % of holds abandoned; paid within {} ms by a signed webhook (retried like Stripe: 1 s doubling to 8 s); origins with PAYMENT_WEBHOOK_MAX_CONCURRENCY=8",
        args.origins,
        args.redis_nodes,
        args.concurrency,
        args.stock,
        args.hold_secs,
        args.abandon * 100.0,
        args.pay_within_ms
    );
    println!();
    println!("## hot-SKU throughput (the stock-th 201 over its time)");
    println!(
        "without holds: {:.0} purchases/s ({} units in {:.2} s)",
        plain_rate,
        args.stock,
        plain.sell_out_at.map_or(0.0, |d| d.as_secs_f64())
    );
    println!(
        "with holds:    {:.0} purchases/s ({} holds in {:.2} s, webhooks paying meanwhile)",
        holds_rate,
        args.stock,
        r.first_pass_at.map_or(0.0, |d| d.as_secs_f64())
    );
    if plain_rate > 0.0 {
        println!(
            "ratio:         {:.2} (goal ≥ 0.80)",
            holds_rate / plain_rate
        );
    }
    println!();
    println!("## the holds sale");
    println!("ended after:              {:.2} s", r.elapsed.as_secs_f64());
    println!("holds created (201):      {}", r.created);
    println!("abandoned:                {}", r.abandoned);
    println!("expired (database):       {}", r.expired);
    println!(
        "paid by webhook:          {} (webhooks sent {}, retried {})",
        r.paid, r.webhooks, r.webhook_retries
    );
    println!("orders by status:         {:?}", r.orders_by_status);
    println!(
        "expiry lag (database):    p50 {} s, p99 {} s, max {} s",
        secs(r.lag_p50),
        secs(r.lag_p99),
        secs(r.lag_max)
    );
    println!(
        "expiry lag (origin_hold_expiry_lag_seconds): p99 {} s",
        secs(r.metric_lag_p99)
    );
    println!(
        "purchase latency:         p50 {} ms, p99 {} ms",
        ms(r.purchase_latency.as_ref(), 0.5),
        ms(r.purchase_latency.as_ref(), 0.99)
    );
    println!(
        "webhook latency:          p50 {} ms, p99 {} ms",
        ms(r.webhook_latency.as_ref(), 0.5),
        ms(r.webhook_latency.as_ref(), 0.99)
    );
    println!("answers:                  {:?}", r.statuses);
    println!(
        "books sampled:            {} samples, {} unbalanced",
        r.samples,
        r.violations
            .iter()
            .filter(|v| v.starts_with("sample"))
            .count()
    );
    println!(
        "checks:                   {}",
        if r.violations.is_empty() && plain.invariants.ok() {
            "every abandoned unit sold again and paid before the end, 0 oversell, books balanced at every sample: OK".to_owned()
        } else {
            format!(
                "{} VIOLATION(S) — see stderr",
                r.violations.len() + plain.invariants.violations.len()
            )
        }
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_is_stripes() {
        // printf '1790000000.{}' | openssl dgst -sha256 -hmac whsec_test_0123456789abcdef
        assert_eq!(
            stripe_signature("whsec_test_0123456789abcdef", 1_790_000_000, b"{}"),
            "t=1790000000,v1=d8ce8f9a3d1a74d4b21bddea1c351a73da30d5b39fe47c62996bfac92a491874"
        );
    }

    #[test]
    fn quantiles_interpolate_within_buckets() {
        let b = [
            (0.1, 50.0),
            (0.5, 90.0),
            (1.0, 100.0),
            (f64::INFINITY, 100.0),
        ];
        assert_eq!(histogram_quantile(0.5, &b), Some(0.1));
        let p99 = histogram_quantile(0.99, &b).expect("p99");
        assert!((p99 - 0.95).abs() < 1e-9, "{p99}");
        assert_eq!(histogram_quantile(0.5, &[(1.0, 0.0)]), None);
    }
}
