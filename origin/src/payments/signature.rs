//! Stripe's webhook signature, verified before anything else of a `POST /v1/payments/stripe`
//! is looked at (only the body's size limit comes first). Pure: the header, the raw body, the
//! configured secrets and the clock in, a verdict out — no I/O.
//!
//! The scheme, as Stripe documents it (“Verify webhook signatures manually”):
//!
//! - `Stripe-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>…][,v0=<hex>…]` — comma-separated
//!   `key=value` elements; `t` appears once; there may be several `v1` (Stripe signs with every
//!   secret an endpoint has during a rotation); other schemes (`v0`, the test-mode scheme) are
//!   ignored;
//! - each `v1` is the lowercase hex HMAC-SHA256, keyed with the endpoint's signing secret (the
//!   `whsec_…` string as its bytes), of `"{t}.{raw body}"`;
//! - the event is genuine when any `v1` equals the HMAC under any configured secret, and
//!   `|now − t| <= 300 s` (Stripe's default tolerance; it refuses replays of an old delivery).
//!
//! Comparisons are constant time: every (secret, signature) pair is compared, without an early
//! exit. Secrets are held as [`secrecy`] values; no error message carries one.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use subtle::{Choice, ConstantTimeEq};

pub use crate::settings::webhook::WebhookSecrets;

/// How far `t` may be from the server's clock, either way, in seconds (Stripe's default).
pub const TOLERANCE_SECS: i64 = 300;

/// The header that carries the signature.
pub const HEADER: &str = "stripe-signature";

/// Why a delivery's signature is refused (all answer 400 `webhook_signature`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    #[error("the Stripe-Signature header is missing")]
    Missing,
    #[error("the Stripe-Signature header is malformed ({0})")]
    Malformed(&'static str),
    #[error("the Stripe-Signature header carries no v1 signature")]
    NoV1,
    #[error("the signature timestamp is more than {TOLERANCE_SECS} s old")]
    TooOld,
    #[error("the signature timestamp is more than {TOLERANCE_SECS} s in the future")]
    InFuture,
    #[error("no v1 signature matches the body under any configured secret")]
    Mismatch,
}

impl SignatureError {
    /// The `reason` label of `origin_webhook_signature_failures_total`.
    pub const fn reason(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed(_) => "malformed",
            Self::NoV1 => "no_v1",
            Self::TooOld => "too_old",
            Self::InFuture => "in_future",
            Self::Mismatch => "mismatch",
        }
    }
}

/// The parts of a `Stripe-Signature` header that matter: `t` and every `v1`, decoded.
#[derive(Debug, PartialEq, Eq)]
struct Header {
    t: i64,
    /// `v1` values that are 64 hex digits, decoded; any other `v1` can match nothing.
    v1: Vec<[u8; 32]>,
    /// Whether the header named any `v1` (well-formed or not).
    any_v1: bool,
}

fn parse_header(raw: &str) -> Result<Header, SignatureError> {
    let mut t = None;
    let mut v1 = Vec::new();
    let mut any_v1 = false;
    for element in raw.split(',') {
        let (key, value) = element
            .trim()
            .split_once('=')
            .ok_or(SignatureError::Malformed("an element is not key=value"))?;
        match key {
            "t" => {
                if t.is_some() {
                    return Err(SignatureError::Malformed("t appears twice"));
                }
                // Digits only: no sign, no spaces, no exponent.
                if value.is_empty()
                    || value.len() > 12
                    || !value.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(SignatureError::Malformed("t is not a unix time"));
                }
                t = value.parse::<i64>().ok();
            }
            "v1" => {
                any_v1 = true;
                let mut sig = [0u8; 32];
                if hex::decode_to_slice(value, &mut sig).is_ok() {
                    v1.push(sig);
                }
            }
            // v0 (test mode) and any scheme Stripe may add later are not ours to check.
            _ => {}
        }
    }
    let t = t.ok_or(SignatureError::Malformed("t is missing"))?;
    Ok(Header { t, v1, any_v1 })
}

/// HMAC-SHA256 of `"{t}.{body}"` under `secret`.
fn mac(secret: &[u8], t: &str, body: &[u8]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(t.as_bytes());
    mac.update(b".");
    mac.update(body);
    mac.finalize().into_bytes().into()
}

/// Verifies a delivery: `header` (the `Stripe-Signature` value, `None` when absent or not
/// visible ASCII) over the raw `body`, at `now_unix`. `Ok(t)` when genuine.
pub fn verify(
    header: Option<&str>,
    body: &[u8],
    secrets: &WebhookSecrets,
    now_unix: i64,
) -> Result<i64, SignatureError> {
    let raw = header.ok_or(SignatureError::Missing)?;
    let parsed = parse_header(raw)?;
    if !parsed.any_v1 {
        return Err(SignatureError::NoV1);
    }
    let age = now_unix.saturating_sub(parsed.t);
    if age > TOLERANCE_SECS {
        return Err(SignatureError::TooOld);
    }
    if age < -TOLERANCE_SECS {
        return Err(SignatureError::InFuture);
    }
    // The decimal `t` as Stripe signed it: the header's digits (leading zeros would change the
    // signed string, so sign exactly what was sent).
    let t_text = raw
        .split(',')
        .filter_map(|e| e.trim().split_once('='))
        .find_map(|(k, v)| (k == "t").then_some(v))
        .unwrap_or_default();
    let mut matched = Choice::from(0);
    for secret in secrets.iter() {
        let expected = mac(secret, t_text, body);
        for given in &parsed.v1 {
            matched |= expected.ct_eq(given);
        }
    }
    if bool::from(matched) {
        Ok(parsed.t)
    } else {
        Err(SignatureError::Mismatch)
    }
}

