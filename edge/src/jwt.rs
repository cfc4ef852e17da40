//! Shopper session tokens: compact JWS (RFC 7515/7519) signed with HMAC-SHA256 (`HS256`) under
//! one of the session keys (`SESSION_SECRETS`, or the single `SESSION_SECRET`).
//!
//! Verification is deliberately narrow: the header's `alg` must be exactly `HS256` (no `none`, no
//! algorithm confusion), `crit` is refused, the MAC is checked in constant time *before* the claims
//! are looked at, `exp` is required, `nbf` is honoured when present, and `sub` must be a valid
//! [`UserId`]. The [`TokenRules`] (settings) bound the rest: a token may not live longer than
//! `SESSION_MAX_LIFETIME_SECS` (`exp - iat`, or `exp - now` without `iat`, or when `iat` lies in
//! the future), and `iss` / `aud` must match `SESSION_ISSUER` / `SESSION_AUDIENCE` when those are
//! set. Dates are compared as `f64`, so absurd values (`1e300`, `-1e300`) are refused, never a
//! panic or an overflow. Every failure is a 401 `unauthenticated`; the variants of [`TokenError`]
//! exist for logs and tests only.
//!
//! Key selection (rotation): a header `kid` must name a configured session key, and only that key
//! is tried; a token without `kid` (issued before key ids were used) is tried against every
//! configured key, all of them, so timing does not tell which one matched.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde_json::{Map, Value};
use sha2::Sha256;
use shared::{KeyId, SecretRing, UserId};

type HmacSha256 = Hmac<Sha256>;

/// Longest token accepted; real session tokens are a few hundred bytes.
pub const MAX_TOKEN_LEN: usize = 4096;

/// Why a bearer token is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum TokenError {
    /// No `Authorization` header, or not the `Bearer` scheme.
    Missing,
    /// Not three base64url segments of JSON objects, or too long.
    Malformed,
    /// `alg` is not exactly `HS256`, or the header carries `crit`/a non-JWT `typ`.
    UnsupportedAlgorithm,
    /// The header's `kid` is not a string naming one of the configured session keys.
    UnknownKey,
    /// The MAC does not match (wrong key or tampered token).
    BadSignature,
    /// `exp` is absent or not a number.
    MissingExpiry,
    /// `now >= exp`.
    Expired,
    /// `now < nbf`.
    NotYetValid,
    /// `exp` lies further from `iat` (or from now) than [`TokenRules::max_lifetime_secs`].
    LifetimeTooLong,
    /// `SESSION_ISSUER` is set and `iss` is not exactly it.
    WrongIssuer,
    /// `SESSION_AUDIENCE` is set and `aud` neither is it nor, as an array, contains it.
    WrongAudience,
    /// `sub` is absent or not a valid user id.
    InvalidSubject,
}

impl TokenError {
    /// A client-safe explanation (the `detail` of the 401).
    pub const fn detail(self) -> &'static str {
        match self {
            Self::Missing => "an `Authorization: Bearer <token>` header is required",
            Self::Malformed => "the bearer token is not a well-formed JWT",
            Self::UnsupportedAlgorithm => "the bearer token must be signed with HS256",
            Self::UnknownKey => "the bearer token's `kid` names no current session key",
            Self::BadSignature => "the bearer token's signature does not verify",
            Self::MissingExpiry => "the bearer token must carry a numeric `exp`",
            Self::Expired => "the bearer token has expired",
            Self::NotYetValid => "the bearer token is not valid yet",
            Self::LifetimeTooLong => "the bearer token's lifetime exceeds the maximum",
            Self::WrongIssuer => "the bearer token's `iss` is not the expected issuer",
            Self::WrongAudience => "the bearer token's `aud` does not name this service",
            Self::InvalidSubject => "the bearer token's `sub` is not a valid user id",
        }
    }
}

/// Default of [`TokenRules::max_lifetime_secs`] (`SESSION_MAX_LIFETIME_SECS`): one day.
pub const DEFAULT_MAX_LIFETIME_SECS: u32 = 86_400;

