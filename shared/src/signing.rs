//! Request signing between the edge and the origin: two schemes, both HMAC-SHA256.
//!
//! **v1** (the contract's original scheme, kept for old edges):
//! `Flashgate-Signature: t=<unix seconds>,v1=<64 lowercase hex>` where `v1` is
//! `HMAC-SHA256(secret, "{t}.{METHOD}.{path}.{user}.{key}.{sha256_hex(body)}")`: `path` without
//! query string, `user` the `Flashgate-User` value, `key` the *decoded* Idempotency-Key (empty when
//! absent), the body hash over the raw bytes. Its fields are joined by `.`, which user ids and
//! keys may contain, so the user/key boundary is ambiguous (`a` + `b.c` signs like `a.b` + `c`);
//! and it names no key, so the verifier tries every secret it holds.
//!
//! **v2** (what the edge sends): `Flashgate-Signature: t=<unix seconds>,kid=<key id>,v2=<64
//! lowercase hex>` where `v2` is `HMAC-SHA256(secret of kid, S)` and `S` is the concatenation of
//! the netstrings (`<decimal byte length>:<bytes>,`) of, in order: the tag
//! `flashgate-signature-v2`, `t` (decimal, as in the header), `kid`, `METHOD`, `path`, `user`,
//! `key`, `sha256_hex(body)` — see [`canonical_v2`]. Every field carries its length, so no two
//! different requests share a signed string; the key id is signed too.
//!
//! Both: the verifier accepts a signature when `|now - t| <= 300 s`; MACs are compared in
//! constant time. See docs/signing.md for test vectors and the v1 → v2 migration.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use crate::secrets::{KeyId, SecretRing};

type HmacSha256 = Hmac<Sha256>;

/// Largest accepted distance between the signer's and the verifier's clocks, in seconds.
pub const MAX_SKEW_SECS: i64 = 300;

/// The tag that opens every v2 signed string (and keeps it apart from any v1 string, which opens
/// with a digit).
pub const V2_TAG: &str = "flashgate-signature-v2";

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
    #[error("signature names a key id this server does not hold")]
    UnknownKey,
    #[error("v1 signatures are no longer accepted; sign with v2")]
    V1NotAccepted,
}

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

fn new_mac(secret: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length, so this cannot fail.
    <HmacSha256 as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"))
}

/// The v1 signed string: `{t}.{METHOD}.{path}.{user}.{key}.{sha256_hex(body)}`.
pub fn canonical_v1(t: i64, parts: &SignedParts<'_>) -> Vec<u8> {
    [
        t.to_string().as_str(),
        parts.method,
        parts.path,
        parts.user,
        parts.idempotency_key,
        &sha256_hex(parts.body),
    ]
    .join(".")
    .into_bytes()
}

/// The v2 signed string: the netstrings of [`V2_TAG`], `t`, `kid`, `METHOD`, `path`, `user`,
/// `key` and `sha256_hex(body)`, in that order. A netstring is `<decimal byte length>:<bytes>,`
/// (`5:alice,`; the empty string is `0:,`).
pub fn canonical_v2(t: i64, kid: &KeyId, parts: &SignedParts<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(192);
    for field in [
        V2_TAG.as_bytes(),
        t.to_string().as_bytes(),
        kid.as_str().as_bytes(),
        parts.method.as_bytes(),
        parts.path.as_bytes(),
        parts.user.as_bytes(),
        parts.idempotency_key.as_bytes(),
        sha256_hex(parts.body).as_bytes(),
    ] {
        out.extend_from_slice(field.len().to_string().as_bytes());
        out.push(b':');
        out.extend_from_slice(field);
        out.push(b',');
    }
    out
}

fn mac_of(secret: &[u8], signed: &[u8]) -> HmacSha256 {
    let mut mac = new_mac(secret);
    mac.update(signed);
    mac
}

/// The v1 `Flashgate-Signature` value for `parts`, signed at unix time `t`.
pub fn sign_v1(secret: &[u8], t: i64, parts: &SignedParts<'_>) -> String {
    let mac = mac_of(secret, &canonical_v1(t, parts))
        .finalize()
        .into_bytes();
    format!("t={t},v1={}", hex::encode(mac))
}

/// The v2 `Flashgate-Signature` value for `parts`, signed at unix time `t` with `kid`'s `secret`.
pub fn sign_v2(kid: &KeyId, secret: &[u8], t: i64, parts: &SignedParts<'_>) -> String {
    let mac = mac_of(secret, &canonical_v2(t, kid, parts))
        .finalize()
        .into_bytes();
    format!("t={t},kid={kid},v2={}", hex::encode(mac))
}

