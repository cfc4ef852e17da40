//! `bench`: the Flashgate flash-sale benchmark.
//!
//! `bench run` drives C concurrent shoppers against a running origin or edge; `bench compare`
//! starts its own Redis nodes and origin processes and runs the same sale twice in one run —
//! with the combiner (batching + single-flight) and with it disabled (one lock + one transaction
//! per request) — and prints both side by side. `bench soak` starts the same kind of cluster and
//! runs a long sale at a steady open-loop rate, sampling each origin's RSS and open file
//! descriptors. Every run verifies the invariants against the database and exits non-zero on a
//! violation.

mod books;
mod cluster;
mod plot;
mod procstat;
mod report;
mod sale;
mod soak;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(version, about = "Flashgate flash-sale benchmark")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a sale against running targets (origin URLs, or the edge with --session-secret).
    Run {
        #[command(flatten)]
        sale: SaleArgs,
        /// Base URLs to spread shoppers over (e.g. two origin replicas).
        #[arg(long = "target", required = true)]
        targets: Vec<String>,
        /// Postgres URL of the origin's database, for the invariant check.
        #[arg(long, env = "DATABASE_URL")]
        database_url: String,
        #[arg(long, env = "ADMIN_TOKEN")]
        admin_token: String,
        /// Sign as the edge (direct origin calls), with key id `default`.
        #[arg(long, env = "EDGE_SHARED_SECRET")]
        edge_secret: Option<String>,
        /// Sign as the edge with the first key of `kid:secret,…` (the origin's ring form).
        #[arg(long, env = "EDGE_SHARED_SECRETS")]
        edge_secrets: Option<String>,
        /// Mint shopper JWTs (calls through the edge).
        #[arg(long, env = "SESSION_SECRET")]
        session_secret: Option<String>,
        /// Admin URL for creating the SKU (default: the first target).
        #[arg(long)]
        admin_url: Option<String>,
    },
    /// Start Redis nodes and origin processes, run the sale with and without the combiner.
    Compare {
        #[command(flatten)]
        sale: SaleArgs,
        /// Origin processes to start.
        #[arg(long, default_value_t = 2)]
        origins: usize,
        /// Independent Redis nodes to start.
        #[arg(long, default_value_t = 3)]
        redis_nodes: usize,
        /// The origin binary (build it with `cargo build --release -p origin`).
        #[arg(long, default_value = "target/release/origin")]
        origin_bin: PathBuf,
        /// Postgres server URL (a fresh database is created per run).
        #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
        postgres: String,
        /// Skip the baseline run.
        #[arg(long)]
        no_baseline: bool,
    },
    /// Start Redis nodes and origin processes and run a long sale at a steady rate, sampling the
    /// origins' RSS and open file descriptors; fails on any error, an invariant violation or
    /// growth beyond the limits.
    Soak(soak::SoakArgs),
}

/// The shape of the sale.
#[derive(Args, Debug, Clone)]
pub(crate) struct SaleArgs {
    /// Concurrent shoppers (distinct users).
    #[arg(long, short = 'c', default_value_t = 1000)]
    pub(crate) concurrency: usize,
    /// Units on sale.
    #[arg(long, default_value_t = 20_000)]
    pub(crate) stock: i64,
    /// Per-user cap.
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) max_per_user: i64,
    /// Stop after this long even if not sold out (seconds).
    #[arg(long, default_value_t = 120)]
    pub(crate) max_seconds: u64,
    /// SKU name (default: a fresh one per run).
    #[arg(long)]
    pub(crate) sku: Option<String>,
    /// Where to write the SVG plot(s).
    #[arg(long, default_value = "docs/bench")]
    pub(crate) out_dir: PathBuf,
    /// A label for the output files.
    #[arg(long, default_value = "sale")]
    pub(crate) label: String,
    /// Open each shopper's connection when the sale opens (inside the measured latency) instead
    /// of before it: shoppers normally have the page open, and the edge keeps warm connections
    /// to the origin.
    #[arg(long)]
    pub(crate) cold_connections: bool,
    /// Also write every request (sent at, latency, status) to `<out-dir>/<label>-<run>.csv`.
    #[arg(long)]
    pub(crate) samples_csv: bool,
}

