//! Rotatable secrets, parsed once from configuration: [`KeyId`] (the name of a key, carried in
//! signatures as `kid=…` and in JWT headers as `"kid"`), [`SecretRing`] (keyed HMAC secrets, the
//! first one current) and [`BearerTokens`] (every bearer token currently accepted).
//!
//! Rotation without downtime means that for a while both sides hold several secrets: the signer
//! signs with the ring's current key and names it, the verifier accepts any key of its ring. The
//! configuration forms, shared by the origin and the edge:
//!
//! - a ring: `NAME_SECRETS="kid1:secret1,kid0:secret0"` (first = current), or the single-secret
//!   form `NAME_SECRET="secret"`, which is the ring `default:secret`; setting both, or neither, is
//!   an error;
//! - bearer tokens: `NAME_TOKENS="token1,token0"` or `NAME_TOKEN="token"`, same rules.
//!
//! In the list forms entries are separated by `,`, whitespace around an entry, a key id or a
//! secret is ignored, and so a secret or token cannot contain `,` or begin or end with
//! whitespace. Empty values count as unset. No error message ever contains a secret.

use std::fmt;

use hmac::{Hmac, Mac};
use secrecy::{ExposeSecret, SecretSlice};
use sha2::Sha256;
use subtle::{Choice, ConstantTimeEq};

/// The key id of a secret configured with the single-secret form (`EDGE_SHARED_SECRET`, …).
pub const DEFAULT_KEY_ID: &str = "default";

/// Longest key id.
pub const MAX_KEY_ID_LEN: usize = 32;

/// Shortest accepted secret or bearer token, on the origin and on the edge alike (a shorter HMAC
/// key or token is guessable; the edge's signing key must also be one the origin accepts).
pub const MIN_SECRET_LEN: usize = 16;

/// Why a secret configuration is refused. Never contains a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SecretsError {
    #[error("no secret is configured")]
    Missing,
    #[error("both the list form and the single-secret form are set; set exactly one")]
    Conflict,
    #[error("entry {index} is not `<key id>:<secret>`")]
    NotKeyed { index: usize },
    #[error("entry {index}: the key id must be 1..={MAX_KEY_ID_LEN} characters of [A-Za-z0-9._-]")]
    InvalidKeyId { index: usize },
    #[error("entry {index}: must be at least {min_len} characters")]
    TooShort { index: usize, min_len: usize },
    #[error("key id {0} appears twice")]
    DuplicateKeyId(KeyId),
}

/// The name of one key of a [`SecretRing`]: 1..=32 characters of `[A-Za-z0-9._-]`, so it fits
/// in a `Flashgate-Signature` header and a JWT header unescaped.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(String);

impl KeyId {
    /// Parses a key id; `None` when it is not 1..=32 characters of `[A-Za-z0-9._-]`.
    pub fn parse(raw: &str) -> Option<Self> {
        let ok = (1..=MAX_KEY_ID_LEN).contains(&raw.len())
            && raw
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
        ok.then(|| Self(raw.to_owned()))
    }

