//! `POST /v1/purchases` up to the point where per-user state is needed: the checks that need no
//! state, in the contract's order — body size (413), shopper token (401 `unauthenticated`),
//! Idempotency-Key (400 missing / 400 invalid), body (400 `invalid_request`).
//!
//! The body size is checked twice: on the announced `Content-Length` before anything is read
//! ([`announced_too_large`]), and while the body streams in ([`CappedBody`]), so a body without
//! `Content-Length` (chunked) is refused as soon as it passes the limit instead of being buffered
//! whole.

use shared::{ErrorCode, IdempotencyKey, PurchaseRequest, SecretRing, UserId};

use crate::fingerprint;
use crate::jwt::{self, TokenRules};
use crate::reply::Reply;
use crate::session::{self, Credential};

/// Largest accepted request body, as at the origin.
pub const MAX_BODY_BYTES: usize = 16 * 1024;

/// The raw parts of an incoming purchase request.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    /// The shopper credential, picked by [`crate::session::credential`].
    pub credential: &'a Credential<'a>,
    pub idempotency_key: Option<&'a str>,
    pub body: &'a [u8],
}

/// A purchase attempt that passed every stateless check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Purchase {
    pub user: UserId,
    pub key: IdempotencyKey,
    /// The header value as received (bare or sf-string), forwarded unchanged.
    pub raw_key: String,
    pub request: PurchaseRequest,
    /// The canonical body the edge forwards (and signs).
    pub body: String,
    pub fingerprint: String,
}

/// After a 413 for a streamed body, the rest of it is read and dropped, chunk by chunk, in the
/// background, up to this much; then the stream is cancelled. Cancelling at once races with the
/// answer: workerd may tear the connection down under a client that is still sending before the
/// 413 has reached it (a reset in 2 of 4 tries with Miniflare; `wrangler dev`'s proxy answers 503
/// in its place). Reading on a little lets the 413 go out first, as Go's `net/http` discards up to
/// 256 KiB of an unread body. Memory never grows with it: one chunk at a time.
pub const MAX_DISCARDED_BYTES: usize = 1024 * 1024;

/// The 413 answer.
pub fn too_large() -> Reply {
    Reply::problem(
        ErrorCode::PayloadTooLarge,
        format!("request body must be at most {MAX_BODY_BYTES} bytes"),
    )
}

/// Whether a `Content-Length` value already announces a body over the limit.
pub fn announced_too_large(content_length: Option<&str>) -> bool {
    content_length
        .and_then(|v| v.trim().parse::<u64>().ok())
        .is_some_and(|n| n > MAX_BODY_BYTES as u64)
}

/// The body grew past [`MAX_BODY_BYTES`] while it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BodyTooLarge;

/// A request body collected chunk by chunk under the [`MAX_BODY_BYTES`] cap. The runtime feeds
/// it the chunks as they arrive and stops reading (cancelling the rest of the stream) at the first
/// one that would pass the cap, so the edge never holds more than the cap plus one chunk of a
/// body, whatever the client sends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CappedBody {
    bytes: Vec<u8>,
}

impl CappedBody {
    /// Appends `chunk`, or refuses it (keeping nothing of it) when the body would pass the cap.
    pub fn push(&mut self, chunk: &[u8]) -> Result<(), BodyTooLarge> {
        if chunk.len() > MAX_BODY_BYTES - self.bytes.len() {
            return Err(BodyTooLarge);
        }
        self.bytes.extend_from_slice(chunk);
        Ok(())
    }

