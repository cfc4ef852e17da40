//! The messages between the fetch handler and a user's Durable Object (JSON over the stub's
//! `fetch`). A purchase attempt makes at most two calls: `begin` (rate limit, idempotency lookup,
//! shields, claim the key) and, if the origin was asked, `finish` (store or release the key). An
//! order request (`crate::orders`) makes `limit` (its own rate-limit bucket) and, after a
//! cancellation the origin confirmed, `returned` (the units go back to the user's count).

use serde::{Deserialize, Serialize};

use crate::shield::SkuFacts;

/// Path of the `begin` call on the Durable Object.
pub const BEGIN_PATH: &str = "/begin";
/// Path of the `finish` call on the Durable Object.
pub const FINISH_PATH: &str = "/finish";
/// Path of the `limit` call on the Durable Object.
pub const LIMIT_PATH: &str = "/limit";
/// Path of the `returned` call on the Durable Object.
pub const RETURNED_PATH: &str = "/returned";

/// The rate-limit policy, as configured on the worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RateSettings {
    pub name: String,
    pub quota: u32,
    pub window_secs: u32,
}

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
}

/// The answer to `begin`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BeginReply {
    pub rate: RateOutcome,
    pub verdict: Verdict,
}

/// `finish`: the origin answered `status`/`body` to attempt `attempt` (or could not be had, in
/// which case the status is 503 and the key is released).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinishRequest {
    pub key: String,
    pub attempt: i64,
    pub sku: String,
    pub qty: u32,
    pub status: u16,
    pub body: String,
}

/// The answer to `finish`.
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
