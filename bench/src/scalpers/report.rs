//! What `bench scalpers` reports: per sale the honest shoppers' units and share, the farm's units
//! and CPU-seconds per unit, the honest shoppers' end-to-end latency (click to final answer) and
//! what the defence added to it (defended minus undefended, same connections), their solve
//! times, every answer by side and call (so a 5xx shows), and the books; then the goals.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::args::{Defence, FarmPlan};
use super::honest::HonestOutcome;
use super::solver::SolverStats;
use crate::books::Invariants;
use crate::targets::Connections;

/// Everything one sale measured.
#[derive(Debug)]
pub(super) struct SaleOutcome {
    pub(super) connections: Connections,
    pub(super) defence: Option<Defence>,
    pub(super) plan: FarmPlan,
    /// Challenges the farm asked for before the start (`--farm-stockpile`), those it got and
    /// solved, and their bits (ascending).
    pub(super) stockpile_asked: u64,
    pub(super) stockpiled: u64,
    pub(super) stockpile_bits: Vec<u32>,
    pub(super) stock: i64,
    pub(super) honest_units: u64,
    pub(super) farm_units: u64,
    pub(super) farm_solver: SolverStats,
    pub(super) farm_challenges: u64,
    pub(super) honest: Vec<HonestOutcome>,
    /// CPU of the honest shoppers' native solver queue (`None` when minted).
    pub(super) honest_solver_cpu: Option<Duration>,
    pub(super) honest_answers: BTreeMap<String, u64>,
    pub(super) farm_answers: BTreeMap<String, u64>,
    /// From the start until the last honest intent ended.
    pub(super) honest_done: Duration,
    /// From the start until the farm stopped too.
    pub(super) elapsed: Duration,
    pub(super) invariants: Invariants,
}

/// Nearest-rank quantile of `sorted` (ascending).
pub(super) fn quantile(sorted: &[Duration], q: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// `part` of `whole`, when there is a whole.
pub(super) fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

/// CPU-seconds per unit won (`None` without a unit).
pub(super) fn per_unit(cpu: Duration, units: u64) -> Option<f64> {
    (units > 0).then(|| cpu.as_secs_f64() / units as f64)
}

/// `on − off` in milliseconds (may be negative).
pub(super) fn added_ms(on: Option<Duration>, off: Option<Duration>) -> Option<f64> {
    Some((on?.as_secs_f64() - off?.as_secs_f64()) * 1_000.0)
}

impl SaleOutcome {
    pub(super) fn sold(&self) -> u64 {
        self.honest_units + self.farm_units
    }

    pub(super) fn honest_share(&self) -> Option<f64> {
        share(self.honest_units, self.sold())
    }

    pub(super) fn farm_cpu_per_unit(&self) -> Option<f64> {
        per_unit(self.farm_solver.cpu, self.farm_units)
    }

    /// Honest end-to-end latencies of the intents that ended (ascending).
    pub(super) fn latencies(&self) -> Vec<Duration> {
        let mut v: Vec<Duration> = self.honest.iter().filter_map(|o| o.latency).collect();
        v.sort();
        v
    }

    pub(super) fn latency(&self, q: f64) -> Option<Duration> {
        quantile(&self.latencies(), q)
    }

    fn solves(&self) -> Vec<Duration> {
        let mut v: Vec<Duration> = self
            .honest
            .iter()
            .flat_map(|o| o.solves.iter().map(|s| s.wall))
            .collect();
        v.sort();
        v
    }

    fn bits(&self) -> BTreeMap<u32, u64> {
        let mut m = BTreeMap::new();
        for s in self.honest.iter().flat_map(|o| &o.solves) {
            *m.entry(s.bits).or_insert(0) += 1;
        }
        m
    }

    fn overruns(&self) -> usize {
        self.honest
            .iter()
            .flat_map(|o| &o.solves)
            .filter(|s| s.overrun)
            .count()
    }

    pub(super) fn server_errors(&self) -> u64 {
        super::client::server_errors(&self.honest_answers)
            + super::client::server_errors(&self.farm_answers)
    }

    fn endings(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for o in &self.honest {
            *m.entry(o.ended_with.clone()).or_insert(0) += 1;
        }
        m
    }

    fn column(&self) -> String {
        let defence = if self.defence.is_some() { "ON" } else { "OFF" };
        let farm = if self.plan.stockpile > 0 {
            format!(", farm stockpiling {}", self.plan.stockpile)
        } else {
            String::new()
        };
        format!("defence {defence}{farm}, {} honest", self.connections)
    }

    fn stockpile(&self) -> String {
        if self.plan.stockpile == 0 {
            return "-".into();
        }
        let bits = match (self.stockpile_bits.first(), self.stockpile_bits.last()) {
            (Some(lo), Some(hi)) => format!(" at {lo}–{hi} bits"),
            _ => String::new(),
        };
        format!("{} / {}{bits}", self.stockpile_asked, self.stockpiled)
    }
}

fn secs(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.2} s", d.as_secs_f64()))
}

