//! `bench events`' checks after the delivered sale: wait for every delivery, then compare what
//! each receiver acknowledged and what the stream holds with the feed, and the feed with the
//! orders; the lags; `origin reconcile`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::Context;
use hdrhistogram::Histogram;

use super::args::EventsArgs;
use super::receivers::Receiver;
use crate::cluster::{self, Cluster};
use crate::holds::report::{diff, histogram_quantile};

/// One endpoint's figures.
#[derive(Debug)]
pub(super) struct EndpointCheck {
    pub(super) name: &'static str,
    /// Deliveries sent to it (every attempt), and the events it acknowledged.
    pub(super) sent: usize,
    pub(super) acknowledged: usize,
    /// The feed's events it never acknowledged.
    pub(super) lost: usize,
    /// Acknowledgements beyond the first of an event.
    pub(super) duplicates: usize,
    /// Commit → first acknowledged delivery, in milliseconds.
    pub(super) lag: Histogram<u64>,
}

/// Everything checked.
#[derive(Debug)]
pub(super) struct Checks {
    pub(super) feed_events: usize,
    pub(super) by_type: BTreeMap<String, usize>,
    pub(super) drained_in: Option<Duration>,
    pub(super) endpoints: Vec<EndpointCheck>,
    pub(super) stream_entries: usize,
    pub(super) stream_missing: usize,
    /// Orders whose state is not their last event's (or that have no event).
    pub(super) order_mismatches: usize,
    pub(super) orders: usize,
    pub(super) feed_lag_p99: Option<f64>,
    pub(super) stream_lag_p99: Option<f64>,
    pub(super) reconcile: (i32, String),
}

impl Checks {
    pub(super) fn passed(&self) -> bool {
        self.endpoints.iter().all(|e| e.lost == 0)
            && self.stream_missing == 0
            && self.order_mismatches == 0
            && self.reconcile.0 == 0
    }
}

/// Every event of the feed, oldest first.
async fn feed(client: &reqwest::Client, base: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut events = Vec::new();
    let mut after = String::new();
    loop {
        let url = if after.is_empty() {
            format!("{base}/v1/events?limit=1000")
        } else {
            format!("{base}/v1/events?limit=1000&after={after}")
        };
        let page: serde_json::Value = client
            .get(url)
            .bearer_auth(cluster::ADMIN_TOKEN)
            .send()
            .await?
            .json()
            .await?;
        events.extend(page["data"].as_array().cloned().unwrap_or_default());
        after = page["next"].as_str().unwrap_or_default().to_owned();
        if page["has_more"] != true {
            return Ok(events);
        }
    }
}

