//! The waiting room's Durable Objects (`crate::room` decides; this stores and moves bytes):
//!
//! - `RoomShard` (SQLite-backed, [`SHARD_BINDING`], one of `room::SHARDS` per SKU, named
//!   `{sku}#{i}`): a shard of the room's members. `join` stores a member once (join instant,
//!   sequence, lottery ticket), `member` looks one up, `pull` (the coordinator's, once per tick)
//!   records admissions, lists the next members and counts the passes outstanding, `used` marks a
//!   pass used by a purchase. Ranks: at the start, the pre-queue members
//!   are ranked by ticket; later joiners get the next rank as they join.
//! - `RoomCoordinator` ([`COORDINATOR_BINDING`], one per SKU, named by the SKU): runs the room's
//!   tick from its alarm every `TICK_MS` while the room is in use, and answers `state` (the
//!   workers cache it for a second, so it is asked about once per second per data center).
//!
//! Each object counts the requests it serves per second and keeps the peak
//! (`GET /v1/queue/{sku}/stats`). The counters live in memory: an evicted object starts again.
//!
//! This file is how the worker and the coordinator reach them ([`RoomClient`]: compact text over
//! the objects' `fetch`); the objects are `shard`'s and `coordinator`'s.

mod coordinator;
mod shard;

use worker::wasm_bindgen::JsValue;
use worker::{Env, Error, Method, Request, RequestInit, Stub};

use crate::room::protocol::{
    JOIN_PATH, Joined, MEMBER_PATH, Member, MemberRequest, ObjectStats, PLACE_PATH, PULL_PATH,
    PullReply, PullRequest, STATE_PATH, STATS_PATH, USED_PATH, encode_places,
};

pub(crate) const SHARD_BINDING: &str = "ROOM_SHARD";
pub(crate) const COORDINATOR_BINDING: &str = "ROOM_COORDINATOR";
/// The coordinator stops ticking this long after the last state request and the last admission.
const IDLE_MS: i64 = 15_000;

fn shard_name(sku: &str, shard: u32) -> String {
    format!("{sku}#{shard}")
}

async fn call_text(stub: &Stub, path: &str, body: String) -> worker::Result<String> {
    let mut init = RequestInit::new();
    init.with_method(Method::Post)
        .with_body(Some(JsValue::from_str(&body)));
    let request = Request::new_with_init(&format!("https://room.internal{path}"), &init)?;
    let mut response = stub.fetch_with_request(request).await?;
    if response.status_code() != 200 {
        return Err(Error::RustError(format!(
            "room object {path} answered {}",
            response.status_code()
        )));
    }
    response.text().await
}

fn member_reply(text: &str) -> worker::Result<Option<Member>> {
    Member::decode(text).ok_or_else(|| Error::RustError("a shard's member does not parse".into()))
}

/// A request's body, parsed by `decode` (every message between the room's objects is compact
/// text: `crate::room::protocol`).
async fn body<T>(req: &mut Request, decode: impl Fn(&str) -> Option<T>) -> Option<T> {
    decode(&req.text().await.ok()?)
}

/// The worker's (and the coordinator's) handle on a room's objects.
pub(crate) struct RoomClient<'a> {
    env: &'a Env,
    sku: &'a str,
}

impl<'a> RoomClient<'a> {
    pub(crate) fn new(env: &'a Env, sku: &'a str) -> Self {
        Self { env, sku }
    }

    fn shard(&self, shard: u32) -> worker::Result<Stub> {
        self.env
            .durable_object(SHARD_BINDING)?
            .get_by_name(&shard_name(self.sku, shard))
    }

    fn coordinator(&self) -> worker::Result<Stub> {
        self.env
            .durable_object(COORDINATOR_BINDING)?
            .get_by_name(self.sku)
    }

    pub(crate) async fn join(&self, input: &MemberRequest) -> worker::Result<Joined> {
        let text = call_text(&self.shard(input.shard)?, JOIN_PATH, input.encode()).await?;
        Joined::decode(&text)
            .ok_or_else(|| Error::RustError("a shard's join does not parse".into()))
    }

    pub(crate) async fn member(&self, input: &MemberRequest) -> worker::Result<Option<Member>> {
        let reply = member_reply(
            &call_text(&self.shard(input.shard)?, MEMBER_PATH, input.encode()).await?,
        )?;
        Ok(reply)
    }

    /// Tells a shard the places of its newly settled members (`rank`, place).
    async fn place(&self, shard: u32, places: &[(u64, u64)]) -> worker::Result<()> {
        call_text(&self.shard(shard)?, PLACE_PATH, encode_places(places)).await?;
        Ok(())
    }

    /// Marks the member's pass used by a purchase: its slot in the overbook frees.
    pub(crate) async fn used(&self, input: &MemberRequest) -> worker::Result<()> {
        call_text(&self.shard(input.shard)?, USED_PATH, input.encode()).await?;
        Ok(())
    }

    /// The room's state as [`RoomState::encode`] text.
    /// `input`: `sku\n` + [`RoomConfig::encode`].
    pub(crate) async fn state(&self, input: String) -> worker::Result<String> {
        call_text(&self.coordinator()?, STATE_PATH, input).await
    }

    /// The coordinator's stats, as JSON text (passed on as it is).
    pub(crate) async fn stats(&self) -> worker::Result<String> {
        call_text(&self.coordinator()?, STATS_PATH, "{}".into()).await
    }

    async fn pull(&self, input: &PullRequest) -> worker::Result<PullReply> {
        let text = call_text(&self.shard(input.shard)?, PULL_PATH, input.encode()).await?;
        PullReply::decode(&text)
            .ok_or_else(|| Error::RustError("a shard's pull does not parse".into()))
    }

    async fn shard_stats(&self, shard: u32) -> worker::Result<ObjectStats> {
        let text = call_text(&self.shard(shard)?, STATS_PATH, String::new()).await?;
        let (requests, peak) = text.split_once(';').unwrap_or(("0", "0"));
        Ok(ObjectStats {
            name: String::new(),
            requests: requests.parse().unwrap_or(0),
            peak_requests_per_sec: peak.parse().unwrap_or(0),
        })
    }
}
