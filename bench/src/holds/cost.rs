//! `bench holds`' cost probe: the CPU a webhook delivery costs against the CPU a purchase (a
//! hold) costs, measured in the same run on the same cluster, after the two sales.
//!
//! A SKU with a long `hold_secs` (nothing expires during the probe) is bought `--probe` times by
//! a closed loop of `--probe-concurrency` clients (signed purchases, qty 1, fresh keys: each a
//! 201 hold), then every hold is paid by the same loop with the sale's signed
//! `payment_intent.succeeded` ([`super::buyers::deliver`]); `--probe-rounds` times, alternately.
//! Around each phase the CPU time (utime + stime, `/proc/<pid>/stat`) of the origins, of this
//! process (the clients: HTTP, signing), of every `postgres` process and of the Redis nodes is
//! read. The headline is CPU per webhook ÷ CPU per purchase: both phases share the machine's load
//! of the moment, so the ratio moves far less with other work on the cores than rates do.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use shared::SecretRing;
use shared::signing::{self, SignedParts};
use tokio::sync::Mutex;

use super::buyers::{Answer, Signer, deliver, payment_body};
use crate::cluster::{self, Cluster};
use crate::procstat::{CpuSample, CpuUse};

/// One kind of request, summed over the rounds.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Phase {
    requests: u64,
    ok: u64,
    secs: f64,
    cpu: CpuUse,
}

impl Phase {
    fn add(&mut self, requests: u64, ok: u64, secs: f64, cpu: CpuUse) {
        self.requests += requests;
        self.ok += ok;
        self.secs += secs;
        self.cpu.load_generator += cpu.load_generator;
        self.cpu.origins += cpu.origins;
        self.cpu.redis += cpu.redis;
        self.cpu.postgres += cpu.postgres;
    }

    /// Milliseconds of CPU per request.
    fn per(&self, seconds: f64) -> f64 {
        seconds * 1000.0 / self.requests.max(1) as f64
    }
}

/// What the probe measured.
#[derive(Debug, Default)]
pub(super) struct Probe {
    purchases: Phase,
    webhooks: Phase,
}

