//! `bench`: the Flashgate flash-sale benchmark.
//!
//! `bench run` drives C concurrent shoppers against a running origin or edge; `bench compare`
//! starts a private cluster per target and runs the same sale against each in one run — the
//! origin with the combiner (batching + single-flight), the same origin deciding one purchase per
//! lock and per transaction (`BATCH_MAX=1`), the redis-lua baseline (`serve/redis_lua.rs`) and the HTTP
//! ceiling (`serve/ceiling.rs`), and on demand the origin exporting traces (`traced`), with cold and warm connections — and prints them side by side,
//! each as a share of the ceiling and a ratio to redis-lua. `bench soak` starts the same kind of
//! cluster and runs a long sale at a steady open-loop rate, sampling each origin's RSS and open
//! file descriptors. Every run verifies the invariants against the database and exits non-zero
//! on a violation. `bench holds` runs the hot SKU without and with holds (abandoned or paid by
//! signed Stripe-style webhooks) in one cluster. `bench events` runs the sale with holds without,
//! then with, webhook endpoints and the event stream (issue 34). `bench scalpers` starts its own stack (the
//! origin and the built worker in workerd through `wrangler dev`) and runs the same sale twice,
//! the edge's bot defences off and on: 1,000 honest shoppers, each from a /24 of its own and
//! solving at a browser's pace, against a farm of 1,000 accounts behind 8 /24s solving natively
//! on one core — the honest shoppers' share, the farm's CPU-seconds per unit and the latency the
//! defences add. `bench serve-ceiling` and `bench serve-redis-lua` are the servers `compare`
//! starts.

