//! `POST /v1/queue/{sku}` (join), `GET /v1/queue/{sku}` (poll), `GET /v1/queue/{sku}/stats`
//! (admin) and the `Flashgate-Pass` check of `POST /v1/purchases`, over the room's objects
//! (`super::room_objects`) and the Cache API. The decisions are `crate::room`'s.
//!
//! Joins and polls count against the shopper's `queue` limit (`QUEUE_RATE_LIMIT_*`, a bucket of
//! this instance: `crate::local_limit`) before anything else is read: `429 rate_limited` with
//! `Retry-After`, and the `RateLimit` fields on every answer, like purchases.
//!
//! A poll with a valid `Flashgate-Queue-Receipt` is answered from the receipt and the room's
//! state cached for a second: no Durable Object call on a cache hit. Without a receipt (or when
//! the receipt cannot tell: a pre-queue member after the start, an admission before the cached
//! window) the member's shard is asked. Any object that cannot be reached is a `503` with
//! `Retry-After`: the room fails closed, nobody is admitted by accident.

use std::cell::RefCell;

use shared::{ErrorCode, Sku, UserId};
use worker::{Context, Env, Request};

use crate::cache_policy;
use crate::config::Settings;
use crate::local_limit::LocalBuckets;
use crate::network::Kind;
use crate::proof::{Expected, ProofError, Spend};
use crate::protocol::RateOutcome;
use crate::ratelimit_fields;
use crate::reply::Reply;
use crate::room::admission::{RoomConfig, RoomState, Seat, Status};
use crate::room::answer::{self, Asker, QueueAnswer};
use crate::room::order::{shard_of, ticket};
use crate::room::pass::{Pass, PassError, Receipt};
use crate::room::protocol::{Joined, Member, MemberRequest};
use crate::room::{PASS_HEADER, RECEIPT_HEADER};
use crate::shield::SkuFacts;
use crate::warmup;

use super::defences;
use super::http::{SessionParts, base_url, header, now_ms};
use super::room_objects::RoomClient;
use super::sku_cache;
use super::skus::{self, SaleKnown};

thread_local! {
    /// Each shopper's `queue` bucket on this instance.
    static QUEUE: RefCell<LocalBuckets> = RefCell::new(LocalBuckets::default());
}

/// Join or poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueAction {
    Join,
    Poll,
}

/// What a room request needs once the shopper, the SKU and the room are known.
struct Room<'a> {
    env: &'a Env,
    ring: &'a shared::SecretRing,
    sku: &'a Sku,
    user: &'a UserId,
    config: RoomConfig,
    base: String,
    /// `SKU_FACTS_TTL_SECS`: how long facts written here are kept.
    facts_ttl_secs: u32,
}

fn receipt_of(m: &Member) -> Receipt {
    Receipt {
        shard: m.shard,
        rank: m.rank,
        join_ms: m.join_ms,
        pre: m.pre,
        admitted_ms: m.admitted_ms,
        place: m.place,
    }
}