    /// The body read so far (all of it once the stream ended).
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// Runs the stateless checks at unix time `now` with the session keys and token rules.
pub fn validate(
    incoming: Incoming<'_>,
    session_keys: &SecretRing,
    token_rules: &TokenRules,
    now: i64,
) -> Result<Purchase, Reply> {
    if incoming.body.len() > MAX_BODY_BYTES {
        return Err(too_large());
    }
    let claims = incoming
        .credential
        .token()
        .and_then(|token| jwt::verify_hs256(token, session_keys, token_rules, now))
        .map_err(session::unauthenticated)?;
    let raw_key = incoming.idempotency_key.ok_or_else(|| {
        Reply::problem(
            ErrorCode::MissingIdempotencyKey,
            "an Idempotency-Key header is required",
        )
    })?;
    let key = IdempotencyKey::parse(raw_key)
        .map_err(|e| Reply::problem(ErrorCode::InvalidRequest, e.to_string()))?;
    let request = PurchaseRequest::from_json(incoming.body)
        .map_err(|e| Reply::problem(ErrorCode::InvalidRequest, e.to_string()))?;
    Ok(Purchase {
        user: claims.sub,
        key,
        raw_key: raw_key.to_owned(),
        body: fingerprint::canonical_body(&request),
        fingerprint: fingerprint::of(&request),
        request,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jwt::sign_hs256;
    use serde_json::json;

    const SECRET: &[u8] = b"session";
    const NOW: i64 = 1_700_000_000;

    fn auth() -> String {
        format!(
            "Bearer {}",
            sign_hs256(&json!({"sub": "alice", "exp": NOW + 60}), SECRET)
        )
    }

    fn run(authorization: Option<&str>, key: Option<&str>, body: &[u8]) -> Result<Purchase, Reply> {
        validate(
            Incoming {
                credential: &Credential::from_authorization(authorization),
                idempotency_key: key,
                body,
            },
            &SecretRing::single(SECRET.to_vec()),
            &TokenRules::default(),
            NOW,
        )
    }

    fn code(r: Result<Purchase, Reply>) -> Option<ErrorCode> {
        r.err().and_then(|reply| reply.code())
    }

    #[test]
    fn a_good_request_is_parsed_once() {
        let a = auth();
        let p = run(Some(&a), Some("\"k-1\""), br#"{ "qty": 2, "sku": "A" }"#).expect("valid");
        assert_eq!(
            (p.user.as_str(), p.key.as_str(), p.raw_key.as_str()),
            ("alice", "k-1", "\"k-1\"")
        );
        assert_eq!(p.body, r#"{"sku":"A","qty":2}"#);
    }

    #[test]
    fn checks_run_in_contract_order() {
        let a = auth();
        let big = vec![b' '; MAX_BODY_BYTES + 1];
        assert_eq!(
            code(run(None, None, &big)),
            Some(ErrorCode::PayloadTooLarge)
        );
        assert_eq!(
            code(run(None, None, b"nonsense")),
            Some(ErrorCode::Unauthenticated)
        );
        assert_eq!(
            code(run(Some("Bearer x.y.z"), Some("k"), b"{}")),
            Some(ErrorCode::Unauthenticated)
        );
        assert_eq!(
            code(run(Some(&a), None, b"nonsense")),
            Some(ErrorCode::MissingIdempotencyKey)
        );
        assert_eq!(
            code(run(Some(&a), Some(""), b"nonsense")),
            Some(ErrorCode::InvalidRequest)
        );
        assert_eq!(
            code(run(Some(&a), Some("\"open"), br#"{"sku":"A","qty":1}"#)),
            Some(ErrorCode::InvalidRequest)
        );
        for body in [
            &b"nonsense"[..],
            br#"{"sku":"A","qty":0}"#,
            br#"{"sku":"A","qty":1.5}"#,
            br#"{"sku":"a b","qty":1}"#,
        ] {
            assert_eq!(
                code(run(Some(&a), Some("k"), body)),
                Some(ErrorCode::InvalidRequest)
            );
        }
    }

    #[test]
    fn unauthenticated_answers_name_the_scheme() {
        let r = run(None, Some("k"), b"{}").expect_err("no token");
        assert_eq!(
            (r.status, r.header("www-authenticate")),
            (401, Some("Bearer"))
        );
    }

    #[test]
    fn a_streamed_body_is_cut_at_the_limit() {
        let mut body = CappedBody::default();
        assert_eq!(body.push(&[b'a'; 10_000]), Ok(()));
        assert_eq!(body.push(&[b'b'; MAX_BODY_BYTES - 10_000]), Ok(()));
        assert_eq!(body.push(b""), Ok(()));
        // Exactly at the limit; one more byte is refused, and nothing of it is kept.
        assert_eq!(body.push(b"c"), Err(BodyTooLarge));
        assert_eq!(body.clone().into_bytes().len(), MAX_BODY_BYTES);
        // A single chunk far above the limit (the 50 MB a hostile client streams).
        let mut one = CappedBody::default();
        assert_eq!(one.push(&vec![0; 4 * MAX_BODY_BYTES]), Err(BodyTooLarge));
        assert!(one.into_bytes().is_empty());
        // Many small chunks: refused at the first byte past the limit.
        let mut small = CappedBody::default();
        let accepted = (0..MAX_BODY_BYTES + 100)
            .take_while(|_| small.push(b"x").is_ok())
            .count();
        assert_eq!(accepted, MAX_BODY_BYTES);
    }

    #[test]
    fn content_length_precheck() {
        assert!(announced_too_large(Some("16385")));
        assert!(!announced_too_large(Some("16384")));
        assert!(!announced_too_large(Some("abc")));
        assert!(!announced_too_large(None));
    }
}
