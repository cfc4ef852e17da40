//! `bench holds`'s command line ([`HoldsArgs`]): a leaf, read by the run (`super`), its cost
//! probe and its report.

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Debug)]
pub(crate) struct HoldsArgs {
    /// Concurrent shoppers.
    #[arg(long, short = 'c', default_value_t = 500)]
    pub(super) concurrency: usize,
    /// Units on sale (both sales).
    #[arg(long, default_value_t = 10_000)]
    pub(super) stock: i64,
    /// `hold_secs` of the SKU of the second sale.
    #[arg(long, default_value_t = 3)]
    pub(super) hold_secs: u64,
    /// Share of the holds left unpaid (0..1).
    #[arg(long, default_value_t = 0.3)]
    pub(super) abandon: f64,
    /// A paid hold is paid after a uniform random delay of up to this.
    #[arg(long, default_value_t = 1000)]
    pub(super) pay_within_ms: u64,
    /// Stop a sale after this long even if not every unit is paid (seconds).
    #[arg(long, default_value_t = 120)]
    pub(super) max_seconds: u64,
    /// How often the books are sampled during the holds sale.
    #[arg(long, default_value_t = 100)]
    pub(super) sample_ms: u64,
    /// Origin processes.
    #[arg(long, default_value_t = 2)]
    pub(super) origins: usize,
    /// Independent Redis nodes.
    #[arg(long, default_value_t = 3)]
    pub(super) redis_nodes: usize,
    /// The origin binary (build it with `cargo build --release -p origin`).
    #[arg(long, default_value = "target/release/origin")]
    pub(super) origin_bin: PathBuf,
    /// Holds bought then paid per round of the cost probe (CPU per webhook against CPU per
    /// purchase, after the sales); 0 skips the probe.
    #[arg(long, default_value_t = 2000)]
    pub(super) probe: usize,
    /// Rounds of the cost probe (purchases and webhooks alternate).
    #[arg(long, default_value_t = 2)]
    pub(super) probe_rounds: usize,
    /// Concurrent clients of the cost probe.
    #[arg(long, default_value_t = 50)]
    pub(super) probe_concurrency: usize,
    /// Postgres server URL (a fresh database is created per run).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pub(super) postgres: String,
}
