//! The `origin` binary. Its settings come from the environment only, its secrets also from files
//! named by `NAME_FILE` variables (docs/configuration.md).
//!
//! - `origin` (or `origin serve`) — read settings from the environment, serve until
//!   SIGTERM/Ctrl-C.
//! - `origin reconcile` — check the books (needs only `DATABASE_URL`); prints every discrepancy
//!   and exits 1 if there is any, 2 if it cannot run.
//! - `origin pseudonym USER [KEY]` — print the log pseudonyms of a user (and of one of their
//!   idempotency keys) under `LOG_HASH_KEY`, to find a shopper's events in the logs.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use origin::telemetry::Traces;
use secrecy::ExposeSecret;

/// `--features mimalloc`: mimalloc as the global allocator (see origin/Cargo.toml).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(
    version,
    about = "Flashgate origin: decides flash-sale purchases exactly once",
    after_help = "Settings are read from environment variables: see docs/configuration.md."
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve until SIGTERM or Ctrl-C (the default).
    Serve,
    /// Check the books (needs only DATABASE_URL); exits 1 on a discrepancy, 2 if it cannot run.
    Reconcile,
    /// Print the log pseudonyms of a user (and of one of their idempotency keys) under
    /// LOG_HASH_KEY, to find a shopper's events in the logs.
    Pseudonym {
        /// The user id.
        user: String,
        /// One of the user's idempotency keys.
        key: Option<String>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Serve);
    // Only the server exports traces (OTEL_* variables; docs/operations.md, "Traces").
    let traces = match command {
        Command::Serve => Traces::FromEnv,
        _ => Traces::Off,
    };
    let telemetry = origin::telemetry::init(traces);
    match command {
        Command::Serve => {}
        Command::Reconcile => return Ok(reconcile().await),
        Command::Pseudonym { user, key } => return Ok(pseudonym(&user, key.as_deref())),
    }
    let served = serve().await;
    telemetry.shutdown().await;
    served
}

async fn serve() -> anyhow::Result<ExitCode> {
    let settings =
        origin::Settings::from_env().context("reading configuration from the environment")?;
    let app = origin::Application::build(settings).await?;
    app.run_until(origin::app::shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

fn pseudonym(user: &str, key: Option<&str>) -> ExitCode {
    let hash_key = match origin::settings::LogSettings::from_env().map(|s| s.log_hash_key()) {
        Ok(Ok(Some(hash_key))) => hash_key,
        Ok(Ok(None)) => {
            eprintln!("LOG_HASH_KEY is required (the one the origins log with)");
            return ExitCode::from(2);
        }
        Ok(Err(e)) | Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let pseudonyms = origin::pseudonym::Pseudonyms::new(hash_key.expose_secret().as_bytes());
    println!("user {}", pseudonyms.user(user));
    if let Some(key) = key {
        println!("key {}", pseudonyms.key(user, key));
    }
    ExitCode::SUCCESS
}

async fn reconcile() -> ExitCode {
    let settings = match origin::settings::ReconcileSettings::from_env() {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    origin::tls::install_crypto_provider();
    let url = settings.database_url.expose_secret();
    let pool = match origin::store::connect_options(url, &settings.database_tls) {
        Ok(options) => origin::store::pool_with(options, 2, Duration::from_secs(5)),
        Err(e) => {
            eprintln!("invalid DATABASE_URL: {e}");
            return ExitCode::from(2);
        }
    };
    match origin::reconcile::reconcile(&pool, settings.idempotency_retention).await {
        Ok(found) if found.is_empty() => {
            println!("reconciliation: ok");
            ExitCode::SUCCESS
        }
        Ok(found) => {
            for d in &found {
                println!("DISCREPANCY: {d}");
            }
            println!("reconciliation: {} discrepancies", found.len());
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("reconciliation could not run: {e}");
            ExitCode::from(2)
        }
    }
}
