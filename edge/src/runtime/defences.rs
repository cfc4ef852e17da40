//! The bot defences of a join or a purchase at run time, in the order the request meets them
//! (`crate::proof` and `crate::network` decide): the proof of work, verified in the worker (its
//! single use is the serializing object's: the shopper's gate or room shard), then the bound of
//! the shopper's network, which holds the network's in-flight slot of this instance until the
//! answer is counted ([`Flight`]). `GET /v1/challenge` issues the challenges: per shopper at most
//! the purchase limit's quota (a bucket of this instance, `crate::local_limit`), for a purchase
//! of a scheduled sale only from its start on, as hard as the distinct shoppers asking say.

use std::cell::RefCell;

use shared::{Sku, UserId};
use worker::{Context, Env, Request};

use crate::cache_policy;
use crate::config::Settings;
use crate::local_limit::LocalBuckets;
use crate::network::{self, CONNECTING_IP_HEADER, Key, Kind, Network, Timing};
use crate::proof::{self, Expected, PROOF_HEADER, Purpose, Spend, difficulty::Demand};
use crate::protocol::RateOutcome;
use crate::reply::Reply;
use crate::shield::{Defences, SkuFacts};

use super::http::{SessionParts, base_url, header, now_ms, query_pairs};
pub(crate) use super::network::Flight;
use super::sku_cache;
use super::skus::{self, SaleKnown};

thread_local! {
    /// The distinct shoppers asking for challenges per SKU on this instance: the demand
    /// difficulty follows.
    static DEMAND: RefCell<Demand> = RefCell::new(Demand::default());
    /// Each shopper's `challenge` bucket on this instance.
    static CHALLENGES: RefCell<LocalBuckets> = RefCell::new(LocalBuckets::default());
}

/// What a join or a purchase of this sale is for, as the shopper's proof must say.
fn purpose(facts: &SkuFacts) -> Purpose {
    if facts.room.is_some_and(|r| r.waiting_room.is_some()) {
        Purpose::Join
    } else {
        Purpose::Purchase
    }
}

/// The proof check of a request for `purpose` of a sale with `defences`: `Ok(None)` when the
/// sale asks for none, `Ok(Some(spend))` for a proof that verifies (to be spent by the object),
/// else the refusal (`428`, `403`; `503` without `POW_SECRETS`).
pub(crate) fn proof(
    req: &Request,
    settings: &Settings,
    expected: Expected<'_>,
    defences: &Defences,
) -> Result<Option<Spend>, Reply> {
    if defences.proof_of_work.is_none() {
        return Ok(None);
    }
    let Some(ring) = &settings.pow_secrets else {
        worker::console_error!("a proof of work is set but POW_SECRETS is not: failing closed");
        return Err(unconfigured());
    };
    proof::check(
        ring,
        header(req, PROOF_HEADER).as_deref(),
        expected,
        now_ms(),
    )
    .map(Some)
    .map_err(|e| proof::answer::refused(expected.sku, e))
}

/// The network bound of `kind` for a request of `n` by `user` of a sale with `defences`:
/// `Ok(None)` when the sale has none, `Ok(Some(flight))` when it may go on (after waiting for its
/// network's slot, if another request of the network holds it), else `429 network_limit`.
pub(crate) async fn network(
    req: &Request,
    settings: &Settings,
    sku: &Sku,
    user: &UserId,
    kind: Kind,
    n: u32,
    defences: &Defences,
) -> Result<Option<Flight>, Reply> {
    let Some(bound) = defences
        .network_limits
        .as_ref()
        .and_then(|limits| network::bound(limits, kind))
    else {
        return Ok(None);
    };
    let key = Key {
        sku: sku.to_string(),
        network: Network::of(header(req, CONNECTING_IP_HEADER).as_deref()),
        kind,
    };
    let timing = Timing::with_deadline(settings.in_flight_timeout_ms());
    Flight::admit(key, network::account(user.as_str()), n, bound, timing)
        .await
        .map(Some)
        .map_err(|refusal| network::answer::limited(kind, bound, refusal))
}