/// The `Stripe-Signature` value Stripe would send for `body` at `t` under `secret` (tests and
/// the benchmark sign with it).
pub fn sign(secret: &str, t: i64, body: &[u8]) -> String {
    format!(
        "t={t},v1={}",
        hex::encode(mac(secret.as_bytes(), &t.to_string(), body))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_790_000_000;
    const SECRET: &str = "whsec_test_0123456789abcdef";
    const OLD: &str = "whsec_old_fedcba9876543210";
    const BODY: &[u8] = br#"{"id":"evt_1","type":"payment_intent.succeeded"}"#;

    fn secrets(list: &str) -> WebhookSecrets {
        WebhookSecrets::parse(list).expect("valid secrets")
    }

    fn v1(secret: &str, t: i64, body: &[u8]) -> String {
        hex::encode(mac(secret.as_bytes(), &t.to_string(), body))
    }

    #[test]
    fn a_signature_made_like_stripe_verifies() {
        let header = sign(SECRET, NOW, BODY);
        assert_eq!(verify(Some(&header), BODY, &secrets(SECRET), NOW), Ok(NOW));
    }

    #[test]
    fn a_known_vector_matches_an_independent_hmac() {
        // HMAC-SHA256(key="whsec_test_0123456789abcdef", "1790000000.{}") computed with openssl:
        // printf '1790000000.{}' | openssl dgst -sha256 -hmac whsec_test_0123456789abcdef
        assert_eq!(
            sign(SECRET, NOW, b"{}"),
            "t=1790000000,v1=d8ce8f9a3d1a74d4b21bddea1c351a73da30d5b39fe47c62996bfac92a491874"
        );
    }

    #[test]
    fn any_of_several_v1_under_any_configured_secret_verifies() {
        let header = format!(
            "t={NOW},v1={},v1={},v0={}",
            "00".repeat(32),
            v1(OLD, NOW, BODY),
            "ff".repeat(32)
        );
        let both = secrets(&format!("{SECRET}, {OLD}"));
        assert_eq!(verify(Some(&header), BODY, &both, NOW), Ok(NOW));
        assert_eq!(
            verify(Some(&header), BODY, &secrets(SECRET), NOW),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn wrong_secret_and_tampered_body_do_not_verify() {
        let header = sign("whsec_someone_elses_secret", NOW, BODY);
        assert_eq!(
            verify(Some(&header), BODY, &secrets(SECRET), NOW),
            Err(SignatureError::Mismatch)
        );
        let header = sign(SECRET, NOW, BODY);
        let tampered = br#"{"id":"evt_1","type":"payment_intent.succeedeD"}"#;
        assert_eq!(
            verify(Some(&header), tampered, &secrets(SECRET), NOW),
            Err(SignatureError::Mismatch)
        );
        // The timestamp is signed too.
        let moved = sign(SECRET, NOW, BODY).replace(&NOW.to_string(), &(NOW + 1).to_string());
        assert_eq!(
            verify(Some(&moved), BODY, &secrets(SECRET), NOW),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn the_tolerance_is_300_seconds_both_ways() {
        let s = secrets(SECRET);
        for t in [NOW - 300, NOW + 300, NOW] {
            assert_eq!(verify(Some(&sign(SECRET, t, BODY)), BODY, &s, NOW), Ok(t));
        }
        assert_eq!(
            verify(Some(&sign(SECRET, NOW - 301, BODY)), BODY, &s, NOW),
            Err(SignatureError::TooOld)
        );
        assert_eq!(
            verify(Some(&sign(SECRET, NOW + 301, BODY)), BODY, &s, NOW),
            Err(SignatureError::InFuture)
        );
    }

    #[test]
    fn v0_alone_missing_and_malformed_headers_are_refused() {
        let s = secrets(SECRET);
        let v0_only = format!("t={NOW},v0={}", v1(SECRET, NOW, BODY));
        assert_eq!(
            verify(Some(&v0_only), BODY, &s, NOW),
            Err(SignatureError::NoV1)
        );
        assert_eq!(verify(None, BODY, &s, NOW), Err(SignatureError::Missing));
        let sig = v1(SECRET, NOW, BODY);
        for bad in [
            String::new(),
            format!("v1={sig}"),
            format!("t=abc,v1={sig}"),
            format!("t=-5,v1={sig}"),
            format!("t={NOW},t={NOW},v1={sig}"),
            format!("t={NOW};v1={sig}"),
            format!("t={NOW},garbage"),
            format!("t=99999999999999999999,v1={sig}"),
        ] {
            assert!(
                matches!(
                    verify(Some(&bad), BODY, &s, NOW),
                    Err(SignatureError::Malformed(_))
                ),
                "{bad:?}"
            );
        }
        // A v1 that is not 64 hex digits matches nothing.
        assert_eq!(
            verify(Some(&format!("t={NOW},v1=zz")), BODY, &s, NOW),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(
                Some(&format!("t={NOW},v1={}", sig.to_uppercase())),
                BODY,
                &s,
                NOW
            ),
            Ok(NOW),
            "hex is case-insensitive when decoded"
        );
    }
}
