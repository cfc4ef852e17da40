//! What goes into a purchase batch and what comes out of it: the [`Attempt`]s, in; one
//! [`Decision`] per attempt (its [`StoredAnswer`] byte for byte as stored and replayed, and its
//! [`Outcome`]) and the [`BatchResult`], out — carried unchanged to the purchase path's answer
//! (`purchase::Answer`). [`BatchMode`] says what the batch may do.

use chrono::{DateTime, Utc};
use shared::{Closed, ErrorCode, IdempotencyKey, Problem, PurchaseRequest, Sku, UserId};
use uuid::Uuid;

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
    pub(super) fn refusal(code: ErrorCode, detail: String) -> Self {
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

/// How one attempt of a batch was decided: the store's typed outcome, carried unchanged to the
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

/// The result of one committed batch transaction.
#[derive(Debug)]
pub struct BatchResult {
    /// One decision per attempt, in the order given.
    pub decisions: Vec<Decision>,
    /// Units left after the batch; `None` when the SKU does not exist.
    pub remaining: Option<i64>,
    /// The sale generation the batch decided in; `None` when the SKU does not exist.
    pub generation: Option<i64>,
    /// The SKU's return epoch the batch decided in (bumped by every return of units).
    pub returns: Option<i64>,
    /// Units sold by this batch.
    pub units_sold: i64,
    /// The orders this batch created as holds (a SKU with `hold_secs`), and when they expire.
    pub holds: Vec<Uuid>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// Which batches [`decide_batch`] may decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchMode {
    /// Whatever the SKU's state: the caller holds the SKU's lease (or, in tests, no lock at all).
    Sell,
    /// Only if the SKU does not exist — every attempt is then `404 unknown_sku` or a replay —
    /// without the SKU's lease and without waiting for its row; if it exists, nothing is decided
    /// ([`StoreError::SkuExists`]) and the caller takes the lease.
    UnknownSkuOnly,
}
