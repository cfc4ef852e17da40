//! Who may call what: the admin bearer token and the edge's request signature. Secrets are
//! compared in constant time and never logged.

use axum::http::{HeaderMap, header};
use secrecy::{ExposeSecret, SecretString};
use shared::signing::{self, SignedParts};
use shared::{ErrorCode, UserId, headers};
use subtle::ConstantTimeEq;

use crate::problem::ApiError;

/// Checks `Authorization: Bearer <ADMIN_TOKEN>`; 401 `unauthorized` otherwise.
pub fn require_admin(headers: &HeaderMap, token: &SecretString) -> Result<(), ApiError> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let expected = token.expose_secret().as_bytes();
    // `ct_eq` on slices of different length returns false without looking at the contents.
    if bool::from(presented.as_bytes().ct_eq(expected)) {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::Unauthorized,
            "a valid admin bearer token is required",
        ))
    }
}

/// Verifies `Flashgate-Signature` over the request and returns the signed `Flashgate-User`.
/// Any failure is 401 `bad_signature`.
pub fn verify_edge(
    headers: &HeaderMap,
    secret: &SecretString,
    method: &str,
    path: &str,
    body: &[u8],
    now_unix: i64,
) -> Result<UserId, ApiError> {
    let bad = |why: &str| ApiError::new(ErrorCode::BadSignature, why.to_owned());
    let user_raw = headers
        .get(headers::USER)
        .ok_or_else(|| bad("Flashgate-User is missing"))?;
    let user = user_raw
        .to_str()
        .ok()
        .and_then(|u| UserId::parse(u).ok())
        .ok_or_else(|| bad("Flashgate-User is malformed"))?;
    // The signature covers the decoded key; a malformed key (refused right after) signs as sent.
    let raw_key = headers
        .get(headers::IDEMPOTENCY_KEY)
        .map(|v| v.to_str().unwrap_or(""));
    let key = match raw_key {
        None => String::new(),
        Some(raw) => shared::IdempotencyKey::parse(raw)
            .map_or_else(|_| raw.to_owned(), |k| k.as_str().to_owned()),
    };
    let header = headers
        .get(headers::SIGNATURE)
        .map(|v| v.to_str().unwrap_or(""));
    let parts = SignedParts {
        method,
        path,
        user: user.as_str(),
        idempotency_key: &key,
        body,
    };
    signing::verify(
        &[secret.expose_secret().as_bytes()],
        header,
        now_unix,
        &parts,
    )
    .map_err(|e| {
        tracing::info!(reason = %e, "refused edge signature");
        bad(&e.to_string())
    })?;
    Ok(user)
}