fn pct(x: Option<f64>) -> String {
    x.map_or("-".into(), |x| format!("{:.1} %", x * 100.0))
}

fn signed_secs(ms: Option<f64>) -> String {
    ms.map_or("-".into(), |ms| format!("{:+.2} s", ms / 1_000.0))
}

/// The undefended sale with the same connections (and farm) as `on`.
fn baseline<'a>(sales: &'a [SaleOutcome], on: &SaleOutcome) -> Option<&'a SaleOutcome> {
    sales.iter().find(|s| {
        s.defence.is_none() && s.connections == on.connections && s.plan == FarmPlan::default()
    })
}

/// The side-by-side table (markdown).
pub(super) fn table(sales: &[SaleOutcome]) -> String {
    let mut rows: Vec<(String, Vec<String>)> = Vec::new();
    let mut row = |name: &str, f: &dyn Fn(&SaleOutcome) -> String| {
        rows.push((name.to_owned(), sales.iter().map(f).collect()));
    };
    row("units sold (of the stock)", &|s| {
        format!("{} of {}", s.sold(), s.stock)
    });
    row("honest shoppers' units", &|s| s.honest_units.to_string());
    row("farm's units", &|s| s.farm_units.to_string());
    row("**honest share** (honest / sold)", &|s| {
        format!("**{}**", pct(s.honest_share()))
    });
    row("farm CPU-seconds (one core)", &|s| {
        format!("{:.2}", s.farm_solver.cpu.as_secs_f64())
    });
    row("**farm CPU-seconds per unit**", &|s| {
        format!(
            "**{}**",
            s.farm_cpu_per_unit()
                .map_or("-".into(), |x| format!("{x:.3}"))
        )
    });
    row("farm challenges fetched / solved", &|s| {
        format!("{} / {}", s.farm_challenges, s.farm_solver.solved)
    });
    row("farm proofs asked / stockpiled before the start", &|s| {
        s.stockpile()
    });
    row("honest latency p50 (click → answer)", &|s| {
        secs(s.latency(0.5))
    });
    row("honest latency p99", &|s| secs(s.latency(0.99)));
    row("**honest added p50** (ON − OFF)", &|s| {
        baseline(sales, s)
            .filter(|_| s.defence.is_some())
            .map_or("-".into(), |b| {
                format!(
                    "**{}**",
                    signed_secs(added_ms(s.latency(0.5), b.latency(0.5)))
                )
            })
    });
    row("**honest added p99** (ON − OFF)", &|s| {
        baseline(sales, s)
            .filter(|_| s.defence.is_some())
            .map_or("-".into(), |b| {
                format!(
                    "**{}**",
                    signed_secs(added_ms(s.latency(0.99), b.latency(0.99)))
                )
            })
    });
    row("honest solve p50 / p99 (browser pace)", &|s| {
        let v = s.solves();
        if v.is_empty() {
            "-".into()
        } else {
            format!("{} / {}", secs(quantile(&v, 0.5)), secs(quantile(&v, 0.99)))
        }
    });
    row("honest challenge bits (count)", &|s| {
        let b = s.bits();
        if b.is_empty() {
            "-".into()
        } else {
            b.iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    });
    row("5xx answers", &|s| s.server_errors().to_string());
    row("books (database)", &|s| {
        let i = &s.invariants;
        let verdict = if i.ok() { "ok" } else { "VIOLATED" };
        format!(
            "{verdict}: {} units in {} orders of {}",
            i.units_in_orders, i.orders_total, i.initial
        )
    });
    row("sale over (last honest answer / farm stopped)", &|s| {
        format!("{} / {}", secs(Some(s.honest_done)), secs(Some(s.elapsed)))
    });
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| | {} |",
        sales
            .iter()
            .map(SaleOutcome::column)
            .collect::<Vec<_>>()
            .join(" | ")
    );
    let _ = writeln!(out, "|---|{}", "---|".repeat(sales.len()));
    for (name, cells) in rows {
        let _ = writeln!(out, "| {name} | {} |", cells.join(" | "));
    }
    out
}