impl SaleArgs {
    pub(crate) fn max_duration(&self) -> Duration {
        Duration::from_secs(self.max_seconds)
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let ok = match cli.command {
        Command::Soak(args) => {
            let command_line = std::env::args().collect::<Vec<_>>().join(" ");
            if !soak::run(&args, &command_line).await? {
                eprintln!("SOAK FAILED — see above");
                std::process::exit(2);
            }
            true
        }
        Command::Run {
            sale,
            targets,
            database_url,
            admin_token,
            edge_secret,
            edge_secrets,
            session_secret,
            admin_url,
        } => {
            let auth = match session_secret {
                Some(s) => sale::Auth::Session(s),
                None if edge_secret.is_none() && edge_secrets.is_none() => anyhow::bail!(
                    "pass --edge-secret / --edge-secrets (origin) or --session-secret (edge)"
                ),
                None => sale::Auth::Edge(
                    shared::SecretRing::from_config(
                        edge_secrets.as_deref(),
                        edge_secret.as_deref(),
                        1,
                    )
                    .map_err(|e| anyhow::anyhow!("--edge-secrets / --edge-secret: {e}"))?,
                ),
            };
            let admin = admin_url.unwrap_or_else(|| targets[0].clone());
            let endpoints = sale::Endpoints {
                targets: &targets,
                admin_url: &admin,
                admin_token: &admin_token,
                auth: &auth,
                database_url: &database_url,
            };
            let result = sale::run(&sale, &endpoints, None, None).await?;
            report::print(&[&result]);
            plot::write(&sale.out_dir, &sale.label, &[&result])?;
            if sale.samples_csv {
                plot::write_samples(&sale.out_dir, &sale.label, &[&result])?;
            }
            result.invariants.ok()
        }
        Command::Compare {
            sale,
            origins,
            redis_nodes,
            origin_bin,
            postgres,
            no_baseline,
        } => {
            let mut results = Vec::new();
            let modes: &[(&str, bool)] = if no_baseline {
                &[("combiner", true)]
            } else {
                &[("combiner", true), ("baseline", false)]
            };
            for (name, single_flight) in modes {
                eprintln!(
                    "== {name}: {origins} origin(s), {redis_nodes} Redis node(s), single_flight={single_flight}"
                );
                let cluster = cluster::Cluster::start(
                    &origin_bin,
                    &postgres,
                    origins,
                    redis_nodes,
                    *single_flight,
                )
                .await?;
                let mut args = sale.clone();
                args.label = format!("{}-{name}", sale.label);
                let auth = sale::Auth::Edge(shared::SecretRing::single(cluster::EDGE_SECRET));
                let endpoints = sale::Endpoints {
                    targets: &cluster.origin_urls,
                    admin_url: &cluster.origin_urls[0],
                    admin_token: cluster::ADMIN_TOKEN,
                    auth: &auth,
                    database_url: &cluster.database_url,
                };
                let result = sale::run(
                    &args,
                    &endpoints,
                    Some(name),
                    Some(sale::ClusterPids {
                        origins: &cluster.origin_pids,
                        redis: &cluster.redis_pids,
                    }),
                )
                .await;
                let passed = result.as_ref().is_ok_and(|r| r.invariants.ok());
                cluster.stop(passed).await;
                results.push(result?);
            }
            let refs: Vec<&sale::SaleResult> = results.iter().collect();
            report::print(&refs);
            plot::write(&sale.out_dir, &sale.label, &refs)?;
            if sale.samples_csv {
                plot::write_samples(&sale.out_dir, &sale.label, &refs)?;
            }
            results.iter().all(|r| r.invariants.ok())
        }
    };
    if !ok {
        eprintln!("INVARIANT VIOLATION — see above");
        std::process::exit(2);
    }
    Ok(())
}
