//! One flash sale: create the SKU, run C shoppers until sell-out, collect latencies and statuses,
//! then check the invariants against the database. Against the ceiling (canned answers, nothing
//! stored) there is no SKU to create and no books: its first `stock` 201s are the sale.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use shared::SecretRing;
use shared::signing::{self, SignedParts};
use tokio::sync::Mutex;

use crate::books::{self, Generation, Invariants, SkuBooks};
use crate::procstat::CpuSample;

/// The shape of the sale.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct SaleArgs {
    /// Concurrent shoppers (distinct users).
    #[arg(long, short = 'c', default_value_t = 1000)]
    pub(crate) concurrency: usize,
    /// Units on sale.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) stock: i64,
    /// Per-user cap.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) max_per_user: i64,
    /// Stop after this long even if not sold out (seconds).
    #[arg(long, default_value_t = 120)]
    pub(crate) max_seconds: u64,
    /// SKU name (default: a fresh one per run).
    #[arg(long)]
    pub(crate) sku: Option<String>,
    /// Where to write the SVG plot(s). The default is out of version control; a run meant for
    /// the docs passes `--out-dir docs/bench` (see docs/benchmarks.md).
    #[arg(long, default_value = "target/bench")]
    pub(crate) out_dir: PathBuf,
    /// A label for the output files.
    #[arg(long, default_value = "sale")]
    pub(crate) label: String,
    /// Open each shopper's connection when the sale opens (inside the measured latency) instead
    /// of before it: shoppers normally have the page open, and the edge keeps warm connections
    /// to the origin.
    #[arg(long)]
    pub(crate) cold_connections: bool,
    /// Also write every request (sent at, latency, status) to `<out-dir>/<label>-<run>.csv`.
    #[arg(long)]
    pub(crate) samples_csv: bool,
}

impl SaleArgs {
    pub(crate) fn max_duration(&self) -> Duration {
        Duration::from_secs(self.max_seconds)
    }
}

/// Where a sale runs: the shoppers' targets, the admin API, and the database to check.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Endpoints<'a> {
    /// Base URLs the shoppers are spread over.
    pub(crate) targets: &'a [String],
    /// Origin base URL for the admin API (creating the SKU).
    pub(crate) admin_url: &'a str,
    pub(crate) admin_token: &'a str,
    pub(crate) auth: &'a Auth,
    /// The origin's database, for the invariant check.
    pub(crate) database_url: &'a str,
    /// Whose books to check after the sale.
    pub(crate) books: Books<'a>,
}

/// What kind of target keeps the books, and so how the sale is checked.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Books<'a> {
    /// The origin: `skus` and `orders` (`books::check`).
    Origin,
    /// The redis-lua baseline: `lua_orders` and the Redis node at this URL
    /// (`books::check_redis_lua`).
    RedisLua { redis_url: &'a str },
    /// The ceiling: canned answers, no SKU and no books; every 201 counts as a unit until the
    /// stock is reached, after which each shopper stops at its next 201.
    Canned,
}

/// Processes of a local cluster whose CPU time the sale reports (`bench compare`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClusterPids<'a> {
    pub(crate) origins: &'a [u32],
    pub(crate) redis: &'a [u32],
}

/// How shoppers authenticate.
#[derive(Debug, Clone)]
pub(crate) enum Auth {
    /// Sign like the edge (direct to the origin): v2 with the ring's current key.
    Edge(SecretRing),
    /// Present an HS256 session token (through the edge).
    Session(String),
}

/// One answered (or failed) request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sample {
    pub(crate) at: Duration,
    pub(crate) latency: Duration,
    /// HTTP status, or 0 for a transport error.
    pub(crate) status: u16,
}

/// Everything measured in one sale.
#[derive(Debug)]
pub(crate) struct SaleResult {
    pub(crate) name: String,
    pub(crate) concurrency: usize,
    pub(crate) stock: i64,
    pub(crate) samples: Vec<Sample>,
    pub(crate) latency: Histogram<u64>,
    pub(crate) statuses: BTreeMap<String, u64>,
    pub(crate) units_sold: u64,
    pub(crate) sell_out_at: Option<Duration>,
    pub(crate) elapsed: Duration,
    /// Origin metrics accumulated during the sale (None through the edge).
    pub(crate) origin: Option<BTreeMap<&'static str, f64>>,
    /// CPU time each part of the cluster used from the sale's start to its end (`bench compare`
    /// only; the load generator's includes its progress bar).
    pub(crate) cpu: Option<crate::procstat::CpuUse>,
    pub(crate) invariants: Invariants,
}

