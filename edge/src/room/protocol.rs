//! Messages between the worker, the room's shard objects and its coordinator object (JSON over
//! the Durable Object `fetch`). Shards: [`JOIN_PATH`], [`MEMBER_PATH`], [`PULL_PATH`]; the
//! coordinator: [`STATE_PATH`]; both: [`STATS_PATH`].

use serde::{Deserialize, Serialize};

use super::admission::RoomConfig;
use super::order::Head;

pub const JOIN_PATH: &str = "/join";
pub const MEMBER_PATH: &str = "/member";
pub const PULL_PATH: &str = "/pull";
pub const STATE_PATH: &str = "/state";
pub const STATS_PATH: &str = "/stats";

/// Worker → shard: `user` joins (kept as it is if already there).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JoinRequest {
    pub shard: u32,
    pub user: String,
    pub ticket: u64,
    pub starts_ms: Option<i64>,
}

/// Worker → shard: where is `user`?
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemberRequest {
    pub shard: u32,
    pub user: String,
    pub starts_ms: Option<i64>,
}

/// A member as its shard knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub shard: u32,
    pub rank: Option<u64>,
    pub join_ms: i64,
    pub pre: bool,
    pub admitted_ms: Option<i64>,
}

/// Shard → worker: the member (none: never joined).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemberReply {
    pub member: Option<Member>,
}

/// Coordinator → shard, once per tick: record these admissions (rank, instant), then list the
/// next members from `from_rank` (at most `limit`; post-start ones only if they joined before
/// `horizon_ms`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PullRequest {
    pub shard: u32,
    pub starts_ms: Option<i64>,
    pub admissions: Vec<(u64, i64)>,
    pub from_rank: u64,
    pub limit: usize,
    pub horizon_ms: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PullReply {
    pub heads: Vec<Head>,
    pub joined: u64,
    pub pre_joined: u64,
}

/// Worker → coordinator: the room's state (and its setting, which the coordinator keeps).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StateRequest {
    pub sku: String,
    pub config: RoomConfig,
}

/// One object's request counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(utoipa::ToSchema))]
pub struct ObjectStats {
    pub name: String,
    pub requests: u64,
    pub peak_requests_per_sec: u64,
}

/// `GET /v1/queue/{sku}/stats`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(utoipa::ToSchema))]
pub struct RoomStats {
    pub joined: u64,
    pub admitted: u64,
    pub admit_per_minute: u32,
    pub measured_per_minute: u32,
    pub started: bool,
    pub objects: Vec<ObjectStats>,
}

/// Requests per second of one object: the current second's count and the peak.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestMeter {
    pub requests: u64,
    pub second: i64,
    pub in_second: u64,
    pub peak: u64,
}

impl RequestMeter {
    /// Counts one request at `now_ms`.
    pub fn count(&mut self, now_ms: i64) {
        let second = now_ms.div_euclid(1_000);
        if second != self.second {
            self.second = second;
            self.in_second = 0;
        }
        self.requests += 1;
        self.in_second += 1;
        self.peak = self.peak.max(self.in_second);
    }

    pub fn stats(&self, name: &str) -> ObjectStats {
        ObjectStats {
            name: name.to_owned(),
            requests: self.requests,
            peak_requests_per_sec: self.peak,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_meter_keeps_the_peak_second() {
        let mut m = RequestMeter::default();
        for ms in [0, 10, 999, 1_000, 2_500, 2_501, 2_502, 2_999] {
            m.count(ms);
        }
        assert_eq!((m.requests, m.peak), (8, 4));
        assert_eq!(m.stats("x").peak_requests_per_sec, 4);
    }
}
