//! The envelope of every request and answer: what every request gets on its way in and out, in front of every route — the first thing a
//! request meets after the HTTP server (`server::conn`) and the last its answer passes:
//!
//! 1. its request id: the edge's `Flashgate-Request-Id`, or a fresh UUID (v4);
//! 2. the `request` log span (method, path, request id) around everything below, and — when
//!    traces are on (`telemetry::traces`) and the route is not a probe — the trace's `request`
//!    span (kind server), continuing the caller's W3C `traceparent`/`tracestate` (a missing or
//!    malformed one starts a new trace), ended with the answer's status;
//! 3. the per-request limits ([`limits`]): 431 for oversized header fields, a deadline on the
//!    body, 503 past the request timeout;
//! 4. on the answer: `Cache-Control: no-store` unless the route set its own (API answers are
//!    per request; intermediaries must not cache them — the edge caches SKU views deliberately,
//!    with its own policy), and the request id echoed (unless the route set one);
//! 5. a debug event per answer, and an error event per 5xx (`response failed`, with its status
//!    and latency), as `tower_http::trace` logged them.
//!
//! One tower layer with one boxed future per request, where a stack of `tower_http` layers and
//! `axum::middleware::from_fn`s cost a boxed service, a boxed future, a cloned `Next` or a grown
//! header map each (docs/bench/diary.md, "Issue 18, wave 8"). The request's own header map is
//! left as it arrived: the id travels with the request's future, not as an inserted header.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use shared::headers::REQUEST_ID;
use tower::{Layer, Service};
use tracing::Instrument;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::limits::{self, RequestLimits};
use crate::problem::ApiError;
use crate::telemetry::traces;

/// The layer: [`EnvelopeService`] around every route.
#[derive(Debug, Clone, Copy)]
pub struct Envelope {
    limits: RequestLimits,
}

impl Envelope {
    pub fn new(limits: RequestLimits) -> Self {
        Self { limits }
    }
}

impl<S> Layer<S> for Envelope {
    type Service = EnvelopeService<S>;

    fn layer(&self, inner: S) -> EnvelopeService<S> {
        EnvelopeService {
            inner,
            limits: self.limits,
        }
    }
}

/// See the module docs.
#[derive(Debug, Clone)]
pub struct EnvelopeService<S> {
    inner: S,
    limits: RequestLimits,
}

const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static(REQUEST_ID);
const NO_STORE: HeaderValue = HeaderValue::from_static("no-store");

/// The probe and scrape routes: never traced (a trace per health check or scrape is noise).
const UNTRACED: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The trace's `request` span of `req` (disabled when traces are off, the route unmatched or a
/// probe): named after the route (`POST /v1/purchases`), a child of the caller's trace context.
fn trace_span(req: &Request, id: &HeaderValue) -> tracing::Span {
    if !traces::on() {
        return tracing::Span::none();
    }
    let Some(route) = req.extensions().get::<MatchedPath>() else {
        return tracing::Span::none();
    };
    let route = route.as_str();
    if UNTRACED.contains(&route) {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        target: traces::TARGET,
        "request",
        otel.name = %format_args!("{} {route}", req.method()),
        otel.kind = "server",
        otel.status_code = Empty,
        http.request.method = %req.method(),
        http.route = route,
        url.path = %req.uri().path(),
        http.response.status_code = Empty,
        flashgate.request_id = %id.to_str().unwrap_or("-"),
    );
    // Before the span starts: a span started without its parent cannot be given one.
    let _ = span.set_parent(traces::parent_from(req.headers()));
    span
}

/// The request's id: the one it came with (the edge's), else a fresh UUID v4 drawn from the
/// thread's CSPRNG (no system call per request).
fn request_id(headers: &HeaderMap) -> HeaderValue {
    if let Some(id) = headers.get(&REQUEST_ID_HEADER) {
        return id.clone();
    }
    let uuid = uuid::Builder::from_random_bytes(rand::random()).into_uuid();
    let mut buf = uuid::Uuid::encode_buffer();
    HeaderValue::from_str(uuid.hyphenated().encode_lower(&mut buf))
        .unwrap_or_else(|_| HeaderValue::from_static("-"))
}

impl<S> Service<Request> for EnvelopeService<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let started = Instant::now();
        let id = request_id(req.headers());
        let span = tracing::info_span!(
            "request",
            method = %req.method(),
            path = %req.uri().path(),
            request_id = %id.to_str().unwrap_or("-"),
        );
        let traced = trace_span(&req, &id);
        let ended = traced.clone();
        let limits = self.limits;
        // The route is called inside the span, so what it does before its first await is
        // logged under the request too.
        let routed = span.in_scope(|| {
            tracing::debug!("started processing request");
            limits.check_head(req.headers())?;
            let timed = limits::Timed::of(&req);
            Ok::<_, ApiError>((timed, self.inner.call(limits.with_body_deadline(req))))
        });
        Box::pin(
            async move {
                let mut res = match routed {
                    Err(refused) => refused.into_response(),
                    Ok((timed, answer)) => {
                        limits
                            .within_request_timeout(timed, async move {
                                match answer.await {
                                    Ok(res) => res,
                                    Err(never) => match never {},
                                }
                            })
                            .await
                    }
                };
                let headers = res.headers_mut();
                headers.entry(header::CACHE_CONTROL).or_insert(NO_STORE);
                headers.entry(REQUEST_ID_HEADER).or_insert(id);
                let status = res.status();
                if !ended.is_disabled() {
                    ended.record("http.response.status_code", status.as_u16());
                    if status.is_server_error() {
                        ended.record("otel.status_code", "ERROR");
                    }
                }
                let latency = started.elapsed();
                tracing::debug!(
                    status = status.as_u16(),
                    ?latency,
                    "finished processing request"
                );
                if status.is_server_error() {
                    tracing::error!(
                        classification = %format_args!("Status code: {status}"),
                        ?latency,
                        "response failed"
                    );
                }
                Ok(res)
            }
            .instrument(traced)
            .instrument(span),
        )
    }
}
