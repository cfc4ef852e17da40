//! The answers of the proof of work, built in one place: a challenge (`200`, never cached), and
//! the refusals — `428 proof_required` and `403 proof_rejected`, each carrying `challenge_url`,
//! where to get a fresh challenge — and `409 proof_not_required`. None is ever stored with an
//! Idempotency-Key: the refused request never reached the shopper's gate or the origin.

use shared::{ErrorCode, Problem};

use super::{CHALLENGE_PATH, Issued, ProofError};
use crate::reply::Reply;

/// `/v1/challenge?sku=<sku>` (SKUs are URL-safe: `[A-Za-z0-9._-]`).
pub fn challenge_url(sku: &str) -> String {
    format!("{CHALLENGE_PATH}?sku={sku}")
}

/// `200` with the challenge, `Cache-Control: no-store` (each is unique and bound to its shopper).
pub fn challenge(challenge: &Issued) -> Reply {
    let body = serde_json::to_string(challenge).unwrap_or_else(|_| "{}".into());
    Reply::json(200, body).with_header("cache-control", "no-store")
}

/// The refusal of a proof for `sku`: `428 proof_required` when there was none, else `403
/// proof_rejected` saying why.
pub fn refused(sku: &str, error: ProofError) -> Reply {
    let (code, detail) = match error {
        ProofError::Missing => (
            ErrorCode::ProofRequired,
            format!(
                "this sale asks for a proof of work: get a challenge from {}, solve it (ALTCHA) and send the solution in Flashgate-Proof",
                challenge_url(sku)
            ),
        ),
        other => (
            ErrorCode::ProofRejected,
            format!("{other}; get a fresh challenge from {}", challenge_url(sku)),
        ),
    };
    Reply::from_problem(&Problem::new(code, detail).with_challenge_url(challenge_url(sku)))
        .with_header("cache-control", "private, no-store")
}

/// `409 proof_not_required`: `GET /v1/challenge` for a sale without a proof of work.
pub fn not_required() -> Reply {
    Reply::problem(
        ErrorCode::ProofNotRequired,
        "this sale asks for no proof of work",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_say_where_to_get_a_challenge() {
        for (error, status, code) in [
            (ProofError::Missing, 428, "proof_required"),
            (ProofError::Spent, 403, "proof_rejected"),
            (ProofError::Expired, 403, "proof_rejected"),
        ] {
            let r = refused("SHOE-1", error);
            assert_eq!(r.status, status);
            let body: serde_json::Value = serde_json::from_str(&r.body).expect("json");
            assert_eq!(body["code"], code);
            assert_eq!(body["challenge_url"], "/v1/challenge?sku=SHOE-1");
            assert_eq!(
                r.header("content-type"),
                Some(shared::headers::PROBLEM_JSON)
            );
        }
        assert_eq!(not_required().status, 409);
        let c = Issued::V1(super::super::altcha::make(b"k", "s&".into(), 1, 2));
        let r = challenge(&c);
        assert_eq!(
            (r.status, r.header("cache-control")),
            (200, Some("no-store"))
        );
        assert_eq!(
            serde_json::from_str::<Issued>(&r.body).expect("challenge"),
            c
        );
    }
}
