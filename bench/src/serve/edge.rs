//! The first check of a purchase at the ceiling and the redis-lua baseline, as at the origin:
//! the edge's `Flashgate-Signature` over the request (v2 with the ring's key; `shared::signing`),
//! the signed `Flashgate-User`, and the `Idempotency-Key`. Any signature failure is 401
//! `bad_signature`; a missing key 400 `missing_idempotency_key`; a malformed one 400
//! `invalid_request`.

use axum::http::HeaderMap;
use axum::response::Response;
use shared::signing::{SignedParts, Verifier};
use shared::{DomainError, ErrorCode, IdempotencyKey, SecretRing, UserId, headers};

/// A purchase the edge signed.
#[derive(Debug)]
pub(crate) struct Signed {
    pub(crate) user: UserId,
    pub(crate) key: IdempotencyKey,
}

/// Why a request is refused before its body is looked at.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    #[error("{0}")]
    Signature(&'static str),
    #[error("{0}")]
    BadSignature(shared::signing::SignatureError),
    #[error("the Idempotency-Key header is required")]
    MissingKey,
    #[error(transparent)]
    Key(DomainError),
}

impl Refused {
    pub(crate) fn into_response(self) -> Response {
        let code = match self {
            Self::Signature(_) | Self::BadSignature(_) => ErrorCode::BadSignature,
            Self::MissingKey => ErrorCode::MissingIdempotencyKey,
            Self::Key(_) => ErrorCode::InvalidRequest,
        };
        super::problem(code, self.to_string())
    }
}

/// Checks the signature of `POST path` with `body` at unix time `now`; see the module docs.
pub(crate) fn verify(
    headers: &HeaderMap,
    ring: &SecretRing,
    path: &str,
    body: &[u8],
    now: i64,
) -> Result<Signed, Refused> {
    let user = headers
        .get(headers::USER)
        .ok_or(Refused::Signature("Flashgate-User is missing"))?
        .to_str()
        .ok()
        .and_then(|u| UserId::parse(u).ok())
        .ok_or(Refused::Signature("Flashgate-User is malformed"))?;
    // The signature covers the decoded key; a malformed key (refused right after) signs as sent.
    let raw_key = headers.get(headers::IDEMPOTENCY_KEY);
    let key = raw_key.map(|raw| IdempotencyKey::parse_bytes(raw.as_bytes()));
    let signed_key = match (&key, raw_key) {
        (Some(Ok(k)), _) => k.as_str(),
        (_, Some(raw)) => raw.to_str().unwrap_or(""),
        (_, None) => "",
    };
    let parts = SignedParts {
        method: "POST",
        path,
        user: user.as_str(),
        idempotency_key: signed_key,
        body,
    };
    let header = headers
        .get(headers::SIGNATURE)
        .map(|v| v.to_str().unwrap_or(""));
    Verifier {
        ring,
        accept_v1: false,
    }
    .verify(header, now, &parts)
    .map_err(Refused::BadSignature)?;
    match key {
        None => Err(Refused::MissingKey),
        Some(Err(e)) => Err(Refused::Key(e)),
        Some(Ok(key)) => Ok(Signed { user, key }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const PATH: &str = "/v1/purchases";
    const BODY: &[u8] = br#"{"sku":"A","qty":1}"#;

    fn signed_headers(ring: &SecretRing, user: &str, key: &str, now: i64) -> HeaderMap {
        let parts = SignedParts {
            method: "POST",
            path: PATH,
            user,
            idempotency_key: key,
            body: BODY,
        };
        let mut h = HeaderMap::new();
        h.insert(headers::USER, HeaderValue::from_str(user).expect("user"));
        h.insert(
            headers::IDEMPOTENCY_KEY,
            HeaderValue::from_str(key).expect("key"),
        );
        h.insert(
            headers::SIGNATURE,
            HeaderValue::from_str(&shared::signing::sign(ring, now, &parts)).expect("sig"),
        );
        h
    }

    #[test]
    fn a_request_signed_by_the_edge_passes_and_names_user_and_key() {
        let ring = SecretRing::single("bench-edge-secret-0123456789");
        let h = signed_headers(&ring, "shopper-1", "k-1", 1_000);
        let signed = verify(&h, &ring, PATH, BODY, 1_000).expect("valid");
        assert_eq!(
            (signed.user.as_str(), signed.key.as_str()),
            ("shopper-1", "k-1")
        );
    }

    #[test]
    fn a_forged_expired_or_unsigned_request_is_refused_with_bad_signature() {
        let ring = SecretRing::single("bench-edge-secret-0123456789");
        let other = SecretRing::single("another-secret-0123456789");
        let good = signed_headers(&ring, "shopper-1", "k-1", 1_000);
        let forged = signed_headers(&other, "shopper-1", "k-1", 1_000);
        let mut unsigned = good.clone();
        unsigned.remove(headers::SIGNATURE);
        let changed_body = br#"{"sku":"A","qty":2}"#;
        for (what, result) in [
            ("forged", verify(&forged, &ring, PATH, BODY, 1_000)),
            (
                "body changed",
                verify(&good, &ring, PATH, changed_body, 1_000),
            ),
            ("expired", verify(&good, &ring, PATH, BODY, 100_000)),
            ("unsigned", verify(&unsigned, &ring, PATH, BODY, 1_000)),
        ] {
            let status = result.map(|_| ()).map_err(|e| e.into_response().status());
            assert_eq!(status, Err(axum::http::StatusCode::UNAUTHORIZED), "{what}");
        }
    }

    #[test]
    fn a_missing_key_is_400_after_the_signature() {
        let ring = SecretRing::single("bench-edge-secret-0123456789");
        let mut h = signed_headers(&ring, "shopper-1", "", 1_000);
        h.remove(headers::IDEMPOTENCY_KEY);
        let refused = verify(&h, &ring, PATH, BODY, 1_000).map(|_| ());
        assert!(matches!(refused, Err(Refused::MissingKey)), "{refused:?}");
    }
}
