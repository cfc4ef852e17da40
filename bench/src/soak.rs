//! `bench soak`: a long sale at a steady, moderate, open-loop rate against a private cluster
//! (`cluster.rs`: Redis nodes, a fresh database, origin processes), watching whether the origins
//! hold on to memory or file descriptors.
//!
//! - Load: `--rate` purchases per second, sent on schedule whatever the answers (open loop),
//!   spread over the origins; each buys one unit of one of `--skus` SKUs as one of `--users`
//!   users with a fresh Idempotency-Key. A SKU answered `sold_out` is restocked (`--stock`
//!   units, a new sale generation) once its stock reads 0.
//! - Sampling: every `--sample-secs`, each origin's RSS (`/proc/<pid>/status` VmRSS), open file
//!   descriptors (`/proc/<pid>/fd`) and the sizes its `/metrics` reports (open connections,
//!   combiners, attempts in flight).
//! - Verdict (exit status 2 on failure): no 5xx, no transport error, no unexpected answer (only
//!   201, 409 `sold_out` and 409 `purchase_limit` are expected); the books balance
//!   (`books.rs`, for every generation, and `origin reconcile`); and per origin, RSS grew at most
//!   `--max-rss-growth-mib` and its open fds other than client connections at most
//!   `--max-fd-growth` from the end of the warm-up (`--warmup-secs`: allocator arenas, pools and
//!   caches fill first) to the end of the load.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Args;
use hdrhistogram::Histogram;
use rand::Rng;
use shared::signing::{self, SignedParts};
use tokio::sync::Semaphore;

use crate::books::{self, Generation, SkuBooks};
use crate::cluster::{self, Cluster};
use crate::procstat;

/// Most requests in flight before the load generator itself counts as overloaded (an error:
/// the rate could not be held).
const MAX_OUTSTANDING: usize = 4096;
/// Client-side timeout of one purchase.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The soak's knobs.
#[derive(Args, Debug, Clone)]
pub(crate) struct SoakArgs {
    /// How long the load runs (fractions allowed, e.g. 0.5).
    #[arg(long, default_value_t = 10.0)]
    pub(crate) minutes: f64,
    /// Purchases per second, open loop.
    #[arg(long, default_value_t = 200.0)]
    pub(crate) rate: f64,
    /// Origin processes to start.
    #[arg(long, default_value_t = 2)]
    pub(crate) origins: usize,
    /// Independent Redis nodes to start.
    #[arg(long, default_value_t = 3)]
    pub(crate) redis_nodes: usize,
    /// The origin binary (build it with `cargo build --release -p origin`).
    #[arg(long, default_value = "target/release/origin")]
    pub(crate) origin_bin: PathBuf,
    /// Postgres server URL (a fresh database is created per run).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pub(crate) postgres: String,
    /// SKUs on sale at once.
    #[arg(long, default_value_t = 4)]
    pub(crate) skus: usize,
    /// Units per sale generation (initial stock and each restock).
    #[arg(long, default_value_t = 5000)]
    pub(crate) stock: i64,
    /// Distinct shoppers.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) users: usize,
    /// Per-user cap of each SKU.
    #[arg(long, default_value_t = 3)]
    pub(crate) max_per_user: i64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 10)]
    pub(crate) sample_secs: u64,
    /// Growth is measured from the first sample at or after this many seconds (at most a
    /// quarter of the run).
    #[arg(long, default_value_t = 60)]
    pub(crate) warmup_secs: u64,
    /// Most RSS growth allowed per origin after the warm-up, MiB.
    #[arg(long, default_value_t = 32)]
    pub(crate) max_rss_growth_mib: u64,
    /// Most growth allowed per origin after the warm-up of open fds other than client
    /// connections.
    #[arg(long, default_value_t = 16)]
    pub(crate) max_fd_growth: i64,
    /// Also write the report to this file.
    #[arg(long)]
    pub(crate) report: Option<PathBuf>,
}

/// One origin at one moment.
#[derive(Debug, Clone, Copy, Default)]
struct OriginSample {
    rss: u64,
    fds: i64,
    connections: f64,
    combiners: f64,
    in_flight: f64,
}

