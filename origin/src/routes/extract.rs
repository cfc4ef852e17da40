//! Who may call what, and what a handler's signature says was checked: the extractors of the
//! origin's routes. axum runs them before the handler, in the order of its arguments — the
//! request's head first ([`AdminToken`]), then the one extractor that reads the body — so the
//! contract's order of checks (docs/api.md) is the order of the arguments, and each check refuses
//! with its problem+json:
//!
//! - [`Arrived`]: when the request's head arrived (what a purchase's duration counts from).
//! - [`AdminToken`]: `Authorization: Bearer <one of ADMIN_TOKENS>`, before any byte of the body
//!   is read (401 `unauthorized`).
//! - [`EdgeSigned<T>`]: a request the edge signed — the body under its cap (413
//!   `payload_too_large`, 408 `request_timeout`), the signed `Flashgate-User` and the signature
//!   over the request (401 `bad_signature`: v2 with the key its `kid` names, or v1 against every
//!   key while v1 is accepted), then `T` from what was signed ([`Signed`]): a purchase's key (400
//!   `missing_idempotency_key` / `invalid_request`) and body (400 `invalid_request`), or the
//!   order id of a shopper's order route.
//! - [`Checked<P, T>`]: the body under its cap, then the path's parameter `P` ([`OrderId`], a
//!   `Sku`), then the body as `T` — what the shop's routes read after their [`AdminToken`].
//! - [`OrderCaller`]: an order route open to both: the shop (an admin token, when the request
//!   carries `Authorization`) or a shopper through the edge's signature; then the order id.
//!
//! Several secrets can be accepted at once so they rotate without downtime (docs/security.md,
//! "Secret rotation"); they are compared in constant time and never logged.

use std::convert::Infallible;
use std::str::FromStr;
use std::time::Instant;

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{Method, header};
use shared::signing::{SignedParts, Verifier};
use shared::{
    DomainError, ErrorCode, IdempotencyKey, PurchaseRequest, RefundRequest, SkuPut, UserId, headers,
};
use uuid::Uuid;

use super::AppState;
use crate::body;
use crate::orders::Requester;
use crate::problem::ApiError;

/// When the request arrived: taken with its head, before the body is read.
#[derive(Debug)]
pub(crate) struct Arrived(pub(crate) Instant);

impl FromRequestParts<AppState> for Arrived {
    type Rejection = Infallible;

    async fn from_request_parts(_: &mut Parts, _: &AppState) -> Result<Self, Infallible> {
        Ok(Self(Instant::now()))
    }
}

/// The caller presented one of the admin tokens (compared in constant time over every token).
#[derive(Debug)]
pub(crate) struct AdminToken;

impl FromRequestParts<AppState> for AdminToken {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        let presented = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match presented.is_some_and(|p| app.credentials.admin_tokens.accepts(p)) {
            true => Ok(Self),
            false => Err(ApiError::new(
                ErrorCode::Unauthorized,
                "a valid admin bearer token is required",
            )),
        }
    }
}

/// The order id of the path: a UUID (400 `invalid_request` for anything else).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OrderId(pub(crate) Uuid);

impl FromStr for OrderId {
    type Err = ApiError;

    fn from_str(raw: &str) -> Result<Self, ApiError> {
        Uuid::try_parse(raw).map(Self).map_err(|_| {
            ApiError::new(
                ErrorCode::InvalidRequest,
                "the order id must be a UUID (as in the purchase's 201)",
            )
        })
    }
}

/// The body's bytes as `Self` (400 `invalid_request`); `()`: read under the cap, and ignored.
pub(crate) trait FromBody: Sized {
    fn from_body(bytes: &[u8]) -> Result<Self, ApiError>;
}

impl FromBody for () {
    fn from_body(_: &[u8]) -> Result<Self, ApiError> {
        Ok(())
    }
}

macro_rules! from_json {
    ($($t:ty),+) => {$(
        impl FromBody for $t {
            fn from_body(bytes: &[u8]) -> Result<Self, ApiError> {
                Ok(<$t>::from_json(bytes)?)
            }
        }
    )+};
}
from_json!(PurchaseRequest, RefundRequest, SkuPut);

/// The path's parameter, parsed (400 `invalid_request`, also when it is not UTF-8 once
/// percent-decoded).
fn param<P: FromStr>(raw: Option<&str>) -> Result<P, ApiError>
where
    ApiError: From<P::Err>,
{
    let raw = raw.ok_or_else(|| ApiError::new(ErrorCode::InvalidRequest, "malformed path"))?;
    Ok(raw.parse()?)
}

/// The path's one parameter, raw, read with the request's head (`None` when the route has none
/// or it does not decode).
async fn raw_param(parts: &mut Parts, app: &AppState) -> Option<String> {
    let param = Path::<String>::from_request_parts(parts, app).await;
    param.ok().map(|Path(raw)| raw)
}

/// The body under its cap, then the path's parameter `P`, then the body as `T`.
#[derive(Debug)]
pub(crate) struct Checked<P, T = ()>(pub(crate) P, pub(crate) T);

impl<P: FromStr, T: FromBody> FromRequest<AppState> for Checked<P, T>
where
    ApiError: From<P::Err>,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = req.into_parts();
        let raw = raw_param(&mut parts, app).await;
        let bytes = body::read_limited(body).await?;
        Ok(Self(param(raw.as_deref())?, T::from_body(&bytes)?))
    }
}

