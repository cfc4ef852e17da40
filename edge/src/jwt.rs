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
//!
//! Why by hand, on the `hmac`/`sha2`/`base64` already here for the request signatures: the
//! general-purpose JWT crates bring RSA and elliptic-curve code and a crypto backend that the
//! Worker would upload for nothing (its gzip budget, scripts/edge-build.sh), and decide by
//! themselves what this module must decide narrowly (which algorithms, how much leeway, which key
//! of a rotation ring by `kid`, the longest lifetime). One algorithm over one MAC is short, and
//! `jwt/tests.rs` holds it to the matrix above.

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
mod tests;
