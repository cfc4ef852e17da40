//! What a handler's signature says was checked: the extractors of the origin's routes. axum runs
//! them before the handler, in the order of its arguments — the request's head first ([`AdminToken`]),
//! then the one extractor that reads the body — so the contract's order of checks (docs/api.md)
//! is the order of the arguments, and each check refuses with its problem+json:
//!
//! - [`Arrived`]: when the request's head arrived (what a purchase's duration counts from).
//! - [`AdminToken`]: `Authorization: Bearer <one of ADMIN_TOKENS>`, before any byte of the body
//!   is read (401 `unauthorized`).
//! - [`EdgeSigned<T>`]: a request the edge signed — the body under its cap (413
//!   `payload_too_large`, 408 `request_timeout`), the signature and its user (401
//!   `bad_signature`), then `T` from what was signed ([`Signed`]): a purchase's key (400
//!   `missing_idempotency_key` / `invalid_request`) and body (400 `invalid_request`), or the
//!   order id of a shopper's order route.
//! - [`Checked<P, T>`]: the body under its cap, then the path's parameter `P` ([`OrderId`], a
//!   `Sku`), then the body as `T` — what the shop's routes read after their [`AdminToken`].
//! - [`OrderCaller`]: an order route open to both: the shop (an admin token, when the request
//!   carries `Authorization`) or a shopper through the edge's signature; then the order id.

use std::convert::Infallible;
use std::time::Instant;

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{Method, header};
use bytes::Bytes;
use shared::{
    DomainError, ErrorCode, IdempotencyKey, PurchaseRequest, RefundRequest, Sku, SkuPut, UserId,
};
use uuid::Uuid;

use super::AppState;
use crate::orders::Requester;
use crate::problem::ApiError;
use crate::{auth, body};

/// When the request arrived: taken with its head, before the body is read (a purchase's
/// duration counts from there).
#[derive(Debug)]
pub(crate) struct Arrived(pub(crate) Instant);

impl FromRequestParts<AppState> for Arrived {
    type Rejection = Infallible;

    async fn from_request_parts(_: &mut Parts, _: &AppState) -> Result<Self, Infallible> {
        Ok(Self(Instant::now()))
    }
}

/// The caller presented one of the admin tokens (checked before the body is read).
#[derive(Debug)]
pub(crate) struct AdminToken;

impl FromRequestParts<AppState> for AdminToken {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &AppState) -> Result<Self, ApiError> {
        auth::require_admin(&parts.headers, &app.credentials.admin_tokens)?;
        Ok(Self)
    }
}

/// The parameter of a route's path, parsed once — after the body has arrived (the contract's
/// order: body size and deadline, then the path's parameter).
pub(crate) trait PathParam: Sized {
    fn parse(raw: &str) -> Result<Self, ApiError>;
}

/// The order id of the path: a UUID (400 `invalid_request` for anything else).
#[derive(Debug, Clone, Copy)]
pub(crate) struct OrderId(pub(crate) Uuid);

impl PathParam for OrderId {
    fn parse(raw: &str) -> Result<Self, ApiError> {
        Uuid::try_parse(raw).map(Self).map_err(|_| {
            ApiError::new(
                ErrorCode::InvalidRequest,
                "the order id must be a UUID (as in the purchase's 201)",
            )
        })
    }
}

impl PathParam for Sku {
    fn parse(raw: &str) -> Result<Self, ApiError> {
        Ok(Sku::parse(raw)?)
    }
}

/// The body's bytes as `Self` (400 `invalid_request`).
pub(crate) trait FromBody: Sized {
    fn from_body(bytes: &[u8]) -> Result<Self, ApiError>;
}

/// A route without a body: what was sent is read under the cap, and ignored.
impl FromBody for () {
    fn from_body(_: &[u8]) -> Result<Self, ApiError> {
        Ok(())
    }
}

impl FromBody for RefundRequest {
    fn from_body(bytes: &[u8]) -> Result<Self, ApiError> {
        Ok(RefundRequest::from_json(bytes)?)
    }
}

impl FromBody for SkuPut {
    fn from_body(bytes: &[u8]) -> Result<Self, ApiError> {
        Ok(SkuPut::from_json(bytes)?)
    }
}

