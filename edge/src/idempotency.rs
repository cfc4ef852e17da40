//! The idempotency state machine of one (user, key), with the origin's semantics:
//!
//! ```text
//!            begin (no record, or in-flight record older than the timeout)
//!   (none) ─────────────────────────────────────────────▶ InFlight{attempt}
//!   InFlight ── finish(attempt, stored outcome) ────────▶ Done{status, body}
//!   InFlight ── finish(attempt, not stored: 400/413/422…) ──▶ (none)      the key may be retried
//!   InFlight ── finish(attempt, 503: no answer, timed out) ──▶ InDoubt{proof}   retried as it was
//!   Done, InDoubt ── older than the retention ── alarm purge ──▶ (none)
//! ```
//!
//! A lookup under a different fingerprint is 422 `idempotency_key_reused`; under the same one it is
//! 409 `idempotency_in_flight` while in flight and a replay once done. A key **in doubt** — its
//! attempt got no answer the edge could trust (the origin timed out, failed or could not be
//! reached: the origin may have decided it all the same) — is retried as the same attempt
//! ([`Lookup::Retry`]): it goes to the origin, which replays what it decided or decides it now,
//! instead of meeting the edge's guesses from cached facts (a `sold_out` shield would tell a key
//! whose unit was sold while the edge timed out that it bought nothing), and the proof of work
//! that attempt spent is still its own. An in-flight record expires
//! after a timeout so a crashed request cannot block the key forever; each `begin` gets a fresh
//! `attempt` number so that a late `finish` of an expired attempt cannot overwrite its successor.

use crate::reply::problem_code;

/// A stored record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub fingerprint: String,
    pub attempt: i64,
    pub state: State,
    /// When the record was created (in flight) or completed (done), unix ms.
    pub updated_ms: i64,
}

/// Where a record is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    InFlight,
    Done {
        status: u16,
        body: String,
    },
    /// The attempt got no answer the edge could trust (503); `proof` is the id of the proof of
    /// work it spent, if any.
    InDoubt {
        proof: Option<String>,
    },
}

/// What a lookup says about a new attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// No live record: start an attempt (insert or overwrite an expired in-flight record).
    Proceed,
    /// The same request again after an attempt in doubt: start it again, as that attempt (its
    /// `proof` is its own, and the origin, not the edge's cached guesses, decides).
    Retry { proof: Option<String> },
    /// Same request already decided: answer this again.
    Replay { status: u16, body: String },
    /// Same request still being decided.
    InFlight,
    /// Same key, different request.
    Reused,
}

/// Looks `fingerprint` up against the stored `record` at `now_ms`.
pub fn lookup(
    record: Option<&Record>,
    fingerprint: &str,
    now_ms: i64,
    in_flight_timeout_ms: i64,
) -> Lookup {
    let Some(record) = record else {
        return Lookup::Proceed;
    };
    let expired = matches!(record.state, State::InFlight)
        && now_ms.saturating_sub(record.updated_ms) >= in_flight_timeout_ms;
    if expired {
        return Lookup::Proceed;
    }
    if record.fingerprint != fingerprint {
        return Lookup::Reused;
    }
    match &record.state {
        State::InFlight => Lookup::InFlight,
        State::Done { status, body } => Lookup::Replay {
            status: *status,
            body: body.clone(),
        },
        State::InDoubt { proof } => Lookup::Retry {
            proof: proof.clone(),
        },
    }
}

/// What to do with the record when an attempt ends with an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Keep the answer with the key and replay it (201, 404 `unknown_sku`, 409 `sold_out` /
    /// `purchase_limit`).
    Store,
    /// No answer the edge can trust (503: the origin timed out, failed or could not be reached, or
    /// refused the edge's signature): the origin may have decided the attempt. The key may be
    /// retried, as the same attempt ([`State::InDoubt`]).
    Doubt,
    /// Forget the attempt so the same key can be retried (400, 413, 409 in flight, 422…: the
    /// origin decided nothing).
    Release,
}

/// Which answers are stored, per the contract, and which leave the key in doubt.
pub fn disposition(status: u16, body: &[u8]) -> Disposition {
    if status == 201 {
        return Disposition::Store;
    }
    match problem_code(body) {
        Some(code) if code.is_stored_outcome() && code.status() == status => Disposition::Store,
        _ if status >= 500 => Disposition::Doubt,
        _ => Disposition::Release,
    }
}