/// What a token's claims must satisfy beyond its signature, from the settings
/// (`SESSION_MAX_LIFETIME_SECS`, `SESSION_ISSUER`, `SESSION_AUDIENCE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRules {
    /// Longest accepted lifetime: `exp - min(iat, now)`, or `exp - now` without `iat`.
    pub max_lifetime_secs: u32,
    /// When set, `iss` must be exactly this string.
    pub issuer: Option<String>,
    /// When set, `aud` must be this string, or an array with this string among its members
    /// (RFC 7519 §4.1.3).
    pub audience: Option<String>,
}

impl Default for TokenRules {
    fn default() -> Self {
        Self {
            max_lifetime_secs: DEFAULT_MAX_LIFETIME_SECS,
            issuer: None,
            audience: None,
        }
    }
}

impl TokenRules {
    /// Checks the lifetime, `iss` and `aud` of `claims` whose `exp` (finite) is already known to
    /// lie after `now`.
    fn check(&self, claims: &Map<String, Value>, exp: f64, now: f64) -> Result<(), TokenError> {
        let issued = match claims.get("iat") {
            None => now,
            Some(iat) => numeric_date(iat).ok_or(TokenError::Malformed)?.min(now),
        };
        // Both are finite: the difference is a number or +inf (for ±1e308), never NaN.
        if exp - issued > f64::from(self.max_lifetime_secs) {
            return Err(TokenError::LifetimeTooLong);
        }
        if let Some(issuer) = &self.issuer
            && claims.get("iss").and_then(Value::as_str) != Some(issuer.as_str())
        {
            return Err(TokenError::WrongIssuer);
        }
        if let Some(audience) = &self.audience {
            let names = |v: &Value| v.as_str() == Some(audience.as_str());
            let ok = match claims.get("aud") {
                Some(Value::Array(members)) => members.iter().any(names),
                Some(aud) => names(aud),
                None => false,
            };
            if !ok {
                return Err(TokenError::WrongAudience);
            }
        }
        Ok(())
    }
}

/// The claims the edge uses from a verified token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub sub: UserId,
    /// Expiry, unix seconds (floored).
    pub exp: i64,
}

/// The token of an `Authorization: Bearer <token>` header value (scheme is case-insensitive).
pub fn bearer_token(authorization: Option<&str>) -> Result<&str, TokenError> {
    let value = authorization.ok_or(TokenError::Missing)?.trim();
    let (scheme, token) = value.split_once(' ').ok_or(TokenError::Missing)?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(TokenError::Missing);
    }
    let token = token.trim_start();
    if token.is_empty() {
        Err(TokenError::Missing)
    } else {
        Ok(token)
    }
}

fn decode_object(segment: &str) -> Result<Map<String, Value>, TokenError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(segment)
        .map_err(|_| TokenError::Malformed)?;
    match serde_json::from_slice::<Value>(&bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(TokenError::Malformed),
    }
}

/// A NumericDate claim (seconds; RFC 7519 allows fractions).
fn numeric_date(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64().filter(|f| f.is_finite()),
        _ => None,
    }
}

fn new_mac(secret: &[u8]) -> HmacSha256 {
    // HMAC accepts keys of any length, so this cannot fail.
    <HmacSha256 as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC takes any key length"))
}

/// Whether `signing_input` is MACed to `signature` under the key named by `kid`, or, without a
/// `kid`, under any key of `keys` (every key is tried; each comparison is constant-time).
fn mac_matches(
    keys: &SecretRing,
    kid: Option<&Value>,
    signing_input: &[&[u8]],
    signature: &[u8],
) -> Result<(), TokenError> {
    let check = |secret: &[u8]| {
        let mut mac = new_mac(secret);
        for piece in signing_input {
            mac.update(piece);
        }
        mac.verify_slice(signature).is_ok()
    };
    match kid {
        Some(kid) => {
            let secret = kid
                .as_str()
                .and_then(KeyId::parse)
                .and_then(|kid| keys.get(&kid))
                .ok_or(TokenError::UnknownKey)?;
            check(secret).then_some(()).ok_or(TokenError::BadSignature)
        }
        None => {
            let mut any = false;
            for (_, secret) in keys.iter() {
                any |= check(secret);
            }
            any.then_some(()).ok_or(TokenError::BadSignature)
        }
    }
}

