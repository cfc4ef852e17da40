//! The purchase path's vocabulary: an [`Attempt`] (parsed and authenticated at the boundary),
//! and how it was decided — one [`Decision`] per attempt, carrying its [`StoredAnswer`] byte for
//! byte as stored and replayed, and its [`Outcome`]. A leaf: the purchase path (`purchase`, which
//! re-exports it) speaks it, and so does the transaction that decides (`store::decide_batch`),
//! without either depending on the other's internals.

use shared::{Closed, ErrorCode, IdempotencyKey, Problem, PurchaseRequest, Sku, UserId};

/// One purchase attempt, parsed and authenticated.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub user: UserId,
    pub key: IdempotencyKey,
    pub request: PurchaseRequest,
}

/// An answer, byte for byte as it is stored and replayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAnswer {
    pub status: u16,
    pub body: String,
}

impl StoredAnswer {
    /// A refusal: the problem+json of `code`, with `detail`.
    pub(crate) fn refusal(code: ErrorCode, detail: String) -> Self {
        let p = Problem::new(code, detail);
        Self {
            status: p.status,
            body: p.to_json(),
        }
    }

    /// `409 sold_out` for a SKU with no unit left — the one place this answer is built, whether a
    /// batch stores it or the process answers it from its knowledge (`purchase::Answer`).
    pub fn sold_out(sku: &Sku) -> Self {
        Self::refusal(ErrorCode::SoldOut, format!("{sku} is sold out"))
    }
}

/// How one attempt of a batch was decided, carried unchanged from the transaction to the
/// purchase path's answer (`purchase::Answer::decided`), which the route writes and counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Decided by this batch; the answer is now stored with the key.
    Fresh {
        answer: StoredAnswer,
        outcome: Outcome,
    },
    /// The key already had a stored answer for the same request.
    Replay(StoredAnswer),
    /// The key was used before with a different request (422).
    KeyReused,
    /// The key bought an order whose stored answer has been purged (older than
    /// `IDEMPOTENCY_RETENTION_HOURS`): the key is spent, 422 whatever the request, nothing stored.
    KeySpent,
    /// The sale is closed by its schedule at the database's clock (not started, ended, paused):
    /// nothing decided, nothing stored — the same key is decided once the sale is open.
    Closed(Closed),
}

/// What a fresh decision was (the outcome metric's and the audit log's label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Created,
    Refused(ErrorCode),
}

impl Outcome {
    /// Metric label.
    pub fn label(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Refused(code) => code.as_str(),
        }
    }
}
