//! The purchase's spans in a trace (`telemetry::traces`), made by the [`combiner`](super::combiner):
//! where a request's time went after it was queued.
//!
//! A batch decides many requests, each of its own trace. Its `batch` span is the child of ONE of
//! them — the oldest request of the batch whose trace is sampled — and links to every other
//! sampled request of the batch (OpenTelemetry's batch pattern; the SDK keeps up to
//! `OTEL_SPAN_LINK_COUNT_LIMIT` links, 128 by default). Every request's span also carries the
//! batch's id (`flashgate.batch.id`), so the batch is found from any of its requests. Under the
//! `batch` span:
//!
//! - `lease` — taking the SKU's Redlock lease (`lease.op = "acquire"`, the polling of a
//!   contended lock included) when this batch had to take it, or extending it
//!   (`lease.op = "extend"`); a batch decided under a lease already held has none;
//! - `commit` — the batch's one Postgres transaction (`store::decide_batch`), one per try when a
//!   conflict rolled it back.
//!
//! A batch none of whose requests is sampled makes no span at all, and with traces off nothing
//! here does more than read one flag.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt};
use shared::Sku;
use tracing::Span;
use tracing::field::Empty;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::answer::BatchRef;
use crate::telemetry::traces;

/// A request's span context, when its trace is being recorded.
fn sampled(request: Option<&Span>) -> Option<SpanContext> {
    let request = request.filter(|r| !r.is_disabled())?;
    let cx = request.context();
    let span_context = cx.span().span_context().clone();
    span_context.is_sampled().then_some(span_context)
}

/// The `batch` span of one batch (disabled when no request of it is traced).
#[derive(Debug)]
pub(super) struct BatchSpan {
    span: Span,
    /// The request span it is the child of (not linked again).
    parent: Option<SpanId>,
}

impl BatchSpan {
    /// The span of the batch about to be decided for `requests()` — the spans of the requests
    /// at the front of the queue, looked at only when traces are on: the child of the first of
    /// them whose trace is sampled.
    pub(super) fn open<'a, I>(sku: &Sku, requests: impl FnOnce() -> I) -> Self
    where
        I: IntoIterator<Item = Option<&'a Span>>,
    {
        let none = Self {
            span: Span::none(),
            parent: None,
        };
        if !traces::on() {
            return none;
        }
        let Some((request, parent)) = requests().into_iter().find_map(|request| {
            let request = request?;
            sampled(Some(request)).map(|cx| (request, cx.span_id()))
        }) else {
            return none;
        };
        let span = tracing::info_span!(
            target: traces::TARGET,
            parent: request,
            "batch",
            flashgate.sku = %sku,
            flashgate.batch.size = Empty,
            flashgate.batch.id = Empty,
            flashgate.fence = Empty,
            flashgate.batch.tries = Empty,
            flashgate.sold_out = Empty,
            otel.status_code = Empty,
        );
        Self {
            span,
            parent: Some(parent),
        }
    }

    /// The requests this batch decides (their spans): their number, and a link to each sampled
    /// one.
    pub(super) fn decides<'a>(&self, requests: impl ExactSizeIterator<Item = Option<&'a Span>>) {
        if self.span.is_disabled() {
            return;
        }
        self.span.record("flashgate.batch.size", requests.len());
        for request in requests {
            if let Some(cx) = sampled(request) {
                if Some(cx.span_id()) != self.parent {
                    self.span.add_link(cx);
                }
            }
        }
    }

    /// The span of taking (`"acquire"`) or extending (`"extend"`) the SKU's lease for this batch.
    pub(super) fn lease(&self, op: &'static str) -> Span {
        if self.span.is_disabled() {
            return Span::none();
        }
        tracing::info_span!(
            target: traces::TARGET,
            parent: &self.span,
            "lease",
            lease.op = op,
            otel.status_code = Empty,
        )
    }

    /// The span of one try at the batch's transaction (`tries` counts them from 1).
    pub(super) fn commit(&self, batch: BatchRef, tries: u32) -> Span {
        if self.span.is_disabled() {
            return Span::none();
        }
        self.span
            .record("flashgate.batch.id", tracing::field::display(batch.id));
        self.span.record("flashgate.fence", batch.fence);
        self.span.record("flashgate.batch.tries", tries);
        tracing::info_span!(
            target: traces::TARGET,
            parent: &self.span,
            "commit",
            flashgate.batch.id = %batch.id,
            flashgate.fence = batch.fence,
            otel.status_code = Empty,
        )
    }

    /// The span of the transaction of a batch for a SKU believed not to exist (decided without
    /// the lease, so without a `lease` span).
    pub(super) fn unleased_commit(&self) -> Span {
        if self.span.is_disabled() {
            return Span::none();
        }
        tracing::info_span!(
            target: traces::TARGET,
            parent: &self.span,
            "commit",
            flashgate.leased = false,
            otel.status_code = Empty,
        )
    }

    /// The batch committed; `sold_out`: it sold the last unit.
    pub(super) fn committed(&self, sold_out: bool) {
        self.span.record("flashgate.sold_out", sold_out);
    }

    /// The batch (or its lease) failed: the span ends as an error.
    pub(super) fn failed(&self) {
        self.span.record("otel.status_code", "ERROR");
    }
}

/// Marks a `lease` or `commit` span as failed.
pub(super) fn failed(span: &Span) {
    span.record("otel.status_code", "ERROR");
}

/// The span of the request being handled, to travel with its job (`None` when traces are off:
/// then nothing is cloned or allocated).
pub(super) fn current_request() -> Option<Box<Span>> {
    traces::on().then(|| Box::new(Span::current()))
}
