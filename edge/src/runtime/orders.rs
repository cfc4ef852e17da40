//! `GET /v1/orders/{order_id}` and `POST /v1/orders/{order_id}/cancel`: the stateless checks
//! ([`crate::orders`]), one unit of the user's `order` rate-limit bucket in their Durable Object,
//! the signed call to the origin, whose answer is relayed; a confirmed cancellation gives the
//! units back to the user's count in the Durable Object.

use worker::{Env, Method, Request};

use crate::config::Settings;
use crate::orders::{self, OrderAction};
use crate::protocol::{LimitRequest, RateOutcome, ReturnedRequest};
use crate::ratelimit_fields;
use crate::reply::Reply;
use crate::request_id::RequestId;
use shared::ErrorCode;

use super::http::{SessionParts, now_ms};
use super::origin;
use super::user_gate::UserGateClient;

/// Handles one order request; every outcome is a [`Reply`].
pub(crate) async fn handle(
    req: &Request,
    env: &Env,
    settings: &Settings,
    raw_id: &str,
    action: OrderAction,
    request_id: &RequestId,
) -> Reply {
    let session = SessionParts::read(req);
    let credential = match session.credential() {
        Ok(credential) => credential,
        Err(e) => return e.reply(),
    };
    let call = match orders::validate(
        &credential,
        raw_id,
        action,
        &settings.session_secrets,
        &settings.session_rules,
        now_ms() / 1_000,
    ) {
        Ok(call) => call,
        Err(reply) => return reply,
    };
    let gate = match UserGateClient::for_user(env, &call.user) {
        Ok(gate) => gate,
        Err(e) => {
            worker::console_error!("user gate binding: {e}");
            return Reply::unavailable("per-user state is unavailable, retry later", 1);
        }
    };
    let limit = LimitRequest {
        rate: settings.order_rate_settings(),
    };
    let rate = match gate.limit(&limit).await {
        Ok(rate) => rate,
        Err(e) => {
            worker::console_warn!("user gate limit failed: {e}");
            return Reply::unavailable("per-user state is unavailable, retry later", 1);
        }
    };
    let reply = if matches!(rate, RateOutcome::Limited { .. }) {
        Reply::problem(
            ErrorCode::RateLimited,
            "too many order requests; retry after the indicated time",
        )
    } else {
        forward(settings, &gate, &call, request_id).await
    };
    ratelimit_fields::headers(&settings.order_rate_limit, &rate)
        .into_iter()
        .fold(reply, |reply, (name, value)| {
            reply.with_header(&name, value)
        })
}

/// Asks the origin and relays its answer; a confirmed cancellation updates the user's count.
async fn forward(
    settings: &Settings,
    gate: &UserGateClient,
    call: &orders::OrderCall,
    request_id: &RequestId,
) -> Reply {
    let url = format!("{}{}", settings.origin_url, call.origin_path());
    let headers = orders::origin_headers(
        &settings.edge_shared_secrets,
        now_ms() / 1_000,
        call,
        request_id,
    );
    let method = match call.action {
        OrderAction::View => Method::Get,
        OrderAction::Cancel => Method::Post,
    };
    let body = match call.action {
        OrderAction::View => None,
        OrderAction::Cancel => Some(""),
    };
    let answer = match origin::send(method, &url, &headers, body, settings.origin_timeout_ms).await
    {
        Ok(r) => r,
        Err(e) => {
            worker::console_warn!("order forward: {e}");
            return orders::unavailable();
        }
    };
    let reply = orders::answer(answer.status, &answer.body, answer.retry_after.as_deref());
    if let Some(returned) = orders::returned(call, reply.status, &reply.body) {
        let input = ReturnedRequest {
            order_id: returned.order.to_string(),
            sku: returned.sku.to_string(),
            qty: returned.qty,
        };
        if let Err(e) = gate.returned(&input).await {
            // The cancellation stands. The user's count stays too high, so the edge's cap
            // pre-check may refuse (409 `purchase_limit`, never stored) a purchase of this SKU
            // the origin would now accept.
            worker::console_warn!("user gate returned failed: {e}");
        }
    }
    reply
}