/// Verifies an HS256 token under the session `keys` and `rules` at unix time `now` and returns
/// its claims.
pub fn verify_hs256(
    token: &str,
    keys: &SecretRing,
    rules: &TokenRules,
    now: i64,
) -> Result<Claims, TokenError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(TokenError::Malformed);
    }
    let mut parts = token.split('.');
    let (Some(header_b64), Some(claims_b64), Some(sig_b64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(TokenError::Malformed);
    };

    let header = decode_object(header_b64)?;
    if header.get("alg").and_then(Value::as_str) != Some("HS256") {
        return Err(TokenError::UnsupportedAlgorithm);
    }
    let typ_ok = match header.get("typ") {
        None => true,
        Some(Value::String(t)) => t.eq_ignore_ascii_case("JWT"),
        Some(_) => false,
    };
    if !typ_ok || header.contains_key("crit") {
        return Err(TokenError::UnsupportedAlgorithm);
    }

    let signature = URL_SAFE_NO_PAD
        .decode(sig_b64)
        .map_err(|_| TokenError::Malformed)?;
    // Constant-time comparison; a wrong-length signature simply fails.
    mac_matches(
        keys,
        header.get("kid"),
        &[header_b64.as_bytes(), b".", claims_b64.as_bytes()],
        &signature,
    )?;

    let claims = decode_object(claims_b64)?;
    let exp = claims
        .get("exp")
        .and_then(numeric_date)
        .ok_or(TokenError::MissingExpiry)?;
    // Compared as f64: exact for every second up to 2^53, and fractions are honoured.
    let now_f = now as f64;
    if now_f >= exp {
        return Err(TokenError::Expired);
    }
    if let Some(nbf) = claims.get("nbf") {
        let nbf = numeric_date(nbf).ok_or(TokenError::Malformed)?;
        if now_f < nbf {
            return Err(TokenError::NotYetValid);
        }
    }
    rules.check(&claims, exp, now_f)?;
    let sub = match claims.get("sub") {
        Some(Value::String(s)) => UserId::parse(s).map_err(|_| TokenError::InvalidSubject)?,
        _ => return Err(TokenError::InvalidSubject),
    };
    // Saturating cast: out-of-range dates become i64::MIN/MAX.
    Ok(Claims {
        sub,
        exp: exp.floor() as i64,
    })
}

/// Signs `claims` (a JSON object) as an HS256 JWT without `kid`. Used by the `mint-token` example
/// and tests; the edge itself never issues tokens.
pub fn sign_hs256(claims: &Value, secret: &[u8]) -> String {
    sign_with_header(
        &serde_json::json!({"alg": "HS256", "typ": "JWT"}),
        claims,
        secret,
    )
}

/// Signs `claims` as an HS256 JWT whose header names the key: `{"alg":"HS256","typ":"JWT","kid":…}`.
pub fn sign_hs256_kid(claims: &Value, kid: &KeyId, secret: &[u8]) -> String {
    sign_with_header(
        &serde_json::json!({"alg": "HS256", "typ": "JWT", "kid": kid.as_str()}),
        claims,
        secret,
    )
}