/// Waits until no delivery is pending for any endpoint and the stream holds `events` entries
/// (the feed read again meanwhile), at most `within`; how long it took.
async fn drained(
    client: &reqwest::Client,
    cluster: &Cluster,
    redis: &mut redis::aio::MultiplexedConnection,
    within: Duration,
) -> anyhow::Result<Option<Duration>> {
    let start = Instant::now();
    while start.elapsed() < within {
        let list: serde_json::Value = client
            .get(format!("{}/v1/admin/webhooks", cluster.origin_urls[0]))
            .bearer_auth(cluster::ADMIN_TOKEN)
            .send()
            .await?
            .json()
            .await?;
        let pending: i64 = list["data"]
            .as_array()
            .map(|a| a.iter().filter_map(|e| e["pending"].as_i64()).sum())
            .unwrap_or(0);
        let events = feed(client, &cluster.origin_urls[0]).await?.len();
        let entries: usize = redis::cmd("XLEN")
            .arg("flashgate:events")
            .query_async(redis)
            .await?;
        if pending == 0 && entries >= events {
            return Ok(Some(start.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(None)
}

/// `name`'s buckets summed over the origins' `/metrics`.
async fn buckets(client: &reqwest::Client, cluster: &Cluster, name: &str) -> Vec<(f64, f64)> {
    let mut total: Vec<(f64, f64)> = Vec::new();
    for base in &cluster.origin_urls {
        let Ok(res) = client.get(format!("{base}/metrics")).send().await else {
            continue;
        };
        let text = res.text().await.unwrap_or_default();
        let prefix = format!("{name}_bucket{{le=\"");
        for line in text.lines() {
            let Some((le, value)) = line
                .strip_prefix(&prefix)
                .and_then(|rest| rest.split_once("\"} "))
            else {
                continue;
            };
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap_or(f64::NAN)
            };
            let value: f64 = value.parse().unwrap_or(0.0);
            match total.iter_mut().find(|(b, _)| *b == le) {
                Some((_, v)) => *v += value,
                None => total.push((le, value)),
            }
        }
    }
    total.sort_by(|a, b| a.0.total_cmp(&b.0));
    total
}

pub(super) async fn run(
    args: &EventsArgs,
    cluster: &Cluster,
    endpoints: &[(&'static str, String, &Receiver)],
) -> anyhow::Result<Checks> {
    let client = reqwest::Client::new();
    let stream_url = cluster
        .stream_url
        .clone()
        .context("the cluster has no stream")?;
    let mut redis = redis::Client::open(stream_url)?
        .get_multiplexed_async_connection()
        .await
        .context("connecting to the stream's Redis")?;
    eprintln!(
        "== waiting for every delivery (at most {} s)",
        args.drain_seconds
    );
    let drained_in = drained(
        &client,
        cluster,
        &mut redis,
        Duration::from_secs(args.drain_seconds),
    )
    .await?;
    let events = feed(&client, &cluster.origin_urls[0]).await?;
    let ids: HashSet<String> = events
        .iter()
        .filter_map(|e| e["id"].as_str().map(str::to_owned))
        .collect();
    let mut by_type: BTreeMap<String, usize> = BTreeMap::new();
    for e in &events {
        *by_type
            .entry(e["type"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }

    let mut checked = Vec::new();
    for (name, _, receiver) in endpoints {
        let log = receiver.log();
        let mut first: HashMap<&str, i64> = HashMap::new();
        let mut acks = 0;
        let mut lag = Histogram::<u64>::new(3)?;
        for d in log.iter().filter(|d| d.acknowledged) {
            acks += 1;
            if first.contains_key(d.id.as_str()) {
                continue;
            }
            first.insert(&d.id, d.arrived_ms);
            if let Some(at) = d.event_ms {
                let _ = lag.record(u64::try_from(d.arrived_ms - at).unwrap_or(0));
            }
        }
        let lost = ids
            .iter()
            .filter(|id| !first.contains_key(id.as_str()))
            .count();
        checked.push(EndpointCheck {
            name,
            sent: log.len(),
            acknowledged: first.len(),
            lost,
            duplicates: acks - first.len(),
            lag,
        });
    }

    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg("flashgate:events")
        .arg("-")
        .arg("+")
        .query_async(&mut redis)
        .await?;
    let streamed: HashSet<String> = entries
        .iter()
        .filter_map(|(_, fields)| {
            fields
                .iter()
                .find(|(k, _)| k == "id")
                .map(|(_, v)| v.clone())
        })
        .collect();
    let stream_missing = ids.iter().filter(|id| !streamed.contains(*id)).count();

    // Each order's state is its last event's (the feed is in position order).
    let mut last: HashMap<String, String> = HashMap::new();
    for e in &events {
        if let (Some(order), Some(status)) =
            (e["data"]["order_id"].as_str(), e["data"]["status"].as_str())
        {
            last.insert(order.to_owned(), status.to_owned());
        }
    }
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(120))
        .connect(&cluster.database_url)
        .await
        .context("connecting to the run's database")?;
    let orders: Vec<(String, String)> = sqlx::query_as("SELECT order_id::text, status FROM orders")
        .fetch_all(&pool)
        .await?;
    pool.close().await;
    let order_mismatches = orders
        .iter()
        .filter(|(id, status)| last.get(id) != Some(status))
        .count();

    let feed_lag_p99 = histogram_quantile(
        0.99,
        &diff(
            &buckets(&client, cluster, "origin_event_feed_lag_seconds").await,
            &[],
        ),
    );
    let stream_lag_p99 = histogram_quantile(
        0.99,
        &diff(
            &buckets(&client, cluster, "origin_event_stream_lag_seconds").await,
            &[],
        ),
    );
    let out = tokio::process::Command::new(&args.origin_bin)
        .arg("reconcile")
        .env("DATABASE_URL", &cluster.database_url)
        .env("RUST_LOG", "error")
        .output()
        .await
        .context("running origin reconcile")?;
    Ok(Checks {
        feed_events: events.len(),
        by_type,
        drained_in,
        endpoints: checked,
        stream_entries: entries.len(),
        stream_missing,
        order_mismatches,
        orders: orders.len(),
        feed_lag_p99,
        stream_lag_p99,
        reconcile: (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        ),
    })
}