/// Every answer, by sale, side and call; the honest intents' endings; solver details.
pub(super) fn details(sales: &[SaleOutcome]) -> String {
    let mut out = String::new();
    for s in sales {
        let _ = writeln!(out, "{}:", s.column());
        let _ = writeln!(out, "  honest answers: {:?}", s.honest_answers);
        let _ = writeln!(out, "  honest endings: {:?}", s.endings());
        let _ = writeln!(out, "  farm answers:   {:?}", s.farm_answers);
        let _ = writeln!(
            out,
            "  farm solver: {} solved, {} dropped (network given up / sold out), {} candidates, {:.2} s busy, {:.2} CPU-s",
            s.farm_solver.solved,
            s.farm_solver.skipped,
            s.farm_solver.candidates,
            s.farm_solver.busy.as_secs_f64(),
            s.farm_solver.cpu.as_secs_f64()
        );
        if let Some(cpu) = s.honest_solver_cpu {
            let _ = writeln!(
                out,
                "  honest native solver: {:.2} CPU-s; {} solve(s) finished after the browser would have",
                cpu.as_secs_f64(),
                s.overruns()
            );
        }
        let rtts: Vec<Duration> = {
            let mut v: Vec<Duration> = s
                .honest
                .iter()
                .flat_map(|o| o.solves.iter().map(|x| x.challenge_rtt))
                .collect();
            v.sort();
            v
        };
        if !rtts.is_empty() {
            let _ = writeln!(
                out,
                "  honest GET /v1/challenge: p50 {}, p99 {}",
                secs(quantile(&rtts, 0.5)),
                secs(quantile(&rtts, 0.99))
            );
        }
        for v in &s.invariants.violations {
            let _ = writeln!(out, "  VIOLATION: {v}");
        }
    }
    out
}

/// The goals of issue 28, per defended sale: (line, met).
pub(super) fn goals(sales: &[SaleOutcome]) -> Vec<(String, bool)> {
    let mut out = Vec::new();
    for on in sales.iter().filter(|s| s.defence.is_some()) {
        let c = on.connections;
        let share = on.honest_share().unwrap_or(0.0);
        let farm = if on.plan.stockpile > 0 {
            " against the stockpiling farm"
        } else {
            ""
        };
        out.push((
            format!(
                "{c}: honest share with the defence{farm} ≥ 90 %: {}",
                pct(on.honest_share())
            ),
            share >= 0.9,
        ));
        if let Some(off) = baseline(sales, on) {
            let added = added_ms(on.latency(0.5), off.latency(0.5));
            out.push((
                format!("{c}: honest added p50 ≤ 1 s: {}", signed_secs(added)),
                added.is_some_and(|ms| ms <= 1_000.0),
            ));
        }
    }
    for s in sales {
        out.push((
            format!("{}: 0 oversell, orders = units sold", s.column()),
            s.invariants.ok(),
        ));
        out.push((
            format!("{}: no 5xx ({})", s.column(), s.server_errors()),
            s.server_errors() == 0,
        ));
    }
    out
}