/// Signs `claims` under an arbitrary `header` with HMAC-SHA256 (tests build hostile tokens with it).
pub fn sign_with_header(header: &Value, claims: &Value, secret: &[u8]) -> String {
    let signing_input = format!(
        "{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    );
    let mut mac = new_mac(secret);
    mac.update(signing_input.as_bytes());
    format!(
        "{signing_input}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SECRET: &[u8] = b"session-secret";
    const NOW: i64 = 1_700_000_000;

    fn token(claims: Value) -> String {
        sign_hs256(&claims, SECRET)
    }

    fn keys() -> SecretRing {
        SecretRing::single(SECRET.to_vec())
    }

    fn kid(s: &str) -> KeyId {
        KeyId::parse(s).expect("kid")
    }

    #[test]
    fn the_kid_header_selects_the_session_key() {
        let ring = SecretRing::parse("s2:new-session-key,s1:old-session-key", 1).expect("ring");
        let claims = json!({"sub": "alice", "exp": NOW + 60});
        // Each key verifies the tokens that name it.
        for (k, secret) in [("s2", "new-session-key"), ("s1", "old-session-key")] {
            let t = sign_hs256_kid(&claims, &kid(k), secret.as_bytes());
            assert_eq!(
                verify_hs256(&t, &ring, &TokenRules::default(), NOW).map(|c| c.sub.to_string()),
                Ok("alice".to_owned()),
                "{k}"
            );
        }
        // A kid selects exactly its key: another configured key's secret does not verify.
        let crossed = sign_hs256_kid(&claims, &kid("s2"), b"old-session-key");
        assert_eq!(
            verify_hs256(&crossed, &ring, &TokenRules::default(), NOW),
            Err(TokenError::BadSignature)
        );
        // An unknown, retired or non-string kid is refused, even when the MAC is right.
        let unknown = sign_hs256_kid(&claims, &kid("s0"), b"new-session-key");
        assert_eq!(
            verify_hs256(&unknown, &ring, &TokenRules::default(), NOW),
            Err(TokenError::UnknownKey)
        );
        for bad_kid in [
            json!(2),
            json!(null),
            json!(["s2"]),
            json!("s 2"),
            json!(""),
        ] {
            let t = sign_with_header(
                &json!({"alg": "HS256", "kid": bad_kid}),
                &claims,
                b"new-session-key",
            );
            assert_eq!(
                verify_hs256(&t, &ring, &TokenRules::default(), NOW),
                Err(TokenError::UnknownKey),
                "{bad_kid}"
            );
        }
        // Tokens without kid (issued before key ids): any configured key.
        for secret in ["new-session-key", "old-session-key"] {
            let t = sign_hs256(&claims, secret.as_bytes());
            assert!(
                verify_hs256(&t, &ring, &TokenRules::default(), NOW).is_ok(),
                "{secret}"
            );
        }
        let retired = sign_hs256(&claims, b"older-session-key");
        assert_eq!(
            verify_hs256(&retired, &ring, &TokenRules::default(), NOW),
            Err(TokenError::BadSignature)
        );
        // Once the old key is removed, its tokens stop working, with or without kid.
        let new_only = SecretRing::parse("s2:new-session-key", 1).expect("ring");
        let old_kid = sign_hs256_kid(&claims, &kid("s1"), b"old-session-key");
        let old_plain = sign_hs256(&claims, b"old-session-key");
        assert_eq!(
            verify_hs256(&old_kid, &new_only, &TokenRules::default(), NOW),
            Err(TokenError::UnknownKey)
        );
        assert_eq!(
            verify_hs256(&old_plain, &new_only, &TokenRules::default(), NOW),
            Err(TokenError::BadSignature)
        );
    }

    #[test]
    fn a_valid_token_yields_its_subject() {
        let t = token(json!({"sub": "alice@shop:1", "exp": NOW + 60, "iat": NOW}));
        let claims = verify_hs256(&t, &keys(), &TokenRules::default(), NOW).expect("valid");
        assert_eq!(claims.sub.as_str(), "alice@shop:1");
        assert_eq!(claims.exp, NOW + 60);
    }

    #[test]
    fn an_independently_computed_token_verifies() {
        // Produced with Python's hmac/hashlib/base64: header {"alg":"HS256","typ":"JWT"},
        // claims {"sub":"bob","exp":4102444800}, key "k".
        let t = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJib2IiLCJleHAiOjQxMDI0NDQ4MDB9.\
                 WATS_fEk6DE1_hhmXRhUpoVnIWcipSsCWZsBmj91orM";
        let k = SecretRing::single(b"k".to_vec());
        // It expires in 2100, so only without a practical lifetime bound.
        let lenient = TokenRules {
            max_lifetime_secs: u32::MAX,
            ..TokenRules::default()
        };
        assert_eq!(
            verify_hs256(t, &k, &lenient, NOW).map(|c| c.sub.to_string()),
            Ok("bob".to_owned())
        );
        assert_eq!(
            verify_hs256(t, &k, &TokenRules::default(), NOW),
            Err(TokenError::LifetimeTooLong)
        );
    }

    #[test]
    fn the_rejection_matrix() {
        let good = json!({"sub": "alice", "exp": NOW + 60});
        let none_alg = {
            let h = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
            let c = URL_SAFE_NO_PAD.encode(good.to_string());
            format!("{h}.{c}.")
        };
        let cases: Vec<(String, TokenError)> = vec![
            (none_alg, TokenError::UnsupportedAlgorithm),
            (
                sign_with_header(&json!({"alg": "HS512"}), &good, SECRET),
                TokenError::UnsupportedAlgorithm,
            ),
            (
                sign_with_header(&json!({"alg": "hs256"}), &good, SECRET),
                TokenError::UnsupportedAlgorithm,
            ),
            (
                sign_with_header(&json!({"typ": "JWT"}), &good, SECRET),
                TokenError::UnsupportedAlgorithm,
            ),
            (
                sign_with_header(&json!({"alg": "HS256", "crit": ["x"]}), &good, SECRET),
                TokenError::UnsupportedAlgorithm,
            ),
            (
                sign_with_header(&json!({"alg": "HS256", "typ": "at+jwt"}), &good, SECRET),
                TokenError::UnsupportedAlgorithm,
            ),
            (sign_hs256(&good, b"wrong-key"), TokenError::BadSignature),
            (
                token(json!({"sub": "alice", "exp": NOW})),
                TokenError::Expired,
            ),
            (
                token(json!({"sub": "alice", "exp": NOW - 1})),
                TokenError::Expired,
            ),
            (token(json!({"sub": "alice"})), TokenError::MissingExpiry),
            (
                token(json!({"sub": "alice", "exp": "tomorrow"})),
                TokenError::MissingExpiry,
            ),
            (
                token(json!({"sub": "alice", "exp": NOW + 60, "nbf": NOW + 1})),
                TokenError::NotYetValid,
            ),
            (
                token(json!({"sub": "alice", "exp": NOW + 60, "nbf": "x"})),
                TokenError::Malformed,
            ),
            (token(json!({"exp": NOW + 60})), TokenError::InvalidSubject),
            (
                token(json!({"sub": "", "exp": NOW + 60})),
                TokenError::InvalidSubject,
            ),
            (
                token(json!({"sub": "a b", "exp": NOW + 60})),
                TokenError::InvalidSubject,
            ),
            (
                token(json!({"sub": 42, "exp": NOW + 60})),
                TokenError::InvalidSubject,
            ),
            ("garbage".to_owned(), TokenError::Malformed),
            ("a.b".to_owned(), TokenError::Malformed),
            ("a.b.c.d".to_owned(), TokenError::Malformed),
            ("!!!.!!!.!!!".to_owned(), TokenError::Malformed),
            (
                format!("{}.{}", URL_SAFE_NO_PAD.encode("[]"), "e30.x"),
                TokenError::Malformed,
            ),
            ("x".repeat(MAX_TOKEN_LEN + 1), TokenError::Malformed),
        ];
        for (t, want) in cases {
            assert_eq!(
                verify_hs256(&t, &keys(), &TokenRules::default(), NOW),
                Err(want),
                "{t}"
            );
        }
    }

    #[test]
    fn tampering_with_any_segment_breaks_the_signature() {
        let t = token(json!({"sub": "alice", "exp": NOW + 60}));
        let forged_claims =
            URL_SAFE_NO_PAD.encode(json!({"sub": "mallory", "exp": NOW + 60}).to_string());
        let mut parts: Vec<&str> = t.split('.').collect();
        parts[1] = &forged_claims;
        assert_eq!(
            verify_hs256(&parts.join("."), &keys(), &TokenRules::default(), NOW),
            Err(TokenError::BadSignature)
        );
        // Padding and non-canonical base64 are malformed, not silently accepted.
        assert_eq!(
            verify_hs256(&format!("{t}="), &keys(), &TokenRules::default(), NOW),
            Err(TokenError::Malformed)
        );
        let truncated = &t[..t.len() - 2];
        assert!(verify_hs256(truncated, &keys(), &TokenRules::default(), NOW).is_err());
    }

    #[test]
    fn fractional_and_huge_dates_are_handled_without_panicking() {
        let rules = TokenRules::default();
        let t = token(json!({"sub": "alice", "exp": (NOW as f64) + 0.5}));
        assert!(verify_hs256(&t, &keys(), &rules, NOW).is_ok());
        let t = token(json!({"sub": "alice", "exp": -1e300}));
        assert_eq!(
            verify_hs256(&t, &keys(), &rules, NOW),
            Err(TokenError::Expired)
        );
        // Absurd dates are refused, never accepted and never a panic (1e400 is not even JSON
        // that parses as a number, so the claims are malformed).
        for (claims, want) in [
            (
                json!({"sub": "alice", "exp": 1e300}),
                TokenError::LifetimeTooLong,
            ),
            (
                json!({"sub": "alice", "exp": f64::MAX}),
                TokenError::LifetimeTooLong,
            ),
            (
                json!({"sub": "alice", "exp": NOW + 60, "iat": -1e300}),
                TokenError::LifetimeTooLong,
            ),
            (
                json!({"sub": "alice", "exp": f64::MAX, "iat": -f64::MAX}),
                TokenError::LifetimeTooLong,
            ),
            (
                json!({"sub": "alice", "exp": NOW + 60, "nbf": 1e300}),
                TokenError::NotYetValid,
            ),
            (
                json!({"sub": "alice", "exp": NOW + 60, "iat": "yesterday"}),
                TokenError::Malformed,
            ),
            (
                json!({"sub": "alice", "exp": u64::MAX}),
                TokenError::LifetimeTooLong,
            ),
        ] {
            let t = token(claims.clone());
            assert_eq!(
                verify_hs256(&t, &keys(), &rules, NOW),
                Err(want),
                "{claims}"
            );
        }
        let raw = |claims: &str| {
            let h = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256"}"#);
            let c = URL_SAFE_NO_PAD.encode(claims);
            let mut mac = new_mac(SECRET);
            mac.update(format!("{h}.{c}").as_bytes());
            let sig = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
            format!("{h}.{c}.{sig}")
        };
        assert_eq!(
            verify_hs256(&raw(r#"{"sub":"alice","exp":1e400}"#), &keys(), &rules, NOW),
            Err(TokenError::Malformed)
        );
    }

    #[test]
    fn the_lifetime_is_bounded() {
        let rules = TokenRules {
            max_lifetime_secs: 3_600,
            ..TokenRules::default()
        };
        let check = |claims: Value| verify_hs256(&token(claims), &keys(), &rules, NOW).map(|_| ());
        // With `iat`: exp - iat.
        assert_eq!(
            check(json!({"sub": "a", "iat": NOW, "exp": NOW + 3_600})),
            Ok(())
        );
        assert_eq!(
            check(json!({"sub": "a", "iat": NOW, "exp": NOW + 3_601})),
            Err(TokenError::LifetimeTooLong)
        );
        // Issued long ago, still within its (long) life: refused, the lifetime is too long
        // even though only a minute is left.
        assert_eq!(
            check(json!({"sub": "a", "iat": NOW - 7_200, "exp": NOW + 60})),
            Err(TokenError::LifetimeTooLong)
        );
        assert_eq!(
            check(json!({"sub": "a", "iat": NOW - 1_800, "exp": NOW + 1_800})),
            Ok(())
        );
        // Without `iat`, or with an `iat` in the future: exp - now.
        assert_eq!(check(json!({"sub": "a", "exp": NOW + 3_600})), Ok(()));
        assert_eq!(
            check(json!({"sub": "a", "exp": NOW + 3_601})),
            Err(TokenError::LifetimeTooLong)
        );
        assert_eq!(
            check(json!({"sub": "a", "iat": NOW + 10_000, "exp": NOW + 10_060})),
            Err(TokenError::LifetimeTooLong)
        );
        assert_eq!(
            check(json!({"sub": "a", "iat": NOW + 10, "exp": NOW + 70})),
            Ok(())
        );
        // The default is one day.
        let day = TokenRules::default();
        assert_eq!(day.max_lifetime_secs, 86_400);
        let t = token(json!({"sub": "a", "iat": NOW, "exp": NOW + 86_401}));
        assert_eq!(
            verify_hs256(&t, &keys(), &day, NOW),
            Err(TokenError::LifetimeTooLong)
        );
    }

    #[test]
    fn issuer_and_audience_must_match_when_configured() {
        let rules = TokenRules {
            issuer: Some("https://shop.example".into()),
            audience: Some("flashgate".into()),
            ..TokenRules::default()
        };
        let check = |extra: Value| {
            let mut claims = json!({"sub": "a", "exp": NOW + 60});
            if let (Some(c), Some(e)) = (claims.as_object_mut(), extra.as_object()) {
                c.extend(e.clone());
            }
            verify_hs256(&token(claims), &keys(), &rules, NOW).map(|_| ())
        };
        assert_eq!(
            check(json!({"iss": "https://shop.example", "aud": "flashgate"})),
            Ok(())
        );
        assert_eq!(
            check(json!({"iss": "https://shop.example", "aud": ["other", "flashgate"]})),
            Ok(())
        );
        for (extra, want) in [
            (json!({"aud": "flashgate"}), TokenError::WrongIssuer),
            (
                json!({"iss": "https://shop.example/", "aud": "flashgate"}),
                TokenError::WrongIssuer,
            ),
            (
                json!({"iss": ["https://shop.example"], "aud": "flashgate"}),
                TokenError::WrongIssuer,
            ),
            (
                json!({"iss": "https://shop.example"}),
                TokenError::WrongAudience,
            ),
            (
                json!({"iss": "https://shop.example", "aud": "Flashgate"}),
                TokenError::WrongAudience,
            ),
            (
                json!({"iss": "https://shop.example", "aud": ["other"]}),
                TokenError::WrongAudience,
            ),
            (
                json!({"iss": "https://shop.example", "aud": []}),
                TokenError::WrongAudience,
            ),
            (
                json!({"iss": "https://shop.example", "aud": [["flashgate"]]}),
                TokenError::WrongAudience,
            ),
            (
                json!({"iss": "https://shop.example", "aud": 7}),
                TokenError::WrongAudience,
            ),
        ] {
            assert_eq!(check(extra.clone()), Err(want), "{extra}");
        }
        // Unset, they are not looked at.
        let open = TokenRules::default();
        let t = token(json!({"sub": "a", "exp": NOW + 60, "iss": 1, "aud": {"x": 1}}));
        assert!(verify_hs256(&t, &keys(), &open, NOW).is_ok());
    }

    #[test]
    fn bearer_scheme_parsing() {
        assert_eq!(bearer_token(Some("Bearer abc")), Ok("abc"));
        assert_eq!(bearer_token(Some("bearer  abc")), Ok("abc"));
        for bad in [
            None,
            Some(""),
            Some("Bearer"),
            Some("Bearer "),
            Some("Basic abc"),
            Some("abc"),
        ] {
            assert_eq!(bearer_token(bad), Err(TokenError::Missing), "{bad:?}");
        }
    }
}
