//! The `origin` binary: read settings, start logging, serve until SIGTERM/Ctrl-C.

use anyhow::Context;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    origin::telemetry::init();
    let settings =
        origin::Settings::from_env().context("reading configuration from the environment")?;
    let app = origin::Application::build(settings).await?;
    app.run_until(origin::app::shutdown_signal()).await?;
    Ok(())
}
