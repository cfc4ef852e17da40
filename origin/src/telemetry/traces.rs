//! Traces: the origin's spans exported with OTLP over HTTP (protobuf), configured by the standard
//! `OTEL_*` variables and off unless an OTLP endpoint is set (docs/operations.md, "Traces").
//!
//! Where it sits: `telemetry::init` installs [`Pipeline::layer`] beside the log layer when
//! [`Pipeline::from_env`] finds an endpoint. The spans themselves are made on the request path —
//! the `request` span in `routes::envelope` (continuing the caller's W3C `traceparent`, see
//! [`parent_from`]), the `batch`, `lease` and `commit` spans in `purchase::combiner` (through
//! `purchase::spans`) — all under the target [`TARGET`], which only the exporting layer enables:
//! with traces off, no layer is interested in that target and each such span is a disabled
//! callsite (one relaxed load), never allocated, never formatted into the logs.
//!
//! Spans are batched and sent by the SDK's batch processor on its own thread (`OTEL_BSP_*`); a
//! span ending only pushes it onto a bounded queue (dropped when full), so a slow or unreachable
//! collector never slows or fails a request. The HTTP client is hyper's over the rustls (ring)
//! already in the origin, run on the origin's tokio runtime ([`OnRuntime`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use http::HeaderMap;
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::hyper::HyperClient;
use opentelemetry_http::{Bytes, HeaderExtractor, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Subscriber;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{FilterFn, filter_fn};
use tracing_subscriber::registry::LookupSpan;

/// The target of every span meant for the trace exporter (and for nothing else).
pub const TARGET: &str = "flashgate::trace";

/// The service name when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names one.
pub const DEFAULT_SERVICE_NAME: &str = "flashgate-origin";

/// The exporter's request timeout when neither `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT` nor
/// `OTEL_EXPORTER_OTLP_TIMEOUT` sets one (the OTLP default).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

static ON: AtomicBool = AtomicBool::new(false);

/// Whether spans are being exported (set once by `telemetry::init`).
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Why traces are not exported although an endpoint is set (logged at startup; the origin
/// serves without traces).
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    #[error("{name}={value:?} is not supported: {reason}")]
    Unsupported {
        name: &'static str,
        value: String,
        reason: &'static str,
    },
    #[error("no tokio runtime to export on")]
    NoRuntime,
    #[error("rustls refused the exporter's TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("the OTLP exporter could not be built: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// The exporting pipeline: the SDK's tracer provider (flushed by [`Pipeline::shutdown`]).
#[derive(Debug)]
pub struct Pipeline {
    provider: SdkTracerProvider,
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether the `OTEL_*` variables ask for traces: an endpoint is set
/// (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`), the SDK is not
/// disabled (`OTEL_SDK_DISABLED=true`) and the traces exporter is not `none`.
pub fn wanted() -> bool {
    let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"))
        .is_some();
    let disabled = var("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    let exporter_none = var("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim() == "none");
    endpoint && !disabled && !exporter_none
}

impl Pipeline {
    /// The pipeline the `OTEL_*` variables describe; `Ok(None)` when they ask for no traces
    /// ([`wanted`]). Needs the tokio runtime the exports will run on.
    pub fn from_env() -> Result<Option<Self>, TracesError> {
        if !wanted() {
            return Ok(None);
        }
        if let Some(exporter) = var("OTEL_TRACES_EXPORTER") {
            if exporter.trim() != "otlp" {
                return Err(TracesError::Unsupported {
                    name: "OTEL_TRACES_EXPORTER",
                    value: exporter,
                    reason: "the origin exports with `otlp` (or `none`)",
                });
            }
        }
        for name in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(protocol) = var(name) {
                if protocol.trim() != "http/protobuf" {
                    return Err(TracesError::Unsupported {
                        name,
                        value: protocol,
                        reason: "the origin exports OTLP over HTTP with protobuf (`http/protobuf`)",
                    });
                }
                break;
            }
        }
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| TracesError::NoRuntime)?;
        let client = OnRuntime::new(runtime, export_timeout())?;
        // The endpoint (`…/v1/traces` appended to OTEL_EXPORTER_OTLP_ENDPOINT, or
        // OTEL_EXPORTER_OTLP_TRACES_ENDPOINT as given), the headers (OTEL_EXPORTER_OTLP_HEADERS,
        // …_TRACES_HEADERS) and the compression are read by the exporter itself.
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_http_client(client)
            .build()?;
        // The sampler (OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG; default
        // `parentbased_always_on`), the span limits (OTEL_SPAN_*) and the batch processor
        // (OTEL_BSP_*) come from the environment through the SDK's defaults.
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build();
        Ok(Some(Self { provider }))
    }

    /// The layer turning [`TARGET`]'s spans into exported spans (and only those: probe routes,
    /// logs and other spans stay out). Marks traces [`on`].
    pub fn layer<S>(&self) -> impl Layer<S> + use<S>
    where
        S: Subscriber + for<'span> LookupSpan<'span>,
    {
        ON.store(true, Ordering::Relaxed);
        let only_trace_spans: FilterFn =
            filter_fn(|meta| meta.is_span() && meta.target() == TARGET);
        tracing_opentelemetry::layer()
            .with_tracer(self.provider.tracer("flashgate-origin"))
            .with_tracked_inactivity(false)
            .with_location(false)
            .with_threads(false)
            .with_filter(only_trace_spans)
    }

    /// Exports what is still queued and stops the processor (at shutdown). Blocks: call it off
    /// the async workers (`spawn_blocking`).
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "traces: the last spans could not be exported");
        }
    }
}