/// Whether `finish` for `attempt` may still change `record` (it may not once a newer attempt
/// took the key over, or once the record is gone or done).
pub fn finish_applies(record: Option<&Record>, attempt: i64) -> bool {
    matches!(record, Some(Record { state: State::InFlight, attempt: a, .. }) if *a == attempt)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::{ErrorCode, Problem};

    const TIMEOUT: i64 = 30_000;

    fn in_flight(fp: &str, at: i64) -> Record {
        Record {
            fingerprint: fp.into(),
            attempt: 1,
            state: State::InFlight,
            updated_ms: at,
        }
    }

    fn done(fp: &str, status: u16, body: &str) -> Record {
        Record {
            fingerprint: fp.into(),
            attempt: 1,
            state: State::Done {
                status,
                body: body.into(),
            },
            updated_ms: 0,
        }
    }

    #[test]
    fn transitions() {
        assert_eq!(lookup(None, "a", 0, TIMEOUT), Lookup::Proceed);
        let r = in_flight("a", 1_000);
        assert_eq!(
            lookup(Some(&r), "a", 1_000 + TIMEOUT - 1, TIMEOUT),
            Lookup::InFlight
        );
        assert_eq!(lookup(Some(&r), "b", 1_000, TIMEOUT), Lookup::Reused);
        // A crashed attempt stops blocking the key after the timeout, whatever the new body.
        assert_eq!(
            lookup(Some(&r), "a", 1_000 + TIMEOUT, TIMEOUT),
            Lookup::Proceed
        );
        assert_eq!(
            lookup(Some(&r), "b", 1_000 + TIMEOUT, TIMEOUT),
            Lookup::Proceed
        );
        let d = done("a", 201, "{}");
        assert_eq!(
            lookup(Some(&d), "a", i64::MAX, TIMEOUT),
            Lookup::Replay {
                status: 201,
                body: "{}".into()
            }
        );
        assert_eq!(lookup(Some(&d), "b", 0, TIMEOUT), Lookup::Reused);
        let doubt = Record {
            state: State::InDoubt {
                proof: Some("c0ffee".into()),
            },
            ..d
        };
        assert_eq!(
            lookup(Some(&doubt), "a", i64::MAX, TIMEOUT),
            Lookup::Retry {
                proof: Some("c0ffee".into())
            }
        );
        assert_eq!(lookup(Some(&doubt), "b", 0, TIMEOUT), Lookup::Reused);
    }

    #[test]
    fn stored_and_released_outcomes_follow_the_contract() {
        let body = |code| Problem::new(code, "x").to_json();
        assert_eq!(disposition(201, b"{}"), Disposition::Store);
        for code in [
            ErrorCode::UnknownSku,
            ErrorCode::SoldOut,
            ErrorCode::PurchaseLimit,
        ] {
            assert_eq!(
                disposition(code.status(), body(code).as_bytes()),
                Disposition::Store,
                "{code}"
            );
        }
        for code in [
            ErrorCode::InvalidRequest,
            ErrorCode::MissingIdempotencyKey,
            ErrorCode::BadSignature,
            ErrorCode::PayloadTooLarge,
            ErrorCode::IdempotencyInFlight,
            ErrorCode::IdempotencyKeyReused,
            ErrorCode::NotFound,
        ] {
            assert_eq!(
                disposition(code.status(), body(code).as_bytes()),
                Disposition::Release,
                "{code}"
            );
        }
        assert_eq!(disposition(409, b"not json"), Disposition::Release);
        // No answer to trust: the origin may have decided it.
        assert_eq!(
            disposition(503, body(ErrorCode::Unavailable).as_bytes()),
            Disposition::Doubt
        );
        assert_eq!(
            disposition(500, body(ErrorCode::SoldOut).as_bytes()),
            Disposition::Doubt
        );
    }

    #[test]
    fn only_the_current_attempt_may_finish() {
        let r = in_flight("a", 0);
        assert!(finish_applies(Some(&r), 1));
        assert!(!finish_applies(Some(&r), 2));
        assert!(!finish_applies(Some(&done("a", 201, "{}")), 1));
        assert!(!finish_applies(None, 1));
    }
}
