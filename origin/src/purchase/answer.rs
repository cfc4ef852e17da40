//! The answer to a purchase attempt: the one typed value that leaves the decision — a batch
//! transaction (`store::decide_batch`'s [`Decision`]), the process's knowledge that the SKU is
//! sold out, or a refusal before either — travels back through the combiner's waiter channel and
//! [`PurchaseService::submit`](super::PurchaseService::submit), and becomes the HTTP response, the
//! `origin_purchases_total` outcome label and the audit event in `routes::purchases`. Each answer
//! is built here (or, for what is stored with the key, in the store) exactly once; nothing
//! downstream re-parses a body to learn what was decided.

use shared::{Closed, ErrorCode, Sku};
use uuid::Uuid;

use crate::decision::{Decision, Outcome, StoredAnswer};
use crate::problem::ApiError;

/// How a purchase attempt was answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Decided by a committed batch — created or refused — and now stored with the key.
    Fresh {
        answer: StoredAnswer,
        outcome: Outcome,
        batch: BatchRef,
    },
    /// The key's stored answer to the same request, replayed (`Idempotent-Replayed: true`).
    Replayed {
        answer: StoredAnswer,
        batch: BatchRef,
    },
    /// `409 sold_out` from the process's fresh knowledge that the SKU is sold out (the attempt
    /// has no stored 201): no lock, no transaction, nothing stored.
    SoldOutKnown(StoredAnswer),
    /// Refused with nothing stored with the key.
    Refused(Refusal),
}

/// The batch transaction that decided an attempt: its id (also in the batch's audit event) and
/// the fencing token of the lease it committed under (0: decided without a lease, for a SKU that
/// does not exist).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRef {
    pub id: Uuid,
    pub fence: u64,
}

/// A refusal that stores nothing with the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `422 idempotency_key_reused`: the key was used with a different request (stored, or
    /// still in flight).
    KeyReused,
    /// `422 idempotency_key_reused`: the key bought an order whose stored answer has been purged.
    KeySpent,
    /// `409 idempotency_in_flight`: the same request with this key is still being decided.
    InFlight,
    /// `503 unavailable`: the SKU's queue is full, or the attempt waited past its deadline.
    Overloaded,
    /// `503 unavailable`: the database or the lock quorum could not be had.
    Unavailable,
    /// `500 internal`: a bug (logged where it happened).
    Internal,
    /// `409 not_started` / `sale_ended` / `sale_paused` (with `Retry-After` and the instant): the
    /// batch found the sale closed by the database's clock.
    Closed(Closed),
}

impl Answer {
    /// The answer to one attempt of the committed batch `batch`.
    pub fn decided(decision: Decision, batch: BatchRef) -> Self {
        match decision {
            Decision::Fresh { answer, outcome } => Self::Fresh {
                answer,
                outcome,
                batch,
            },
            Decision::Replay(answer) => Self::Replayed { answer, batch },
            Decision::KeyReused => Self::Refused(Refusal::KeyReused),
            Decision::KeySpent => Self::Refused(Refusal::KeySpent),
            Decision::Closed(closed) => Self::Refused(Refusal::Closed(closed)),
        }
    }

    /// `409 sold_out`, known without a transaction.
    pub fn sold_out_known(sku: &Sku) -> Self {
        Self::SoldOutKnown(StoredAnswer::sold_out(sku))
    }

    /// The outcome label of the purchase metric and the audit event.
    pub fn outcome(&self) -> &'static str {
        match self {
            Self::Fresh { outcome, .. } => outcome.label(),
            Self::Replayed { .. } => "replayed",
            Self::SoldOutKnown(_) => ErrorCode::SoldOut.as_str(),
            Self::Refused(refusal) => refusal.code().as_str(),
        }
    }
}

impl From<Refusal> for Answer {
    fn from(refusal: Refusal) -> Self {
        Self::Refused(refusal)
    }
}

impl Refusal {
    /// The problem's stable code.
    pub fn code(self) -> ErrorCode {
        match self {
            Self::KeyReused | Self::KeySpent => ErrorCode::IdempotencyKeyReused,
            Self::InFlight => ErrorCode::IdempotencyInFlight,
            Self::Overloaded | Self::Unavailable => ErrorCode::Unavailable,
            Self::Internal => ErrorCode::Internal,
            Self::Closed(closed) => closed.code(),
        }
    }

    /// The problem this refusal answers with.
    pub fn error(self) -> ApiError {
        let detail = match self {
            Self::Closed(closed) => return ApiError::from(closed),
            Self::KeyReused => "this Idempotency-Key was used with a different request",
            Self::KeySpent => {
                "this Idempotency-Key already bought an order whose stored answer has expired; use a new key for a new purchase"
            }
            Self::InFlight => {
                "a request with this Idempotency-Key is still being processed; retry shortly"
            }
            Self::Overloaded => {
                "too many purchases queued for this sku; retry with the same Idempotency-Key"
            }
            Self::Unavailable => {
                "the purchase could not be decided now (database or lock quorum unavailable); retry with the same Idempotency-Key"
            }
            Self::Internal => "internal error",
        };
        ApiError::new(self.code(), detail)
    }
}

#[cfg(test)]
mod tests {
    use shared::Problem;

    use super::*;

    fn body_code(body: &str) -> String {
        serde_json::from_str::<Problem>(body)
            .map(|p| p.code.as_str().to_owned())
            .unwrap_or_else(|e| panic!("{body}: {e}"))
    }

    /// The typed outcome says what the answer's body says (the route used to parse the body).
    #[test]
    fn the_outcome_label_is_the_code_the_client_reads() {
        let sku = Sku::parse("SKU-1").expect("sku");
        let known = Answer::sold_out_known(&sku);
        let Answer::SoldOutKnown(stored) = &known else {
            panic!("{known:?}")
        };
        assert_eq!(stored.status, 409);
        assert_eq!(body_code(&stored.body), known.outcome());

        for refusal in [
            Refusal::KeyReused,
            Refusal::KeySpent,
            Refusal::InFlight,
            Refusal::Overloaded,
            Refusal::Unavailable,
            Refusal::Internal,
            Refusal::Closed(Closed::Paused),
        ] {
            let problem = refusal.error().problem();
            let answer = Answer::from(refusal);
            assert_eq!(problem.code.as_str(), answer.outcome(), "{refusal:?}");
        }

        let batch = BatchRef {
            id: Uuid::now_v7(),
            fence: 7,
        };
        let replay = Answer::decided(Decision::Replay(stored.clone()), batch);
        assert_eq!(replay.outcome(), "replayed");
        assert_eq!(
            Answer::decided(Decision::KeySpent, batch),
            Answer::Refused(Refusal::KeySpent)
        );
    }
}
