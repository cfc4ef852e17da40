//! The purchase path, in the order a request travels it:
//!
//! 1. `routes::purchases` reads the body, verifies the edge signature, parses the key and body;
//! 2. [`PurchaseService::submit`] refuses a duplicate of an attempt still in flight
//!    ([`inflight`]), answers `sold_out` at once when the process freshly knows the SKU is sold
//!    out ([`knowledge`]), and queues the attempt on its SKU's combiner ([`combiner`]);
//! 3. the combiner takes the SKU's Redlock lease and decides a batch of attempts in one
//!    transaction (`store::decide_batch`) — without the lease when the SKU does not exist;
//! 4. the answer comes back here and becomes the HTTP response.

pub mod combiner;
pub mod inflight;
pub mod knowledge;

use std::sync::Arc;
use std::time::Instant;

use shared::ErrorCode;
use tokio::sync::oneshot;

use crate::metrics::Metrics;
use crate::problem::ApiError;
use crate::store::{Attempt, Decision, StoredAnswer};
pub use combiner::BatchRef;
use combiner::{Combiners, Job, JobResult};
use inflight::{Busy, InFlight};
use knowledge::SaleKnowledge;

/// The answer to a purchase attempt, ready to be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PurchaseAnswer {
    pub status: u16,
    /// JSON, byte for byte as stored.
    pub body: String,
    /// Whether this replays a stored answer (`Idempotent-Replayed: true`).
    pub replayed: bool,
    /// What decided it, for the audit log.
    pub decided_by: DecidedBy,
}

/// What decided a purchase attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy {
    /// A committed batch transaction.
    Batch(BatchRef),
    /// The process's knowledge that the SKU is sold out: no lock, no transaction.
    SoldOutFastPath,
}

/// Decides purchase attempts. Cheap to clone.
#[derive(Debug, Clone)]
pub struct PurchaseService {
    combiners: Combiners,
    inflight: InFlight,
}

impl PurchaseService {
    pub fn new(ctx: combiner::Context) -> Self {
        Self {
            combiners: Combiners::new(ctx),
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
    pub async fn submit(&self, attempt: Attempt) -> Result<PurchaseAnswer, ApiError> {
        let _guard = match self
            .inflight
            .begin(&attempt.user, &attempt.key, &attempt.request)
        {
            Ok(guard) => guard,
            Err(Busy::SameRequest) => {
                return Err(ApiError::new(
                    ErrorCode::IdempotencyInFlight,
                    "a request with this Idempotency-Key is still being processed; retry shortly",
                ));
            }
            Err(Busy::OtherRequest) => return Err(key_reused()),
        };
        let ctx = self.combiners.context();
        // Fast path: fresh knowledge that the SKU is sold out; no lock, no database.
        if let Some(buyers) = ctx.knowledge.cached(&attempt.request.sku) {
            if SaleKnowledge::answers(&buyers, &attempt.user, &attempt.key) {
                self.metrics().sold_out_fast_path.inc();
                return Ok(PurchaseAnswer {
                    status: 409,
                    body: combiner::sold_out_body(&attempt.request.sku),
                    replayed: false,
                    decided_by: DecidedBy::SoldOutFastPath,
                });
            }
        }
        let deadline = Instant::now() + ctx.settings.request_deadline;
        let result = if ctx.settings.single_flight {
            let (reply, answer) = oneshot::channel();
            if let Err(_full) = self.combiners.submit(Job {
                attempt,
                deadline,
                reply,
            }) {
                self.metrics().shed.inc();
                return Err(overloaded());
            }
            // The combiner always answers (it sheds what passes its deadline); a dropped sender
            // means the combiner is gone, which is a 503 like any lost dependency.
            answer
                .await
                .unwrap_or(JobResult::Unavailable { shed: false })
        } else {
            combiner::decide_alone(ctx, attempt, deadline).await
        };
        match result {
            JobResult::Decided(Decision::Fresh { answer, .. }, batch) => {
                Ok(sent(answer, false, batch))
            }
            JobResult::Decided(Decision::Replay(answer), batch) => Ok(sent(answer, true, batch)),
            JobResult::Decided(Decision::KeyReused, _) => Err(key_reused()),
            JobResult::Decided(Decision::KeySpent, _) => Err(ApiError::new(
                ErrorCode::IdempotencyKeyReused,
                "this Idempotency-Key already bought an order whose stored answer has expired; use a new key for a new purchase",
            )),
            JobResult::SoldOutFastPath(body) => Ok(PurchaseAnswer {
                status: 409,
                body,
                replayed: false,
                decided_by: DecidedBy::SoldOutFastPath,
            }),
            JobResult::Unavailable { shed: true } => Err(overloaded()),
            JobResult::Unavailable { shed: false } => Err(ApiError::new(
                ErrorCode::Unavailable,
                "the purchase could not be decided now (database or lock quorum unavailable); retry with the same Idempotency-Key",
            )),
            JobResult::Failed => Err(ApiError::new(ErrorCode::Internal, "internal error")),
        }
    }
}

fn sent(answer: StoredAnswer, replayed: bool, batch: BatchRef) -> PurchaseAnswer {
    PurchaseAnswer {
        status: answer.status,
        body: answer.body,
        replayed,
        decided_by: DecidedBy::Batch(batch),
    }
}

fn key_reused() -> ApiError {
    ApiError::new(
        ErrorCode::IdempotencyKeyReused,
        "this Idempotency-Key was used with a different request",
    )
}

fn overloaded() -> ApiError {
    ApiError::new(
        ErrorCode::Unavailable,
        "too many purchases queued for this sku; retry with the same Idempotency-Key",
    )
}
