//! What a run prints at the end: the detailed table of each sale ([`print`]) and, for
//! `bench compare`, the headline table of every target beside the ceiling and the redis-lua
//! baseline ([`summary`]).

use std::time::Duration;

use crate::procstat::CpuUse;
use crate::sale::SaleResult;
use crate::targets::{Connections, Target};

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

/// Prints one column per result.
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
                if r.invariants.canned {
                    "- (canned answers)".into()
                } else if r.invariants.ok() {
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
    for r in results {
        let i = &r.invariants;
        if i.canned {
            println!("[{}] db: none (canned answers)", r.name);
            continue;
        }
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

/// One sale of `bench compare`: which target, with which connections.
#[derive(Debug)]
pub(crate) struct Run {
    pub(crate) target: Target,
    pub(crate) connections: Connections,
    pub(crate) result: SaleResult,
}

/// Confirmed purchases per second: units sold over the time of the last one.
pub(crate) fn purchases_per_sec(r: &SaleResult) -> f64 {
    per_sec(r.units_sold, r.sell_out_at)
}

/// Answers with a 5xx status.
fn server_errors(r: &SaleResult) -> u64 {
    r.statuses
        .iter()
        .filter(|(k, _)| k.starts_with('5'))
        .map(|(_, v)| v)
        .sum()
}

/// `x` as a multiple: two significant digits or so.
fn times(x: f64) -> String {
    if x >= 10.0 {
        format!("{x:.0}×")
    } else if x >= 1.0 {
        format!("{x:.1}×")
    } else {
        format!("{x:.2}×")
    }
}

/// The headline table (Markdown): a row per target and, per connection mode, its confirmed
/// purchases/s, p50 / p99, 5xx answers, its share of the ceiling and its ratio to the redis-lua
/// baseline (and to the one-lock baseline, when it ran) measured with the same connections.
pub(crate) fn summary(runs: &[Run]) -> String {
    let mut targets: Vec<Target> = Vec::new();
    let mut modes: Vec<Connections> = Vec::new();
    for run in runs {
        if !targets.contains(&run.target) {
            targets.push(run.target);
        }
        if !modes.contains(&run.connections) {
            modes.push(run.connections);
        }
    }
    let find = |t: Target, c: Connections| {
        runs.iter()
            .find(|r| r.target == t && r.connections == c)
            .map(|r| &r.result)
    };
    let mut references = vec![
        (Target::Ceiling, "of ceiling"),
        (Target::RedisLua, "× redis-lua"),
    ];
    if targets.contains(&Target::Baseline) {
        references.push((Target::Baseline, "× baseline"));
    }
    if targets.contains(&Target::Traced) {
        references.push((Target::Combiner, "× combiner"));
    }
    let mut header = vec!["target".to_owned()];
    for m in &modes {
        header.push(format!("{m}: purchases/s"));
        header.push(format!("{m}: p50 / p99 ms"));
        header.push(format!("{m}: 5xx"));
        for (_, name) in &references {
            header.push(format!("{m}: {name}"));
        }
    }
    let mut out = format!("| {} |\n", header.join(" | "));
    out.push_str(&format!("|---|{}\n", "---:|".repeat(header.len() - 1)));
    for t in &targets {
        let mut row = vec![t.name().to_owned()];
        for m in &modes {
            let Some(r) = find(*t, *m) else {
                row.extend(std::iter::repeat_n("-".to_owned(), 3 + references.len()));
                continue;
            };
            let rate = purchases_per_sec(r);
            row.push(format!("{rate:.0}"));
            row.push(format!(
                "{} / {}",
                ms(r.latency.value_at_quantile(0.50)),
                ms(r.latency.value_at_quantile(0.99))
            ));
            row.push(server_errors(r).to_string());
            for (reference, _) in &references {
                let of = find(*reference, *m).map(purchases_per_sec);
                row.push(match of {
                    Some(of) if of > 0.0 && *reference == Target::Ceiling => {
                        format!("{:.0} %", 100.0 * rate / of)
                    }
                    Some(of) if of > 0.0 => times(rate / of),
                    _ => "-".to_owned(),
                });
            }
        }
        out.push_str(&format!("| {} |\n", row.join(" | ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::Histogram;
    use std::collections::BTreeMap;

    /// A sale that sold `units` in `secs`, every answer after `micros` (below 2,048 µs the
    /// histogram is exact), with `errors` 503s.
    fn sale(name: &str, units: u64, secs: f64, micros: u64, errors: u64) -> SaleResult {
        let mut latency = Histogram::<u64>::new(3).expect("histogram");
        latency.record(micros).expect("record");
        let mut statuses = BTreeMap::from([("201".to_owned(), units)]);
        if errors > 0 {
            statuses.insert("503 unavailable".to_owned(), errors);
        }
        SaleResult {
            name: name.to_owned(),
            concurrency: 10,
            stock: i64::try_from(units).expect("units"),
            samples: Vec::new(),
            latency,
            statuses,
            units_sold: units,
            sell_out_at: Some(Duration::from_secs_f64(secs)),
            elapsed: Duration::from_secs_f64(secs),
            origin: None,
            cpu: None,
            invariants: crate::books::Invariants::default(),
        }
    }

    fn run(target: Target, connections: Connections, result: SaleResult) -> Run {
        Run {
            target,
            connections,
            result,
        }
    }

    #[test]
    fn each_target_is_set_against_the_ceiling_and_redis_lua_of_its_own_connection_mode() {
        use Connections::{Cold, Warm};
        let runs = [
            run(Target::Combiner, Cold, sale("c", 7_500, 1.0, 900, 0)),
            run(Target::RedisLua, Cold, sale("r", 2_250, 1.0, 1_500, 2)),
            run(Target::Ceiling, Cold, sale("x", 30_000, 1.0, 500, 0)),
            run(Target::Combiner, Warm, sale("c", 15_000, 1.0, 600, 0)),
            run(Target::RedisLua, Warm, sale("r", 3_000, 1.0, 1_200, 0)),
            run(Target::Ceiling, Warm, sale("x", 30_000, 1.0, 400, 0)),
        ];
        let table = summary(&runs);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 2 + 3, "{table}");
        assert!(
            lines[0].starts_with("| target | cold: purchases/s |"),
            "{table}"
        );
        assert!(
            !lines[0].contains("baseline |"),
            "no one-lock baseline ran: {table}"
        );
        assert_eq!(
            lines[2],
            "| combiner | 7500 | 0.9 / 0.9 | 0 | 25 % | 3.3× | 15000 | 0.6 / 0.6 | 0 | 50 % | 5.0× |"
        );
        assert_eq!(
            lines[3],
            "| redis-lua | 2250 | 1.5 / 1.5 | 2 | 8 % | 1.0× | 3000 | 1.2 / 1.2 | 0 | 10 % | 1.0× |"
        );
    }

    #[test]
    fn a_missing_reference_or_run_shows_a_dash_and_the_baseline_gets_a_column() {
        let runs = [
            run(
                Target::Combiner,
                Connections::Cold,
                sale("c", 15_000, 1.0, 890, 0),
            ),
            run(
                Target::Baseline,
                Connections::Cold,
                sale("b", 116, 1.0, 2_000, 14_602),
            ),
        ];
        let table = summary(&runs);
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].ends_with("| cold: × baseline |"), "{table}");
        assert_eq!(
            lines[2],
            "| combiner | 15000 | 0.9 / 0.9 | 0 | - | - | 129× |"
        );
        assert_eq!(
            lines[3],
            "| baseline | 116 | 2.0 / 2.0 | 14602 | - | - | 1.0× |"
        );
    }
}
