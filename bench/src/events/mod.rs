//! `bench events`: what the order events (issue 34) cost the sale, and whether they all arrive.
//!
//! Per round (`--rounds`, 2), two private clusters (M origins over N Redis nodes each), one
//! after the other, the same sale in each — the hot SKU with holds (`hold_secs`): shoppers buy one unit at a time; a share of
//! the holds is abandoned (they expire and are sold again), a few are cancelled by the shop, the
//! rest are paid by signed Stripe-style webhooks (the live-hold payment batch), and a few payments
//! are refunded with restock (sold again) — until every unit is paid for good:
//!
//! 1. no webhook endpoint and no stream (the events are still written: the outbox is always on);
//! 2. two webhook endpoints — a healthy receiver, and a flaky one answering 500 to a share of the
//!    deliveries, each after a delay — and the Redis stream (`EVENTS_STREAM_URL` on a
//!    `redis-server` of its own).
//!
//! Reported: purchases/s of both sales side by side per round (the `stock`-th 201 over its time,
//! as `bench holds`) and the median ratio; after each delivered sale, once every delivery was acknowledged (or
//! `--drain-seconds` passed): commit→delivery p50/p99/max per endpoint (the receiver's arrival of
//! the first acknowledged delivery minus the event's `timestamp`, one clock), events lost (the
//! feed's events a receiver never acknowledged, the stream's missing entries), orders whose state
//! is not their last event's, duplicates acknowledged, the feed and stream lag from the origins'
//! metrics, and `origin reconcile`. Fails (exit 2) when an event is lost or a check fails; the
//! performance goals are printed beside the figures, not enforced (the machine may be shared).

mod check;
mod receivers;
mod report;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use hdrhistogram::Histogram;
use shared::SecretRing;
use tokio::sync::Mutex;

use crate::cluster::{self, Cluster, Extra, Server};
use crate::holds::buyers::{Shared, Signer, shopper};
use receivers::Receiver;

#[derive(Args, Debug, Clone)]
pub(crate) struct EventsArgs {
    /// Concurrent shoppers.
    #[arg(long, short = 'c', default_value_t = 500)]
    pub(crate) concurrency: usize,
    /// Units on sale.
    #[arg(long, default_value_t = 5_000)]
    pub(crate) stock: i64,
    /// `hold_secs` of the SKU.
    #[arg(long, default_value_t = 3)]
    pub(crate) hold_secs: u64,
    /// Share of the holds abandoned (they expire).
    #[arg(long, default_value_t = 0.2)]
    pub(crate) abandon: f64,
    /// Share of the holds cancelled by the shop.
    #[arg(long, default_value_t = 0.03)]
    pub(crate) cancel: f64,
    /// Share of the payments refunded with restock.
    #[arg(long, default_value_t = 0.03)]
    pub(crate) refund: f64,
    /// A hold is paid (or cancelled) after a uniform random delay of up to this.
    #[arg(long, default_value_t = 1000)]
    pub(crate) pay_within_ms: u64,
    /// Share of the deliveries the flaky receiver answers 500.
    #[arg(long, default_value_t = 0.1)]
    pub(crate) flaky_fail: f64,
    /// How long the flaky receiver takes to answer.
    #[arg(long, default_value_t = 200)]
    pub(crate) flaky_delay_ms: u64,
    /// The origins' `WEBHOOK_RETRY_SCHEDULE` (the spec's schedule would keep a twice-failed
    /// delivery waiting 5 minutes).
    #[arg(long, default_value = "0,1s,2s,5s,10s,30s")]
    pub(crate) retry_schedule: String,
    /// The origins' `WEBHOOK_MAX_IN_FLIGHT`: a delivery holds its slot for its whole round trip
    /// (claim, POST, recorded acknowledgement: ~100-200 ms on a loaded 2-core machine), so
    /// keeping up with a sale's ~700 events/s per endpoint takes a few hundred (the default 16
    /// would deliver ~100/s).
    #[arg(long, default_value_t = 256)]
    pub(crate) max_in_flight: u32,
    /// Stop a sale after this long even if not every unit is paid (seconds).
    #[arg(long, default_value_t = 180)]
    pub(crate) max_seconds: u64,
    /// After the second sale, wait at most this long for every delivery (seconds).
    #[arg(long, default_value_t = 120)]
    pub(crate) drain_seconds: u64,
    /// Rounds: each runs the sale without delivery, then with (alternating, so that a machine
    /// getting busier or quieter does not favour one); the last round's delivery is checked.
    #[arg(long, default_value_t = 2)]
    pub(crate) rounds: usize,
    /// The origins' `DB_MAX_CONNECTIONS` (each process opens up to twice this many): below the
    /// default 16, to leave room on a Postgres shared with other work (`max_connections` 100).
    #[arg(long, default_value_t = 12)]
    pub(crate) db_max_connections: u32,
    /// Origin processes.
    #[arg(long, default_value_t = 2)]
    pub(crate) origins: usize,
    /// Independent Redis nodes (the stream's is one more).
    #[arg(long, default_value_t = 3)]
    pub(crate) redis_nodes: usize,
    /// The origin binary (build it with `cargo build --release -p origin`).
    #[arg(long, default_value = "target/release/origin")]
    pub(crate) origin_bin: PathBuf,
    /// Postgres server URL (a fresh database is created per run).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pub(crate) postgres: String,
}