/// The path's raw parameter (400 `invalid_request` when it is not UTF-8 once percent-decoded).
async fn raw_param(parts: &mut Parts, app: &AppState) -> Result<String, ApiError> {
    let Path(raw) = Path::<String>::from_request_parts(parts, app)
        .await
        .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.body_text()))?;
    Ok(raw)
}

/// The body under its cap, then the path's parameter `P`, then the body as `T`.
#[derive(Debug)]
pub(crate) struct Checked<P, T = ()>(pub(crate) P, pub(crate) T);

impl<P: PathParam, T: FromBody> FromRequest<AppState> for Checked<P, T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = req.into_parts();
        let raw = raw_param(&mut parts, app).await?;
        let bytes = body::read_limited(body).await?;
        Ok(Self(P::parse(&raw)?, T::from_body(&bytes)?))
    }
}

/// A request the edge signed for `user`, and what it carries (`T`).
#[derive(Debug)]
pub(crate) struct EdgeSigned<T> {
    pub(crate) user: UserId,
    pub(crate) request: T,
}

/// What an edge-signed request carries beyond its user, taken from what the signature covered, in
/// the contract's order: the route's path parameter, the idempotency key, the body.
pub(crate) trait Signed: Sized {
    /// Whether the route has a path parameter (read raw with the request's head).
    const PARAM: bool;

    fn from_signed(
        param: &str,
        key: Option<Result<IdempotencyKey, DomainError>>,
        body: &[u8],
    ) -> Result<Self, ApiError>;
}

impl<T: Signed> FromRequest<AppState> for EdgeSigned<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = req.into_parts();
        let param = match T::PARAM {
            true => raw_param(&mut parts, app).await?,
            false => String::new(),
        };
        let bytes: Bytes = body::read_limited(body).await?;
        // axum answers HEAD with the GET route; the edge signs what that route is.
        let method = match parts.method {
            Method::HEAD => Method::GET,
            ref m => m.clone(),
        };
        let now = chrono::Utc::now().timestamp();
        let edge = auth::verify_edge(
            &parts.headers,
            &app.credentials,
            method.as_str(),
            parts.uri.path(),
            &bytes,
            now,
        )?;
        app.metrics.count_signature(&edge.signature);
        let request = T::from_signed(&param, edge.idempotency_key, &bytes)?;
        Ok(Self {
            user: edge.user,
            request,
        })
    }
}

/// A purchase the edge signed: its key (required) and its body.
#[derive(Debug)]
pub(crate) struct Purchase {
    pub(crate) key: IdempotencyKey,
    pub(crate) request: PurchaseRequest,
}

impl Signed for Purchase {
    const PARAM: bool = false;

    fn from_signed(
        _: &str,
        key: Option<Result<IdempotencyKey, DomainError>>,
        body: &[u8],
    ) -> Result<Self, ApiError> {
        let key = key.ok_or_else(|| {
            ApiError::new(
                ErrorCode::MissingIdempotencyKey,
                "the Idempotency-Key header is required",
            )
        })??;
        let request = PurchaseRequest::from_json(body)?;
        Ok(Self { key, request })
    }
}

/// A shopper's order route: the order id (the key and the body, signed empty, are not read).
impl Signed for OrderId {
    const PARAM: bool = true;

    fn from_signed(
        param: &str,
        _: Option<Result<IdempotencyKey, DomainError>>,
        _: &[u8],
    ) -> Result<Self, ApiError> {
        OrderId::parse(param)
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
        let headers = req.headers();
        if headers.contains_key(header::AUTHORIZATION) {
            let (mut parts, body) = req.into_parts();
            AdminToken::from_request_parts(&mut parts, app).await?;
            let req = Request::from_parts(parts, body);
            let Checked(OrderId(id), ()) = Checked::from_request(req, app).await?;
            return Ok(Self {
                who: Requester::Shop,
                id,
            });
        }
        let signed = headers.contains_key(shared::headers::SIGNATURE)
            || headers.contains_key(shared::headers::USER);
        if !signed {
            return Err(ApiError::new(
                ErrorCode::Unauthorized,
                "an admin bearer token, or the edge's signature of the shopper's request, is required",
            ));
        }
        let EdgeSigned {
            user,
            request: OrderId(id),
        } = EdgeSigned::from_request(req, app).await?;
        Ok(Self {
            who: Requester::Shopper(user),
            id,
        })
    }
}
