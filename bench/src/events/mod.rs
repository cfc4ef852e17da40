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

mod args;
mod check;
mod receivers;
mod report;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use shared::SecretRing;
use tokio::sync::Mutex;

use crate::cluster::{self, Cluster, Extra, Server};
use crate::holds::buyers::{Shared, Signer, shopper};
pub(crate) use args::{EventsArgs, SaleFigures};
use receivers::Receiver;

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