struct Shared {
    client: reqwest::Client,
    /// Count every 201 as a unit, up to `stock`; past it a 201 ends the shopper
    /// ([`Books::Canned`]).
    canned: bool,
    stock: u64,
    targets: Vec<String>,
    auth: Auth,
    sku: String,
    start: Instant,
    stop: AtomicBool,
    sold: AtomicU64,
    last_201_micros: AtomicU64,
    samples: Mutex<Vec<Sample>>,
    statuses: Mutex<BTreeMap<String, u64>>,
    order_ids: Mutex<HashSet<String>>,
    bar: ProgressBar,
}

/// An HS256 session token for `user`, valid for an hour (signed by the edge's own signer).
pub(crate) fn mint_token(secret: &str, user: &str) -> String {
    let exp = shared::Timestamp::now().unix_secs() + 3600;
    edge::jwt::sign_hs256(
        &serde_json::json!({"sub": user, "exp": exp}),
        secret.as_bytes(),
    )
}

/// Origin metrics the report uses, summed over all targets.
const SCRAPED: [&str; 9] = [
    "origin_lock_acquisitions_total",
    "origin_batch_size_sum",
    "origin_batch_size_count",
    "origin_db_transaction_seconds_sum",
    "origin_lock_wait_seconds_sum",
    "origin_lock_wait_seconds_count",
    "origin_shed_total",
    "origin_sold_out_fast_path_total",
    "origin_purchase_requests_total",
];

/// Scrapes `/metrics` of every target; `None` when a target does not serve it (the edge).
async fn scrape(
    client: &reqwest::Client,
    targets: &[String],
) -> Option<BTreeMap<&'static str, f64>> {
    let mut total = BTreeMap::new();
    for t in targets {
        let res = client.get(format!("{t}/metrics")).send().await.ok()?;
        if !res.status().is_success() {
            return None;
        }
        let text = res.text().await.ok()?;
        for name in SCRAPED {
            let value = text
                .lines()
                .find(|l| l.starts_with(name) && l[name.len()..].starts_with(' '))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0);
            *total.entry(name).or_insert(0.0) += value;
        }
    }
    Some(total)
}

/// Opens the shoppers' connections before the sale: `concurrency` simultaneous `GET /healthz`,
/// spread over the targets as the shoppers are, which leaves that many idle connections in the
/// client's pool for the shoppers to pick up.
async fn warm_connections(client: &reqwest::Client, targets: &[String], concurrency: usize) {
    let opened = futures::future::join_all((0..concurrency).map(|i| {
        let url = format!("{}/healthz", targets[i % targets.len()]);
        async move {
            client
                .get(url)
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
        }
    }))
    .await;
    let ok = opened.iter().filter(|ok| **ok).count();
    if ok < concurrency {
        eprintln!("warm-up: {ok}/{concurrency} connections opened; the rest open during the sale");
    }
}

