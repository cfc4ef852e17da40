//! `POST /v1/purchases`: the body read under its cap, the stateless checks ([`crate::purchase`]),
//! the SKU's shield facts (one Cache API read; refreshed from the origin's view first when a
//! refusing bound or schedule is older than `SKU_CACHE_TTL_SECS`), the waiting room's pass, the
//! schedule (`not_started` / `sale_paused` answered here, [`crate::schedule`]), the bot defences of
//! a sale without a room (the proof of work, then the network's bound: `super::defences`), then
//! ONE call to the user's gate (which spends the proof first): rate
//! limit, idempotency, shields, and — only for an attempt whose key it claimed — the signed call
//! to the origin (signed here, sent by the object), whose answer the object stores or releases
//! with the key before handing it back. The answer then teaches the shield (unless it is a
//! replay, or answers a request sent before the shield's last raise; the facts are read again and
//! written only when there is something to learn), and a 201 is counted in the network's ledger
//! after the answer went out.

use futures_util::StreamExt;
use shared::ErrorCode;
use shared::headers::IDEMPOTENCY_KEY;
use worker::{ByteStream, Context, Env, Request};

use crate::cache_policy::facts_key;
use crate::config::Settings;
use crate::forward::{self, Forwarded};
use crate::network::Kind;
use crate::proof::{Expected, ProofError, Purpose};
use crate::protocol::{BeginRequest, OriginCall, PurchaseRequest, Verdict};
use crate::purchase::{self, CappedBody, Incoming, Purchase};
use crate::ratelimit_fields;
use crate::reply::Reply;
use crate::request_id::RequestId;
use crate::schedule::{self, Local};
use crate::shield::SkuFacts;

use super::defences;
use super::http::{SessionParts, base_url, header, now_ms};
use super::room;
use super::sku_cache;
use super::skus;
use super::user_gate::UserGateClient;

/// Handles one purchase attempt; every outcome is a [`Reply`].
pub(crate) async fn handle(
    req: &mut Request,
    env: &Env,
    ctx: &Context,
    settings: &Settings,
    request_id: &RequestId,
) -> Reply {
    // A cookie without the CSRF defence goes no further: nothing read, counted or forwarded.
    let session = SessionParts::read(req);
    let credential = match session.credential() {
        Ok(credential) => credential,
        Err(e) => return e.reply(),
    };
    if purchase::announced_too_large(header(req, "content-length").as_deref()) {
        return purchase::too_large();
    }
    let body = match read_capped(req).await {
        CappedRead::Whole(body) => body,
        CappedRead::TooLarge(rest) => {
            ctx.wait_until(discard(rest));
            return purchase::too_large();
        }
        CappedRead::Unreadable => return unreadable(),
    };
    let key = header(req, IDEMPOTENCY_KEY);
    let incoming = Incoming {
        credential: &credential,
        idempotency_key: key.as_deref(),
        body: &body,
    };
    let purchase = match purchase::validate(
        incoming,
        &settings.session_secrets,
        &settings.session_rules,
        now_ms() / 1_000,
    ) {
        Ok(p) => p,
        Err(reply) => return reply,
    };

    let base = base_url(req);
    let facts_key = facts_key(&base, &purchase.request.sku);
    let mut facts = sku_cache::get_facts(&facts_key).await;
    let ttl_ms = i64::from(settings.sku_cache_ttl_secs) * 1_000;
    let margin_ms = i64::from(settings.schedule_clock_margin_ms);
    let now = now_ms();
    if facts.needs_refresh(purchase.request.qty.get(), now, ttl_ms)
        || schedule::needs_refresh(&facts, now, ttl_ms, margin_ms)
    {
        // A refusing bound or schedule older than the view TTL: units may have come back (an
        // expired hold, a cancellation, a refund), the sale may have been resumed or moved. Ask
        // the origin's view before refusing (`crate::shield`, `crate::schedule`).
        facts = skus::refresh_facts(settings, &base, &purchase.request.sku, facts).await;
    }
    // The waiting room: whether the sale has one must be known (a view folded in), and if it
    // has, the purchase needs a valid pass — decided here, before the user's Durable Object, so
    // a refused attempt costs no rate and never reaches the origin (`crate::room`).
    facts = match skus::known_sale(settings, &base, &purchase.request.sku, facts).await {
        skus::SaleKnown::Known(known) => known,
        // No sale: the origin's `unknown_sku`, stored with the key as before.
        skus::SaleKnown::Missing => facts,
        skus::SaleKnown::Failed => return crate::room::answer::unavailable(),
    };
    if let Some(refused) = room::check_purchase(
        req,
        env,
        settings,
        &purchase.request.sku,
        &purchase.user,
        &facts,
    )
    .await
    {
        return refused;
    }
    // Not started / paused: answered here, before the user's Durable Object, so the attempt
    // costs neither rate nor cap (`sale_ended` is the object's, after the key's lookup).
    if let Some(schedule) = &facts.schedule {
        if let Local::Answer(closed) = schedule::decide(schedule, now_ms(), margin_ms) {
            return schedule::reply(closed);
        }
    }
    // The bot defences, before the user's Durable Object: the proof of a sale without a room
    // (with one, the join paid and the pass admits), then the network's bound on units.
    let sku = purchase.request.sku.as_str();
    let defences = facts.defences.unwrap_or_default();
    let with_room = facts.room.is_some_and(|room| room.waiting_room.is_some());
    let proof = if with_room {
        None
    } else {
        let expected = Expected {
            sku,
            user: purchase.user.as_str(),
            purpose: Purpose::Purchase,
        };
        match defences::proof(req, settings, expected, &defences) {
            Ok(proof) => proof,
            Err(refused) => return refused,
        }
    };
    let flight = match defences::network(
        req,
        &purchase.request.sku,
        Kind::Units,
        purchase.request.qty.get(),
        &defences,
    ) {
        Ok(flight) => flight,
        Err(limited) => return limited,
    };
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
        count_ttl_ms: ttl_ms,
        schedule_margin_ms: margin_ms,
        proof,
    };
    // Signed here (the secrets stay with the worker), sent by the object only if it claims the key.
    let origin = OriginCall {
        url: format!("{}{}", settings.origin_url, forward::PURCHASE_PATH),
        headers: forward::origin_headers(
            &settings.edge_shared_secrets,
            now_ms() / 1_000,
            &purchase,
            request_id,
        )
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value))
        .collect(),
        body: purchase.body.clone(),
        timeout_ms: settings.origin_timeout_ms,
    };
    // Taken before the object sends the origin call: an earlier `sent_ms` only makes the shield
    // stricter about which answers may lower its bound (`SkuFacts::lowered_by`).
    let sent_ms = now_ms();
    let decided = match gate.purchase(&PurchaseRequest { begin, origin }).await {
        Ok(decided) => decided,
        Err(e) => {
            // Includes Durable Object `overloaded` errors.
            worker::console_warn!("user gate purchase failed: {e}");
            return Reply::unavailable("per-user state is unavailable, retry later", 1);
        }
    };

    let reply = match (decided.verdict, decided.forwarded) {
        (Verdict::Limited, _) => Reply::problem(
            ErrorCode::RateLimited,
            "too many purchase attempts; retry after the indicated time",
        ),
        (Verdict::Replay { status, body }, _) => Reply::replay(status, body),
        (Verdict::InFlight, _) => Reply::problem(
            ErrorCode::IdempotencyInFlight,
            "a request with this Idempotency-Key is still being processed",
        ),
        (Verdict::Reused, _) => Reply::problem(
            ErrorCode::IdempotencyKeyReused,
            "this Idempotency-Key was already used with a different request",
        ),
        (Verdict::Answered { status, body }, _) => Reply::stored(status, body),
        (Verdict::ProofSpent, _) => crate::proof::answer::refused(sku, ProofError::Spent),
        (Verdict::Proceed { .. }, Some(forwarded)) => {
            learn(settings, &facts_key, facts, &purchase, &forwarded, sent_ms).await;
            if forwarded.status == 201 && !forwarded.replayed {
                defences::count(ctx, env, flight);
            }
            forwarded.reply()
        }
        (Verdict::Proceed { .. }, None) => {
            worker::console_error!("user gate claimed a purchase without an origin answer");
            return Reply::unavailable("per-user state is unavailable, retry later", 1);
        }
    };
    ratelimit_fields::headers(&settings.rate_limit, &decided.rate)
        .into_iter()
        .fold(reply, |reply, (name, value)| {
            reply.with_header(&name, value)
        })
}