/// A request the edge signed for `user`, and what it carries (`T`).
#[derive(Debug)]
pub(crate) struct EdgeSigned<T> {
    pub(crate) user: UserId,
    pub(crate) request: T,
}

/// What an edge-signed request carries beyond its user, from what the signature covered, in the
/// contract's order: the path's parameter, the idempotency key, the body.
pub(crate) trait Signed: Sized {
    fn from_signed(
        param: Option<&str>,
        key: Option<Result<IdempotencyKey, DomainError>>,
        body: &[u8],
    ) -> Result<Self, ApiError>;
}

impl<T: Signed> FromRequest<AppState> for EdgeSigned<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = req.into_parts();
        let param = raw_param(&mut parts, app).await;
        let bytes = body::read_limited(body).await?;
        let bad = |why: &str| ApiError::new(ErrorCode::BadSignature, why.to_owned());
        let user = parts
            .headers
            .get(headers::USER)
            .ok_or_else(|| bad("Flashgate-User is missing"))?
            .to_str()
            .ok()
            .and_then(|u| UserId::parse(u).ok())
            .ok_or_else(|| bad("Flashgate-User is malformed"))?;
        // The signature covers the decoded key; a malformed key (refused right after) signs as
        // sent. Header values that are not visible ASCII never make a valid key.
        let raw_key = parts
            .headers
            .get(headers::IDEMPOTENCY_KEY)
            .map(|v| v.to_str().unwrap_or(""));
        let key = raw_key.map(IdempotencyKey::parse);
        let signed_key = match (&key, raw_key) {
            (Some(Ok(k)), _) => k.as_str(),
            (_, Some(raw)) => raw,
            (_, None) => "",
        };
        // axum answers HEAD with the GET route; the edge signs what that route is.
        let method = match parts.method {
            Method::HEAD => Method::GET,
            ref m => m.clone(),
        };
        let signed = SignedParts {
            method: method.as_str(),
            path: parts.uri.path(),
            user: user.as_str(),
            idempotency_key: signed_key,
            body: &bytes,
        };
        let verifier = Verifier {
            ring: &app.credentials.edge_secrets,
            accept_v1: app.credentials.accept_signature_v1,
        };
        let header = parts
            .headers
            .get(headers::SIGNATURE)
            .map(|v| v.to_str().unwrap_or(""));
        let now = chrono::Utc::now().timestamp();
        let signature = verifier.verify(header, now, &signed).map_err(|e| {
            tracing::info!(reason = %e, "refused edge signature");
            bad(&e.to_string())
        })?;
        app.metrics.count_signature(&signature);
        let request = T::from_signed(param.as_deref(), key, &bytes)?;
        Ok(Self { user, request })
    }
}

/// A purchase the edge signed: its key (required) and its body.
#[derive(Debug)]
pub(crate) struct Purchase {
    pub(crate) key: IdempotencyKey,
    pub(crate) request: PurchaseRequest,
}

impl Signed for Purchase {
    fn from_signed(
        _: Option<&str>,
        key: Option<Result<IdempotencyKey, DomainError>>,
        body: &[u8],
    ) -> Result<Self, ApiError> {
        let key = key.ok_or_else(|| {
            ApiError::new(
                ErrorCode::MissingIdempotencyKey,
                "the Idempotency-Key header is required",
            )
        })??;
        let request = PurchaseRequest::from_body(body)?;
        Ok(Self { key, request })
    }
}

/// A shopper's order route: the order id (the key and the body, signed empty, are not read).
impl Signed for OrderId {
    fn from_signed(
        param: Option<&str>,
        _: Option<Result<IdempotencyKey, DomainError>>,
        _: &[u8],
    ) -> Result<Self, ApiError> {
        self::param(param)
    }
}

/// Who calls an order route open to shoppers, and on which order: the shop (an admin token,
/// checked before the body is read) when the request carries `Authorization`, else a shopper
/// through the edge's signature (401 `unauthorized` when it carries neither).
#[derive(Debug)]
pub(crate) struct OrderCaller {
    pub(crate) who: Requester,
    pub(crate) id: Uuid,
}

impl FromRequest<AppState> for OrderCaller {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &AppState) -> Result<Self, ApiError> {
        let (admin, signed) = {
            let has = |name: &str| req.headers().contains_key(name);
            let signed = has(headers::SIGNATURE) || has(headers::USER);
            (has(header::AUTHORIZATION.as_str()), signed)
        };
        if admin {
            let (mut parts, body) = req.into_parts();
            AdminToken::from_request_parts(&mut parts, app).await?;
            let req = Request::from_parts(parts, body);
            let Checked(OrderId(id), ()) = Checked::from_request(req, app).await?;
            return Ok(Self {
                who: Requester::Shop,
                id,
            });
        }
        if !signed {
            return Err(ApiError::new(
                ErrorCode::Unauthorized,
                "an admin bearer token, or the edge's signature of the shopper's request, is required",
            ));
        }
        let signed = EdgeSigned::<OrderId>::from_request(req, app).await?;
        Ok(Self {
            who: Requester::Shopper(signed.user),
            id: signed.request.0,
        })
    }
}