/// What one sale measured.
#[derive(Debug, Default)]
pub(crate) struct SaleFigures {
    pub(crate) elapsed: Duration,
    pub(crate) created: u64,
    /// When the `stock`-th 201 came.
    pub(crate) first_pass_at: Option<Duration>,
    pub(crate) abandoned: u64,
    pub(crate) cancelled: u64,
    pub(crate) paid: u64,
    pub(crate) refunded: u64,
    pub(crate) statuses: BTreeMap<String, u64>,
    pub(crate) purchase_latency: Option<Histogram<u64>>,
}

impl SaleFigures {
    /// Purchases per second over the first pass of the stock.
    pub(crate) fn rate(&self, stock: i64) -> Option<f64> {
        self.first_pass_at
            .map(|t| stock as f64 / t.as_secs_f64().max(1e-9))
    }
}

/// Runs `bench events`; `Ok(true)` when nothing was lost and every check passed, in every round.
pub(crate) async fn run(args: &EventsArgs, command_line: &str) -> anyhow::Result<bool> {
    anyhow::ensure!(args.origins > 0, "--origins must be at least 1");
    anyhow::ensure!(
        args.abandon + args.cancel < 1.0 && (0.0..1.0).contains(&args.refund),
        "--abandon + --cancel and --refund must be below 1"
    );
    let server = Server::Origin {
        bin: &args.origin_bin,
        one_per_lease: false,
        redis_nodes: args.redis_nodes,
    };
    let env = vec![
        (
            "WEBHOOK_RETRY_SCHEDULE".to_owned(),
            args.retry_schedule.clone(),
        ),
        (
            "WEBHOOK_MAX_IN_FLIGHT".to_owned(),
            args.max_in_flight.to_string(),
        ),
        (
            "DB_MAX_CONNECTIONS".to_owned(),
            args.db_max_connections.to_string(),
        ),
    ];

    let mut rounds = Vec::new();
    let mut last = None;
    for round in 1..=args.rounds.max(1) {
        eprintln!("== round {round}, sale 1: no webhook endpoint, no stream");
        let plain_cluster = Cluster::start_with(
            server,
            &args.postgres,
            args.origins,
            &Extra {
                env: env.clone(),
                stream: false,
            },
        )
        .await?;
        let plain = sale(args, &plain_cluster).await;
        plain_cluster.stop(plain.is_ok()).await;
        let plain = plain?;

        eprintln!(
            "== round {round}, sale 2: two webhook endpoints (healthy, flaky) and the stream"
        );
        let cluster = Cluster::start_with(
            server,
            &args.postgres,
            args.origins,
            &Extra {
                env: env.clone(),
                stream: true,
            },
        )
        .await?;
        let outcome = delivered_sale(args, &cluster).await;
        let passed = outcome.as_ref().is_ok_and(|(_, c)| c.passed());
        cluster.stop(passed).await;
        let (with, checks) = outcome?;
        if !checks.passed() {
            eprintln!("round {round}: a check FAILED");
        }
        rounds.push((plain, with));
        // Every round's delivery must pass; the report shows the last one's.
        let failed = last.as_ref().is_some_and(|c: &check::Checks| !c.passed());
        if !failed {
            last = Some(checks);
        }
    }
    let checks = last.context("no round ran")?;
    report::print(args, command_line, &rounds, &checks);
    Ok(checks.passed())
}

