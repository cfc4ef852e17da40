//! Telemetry setup: logs and traces.
//!
//! - Logs: `tracing` with `RUST_LOG` filtering (default `info`), JSON lines unless
//!   `LOG_FORMAT=pretty`. Each line carries its `target`, so the lock's audit events
//!   (`flashgate::audit`) can be picked out of the stream as well as filtered with `RUST_LOG`.
//! - Traces ([`traces`]): spans exported with OTLP over HTTP when `OTEL_EXPORTER_OTLP_ENDPOINT`
//!   (or `…_TRACES_ENDPOINT`) is set; off otherwise, and then the log pipeline is exactly what it
//!   is without them.

pub mod traces;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::settings::LogSettings;

/// Whether [`init`] may export traces (only the server does; the one-shot commands never).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traces {
    /// As the `OTEL_*` variables say ([`traces::wanted`]).
    FromEnv,
    Off,
}

/// What [`init`] installed; [`Telemetry::shutdown`] exports the spans still queued.
#[derive(Debug)]
#[must_use = "call shutdown() at exit, or the last spans are lost"]
pub struct Telemetry {
    traces: Option<traces::Pipeline>,
}

impl Telemetry {
    /// Exports the spans still queued (waits up to the export timeout).
    pub async fn shutdown(self) {
        if let Some(pipeline) = self.traces {
            let _ = tokio::task::spawn_blocking(move || pipeline.shutdown()).await;
        }
    }
}

/// Installs the global subscriber. Call once, from `main` (on the tokio runtime, which exports
/// the traces). `LOG_FORMAT` and `RUST_LOG` are declared in [`crate::settings::LogSettings`]; a
/// filter that does not parse falls back to `info`. Traces that are asked for but cannot be
/// exported (an unsupported protocol, …) are logged as an error, and the origin runs without.
pub fn init(traces: Traces) -> Telemetry {
    let (format, filter) = match LogSettings::from_env() {
        Ok(logs) => (logs.log_format, logs.rust_log),
        Err(_) => (String::new(), String::new()),
    };
    // The spans meant for the exporter never reach the logs, whatever RUST_LOG says.
    let mut filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    if let Ok(no_trace_spans) = format!("{}=off", traces::TARGET).parse() {
        filter = filter.add_directive(no_trace_spans);
    }
    let pretty = format.eq_ignore_ascii_case("pretty");
    let pipeline = match traces {
        Traces::Off => Ok(None),
        Traces::FromEnv => traces::Pipeline::from_env(),
    };
    let (pipeline, failed) = match pipeline {
        Ok(pipeline) => (pipeline, None),
        Err(e) => (None, Some(e)),
    };
    match &pipeline {
        None => {
            // Without traces: one layer under one global filter, as always.
            let builder = tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_target(true);
            if pretty {
                builder.init();
            } else {
                builder
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .init();
            }
        }
        Some(pipeline) => {
            // With traces: the log layer keeps RUST_LOG as its own filter, the exporting layer
            // has its own (the trace target's spans only).
            let logs = if pretty {
                tracing_subscriber::fmt::layer().with_target(true).boxed()
            } else {
                tracing_subscriber::fmt::layer()
                    .with_target(true)
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .boxed()
            };
            tracing_subscriber::registry()
                .with(logs.with_filter(filter))
                .with(pipeline.layer())
                .init();
        }
    }
    if let Some(e) = failed {
        tracing::error!(error = %e, "traces are not exported");
    }
    Telemetry { traces: pipeline }
}

redlock::tracing_audit!(
    /// The lock's audit events (acquire, extend, release, fence raise), under the origin's audit
    /// target `flashgate::audit` next to its batch and purchase events.
    pub(crate) struct LockAudit => "flashgate::audit"
);
