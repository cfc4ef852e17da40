//! The purchase path, in the order a request travels it:
//!
//! 1. `routes::purchases` reads the body, verifies the edge signature, parses the key and body;
//! 2. [`PurchaseService::submit`] refuses a duplicate of an attempt still in flight
//!    ([`inflight`]), answers `sold_out` at once when the process freshly knows the SKU is sold
//!    out ([`knowledge`]), and queues the attempt (a [`Job`](combiner::Job)) on its SKU's
//!    combiner ([`combiner`]);
//! 3. the combiner — on the deciders' thread ([`runtime`]) — takes the SKU's Redlock lease
//!    (`crate::lease`) and decides a batch of attempts in one transaction (`store::decide_batch`)
//!    — without the lease when the SKU does not exist;
//! 4. the typed [`Answer`] comes back here and the route writes it, counts it and audits it.
//!
//! With traces on, the request's span travels with its job, and the batch shows up in the
//! request's trace as `batch`, `lease` and `commit` spans ([`spans`]).

mod answer;
pub mod combiner;
pub mod context;
pub mod due;
pub mod expire;
pub mod inflight;
pub mod knowledge;
pub mod runtime;
mod spans;

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

pub use crate::decision::{Attempt, Decision, Outcome, StoredAnswer};
use crate::metrics::Metrics;
pub use answer::{Answer, BatchRef, Refusal};
use combiner::{Combiners, Job};
pub use context::Context;
use inflight::{Busy, InFlight};
use knowledge::SaleKnowledge;
use runtime::Deciders;

/// Decides purchase attempts. Cheap to clone.
#[derive(Debug, Clone)]
pub struct PurchaseService {
    combiners: Combiners,
    inflight: InFlight,
}

impl PurchaseService {
    /// Decides on `deciders`' thread, with `ctx` (built there: see [`runtime`]).
    pub fn new(ctx: Context, deciders: Deciders) -> Self {
        Self {
            combiners: Combiners::new(ctx, deciders),
            inflight: InFlight::default(),
        }
    }

    fn metrics(&self) -> &Arc<Metrics> {
        &self.combiners.context().metrics
    }

    /// What this process knows of SKU sales (the admin API records its restocks).
    pub fn knowledge(&self) -> &Arc<SaleKnowledge> {
        &self.combiners.context().knowledge
    }

    /// Live per-SKU combiners (an idle one exits after a few seconds).
    pub fn combiner_count(&self) -> usize {
        self.combiners.len()
    }

    /// Attempts being decided right now.
    pub fn in_flight_count(&self) -> usize {
        self.inflight.len()
    }

    /// Decides one attempt.
    pub async fn submit(&self, attempt: Attempt) -> Answer {
        let _guard = match self
            .inflight
            .begin(&attempt.user, &attempt.key, &attempt.request)
        {
            Ok(guard) => guard,
            Err(Busy::SameRequest) => return Refusal::InFlight.into(),
            Err(Busy::OtherRequest) => return Refusal::KeyReused.into(),
        };
        let ctx = self.combiners.context();
        // Fast path: fresh knowledge that the SKU is sold out; no lock, no database.
        if let Some(buyers) = ctx.knowledge.cached(&attempt.request.sku) {
            if SaleKnowledge::answers(&buyers, &attempt.user, &attempt.key) {
                self.metrics().sold_out_fast_path.inc();
                return Answer::sold_out_known(&attempt.request.sku);
            }
        }
        let deadline = Instant::now() + ctx.settings.request_deadline;
        let (reply, answer) = oneshot::channel();
        if let Err(_full) = self.combiners.submit(Job {
            attempt,
            deadline,
            reply,
            span: spans::current_request(),
        }) {
            self.metrics().shed.inc();
            return Refusal::Overloaded.into();
        }
        // The combiner always answers (it sheds what passes its deadline); a dropped sender
        // means the combiner is gone, which is a 503 like any lost dependency.
        answer
            .await
            .unwrap_or(Answer::Refused(Refusal::Unavailable))
    }
}