impl Room<'_> {
    fn client(&self) -> RoomClient<'_> {
        RoomClient::new(self.env, self.sku.as_str())
    }

    fn asker(&self, now_ms: i64) -> Asker<'_> {
        Asker {
            ring: self.ring,
            sku: self.sku.as_str(),
            user: self.user.as_str(),
            now_ms,
        }
    }

    /// The room's published state: the Cache API's (a second old at most), else the
    /// coordinator's.
    async fn state(&self) -> worker::Result<RoomState> {
        let key = cache_policy::room_state_key(&self.base, self.sku);
        if let Some(state) = sku_cache::get_text(&key)
            .await
            .and_then(|text| RoomState::decode(&text))
        {
            return Ok(state);
        }
        let text = self
            .client()
            .state(format!("{}\n{}", self.sku, self.config.encode()))
            .await?;
        let state = RoomState::decode(&text)
            .ok_or_else(|| worker::Error::RustError("the room state does not parse".into()))?;
        sku_cache::put_json(&key, &text, 1).await;
        Ok(state)
    }

    async fn member(&self) -> worker::Result<Option<Member>> {
        self.client()
            .member(&MemberRequest {
                shard: shard_of(self.user.as_str()),
                user: self.user.to_string(),
                ticket: None,
                starts_ms: self.config.starts_ms,
                proof: None,
            })
            .await
    }

    async fn join(&self, proof: Option<Spend>) -> worker::Result<Joined> {
        self.client()
            .join(&MemberRequest {
                shard: shard_of(self.user.as_str()),
                user: self.user.to_string(),
                ticket: Some(ticket(
                    self.ring.current().1,
                    self.sku.as_str(),
                    self.user.as_str(),
                )),
                starts_ms: self.config.starts_ms,
                proof,
            })
            .await
    }

    /// A pass was just given while the room read `remaining` units: a sold-out bound of this
    /// data center's shield below it (units came back: a restock, a return) is raised, so the
    /// pass buys instead of meeting a stale `409 sold_out`. One Cache API read per admitted
    /// poll; a write only when the bound was lower.
    async fn raise_shield(&self, remaining: u64) {
        let key = cache_policy::facts_key(&self.base, self.sku);
        let facts = sku_cache::get_facts(&key).await;
        let remaining = i64::try_from(remaining).unwrap_or(i64::MAX);
        if let Some(raised) = facts.raised_by_room(remaining, now_ms()) {
            sku_cache::put_facts(&key, &raised, self.facts_ttl_secs).await;
        }
    }

    /// The answer for this shopper: from `receipt` if it tells, else from their shard.
    /// `Ok(None)`: never joined.
    async fn answer(
        &self,
        receipt: Option<Receipt>,
        asked_shard: bool,
    ) -> worker::Result<Option<QueueAnswer>> {
        let state = self.state().await?;
        let now = now_ms();
        let (mut receipt, mut asked) = match receipt {
            Some(r) => (r, asked_shard),
            None => match self.member().await? {
                Some(m) => (receipt_of(&m), true),
                None => return Ok(None),
            },
        };
        let seat = |r: &Receipt, asked| Seat {
            shard: r.shard,
            rank: r.rank,
            pre: r.pre,
            admitted_ms: r.admitted_ms,
            place: r.place,
            asked,
        };
        let mut status = state.status_of(&seat(&receipt, asked), now);
        if matches!(
            status,
            Status::AdmittedEarlier | Status::Unranked | Status::Unplaced
        ) && !asked
        {
            // Once per member at most for each: its admission instant, its draw, its place.
            let Some(m) = self.member().await? else {
                return Ok(None);
            };
            receipt = receipt_of(&m);
            asked = true;
            status = state.status_of(&seat(&receipt, asked), now);
        }
        let _ = asked;
        let answer = QueueAnswer::new(self.asker(now), &state, &receipt, status);
        if answer.pass.is_some()
            && let Some(remaining) = state.remaining.filter(|&r| r > 0)
        {
            self.raise_shield(remaining).await;
        }
        Ok(Some(answer))
    }
}

/// The room of `sku` as the cached facts (or a fresh view) show it: `Ok(None)` without one.
async fn room_of(
    settings: &Settings,
    base: &str,
    sku: &Sku,
) -> Result<Option<(RoomConfig, SkuFacts)>, Reply> {
    let facts = sku_cache::get_facts(&cache_policy::facts_key(base, sku)).await;
    let facts = match skus::known_sale(settings, base, sku, facts).await {
        SaleKnown::Known(facts) => facts,
        SaleKnown::Missing => {
            return Err(Reply::problem(
                ErrorCode::UnknownSku,
                "no sale for this SKU",
            ));
        }
        SaleKnown::Failed => return Err(answer::unavailable()),
    };
    Ok(RoomConfig::of(&facts).map(|config| (config, facts)))
}

