//! `bench scalpers`: the honest shoppers' share of a flash sale against a scalper farm, with the
//! edge's bot defences (docs/bot-defence.md) off and on, in the same run (issue 28).
//!
//! One stack ([`stack`]: a fresh database, Redis, one origin, the BUILT worker in workerd through
//! `wrangler dev`) and, per connection mode (`--connections`: cold, warm), the same sale twice on
//! two fresh SKUs ([`sale`]), one after the other: **defence OFF** (no `proof_of_work`, no
//! `network_limits`) and **defence ON** (`proof_of_work: {min_bits, max_bits}` and
//! `network_limits: {units, window_secs}`). Each sale: `--stock` units, `max_per_user`
//! `--max-per-user`, `starts_at` `--lead-secs` ahead; then
//!
//! - `--honest` honest shoppers ([`honest`]), each with its own account and its own loopback
//!   address in a /24 of its own ([`addresses`]), each a separate client (its connection is cold
//!   by construction; warm: opened before the start), one purchase intent each, clicking at the
//!   start plus a jitter (uniform in `0..=--honest-jitter-ms`, the same crowd for every sale of a
//!   run), solving at the pace of a headless-Chromium browser (`--honest-hashes-per-sec`);
//! - a farm ([`farm`]) of `--farm-accounts` accounts behind `--farm-networks` /24s, firing at
//!   the start, pre-connected, as aggressive as pays off, ALL its proof-of-work solving on ONE
//!   OS thread ([`solver`]) whose CPU time is the farm's cost.
//!
//! Reported ([`report`]), OFF and ON side by side: the honest shoppers' units and share, the
//! farm's units and CPU-seconds per unit, the honest shoppers' end-to-end latency p50/p99 and the
//! latency the defence added (ON − OFF), their solve times, every answer by side and call, and
//! the books against the database. Exits non-zero on an oversell (or any books violation) or a
//! 5xx. Not a CI test: docs/benchmarks.md records a run.

mod addresses;
mod args;
mod client;
mod farm;
mod honest;
mod report;
mod sale;
mod solver;
mod stack;

use anyhow::Context;

pub(crate) use args::ScalpersArgs;
use args::{Defence, FarmPlan};
use report::SaleOutcome;
use stack::{EdgeSettings, Stack};

/// Runs `bench scalpers`; `Ok(true)` when no books were violated and nothing answered 5xx.
pub(crate) async fn run(args: &ScalpersArgs, command_line: &str) -> anyhow::Result<bool> {
    let defence = args.defence()?;
    anyhow::ensure!(
        args.stock > 0 && args.max_per_user > 0,
        "--stock and --max-per-user must be positive"
    );
    anyhow::ensure!(args.farm_networks > 0, "--farm-networks must be at least 1");
    anyhow::ensure!(!args.connections.is_empty(), "--connections needs a mode");
    anyhow::ensure!(
        args.honest_hashes_per_sec > 0.0,
        "--honest-hashes-per-sec must be positive"
    );
    let load_before = crate::procstat::load_average();
    let edge = EdgeSettings {
        build_dir: args.edge_build.clone(),
        wrangler: args.wrangler.clone(),
        runtime: args.edge_runtime,
        rate_quota: args.rate_limit_quota,
        rate_window_secs: args.rate_limit_window_secs,
        pow_peak: args.pow_peak,
    };
    eprintln!(
        "== starting the stack: Postgres database, {} Redis node(s), one origin, the edge in workerd ({:?})",
        args.redis_nodes, args.edge_runtime
    );
    let stack = Stack::start(&args.origin_bin, &args.postgres, args.redis_nodes, &edge).await?;
    let sales = sales(&stack, args, defence).await;
    let passed = sales.as_ref().is_ok_and(|s| {
        s.iter()
            .all(|s| s.invariants.ok() && s.server_errors() == 0)
    });
    stack.stop(passed).await;
    let sales = sales?;
    let load_after = crate::procstat::load_average();
    let load = format!("{load_before} before, {load_after} after");

    println!("# bench scalpers");
    println!("command: {command_line}");
    println!(
        "machine: {} CPU(s); load average (1 min) {load}",
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    );
    println!(
        "sale: {} units, max_per_user {}, {} honest shoppers (one /24 each, clicks over 0–{} ms, browser at {:.0} candidates/s, {:?} search) against {} farm accounts behind {} /24s (one solver thread); edge rate limit {} per {} s, POW_PEAK_ARRIVALS_PER_SEC {}",
        args.stock,
        args.max_per_user,
        args.honest,
        args.honest_jitter_ms,
        args.honest_hashes_per_sec,
        args.honest_solver,
        args.farm_accounts,
        args.farm_networks,
        args.rate_limit_quota,
        args.rate_limit_window_secs,
        args.pow_peak
    );
    println!(
        "defence ON: proof_of_work {{min_bits: {}, max_bits: {}}}, network_limits {{units: {}, window_secs: {}}}; OFF: neither",
        defence.min_bits, defence.max_bits, defence.units, defence.window_secs
    );
    if args.farm_stockpile > 0 {
        println!(
            "stockpiling farm: {} of its accounts each ask for a challenge before the start (evenly over the {} s lead) and fire its solution at the start",
            args.farm_stockpile, args.lead_secs
        );
    }
    println!(
        "connections: every honest shopper is a separate client from its own address: cold = opened at its click (inside its latency), warm = opened before the start; the farm's are always opened before the start\n"
    );
    print!("{}", report::table(&sales));
    println!();
    print!("{}", report::details(&sales));
    println!("\n## goals");
    let goals = report::goals(&sales);
    for (line, met) in &goals {
        println!("{} {line}", if *met { "MET   " } else { "MISSED" });
    }
    std::fs::create_dir_all(&args.out_dir)
        .with_context(|| format!("creating {}", args.out_dir.display()))?;
    let path = args.out_dir.join("scalpers.json");
    std::fs::write(
        &path,
        serde_json::to_vec_pretty(&report::json(&sales, command_line, &load))?,
    )
    .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("wrote {}", path.display());
    Ok(sales
        .iter()
        .all(|s| s.invariants.ok() && s.server_errors() == 0))
}

/// Per connection mode, the undefended sale, the defended one and — with `--farm-stockpile` — the
/// defended one against a stockpiling farm.
async fn sales(
    stack: &Stack,
    args: &ScalpersArgs,
    defence: Defence,
) -> anyhow::Result<Vec<SaleOutcome>> {
    let mut out = Vec::new();
    let stockpiling = FarmPlan {
        stockpile: args.farm_stockpile,
    };
    let mut plans = vec![
        ("off", None, FarmPlan::default()),
        ("on", Some(defence), FarmPlan::default()),
    ];
    if args.farm_stockpile > 0 {
        plans.push(("stockpile", Some(defence), stockpiling));
    }
    for &mode in &args.connections {
        for &(name, d, plan) in &plans {
            eprintln!("== {mode} connections, sale {}", name.to_uppercase());
            let outcome = sale::run(stack, args, name, d, plan, mode).await?;
            eprintln!(
                "   honest {} + farm {} units of {}; {} 5xx",
                outcome.honest_units,
                outcome.farm_units,
                outcome.stock,
                outcome.server_errors()
            );
            out.push(outcome);
        }
    }
    Ok(out)
}
