//! What `bench events` prints.

use hdrhistogram::Histogram;

use super::args::{EventsArgs, SaleFigures};
use super::check::Checks;

/// `/proc/loadavg`'s first three fields, and the CPUs.
fn machine() -> String {
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into());
    let cpus = std::thread::available_parallelism().map_or(0, usize::from);
    format!("load average {load} at the end, {cpus} CPUs")
}

fn ms(h: &Histogram<u64>, q: f64) -> String {
    if h.is_empty() {
        "-".into()
    } else {
        format!("{} ms", h.value_at_quantile(q))
    }
}

fn secs(v: Option<f64>) -> String {
    v.map_or("-".into(), |s| format!("{:.0} ms", s * 1000.0))
}

/// A histogram of microseconds at `q`, in milliseconds.
fn us_as_ms(h: &Histogram<u64>, q: f64) -> String {
    if h.is_empty() {
        "-".into()
    } else {
        format!("{:.1} ms", h.value_at_quantile(q) as f64 / 1000.0)
    }
}

fn sale_line(label: &str, f: &SaleFigures, stock: i64) -> String {
    let latency = f.purchase_latency.as_ref();
    format!(
        "{label:<34} {:>9} {:>9} {:>9} {:>8} {:>6} {:>6} {:>6} {:>6}  {:.1} s",
        f.rate(stock).map_or("-".into(), |r| format!("{r:.0}")),
        latency.map_or("-".into(), |h| us_as_ms(h, 0.5)),
        latency.map_or("-".into(), |h| us_as_ms(h, 0.99)),
        f.created,
        f.abandoned,
        f.cancelled,
        f.paid,
        f.refunded,
        f.elapsed.as_secs_f64(),
    )
}

pub(super) fn print(
    args: &EventsArgs,
    command_line: &str,
    rounds: &[(SaleFigures, SaleFigures)],
    c: &Checks,
) {
    println!("\n== bench events: {command_line}");
    println!("machine: {}", machine());
    println!(
        "sale: {} units, hold_secs {}, {} shoppers, {} origin(s) over {} Redis node(s), DB_MAX_CONNECTIONS={}; holds abandoned {:.0} %, cancelled {:.0} %, payments refunded with restock {:.0} %; WEBHOOK_RETRY_SCHEDULE={}, WEBHOOK_MAX_IN_FLIGHT={}",
        args.stock,
        args.hold_secs,
        args.concurrency,
        args.origins,
        args.redis_nodes,
        args.db_max_connections,
        args.abandon * 100.0,
        args.cancel * 100.0,
        args.refund * 100.0,
        args.retry_schedule,
        args.max_in_flight
    );
    println!(
        "\n{:<34} {:>9} {:>9} {:>9} {:>8} {:>6} {:>6} {:>6} {:>6}  whole sale",
        "", "purch/s", "p50", "p99", "201s", "aband", "cancel", "paid", "refund"
    );
    let mut ratios = Vec::new();
    for (i, (plain, with)) in rounds.iter().enumerate() {
        let n = i + 1;
        println!(
            "{}",
            sale_line(&format!("{n}. no endpoint, no stream"), plain, args.stock)
        );
        println!(
            "{}",
            sale_line(&format!("{n}. 2 endpoints + stream"), with, args.stock)
        );
        if let (Some(a), Some(b)) = (plain.rate(args.stock), with.rate(args.stock)) {
            ratios.push(b / a);
        }
    }
    ratios.sort_by(f64::total_cmp);
    if !ratios.is_empty() {
        println!(
            "purchases/s with delivery, as a share of the run without, per round: {} (median {:.1} %; goal: within 10 %)",
            ratios
                .iter()
                .map(|r| format!("{:.1} %", r * 100.0))
                .collect::<Vec<_>>()
                .join(", "),
            ratios[ratios.len() / 2] * 100.0
        );
    }
    let (plain, with) = &rounds[rounds.len() - 1];
    for (label, f) in [("no endpoint", plain), ("with delivery", with)] {
        let answers: Vec<String> = f
            .statuses
            .iter()
            .map(|(s, n)| format!("{s}: {n}"))
            .collect();
        println!("answers ({label}, last round): {}", answers.join(", "));
    }
    println!(
        "\nthe delivered sale checked (the last round's, or the first that failed) — events in the feed: {} ({}); drained: {}",
        c.feed_events,
        c.by_type
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        c.drained_in.map_or("NO (time cap)".into(), |d| format!(
            "{:.1} s after the sale",
            d.as_secs_f64()
        ))
    );
    println!(
        "\n{:<10} {:>8} {:>8} {:>6} {:>6} {:>10} {:>10} {:>10}",
        "endpoint", "sent", "acked", "lost", "dups", "lag p50", "lag p99", "lag max"
    );
    for e in &c.endpoints {
        println!(
            "{:<10} {:>8} {:>8} {:>6} {:>6} {:>10} {:>10} {:>10}",
            e.name,
            e.sent,
            e.acknowledged,
            e.lost,
            e.duplicates,
            ms(&e.lag, 0.5),
            ms(&e.lag, 0.99),
            ms(&e.lag, 1.0)
        );
    }
    println!(
        "(lag: from the event's timestamp — its change — to the receiver's first acknowledged delivery; goal for the healthy endpoint: p99 <= 1 s)"
    );
    println!(
        "stream: {} entries, {} of the feed's events missing; p99 lag to the stream {} (origins' metrics); feed p99 lag {}",
        c.stream_entries,
        c.stream_missing,
        secs(c.stream_lag_p99),
        secs(c.feed_lag_p99)
    );
    println!(
        "orders whose state is not their last event's: {} of {}",
        c.order_mismatches, c.orders
    );
    println!(
        "origin reconcile: exit {} — {}",
        c.reconcile.0,
        c.reconcile.1.lines().last().unwrap_or("")
    );
    let lost: usize = c.endpoints.iter().map(|e| e.lost).sum::<usize>() + c.stream_missing;
    println!(
        "\nRESULT: {} lost, {}",
        lost,
        if c.passed() {
            "every check passed"
        } else {
            "FAILED"
        }
    );
}