    /// The key id of the single-secret form, [`DEFAULT_KEY_ID`].
    pub fn default_id() -> Self {
        Self(DEFAULT_KEY_ID.to_owned())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The `,`-separated entries of `list`, trimmed and numbered from 1. Empty entries are kept, so
/// that the caller refuses them (a stray `,` is more likely a mistake than an intent).
fn entries(list: &str) -> impl Iterator<Item = (usize, &str)> {
    list.split(',')
        .map(str::trim)
        .enumerate()
        .map(|(i, e)| (i + 1, e))
}

/// The value of a list or single form: exactly one must be set (non-empty).
fn one_of<'a>(list: Option<&'a str>, single: Option<&'a str>) -> Result<Either<'a>, SecretsError> {
    let list = list.filter(|v| !v.is_empty());
    let single = single.filter(|v| !v.is_empty());
    match (list, single) {
        (Some(_), Some(_)) => Err(SecretsError::Conflict),
        (Some(l), None) => Ok(Either::List(l)),
        (None, Some(s)) => Ok(Either::Single(s)),
        (None, None) => Err(SecretsError::Missing),
    }
}

enum Either<'a> {
    List(&'a str),
    Single(&'a str),
}

/// HMAC secrets by key id; the first is the current one (the one to sign with). Holds at least
/// one key and no key id twice. `Debug` shows the key ids only.
#[derive(Clone)]
pub struct SecretRing {
    keys: Vec<(KeyId, SecretSlice<u8>)>,
}

impl SecretRing {
    /// A ring of `keys`, the first current. Refuses an empty list and repeated key ids; secret
    /// lengths are the caller's policy ([`SecretRing::parse`] enforces a minimum).
    pub fn new(keys: Vec<(KeyId, Vec<u8>)>) -> Result<Self, SecretsError> {
        if keys.is_empty() {
            return Err(SecretsError::Missing);
        }
        for (i, (kid, _)) in keys.iter().enumerate() {
            if keys[..i].iter().any(|(k, _)| k == kid) {
                return Err(SecretsError::DuplicateKeyId(kid.clone()));
            }
        }
        Ok(Self {
            keys: keys
                .into_iter()
                .map(|(kid, secret)| (kid, SecretSlice::from(secret)))
                .collect(),
        })
    }

    /// A ring of one secret under [`DEFAULT_KEY_ID`].
    pub fn single(secret: impl Into<Vec<u8>>) -> Self {
        Self {
            keys: vec![(KeyId::default_id(), SecretSlice::from(secret.into()))],
        }
    }

    /// Parses the list form `kid1:secret1,kid0:secret0`; each secret must have at least
    /// `min_len` bytes (and at least one).
    pub fn parse(list: &str, min_len: usize) -> Result<Self, SecretsError> {
        let min_len = min_len.max(1);
        let mut keys = Vec::new();
        for (index, entry) in entries(list) {
            let (kid, secret) = entry
                .split_once(':')
                .ok_or(SecretsError::NotKeyed { index })?;
            let kid = KeyId::parse(kid.trim()).ok_or(SecretsError::InvalidKeyId { index })?;
            let secret = secret.trim();
            if secret.len() < min_len {
                return Err(SecretsError::TooShort { index, min_len });
            }
            keys.push((kid, secret.as_bytes().to_vec()));
        }
        Self::new(keys)
    }

    /// The ring configured by a list-form value (`…_SECRETS`) or a single-form value
    /// (`…_SECRET`, kept verbatim under [`DEFAULT_KEY_ID`]); exactly one must be set.
    pub fn from_config(
        list: Option<&str>,
        single: Option<&str>,
        min_len: usize,
    ) -> Result<Self, SecretsError> {
        match one_of(list, single)? {
            Either::List(l) => Self::parse(l, min_len),
            Either::Single(s) if s.len() < min_len.max(1) => Err(SecretsError::TooShort {
                index: 1,
                min_len: min_len.max(1),
            }),
            Either::Single(s) => Ok(Self::single(s.as_bytes())),
        }
    }

    /// The current key: the one to sign with.
    pub fn current(&self) -> (&KeyId, &[u8]) {
        let (kid, secret) = &self.keys[0];
        (kid, secret.expose_secret())
    }

    /// The secret of `kid`, if the ring has it.
    pub fn get(&self, kid: &KeyId) -> Option<&[u8]> {
        self.keys
            .iter()
            .find(|(k, _)| k == kid)
            .map(|(_, s)| s.expose_secret())
    }

    /// Every key, current first.
    pub fn iter(&self) -> impl Iterator<Item = (&KeyId, &[u8])> {
        self.keys.iter().map(|(k, s)| (k, s.expose_secret()))
    }

    /// Every key id, current first.
    pub fn kids(&self) -> impl Iterator<Item = &KeyId> {
        self.keys.iter().map(|(k, _)| k)
    }
}

impl fmt::Debug for SecretRing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SecretRing")
            .field("kids", &self.kids().map(KeyId::as_str).collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The bearer tokens currently accepted (several during a rotation). At least one. `Debug` shows
/// only how many there are.
#[derive(Clone)]
pub struct BearerTokens {
    tokens: Vec<SecretSlice<u8>>,
}

impl BearerTokens {
    /// Parses the list form `token1,token0`; each token must have at least `min_len` bytes.
    pub fn parse(list: &str, min_len: usize) -> Result<Self, SecretsError> {
        let min_len = min_len.max(1);
        let mut tokens = Vec::new();
        for (index, token) in entries(list) {
            if token.len() < min_len {
                return Err(SecretsError::TooShort { index, min_len });
            }
            tokens.push(SecretSlice::from(token.as_bytes().to_vec()));
        }
        Ok(Self { tokens })
    }

    /// The tokens configured by a list-form value (`…_TOKENS`) or a single-form value
    /// (`…_TOKEN`, kept verbatim); exactly one must be set.
    pub fn from_config(
        list: Option<&str>,
        single: Option<&str>,
        min_len: usize,
    ) -> Result<Self, SecretsError> {
        match one_of(list, single)? {
            Either::List(l) => Self::parse(l, min_len),
            Either::Single(s) if s.len() < min_len.max(1) => Err(SecretsError::TooShort {
                index: 1,
                min_len: min_len.max(1),
            }),
            Either::Single(s) => Ok(Self {
                tokens: vec![SecretSlice::from(s.as_bytes().to_vec())],
            }),
        }
    }

    /// Whether `presented` is one of the tokens. Constant time in the contents and lengths of
    /// the tokens: both sides are hashed to equal length, and every token is compared.
    pub fn accepts(&self, presented: &str) -> bool {
        let given = digest(presented.as_bytes());
        let mut any = Choice::from(0);
        for token in &self.tokens {
            any |= digest(token.expose_secret()).ct_eq(&given);
        }
        bool::from(any)
    }

    /// How many tokens are accepted.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Never true (a configuration has at least one token); for clippy's `len_without_is_empty`.
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

impl fmt::Debug for BearerTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BearerTokens({} accepted, ***)", self.tokens.len())
    }
}

/// A fixed-length keyed digest, so comparisons of different-length values take equal time.
fn digest(value: &[u8]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(b"flashgate-bearer-compare")
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
    mac.update(value);
    mac.finalize().into_bytes().into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kid(s: &str) -> KeyId {
        KeyId::parse(s).expect("valid kid")
    }

    #[test]
    fn key_ids_have_a_small_alphabet() {
        for ok in ["k1", "2026-11.rot_a", "default", &"a".repeat(32)] {
            assert_eq!(KeyId::parse(ok).map(|k| k.to_string()), Some(ok.to_owned()));
        }
        for bad in ["", "a b", "k=1", "k,1", "k:1", "é", &"a".repeat(33)] {
            assert_eq!(KeyId::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_ring_parses_in_order_with_the_first_current() {
        let ring =
            SecretRing::parse(" k2:new-secret , k1: old:secret:with:colons ", 3).expect("valid");
        assert_eq!(ring.current(), (&kid("k2"), &b"new-secret"[..]));
        assert_eq!(ring.get(&kid("k1")), Some(&b"old:secret:with:colons"[..]));
        assert_eq!(ring.get(&kid("k0")), None);
        assert_eq!(
            ring.kids().map(KeyId::as_str).collect::<Vec<_>>(),
            ["k2", "k1"]
        );
    }

    #[test]
    fn bad_rings_are_refused_without_echoing_secrets() {
        let cases = [
            ("k1:long-enough,", SecretsError::NotKeyed { index: 2 }),
            ("just-a-secret", SecretsError::NotKeyed { index: 1 }),
            ("k 1:long-enough", SecretsError::InvalidKeyId { index: 1 }),
            (":long-enough", SecretsError::InvalidKeyId { index: 1 }),
            (
                "k1:long-enough,k2:short",
                SecretsError::TooShort {
                    index: 2,
                    min_len: 8,
                },
            ),
            (
                "k1:long-enough,k1:other-long-one",
                SecretsError::DuplicateKeyId(kid("k1")),
            ),
        ];
        for (raw, want) in cases {
            let err = SecretRing::parse(raw, 8).expect_err(raw);
            assert_eq!(err, want, "{raw}");
            for secret in ["long-enough", "short", "other-long-one", "just-a-secret"] {
                assert!(!err.to_string().contains(secret), "{err}");
            }
        }
    }

    #[test]
    fn list_and_single_forms_are_exclusive() {
        let ring = SecretRing::from_config(None, Some("single:secret, kept verbatim "), 8)
            .expect("single form");
        assert_eq!(
            ring.current(),
            (&KeyId::default_id(), &b"single:secret, kept verbatim "[..])
        );
        let ring = SecretRing::from_config(Some("a:0123456789"), Some(""), 8).expect("list form");
        assert_eq!(ring.current().0.as_str(), "a");
        assert_eq!(
            SecretRing::from_config(Some("a:0123456789"), Some("0123456789"), 8).err(),
            Some(SecretsError::Conflict)
        );
        assert_eq!(
            SecretRing::from_config(None, Some(""), 8).err(),
            Some(SecretsError::Missing)
        );
        assert_eq!(
            SecretRing::from_config(None, Some("short"), 8).err(),
            Some(SecretsError::TooShort {
                index: 1,
                min_len: 8
            })
        );
        assert!(SecretRing::new(vec![]).is_err());
    }

    #[test]
    fn debug_never_shows_a_secret() {
        let ring = SecretRing::parse("k2:top-secret-value", 1).expect("valid");
        let shown = format!("{ring:?}");
        assert!(
            shown.contains("k2") && !shown.contains("top-secret"),
            "{shown}"
        );
        let tokens = BearerTokens::parse("top-secret-token", 1).expect("valid");
        assert_eq!(format!("{tokens:?}"), "BearerTokens(1 accepted, ***)");
    }

    #[test]
    fn bearer_tokens_accept_any_listed_token_exactly() {
        let tokens = BearerTokens::parse("new-token-0123, old-token-0123", 8).expect("valid");
        assert_eq!(tokens.len(), 2);
        assert!(tokens.accepts("new-token-0123"));
        assert!(tokens.accepts("old-token-0123"));
        for bad in [
            "",
            "new-token-012",
            "new-token-01234",
            " new-token-0123",
            "new-token-0123,old-token-0123",
        ] {
            assert!(!tokens.accepts(bad), "{bad:?}");
        }
        let single = BearerTokens::from_config(None, Some("tok,with,commas"), 8).expect("single");
        assert!(single.accepts("tok,with,commas") && !single.accepts("tok"));
        assert_eq!(
            BearerTokens::from_config(Some("a-token-0123"), Some("b-token-0123"), 8).err(),
            Some(SecretsError::Conflict)
        );
        assert_eq!(
            BearerTokens::from_config(Some(""), None, 8).err(),
            Some(SecretsError::Missing)
        );
        assert_eq!(
            BearerTokens::parse("long-enough-token,", 8).err(),
            Some(SecretsError::TooShort {
                index: 2,
                min_len: 8
            })
        );
    }
}