/// `POST` / `GET /v1/queue/{sku}`.
pub(crate) async fn handle(
    req: &Request,
    env: &Env,
    ctx: &Context,
    settings: &Settings,
    raw_sku: &str,
    action: QueueAction,
) -> Reply {
    let user = match SessionParts::read(req).shopper(settings) {
        Ok(user) => user,
        Err(reply) => return reply,
    };
    let Ok(sku) = Sku::parse(raw_sku) else {
        return Reply::problem(
            ErrorCode::InvalidRequest,
            shared::DomainError::InvalidSku.to_string(),
        );
    };
    let policy = &settings.queue_rate_limit;
    let rate = QUEUE.with(|b| b.borrow_mut().check(policy, user.as_str(), now_ms()));
    let reply = if let RateOutcome::Limited { .. } = rate {
        Reply::problem(
            ErrorCode::RateLimited,
            "too many waiting-room requests; retry after the indicated time",
        )
    } else {
        queue(req, env, ctx, settings, &sku, &user, action).await
    };
    // A refusal with the `RateLimit` fields of its own policy (the network's) keeps them.
    if reply.header(ratelimit_fields::RATELIMIT_POLICY).is_some() {
        return reply;
    }
    ratelimit_fields::headers(policy, &rate)
        .into_iter()
        .fold(reply, |reply, (name, value)| {
            reply.with_header(&name, value)
        })
}

/// A join or poll within the shopper's limit.
async fn queue(
    req: &Request,
    env: &Env,
    ctx: &Context,
    settings: &Settings,
    sku: &Sku,
    user: &UserId,
    action: QueueAction,
) -> Reply {
    let base = base_url(req);
    let (config, facts) = match room_of(settings, &base, sku).await {
        Ok(Some(known)) => known,
        Ok(None) => return answer::no_waiting_room(),
        Err(reply) => return reply,
    };
    let Some(ring) = &settings.room_secrets else {
        worker::console_error!("a waiting room is set but ROOM_SECRETS is not: failing closed");
        return answer::unavailable();
    };
    let room = Room {
        env,
        ring,
        sku,
        user,
        config,
        base,
        facts_ttl_secs: settings.sku_facts_ttl_secs,
    };
    let answered = match action {
        QueueAction::Join => {
            // The bot defences of the join: the proof (spent by the shard), then the network's
            // bound on admissions, counted when the join made a new member.
            let defences = facts.defences.unwrap_or_default();
            let expected = Expected::join(sku.as_str(), user.as_str());
            let proof = match defences::proof(req, settings, expected, &defences) {
                Ok(proof) => proof,
                Err(refused) => return refused,
            };
            let flight =
                match defences::network(req, settings, sku, user, Kind::Admissions, 1, &defences)
                    .await
                {
                    Ok(flight) => flight,
                    // A member joining again is no new admission: let it through uncounted.
                    Err(limited) => match room.member().await {
                        Ok(Some(_)) => None,
                        _ => return limited,
                    },
                };
            match room.join(proof).await {
                Ok(Joined::ProofSpent) => {
                    return crate::proof::answer::refused(sku.as_str(), ProofError::Spent);
                }
                Ok(Joined::Member { member, created }) => {
                    if created {
                        defences::count(ctx, env, flight);
                    }
                    room.answer(Some(receipt_of(&member)), true).await
                }
                Err(e) => Err(e),
            }
        }
        QueueAction::Poll => {
            let receipt = header(req, RECEIPT_HEADER)
                .and_then(|t| Receipt::verify(ring, sku.as_str(), user.as_str(), &t).ok());
            room.answer(receipt, false).await
        }
    };
    match answered {
        Ok(Some(answer)) => answer.reply(),
        Ok(None) => answer::not_in_queue(),
        Err(e) => {
            worker::console_warn!("waiting room unavailable: {e}");
            answer::unavailable()
        }
    }
}

/// Why a purchase of a SKU with a waiting room may not be new work.
#[derive(Debug)]
pub(crate) enum PassRefusal {
    /// No valid pass (`403 not_admitted`, with where the shopper stands: [`not_admitted`]).
    NotAdmitted(PassError),
    /// `ROOM_SECRETS` missing: `503`, fail closed.
    Unconfigured,
}

