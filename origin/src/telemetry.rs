//! Logging setup: `tracing` with `RUST_LOG` filtering (default `info`), JSON lines unless
//! `LOG_FORMAT=pretty`. Each line carries its `target`, so the lock's audit events
//! (`flashgate::audit`) can be picked out of the stream as well as filtered with `RUST_LOG`.

use tracing_subscriber::EnvFilter;

use crate::settings::LogSettings;

/// Installs the global subscriber. Call once, from `main`. `LOG_FORMAT` and `RUST_LOG` are
/// declared in [`crate::settings::LogSettings`]; a filter that does not parse falls back to
/// `info`.
pub fn init() {
    let (format, filter) = match LogSettings::from_env() {
        Ok(logs) => (logs.log_format, logs.rust_log),
        Err(_) => (String::new(), String::new()),
    };
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true);
    if format.eq_ignore_ascii_case("pretty") {
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
