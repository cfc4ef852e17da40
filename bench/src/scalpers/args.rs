//! What every part of a `bench scalpers` run reads: its command line ([`ScalpersArgs`], with how
//! honest browsers are emulated, [`HonestSolver`]), the defended sale's defences ([`Defence`])
//! and the farm's plan ([`FarmPlan`]). A leaf: the run (`super`), its sales (`super::sale`) and the report
//! (`super::report`) read it; it reads none of them.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

use super::stack::EdgeRuntime;
use crate::targets::Connections;

/// The defences of the defended sale.
#[derive(Debug, Clone, Copy)]
pub(super) struct Defence {
    pub(super) min_bits: u8,
    pub(super) max_bits: u8,
    pub(super) units: u32,
    pub(super) window_secs: u32,
}

/// The farm of one sale: how many of its accounts stockpile a proof before the start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct FarmPlan {
    pub(super) stockpile: usize,
}

/// How the honest shoppers' browsers are emulated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum HonestSolver {
    /// Search natively (the edge's solver) on a solver thread of their own, then wait until the
    /// browser would have found it.
    Native,
    /// Make the solution with the edge's key instead of searching, and wait as long as the
    /// browser's search would have taken: no CPU on this machine (see `solver::mint`).
    Minted,
}

#[derive(Args, Debug)]
pub(crate) struct ScalpersArgs {
    /// Units on sale.
    #[arg(long, default_value_t = 500)]
    pub(super) stock: i64,
    /// The SKU's `max_per_user`.
    #[arg(long, default_value_t = 1)]
    pub(super) max_per_user: i64,
    /// Honest shoppers (one account, one address, one /24 each).
    #[arg(long, default_value_t = 1000)]
    pub(super) honest: usize,
    /// The farm's accounts.
    #[arg(long, default_value_t = 1000)]
    pub(super) farm_accounts: usize,
    /// The farm's /24 networks (127.66.0–N.x).
    #[arg(long, default_value_t = 8)]
    pub(super) farm_networks: usize,
    /// Honest shoppers click at the start plus a uniform random delay of up to this.
    #[arg(long, default_value_t = 2000)]
    pub(super) honest_jitter_ms: u64,
    /// Candidates per second an honest shopper's browser hashes: headless Chromium 156 on this
    /// machine, altcha-lib's v1 solver, median of 5 × 200,001 candidates at load 0.6
    /// (`node bench/scalpers/pow-rate.mjs`, 2026-12-03; docs/benchmarks.md).
    #[arg(long, default_value_t = 129_000.0)]
    pub(super) honest_hashes_per_sec: f64,
    /// How the honest shoppers' search is done on this machine.
    #[arg(long, value_enum, default_value = "native")]
    pub(super) honest_solver: HonestSolver,
    /// `proof_of_work.min_bits` of the defended sale (the quiet sale's work).
    #[arg(long, default_value_t = 10)]
    pub(super) min_bits: u8,
    /// `proof_of_work.max_bits` of the defended sale (the peak's work).
    #[arg(long, default_value_t = 16)]
    pub(super) max_bits: u8,
    /// `network_limits.units` of the defended sale: units one /24 may buy per window.
    #[arg(long, default_value_t = 5)]
    pub(super) network_units: u32,
    /// `network_limits.window_secs` of the defended sale.
    #[arg(long, default_value_t = 3600)]
    pub(super) network_window_secs: u32,
    /// Also run the defended sale against a farm that stockpiles this many proofs before the start
    /// (its challenges fetched one by one over the lead time, so the price stays low, and fired
    /// at the start; issue 35). 0: no such sale. Give it a longer `--lead-secs` (e.g. 20).
    #[arg(long, default_value_t = 0)]
    pub(super) farm_stockpile: usize,
    /// The farm retries a `429 network_limit` with `Retry-After: 1` after this share of it, on
    /// average.
    #[arg(long, default_value_t = 0.25)]
    pub(super) farm_retry_share: f64,
    /// Connection modes of the honest shoppers, comma-separated: cold (opened at the click) and/or
    /// warm (opened before the start). The farm always connects before the start.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "cold,warm")]
    pub(super) connections: Vec<Connections>,
    /// The edge's per-user rate limit: attempts per window (the production default).
    #[arg(long, default_value_t = 5)]
    pub(super) rate_limit_quota: u32,
    /// The edge's per-user rate limit window.
    #[arg(long, default_value_t = 10)]
    pub(super) rate_limit_window_secs: u32,
    /// The edge's `POW_PEAK_ARRIVALS_PER_SEC` (challenges per second at which max_bits is asked).
    #[arg(long, default_value_t = 50)]
    pub(super) pow_peak: u32,
    /// The sale starts this long after it is put on sale (clients are made before).
    #[arg(long, default_value_t = 5)]
    pub(super) lead_secs: u64,
    /// Nobody starts a request later than this after the start.
    #[arg(long, default_value_t = 60)]
    pub(super) max_seconds: u64,
    /// Seed of the honest shoppers' clicks.
    #[arg(long, default_value_t = 28)]
    pub(super) seed: u64,
    /// Independent Redis nodes of the origin.
    #[arg(long, default_value_t = 3)]
    pub(super) redis_nodes: usize,
    /// The origin binary (`cargo build --release -p origin`).
    #[arg(long, default_value = "target/release/origin")]
    pub(super) origin_bin: PathBuf,
    /// The built worker (`bash scripts/edge-build.sh --wasm-only`).
    #[arg(long, default_value = "edge/build")]
    pub(super) edge_build: PathBuf,
    /// How the built worker runs in workerd: Miniflare alone (the default; see its doc) or
    /// `wrangler dev`.
    #[arg(long, value_enum, default_value = "miniflare")]
    pub(super) edge_runtime: EdgeRuntime,
    /// wrangler (`npm ci`).
    #[arg(long, default_value = "node_modules/.bin/wrangler")]
    pub(super) wrangler: PathBuf,
    /// Postgres server URL (a fresh database is created per run).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pub(super) postgres: String,
    /// Where the run's JSON goes (`<out-dir>/scalpers.json`).
    #[arg(long, default_value = "target/bench")]
    pub(super) out_dir: PathBuf,
}

impl ScalpersArgs {
    pub(super) fn defence(&self) -> anyhow::Result<Defence> {
        shared::ProofOfWork::new(self.min_bits, self.max_bits).with_context(|| {
            format!(
                "--min-bits {} --max-bits {}: want 1 ≤ min ≤ max ≤ 30",
                self.min_bits, self.max_bits
            )
        })?;
        anyhow::ensure!(self.network_units > 0, "--network-units must be at least 1");
        Ok(Defence {
            min_bits: self.min_bits,
            max_bits: self.max_bits,
            units: self.network_units,
            window_secs: self.network_window_secs,
        })
    }
}