/// The pass check of a purchase of a SKU whose facts (room known) show a waiting room, without
/// I/O: `None` when it may go on (no room, or a valid pass).
pub(crate) fn pass_refusal(
    req: &Request,
    settings: &Settings,
    sku: &Sku,
    user: &UserId,
    facts: &SkuFacts,
) -> Option<PassRefusal> {
    RoomConfig::of(facts)?;
    let Some(ring) = &settings.room_secrets else {
        worker::console_error!("a waiting room is set but ROOM_SECRETS is not: failing closed");
        return Some(PassRefusal::Unconfigured);
    };
    Pass::check(
        ring,
        sku.as_str(),
        user.as_str(),
        header(req, PASS_HEADER).as_deref(),
        now_ms(),
    )
    .err()
    .map(PassRefusal::NotAdmitted)
}

/// The answer to a purchase [`pass_refusal`] refused: `403 not_admitted` with where the shopper
/// stands (from their receipt, or their shard), or `503`.
pub(crate) async fn not_admitted(
    req: &Request,
    env: &Env,
    settings: &Settings,
    sku: &Sku,
    user: &UserId,
    facts: &SkuFacts,
    refusal: PassRefusal,
) -> Reply {
    let (PassRefusal::NotAdmitted(refused), Some(config), Some(ring)) = (
        refusal,
        RoomConfig::of(facts),
        settings.room_secrets.as_ref(),
    ) else {
        return answer::unavailable();
    };
    let room = Room {
        env,
        ring,
        sku,
        user,
        config,
        base: base_url(req),
        facts_ttl_secs: settings.sku_facts_ttl_secs,
    };
    let receipt = header(req, RECEIPT_HEADER)
        .and_then(|t| Receipt::verify(ring, sku.as_str(), user.as_str(), &t).ok());
    let (position, retry) = match room.answer(receipt, false).await {
        Ok(Some(a)) => (Some(a.position), a.retry_after_secs),
        Ok(None) => (None, 1),
        Err(e) => {
            worker::console_warn!("waiting room unavailable for a refused pass: {e}");
            (None, answer::UNAVAILABLE_RETRY_AFTER_SECS)
        }
    };
    answer::not_admitted(
        &format!(
            "{refused}; this sale has a waiting room: join it with POST /v1/queue/{sku} and buy with the pass it gives"
        ),
        position,
        retry,
    )
}

/// After a purchase of a SKU with a waiting room bought: tells the shopper's shard that their
/// pass is used, so its slot in the overbook frees (`remaining × overbook` counts passes neither
/// used nor expired). In the background (`wait_until`): the answer does not wait for it; if it
/// fails, the pass counts until it expires, which only admits fewer.
pub(crate) fn pass_used(ctx: &Context, env: &Env, sku: &Sku, user: &UserId, facts: &SkuFacts) {
    if RoomConfig::of(facts).is_none() {
        return;
    }
    let (env, sku, user) = (env.clone(), sku.clone(), user.to_string());
    ctx.wait_until(async move {
        let input = MemberRequest {
            shard: shard_of(&user),
            user,
            ticket: None,
            starts_ms: None,
            proof: None,
        };
        if let Err(e) = RoomClient::new(&env, sku.as_str()).used(&input).await {
            worker::console_warn!("room: marking a pass used failed: {e}");
        }
    });
}

/// `GET /v1/queue/{sku}/stats` with the admin bearer token.
pub(crate) async fn stats(req: &Request, env: &Env, settings: &Settings, raw_sku: &str) -> Reply {
    if !warmup::authorized(
        header(req, "authorization").as_deref(),
        &settings.admin_tokens,
    ) {
        return warmup::unauthorized();
    }
    let Ok(sku) = Sku::parse(raw_sku) else {
        return Reply::problem(
            ErrorCode::InvalidRequest,
            shared::DomainError::InvalidSku.to_string(),
        );
    };
    match RoomClient::new(env, sku.as_str()).stats().await {
        Ok(stats) => Reply::json(200, stats).with_header("cache-control", "no-store"),
        Err(e) => {
            worker::console_warn!("room stats: {e}");
            answer::unavailable()
        }
    }
}