/// What the edge sends: a v2 signature with the ring's current key.
pub fn sign(ring: &SecretRing, t: i64, parts: &SignedParts<'_>) -> String {
    let (kid, secret) = ring.current();
    sign_v2(kid, secret, t, parts)
}

/// The signature scheme of a header, and for v2 the key it names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scheme {
    V1,
    V2(KeyId),
}

/// A parsed `Flashgate-Signature` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignatureHeader {
    pub t: i64,
    pub scheme: Scheme,
    pub mac: [u8; 32],
}

fn parse_t(part: &str) -> Result<i64, SignatureError> {
    let digits = part.strip_prefix("t=").ok_or(SignatureError::Malformed)?;
    if digits.is_empty() || digits.len() > 18 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SignatureError::Malformed);
    }
    digits.parse().map_err(|_| SignatureError::Malformed)
}

fn parse_mac(part: &str, prefix: &str) -> Result<[u8; 32], SignatureError> {
    let hex_str = part.strip_prefix(prefix).ok_or(SignatureError::Malformed)?;
    if hex_str.len() != 64
        || !hex_str
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    {
        return Err(SignatureError::Malformed);
    }
    let mut mac = [0u8; 32];
    hex::decode_to_slice(hex_str, &mut mac).map_err(|_| SignatureError::Malformed)?;
    Ok(mac)
}

impl SignatureHeader {
    /// Parses exactly `t=<digits>,v1=<64 lowercase hex>` or
    /// `t=<digits>,kid=<key id>,v2=<64 lowercase hex>` (`t` at most 18 digits).
    pub fn parse(value: &str) -> Result<Self, SignatureError> {
        let parts: Vec<&str> = value.splitn(4, ',').collect();
        match parts[..] {
            [t, v1] => Ok(Self {
                t: parse_t(t)?,
                scheme: Scheme::V1,
                mac: parse_mac(v1, "v1=")?,
            }),
            [t, kid, v2] => {
                let kid = kid
                    .strip_prefix("kid=")
                    .and_then(KeyId::parse)
                    .ok_or(SignatureError::Malformed)?;
                Ok(Self {
                    t: parse_t(t)?,
                    scheme: Scheme::V2(kid),
                    mac: parse_mac(v2, "v2=")?,
                })
            }
            _ => Err(SignatureError::Malformed),
        }
    }
}

/// The scheme of a verified signature (for logs and metrics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::V1 => "v1",
            Self::V2 => "v2",
        }
    }
}

/// A signature that verified: its scheme and the key that made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    pub version: Version,
    pub kid: KeyId,
}

/// The origin's side: which keys it holds and whether it still takes v1 signatures.
#[derive(Debug, Clone, Copy)]
pub struct Verifier<'a> {
    /// Every key currently accepted (current and previous ones during a rotation).
    pub ring: &'a SecretRing,
    /// Whether v1 headers are accepted (verified against every key of the ring).
    pub accept_v1: bool,
}

