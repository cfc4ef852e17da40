//! The `origin` binary.
//!
//! - `origin` — read settings from the environment, serve until SIGTERM/Ctrl-C.
//! - `origin reconcile` — check the books (needs only `DATABASE_URL`); prints every discrepancy
//!   and exits 1 if there is any, 2 if it cannot run.
//! - `origin pseudonym USER [KEY]` — print the log pseudonyms of a user (and of one of their
//!   idempotency keys) under `LOG_HASH_KEY`, to find a shopper's events in the logs.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    origin::telemetry::init();
    match std::env::args().nth(1).as_deref() {
        None | Some("serve") => {}
        Some("reconcile") => return Ok(reconcile().await),
        Some("pseudonym") => return Ok(pseudonym()),
        Some(other) => anyhow::bail!(
            "unknown command {other:?}; usage: origin [serve|reconcile|pseudonym USER [KEY]]"
        ),
    }
    let settings =
        origin::Settings::from_env().context("reading configuration from the environment")?;
    let app = origin::Application::build(settings).await?;
    app.run_until(origin::app::shutdown_signal()).await?;
    Ok(ExitCode::SUCCESS)
}

fn pseudonym() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(2).collect();
    let Ok(key) = std::env::var("LOG_HASH_KEY") else {
        eprintln!("LOG_HASH_KEY is required (the one the origins log with)");
        return ExitCode::from(2);
    };
    let pseudonyms = origin::pseudonym::Pseudonyms::new(key.as_bytes());
    match args.as_slice() {
        [user] => println!("user {}", pseudonyms.user(user)),
        [user, key] => {
            println!("user {}", pseudonyms.user(user));
            println!("key {}", pseudonyms.key(user, key));
        }
        _ => {
            eprintln!("usage: origin pseudonym USER [KEY]");
            return ExitCode::from(2);
        }
    }
    ExitCode::SUCCESS
}

async fn reconcile() -> ExitCode {
    let Ok(url) = std::env::var("DATABASE_URL") else {
        eprintln!("DATABASE_URL is required");
        return ExitCode::from(2);
    };
    let retention = match origin::settings::idempotency_retention(|name| std::env::var(name).ok()) {
        Ok(retention) => retention,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let tls = match origin::settings::DatabaseTlsSettings::from_lookup(
        |name| std::env::var(name).ok(),
        &url,
    ) {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    origin::tls::install_crypto_provider();
    let pool = match origin::store::connect_options(&url, &tls) {
        Ok(options) => origin::store::pool_with(options, 2, Duration::from_secs(5)),
        Err(e) => {
            eprintln!("invalid DATABASE_URL: {e}");
            return ExitCode::from(2);
        }
    };
    match origin::reconcile::reconcile(&pool, retention).await {
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
