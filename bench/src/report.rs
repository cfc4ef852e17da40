//! The summary table printed at the end of a run.

use std::time::Duration;

use crate::procstat::CpuUse;
use crate::sale::SaleResult;

fn ms(micros: u64) -> String {
    format!("{:.1}", micros as f64 / 1000.0)
}

fn per_sec(n: u64, d: Option<Duration>) -> f64 {
    match d {
        Some(d) if d > Duration::ZERO => n as f64 / d.as_secs_f64(),
        _ => 0.0,
    }
}

/// Renders one table cell of a result.
type Column = Box<dyn Fn(&SaleResult) -> String>;

/// Formats a figure computed from the origin metrics, `-` when they were not scraped.
fn stat(
    r: &SaleResult,
    f: impl Fn(&std::collections::BTreeMap<&'static str, f64>) -> f64,
    decimals: usize,
) -> String {
    r.origin
        .as_ref()
        .map_or_else(|| "-".to_owned(), |m| format!("{:.*}", decimals, f(m)))
}

/// CPU milliseconds one part of the cluster spent per HTTP request answered, `-` without figures.
fn cpu_per_request(r: &SaleResult, part: impl Fn(&CpuUse) -> f64) -> String {
    r.cpu.map_or("-".into(), |c| {
        format!("{:.3}", 1000.0 * part(&c) / r.latency.len().max(1) as f64)
    })
}

/// Prints one column per result, and the speed-up of the first over the last when there are two.
pub(crate) fn print(results: &[&SaleResult]) {
    let rows: Vec<(&str, Column)> = vec![
        ("shoppers", Box::new(|r| r.concurrency.to_string())),
        ("stock", Box::new(|r| r.stock.to_string())),
        ("units sold", Box::new(|r| r.units_sold.to_string())),
        (
            "time to sell-out (s)",
            Box::new(|r| {
                r.sell_out_at
                    .map_or("-".into(), |d| format!("{:.2}", d.as_secs_f64()))
            }),
        ),
        (
            "confirmed purchases/s",
            Box::new(|r| format!("{:.0}", per_sec(r.units_sold, r.sell_out_at))),
        ),
        (
            "decisions/s",
            Box::new(|r| {
                let decided: u64 = r
                    .statuses
                    .iter()
                    .filter(|(k, _)| !k.starts_with("503") && !k.starts_with("transport"))
                    .map(|(_, v)| v)
                    .sum();
                format!("{:.0}", per_sec(decided, Some(r.elapsed)))
            }),
        ),
        ("requests", Box::new(|r| r.latency.len().to_string())),
        (
            "p50 ms",
            Box::new(|r| ms(r.latency.value_at_quantile(0.50))),
        ),
        (
            "p90 ms",
            Box::new(|r| ms(r.latency.value_at_quantile(0.90))),
        ),
        (
            "p99 ms",
            Box::new(|r| ms(r.latency.value_at_quantile(0.99))),
        ),
        ("max ms", Box::new(|r| ms(r.latency.max()))),
        (
            "lock acquisitions / sold unit",
            Box::new(|r| {
                stat(
                    r,
                    |m| m["origin_lock_acquisitions_total"] / r.units_sold.max(1) as f64,
                    3,
                )
            }),
        ),
        (
            "origin transactions",
            Box::new(|r| stat(r, |m| m["origin_batch_size_count"], 0)),
        ),
        (
            "mean batch size",
            Box::new(|r| {
                stat(
                    r,
                    |m| m["origin_batch_size_sum"] / m["origin_batch_size_count"].max(1.0),
                    1,
                )
            }),
        ),
        (
            "mean transaction ms",
            Box::new(|r| {
                stat(
                    r,
                    |m| {
                        1000.0 * m["origin_db_transaction_seconds_sum"]
                            / m["origin_batch_size_count"].max(1.0)
                    },
                    2,
                )
            }),
        ),
        (
            "mean lock wait ms",
            Box::new(|r| {
                stat(
                    r,
                    |m| {
                        1000.0 * m["origin_lock_wait_seconds_sum"]
                            / m["origin_lock_wait_seconds_count"].max(1.0)
                    },
                    1,
                )
            }),
        ),
        (
            "origin requests",
            Box::new(|r| stat(r, |m| m["origin_purchase_requests_total"], 0)),
        ),
        (
            "sold-out fast-path answers",
            Box::new(|r| stat(r, |m| m["origin_sold_out_fast_path_total"], 0)),
        ),
        (
            "shed (503) by the origin",
            Box::new(|r| stat(r, |m| m["origin_shed_total"], 0)),
        ),
        (
            "CPU busy % (all cores)",
            Box::new(|r| {
                r.cpu.map_or("-".into(), |c| {
                    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                    format!(
                        "{:.0}",
                        100.0 * c.total() / (r.elapsed.as_secs_f64() * cores as f64)
                    )
                })
            }),
        ),
        (
            "CPU ms/request: load gen",
            Box::new(|r| cpu_per_request(r, |c| c.load_generator)),
        ),
        (
            "CPU ms/request: origins",
            Box::new(|r| cpu_per_request(r, |c| c.origins)),
        ),
        (
            "CPU ms/request: redis",
            Box::new(|r| cpu_per_request(r, |c| c.redis)),
        ),
        (
            "CPU ms/request: postgres",
            Box::new(|r| cpu_per_request(r, |c| c.postgres)),
        ),
        (
            "invariants",
            Box::new(|r| {
                if r.invariants.ok() {
                    "ok".into()
                } else {
                    r.invariants.violations.join("; ")
                }
            }),
        ),
    ];
    let mut statuses: Vec<&String> = results.iter().flat_map(|r| r.statuses.keys()).collect();
    statuses.sort();
    statuses.dedup();

    let width = 32;
    print!("\n{:<width$}", "");
    for r in results {
        print!("{:>22}", r.name);
    }
    println!();
    for (name, f) in &rows {
        print!("{name:<width$}");
        for r in results {
            print!("{:>22}", f(r));
        }
        println!();
    }
    for s in statuses {
        print!("{:<width$}", format!("status {s}"));
        for r in results {
            print!("{:>22}", r.statuses.get(s).copied().unwrap_or(0));
        }
        println!();
    }
    if let [first, .., last] = results {
        let a = per_sec(first.units_sold, first.sell_out_at);
        let b = per_sec(last.units_sold, last.sell_out_at);
        if b > 0.0 {
            println!(
                "\nconfirmed purchases/s, {} vs {}: {:.1}x",
                first.name,
                last.name,
                a / b
            );
        }
    }
    for r in results {
        let i = &r.invariants;
        println!(
            "[{}] db: initial {} remaining {} units in orders {} | max units/user {} (cap {}) | 201 orders {} found {} | orders {}",
            r.name,
            i.initial,
            i.remaining,
            i.units_in_orders,
            i.max_units_per_user,
            i.cap,
            i.distinct_201_orders,
            i.orders_found_for_201s,
            i.orders_total
        );
    }
}
