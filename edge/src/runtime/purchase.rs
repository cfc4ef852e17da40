//! `POST /v1/purchases`: the body read under its cap, the stateless checks ([`crate::purchase`]),
//! the SKU's shield facts (one Cache API read; refreshed from the origin's view first when a
//! refusing bound or schedule is older than `SKU_CACHE_TTL_SECS`), then the checks that guard
//! only **new work** ([`new_work`]: the sale's defences known, the waiting room's pass, the
//! schedule's `not_started` / `sale_paused` [`crate::schedule`], the proof of work and the
//! network's bound of `super::defences`), each decided in the worker without an object call,
//! then ONE call to the user's gate with their verdict: the key first — a key already decided
//! replays its stored answer whatever those checks said (no proof spent, no network slot kept,
//! no origin call), a key in flight is 409 — and only for new work the checks' refusal, the
//! proof spent once, the rate limit, the shields and — for an attempt whose key it claimed —
//! the signed call to the origin (signed here, sent by the object), whose answer the object
//! stores or releases with the key before handing it back. A refusal of the checks is answered
//! here only once the gate said the key is new work. The answer then teaches the shield (unless
//! it is a replay, or answers a request sent before the shield's last raise; the facts are read
//! again and written only when there is something to learn), and a unit sold is counted in the
//! network's ledger after the answer went out.

use futures_util::StreamExt;
use shared::ErrorCode;
use shared::headers::{IDEMPOTENCY_KEY, TRACEPARENT, TRACESTATE};
use worker::{ByteStream, Context, Env, Request};

use crate::cache_policy::facts_key;
use crate::config::Settings;
use crate::forward::{self, Forwarded};
use crate::network::Kind;
use crate::proof::{Expected, ProofError, Spend};
use crate::protocol::{BeginRequest, OriginCall, PurchaseRequest, Verdict};
use crate::purchase::{self, CappedBody, Incoming, Purchase};
use crate::ratelimit_fields;
use crate::reply::Reply;
use crate::request_id::RequestId;
use crate::schedule::{self, Local};
use crate::shield::SkuFacts;
use crate::trace_context::TraceContext;

use super::defences::{self, Flight};
use super::http::{SessionParts, base_url, header, now_ms, random_trace_ids};
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
    // Whether the sale has a waiting room or bot defences must be known (a view folded in)
    // before new work goes on.
    let known = match skus::known_sale(settings, &base, &purchase.request.sku, facts).await {
        skus::SaleKnown::Known(known) => Some(known),
        // No sale: the origin's `unknown_sku`, stored with the key as before.
        skus::SaleKnown::Missing => Some(facts),
        skus::SaleKnown::Failed => None,
    };
    let facts = known.unwrap_or(facts);
    let (proof, flight, refusal) =
        match new_work(req, settings, &purchase, known.as_ref(), margin_ms).await {
            NewWork::Go { proof, flight } => (proof, flight, None),
            NewWork::Refused(refusal) => (None, None, Some(refusal)),
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
        new_work_refused: refusal.is_some(),
    };
    // The shopper's trace (a valid `traceparent`) continued, or a new one.
    let trace = TraceContext::choose(
        header(req, TRACEPARENT).as_deref(),
        header(req, TRACESTATE).as_deref(),
        random_trace_ids,
    );
    // Signed here (the secrets stay with the worker), sent by the object only if it claims the key.
    let origin = OriginCall {
        url: format!("{}{}", settings.origin_url, forward::PURCHASE_PATH),
        headers: forward::origin_headers(
            &settings.edge_shared_secrets,
            now_ms() / 1_000,
            &purchase,
            request_id,
            &trace,
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

    let sku = purchase.request.sku.as_str();
    let reply = match (decided.verdict, decided.forwarded) {
        // New work a check refused: its answer, as it was before the gate knew of it.
        (Verdict::Refused, _) => {
            return match refusal {
                Some(refusal) => refusal.reply(req, env, settings, &purchase, &facts).await,
                None => {
                    worker::console_error!("user gate refused work no check refused");
                    Reply::unavailable("per-user state is unavailable, retry later", 1)
                }
            };
        }
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
            if forwarded.sold() {
                defences::count(ctx, env, flight);
                room::pass_used(ctx, env, &purchase.request.sku, &purchase.user, &facts);
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

/// What the checks that guard only new work said of an attempt ([`new_work`]).
enum NewWork {
    /// It may go on, with the proof the gate spends and the network slot it holds.
    Go {
        proof: Option<Spend>,
        flight: Option<Flight>,
    },
    /// Refused: answered only if the shopper's gate finds the key is new work.
    Refused(Refusal),
}

/// A refusal of new work, kept until the gate says the key is not decided.
enum Refusal {
    /// The answer, as it is.
    Reply(Reply),
    /// No valid pass: where the shopper stands is looked up only if the answer goes out.
    Pass(room::PassRefusal),
}

impl Refusal {
    async fn reply(
        self,
        req: &Request,
        env: &Env,
        settings: &Settings,
        purchase: &Purchase,
        facts: &SkuFacts,
    ) -> Reply {
        match self {
            Self::Reply(reply) => reply,
            Self::Pass(refusal) => {
                let (sku, user) = (&purchase.request.sku, &purchase.user);
                room::not_admitted(req, env, settings, sku, user, facts, refusal).await
            }
        }
    }
}

/// The checks that guard only new work, in the order they refuse, each without an object call:
/// the sale's waiting room and defences known (`known`: `None` when the origin could not say:
/// `503`), the waiting room's pass, `not_started` / `sale_paused` ([`crate::schedule`]), the proof
/// of work of a sale without a room (with one, the join paid and the pass admits) and last the
/// network's bound on units, whose slot the attempt then holds (waiting for it if another request
/// of the network holds it). Nothing here is answered before the shopper's gate looked at the
/// key: a key already decided gets its stored answer whatever these say.
async fn new_work(
    req: &Request,
    settings: &Settings,
    purchase: &Purchase,
    known: Option<&SkuFacts>,
    margin_ms: i64,
) -> NewWork {
    let refused = |reply| NewWork::Refused(Refusal::Reply(reply));
    let Some(facts) = known else {
        return refused(crate::room::answer::unavailable());
    };
    let (sku, user) = (&purchase.request.sku, &purchase.user);
    match room::pass_refusal(req, settings, sku, user, facts) {
        Some(room::PassRefusal::Unconfigured) => {
            return refused(crate::room::answer::unavailable());
        }
        Some(refusal) => return NewWork::Refused(Refusal::Pass(refusal)),
        None => {}
    }
    if let Some(schedule) = &facts.schedule
        && let Local::Answer(closed) = schedule::decide(schedule, now_ms(), margin_ms)
    {
        return refused(schedule::reply(closed));
    }
    let defences = facts.defences.unwrap_or_default();
    let with_room = facts.room.is_some_and(|room| room.waiting_room.is_some());
    let proof = if with_room {
        None
    } else {
        let expected = Expected::purchase(sku.as_str(), user.as_str(), facts.schedule.as_ref());
        match defences::proof(req, settings, expected, &defences) {
            Ok(proof) => proof,
            Err(reply) => return refused(reply),
        }
    };
    let qty = purchase.request.qty.get();
    match defences::network(req, settings, sku, user, Kind::Units, qty, &defences).await {
        Ok(flight) => NewWork::Go { proof, flight },
        Err(reply) => refused(reply),
    }
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