impl OriginSample {
    /// Open fds other than client connections (listener, database and Redis connections,
    /// runtime): how many connections the load generator keeps open is its own choice, bounded
    /// by `HTTP_MAX_CONNECTIONS`, so growth is judged on the rest.
    fn own_fds(&self) -> i64 {
        if self.connections.is_finite() {
            self.fds - self.connections as i64
        } else {
            self.fds
        }
    }
}

/// All origins at one moment.
#[derive(Debug, Clone)]
struct Sample {
    label: String,
    at: Duration,
    origins: Vec<OriginSample>,
}

/// One SKU on sale and its generations.
#[derive(Debug)]
struct SkuState {
    name: String,
    generations: Mutex<Vec<Generation>>,
    /// Held while restocking, so one sell-out restocks once.
    restocking: tokio::sync::Mutex<()>,
}

/// State shared by the load tasks.
struct Soak {
    client: reqwest::Client,
    targets: Vec<String>,
    skus: Vec<SkuState>,
    users: usize,
    stock: i64,
    cap: i64,
    statuses: Mutex<BTreeMap<String, u64>>,
    latency: Mutex<Histogram<u64>>,
    order_ids: Mutex<Vec<String>>,
    restocks: AtomicU64,
    restock_errors: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Soak {
    async fn put_sku(&self, sku: &str, stock: i64) -> anyhow::Result<()> {
        let res = self
            .client
            .put(format!("{}/v1/admin/skus/{sku}", self.targets[0]))
            .bearer_auth(cluster::ADMIN_TOKEN)
            .json(&serde_json::json!({"name": "Soak item", "price_cents": 100, "stock": stock, "max_per_user": self.cap}))
            .send()
            .await?;
        anyhow::ensure!(res.status().is_success(), "PUT {sku}: {}", res.status());
        Ok(())
    }

    /// Restocks SKU `idx` if its stock reads 0 (a `sold_out` answer may be older than the last
    /// restock). Nothing can be sold between the read and the PUT: the stock is 0.
    async fn restock(&self, idx: usize) {
        let sku = &self.skus[idx];
        let Ok(_restocking) = sku.restocking.try_lock() else {
            return; // another task is on it
        };
        let result: anyhow::Result<bool> = async {
            let view: serde_json::Value = self
                .client
                .get(format!("{}/v1/skus/{}", self.targets[0], sku.name))
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            if view["stock"].as_i64() != Some(0) {
                return Ok(false);
            }
            self.put_sku(&sku.name, self.stock).await?;
            Ok(true)
        }
        .await;
        match result {
            Ok(true) => {
                let mut gens = lock(&sku.generations);
                if let Some(last) = gens.last_mut() {
                    last.closed_with = Some(0);
                }
                let number = gens.last().map_or(1, |g| g.number + 1);
                gens.push(Generation {
                    number,
                    initial: self.stock,
                    closed_with: None,
                });
                self.restocks.fetch_add(1, Ordering::Relaxed);
            }
            Ok(false) => {}
            Err(e) => {
                eprintln!("restock of {} failed: {e:#}", sku.name);
                self.restock_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// One purchase attempt, scheduled as request number `i`.
    async fn purchase(self: Arc<Self>, i: u64) {
        let (idx, user) = {
            let mut rng = rand::rng();
            (
                rng.random_range(0..self.skus.len()),
                rng.random_range(0..self.users),
            )
        };
        let sku = &self.skus[idx].name;
        let user = format!("soak-user-{user}");
        let key = uuid::Uuid::new_v4().to_string();
        let body = format!(r#"{{"sku":"{sku}","qty":1}}"#);
        let target = &self.targets[usize::try_from(i).unwrap_or(0) % self.targets.len()];
        let parts = SignedParts {
            method: "POST",
            path: "/v1/purchases",
            user: &user,
            idempotency_key: &key,
            body: body.as_bytes(),
        };
        let ring = shared::SecretRing::single(cluster::EDGE_SECRET);
        let signature = signing::sign(&ring, shared::Timestamp::now().unix_secs(), &parts);
        let t0 = Instant::now();
        let sent = self
            .client
            .post(format!("{target}/v1/purchases"))
            .header("flashgate-user", &user)
            .header("idempotency-key", &key)
            .header("flashgate-signature", signature)
            .body(body)
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await;
        let (status, json) = match sent {
            Ok(res) => {
                let status = res.status().as_u16();
                (status, res.json::<serde_json::Value>().await.ok())
            }
            Err(_) => (0, None),
        };
        let micros = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
        let _ = lock(&self.latency).record(micros.max(1));
        let code = json
            .as_ref()
            .and_then(|j| j["code"].as_str())
            .unwrap_or("?");
        let label = match status {
            0 => "transport error".to_owned(),
            201 => "201".to_owned(),
            _ => format!("{status} {code}"),
        };
        *lock(&self.statuses).entry(label).or_insert(0) += 1;
        if status == 201 {
            if let Some(id) = json.as_ref().and_then(|j| j["order_id"].as_str()) {
                lock(&self.order_ids).push(id.to_owned());
            }
        } else if status == 409 && code == "sold_out" {
            self.restock(idx).await;
        }
    }

    /// Samples every origin now.
    async fn sample(&self, pids: &[u32], label: &str, at: Duration) -> Sample {
        let mut origins = Vec::new();
        for (pid, target) in pids.iter().zip(&self.targets) {
            let gauges = scrape_gauges(&self.client, target).await;
            origins.push(OriginSample {
                rss: procstat::rss_bytes(*pid).unwrap_or(0),
                fds: procstat::open_fds(*pid).map_or(-1, |n| i64::try_from(n).unwrap_or(-1)),
                connections: gauges[0],
                combiners: gauges[1],
                in_flight: gauges[2],
            });
        }
        Sample {
            label: label.to_owned(),
            at,
            origins,
        }
    }
}

/// `origin_http_connections`, `origin_combiners`, `origin_purchases_in_flight` of one origin
/// (NaN when not readable).
async fn scrape_gauges(client: &reqwest::Client, target: &str) -> [f64; 3] {
    let names = [
        "origin_http_connections",
        "origin_combiners",
        "origin_purchases_in_flight",
    ];
    let text = match client.get(format!("{target}/metrics")).send().await {
        Ok(res) => res.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    names.map(|name| {
        text.lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(f64::NAN)
    })
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Runs the soak; returns whether it passed. Prints (and optionally writes) the report.
pub(crate) async fn run(args: &SoakArgs, command_line: &str) -> anyhow::Result<bool> {
    anyhow::ensure!(
        args.rate > 0.0 && args.minutes > 0.0,
        "--rate and --minutes must be > 0"
    );
    anyhow::ensure!(
        args.skus > 0 && args.users > 0,
        "--skus and --users must be > 0"
    );
    let duration = Duration::from_secs_f64(args.minutes * 60.0);
    let load_before = procstat::load_average();
    eprintln!(
        "== soak: {} origin(s), {} Redis node(s), {:.0} purchases/s for {:.1} min",
        args.origins, args.redis_nodes, args.rate, args.minutes
    );
    let cluster = Cluster::start(
        cluster::Server::Origin {
            bin: &args.origin_bin,
            one_per_lease: false,
            redis_nodes: args.redis_nodes,
        },
        &args.postgres,
        args.origins,
    )
    .await?;
    // Only what the origins log from here on (readiness polling at start-up logs 503s).
    let logs: Vec<(PathBuf, u64)> = cluster
        .origin_logs()
        .into_iter()
        .map(|p| {
            let len = std::fs::metadata(&p).map_or(0, |m| m.len());
            (p, len)
        })
        .collect();
    let outcome = soak(args, &cluster, duration).await;
    let warnings = log_summary(&logs);
    let reconciled = reconcile(&args.origin_bin, &cluster.database_url).await;
    let passed = matches!(&outcome, Ok((_, true))) && matches!(&reconciled, Ok((true, _)));
    cluster.stop(passed).await;
    let (mut report, mut ok) = outcome?;
    let (reconcile_ok, reconcile_text) = reconciled?;
    writeln!(report, "origin reconcile: {reconcile_text}")?;
    writeln!(report, "origin warnings and errors (logged, by message):")?;
    if warnings.is_empty() {
        writeln!(report, "  none")?;
    }
    for (line, n) in &warnings {
        writeln!(report, "  {n:>6} x {line}")?;
    }
    ok &= reconcile_ok;
    writeln!(
        report,
        "command: {command_line}\nmachine: {}; load average {load_before} before, {} after",
        procstat::machine(),
        procstat::load_average()
    )?;
    writeln!(report, "verdict: {}", if ok { "PASS" } else { "FAIL" })?;
    print!("{report}");
    if let Some(path) = &args.report {
        std::fs::write(path, &report).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ok)
}

/// The origins' WARN/ERROR log events after the given offsets, counted by level, message and
/// error (numbers in the error text are kept: they say e.g. how many nodes voted).
fn log_summary(logs: &[(PathBuf, u64)]) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for (path, from) in logs {
        let Ok(bytes) = std::fs::read(path) else {
            continue;
        };
        let from = usize::try_from(*from).unwrap_or(0).min(bytes.len());
        let text = String::from_utf8_lossy(&bytes[from..]);
        for line in text.lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let level = event["level"].as_str().unwrap_or("?");
            if level != "WARN" && level != "ERROR" {
                continue;
            }
            let mut key = format!("{level} {}", event["message"].as_str().unwrap_or("?"));
            for field in ["error", "classification"] {
                if let Some(e) = event[field].as_str() {
                    key.push_str(": ");
                    key.push_str(e);
                }
            }
            *counts.entry(key).or_insert(0) += 1;
        }
    }
    counts
}

/// Runs `origin reconcile` against the run's database: (books balance, its output).
async fn reconcile(
    origin_bin: &std::path::Path,
    database_url: &str,
) -> anyhow::Result<(bool, String)> {
    let out = tokio::process::Command::new(origin_bin)
        .arg("reconcile")
        .env("DATABASE_URL", database_url)
        .env("RUST_LOG", "warn")
        .output()
        .await
        .context("running origin reconcile")?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let text = if text.is_empty() {
        String::from_utf8_lossy(&out.stderr).trim().to_owned()
    } else {
        text
    };
    Ok((out.status.success(), text))
}

async fn soak(
    args: &SoakArgs,
    cluster: &Cluster,
    duration: Duration,
) -> anyhow::Result<(String, bool)> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .build()?;
    let skus: Vec<SkuState> = (0..args.skus)
        .map(|i| SkuState {
            name: format!("SOAK-{i}"),
            generations: Mutex::new(Vec::new()),
            restocking: tokio::sync::Mutex::new(()),
        })
        .collect();
    let soak = Arc::new(Soak {
        client,
        targets: cluster.origin_urls.clone(),
        skus,
        users: args.users,
        stock: args.stock,
        cap: args.max_per_user,
        statuses: Mutex::new(BTreeMap::new()),
        latency: Mutex::new(Histogram::new(3)?),
        order_ids: Mutex::new(Vec::new()),
        restocks: AtomicU64::new(0),
        restock_errors: AtomicU64::new(0),
    });
    for (i, sku) in soak.skus.iter().enumerate() {
        soak.put_sku(&sku.name, args.stock).await?;
        let number = books::current_generation(&cluster.database_url, &sku.name).await?;
        lock(&soak.skus[i].generations).push(Generation {
            number,
            initial: args.stock,
            closed_with: None,
        });
    }

    let pids = cluster.origin_pids.clone();
    let start = Instant::now();
    let mut samples = vec![soak.sample(&pids, "start", Duration::ZERO).await];
    // Sampler.
    let sampler = {
        let soak = soak.clone();
        let pids = pids.clone();
        let every = Duration::from_secs(args.sample_secs.max(1));
        tokio::spawn(async move {
            let mut taken = Vec::new();
            let mut n = 1u32;
            loop {
                tokio::time::sleep_until((start + every * n).into()).await;
                if start.elapsed() >= duration {
                    return taken;
                }
                let s = soak
                    .sample(
                        &pids,
                        &format!("{}s", (every * n).as_secs()),
                        start.elapsed(),
                    )
                    .await;
                let line: Vec<String> = s
                    .origins
                    .iter()
                    .map(|o| {
                        format!(
                            "{:.1} MiB {} fds {} conns",
                            mib(o.rss),
                            o.fds,
                            o.connections
                        )
                    })
                    .collect();
                eprintln!("[{:>5.0}s] {}", s.at.as_secs_f64(), line.join(" | "));
                taken.push(s);
                n += 1;
            }
        })
    };

    // Open-loop load.
    let outstanding = Arc::new(Semaphore::new(MAX_OUTSTANDING));
    let total = (args.rate * duration.as_secs_f64()).round() as u64;
    let mut overloaded = 0u64;
    for i in 0..total {
        let at = start + Duration::from_secs_f64(i as f64 / args.rate);
        tokio::time::sleep_until(at.into()).await;
        match outstanding.clone().try_acquire_owned() {
            Ok(permit) => {
                let soak = soak.clone();
                tokio::spawn(async move {
                    soak.purchase(i).await;
                    drop(permit);
                });
            }
            Err(_) => overloaded += 1,
        }
    }
    let sent_in = start.elapsed();
    let _all_answered = outstanding
        .acquire_many(u32::try_from(MAX_OUTSTANDING).unwrap_or(u32::MAX))
        .await;
    samples.extend(sampler.await.unwrap_or_default());
    samples.push(soak.sample(&pids, "end", start.elapsed()).await);
    // Idle combiners retire after 10 s: the tables should be empty again.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let idle = soak.sample(&pids, "idle +12s", start.elapsed()).await;

    // Books.
    let sold: Vec<SkuBooks> = soak
        .skus
        .iter()
        .map(|s| SkuBooks {
            sku: s.name.clone(),
            cap: args.max_per_user,
            generations: lock(&s.generations).clone(),
        })
        .collect();
    let order_ids = lock(&soak.order_ids).clone();
    let invariants = books::check(&cluster.database_url, &sold, &order_ids).await?;

    // Report.
    let mut r = String::new();
    let statuses = lock(&soak.statuses).clone();
    let requests: u64 = statuses.values().sum();
    let expected =
        |label: &str| label == "201" || label == "409 sold_out" || label == "409 purchase_limit";
    let errors_5xx: u64 = statuses
        .iter()
        .filter(|(k, _)| k.starts_with('5'))
        .map(|(_, v)| v)
        .sum();
    let transport = statuses.get("transport error").copied().unwrap_or(0);
    let unexpected: u64 = statuses
        .iter()
        .filter(|(k, _)| !expected(k) && !k.starts_with('5') && *k != "transport error")
        .map(|(_, v)| v)
        .sum();
    let restock_errors = soak.restock_errors.load(Ordering::Relaxed);
    let latency = lock(&soak.latency).clone();
    writeln!(
        r,
        "\nsoak: {} origin(s), {} Redis node(s), {} SKUs x {} units per generation, {} users, cap {}",
        args.origins, args.redis_nodes, args.skus, args.stock, args.users, args.max_per_user
    )?;
    writeln!(
        r,
        "load: {requests} purchases in {:.1} s ({:.1}/s scheduled at {:.0}/s), {} restocks",
        sent_in.as_secs_f64(),
        requests as f64 / sent_in.as_secs_f64().max(1e-9),
        args.rate,
        soak.restocks.load(Ordering::Relaxed)
    )?;
    writeln!(
        r,
        "latency ms: p50 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}",
        latency.value_at_quantile(0.5) as f64 / 1000.0,
        latency.value_at_quantile(0.99) as f64 / 1000.0,
        latency.value_at_quantile(0.999) as f64 / 1000.0,
        latency.max() as f64 / 1000.0
    )?;
    for (label, n) in &statuses {
        writeln!(r, "  {label:<28} {n}")?;
    }
    writeln!(
        r,
        "errors: {errors_5xx} 5xx, {transport} transport, {unexpected} unexpected answers, {overloaded} not sent (load generator overloaded), {restock_errors} failed restocks"
    )?;
    writeln!(
        r,
        "books: {} units put on sale, {} remaining, {} in orders, max {} units/user (cap {}), {} answered 201, {} found, {} orders -> {}",
        invariants.initial,
        invariants.remaining,
        invariants.units_in_orders,
        invariants.max_units_per_user,
        invariants.cap,
        invariants.distinct_201_orders,
        invariants.orders_found_for_201s,
        invariants.orders_total,
        if invariants.ok() {
            "ok".to_owned()
        } else {
            invariants.violations.join("; ")
        }
    )?;

    // Resources.
    let warm_at = Duration::from_secs(args.warmup_secs).min(duration / 4);
    let warm = samples
        .iter()
        .find(|s| s.at >= warm_at && s.label != "end")
        .unwrap_or(&samples[0])
        .clone();
    let end = samples.last().unwrap_or(&samples[0]).clone();
    let mut resources_ok = true;
    writeln!(
        r,
        "resources per origin (growth measured from the {} sample to the end; limits +{} MiB RSS, +{} fds):",
        warm.label, args.max_rss_growth_mib, args.max_fd_growth
    )?;
    for (o, url) in cluster.origin_urls.iter().enumerate() {
        let series: Vec<OriginSample> = samples.iter().map(|s| s.origins[o]).collect();
        let max_rss = series.iter().map(|s| s.rss).max().unwrap_or(0);
        let max_fds = series.iter().map(|s| s.fds).max().unwrap_or(0);
        let (s0, w, e) = (samples[0].origins[o], warm.origins[o], end.origins[o]);
        let rss_growth = e.rss.saturating_sub(w.rss);
        let fd_growth = e.own_fds() - w.own_fds();
        let ok =
            rss_growth <= args.max_rss_growth_mib * 1024 * 1024 && fd_growth <= args.max_fd_growth;
        resources_ok &= ok;
        writeln!(
            r,
            "  origin {o} ({url}): RSS start {:.1} / {} {:.1} / end {:.1} / max {:.1} MiB (growth {:+.1}); fds start {} / {} {} / end {} / max {}, without client connections {} / {} / {} (growth {:+}); {}",
            mib(s0.rss),
            warm.label,
            mib(w.rss),
            mib(e.rss),
            mib(max_rss),
            mib(e.rss) - mib(w.rss),
            s0.fds,
            warm.label,
            w.fds,
            e.fds,
            max_fds,
            s0.own_fds(),
            w.own_fds(),
            e.own_fds(),
            fd_growth,
            if ok { "flat" } else { "GREW" }
        )?;
        writeln!(
            r,
            "    at the end: {} connections, {} combiners, {} in flight; 12 s after the load: {:.1} MiB, {} fds, {} connections, {} combiners, {} in flight",
            e.connections,
            e.combiners,
            e.in_flight,
            mib(idle.origins[o].rss),
            idle.origins[o].fds,
            idle.origins[o].connections,
            idle.origins[o].combiners,
            idle.origins[o].in_flight
        )?;
    }
    writeln!(
        r,
        "samples (per origin: RSS MiB / open fds / client connections / combiners):"
    )?;
    for s in &samples {
        let cells: Vec<String> = s
            .origins
            .iter()
            .map(|o| {
                format!(
                    "{:>6.1} / {:>3} / {:>3} / {:>2}",
                    mib(o.rss),
                    o.fds,
                    o.connections,
                    o.combiners
                )
            })
            .collect();
        writeln!(
            r,
            "  {:>9} {:>6.0}s  {}",
            s.label,
            s.at.as_secs_f64(),
            cells.join("   ")
        )?;
    }
    let ok = errors_5xx == 0
        && transport == 0
        && unexpected == 0
        && overloaded == 0
        && restock_errors == 0
        && invariants.ok()
        && resources_ok;
    Ok((r, ok))
}
