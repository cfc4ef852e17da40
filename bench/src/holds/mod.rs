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
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use shared::SecretRing;
use tokio::sync::Mutex;

use crate::books;
use crate::cluster::{self, Cluster, Server};
use crate::sale::{self, SaleArgs, SaleResult};

mod args;
mod buyers;
mod cost;
mod report;

pub(crate) use args::HoldsArgs;
use buyers::{Shared, Signer, shopper};
use report::HoldsResult;

/// The signing secret the cluster's origins accept (`PAYMENT_WEBHOOK_SECRETS`).
pub(crate) const WEBHOOK_SECRET: &str = cluster::WEBHOOK_SECRET;

/// Runs `bench holds`; `Ok(true)` when every check passed.
pub(crate) async fn run(args: &HoldsArgs, command_line: &str) -> anyhow::Result<bool> {
    anyhow::ensure!(args.origins > 0, "--origins must be at least 1");
    anyhow::ensure!(
        (0.0..1.0).contains(&args.abandon),
        "--abandon must be in [0, 1)"
    );
    let server = Server::Origin {
        bin: &args.origin_bin,
        one_per_lease: false,
        redis_nodes: args.redis_nodes,
    };
    eprintln!(
        "== starting {} origin(s) over {} Redis node(s)",
        args.origins, args.redis_nodes
    );
    let cluster = Cluster::start(server, &args.postgres, args.origins).await?;
    let outcome = measure(args, &cluster).await;
    let probe = match &outcome {
        Ok(_) if args.probe > 0 => {
            eprintln!("== cost probe: CPU per webhook against CPU per purchase");
            let ring = SecretRing::single(cluster::EDGE_SECRET);
            let rounds = args.probe_rounds.max(1);
            let concurrency = args.probe_concurrency.max(1);
            Some(cost::run(&cluster, &ring, args.probe, rounds, concurrency).await)
        }
        _ => None,
    };
    let passed = outcome.as_ref().is_ok_and(|(_, _, ok)| *ok);
    cluster.stop(passed).await;
    let (plain, holds, ok) = outcome?;
    report::print(args, command_line, &plain, &holds);
    if let Some(probe) = probe {
        cost::print(
            &probe?,
            args.probe,
            args.probe_rounds.max(1),
            args.probe_concurrency.max(1),
        );
    }
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
    let lag_before = report::scrape_lag(&client, &cluster.origin_urls).await;

    let shared = Arc::new(Shared {
        client,
        targets: cluster.origin_urls.clone(),
        webhook_urls: cluster
            .origin_urls
            .iter()
            .map(|t| format!("{t}/v1/payments/stripe"))
            .collect(),
        signer: Signer::new(WEBHOOK_SECRET),
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
    let lag_after = report::scrape_lag(&shared.client, &cluster.origin_urls).await;

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
        (Some(b), Some(a)) => report::histogram_quantile(0.99, &report::diff(&a, &b)),
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
