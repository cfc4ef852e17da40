//! Request signing between the edge and the origin.
//!
//! `Flashgate-Signature: t=<unix seconds>,v1=<64 lowercase hex>` where `v1` is
//! `HMAC-SHA256(secret, "{t}.{METHOD}.{path}.{user}.{key}.{sha256_hex(body)}")`:
//! `path` without query string, `user` the `Flashgate-User` value, `key` the *decoded*
//! Idempotency-Key (empty when absent), the body hash over the raw bytes. The origin accepts a
//! signature when `|now - t| <= 300 s`; the MAC is compared in constant time.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

type HmacSha256 = Hmac<Sha256>;

/// Largest accepted distance between the signer's and the verifier's clocks, in seconds.
pub const MAX_SKEW_SECS: i64 = 300;

/// What a signature covers.
#[derive(Debug, Clone, Copy)]
pub struct SignedParts<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub user: &'a str,
    pub idempotency_key: &'a str,
    pub body: &'a [u8],
}

/// Why a signature is refused. All map to 401 `bad_signature`; the variants exist for logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    #[error("signature header is missing")]
    Missing,
    #[error("signature header is malformed")]
    Malformed,
    #[error("signature timestamp is outside the accepted window")]
    Expired,
    #[error("signature does not match")]
    Mismatch,
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn mac(secret: &[u8], t: i64, parts: &SignedParts<'_>) -> HmacSha256 {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut mac = <HmacSha256 as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    let body_hash = sha256_hex(parts.body);
    for (i, piece) in [
        t.to_string().as_str(),
        parts.method,
        parts.path,
        parts.user,
        parts.idempotency_key,
        &body_hash,
    ]
    .iter()
    .enumerate()
    {
        if i > 0 {
            mac.update(b".");
        }
        mac.update(piece.as_bytes());
    }
    mac
}

/// The `Flashgate-Signature` header value for `parts`, signed at unix time `t`.
pub fn sign(secret: &[u8], t: i64, parts: &SignedParts<'_>) -> String {
    format!(
        "t={t},v1={}",
        hex::encode(mac(secret, t, parts).finalize().into_bytes())
    )
}

/// A parsed `Flashgate-Signature` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignatureHeader {
    pub t: i64,
    pub v1: [u8; 32],
}

impl SignatureHeader {
    /// Parses exactly `t=<digits>,v1=<64 lowercase hex>`.
    pub fn parse(value: &str) -> Result<Self, SignatureError> {
        let (t_part, v_part) = value.split_once(',').ok_or(SignatureError::Malformed)?;
        let t_digits = t_part.strip_prefix("t=").ok_or(SignatureError::Malformed)?;
        let hex_str = v_part
            .strip_prefix("v1=")
            .ok_or(SignatureError::Malformed)?;
        if t_digits.is_empty()
            || t_digits.len() > 18
            || !t_digits.bytes().all(|b| b.is_ascii_digit())
        {
            return Err(SignatureError::Malformed);
        }
        if hex_str.len() != 64
            || !hex_str
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        {
            return Err(SignatureError::Malformed);
        }
        let t = t_digits.parse().map_err(|_| SignatureError::Malformed)?;
        let mut v1 = [0u8; 32];
        hex::decode_to_slice(hex_str, &mut v1).map_err(|_| SignatureError::Malformed)?;
        Ok(Self { t, v1 })
    }
}

/// Verifies `header` (the raw header value, `None` when absent) for `parts` at unix time `now`
/// against any of `secrets` (several during a rotation). The MAC comparison is constant-time.
pub fn verify(
    secrets: &[&[u8]],
    header: Option<&str>,
    now: i64,
    parts: &SignedParts<'_>,
) -> Result<(), SignatureError> {
    let header = SignatureHeader::parse(header.ok_or(SignatureError::Missing)?)?;
    if now.abs_diff(header.t) > MAX_SKEW_SECS.unsigned_abs() {
        return Err(SignatureError::Expired);
    }
    let mut ok = false;
    for secret in secrets {
        // `verify_slice` compares in constant time; try every secret so timing does not say which.
        ok |= mac(secret, header.t, parts)
            .verify_slice(&header.v1)
            .is_ok();
    }
    if ok {
        Ok(())
    } else {
        Err(SignatureError::Mismatch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &[u8] = b"edge-secret";

    fn parts(body: &[u8]) -> SignedParts<'_> {
        SignedParts {
            method: "POST",
            path: "/v1/purchases",
            user: "alice",
            idempotency_key: "k1",
            body,
        }
    }

    #[test]
    fn matches_an_independently_computed_hmac() {
        // Expected value computed with: printf '%s' "1700000000.POST./v1/purchases.alice.k1.$(printf '%s' '{}' | sha256sum | cut -d' ' -f1)" | openssl dgst -sha256 -hmac edge-secret
        let header = sign(SECRET, 1_700_000_000, &parts(b"{}"));
        assert_eq!(
            header,
            "t=1700000000,v1=ccbd250544e37ed66fe0d5361b945f417481980eff64cf002da5031904d98237"
        );
    }

    #[test]
    fn round_trips_and_rejects_any_change() {
        let body = br#"{"sku":"A","qty":1}"#;
        let h = sign(SECRET, 1000, &parts(body));
        assert_eq!(verify(&[SECRET], Some(&h), 1000, &parts(body)), Ok(()));
        assert_eq!(
            verify(&[b"old", SECRET], Some(&h), 1300, &parts(body)),
            Ok(())
        );
        assert_eq!(
            verify(&[SECRET], Some(&h), 1301, &parts(body)),
            Err(SignatureError::Expired)
        );
        assert_eq!(
            verify(&[SECRET], Some(&h), 699, &parts(body)),
            Err(SignatureError::Expired)
        );
        assert_eq!(
            verify(&[b"other"], Some(&h), 1000, &parts(body)),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(&[SECRET], None, 1000, &parts(body)),
            Err(SignatureError::Missing)
        );
        let tampered = [
            SignedParts {
                body: br#"{"sku":"A","qty":2}"#,
                ..parts(body)
            },
            SignedParts {
                user: "bob",
                ..parts(body)
            },
            SignedParts {
                path: "/v1/purchase",
                ..parts(body)
            },
            SignedParts {
                method: "PUT",
                ..parts(body)
            },
            SignedParts {
                idempotency_key: "k2",
                ..parts(body)
            },
        ];
        for p in tampered {
            assert_eq!(
                verify(&[SECRET], Some(&h), 1000, &p),
                Err(SignatureError::Mismatch),
                "{p:?}"
            );
        }
        let other_t = h.replacen("t=1000", "t=1001", 1);
        assert_eq!(
            verify(&[SECRET], Some(&other_t), 1000, &parts(body)),
            Err(SignatureError::Mismatch)
        );
    }

    #[test]
    fn header_format_is_strict() {
        let v1 = "a".repeat(64);
        assert!(SignatureHeader::parse(&format!("t=1,v1={v1}")).is_ok());
        for bad in [
            String::new(),
            format!("t=1,v1={}", "A".repeat(64)),
            format!("t=1,v1={}", "a".repeat(63)),
            format!("t=-1,v1={v1}"),
            format!("t=,v1={v1}"),
            format!("v1={v1},t=1"),
            format!("t=1, v1={v1}"),
            format!("t=1,v1={v1},x=2"),
            format!("t=9999999999999999999999,v1={v1}"),
        ] {
            assert!(SignatureHeader::parse(&bad).is_err(), "{bad}");
        }
    }
}
