//! `bench events`' arguments and what one sale measured (shared by its checks and its report).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use hdrhistogram::Histogram;

#[derive(Args, Debug, Clone)]
pub(crate) struct EventsArgs {
    /// Concurrent shoppers.
    #[arg(long, short = 'c', default_value_t = 500)]
    pub(crate) concurrency: usize,
    /// Units on sale.
    #[arg(long, default_value_t = 5_000)]
    pub(crate) stock: i64,
    /// `hold_secs` of the SKU.
    #[arg(long, default_value_t = 3)]
    pub(crate) hold_secs: u64,
    /// Share of the holds abandoned (they expire).
    #[arg(long, default_value_t = 0.2)]
    pub(crate) abandon: f64,
    /// Share of the holds cancelled by the shop.
    #[arg(long, default_value_t = 0.03)]
    pub(crate) cancel: f64,
    /// Share of the payments refunded with restock.
    #[arg(long, default_value_t = 0.03)]
    pub(crate) refund: f64,
    /// A hold is paid (or cancelled) after a uniform random delay of up to this.
    #[arg(long, default_value_t = 1000)]
    pub(crate) pay_within_ms: u64,
    /// Share of the deliveries the flaky receiver answers 500.
    #[arg(long, default_value_t = 0.1)]
    pub(crate) flaky_fail: f64,
    /// How long the flaky receiver takes to answer.
    #[arg(long, default_value_t = 200)]
    pub(crate) flaky_delay_ms: u64,
    /// The origins' `WEBHOOK_RETRY_SCHEDULE` (the spec's schedule would keep a twice-failed
    /// delivery waiting 5 minutes).
    #[arg(long, default_value = "0,1s,2s,5s,10s,30s")]
    pub(crate) retry_schedule: String,
    /// The origins' `WEBHOOK_MAX_IN_FLIGHT`: a delivery holds its slot for its whole round trip
    /// (claim, POST, recorded acknowledgement: ~100-200 ms on a loaded 2-core machine), so
    /// keeping up with a sale's ~700 events/s per endpoint takes a few hundred (the default 16
    /// would deliver ~100/s).
    #[arg(long, default_value_t = 256)]
    pub(crate) max_in_flight: u32,
    /// Stop a sale after this long even if not every unit is paid (seconds).
    #[arg(long, default_value_t = 180)]
    pub(crate) max_seconds: u64,
    /// After the second sale, wait at most this long for every delivery (seconds).
    #[arg(long, default_value_t = 120)]
    pub(crate) drain_seconds: u64,
    /// Rounds: each runs the sale without delivery, then with (alternating, so that a machine
    /// getting busier or quieter does not favour one); the last round's delivery is checked.
    #[arg(long, default_value_t = 2)]
    pub(crate) rounds: usize,
    /// The origins' `DB_MAX_CONNECTIONS` (each process opens up to twice this many): below the
    /// default 16, to leave room on a Postgres shared with other work (`max_connections` 100).
    #[arg(long, default_value_t = 12)]
    pub(crate) db_max_connections: u32,
    /// Origin processes.
    #[arg(long, default_value_t = 2)]
    pub(crate) origins: usize,
    /// Independent Redis nodes (the stream's is one more).
    #[arg(long, default_value_t = 3)]
    pub(crate) redis_nodes: usize,
    /// The origin binary (build it with `cargo build --release -p origin`).
    #[arg(long, default_value = "target/release/origin")]
    pub(crate) origin_bin: PathBuf,
    /// Postgres server URL (a fresh database is created per run).
    #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
    pub(crate) postgres: String,
}

/// What one sale measured.
#[derive(Debug, Default)]
pub(crate) struct SaleFigures {
    pub(crate) elapsed: Duration,
    pub(crate) created: u64,
    /// When the `stock`-th 201 came.
    pub(crate) first_pass_at: Option<Duration>,
    pub(crate) abandoned: u64,
    pub(crate) cancelled: u64,
    pub(crate) paid: u64,
    pub(crate) refunded: u64,
    pub(crate) statuses: BTreeMap<String, u64>,
    pub(crate) purchase_latency: Option<Histogram<u64>>,
}

impl SaleFigures {
    /// Purchases per second over the first pass of the stock.
    pub(crate) fn rate(&self, stock: i64) -> Option<f64> {
        self.first_pass_at
            .map(|t| stock as f64 / t.as_secs_f64().max(1e-9))
    }
}