/// Runs one sale; see the module docs.
pub(crate) async fn run(
    args: &SaleArgs,
    endpoints: &Endpoints<'_>,
    name: Option<&str>,
    cluster_pids: Option<ClusterPids<'_>>,
) -> anyhow::Result<SaleResult> {
    let Endpoints {
        targets,
        admin_url,
        admin_token,
        auth,
        database_url,
        books: kind,
    } = *endpoints;
    let canned = matches!(kind, Books::Canned);
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(args.concurrency)
        .timeout(Duration::from_secs(30))
        .build()?;
    let sku = args
        .sku
        .clone()
        .unwrap_or_else(|| format!("BENCH-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]));
    if !canned {
        let res = client
            .put(format!("{admin_url}/v1/admin/skus/{sku}"))
            .bearer_auth(admin_token)
            .json(&serde_json::json!({"name": "Benchmark item", "price_cents": 100, "stock": args.stock, "max_per_user": args.max_per_user}))
            .send()
            .await
            .context("creating the SKU")?;
        anyhow::ensure!(
            res.status().is_success(),
            "creating the SKU: {} {}",
            res.status(),
            res.text().await.unwrap_or_default()
        );
    }
    let generation = match kind {
        Books::Origin => books::current_generation(database_url, &sku).await?,
        Books::RedisLua { .. } | Books::Canned => 0,
    };
    if !args.cold_connections {
        warm_connections(&client, targets, args.concurrency).await;
    }
    let metrics_before = scrape(&client, targets).await;
    let cpu_before = cluster_pids.map(|p| CpuSample::now(p.origins, p.redis));

    let bar = ProgressBar::new(u64::try_from(args.stock).unwrap_or(0));
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} sold  {msg}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let shared = Arc::new(Shared {
        client,
        canned,
        stock: u64::try_from(args.stock).unwrap_or(0),
        targets: targets.to_vec(),
        auth: auth.clone(),
        sku: sku.clone(),
        start: Instant::now(),
        stop: AtomicBool::new(false),
        sold: AtomicU64::new(0),
        last_201_micros: AtomicU64::new(0),
        samples: Mutex::new(Vec::new()),
        statuses: Mutex::new(BTreeMap::new()),
        order_ids: Mutex::new(HashSet::new()),
        bar,
    });
    let shoppers: Vec<_> = (0..args.concurrency)
        .map(|i| tokio::spawn(shopper(shared.clone(), i)))
        .collect();
    let deadline = tokio::time::sleep(args.max_duration());
    tokio::pin!(deadline);
    let all = futures::future::join_all(shoppers);
    tokio::pin!(all);
    tokio::select! {
        _ = &mut all => {}
        () = &mut deadline => {
            shared.stop.store(true, Ordering::Relaxed);
            eprintln!("time cap reached; stopping shoppers");
            all.await;
        }
    }
    let elapsed = shared.start.elapsed();
    shared.bar.finish_and_clear();
    let cpu = cluster_pids
        .zip(cpu_before)
        .map(|(p, before)| CpuSample::now(p.origins, p.redis).since(&before));
    let metrics_after = scrape(&shared.client, targets).await;

    let samples = std::mem::take(&mut *shared.samples.lock().await);
    let mut latency = Histogram::<u64>::new(3)?;
    for s in &samples {
        latency.record(
            u64::try_from(s.latency.as_micros())
                .unwrap_or(u64::MAX)
                .max(1),
        )?;
    }
    let units_sold = match shared.sold.load(Ordering::Relaxed) {
        n if canned => n.min(shared.stock),
        n => n,
    };
    let last = shared.last_201_micros.load(Ordering::Relaxed);
    let order_ids: Vec<String> = shared.order_ids.lock().await.iter().cloned().collect();
    let invariants = match kind {
        Books::Origin => {
            let sold = SkuBooks {
                sku: sku.clone(),
                cap: args.max_per_user,
                generations: vec![Generation {
                    number: generation,
                    initial: args.stock,
                    closed_with: None,
                }],
            };
            books::check(database_url, &[sold], &order_ids).await?
        }
        Books::RedisLua { redis_url } => {
            books::check_redis_lua(
                database_url,
                redis_url,
                &sku,
                args.stock,
                args.max_per_user,
                &order_ids,
            )
            .await?
        }
        Books::Canned => Invariants {
            canned: true,
            ..Invariants::default()
        },
    };
    Ok(SaleResult {
        name: name.unwrap_or(&args.label).to_owned(),
        concurrency: args.concurrency,
        stock: args.stock,
        samples,
        latency,
        statuses: std::mem::take(&mut *shared.statuses.lock().await),
        units_sold,
        sell_out_at: (last > 0).then(|| Duration::from_micros(last)),
        elapsed,
        cpu,
        origin: metrics_before.zip(metrics_after).map(|(b, a)| {
            a.into_iter()
                .map(|(k, v)| (k, v - b.get(k).copied().unwrap_or(0.0)))
                .collect()
        }),
        invariants,
    })
}

/// One shopper: buys one unit at a time with a fresh key, retrying the same key on 503, 429 and
/// transport errors, until sold out, capped, or stopped.
async fn shopper(s: Arc<Shared>, i: usize) {
    let user = format!("shopper-{i}");
    let target = &s.targets[i % s.targets.len()];
    let token = match &s.auth {
        Auth::Session(secret) => Some(mint_token(secret, &user)),
        Auth::Edge(_) => None,
    };
    let body = format!(r#"{{"sku":"{}","qty":1}}"#, s.sku);
    while !s.stop.load(Ordering::Relaxed) {
        let key = uuid::Uuid::new_v4().to_string();
        loop {
            if s.stop.load(Ordering::Relaxed) {
                return;
            }
            let mut req = s
                .client
                .post(format!("{target}/v1/purchases"))
                .header("idempotency-key", &key)
                .body(body.clone());
            match (&s.auth, &token) {
                (_, Some(t)) => req = req.bearer_auth(t),
                (Auth::Edge(ring), None) => {
                    let parts = SignedParts {
                        method: "POST",
                        path: "/v1/purchases",
                        user: &user,
                        idempotency_key: &key,
                        body: body.as_bytes(),
                    };
                    req = req.header("flashgate-user", &user).header(
                        "flashgate-signature",
                        signing::sign(ring, shared::Timestamp::now().unix_secs(), &parts),
                    );
                }
                (Auth::Session(_), None) => return,
            }
            let t0 = Instant::now();
            let result = req.send().await;
            let latency = t0.elapsed();
            let at = s.start.elapsed();
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
            s.samples.lock().await.push(Sample {
                at,
                latency,
                status,
            });
            let label = match status {
                0 => "transport error".to_owned(),
                201 => "201".to_owned(),
                _ => format!("{status} {}", json["code"].as_str().unwrap_or("?")),
            };
            *s.statuses.lock().await.entry(label).or_insert(0) += 1;
            match status {
                201 if s.canned => {
                    let n = s.sold.fetch_add(1, Ordering::Relaxed) + 1;
                    if n <= s.stock {
                        s.bar.inc(1);
                        s.last_201_micros.fetch_max(
                            u64::try_from(at.as_micros()).unwrap_or(u64::MAX),
                            Ordering::Relaxed,
                        );
                    }
                    if n >= s.stock {
                        // Sold out: this shopper's last answer, as a real target's 409. Every
                        // shopper still sends its first request, so the opening burst is the
                        // same as against a real target (the whole burst for the last item).
                        return;
                    }
                    break;
                }
                201 => {
                    if let Some(id) = json["order_id"].as_str()
                        && s.order_ids.lock().await.insert(id.to_owned())
                    {
                        s.sold.fetch_add(1, Ordering::Relaxed);
                        s.bar.inc(1);
                        s.last_201_micros.fetch_max(
                            u64::try_from(at.as_micros()).unwrap_or(u64::MAX),
                            Ordering::Relaxed,
                        );
                    }
                    break; // next unit, fresh key
                }
                503 | 429 | 0 => {
                    let wait = retry_after.map_or(Duration::from_millis(200), Duration::from_secs);
                    tokio::time::sleep(wait).await;
                }
                409 if json["code"] == "idempotency_in_flight" => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                _ => return, // sold_out, purchase_limit, or a 4xx the benchmark does not expect
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve;

    #[test]
    fn minted_tokens_are_what_the_edge_accepts_for_an_hour() {
        let secret = "bench-session-secret-0123456789";
        let now = shared::Timestamp::now().unix_secs();
        let claims = edge::jwt::verify_hs256(
            &mint_token(secret, "shopper-7"),
            &SecretRing::single(secret),
            &edge::jwt::TokenRules::default(),
            now,
        )
        .expect("the edge accepts it");
        assert_eq!(claims.sub.as_str(), "shopper-7");
        assert!(
            (now + 3599..=now + 3601).contains(&claims.exp),
            "{}",
            claims.exp
        );
    }

    /// A sale of `stock` units by `shoppers` against an in-process ceiling.
    async fn ceiling_sale(stock: i64, shoppers: usize) -> SaleResult {
        let ring = SecretRing::single(crate::cluster::EDGE_SECRET);
        let listener = serve::bind("127.0.0.1:0".parse().expect("addr")).expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let server = tokio::spawn(serve::serve_on(
            listener,
            serve::ceiling::router(ring.clone()),
        ));
        let args = SaleArgs {
            concurrency: shoppers,
            stock,
            max_per_user: 1_000_000,
            max_seconds: 60,
            sku: None,
            out_dir: std::env::temp_dir(),
            label: "test".into(),
            cold_connections: true,
            samples_csv: false,
        };
        let targets = [url.clone()];
        let auth = Auth::Edge(ring);
        let endpoints = Endpoints {
            targets: &targets,
            admin_url: &url,
            admin_token: "",
            auth: &auth,
            database_url: "",
            books: Books::Canned,
        };
        let result = run(&args, &endpoints, None, None).await.expect("sale");
        server.abort();
        result
    }

    #[tokio::test]
    async fn against_the_ceiling_every_shopper_opens_and_the_stock_ends_the_sale() {
        for (stock, shoppers) in [(1, 50), (200, 20)] {
            let r = ceiling_sale(stock, shoppers).await;
            let units = u64::try_from(stock).expect("stock");
            assert_eq!(r.units_sold, units, "stock {stock}");
            // Each shopper ends at its first 201 past the stock (a real target's 409), so all
            // of them send their opening request, as against a real target.
            let c = u64::try_from(shoppers).expect("shoppers");
            assert_eq!(
                r.statuses.get("201"),
                Some(&(units - 1 + c)),
                "stock {stock}"
            );
            assert_eq!(r.latency.len(), units - 1 + c, "stock {stock}");
            assert!(r.sell_out_at.is_some() && r.invariants.canned && r.invariants.ok());
        }
    }
}
