//! Who may call what: the admin bearer tokens and the edge's request signature. Several secrets
//! can be accepted at once so they rotate without downtime (see docs/security.md, "Secret rotation");
//! secrets are compared in constant time and never logged.

use axum::http::{HeaderMap, header};
use shared::signing::{SignedParts, Verified, Verifier};
use shared::{BearerTokens, ErrorCode, SecretRing, UserId, headers};

use crate::problem::ApiError;

/// The credentials the origin accepts, from the settings.
#[derive(Debug)]
pub struct Credentials {
    /// Keys of the edge's signatures (`EDGE_SHARED_SECRETS` / `EDGE_SHARED_SECRET`).
    pub edge_secrets: SecretRing,
    /// `ACCEPT_SIGNATURE_V1`: whether v1 signatures are still accepted.
    pub accept_signature_v1: bool,
    /// Admin bearer tokens (`ADMIN_TOKENS` / `ADMIN_TOKEN`).
    pub admin_tokens: BearerTokens,
}

/// Checks `Authorization: Bearer <one of the admin tokens>`; 401 `unauthorized` otherwise.
pub fn require_admin(headers: &HeaderMap, tokens: &BearerTokens) -> Result<(), ApiError> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    // Constant time over every token, whatever their lengths.
    if presented.is_some_and(|p| tokens.accepts(p)) {
        Ok(())
    } else {
        Err(ApiError::new(
            ErrorCode::Unauthorized,
            "a valid admin bearer token is required",
        ))
    }
}

/// A purchase request the edge signed: who it is for, and which scheme and key signed it.
#[derive(Debug)]
pub struct EdgeRequest {
    pub user: UserId,
    pub signature: Verified,
    /// The `Idempotency-Key` header as parsed once for the signature (`None` when absent): the
    /// route refuses a missing or malformed one after the signature, without parsing it again.
    pub idempotency_key: Option<Result<shared::IdempotencyKey, shared::DomainError>>,
}

/// Verifies `Flashgate-Signature` over the request (v2 with the key its `kid` names, or v1
/// against every key while v1 is accepted) and returns the signed `Flashgate-User`. Any failure
/// is 401 `bad_signature`.
pub fn verify_edge(
    headers: &HeaderMap,
    credentials: &Credentials,
    method: &str,
    path: &str,
    body: &[u8],
    now_unix: i64,
) -> Result<EdgeRequest, ApiError> {
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
    // Header values that are not visible ASCII (`to_str` fails) never make a valid key, so this
    // one parse is the route's too.
    let idempotency_key = raw_key.map(shared::IdempotencyKey::parse);
    let key = match (&idempotency_key, raw_key) {
        (Some(Ok(k)), _) => k.as_str(),
        (_, Some(raw)) => raw,
        (_, None) => "",
    };
    let header = headers
        .get(headers::SIGNATURE)
        .map(|v| v.to_str().unwrap_or(""));
    let parts = SignedParts {
        method,
        path,
        user: user.as_str(),
        idempotency_key: key,
        body,
    };
    let verifier = Verifier {
        ring: &credentials.edge_secrets,
        accept_v1: credentials.accept_signature_v1,
    };
    let signature = verifier.verify(header, now_unix, &parts).map_err(|e| {
        tracing::info!(reason = %e, "refused edge signature");
        bad(&e.to_string())
    })?;
    Ok(EdgeRequest {
        user,
        signature,
        idempotency_key,
    })
}