/// The resource: `OTEL_RESOURCE_ATTRIBUTES` and `OTEL_SERVICE_NAME` (read by the SDK), the
/// service name [`DEFAULT_SERVICE_NAME`] when neither names one, and `service.version`.
fn resource() -> opentelemetry_sdk::Resource {
    let named = var("OTEL_SERVICE_NAME").is_some()
        || var("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attrs| {
            attrs
                .split(',')
                .any(|kv| kv.trim().starts_with("service.name="))
        });
    let builder = opentelemetry_sdk::Resource::builder().with_attribute(
        opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
    );
    if named {
        builder.build()
    } else {
        builder.with_service_name(DEFAULT_SERVICE_NAME).build()
    }
}

/// `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds), else
/// 10 s: how long one export may take, connecting included.
fn export_timeout() -> Duration {
    var("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT")
        .or_else(|| var("OTEL_EXPORTER_OTLP_TIMEOUT"))
        .and_then(|ms| ms.trim().parse::<u64>().ok())
        .map_or(DEFAULT_TIMEOUT, Duration::from_millis)
}

/// The caller's trace context — its W3C `traceparent` and `tracestate` — as the parent of a
/// span. A missing or malformed `traceparent` gives an empty context: the span starts a new
/// trace (never an error).
pub fn parent_from(headers: &HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

/// Failed exports, logged at most once per [`Failures::EVERY`] with how many failed since the
/// last line: a dead collector under load fails an export per 512 spans, which must not flood
/// the logs.
#[derive(Debug, Default)]
struct Failures {
    /// Failures not logged yet.
    unlogged: std::sync::atomic::AtomicU64,
    /// When the last line was logged (none yet: `None`).
    logged_at: std::sync::Mutex<Option<std::time::Instant>>,
}

impl Failures {
    const EVERY: Duration = Duration::from_secs(10);

    fn report(&self, failure: &str) {
        let failed = self.unlogged.fetch_add(1, Ordering::Relaxed) + 1;
        let mut logged_at = self.logged_at.lock().unwrap_or_else(|p| p.into_inner());
        if logged_at.is_some_and(|at| at.elapsed() < Self::EVERY) {
            return;
        }
        *logged_at = Some(std::time::Instant::now());
        self.unlogged.store(0, Ordering::Relaxed);
        tracing::warn!(
            error = failure,
            failed_exports = failed,
            "traces: export failed; its spans are dropped"
        );
    }
}

/// The exporter's HTTP client: hyper over rustls (ring, the system's roots; `http://` and
/// `https://`), each export run on the origin's tokio runtime — the SDK's batch processor calls
/// it from its own thread — and bounded by the export timeout. A failed export's spans are
/// dropped, and the failure logged ([`Failures`]).
#[derive(Debug, Clone)]
struct OnRuntime {
    runtime: tokio::runtime::Handle,
    failures: Arc<Failures>,
    client: Arc<
        HyperClient<
            hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        >,
    >,
}

impl OnRuntime {
    fn new(runtime: tokio::runtime::Handle, timeout: Duration) -> Result<Self, rustls::Error> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut http = hyper_util::client::legacy::connect::HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(timeout));
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        // Entered so that the client's timers and connections belong to the origin's runtime.
        let _entered = runtime.enter();
        let client = HyperClient::new(https, timeout, None);
        Ok(Self {
            runtime,
            failures: Arc::default(),
            client: Arc::new(client),
        })
    }
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self
            .runtime
            .spawn(async move { client.send_bytes(request).await })
            .await;
        let answer = match sent {
            Ok(answer) => answer,
            Err(join) => Err(Box::new(join) as HttpError),
        };
        let failure = match &answer {
            Err(e) => Some(e.to_string()),
            Ok(res) if !res.status().is_success() => {
                Some(format!("the collector answered {}", res.status().as_u16()))
            }
            Ok(_) => None,
        };
        if let Some(failure) = failure {
            self.failures.report(&failure);
        }
        answer
    }
}
