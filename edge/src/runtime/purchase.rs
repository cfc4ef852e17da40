//! `POST /v1/purchases`: stateless checks ([`crate::purchase`]), then the user's gate (rate limit,
//! idempotency, shields), then — only for a claimed attempt — the signed call to the origin, whose
//! answer is stored or released with the key and teaches the shield.

use shared::ErrorCode;
use shared::headers::{IDEMPOTENCY_KEY, IDEMPOTENT_REPLAYED};
use worker::{Env, Method, Request};

use crate::cache_policy::facts_key;
use crate::config::Settings;
use crate::forward::{self, Outcome};
use crate::protocol::{BeginRequest, FinishRequest, Verdict};
use crate::purchase::{self, Incoming, Purchase};
use crate::ratelimit_fields;
use crate::reply::Reply;
use crate::request_id::RequestId;

use super::http::{base_url, header, now_ms};
use super::origin;
use super::sku_cache;
use super::user_gate::UserGateClient;

/// Handles one purchase attempt; every outcome is a [`Reply`].
pub(crate) async fn handle(
    req: &mut Request,
    env: &Env,
    settings: &Settings,
    request_id: &RequestId,
) -> Reply {
    if purchase::announced_too_large(header(req, "content-length").as_deref()) {
        return purchase::too_large();
    }
    let Ok(body) = req.bytes().await else {
        return Reply::problem(
            ErrorCode::InvalidRequest,
            "the request body could not be read",
        );
    };
    let authorization = header(req, "authorization");
    let key = header(req, IDEMPOTENCY_KEY);
    let incoming = Incoming {
        authorization: authorization.as_deref(),
        idempotency_key: key.as_deref(),
        body: &body,
    };
    let purchase = match purchase::validate(incoming, &settings.session_secrets, now_ms() / 1_000) {
        Ok(p) => p,
        Err(reply) => return reply,
    };

    let facts_key = facts_key(&base_url(req), &purchase.request.sku);
    let facts = sku_cache::get_facts(&facts_key).await;
    let gate = match UserGateClient::for_user(env, &purchase.user) {
        Ok(gate) => gate,
        Err(e) => {
            worker::console_error!("user gate binding: {e}");
            return Reply::unavailable("per-user state is unavailable, retry later", 1);
        }
    };
    let begin = BeginRequest {
        key: purchase.key.to_string(),
        fingerprint: purchase.fingerprint.clone(),
        sku: purchase.request.sku.to_string(),
        qty: purchase.request.qty.get(),
        facts,
        rate: settings.rate_settings(),
        in_flight_timeout_ms: settings.in_flight_timeout_ms(),
    };
    let decided = match gate.begin(&begin).await {
        Ok(decided) => decided,
        Err(e) => {
            // Includes Durable Object `overloaded` errors.
            worker::console_warn!("user gate begin failed: {e}");
            return Reply::unavailable("per-user state is unavailable, retry later", 1);
        }
    };

    let reply = match decided.verdict {
        Verdict::Limited => Reply::problem(
            ErrorCode::RateLimited,
            "too many purchase attempts; retry after the indicated time",
        ),
        Verdict::Replay { status, body } => Reply::replay(status, body),
        Verdict::InFlight => Reply::problem(
            ErrorCode::IdempotencyInFlight,
            "a request with this Idempotency-Key is still being processed",
        ),
        Verdict::Reused => Reply::problem(
            ErrorCode::IdempotencyKeyReused,
            "this Idempotency-Key was already used with a different request",
        ),
        Verdict::Answered { status, body } => Reply::stored(status, body),
        Verdict::Proceed { attempt } => {
            forward_to_origin(settings, &gate, &purchase, attempt, &facts_key, request_id).await
        }
    };
    ratelimit_fields::headers(&settings.rate_limit, &decided.rate)
        .into_iter()
        .fold(reply, |reply, (name, value)| {
            reply.with_header(&name, value)
        })
}

/// Asks the origin, then finishes the attempt with its answer (stored, or released for a retry).
async fn forward_to_origin(
    settings: &Settings,
    gate: &UserGateClient,
    purchase: &Purchase,
    attempt: i64,
    facts_key: &str,
    request_id: &RequestId,
) -> Reply {
    let url = format!("{}{}", settings.origin_url, forward::PURCHASE_PATH);
    let headers = forward::origin_headers(
        &settings.edge_shared_secrets,
        now_ms() / 1_000,
        purchase,
        request_id,
    );
    let outcome = match origin::send(
        Method::Post,
        &url,
        &headers,
        Some(&purchase.body),
        settings.origin_timeout_ms,
    )
    .await
    {
        Ok(r) => forward::classify(r.status, &r.body, r.retry_after.as_deref(), r.replayed),
        Err(e) => {
            worker::console_warn!("purchase forward: {e}");
            Outcome::Unavailable(forward::unavailable())
        }
    };
    let (status, body, reply) = match outcome {
        Outcome::Answer {
            status,
            body,
            replayed,
        } => {
            let reply = Reply::stored(status, body.clone());
            let reply = if replayed {
                reply.with_header(IDEMPOTENT_REPLAYED, "true")
            } else {
                reply
            };
            (status, body, reply)
        }
        Outcome::Unavailable(reply) => (reply.status, reply.body.clone(), reply),
    };

    let finish = FinishRequest {
        key: purchase.key.to_string(),
        attempt,
        sku: purchase.request.sku.to_string(),
        qty: purchase.request.qty.get(),
        status,
        body: body.clone(),
    };
    if let Err(e) = gate.finish(&finish).await {
        // The answer still goes out. The key stays in flight until the timeout; a retry then
        // reaches the origin, which replays its stored outcome.
        worker::console_warn!("user gate finish failed: {e}");
    }

    // Re-read just before writing, to narrow the window in which a concurrent writer's lower
    // bound could be overwritten (which would only cost an extra origin call).
    let facts = sku_cache::get_facts(facts_key).await;
    if let Some(learned) = forward::learn(facts, purchase.request.qty.get(), status, &body) {
        sku_cache::put_facts(facts_key, &learned, settings.sku_facts_ttl_secs).await;
    }
    reply
}