/// The run as JSON (for `--out-dir`).
pub(super) fn json(sales: &[SaleOutcome], command_line: &str, load: &str) -> serde_json::Value {
    let ms = |d: Option<Duration>| d.map(|d| d.as_secs_f64() * 1_000.0);
    serde_json::json!({
        "command": command_line,
        "load_average": load,
        "sales": sales.iter().map(|s| {
            let off = baseline(sales, s).filter(|_| s.defence.is_some());
            serde_json::json!({
                "defence": s.defence.map(|d| serde_json::json!({
                    "min_bits": d.min_bits, "max_bits": d.max_bits,
                    "units": d.units, "window_secs": d.window_secs,
                })),
                "connections": s.connections.to_string(),
                "farm_stockpile": s.plan.stockpile,
                "stockpile_asked": s.stockpile_asked,
                "stockpiled": s.stockpiled,
                "stockpile_bits": s.stockpile_bits,
                "stock": s.stock,
                "honest_units": s.honest_units,
                "farm_units": s.farm_units,
                "honest_share": s.honest_share(),
                "farm_cpu_secs": s.farm_solver.cpu.as_secs_f64(),
                "farm_cpu_secs_per_unit": s.farm_cpu_per_unit(),
                "honest_latency_ms": {"p50": ms(s.latency(0.5)), "p99": ms(s.latency(0.99))},
                "honest_added_ms": off.map(|b| serde_json::json!({
                    "p50": added_ms(s.latency(0.5), b.latency(0.5)),
                    "p99": added_ms(s.latency(0.99), b.latency(0.99)),
                })),
                "honest_solve_ms": {"p50": ms(quantile(&s.solves(), 0.5)), "p99": ms(quantile(&s.solves(), 0.99))},
                "server_errors": s.server_errors(),
                "honest_answers": s.honest_answers,
                "farm_answers": s.farm_answers,
                "books_ok": s.invariants.ok(),
                "violations": s.invariants.violations,
            })
        }).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(ms).collect();
        assert_eq!(quantile(&v, 0.5), Some(ms(50)));
        assert_eq!(quantile(&v, 0.99), Some(ms(99)));
        assert_eq!(quantile(&v, 1.0), Some(ms(100)));
        assert_eq!(quantile(&v, 0.0), Some(ms(1)));
        assert_eq!(quantile(&[ms(7)], 0.99), Some(ms(7)));
        assert_eq!(quantile(&[], 0.5), None);
    }

    #[test]
    fn shares_costs_and_added_latency() {
        assert_eq!(share(460, 500), Some(0.92));
        assert_eq!(share(0, 0), None);
        assert_eq!(per_unit(Duration::from_secs(2), 40), Some(0.05));
        assert_eq!(per_unit(Duration::from_secs(2), 0), None);
        let close = |x: Option<f64>, want: f64| x.is_some_and(|x| (x - want).abs() < 1e-6);
        assert!(close(added_ms(Some(ms(1_500)), Some(ms(400))), 1_100.0));
        assert!(close(added_ms(Some(ms(300)), Some(ms(400))), -100.0));
        assert_eq!(added_ms(None, Some(ms(400))), None);
    }

    fn outcome(defence: bool, honest: u64, farm: u64, latencies: &[u64]) -> SaleOutcome {
        SaleOutcome {
            connections: Connections::Cold,
            defence: defence.then_some(Defence {
                min_bits: 10,
                max_bits: 16,
                units: 5,
                window_secs: 3600,
            }),
            plan: FarmPlan::default(),
            stockpile_asked: 0,
            stockpiled: 0,
            stockpile_bits: Vec::new(),
            stock: 500,
            honest_units: honest,
            farm_units: farm,
            farm_solver: SolverStats {
                cpu: Duration::from_secs(4),
                ..SolverStats::default()
            },
            farm_challenges: 0,
            honest: latencies
                .iter()
                .map(|l| HonestOutcome {
                    latency: Some(ms(*l)),
                    ..HonestOutcome::default()
                })
                .collect(),
            honest_solver_cpu: None,
            honest_answers: [("purchase 201".to_owned(), honest)].into(),
            farm_answers: [("purchase 503 unavailable".to_owned(), u64::from(defence))].into(),
            honest_done: Duration::ZERO,
            elapsed: Duration::ZERO,
            invariants: Invariants::default(),
        }
    }

    #[test]
    fn the_goals_compare_the_defended_sale_with_the_undefended_one() {
        let off = outcome(false, 250, 250, &[100, 200, 300]);
        let on = outcome(true, 460, 40, &[900, 1_100, 1_500]);
        assert_eq!(on.honest_share(), Some(0.92));
        assert_eq!(on.farm_cpu_per_unit(), Some(0.1));
        let sales = [off, on];
        let goals = goals(&sales);
        let met = |needle: &str| {
            goals
                .iter()
                .find(|(l, _)| l.contains(needle))
                .map(|(_, ok)| *ok)
        };
        assert_eq!(met("honest share"), Some(true));
        // p50: 1,100 − 200 = 900 ms.
        assert_eq!(met("added p50"), Some(true));
        assert!(
            goals
                .iter()
                .any(|(l, ok)| l.contains("ON") && l.contains("5xx") && !ok)
        );
        assert!(
            goals
                .iter()
                .any(|(l, ok)| l.contains("OFF") && l.contains("5xx") && *ok)
        );
        let t = table(&sales);
        assert!(t.contains("**92.0 %**") && t.contains("**+0.90 s**"), "{t}");
        assert!(t.contains("**0.100**"), "{t}");
    }
}
