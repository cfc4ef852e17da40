//! The messages between the fetch handler and a user's Durable Object (JSON over the stub's
//! `fetch`). A purchase attempt makes **one** call, `purchase` ([`PurchaseRequest`]): inside it the
//! object runs `begin` (idempotency lookup first, then — for new work only — the worker's verdict
//! on its checks, the proof, the rate limit, the shields, claim the key; no `.await` before the
//! key is claimed), then, for a claimed attempt, sends the worker's signed call to the
//! origin itself and runs `finish` with the answer (store it, release the key or leave the key in
//! doubt), and hands back the verdict and the origin's answer ([`PurchaseReply`]). [`BeginRequest`] / [`FinishRequest`]
//! are the inputs of those two steps (`crate::gate`). An order request (`crate::orders`) makes
//! `limit` (its own rate-limit bucket) and, after a cancellation the origin confirmed, `returned`
//! (the units go back to the user's count).

use serde::{Deserialize, Serialize};

use crate::forward::Forwarded;
use crate::shield::SkuFacts;

/// Path of the `purchase` call on the Durable Object.
pub const PURCHASE_PATH: &str = "/purchase";
/// Path of the `limit` call on the Durable Object.
pub const LIMIT_PATH: &str = "/limit";
/// Path of the `returned` call on the Durable Object.
pub const RETURNED_PATH: &str = "/returned";

/// The rate-limit policy, as configured on the worker.
pub use crate::config::RateSettings;

/// `begin`: may this attempt go to the origin?
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeginRequest {
    /// The decoded Idempotency-Key.
    pub key: String,
    pub fingerprint: String,
    pub sku: String,
    pub qty: u32,
    /// What this data center knows about the SKU (sold-out bound, cap).
    pub facts: SkuFacts,
    pub rate: RateSettings,
    pub in_flight_timeout_ms: i64,
    /// How long the origin's confirmation of the user's count of the SKU holds for the cap
    /// pre-check (`SKU_CACHE_TTL_SECS`; see `crate::gate::counted_units`).
    #[serde(default = "default_count_ttl_ms")]
    pub count_ttl_ms: i64,
    /// `SCHEDULE_CLOCK_MARGIN_MS`: the object answers `sale_ended` from `facts` only past the
    /// end plus this margin (`crate::schedule`).
    #[serde(default = "default_schedule_margin_ms")]
    pub schedule_margin_ms: i64,
    /// The proof of work this attempt carries, verified by the worker (`crate::proof::check`):
    /// the object spends it, once, before anything else (`crate::gate::begin`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<crate::proof::Spend>,
    /// A check of the worker that guards only new work refused this attempt (the waiting room's
    /// pass, `not_started` / `sale_paused`, the proof's format or binding, the network's bound,
    /// the sale's defences unknown): the object answers a key already decided, in flight or
    /// reused as usual, and anything else with [`Verdict::Refused`], changing nothing
    /// (`crate::gate::begin`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub new_work_refused: bool,
}

fn default_schedule_margin_ms() -> i64 {
    i64::from(crate::config::defaults::SCHEDULE_CLOCK_MARGIN_MS)
}

fn default_count_ttl_ms() -> i64 {
    i64::from(crate::config::defaults::SKU_CACHE_TTL_SECS) * 1_000
}

/// The rate-limit part of a `begin` answer, for the `RateLimit` headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RateOutcome {
    Allowed { remaining: u32, reset_secs: u64 },
    Limited { retry_after_secs: u64 },
}

/// What the Durable Object decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Verdict {
    /// Over the rate limit; nothing else was looked at or changed.
    Limited,
    /// The key is claimed for this attempt: ask the origin, then `finish` with `attempt`.
    Proceed { attempt: i64 },
    /// The same request was already decided: replay this.
    Replay { status: u16, body: String },
    /// The same request is still being decided.
    InFlight,
    /// The key was used for a different request.
    Reused,
    /// A shield answered (sale ended / sold out / purchase limit). Not stored with the key: only the origin's
    /// decisions are (see `crate::gate`).
    Answered { status: u16, body: String },
    /// The attempt's proof of work was spent before (`403 proof_rejected`); nothing else was
    /// looked at or changed.
    ProofSpent,
    /// New work (the key is not decided, in flight or reused) that a check of the worker refused
    /// (`BeginRequest::new_work_refused`): the worker answers its refusal; nothing was charged,
    /// spent or changed.
    Refused,
}

/// The outcome of `begin`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeginReply {
    pub rate: RateOutcome,
    pub verdict: Verdict,
}

/// The origin call of a purchase, signed by the worker ([`crate::forward::origin_headers`]); the
/// Durable Object sends it only for an attempt whose key it claimed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OriginCall {
    /// `ORIGIN_URL` + `/v1/purchases`.
    pub url: String,
    pub headers: Vec<(String, String)>,
    /// The canonical `{"sku":…,"qty":…}` that was signed.
    pub body: String,
    /// `ORIGIN_TIMEOUT_MS`: past it, the attempt is answered 503 and its key left in doubt.
    pub timeout_ms: u32,
}

/// `purchase`: `begin`, and for a claimed attempt the origin call and `finish`, in one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurchaseRequest {
    pub begin: BeginRequest,
    pub origin: OriginCall,
}

/// The answer to `purchase`: `begin`'s verdict, and for [`Verdict::Proceed`] what the origin
/// answered (`forwarded`, absent otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PurchaseReply {
    pub rate: RateOutcome,
    pub verdict: Verdict,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forwarded: Option<Forwarded>,
}

/// `finish`: the origin answered `status`/`body` to attempt `attempt` (or could not be had, in
/// which case the status is 503 and the key is left in doubt: retried as that attempt).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishRequest {
    pub key: String,
    pub attempt: i64,
    pub sku: String,
    pub qty: u32,
    pub status: u16,
    pub body: String,
    /// The id of the proof of work the attempt spent, kept with a key left in doubt (a 503):
    /// its retry may show it again (`crate::idempotency::State::InDoubt`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proof: Option<String>,
}

/// The outcome of `finish`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishReply {
    /// Whether the answer is now stored with the key (false: released, or superseded).
    pub stored: bool,
}

/// `limit`: may this request of another bucket than purchases (`rate.name`) proceed? Answered
/// with a [`RateOutcome`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitRequest {
    pub rate: RateSettings,
}

/// `returned`: the origin confirmed that `order_id` was cancelled, giving back `qty` units of
/// `sku`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReturnedRequest {
    pub order_id: String,
    pub sku: String,
    pub qty: u32,
}

/// The answer to `returned`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReturnedReply {
    /// Whether the units were taken off the user's count now (false: this order was already
    /// returned).
    pub applied: bool,
}