/// The second sale, with its endpoints and stream, then the checks once delivered.
async fn delivered_sale(
    args: &EventsArgs,
    cluster: &Cluster,
) -> anyhow::Result<(SaleFigures, check::Checks)> {
    let healthy = Receiver::start(0.0, Duration::ZERO).await?;
    let flaky =
        Receiver::start(args.flaky_fail, Duration::from_millis(args.flaky_delay_ms)).await?;
    let client = reqwest::Client::new();
    let mut endpoints = Vec::new();
    for (name, receiver) in [("healthy", &healthy), ("flaky", &flaky)] {
        let res = client
            .post(format!("{}/v1/admin/webhooks", cluster.origin_urls[0]))
            .bearer_auth(cluster::ADMIN_TOKEN)
            .json(&serde_json::json!({"url": receiver.url, "description": name}))
            .send()
            .await
            .context("registering an endpoint")?;
        anyhow::ensure!(res.status() == 201, "registering {name}: {}", res.status());
        let body: serde_json::Value = res.json().await?;
        endpoints.push((
            name,
            body["id"].as_str().unwrap_or_default().to_owned(),
            receiver,
        ));
    }
    let figures = sale(args, cluster).await?;
    let checks = check::run(args, cluster, &endpoints).await?;
    Ok((figures, checks))
}

/// One sale of `args.stock` units with holds on `cluster`, until every unit is paid for good.
async fn sale(args: &EventsArgs, cluster: &Cluster) -> anyhow::Result<SaleFigures> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency * 2)
        .timeout(Duration::from_secs(30))
        .build()?;
    let sku = format!("EVENTS-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let res = client
        .put(format!("{}/v1/admin/skus/{sku}", cluster.origin_urls[0]))
        .bearer_auth(cluster::ADMIN_TOKEN)
        .json(&serde_json::json!({"name": "Benchmark events", "price_cents": 100, "stock": args.stock, "max_per_user": 1_000_000, "hold_secs": args.hold_secs}))
        .send()
        .await
        .context("creating the SKU")?;
    anyhow::ensure!(
        res.status().is_success(),
        "creating the SKU: {}",
        res.status()
    );
    let shared = Arc::new(Shared {
        client,
        targets: cluster.origin_urls.clone(),
        webhook_urls: cluster
            .origin_urls
            .iter()
            .map(|t| format!("{t}/v1/payments/stripe"))
            .collect(),
        signer: Signer::new(cluster::WEBHOOK_SECRET),
        ring: SecretRing::single(cluster::EDGE_SECRET),
        sku,
        stock: u64::try_from(args.stock).unwrap_or(0),
        abandon: args.abandon,
        cancel: args.cancel,
        refund: args.refund,
        admin_token: cluster::ADMIN_TOKEN.to_owned(),
        pay_within: Duration::from_millis(args.pay_within_ms),
        start: Instant::now(),
        stop: AtomicBool::new(false),
        created: AtomicU64::new(0),
        first_pass_micros: AtomicU64::new(0),
        abandoned: AtomicU64::new(0),
        paid: AtomicU64::new(0),
        cancelled: AtomicU64::new(0),
        refunded: AtomicU64::new(0),
        webhooks: AtomicU64::new(0),
        webhook_retries: AtomicU64::new(0),
        purchase_latency: Mutex::new(Histogram::new(3)?),
        webhook_latency: Mutex::new(Histogram::new(3)?),
        statuses: Mutex::new(BTreeMap::new()),
        payers: Mutex::new(Vec::new()),
    });
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
    let first = shared.first_pass_micros.load(Ordering::Relaxed);
    let statuses = std::mem::take(&mut *shared.statuses.lock().await);
    let purchase_latency = shared.purchase_latency.lock().await.clone();
    Ok(SaleFigures {
        elapsed: shared.start.elapsed(),
        created: shared.created.load(Ordering::Relaxed),
        first_pass_at: (first > 0).then(|| Duration::from_micros(first)),
        abandoned: shared.abandoned.load(Ordering::Relaxed),
        cancelled: shared.cancelled.load(Ordering::Relaxed),
        paid: shared.paid.load(Ordering::Relaxed),
        refunded: shared.refunded.load(Ordering::Relaxed),
        statuses,
        purchase_latency: Some(purchase_latency),
    })
}
