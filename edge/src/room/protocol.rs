//! Messages between the worker, the room's shard objects and its coordinator object (JSON over
//! the Durable Object `fetch`). Shards: [`JOIN_PATH`], [`MEMBER_PATH`], [`PULL_PATH`]; the
//! coordinator: [`STATE_PATH`]; both: [`STATS_PATH`].

use serde::{Deserialize, Serialize};

pub const JOIN_PATH: &str = "/join";
pub const MEMBER_PATH: &str = "/member";
pub const PULL_PATH: &str = "/pull";
pub const STATE_PATH: &str = "/state";
pub const STATS_PATH: &str = "/stats";

/// Worker → shard: `user` joins with `ticket` (kept as it is if already there), or, without a
/// ticket, where is `user`? The answer is an `Option<Member>` (none: never joined).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemberRequest {
    pub shard: u32,
    pub user: String,
    pub ticket: Option<u64>,
    pub starts_ms: Option<i64>,
}

/// A member as its shard knows it; on the wire as [`Member::encode`] (`-`: never joined).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Member {
    pub shard: u32,
    pub rank: Option<u64>,
    pub join_ms: i64,
    pub pre: bool,
    pub admitted_ms: Option<i64>,
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

impl Member {
    /// `shard;rank|-;join_ms;pre;admitted_ms|-`, or `-` for none.
    pub fn encode(member: Option<&Self>) -> String {
        member.map_or_else(
            || "-".to_owned(),
            |m| {
                format!(
                    "{};{};{};{};{}",
                    m.shard,
                    opt(m.rank),
                    m.join_ms,
                    u8::from(m.pre),
                    opt(m.admitted_ms)
                )
            },
        )
    }

    /// `None`: not a member's text; `Some(None)`: never joined.
    pub fn decode(text: &str) -> Option<Option<Self>> {
        if text == "-" {
            return Some(None);
        }
        let f: Vec<&str> = text.split(';').collect();
        if f.len() != 5 {
            return None;
        }
        let opt = |s: &str| -> Option<Option<i64>> {
            if s == "-" {
                Some(None)
            } else {
                s.parse().ok().map(Some)
            }
        };
        Some(Some(Self {
            shard: f[0].parse().ok()?,
            rank: opt(f[1])?.and_then(|r| u64::try_from(r).ok()),
            join_ms: f[2].parse().ok()?,
            pre: f[3] == "1",
            admitted_ms: opt(f[4])?,
        }))
    }
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
    /// `super::order::Head::encode` of each.
    pub heads: Vec<String>,
    pub joined: u64,
    pub pre_joined: u64,
}

// Worker → coordinator (`STATE_PATH`): the room's state, with the room's setting (which the
// coordinator keeps) in the body as `sku\n` + `RoomConfig::encode`; the answer is
// `RoomState::encode` (compact text, no serde).

/// One object's request counters.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(not(target_arch = "wasm32"), derive(utoipa::ToSchema))]
pub struct ObjectStats {
    pub name: String,
    pub requests: u64,
    pub peak_requests_per_sec: u64,
}

/// `GET /v1/queue/{sku}/stats` (built by the coordinator, passed on as text by the worker).
#[derive(Debug, Clone, Default, Serialize)]
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
    fn members_round_trip_as_text() {
        let m = Member {
            shard: 3,
            rank: None,
            join_ms: 1_796_119_200_000,
            pre: true,
            admitted_ms: None,
        };
        assert_eq!(Member::decode(&Member::encode(Some(&m))), Some(Some(m)));
        let m = Member {
            rank: Some(7),
            admitted_ms: Some(5),
            pre: false,
            ..m
        };
        assert_eq!(Member::decode(&Member::encode(Some(&m))), Some(Some(m)));
        assert_eq!(Member::decode(&Member::encode(None)), Some(None));
        assert_eq!(Member::decode("1;2"), None);
    }

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