mod books;
mod cluster;
mod events;
mod holds;
mod otlp_sink;
mod plot;
mod procstat;
mod report;
mod sale;
mod scalpers;
mod serve;
mod soak;
mod targets;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use targets::{Connections, Target};

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
        sale: sale::SaleArgs,
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
    /// Start a private cluster per target and connection mode and run the same sale against
    /// each: the origin in batches and one purchase per batch, the redis-lua baseline, the
    /// ceiling.
    Compare {
        #[command(flatten)]
        sale: sale::SaleArgs,
        /// Targets to measure, comma-separated, in this order.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "combiner,baseline,redis-lua,ceiling"
        )]
        targets: Vec<Target>,
        /// Connection modes to measure each target with, comma-separated: cold (opened when the
        /// sale opens; the headline) and/or warm (opened before it). `--cold-connections` alone
        /// means `cold`.
        #[arg(
            long,
            value_enum,
            value_delimiter = ',',
            default_value = "cold,warm",
            conflicts_with = "cold_connections"
        )]
        connections: Vec<Connections>,
        /// Server processes per target (origins; ceiling and redis-lua servers alike).
        #[arg(long, default_value_t = 2)]
        origins: usize,
        /// Independent Redis nodes to start for the origin (redis-lua uses one, the ceiling none).
        #[arg(long, default_value_t = 3)]
        redis_nodes: usize,
        /// The origin binary (build it with `cargo build --release -p origin`).
        #[arg(long, default_value = "target/release/origin")]
        origin_bin: PathBuf,
        /// Postgres server URL (a fresh database is created per run).
        #[arg(long, default_value = "postgres://postgres@127.0.0.1:5432/postgres")]
        postgres: String,
        /// Skip the baseline run (the origin in batches of one; other targets still run).
        #[arg(long)]
        no_baseline: bool,
        /// Postgres connections per redis-lua process.
        #[arg(long, default_value_t = 16)]
        lua_db_pool: u32,
    },
    /// Serve the HTTP ceiling: edge signature checked, canned 201 (what `compare` starts).
    ServeCeiling(serve::ceiling::CeilingArgs),
    /// Serve the redis-lua baseline: Lua check-and-decrement in one Redis node, then the order
    /// in Postgres (what `compare` starts).
    ServeRedisLua(serve::redis_lua::RedisLuaArgs),
    /// Start Redis nodes and origin processes and run a long sale at a steady rate, sampling the
    /// origins' RSS and open file descriptors; fails on any error, an invariant violation or
    /// growth beyond the limits.
    Soak(soak::SoakArgs),
    /// Start Redis nodes and origin processes and run the hot SKU without holds, then with
    /// holds (`hold_secs`) of which a share is abandoned and the rest paid by signed Stripe
    /// webhooks: throughput beside each other, expiry lag, every abandoned unit sold again,
    /// books balanced at every sample.
    Holds(holds::HoldsArgs),
    /// Start two clusters and run the same sale with holds (buy, pay most by webhook, abandon,
    /// cancel and refund a few) in each: without webhook endpoints and stream, then with two
    /// endpoints (one healthy, one flaky) and the Redis stream: purchases/s side by side,
    /// commit→delivery p50/p99 per endpoint, events lost (0) and duplicates delivered.
    Events(events::EventsArgs),
    /// Start the origin and the built edge (wrangler dev) and run the same sale with the bot
    /// defences off and on: honest shoppers (one /24 each, solving at a browser's pace) against
    /// a farm of accounts behind a few /24s (solving on one core): the honest share, the farm's
    /// CPU-seconds per unit, the honest shoppers' added latency; fails on an oversell or a 5xx.
    Scalpers(scalpers::ScalpersArgs),
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
        Command::Holds(args) => {
            let command_line = std::env::args().collect::<Vec<_>>().join(" ");
            holds::run(&args, &command_line).await?
        }
        Command::Events(args) => {
            let command_line = std::env::args().collect::<Vec<_>>().join(" ");
            if !events::run(&args, &command_line).await? {
                eprintln!(
                    "EVENTS FAILED: an event lost, an order out of step with its events, or reconcile — see above"
                );
                std::process::exit(2);
            }
            true
        }
        Command::Scalpers(args) => {
            let command_line = std::env::args().collect::<Vec<_>>().join(" ");
            if !scalpers::run(&args, &command_line).await? {
                eprintln!("SCALPERS FAILED: an oversell, a books violation or a 5xx — see above");
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
                books: sale::Books::Origin,
            };
            let result = sale::run(&sale, &endpoints, None, None).await?;
            report::print(&[&result]);
            plot::write(&sale.out_dir, &sale.label, &[&result])?;
            if sale.samples_csv {
                plot::write_samples(&sale.out_dir, &sale.label, &[&result])?;
            }
            result.invariants.ok()
        }
        Command::ServeCeiling(args) => {
            serve::ceiling::run(args).await?;
            true
        }
        Command::ServeRedisLua(args) => {
            serve::redis_lua::run(args).await?;
            true
        }
        Command::Compare {
            sale,
            targets,
            connections,
            origins,
            redis_nodes,
            origin_bin,
            postgres,
            no_baseline,
            lua_db_pool,
        } => {
            let connections = if sale.cold_connections {
                vec![Connections::Cold]
            } else {
                connections
            };
            anyhow::ensure!(origins > 0, "--origins must be at least 1");
            let plan = targets::plan(&targets, &connections, no_baseline)?;
            let mut runs = Vec::new();
            for (mode, target) in plan {
                let server = match target {
                    Target::Combiner | Target::Baseline | Target::Traced => {
                        cluster::Server::Origin {
                            bin: &origin_bin,
                            one_per_lease: target == Target::Baseline,
                            redis_nodes,
                        }
                    }
                    Target::RedisLua => cluster::Server::RedisLua {
                        db_pool: lua_db_pool,
                    },
                    Target::Ceiling => cluster::Server::Ceiling,
                };
                eprintln!("== {target}, {mode} connections: {origins} process(es), {server:?}");
                // `traced`: the origins export every purchase's spans to a sink of this process.
                let sink = match target {
                    Target::Traced => Some(otlp_sink::Sink::start().await?),
                    _ => None,
                };
                let extra = cluster::Extra {
                    env: sink
                        .as_ref()
                        .map(otlp_sink::Sink::origin_env)
                        .unwrap_or_default(),
                    ..cluster::Extra::default()
                };
                let cluster =
                    cluster::Cluster::start_with(server, &postgres, origins, &extra).await?;
                let name = format!("{target}-{mode}");
                let mut args = sale.clone();
                args.label = format!("{}-{name}", sale.label);
                args.cold_connections = mode == Connections::Cold;
                let auth = sale::Auth::Edge(shared::SecretRing::single(cluster::EDGE_SECRET));
                let books = match target {
                    Target::Combiner | Target::Baseline | Target::Traced => sale::Books::Origin,
                    Target::RedisLua => sale::Books::RedisLua {
                        redis_url: cluster.redis_urls.first().map_or("", String::as_str),
                    },
                    Target::Ceiling => sale::Books::Canned,
                };
                let endpoints = sale::Endpoints {
                    targets: &cluster.origin_urls,
                    admin_url: &cluster.origin_urls[0],
                    admin_token: cluster::ADMIN_TOKEN,
                    auth: &auth,
                    database_url: &cluster.database_url,
                    books,
                };
                let result = sale::run(
                    &args,
                    &endpoints,
                    Some(&name),
                    Some(sale::ClusterPids {
                        origins: &cluster.origin_pids,
                        redis: &cluster.redis_pids,
                    }),
                )
                .await;
                let passed = result.as_ref().is_ok_and(|r| r.invariants.ok());
                cluster.stop(passed).await;
                if let Some(sink) = &sink {
                    eprintln!("== {name}: {}", sink.received());
                }
                runs.push(report::Run {
                    target,
                    connections: mode,
                    result: result?,
                });
            }
            let mut modes: Vec<Connections> = Vec::new();
            for run in &runs {
                if !modes.contains(&run.connections) {
                    modes.push(run.connections);
                }
            }
            for mode in &modes {
                let refs: Vec<&sale::SaleResult> = runs
                    .iter()
                    .filter(|r| r.connections == *mode)
                    .map(|r| &r.result)
                    .collect();
                println!("\n== {mode} connections");
                report::print(&refs);
                // One plot per mode; `<label>.svg` when a single mode ran, as before.
                let label = if modes.len() == 1 {
                    sale.label.clone()
                } else {
                    format!("{}-{mode}", sale.label)
                };
                plot::write(&sale.out_dir, &label, &refs)?;
            }
            if sale.samples_csv {
                let refs: Vec<&sale::SaleResult> = runs.iter().map(|r| &r.result).collect();
                plot::write_samples(&sale.out_dir, &sale.label, &refs)?;
            }
            println!(
                "\n== summary: confirmed purchases/s, latency, 5xx; share of the ceiling and ratio to the baselines with the same connections\n"
            );
            print!("{}", report::summary(&runs));
            runs.iter().all(|r| r.result.invariants.ok())
        }
    };
    if !ok {
        eprintln!("INVARIANT VIOLATION — see above");
        std::process::exit(2);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compare(args: &[&str]) -> Result<(Vec<Target>, Vec<Connections>, bool, bool), String> {
        let cli = Cli::try_parse_from(["bench", "compare"].iter().chain(args))
            .map_err(|e| e.kind().to_string())?;
        match cli.command {
            Command::Compare {
                targets,
                connections,
                no_baseline,
                sale,
                ..
            } => Ok((targets, connections, no_baseline, sale.cold_connections)),
            other => Err(format!("{other:?}")),
        }
    }

    #[test]
    fn compare_measures_all_four_targets_cold_and_warm_by_default() {
        let (targets, connections, no_baseline, cold) = compare(&[]).expect("parses");
        assert_eq!(
            targets,
            [
                Target::Combiner,
                Target::Baseline,
                Target::RedisLua,
                Target::Ceiling
            ]
        );
        assert_eq!(connections, [Connections::Cold, Connections::Warm]);
        assert!(!no_baseline && !cold);
    }

    #[test]
    fn compare_takes_comma_separated_targets_and_connections() {
        let (targets, connections, ..) =
            compare(&["--targets", "ceiling,redis-lua", "--connections", "warm"]).expect("parses");
        assert_eq!(targets, [Target::Ceiling, Target::RedisLua]);
        assert_eq!(connections, [Connections::Warm]);
    }

    #[test]
    fn compare_keeps_no_baseline_and_cold_connections() {
        let (_, _, no_baseline, cold) =
            compare(&["--no-baseline", "--cold-connections"]).expect("parses");
        assert!(no_baseline && cold);
    }

    #[test]
    fn compare_refuses_unknown_targets_and_contradicting_connection_flags() {
        assert!(compare(&["--targets", "combiner,nginx"]).is_err());
        assert!(compare(&["--connections", "lukewarm"]).is_err());
        assert!(compare(&["--connections", "warm", "--cold-connections"]).is_err());
    }
}
