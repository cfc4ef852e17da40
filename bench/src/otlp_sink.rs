//! `bench compare --targets traced`: the OTLP/HTTP collector the traced origins export to — an
//! axum server in the bench process that answers every `POST /v1/traces` 200 with an empty
//! protobuf answer and counts what it received (it does not decode it: a real collector's cost
//! is the collector's, not the origin's).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};

#[derive(Debug, Default)]
struct Counts {
    exports: AtomicU64,
    bytes: AtomicU64,
}

/// A running sink; stops when dropped.
#[derive(Debug)]
pub(crate) struct Sink {
    url: String,
    counts: Arc<Counts>,
    task: tokio::task::JoinHandle<()>,
}

/// What the sink received.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Received {
    exports: u64,
    bytes: u64,
}

impl fmt::Display for Received {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the OTLP sink received {} exports, {} KiB of spans",
            self.exports,
            self.bytes / 1024
        )
    }
}

async fn take(
    State(counts): State<Arc<Counts>>,
    body: Bytes,
) -> (StatusCode, [(header::HeaderName, &'static str); 1]) {
    counts.exports.fetch_add(1, Ordering::Relaxed);
    counts.bytes.fetch_add(
        u64::try_from(body.len()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-protobuf")],
    )
}

impl Sink {
    /// Serves on a free port of 127.0.0.1.
    pub(crate) async fn start() -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let counts = Arc::new(Counts::default());
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(take))
            .with_state(counts.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { url, counts, task })
    }

    /// The origins' settings: export here, every purchase sampled, as a named service.
    pub(crate) fn origin_env(&self) -> Vec<(String, String)> {
        [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", self.url.as_str()),
            ("OTEL_SERVICE_NAME", "bench-origin"),
            ("OTEL_TRACES_SAMPLER", "always_on"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
    }

    pub(crate) fn received(&self) -> Received {
        Received {
            exports: self.counts.exports.load(Ordering::Relaxed),
            bytes: self.counts.bytes.load(Ordering::Relaxed),
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}
