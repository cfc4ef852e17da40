//! What `bench holds` prints, and the origins' expiry-lag histogram it reads.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;

use super::args::HoldsArgs;
use crate::sale::SaleResult;

/// What the holds sale measured.
#[derive(Debug, Default)]
pub(super) struct HoldsResult {
    pub(super) elapsed: Duration,
    pub(super) created: u64,
    /// When the `stock`-th 201 came (the first pass over the stock).
    pub(super) first_pass_at: Option<Duration>,
    pub(super) abandoned: u64,
    pub(super) paid: u64,
    pub(super) webhooks: u64,
    pub(super) webhook_retries: u64,
    pub(super) webhook_latency: Option<Histogram<u64>>,
    pub(super) purchase_latency: Option<Histogram<u64>>,
    pub(super) statuses: BTreeMap<String, u64>,
    pub(super) samples: u64,
    pub(super) violations: Vec<String>,
    pub(super) expired: i64,
    pub(super) orders_by_status: BTreeMap<String, i64>,
    pub(super) lag_p50: Option<f64>,
    pub(super) lag_p99: Option<f64>,
    pub(super) lag_max: Option<f64>,
    pub(super) metric_lag_p99: Option<f64>,
}

/// `origin_hold_expiry_lag_seconds` buckets (upper bound, cumulative count), summed over the
/// origins; `None` when a target does not export it.
pub(super) async fn scrape_lag(
    client: &reqwest::Client,
    targets: &[String],
) -> Option<Vec<(f64, f64)>> {
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

pub(super) fn diff(after: &[(f64, f64)], before: &[(f64, f64)]) -> Vec<(f64, f64)> {
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
pub(super) fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
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

pub(super) fn print(args: &HoldsArgs, command_line: &str, plain: &SaleResult, r: &HoldsResult) {
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