/// Counts a success in its network's ledger after the answer went out.
pub(crate) fn count(ctx: &Context, env: &Env, flight: Option<Flight>) {
    if let Some(flight) = flight {
        let env = env.clone();
        ctx.wait_until(async move { flight.count(&env).await });
    }
}

fn unconfigured() -> Reply {
    Reply::unavailable("the proof of work is not configured here; retry later", 30)
}

/// `GET /v1/challenge?sku=…` (a shopper's token or session cookie): a challenge for the sale's
/// join (with a waiting room) or purchase (without), as hard as the SKU's demand asks.
pub(crate) async fn challenge(req: &Request, settings: &Settings) -> Reply {
    let user: UserId = match SessionParts::read(req).shopper(settings) {
        Ok(user) => user,
        Err(reply) => return reply,
    };
    let pairs = query_pairs(req);
    let raw = pairs.iter().find(|(name, _)| name == "sku").map(|(_, v)| v);
    let Some(sku) = raw.and_then(|raw| Sku::parse(raw).ok()) else {
        return Reply::problem(
            shared::ErrorCode::InvalidRequest,
            "`sku` is required: GET /v1/challenge?sku=<sku>",
        );
    };
    let base = base_url(req);
    let facts = sku_cache::get_facts(&cache_policy::facts_key(&base, &sku)).await;
    let facts = match skus::known_sale(settings, &base, &sku, facts).await {
        SaleKnown::Known(facts) => facts,
        SaleKnown::Missing => {
            return Reply::problem(shared::ErrorCode::UnknownSku, "no sale for this SKU");
        }
        SaleKnown::Failed => return crate::forward::unavailable(),
    };
    let Some(pow) = facts.defences.and_then(|d| d.proof_of_work) else {
        return proof::answer::not_required();
    };
    let Some(ring) = &settings.pow_secrets else {
        worker::console_error!("a proof of work is set but POW_SECRETS is not: failing closed");
        return unconfigured();
    };
    // A purchase of a scheduled sale needs a proof issued from its start on (`proof::check`):
    // none is issued before it, so nothing can be solved in the quiet minutes before and fired
    // at the start. A join's is (the pre-queue before the start is the room's design).
    let purpose = purpose(&facts);
    let now = now_ms();
    if let Some(closed) = proof::too_early(purpose, facts.schedule.as_ref(), now) {
        return crate::schedule::reply(closed);
    }
    let policy = &settings.challenge_rate_limit;
    let rate = CHALLENGES.with(|b| b.borrow_mut().check(policy, user.as_str(), now));
    let limited = |reply: Reply| {
        crate::ratelimit_fields::headers(policy, &rate)
            .into_iter()
            .fold(reply, |reply, (name, value)| {
                reply.with_header(&name, value)
            })
    };
    if let RateOutcome::Limited { .. } = rate {
        return limited(Reply::problem(
            shared::ErrorCode::RateLimited,
            "too many challenge requests; retry after the indicated time",
        ));
    }
    let mut entropy: proof::Entropy = [0u8; 36];
    if let Err(e) = getrandom::fill(&mut entropy) {
        worker::console_error!("no randomness for a challenge: {e}");
        return Reply::unavailable("no challenge can be made now; retry later", 1);
    }
    let peak = settings.pow_peak_arrivals_per_sec;
    let shoppers = DEMAND.with(|d| {
        d.borrow_mut()
            .arrive(sku.as_str(), user.as_str(), now, peak)
    });
    let bits = proof::difficulty::bits(pow, shoppers, peak);
    let expected = Expected {
        sku: sku.as_str(),
        user: user.as_str(),
        purpose,
        not_before_ms: None,
    };
    limited(proof::answer::challenge(&proof::issue(
        ring,
        pow.algorithm,
        expected,
        bits,
        now / 1_000,
        settings.pow_challenge_ttl_secs,
        entropy,
    )))
}