/// Teaches the SKU's facts what the origin's answer says about its stock or schedule
/// ([`forward::learn`]). The facts read before the call decide whether there is anything to
/// learn; only then are they read again just before writing, to narrow the window in which a
/// concurrent writer's facts (a lower bound, or a warmup's raise) could be overwritten: the Cache
/// API has no compare-and-set (see `crate::shield`).
async fn learn(
    settings: &Settings,
    facts_key: &str,
    facts: SkuFacts,
    purchase: &Purchase,
    forwarded: &Forwarded,
    sent_ms: i64,
) {
    let answered = |arrived_ms| forward::Answered {
        qty: purchase.request.qty.get(),
        status: forwarded.status,
        body: &forwarded.body,
        replayed: forwarded.replayed,
        sent_ms,
        arrived_ms,
    };
    if forward::learn(facts, &answered(now_ms())).is_none() {
        return;
    }
    let current = sku_cache::get_facts(facts_key).await;
    if let Some(learned) = forward::learn(current, &answered(now_ms())) {
        sku_cache::put_facts(facts_key, &learned, settings.sku_facts_ttl_secs).await;
    }
}

/// The outcome of reading a purchase body under its cap.
enum CappedRead {
    /// The whole body, at most [`purchase::MAX_BODY_BYTES`].
    Whole(Vec<u8>),
    /// The body passed the limit; the rest of it is still in this stream.
    TooLarge(ByteStream),
    /// The body could not be read (the client went away, a broken chunked encoding…).
    Unreadable,
}

/// Reads the body as it streams in, stopping at the first chunk past the limit.
async fn read_capped(req: &mut Request) -> CappedRead {
    let mut stream = match req.stream() {
        Ok(stream) => stream,
        // No body at all: an empty one (refused later as invalid JSON).
        Err(_) if req.inner().body().is_none() => return CappedRead::Whole(Vec::new()),
        Err(_) => return CappedRead::Unreadable,
    };
    let mut body = CappedBody::default();
    while let Some(chunk) = stream.next().await {
        let Ok(chunk) = chunk else {
            return CappedRead::Unreadable;
        };
        if body.push(&chunk).is_err() {
            return CappedRead::TooLarge(stream);
        }
    }
    CappedRead::Whole(body.into_bytes())
}

/// Reads and drops what is left of a body refused as too large, after the 413 went out, up to
/// [`purchase::MAX_DISCARDED_BYTES`], then cancels the stream (dropping it). Nothing is kept, so
/// memory stays flat, and the client, which may still be sending, reads its 413 instead of a reset.
async fn discard(mut rest: ByteStream) {
    let mut seen = 0usize;
    while let Some(Ok(chunk)) = rest.next().await {
        seen = seen.saturating_add(chunk.len());
        if seen > purchase::MAX_DISCARDED_BYTES {
            break;
        }
    }
}

fn unreadable() -> Reply {
    Reply::problem(
        ErrorCode::InvalidRequest,
        "the request body could not be read",
    )
}