/// Runs the probe: `n` holds bought then paid, `rounds` times, by `concurrency` clients.
pub(super) async fn run(
    cluster: &Cluster,
    ring: &SecretRing,
    n: usize,
    rounds: usize,
    concurrency: usize,
) -> anyhow::Result<Probe> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(concurrency * 2)
        .timeout(Duration::from_secs(30))
        .build()?;
    let sku = format!("PROBE-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    let res = client
        .put(format!("{}/v1/admin/skus/{sku}", cluster.origin_urls[0]))
        .bearer_auth(cluster::ADMIN_TOKEN)
        .json(&serde_json::json!({"name": "Cost probe", "price_cents": 100, "stock": n * rounds, "max_per_user": 1_000_000, "hold_secs": 3600}))
        .send()
        .await
        .context("creating the probe SKU")?;
    anyhow::ensure!(
        res.status().is_success(),
        "creating the probe SKU: {}",
        res.status()
    );
    let signer = Arc::new(Signer::new(cluster::WEBHOOK_SECRET));
    let webhook_urls: Arc<Vec<String>> = Arc::new(
        cluster
            .origin_urls
            .iter()
            .map(|t| format!("{t}/v1/payments/stripe"))
            .collect(),
    );
    let mut probe = Probe::default();
    for _ in 0..rounds {
        // Purchases: each a hold.
        let orders = Arc::new(Mutex::new(Vec::with_capacity(n)));
        let next = Arc::new(AtomicUsize::new(0));
        let before = CpuSample::now(&cluster.origin_pids, &cluster.redis_pids);
        let t0 = Instant::now();
        let tasks: Vec<_> = (0..concurrency)
            .map(|i| {
                let (client, ring, sku, orders, next) = (
                    client.clone(),
                    ring.clone(),
                    sku.clone(),
                    orders.clone(),
                    next.clone(),
                );
                let targets = cluster.origin_urls.clone();
                tokio::spawn(async move {
                    let user = format!("prober-{i}");
                    let body = format!(r#"{{"sku":"{sku}","qty":1}}"#);
                    while next.fetch_add(1, Ordering::Relaxed) < n {
                        let target = &targets[i % targets.len()];
                        if let Some(order) = buy(&client, &ring, target, &user, &body).await {
                            orders.lock().await.push(order);
                        }
                    }
                })
            })
            .collect();
        futures::future::join_all(tasks).await;
        let secs = t0.elapsed().as_secs_f64();
        let cpu = CpuSample::now(&cluster.origin_pids, &cluster.redis_pids).since(&before);
        let orders = Arc::new(std::mem::take(&mut *orders.lock().await));
        probe
            .purchases
            .add(n as u64, orders.len() as u64, secs, cpu);

        // Webhooks: each pays one of those holds.
        let next = Arc::new(AtomicUsize::new(0));
        let applied = Arc::new(AtomicUsize::new(0));
        let before = CpuSample::now(&cluster.origin_pids, &cluster.redis_pids);
        let t0 = Instant::now();
        let tasks: Vec<_> = (0..concurrency)
            .map(|_| {
                let (client, signer, urls, orders, next, applied) = (
                    client.clone(),
                    signer.clone(),
                    webhook_urls.clone(),
                    orders.clone(),
                    next.clone(),
                    applied.clone(),
                );
                tokio::spawn(async move {
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(order) = orders.get(k) else { break };
                        let body = payment_body(k as u64, order);
                        let url = &urls[k % urls.len()];
                        if matches!(deliver(&client, url, &signer, body).await, Answer::Applied) {
                            applied.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                })
            })
            .collect();
        futures::future::join_all(tasks).await;
        let secs = t0.elapsed().as_secs_f64();
        let cpu = CpuSample::now(&cluster.origin_pids, &cluster.redis_pids).since(&before);
        probe.webhooks.add(
            orders.len() as u64,
            applied.load(Ordering::Relaxed) as u64,
            secs,
            cpu,
        );
    }
    Ok(probe)
}

/// One signed purchase of one unit; the order id of a 201.
async fn buy(
    client: &reqwest::Client,
    ring: &SecretRing,
    target: &str,
    user: &str,
    body: &str,
) -> Option<String> {
    let key = uuid::Uuid::new_v4().to_string();
    let parts = SignedParts {
        method: "POST",
        path: "/v1/purchases",
        user,
        idempotency_key: &key,
        body: body.as_bytes(),
    };
    let now = shared::Timestamp::now().unix_secs();
    let res = client
        .post(format!("{target}/v1/purchases"))
        .header("idempotency-key", &key)
        .header("flashgate-user", user)
        .header("flashgate-signature", signing::sign(ring, now, &parts))
        .body(body.to_owned())
        .send()
        .await
        .ok()?;
    if res.status().as_u16() != 201 {
        return None;
    }
    let json: serde_json::Value = res.json().await.ok()?;
    json["order_id"].as_str().map(str::to_owned)
}

/// The probe's lines of the report.
pub(super) fn print(probe: &Probe, n: usize, rounds: usize, concurrency: usize) {
    let (p, w) = (&probe.purchases, &probe.webhooks);
    println!();
    println!(
        "## cost probe: CPU per webhook against CPU per purchase ({rounds} rounds of {n} holds bought, then paid; {concurrency} clients; load average {})",
        crate::procstat::load_average()
    );
    println!(
        "purchases (201 holds):  {} of {} in {:.2} s ({:.0}/s)",
        p.ok,
        p.requests,
        p.secs,
        p.requests as f64 / p.secs.max(1e-9)
    );
    println!(
        "webhooks (applied):     {} of {} in {:.2} s ({:.0}/s)",
        w.ok,
        w.requests,
        w.secs,
        w.requests as f64 / w.secs.max(1e-9)
    );
    println!("CPU ms per request      purchase   webhook   webhook ÷ purchase");
    /// A column of the table: its name and how to read it off a phase's CPU use.
    type Row = (&'static str, fn(&CpuUse) -> f64);
    let rows: [Row; 5] = [
        ("origins", |c| c.origins),
        ("bench (client)", |c| c.load_generator),
        ("postgres", |c| c.postgres),
        ("redis", |c| c.redis),
        ("total", |c| c.total()),
    ];
    for (name, f) in rows {
        let (a, b) = (p.per(f(&p.cpu)), w.per(f(&w.cpu)));
        println!(
            "  {name:<20} {a:>8.3}  {b:>8.3}   {}",
            if a > 0.0 {
                format!("{:.2}", b / a)
            } else {
                "-".into()
            }
        );
    }
}
