//! Logging setup: `tracing` with `RUST_LOG` filtering (default `info`), JSON lines unless
//! `LOG_FORMAT=pretty`. Each line carries its `target`, so the lock's audit events
//! (`flashgate::audit`) can be picked out of the stream as well as filtered with `RUST_LOG`.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. Call once, from `main`.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true);
    if std::env::var("LOG_FORMAT").is_ok_and(|f| f.eq_ignore_ascii_case("pretty")) {
        builder.init();
    } else {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init();
    }
}

redlock::tracing_audit!(
    /// The lock's audit events (acquire, extend, release, fence raise), under the origin's audit
    /// target `flashgate::audit` next to its batch and purchase events.
    pub(crate) struct LockAudit => "flashgate::audit"
);