impl Verifier<'_> {
    /// Verifies `header` (the raw header value, `None` when absent) for `parts` at unix time
    /// `now`. v2: the key named by `kid`, which must be in the ring. v1: every key of the ring,
    /// all of them tried so that timing does not tell which one matched. MACs are compared in
    /// constant time.
    pub fn verify(
        &self,
        header: Option<&str>,
        now: i64,
        parts: &SignedParts<'_>,
    ) -> Result<Verified, SignatureError> {
        let header = SignatureHeader::parse(header.ok_or(SignatureError::Missing)?)?;
        if header.scheme == Scheme::V1 && !self.accept_v1 {
            return Err(SignatureError::V1NotAccepted);
        }
        if now.abs_diff(header.t) > MAX_SKEW_SECS.unsigned_abs() {
            return Err(SignatureError::Expired);
        }
        match header.scheme {
            Scheme::V2(kid) => {
                let secret = self.ring.get(&kid).ok_or(SignatureError::UnknownKey)?;
                mac_of(secret, &canonical_v2(header.t, &kid, parts))
                    .verify_slice(&header.mac)
                    .map_err(|_| SignatureError::Mismatch)?;
                Ok(Verified {
                    version: Version::V2,
                    kid,
                })
            }
            Scheme::V1 => {
                let signed = canonical_v1(header.t, parts);
                let mut matched = None;
                for (kid, secret) in self.ring.iter() {
                    // `verify_slice` compares in constant time; every key is tried.
                    let ok = mac_of(secret, &signed).verify_slice(&header.mac).is_ok();
                    if ok && matched.is_none() {
                        matched = Some(kid);
                    }
                }
                matched
                    .map(|kid| Verified {
                        version: Version::V1,
                        kid: kid.clone(),
                    })
                    .ok_or(SignatureError::Mismatch)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! Unit tests of the signature schemes: v1 and v2 match an independently computed HMAC, round
    //! trip and refuse any change, the header format is strict, v1 is tried against every key.

    use super::*;

    const SECRET: &[u8] = b"edge-secret";

    fn kid(s: &str) -> KeyId {
        KeyId::parse(s).expect("kid")
    }

    fn ring(keys: &[(&str, &[u8])]) -> SecretRing {
        SecretRing::new(keys.iter().map(|(k, s)| (kid(k), s.to_vec())).collect()).expect("ring")
    }

    fn verifier(ring: &SecretRing) -> Verifier<'_> {
        Verifier {
            ring,
            accept_v1: true,
        }
    }

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
    fn v1_matches_an_independently_computed_hmac() {
        // Expected value computed with: printf '%s' "1700000000.POST./v1/purchases.alice.k1.$(printf '%s' '{}' | sha256sum | cut -d' ' -f1)" | openssl dgst -sha256 -hmac edge-secret
        let header = sign_v1(SECRET, 1_700_000_000, &parts(b"{}"));
        assert_eq!(
            header,
            "t=1700000000,v1=ccbd250544e37ed66fe0d5361b945f417481980eff64cf002da5031904d98237"
        );
    }

    #[test]
    fn v2_matches_an_independently_computed_hmac() {
        // B=$(printf '%s' '{}' | sha256sum | cut -d' ' -f1)
        // printf '%s' "22:flashgate-signature-v2,10:1700000000,2:k1,4:POST,13:/v1/purchases,5:alice,2:k1,64:$B," \
        //   | openssl dgst -sha256 -hmac edge-secret
        let body_hash = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";
        assert_eq!(
            String::from_utf8(canonical_v2(1_700_000_000, &kid("k1"), &parts(b"{}"))).ok(),
            Some(format!(
                "22:flashgate-signature-v2,10:1700000000,2:k1,4:POST,13:/v1/purchases,5:alice,2:k1,64:{body_hash},"
            ))
        );
        let header = sign_v2(&kid("k1"), SECRET, 1_700_000_000, &parts(b"{}"));
        assert_eq!(
            header,
            "t=1700000000,kid=k1,v2=14ac46bdb6f43b9a9f8a71d8525279b8f6b6ead1b7182a8c991799df745d6487"
        );
        // The edge's `sign` is v2 with the ring's current key.
        let r = ring(&[("k1", SECRET), ("k0", b"old")]);
        assert_eq!(sign(&r, 1_700_000_000, &parts(b"{}")), header);
    }

    #[test]
    fn v2_round_trips_and_rejects_any_change() {
        let body = br#"{"sku":"A","qty":1}"#;
        let r = ring(&[("k2", SECRET), ("k1", b"old")]);
        let h = sign(&r, 1000, &parts(body));
        let ok = Ok(Verified {
            version: Version::V2,
            kid: kid("k2"),
        });
        assert_eq!(verifier(&r).verify(Some(&h), 1000, &parts(body)), ok);
        assert_eq!(verifier(&r).verify(Some(&h), 1300, &parts(body)), ok);
        assert_eq!(
            verifier(&r).verify(Some(&h), 1301, &parts(body)),
            Err(SignatureError::Expired)
        );
        assert_eq!(
            verifier(&r).verify(Some(&h), 699, &parts(body)),
            Err(SignatureError::Expired)
        );
        // The previous key still verifies what it signed.
        let old = sign_v2(&kid("k1"), b"old", 1000, &parts(body));
        assert_eq!(
            verifier(&r).verify(Some(&old), 1000, &parts(body)),
            Ok(Verified {
                version: Version::V2,
                kid: kid("k1"),
            })
        );
        // A removed key is unknown; a key id with the wrong secret, or another key's id, fails.
        let only_new = ring(&[("k2", SECRET)]);
        assert_eq!(
            verifier(&only_new).verify(Some(&old), 1000, &parts(body)),
            Err(SignatureError::UnknownKey)
        );
        let wrong_secret = sign_v2(&kid("k2"), b"old", 1000, &parts(body));
        assert_eq!(
            verifier(&r).verify(Some(&wrong_secret), 1000, &parts(body)),
            Err(SignatureError::Mismatch)
        );
        let relabelled = h.replacen("kid=k2", "kid=k1", 1);
        assert_eq!(
            verifier(&r).verify(Some(&relabelled), 1000, &parts(body)),
            Err(SignatureError::Mismatch)
        );
        // The kid is signed: the same secret under another id does not verify either.
        let twins = ring(&[("k2", SECRET), ("k9", SECRET)]);
        assert_eq!(
            verifier(&twins).verify(Some(&h.replacen("kid=k2", "kid=k9", 1)), 1000, &parts(body)),
            Err(SignatureError::Mismatch)
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
                verifier(&r).verify(Some(&h), 1000, &p),
                Err(SignatureError::Mismatch),
                "{p:?}"
            );
        }
        let other_t = h.replacen("t=1000", "t=1001", 1);
        assert_eq!(
            verifier(&r).verify(Some(&other_t), 1000, &parts(body)),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verifier(&r).verify(None, 1000, &parts(body)),
            Err(SignatureError::Missing)
        );
    }

    #[test]
    fn v1_is_verified_against_every_key_unless_turned_off() {
        let body = br#"{"sku":"A","qty":1}"#;
        let r = ring(&[("k2", b"new"), ("k1", SECRET)]);
        let h = sign_v1(SECRET, 1000, &parts(body));
        assert_eq!(
            verifier(&r).verify(Some(&h), 1000, &parts(body)),
            Ok(Verified {
                version: Version::V1,
                kid: kid("k1"),
            })
        );
        assert_eq!(
            verifier(&ring(&[("k2", b"new")])).verify(Some(&h), 1000, &parts(body)),
            Err(SignatureError::Mismatch)
        );
        let strict = Verifier {
            ring: &r,
            accept_v1: false,
        };
        assert_eq!(
            strict.verify(Some(&h), 1000, &parts(body)),
            Err(SignatureError::V1NotAccepted)
        );
        let v2 = sign(&r, 1000, &parts(body));
        assert!(strict.verify(Some(&v2), 1000, &parts(body)).is_ok());
    }

    #[test]
    fn header_format_is_strict() {
        let mac = "a".repeat(64);
        assert_eq!(
            SignatureHeader::parse(&format!("t=1,v1={mac}")).map(|h| h.scheme),
            Ok(Scheme::V1)
        );
        assert_eq!(
            SignatureHeader::parse(&format!("t=1,kid=k-1.a_b,v2={mac}")).map(|h| h.scheme),
            Ok(Scheme::V2(kid("k-1.a_b")))
        );
        for bad in [
            String::new(),
            format!("t=1,v1={}", "A".repeat(64)),
            format!("t=1,v1={}", "a".repeat(63)),
            format!("t=-1,v1={mac}"),
            format!("t=,v1={mac}"),
            format!("v1={mac},t=1"),
            format!("t=1, v1={mac}"),
            format!("t=1,v1={mac},x=2"),
            format!("t=9999999999999999999999,v1={mac}"),
            format!("t=1,kid=k1,v1={mac}"),
            format!("t=1,v2={mac}"),
            format!("t=1,kid=,v2={mac}"),
            format!("t=1,kid=a b,v2={mac}"),
            format!("t=1,kid={},v2={mac}", "k".repeat(33)),
            format!("t=1,v2={mac},kid=k1"),
            format!("kid=k1,t=1,v2={mac}"),
            format!("t=1,kid=k1,v2={mac},"),
            format!("t=1,kid=k1,kid=k1,v2={mac}"),
        ] {
            assert!(SignatureHeader::parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn v1_is_ambiguous_and_v2_is_not() {
        // The reason v2 exists: v1 joins with `.`, which user ids and keys may contain.
        let a = SignedParts {
            user: "a",
            idempotency_key: "b.c",
            ..parts(b"{}")
        };
        let b = SignedParts {
            user: "a.b",
            idempotency_key: "c",
            ..parts(b"{}")
        };
        assert_eq!(canonical_v1(1, &a), canonical_v1(1, &b));
        assert_ne!(
            canonical_v2(1, &kid("k"), &a),
            canonical_v2(1, &kid("k"), &b)
        );
    }
}
